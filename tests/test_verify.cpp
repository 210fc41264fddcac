// check_gemm: every method (sequential reference, blocked OpenBLAS reference, Freivalds), forced
// through the library-private option, passes correct results and fails planted errors: one element
// just over tolerance and one large, a row, a column, a block, NaN and infinities out of place.
#include "core/verify_methods.hpp"
#include "test_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/verify.hpp>

#include <cmath>
#include <limits>
#include <vector>

namespace tilestream {
namespace {

using testing::run_cli;
using testing::temp_dir;

/// One GEMM problem with its computed C, the input C0 and the float64 oracle.
template <class T>
struct problem {
    op op_a = op::n, op_b = op::n;
    T alpha = 1, beta = 0;
    host_matrix<T> a, b, c0, c;
    host_matrix<double> ref;
    index_t m = 0, n = 0, k = 0;

    double ref_norm() const {
        double s = 0;
        for (index_t i = 0; i < m; ++i)
            for (index_t j = 0; j < n; ++j) s += ref(i, j) * ref(i, j);
        return std::sqrt(s);
    }
};

/// Random operands; A stored in la, B in lb, C in lc; C computed by the library on the CPU device.
template <class T>
problem<T> make_problem(index_t m, index_t n, index_t k, op op_a, op op_b, T alpha, T beta, layout la = layout::row_major,
                        layout lb = layout::row_major, layout lc = layout::row_major, std::uint64_t seed = 1) {
    problem<T> p;
    p.op_a = op_a, p.op_b = op_b, p.alpha = alpha, p.beta = beta, p.m = m, p.n = n, p.k = k;
    p.a = op_a == op::n ? host_matrix<T>(m, k, la) : host_matrix<T>(k, m, la);
    p.b = op_b == op::n ? host_matrix<T>(k, n, lb) : host_matrix<T>(n, k, lb);
    p.c0 = host_matrix<T>(m, n, lc);
    p.c = host_matrix<T>(m, n, lc);
    fill_random(p.a.view(), seed);
    fill_random(p.b.view(), seed + 1);
    fill_random(p.c0.view(), seed + 2);
    return p;
}

/// C = alpha op(A) op(B) + beta C0 by the library (C poisoned first when beta == 0), and the oracle.
template <class T>
void compute(problem<T>& p) {
    static auto devs = open_devices("cpu");
    if (p.beta != T(0))
        for (index_t i = 0; i < p.m; ++i)
            for (index_t j = 0; j < p.n; ++j) p.c(i, j) = p.c0(i, j);
    else
        fill_nan(p.c.view());
    gemm<T>(*devs.front(), p.op_a, p.op_b, p.alpha, p.a.view(), p.b.view(), p.beta, p.c.view());
    host_matrix<double> ad(p.a.rows(), p.a.cols()), bd(p.b.rows(), p.b.cols());
    for (index_t i = 0; i < p.a.rows(); ++i)
        for (index_t j = 0; j < p.a.cols(); ++j) ad(i, j) = p.a(i, j);
    for (index_t i = 0; i < p.b.rows(); ++i)
        for (index_t j = 0; j < p.b.cols(); ++j) bd(i, j) = p.b(i, j);
    p.ref = host_matrix<double>(p.m, p.n);
    for (index_t i = 0; i < p.m; ++i)
        for (index_t j = 0; j < p.n; ++j) p.ref(i, j) = p.c0(i, j);
    reference_gemm<double>(p.op_a, p.op_b, double(p.alpha), ad.view(), bd.view(), double(p.beta), p.ref.view());
}

/// The check with a forced method; the blocked reference gets a tiny workspace (64 x 64 blocks)
/// and two threads, so its blocking and merging are exercised on small problems.
template <class T>
gemm_check_result check(const problem<T>& p, gemm_check_method method) {
    detail::gemm_check_options opt;
    opt.method = method;
    opt.workspace_bytes = 1;
    opt.threads = 2;
    return detail::check_gemm_with<T>(opt, p.op_a, p.op_b, p.alpha, p.a.view(), p.b.view(), p.beta, p.c0.view(),
                                      p.c.view());
}

template <class T>
double tolerance(const problem<T>& p, gemm_check_method method) {
    return gemm_check_tolerance(method, dtype_of<T>(), p.n, p.k);
}

class gemm_check_method_test : public ::testing::TestWithParam<gemm_check_method> {};

template <class T>
void correct_results_pass(gemm_check_method method) {
    struct shape {
        index_t m, n, k;
    };
    const shape shapes[] = {{67, 53, 41}, {150, 131, 300}, {1, 37, 5}, {45, 1, 60}, {30, 20, 1}};
    const std::pair<T, T> scalars[] = {{T(1), T(0)}, {T(0.5), T(2)}, {T(-1.5), T(-1)}, {T(0), T(2)}};
    std::uint64_t seed = 10;
    for (const auto& s : shapes)
        for (op oa : {op::n, op::t})
            for (op ob : {op::n, op::t})
                for (layout l : {layout::row_major, layout::col_major})
                    for (const auto& [alpha, beta] : scalars) {
                        const layout other = l == layout::row_major ? layout::col_major : layout::row_major;
                        auto p = make_problem<T>(s.m, s.n, s.k, oa, ob, alpha, beta, l, other, l, seed++);
                        compute(p);
                        ASSERT_GT(p.ref_norm(), 0.0);
                        const auto r = check(p, method);
                        SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k << " op " << to_string(oa)
                                                          << to_string(ob) << " " << to_string(l) << " alpha "
                                                          << alpha << " beta " << beta);
                        EXPECT_EQ(r.method, method);
                        EXPECT_TRUE(r.passed()) << r.summary();
                        EXPECT_EQ(r.nonfinite_matched, 0);
                        EXPECT_DOUBLE_EQ(r.tolerance, tolerance(p, method));
                        if (method != gemm_check_method::freivalds && dtype_of<T>() == dtype::f32) {
                            // The exact methods measure what the oracle measures.
                            const double oracle = gemm_relative_error<T>(oa, ob, alpha, p.a.view(), p.b.view(), beta,
                                                                         p.c0.view(), p.c.view());
                            EXPECT_NEAR(r.error, oracle, 1e-3 * oracle + 1e-12);
                        }
                    }
}

TEST_P(gemm_check_method_test, CorrectResultsPassF32) { correct_results_pass<float>(GetParam()); }
TEST_P(gemm_check_method_test, CorrectResultsPassF64) { correct_results_pass<double>(GetParam()); }

/// Problems the planted-error tests start from: odd shapes, a transpose, beta != 0, both layouts.
template <class T>
std::vector<problem<T>> base_problems() {
    std::vector<problem<T>> v;
    v.push_back(make_problem<T>(97, 83, 61, op::n, op::t, T(0.5), T(2), layout::col_major, layout::row_major,
                                layout::row_major, 31));
    v.push_back(make_problem<T>(131, 70, 290, op::t, op::n, T(1), T(0), layout::row_major, layout::col_major,
                                layout::col_major, 41));
    for (auto& p : v) compute(p);
    return v;
}

template <class T>
host_matrix<T> copy_matrix(const host_matrix<T>& x) {
    host_matrix<T> y(x.rows(), x.cols(), x.layout());
    std::copy(x.data(), x.data() + x.size(), y.data());
    return y;
}

template <class T>
problem<T> copy_of(const problem<T>& p) {
    return {p.op_a, p.op_b, p.alpha, p.beta, copy_matrix(p.a), copy_matrix(p.b), copy_matrix(p.c0),
            copy_matrix(p.c), copy_matrix(p.ref), p.m, p.n, p.k};
}

template <class T>
void planted_errors_fail(gemm_check_method method) {
    for (const auto& base : base_problems<T>()) {
        const double tol = tolerance(base, method), norm = base.ref_norm();
        const index_t m = base.m, n = base.n;
        auto fresh = [&] { return copy_of(base); };
        ASSERT_TRUE(check(fresh(), method).passed());

        {  // an error at half the tolerance passes: the check is not stricter than it says
            auto p = fresh();
            p.c(m / 3, n / 2) += T(0.5 * tol * norm);
            EXPECT_TRUE(check(p, method).passed()) << check(p, method).summary();
        }
        {  // one element just over the tolerance
            auto p = fresh();
            p.c(m / 3, n / 2) += T(1.25 * tol * norm);
            const auto r = check(p, method);
            EXPECT_FALSE(r.passed()) << r.summary();
            EXPECT_GT(r.error, tol);
        }
        {  // one element far off
            auto p = fresh();
            p.c(m - 1, 0) += T(1);
            EXPECT_FALSE(check(p, method).passed());
        }
        // A wrong row and a wrong column of random signs, ||E||_F just over the tolerance: Freivalds
        // sees a row error exactly through y^T C and a column error through C x.
        std::uint64_t s = 777;
        auto sign = [&s] {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            return (s >> 63) ? 1.0 : -1.0;
        };
        for (index_t row : {index_t(0), m / 2, m - 1}) {
            auto p = fresh();
            const double d = 1.25 * tol * norm / std::sqrt(double(n));
            for (index_t j = 0; j < n; ++j) p.c(row, j) += T(sign() * d);
            const auto r = check(p, method);
            EXPECT_FALSE(r.passed()) << "row " << row << ": " << r.summary();
        }
        for (index_t col : {index_t(0), n / 3, n - 1}) {
            auto p = fresh();
            const double d = 1.25 * tol * norm / std::sqrt(double(m));
            for (index_t i = 0; i < m; ++i) p.c(i, col) += T(sign() * d);
            const auto r = check(p, method);
            EXPECT_FALSE(r.passed()) << "column " << col << ": " << r.summary();
        }
        {  // a wrong row far off
            auto p = fresh();
            for (index_t j = 0; j < n; ++j) p.c(m / 2, j) += T(0.5);
            EXPECT_FALSE(check(p, method).passed());
        }
        {  // a wrong 5 x 7 block of random signs, ||E||_F = 4 tol ||ref||_F
            auto p = fresh();
            const double d = 4 * tol * norm / std::sqrt(35.0);
            for (index_t i = 10; i < 15; ++i)
                for (index_t j = 20; j < 27; ++j) p.c(i, j) += T(sign() * d);
            const auto r = check(p, method);
            EXPECT_FALSE(r.passed()) << r.summary();
        }
        {  // C all zero (never written)
            auto p = fresh();
            std::fill(p.c.data(), p.c.data() + p.c.size(), T(0));
            EXPECT_FALSE(check(p, method).passed());
        }
    }
}

TEST_P(gemm_check_method_test, PlantedErrorsFailF32) { planted_errors_fail<float>(GetParam()); }
TEST_P(gemm_check_method_test, PlantedErrorsFailF64) { planted_errors_fail<double>(GetParam()); }

template <class T>
void nonfinite_compared_by_position(gemm_check_method method) {
    const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
    const index_t m = 71, n = 45, k = 33;
    {  // NaN in C where the reference is finite
        auto p = make_problem<T>(m, n, k, op::n, op::n, T(1), T(0));
        compute(p);
        p.c(5, 7) = nan;
        const auto r = check(p, method);
        EXPECT_FALSE(r.passed());
        EXPECT_EQ(r.nonfinite_mismatched, 1);
        EXPECT_NE(r.first_mismatch.find("C(5, 7)"), std::string::npos) << r.first_mismatch;
        p.c(5, 7) = -inf;
        EXPECT_FALSE(check(p, method).passed());
    }
    {  // A holds a NaN: row 9 of C is NaN, as the reference's; then one element of it finite
        auto p = make_problem<T>(m, n, k, op::n, op::t, T(2), T(-1), layout::col_major, layout::row_major);
        p.a(9, 4) = nan;
        compute(p);
        auto r = check(p, method);
        EXPECT_TRUE(r.passed()) << r.summary();
        EXPECT_EQ(r.nonfinite_matched, n);
        EXPECT_NE(r.summary().find("NaN/Inf matched"), std::string::npos) << r.summary();
        p.c(9, 3) = T(1);
        r = check(p, method);
        EXPECT_FALSE(r.passed());
        EXPECT_EQ(r.nonfinite_mismatched, 1);
    }
    {  // B holds +inf: column 6 of C is +-inf by the signs of A's column; one sign flipped fails
        auto p = make_problem<T>(m, n, k, op::n, op::n, T(1), T(0), layout::row_major, layout::col_major);
        p.b(2, 6) = inf;
        compute(p);
        auto r = check(p, method);
        EXPECT_TRUE(r.passed()) << r.summary();
        EXPECT_EQ(r.nonfinite_matched, m);
        p.c(11, 6) = -p.c(11, 6);
        r = check(p, method);
        EXPECT_FALSE(r.passed());
        EXPECT_EQ(r.nonfinite_mismatched, 1);
    }
    {  // C0 holds -inf with beta != 0: that one element is -beta*inf
        auto p = make_problem<T>(m, n, k, op::t, op::n, T(1), T(3));
        p.c0(20, 30) = -inf;
        compute(p);
        auto r = check(p, method);
        EXPECT_TRUE(r.passed()) << r.summary();
        EXPECT_EQ(r.nonfinite_matched, 1);
        p.c(20, 30) = T(0);  // finite where the reference is -inf
        EXPECT_FALSE(check(p, method).passed());
    }
    {  // A holds a NaN but C stayed finite everywhere: the NaN row is missing
        auto p = make_problem<T>(m, n, k, op::n, op::n, T(1), T(0));
        compute(p);
        p.a(0, 0) = nan;
        const auto r = check(p, method);
        EXPECT_FALSE(r.passed());
        EXPECT_EQ(r.nonfinite_mismatched, n);
    }
    {  // alpha = 0 never reads A: a NaN there changes nothing
        auto p = make_problem<T>(m, n, k, op::n, op::n, T(0), T(2));
        p.a(3, 3) = nan;
        compute(p);
        const auto r = check(p, method);
        EXPECT_TRUE(r.passed()) << r.summary();
        EXPECT_EQ(r.nonfinite_matched, 0);
    }
}

TEST_P(gemm_check_method_test, NonFiniteComparedByPositionF32) { nonfinite_compared_by_position<float>(GetParam()); }
TEST_P(gemm_check_method_test, NonFiniteComparedByPositionF64) { nonfinite_compared_by_position<double>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(methods, gemm_check_method_test,
                         ::testing::Values(gemm_check_method::reference, gemm_check_method::blas,
                                           gemm_check_method::freivalds),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(gemm_check, ChoosesMethodBySize) {
    EXPECT_EQ(choose_gemm_check(100, 100, 100), gemm_check_method::reference);
    EXPECT_EQ(choose_gemm_check(161, 161, 161), gemm_check_method::reference);
    EXPECT_EQ(choose_gemm_check(3000, 3000, 3000), gemm_check_method::blas);
    EXPECT_EQ(choose_gemm_check(4096, 4096, 4096), gemm_check_method::blas);
    EXPECT_EQ(choose_gemm_check(4096, 4096, 4097), gemm_check_method::freivalds);
    EXPECT_GT(gemm_check_tolerance(gemm_check_method::freivalds, dtype::f64, 1000, 1000),
              gemm_check_tolerance(gemm_check_method::blas, dtype::f64, 1000, 1000));
}

TEST(gemm_check, ShapeMismatchNamesOperands) {
    host_matrix<float> a(10, 7), b(8, 5), c(10, 5);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    fill_random(c.view(), 3);
    EXPECT_THROW(check_gemm<float>(op::n, op::n, 1.f, a.view(), b.view(), 0.f, c.view(), c.view()), dimension_mismatch);
}

// ---- the CLI ----

TEST(cli_check, NanInAPassesAndSaysNanMatched) {
    temp_dir dir;
    host_matrix<float> a(40, 30), b(30, 20);
    fill_random(a.view(), 5);
    fill_random(b.view(), 6);
    a(7, 11) = std::numeric_limits<float>::quiet_NaN();
    write_npy<float>(dir.file("a.npy"), a.view());
    write_npy<float>(dir.file("b.npy"), b.view());
    auto r = run_cli("gemm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --check");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("20 NaN/Inf matched"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(": OK"), std::string::npos) << r.out;
}

TEST(cli_check, JsonNamesMethodAndTolerance) {
    auto r = run_cli("gemm --m 301 --n 257 --k 199 --beta 0.5 --op-b t --check --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"check_method\": \"blas\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"check_tolerance\": "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"check_passed\": true"), std::string::npos) << r.out;
}

TEST(cli_check, AnchorPrintsOpenBlasAndRatio) {
    auto r = run_cli("gemm --m 200 --n 150 --k 100 --dtype f64 --anchor --repeat 2");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("anchor: OpenBLAS cblas_dgemm on the host"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("this run / anchor = "), std::string::npos) << r.out;
    r = run_cli("gemm --m 200 --n 150 --k 100 --anchor --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"ratio_to_anchor\": "), std::string::npos) << r.out;
}

TEST(cli_check, JacobiCheckSaysWhatItCost) {
    auto r = run_cli("jacobi --nx 66 --ny 45 --iters 30 --devices cpu:2 --check --quiet");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("bitwise identical to a single-device run on cpu:0 (the rerun took "), std::string::npos)
        << r.out;
    r = run_cli("jacobi --nx 66 --ny 45 --iters 30 --devices cpu:2 --check --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"check_seconds\": "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tilestream
