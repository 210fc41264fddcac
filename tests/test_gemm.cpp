// One GEMM test body for every device backend, kernel, dtype, layout and op, compared with the
// sequential reference on random non-zero data with C poisoned before the run.
#include "test_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cmath>
#include <limits>
#include <tuple>

namespace tilestream {
namespace {

struct shape3 {
    index_t m, n, k;
};

using gemm_param = std::tuple<std::string /*device*/, gemm_kernel, dtype, int /*layouts bits*/, int /*ops bits*/>;

layout bit_layout(int bits, int which) { return (bits >> which) & 1 ? layout::col_major : layout::row_major; }

template <class T>
double norm(const host_matrix<T>& m) {
    double s = 0;
    for (index_t i = 0; i < m.rows(); ++i)
        for (index_t j = 0; j < m.cols(); ++j) s += double(m(i, j)) * double(m(i, j));
    return std::sqrt(s);
}

/// Runs C <- alpha op(A) op(B) + beta C on `dev` and on the reference; returns the relative error.
template <class T>
double run_case(device& dev, gemm_kernel kernel, shape3 s, layout la, layout lb, layout lc, op oa, op ob,
                T alpha, T beta, std::uint64_t seed) {
    const bool na = oa == op::n, nb = ob == op::n;
    host_matrix<T> a(na ? s.m : s.k, na ? s.k : s.m, la), b(nb ? s.k : s.n, nb ? s.n : s.k, lb);
    host_matrix<T> c(s.m, s.n, lc), c0(s.m, s.n, lc);
    fill_random(a.view(), seed);
    fill_random(b.view(), seed + 1);
    if (beta != T(0))
        fill_random(c0.view(), seed + 2);
    else
        fill_nan(c0.view());  // beta = 0 must overwrite NaN
    EXPECT_GT(norm(a), 0.0);
    EXPECT_GT(norm(b), 0.0);
    std::copy(c0.data(), c0.data() + s.m * s.n, c.data());

    host_matrix<double> ref(s.m, s.n);
    for (index_t i = 0; i < s.m; ++i)
        for (index_t j = 0; j < s.n; ++j) ref(i, j) = beta != T(0) ? double(c0(i, j)) : 0.0;
    host_matrix<double> ad(a.rows(), a.cols()), bd(b.rows(), b.cols());
    for (index_t i = 0; i < a.rows(); ++i)
        for (index_t j = 0; j < a.cols(); ++j) ad(i, j) = a(i, j);
    for (index_t i = 0; i < b.rows(); ++i)
        for (index_t j = 0; j < b.cols(); ++j) bd(i, j) = b(i, j);
    reference_gemm<double>(oa, ob, alpha, ad.view(), bd.view(), beta, ref.view());

    gemm_options opt;
    opt.kernel = kernel;
    gemm<T>(dev, oa, ob, alpha, a.view(), b.view(), beta, c.view(), opt);
    return relative_frobenius_error<T>(c.view(), ref.view());
}

class gemm_matches_reference : public ::testing::TestWithParam<gemm_param> {};

TEST_P(gemm_matches_reference, OddShapesAllOpsAndLayouts) {
    const auto& [spec, kernel, type, layouts, ops] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU(spec);
    auto devs = open_devices(spec);
    device& dev = *devs.front();
    if (!dev.supports(kernel)) GTEST_SKIP() << dev.id() << " has no " << to_string(kernel) << " kernel";
    const layout la = bit_layout(layouts, 0), lb = bit_layout(layouts, 1), lc = bit_layout(layouts, 2);
    const op oa = (ops & 1) ? op::t : op::n, ob = (ops & 2) ? op::t : op::n;
    const shape3 shapes[] = {{1, 1, 1}, {7, 13, 5}, {31, 1, 17}, {1, 29, 3}, {17, 19, 1}, {131, 67, 257}, {97, 211, 73}};
    std::uint64_t seed = 1000;
    for (const auto& s : shapes) {
        visit_real_dtype(type, "test", [&]<class T>() {
            for (auto [alpha, beta] : {std::pair{T(1), T(0)}, std::pair{T(-0.75), T(1.5)}}) {
                const double err = run_case<T>(dev, kernel, s, la, lb, lc, oa, ob, alpha, beta, seed++);
                EXPECT_LE(err, gemm_tolerance(type, s.k))
                    << to_string(kernel) << " " << s.m << "x" << s.n << "x" << s.k << " alpha=" << alpha
                    << " beta=" << beta;
            }
        });
    }
}

std::string param_name(const ::testing::TestParamInfo<gemm_param>& info) {
    const auto& [spec, kernel, type, layouts, ops] = info.param;
    std::string d = spec;
    for (auto& ch : d)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    std::string l, o;
    for (int w = 0; w < 3; ++w) l += (layouts >> w) & 1 ? 'C' : 'R';
    o += (ops & 1) ? 'T' : 'N';
    o += (ops & 2) ? 'T' : 'N';
    return d + "_" + std::string(to_string(kernel)) + "_" + std::string(to_string(type)) + "_" + l + "_" + o;
}

INSTANTIATE_TEST_SUITE_P(
    cpu, gemm_matches_reference,
    ::testing::Combine(::testing::Values(std::string("cpu")),
                       ::testing::Values(gemm_kernel::reference, gemm_kernel::naive, gemm_kernel::tiled,
                                         gemm_kernel::vendor),
                       ::testing::Values(dtype::f32, dtype::f64), ::testing::Range(0, 8), ::testing::Range(0, 4)),
    param_name);

INSTANTIATE_TEST_SUITE_P(
    cuda, gemm_matches_reference,
    ::testing::Combine(::testing::Values(std::string("cuda:0")),
                       ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor),
                       ::testing::Values(dtype::f32, dtype::f64), ::testing::Range(0, 8), ::testing::Range(0, 4)),
    param_name);

INSTANTIATE_TEST_SUITE_P(
    opencl, gemm_matches_reference,
    ::testing::Combine(::testing::Values(std::string("opencl:0")),
                       ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled),
                       ::testing::Values(dtype::f32, dtype::f64), ::testing::Range(0, 8), ::testing::Range(0, 4)),
    param_name);
// CLBlast compiles a program per layout and transpose pair on first use in each process (seconds
// on PoCL): RRR, CRC, RCR, CCC with NN and TT reach all eight (layout, op, op) calls it receives.
INSTANTIATE_TEST_SUITE_P(
    opencl_vendor, gemm_matches_reference,
    ::testing::Combine(::testing::Values(std::string("opencl:0")), ::testing::Values(gemm_kernel::vendor),
                       ::testing::Values(dtype::f32, dtype::f64), ::testing::Values(0, 5, 2, 7), ::testing::Values(0, 3)),
    param_name);

/// Larger than any cache block, with prime extents, per kernel and dtype.
class gemm_large_matches_reference
    : public ::testing::TestWithParam<std::tuple<std::string, gemm_kernel, dtype>> {};

TEST_P(gemm_large_matches_reference, PrimeShapes) {
    const auto& [spec, kernel, type] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU(spec);
    auto devs = open_devices(spec);
    if (!devs.front()->supports(kernel)) GTEST_SKIP() << "kernel not on this device";
    visit_real_dtype(type, "test", [&]<class T>() {
        const double err = run_case<T>(*devs.front(), kernel, {701, 509, 613}, layout::row_major,
                                       layout::col_major, layout::row_major, op::n, op::t, T(1.25), T(-0.5), 7);
        EXPECT_LE(err, gemm_tolerance(type, 613));
    });
}

INSTANTIATE_TEST_SUITE_P(cpu, gemm_large_matches_reference,
                         ::testing::Combine(::testing::Values(std::string("cpu"), std::string("cpu:3")),
                                            ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled,
                                                              gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64)));
INSTANTIATE_TEST_SUITE_P(cuda, gemm_large_matches_reference,
                         ::testing::Combine(::testing::Values(std::string("cuda:0")),
                                            ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled,
                                                              gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64)));

INSTANTIATE_TEST_SUITE_P(opencl, gemm_large_matches_reference,
                         ::testing::Combine(::testing::Values(std::string("opencl:0")),
                                            ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled,
                                                              gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64)));

/// BLAS edge cases that do not depend on the layout: scalars that must not read operands.
class gemm_blas_semantics : public ::testing::TestWithParam<std::tuple<std::string, gemm_kernel>> {};

TEST_P(gemm_blas_semantics, AlphaZeroNeverReadsAOrB) {
    const auto& [spec, kernel] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU(spec);
    auto devs = open_devices(spec);
    if (!devs.front()->supports(kernel)) GTEST_SKIP() << "kernel not on this device";
    host_matrix<double> a(9, 5), b(5, 7), c(9, 7);
    fill_nan(a.view());
    fill_nan(b.view());
    fill_random(c.view(), 3);
    host_matrix<double> c0 = host_matrix<double>(9, 7);
    std::copy(c.data(), c.data() + 63, c0.data());
    gemm_options opt;
    opt.kernel = kernel;
    gemm<double>(*devs.front(), op::n, op::n, 0.0, a.view(), b.view(), 2.0, c.view(), opt);
    for (index_t i = 0; i < 9; ++i)
        for (index_t j = 0; j < 7; ++j) EXPECT_EQ(c(i, j), 2.0 * c0(i, j));
    gemm<double>(*devs.front(), op::n, op::n, 0.0, a.view(), b.view(), 0.0, c.view(), opt);
    for (index_t i = 0; i < 9; ++i)
        for (index_t j = 0; j < 7; ++j) EXPECT_EQ(c(i, j), 0.0);
}

TEST_P(gemm_blas_semantics, BetaZeroOverwritesNaN) {
    const auto& [spec, kernel] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU(spec);
    auto devs = open_devices(spec);
    if (!devs.front()->supports(kernel)) GTEST_SKIP() << "kernel not on this device";
    host_matrix<float> a(3, 2), b(2, 4), c(3, 4);
    for (index_t i = 0; i < 3; ++i)
        for (index_t j = 0; j < 2; ++j) a(i, j) = float(i + 1) * float(j + 2);  // 1*2, 1*3, ...
    for (index_t i = 0; i < 2; ++i)
        for (index_t j = 0; j < 4; ++j) b(i, j) = float(j + 1) - float(i);
    fill_nan(c.view());
    gemm_options opt;
    opt.kernel = kernel;
    gemm<float>(*devs.front(), op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c.view(), opt);
    // Hand-checked: row i of A is (i+1)*(2, 3); column j of B is (j+1, j): C = (i+1)*(5j+2).
    for (index_t i = 0; i < 3; ++i)
        for (index_t j = 0; j < 4; ++j) EXPECT_EQ(c(i, j), float((i + 1) * (5 * j + 2)));
}

INSTANTIATE_TEST_SUITE_P(cpu, gemm_blas_semantics,
                         ::testing::Combine(::testing::Values(std::string("cpu")),
                                            ::testing::Values(gemm_kernel::reference, gemm_kernel::naive,
                                                              gemm_kernel::tiled, gemm_kernel::vendor)));
INSTANTIATE_TEST_SUITE_P(cuda, gemm_blas_semantics,
                         ::testing::Combine(::testing::Values(std::string("cuda:0")),
                                            ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled,
                                                              gemm_kernel::vendor)));

INSTANTIATE_TEST_SUITE_P(opencl, gemm_blas_semantics,
                         ::testing::Combine(::testing::Values(std::string("opencl:0")),
                                            ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled,
                                                              gemm_kernel::vendor)));

TEST(gemm_check, RelativeErrorFindsOneWrongElement) {
    host_matrix<float> a(37, 23, layout::col_major), b(29, 23), c0(37, 29), c(37, 29);
    fill_random(a.view(), 61);
    fill_random(b.view(), 62);
    fill_random(c0.view(), 63);
    std::copy(c0.data(), c0.data() + 37 * 29, c.data());
    auto devs = open_devices("cpu");
    gemm<float>(*devs.front(), op::n, op::t, 0.5f, a.view(), b.view(), 2.0f, c.view());
    const double good = gemm_relative_error<float>(op::n, op::t, 0.5f, a.view(), b.view(), 2.0f, c0.view(), c.view());
    EXPECT_LE(good, gemm_tolerance(dtype::f32, 23));
    c(17, 11) += 0.25f;
    const double bad = gemm_relative_error<float>(op::n, op::t, 0.5f, a.view(), b.view(), 2.0f, c0.view(), c.view());
    EXPECT_GT(bad, 100 * gemm_tolerance(dtype::f32, 23));
    c(17, 11) = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isinf(gemm_relative_error<float>(op::n, op::t, 0.5f, a.view(), b.view(), 2.0f, c0.view(), c.view())));
}

// ---- bad input ----

TEST(gemm_bad_input, InnerDimensionMismatchNamesShapes) {
    auto devs = open_devices("cpu");
    host_matrix<float> a(300, 257), b(256, 64), c(300, 64);
    try {
        gemm<float>(*devs.front(), op::n, op::n, 1.f, a.view(), b.view(), 0.f, c.view());
        FAIL() << "no error";
    } catch (const dimension_mismatch& e) {
        EXPECT_STREQ(e.what(), "gemm: inner dimensions differ: op(A) is 300x257, op(B) is 256x64");
    }
}

TEST(gemm_bad_input, OutputShapeMismatchNamesShapes) {
    auto devs = open_devices("cpu");
    host_matrix<float> a(10, 5), b(5, 21), c(10, 20);
    try {
        gemm<float>(*devs.front(), op::n, op::n, 1.f, a.view(), b.view(), 0.f, c.view());
        FAIL() << "no error";
    } catch (const dimension_mismatch& e) {
        EXPECT_STREQ(e.what(), "gemm: C is 10x20 but op(A)*op(B) is 10x21");
    }
}

TEST(gemm_bad_input, LeadingDimensionTooSmall) {
    std::vector<float> data(100, 1.f);
    try {
        host_matrix_view<float> v(data.data(), 10, 10, layout::row_major, 9);
        FAIL() << "no error";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("leading dimension 9 is too small"), std::string::npos) << e.what();
    }
}

TEST(gemm_bad_input, NegativeAndOverflowingSizes) {
    EXPECT_THROW(host_matrix_view<float>(nullptr, -1, 3), size_overflow);
    const index_t huge = index_t(1) << 40;
    try {
        checked_bytes(huge, huge, dtype::f64, "gemm: A");
        FAIL() << "no error";
    } catch (const size_overflow& e) {
        EXPECT_NE(std::string(e.what()).find("overflows 64 bits"), std::string::npos) << e.what();
    }
}

TEST(gemm_library, DefaultOptionsStreamWhatDoesNotFitTheBudget) {
    // The library call's default plan is automatic: a problem 3.7x the budget is streamed, not refused.
    open_options o;
    o.memory_budget = 64 * 1024;
    auto devs = open_devices("cpu", o);
    host_matrix<double> a(100, 110, layout::col_major), b(110, 90), c0(100, 90), c(100, 90);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    fill_random(c0.view(), 3);
    std::copy(c0.data(), c0.data() + c0.rows() * c0.cols(), c.data());
    const gemm_report rep = gemm<double>(*devs.front(), op::n, op::n, 1.5, a.view(), b.view(), -0.25, c.view());
    EXPECT_NE(rep.plan.strategy, gemm_strategy::in_core);
    EXPECT_LE(rep.peak_device_bytes, 64u * 1024);
    EXPECT_LE(gemm_relative_error<double>(op::n, op::n, 1.5, a.view(), b.view(), -0.25, c0.view(), c.view()),
              gemm_tolerance(dtype::f64, 110));
}

TEST(gemm_bad_input, BudgetTooSmallNamesDeviceRequestAndBudget) {
    open_options o;
    o.memory_budget = 64 * 1024;
    auto devs = open_devices("cpu", o);
    host_matrix<double> a(100, 100), b(100, 100), c(100, 100);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    gemm_options in_core;
    in_core.strategy = gemm_strategy::in_core;
    try {
        gemm<double>(*devs.front(), op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), in_core);
        FAIL() << "no error";
    } catch (const out_of_budget& e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("cpu:0"), std::string::npos) << w;
        EXPECT_NE(w.find("budget of 64.0 KiB (65536 bytes)"), std::string::npos) << w;
        EXPECT_NE(w.find("smallest budget that would is 234.4 KiB (240000 bytes"), std::string::npos) << w;
    }
    EXPECT_EQ(devs.front()->bytes_in_use(), 0u);
}

}  // namespace
}  // namespace tilestream
