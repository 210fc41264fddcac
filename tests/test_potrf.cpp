// Cholesky (potrf, potrs, posv) against LAPACK (OpenBLAS's ?potrf_) and the residual: random Hermitian
// positive definite matrices (complex with both parts non-zero), odd sizes and tiles that do not
// divide them, both triangles, both layouts, padded leading dimensions, every precision; the other
// triangle and the padding NaN, which must stay bitwise as they were; matrices that are not
// positive definite give LAPACK's info; in place on one and three CPU devices, out of core at small
// budgets, on OpenCL (PoCL), reproducible mode bitwise across devices and budgets, and a device
// fault in the middle of a factorization.
#include "test_support.hpp"

#include "core/fault_injection.hpp"
#include "core/lapack_calls.hpp"

#include <tilestream/context.hpp>
#include <tilestream/error.hpp>
#include <tilestream/trace.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tilestream {
namespace {

namespace fi = fault_injection;

template <class T>
T nan_of() {
    const real_type_t<T> nan = std::numeric_limits<real_type_t<T>>::quiet_NaN();
    if constexpr (is_complex_v<T>) return T(nan, nan);
    else return nan;
}

template <class T>
double abs2(T x) {
    if constexpr (is_complex_v<T>) return std::norm(std::complex<double>(x));
    else return double(x) * double(x);
}

bool in_triangle(uplo u, index_t i, index_t j) { return u == uplo::lower ? i >= j : i <= j; }

/// A Hermitian matrix in a padded buffer: the `u` triangle holds A = L D L^H (L unit lower with
/// small random entries, D in [1, 2], or D_bad = -0.5 at `bad` to make it indefinite there: the
/// first non-positive pivot is then at bad, info bad + 1), the other triangle and the padding NaN,
/// complex diagonals with a non-zero imaginary part (LAPACK never reads it).
template <class T>
struct spd_matrix {
    index_t n = 0, ld = 0;
    layout lay = layout::col_major;
    uplo u = uplo::lower;
    std::vector<T> data;
    host_matrix_view<T> view() { return host_matrix_view<T>(data.data(), n, n, lay, ld); }
    T& at(index_t i, index_t j) { return lay == layout::row_major ? data[std::size_t(i * ld + j)] : data[std::size_t(i + j * ld)]; }
};

template <class T>
spd_matrix<T> make_spd(index_t n, uplo u, layout lay, std::uint64_t seed, index_t bad = -1, index_t pad = 3) {
    using W = std::conditional_t<is_complex_v<T>, std::complex<double>, double>;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    const auto random = [&]() -> W {
        if constexpr (is_complex_v<T>) return W(uni(rng), uni(rng));
        else return W(uni(rng));
    };
    std::vector<W> l(std::size_t(n * n), W(0));
    std::vector<double> d(static_cast<std::size_t>(n));
    const double scale = 1.0 / std::sqrt(double(std::max<index_t>(n, 1)));
    for (index_t j = 0; j < n; ++j) {
        l[std::size_t(j + j * n)] = W(1);
        for (index_t i = j + 1; i < n; ++i) l[std::size_t(i + j * n)] = random() * scale;
        d[std::size_t(j)] = j == bad ? -0.5 : 1.5 + 0.5 * uni(rng);
    }
    spd_matrix<T> m;
    m.n = n;
    m.ld = n + pad;
    m.lay = lay;
    m.u = u;
    m.data.assign(std::size_t(m.ld * n), nan_of<T>());
    for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j) {
            if (!in_triangle(u, i, j)) continue;
            W v(0);  // (L D L^H)_ij
            for (index_t p = 0; p <= std::min(i, j); ++p) {
                W ljp = l[std::size_t(j + p * n)];
                if constexpr (is_complex_v<T>) ljp = std::conj(ljp);
                v += l[std::size_t(i + p * n)] * d[std::size_t(p)] * ljp;
            }
            if constexpr (is_complex_v<T>)
                if (i == j) v = W(v.real(), 0.25 + 0.5 * uni(rng));  // never read
            if constexpr (is_complex_v<T>) m.at(i, j) = T(real_type_t<T>(v.real()), real_type_t<T>(v.imag()));
            else m.at(i, j) = T(v);
        }
    return m;
}

/// LAPACK's factor of m (a column-major copy with the same triangle) and its info.
template <class T>
std::pair<std::vector<T>, int> lapack_factor(spd_matrix<T> m) {
    std::vector<T> col(std::size_t(m.n * m.n), nan_of<T>());
    for (index_t i = 0; i < m.n; ++i)
        for (index_t j = 0; j < m.n; ++j) col[std::size_t(i + j * m.n)] = m.at(i, j);
    const int info = detail::lapack_potrf<T>(m.u == uplo::lower ? 'L' : 'U', int(m.n), col.data(), int(std::max<index_t>(m.n, 1)));
    return {col, info};
}

/// Runs potrf on ctx and compares with LAPACK: info equal; when 0, the factor within
/// max(64, 8 n) u (relative Frobenius); the other triangle and the padding bitwise unchanged.
template <class T>
blas3_report check_potrf(context& ctx, index_t n, uplo u, layout lay, std::uint64_t seed, const blas3_call_options& call = {},
                         index_t bad = -1, std::vector<T>* result = nullptr) {
    const spd_matrix<T> input = make_spd<T>(n, u, lay, seed, bad);
    spd_matrix<T> m = input;
    const auto [ref, ref_info] = lapack_factor<T>(input);
    const std::string what = std::string(to_string(dtype_of<T>())) + " n=" + std::to_string(n) + " uplo=" +
                             std::string(to_string(u)) + (lay == layout::row_major ? " row-major" : " col-major") +
                             " tile=" + std::to_string(call.tile) + " order=" + std::string(to_string(call.order)) +
                             " on " + ctx.device_names();
    const blas3_report rep = ctx.potrf<T>(u, m.view(), call);
    EXPECT_EQ(rep.info, std::int64_t(ref_info)) << what;
    std::size_t changed = 0;
    for (std::size_t x = 0; x < m.data.size(); ++x) {
        const index_t outer = index_t(x) / m.ld, inner = index_t(x) % m.ld;
        const index_t i = lay == layout::row_major ? outer : inner, j = lay == layout::row_major ? inner : outer;
        const bool stored = inner < n && in_triangle(u, i, j);
        if (!stored && std::memcmp(&m.data[x], &input.data[x], sizeof(T)) != 0) ++changed;
    }
    EXPECT_EQ(changed, 0u) << what << ": elements outside the triangle changed";
    if (ref_info == 0) {
        double diff = 0, norm = 0;
        for (index_t i = 0; i < n; ++i)
            for (index_t j = 0; j < n; ++j) {
                if (!in_triangle(u, i, j)) continue;
                const T want = ref[std::size_t(i + j * n)];
                diff += abs2(m.at(i, j) - want);
                norm += abs2(want);
            }
        const double unit = std::ldexp(1.0, -dtype_traits(dtype_of<T>()).mantissa_bits);
        EXPECT_LE(std::sqrt(diff), std::max(64.0, 8.0 * double(n)) * unit * std::sqrt(norm)) << what;
        EXPECT_GT(norm, 0.0);
    }
    if (result != nullptr) *result = m.data;
    return rep;
}

template <class T>
void both_triangles_and_layouts(context& ctx, index_t n, const blas3_call_options& call, std::uint64_t seed) {
    for (uplo u : {uplo::lower, uplo::upper})
        for (layout lay : {layout::col_major, layout::row_major}) check_potrf<T>(ctx, n, u, lay, seed++, call);
}

template <class T>
void every_order(context& ctx, index_t n, index_t tile, std::uint64_t seed) {
    for (blas3_order o : {blas3_order::left_looking, blas3_order::right_looking}) {
        blas3_call_options call;
        call.tile = tile;
        call.order = o;
        both_triangles_and_layouts<T>(ctx, n, call, seed);
    }
}

TEST(Potrf, InPlaceMatchesLapack) {
    context ctx("cpu");
    // One vendor call on the whole matrix (the plan's default in place), then tiles of 24 and 20.
    both_triangles_and_layouts<double>(ctx, 97, {}, 1);
    both_triangles_and_layouts<float>(ctx, 97, {}, 2);
    both_triangles_and_layouts<std::complex<float>>(ctx, 61, {}, 3);
    both_triangles_and_layouts<std::complex<double>>(ctx, 61, {}, 4);
    every_order<double>(ctx, 97, 24, 5);
    every_order<float>(ctx, 89, 20, 6);
    every_order<std::complex<float>>(ctx, 61, 20, 7);
    every_order<std::complex<double>>(ctx, 67, 24, 8);
}

TEST(Potrf, ReferenceKernelMatchesLapack) {
    context ctx("cpu", {.kernel = gemm_kernel::reference});
    every_order<double>(ctx, 45, 16, 11);
    every_order<std::complex<float>>(ctx, 37, 16, 12);
}

TEST(Potrf, ThreeDevicesMatchLapack) {
    context ctx("cpu:3");
    every_order<double>(ctx, 83, 20, 21);
    every_order<std::complex<double>>(ctx, 59, 16, 22);
    // The planner's own tiles for three devices.
    both_triangles_and_layouts<float>(ctx, 150, {}, 23);
    both_triangles_and_layouts<std::complex<float>>(ctx, 71, {}, 24);
}

TEST(PotrfOutOfCore, SmallBudgetsMatchLapack) {
    // 40 KiB per device: a few 24 x 24 tiles of c64 (9 KiB) at a time.
    context ctx("cpu:2", {.memory_budget = std::size_t(40) << 10});
    every_order<double>(ctx, 101, 24, 31);
    every_order<std::complex<double>>(ctx, 53, 24, 32);
    every_order<float>(ctx, 77, 16, 33);
    every_order<std::complex<float>>(ctx, 49, 16, 34);
    // The planner's own tiles and order.
    both_triangles_and_layouts<double>(ctx, 130, {}, 35);
    context one("cpu@24KiB");
    both_triangles_and_layouts<double>(one, 90, {}, 36);
}

TEST(PotrfOutOfCore, OutOfCorePlanExplainsBothOrders) {
    // A quarter of the matrix fits: explain shows both orders; left-looking writes each tile once.
    context ctx("cpu@64KiB");
    const index_t n = 180;  // 253 KiB of f64
    spd_matrix<double> m = make_spd<double>(n, uplo::lower, layout::col_major, 41);
    const blas3_plan plan = ctx.plan(describe_blas3<double>(blas3_routine::potrf, {side::left, uplo::lower, op::n, diag::non_unit},
                                                            {1.0, 0.0, {}, {}, m.view()}));
    const std::string text = ctx.explain(plan);
    EXPECT_NE(text.find("potrf uplo=lower: A 180x180, f64"), std::string::npos) << text;
    EXPECT_NE(text.find("left-looking"), std::string::npos) << text;
    EXPECT_NE(text.find("right-looking"), std::string::npos) << text;  // the other order's traffic
    ASSERT_EQ(plan.alternatives.size(), 2u);
    for (const blas3_alternative& a : plan.alternatives)
        if (a.order == blas3_order::right_looking) EXPECT_GE(a.bytes_d2h, plan.bytes_d2h) << text;
    EXPECT_LE(plan.peak_device_bytes, std::size_t(64) << 10);
}

TEST(Potrf, NotPositiveDefiniteGivesLapacksInfo) {
    for (const char* spec : {"cpu", "cpu:3", "cpu:2@40KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        call.tile = std::string(spec) == "cpu" ? 0 : 16;
        for (index_t bad : {index_t(0), index_t(7), index_t(16), index_t(40), index_t(52)}) {
            check_potrf<double>(ctx, 53, uplo::lower, layout::col_major, 50 + std::uint64_t(bad), call, bad);
            check_potrf<float>(ctx, 53, uplo::upper, layout::row_major, 60 + std::uint64_t(bad), call, bad);
            check_potrf<std::complex<double>>(ctx, 53, uplo::upper, layout::col_major, 70 + std::uint64_t(bad), call, bad);
            check_potrf<std::complex<float>>(ctx, 53, uplo::lower, layout::row_major, 80 + std::uint64_t(bad), call, bad);
        }
        call.order = blas3_order::right_looking;
        check_potrf<double>(ctx, 53, uplo::upper, layout::col_major, 90, call, 33);
    }
}

TEST(Potrf, EmptyAndNonSquareMatrices) {
    context ctx("cpu");
    std::vector<double> none;
    const blas3_report r = ctx.potrf<double>(uplo::lower, host_matrix_view<double>(none.data(), 0, 0, layout::col_major));
    EXPECT_EQ(r.info, 0);
    std::vector<double> rect(12, 1.0);
    EXPECT_THROW(ctx.potrf<double>(uplo::lower, host_matrix_view<double>(rect.data(), 3, 4, layout::col_major)),
                 dimension_mismatch);
    std::vector<double> b(10, 1.0);
    EXPECT_THROW(ctx.potrs<double>(uplo::lower, host_matrix_view<const double>(rect.data(), 3, 3, layout::col_major),
                                   host_matrix_view<double>(b.data(), 5, 2, layout::col_major)),
                 dimension_mismatch);
}

TEST(PotrfOpenCL, MatchesLapack) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    // The vendor path (CLBlast's dtrsm and dsyrk, GEMM tiles; the potrf tiles through LAPACK on
    // the host, staged), both orders: f64, whose CLBlast kernels the Level 3 OpenCL tests
    // build too (PoCL compiles each once per build tree).
    context ctx("opencl:0@256KiB");
    blas3_call_options call;
    call.tile = 24;
    for (blas3_order o : {blas3_order::left_looking, blas3_order::right_looking}) {
        call.order = o;
        check_potrf<double>(ctx, 61, o == blas3_order::left_looking ? uplo::lower : uplo::upper,
                            o == blas3_order::left_looking ? layout::col_major : layout::row_major, 101, call);
    }
    check_potrf<double>(ctx, 61, uplo::upper, layout::row_major, 105, call, 29);  // info 30
    // Every precision in reproducible mode: GEMM tiles on tilestream's own OpenCL kernel, the
    // diagonal tiles (potrf, trsm, syrk/herk) on the host reference (no CLBlast program to build).
    context rep("opencl:0@2MiB", {.reproducible = true});
    check_potrf<float>(rep, 401, uplo::lower, layout::row_major, 106);
    check_potrf<std::complex<float>>(rep, 203, uplo::upper, layout::col_major, 107);
    check_potrf<std::complex<double>>(rep, 140, uplo::lower, layout::col_major, 108);
    check_potrf<double>(rep, 270, uplo::upper, layout::col_major, 109, {}, 260);  // info 261, in the second tile
}

// Staged potrf tiles are priced at the host's rate (device_rates::staged_flops) with their copies
// both ways: a GPU 500x the host no longer plans one 8192 tile, factored on the host in 3.6 s (an
// H200 host, cuda:0,cpu), where 1024 tiles ran in 0.175 s.
TEST(PotrfPlan, StagedTilesArePricedAtTheHostsRate) {
    const index_t n = 8192;
    blas3_problem q;
    q.routine = blas3_routine::potrf;
    q.type = dtype::f64;
    q.flags.uplo = uplo::lower;
    q.m = q.n = q.k = n;
    q.layout_a = q.layout_b = q.layout_c = layout::col_major;
    q.lda = q.ldb = q.ldc = n;
    q.reads_ab = q.reads_c = true;
    device_rates gpu;
    gpu.flops = 50e12;
    gpu.h2d = gpu.d2h = 50e9;
    gpu.measured = true;
    blas3_options opt;
    opt.devices = 2;
    const std::size_t budget = std::size_t(64) << 30;
    device_rates staged = gpu;
    staged.staged_flops = 50e9;
    const blas3_plan p = plan_blas3(q, budget, staged, opt);
    // Every diagonal tile is factored on the host, one after the other on the critical path.
    const double tiles = double((n + p.tile - 1) / p.tile);
    const double host_seconds = tiles * (double(p.tile) * double(p.tile) * double(p.tile) / 3) / staged.staged_flops;
    EXPECT_GE(p.predicted_seconds, host_seconds) << explain(p);
    EXPECT_LE(p.tile, 2048) << explain(p);
    EXPECT_NE(explain(p).find("to the host's LAPACK at 50.0 GFLOP/s"), std::string::npos) << explain(p);
    // Not staged (a device with its own potrf): the same tiles model faster.
    blas3_options same = opt;
    same.tile = p.tile;
    EXPECT_LT(plan_blas3(q, budget, gpu, same).predicted_seconds, p.predicted_seconds);
}

TEST(PotrfOpenCL, StagedDiagonalTilesRunLapackOnTheHostExceptWhenReproducible) {
    // OpenCL has no potrf tile: its diagonal tiles are staged to the host, where LAPACK factors
    // them (the reference loop took about a second per 1024 tile); reproducible mode and the
    // reference kernel keep the reference loop. The trace names which ran.
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    const auto names = [](const trace_recorder& rec) {
        std::vector<std::string> v;
        for (const trace_span& s : rec.spans())
            if (s.name.rfind("potrf ", 0) == 0) v.push_back(s.name);
        return v;
    };
    const auto all_are = [](const std::vector<std::string>& v, const std::string& name) {
        return !v.empty() && std::all_of(v.begin(), v.end(), [&](const std::string& x) { return x == name; });
    };
    blas3_call_options call;
    call.tile = 32;
    trace_recorder host;
    call.run.trace = &host;
    context ctx("opencl:0@256KiB");
    check_potrf<double>(ctx, 97, uplo::lower, layout::col_major, 141, call);
    check_potrf<std::complex<float>>(ctx, 75, uplo::upper, layout::row_major, 142, call, 40);  // info 41 from LAPACK
    EXPECT_TRUE(all_are(names(host), "potrf on the host")) << names(host).size() << " potrf spans";
    // The plan prices them so, at the host's measured rate.
    const blas3_plan staged = ctx.plan(describe_blas3<double>(blas3_routine::potrf, {side::left, uplo::lower, op::n, diag::non_unit},
                                                              {1.0, 0.0, {}, {}, make_spd<double>(97, uplo::lower, layout::col_major, 144).view()}),
                                       call);
    EXPECT_GT(staged.rates.staged_flops, 0) << ctx.explain(staged);
    EXPECT_NE(ctx.explain(staged).find("staged tiles    potrf tiles through host memory"), std::string::npos)
        << ctx.explain(staged);
    trace_recorder reference;
    call.run.trace = &reference;
    context rep("opencl:0@2MiB", {.reproducible = true});  // its k-block tiles: 256 wide in f64
    call.tile = 0;
    check_potrf<double>(rep, 300, uplo::lower, layout::col_major, 143, call);
    EXPECT_TRUE(all_are(names(reference), "potrf reference")) << names(reference).size() << " potrf spans";
}

TEST(PotrfCuda, MatchesLapack) {
    // scripts/gpu-check.sh runs it (*Cuda*): cuBLAS trsm, syrk/herk and GEMM tiles, the potrf
    // tiles through cuSOLVER (info back in stream order); out of core through 1 MiB, and in core.
    TILESTREAM_SKIP_WITHOUT_GPU("cuda:0");
    context ctx("cuda:0@1MiB");
    blas3_call_options call;
    call.tile = 64;
    for (blas3_order o : {blas3_order::left_looking, blas3_order::right_looking}) {
        call.order = o;
        check_potrf<double>(ctx, 301, uplo::lower, layout::col_major, 131, call);
        check_potrf<std::complex<float>>(ctx, 203, uplo::upper, layout::row_major, 132, call);
        check_potrf<float>(ctx, 187, uplo::upper, layout::col_major, 134, call);
        check_potrf<std::complex<double>>(ctx, 149, uplo::lower, layout::row_major, 135, call);
    }
    check_potrf<double>(ctx, 301, uplo::upper, layout::col_major, 133, {}, 150);  // info 151
    context whole("cuda:0");
    check_potrf<std::complex<double>>(whole, 517, uplo::upper, layout::col_major, 136, {});
    check_potrf<float>(whole, 333, uplo::lower, layout::row_major, 137, {}, 200);  // info 201
}

TEST(Potrf, ReproducibleIsBitwiseAcrossDevicesAndBudgets) {
    // Past one k-block (256 f64, 128 c64): several tiles, diagonal ones on the reference kernel.
    const std::vector<const char*> specs = {"cpu", "cpu:3", "cpu@3MiB", "cpu:2@2MiB"};
    const auto same_everywhere = [&]<class T>(index_t n, uplo u) {
        std::vector<T> first;
        for (const char* spec : specs) {
            context ctx(spec, {.reproducible = true});
            std::vector<T> got;
            const blas3_report rep = check_potrf<T>(ctx, n, u, layout::col_major, 111, {}, -1, &got);
            EXPECT_TRUE(rep.plan.reproducible);
            if (first.empty()) first = got;
            else EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(T)), 0) << spec << " differs from cpu";
        }
    };
    same_everywhere.operator()<double>(300, uplo::lower);
    same_everywhere.operator()<std::complex<double>>(150, uplo::upper);
}

class potrf_faults : public ::testing::Test {
protected:
    void TearDown() override { fi::clear(); }
};

TEST_F(potrf_faults, DeviceFaultMidFactorizationRerunsTasks) {
    for (const char* spec : {"cpu:3@48KiB", "cpu:3"}) {
        context ctx(spec);
        const fi::slowdown slow({{ctx.devices()[0]->id(), 0.003}, {ctx.devices()[2]->id(), 0.003}});
        blas3_call_options call;
        call.tile = 16;
        call.order = blas3_order::right_looking;
        blas3_report rep;
        for (int attempt = 0; attempt < 8 && rep.faults.empty(); ++attempt) {
            fi::clear();
            fi::faults f;
            f.fail_after_units = 6;  // past the first panel
            fi::arm(*ctx.devices()[1], f);
            rep = check_potrf<double>(ctx, 80, uplo::lower, layout::col_major, 121 + std::uint64_t(attempt), call);
        }
        ASSERT_EQ(rep.faults.size(), 1u) << spec;
        EXPECT_EQ(rep.faults[0].id, ctx.devices()[1]->id());
        EXPECT_NE(rep.faults[0].message.find("injected"), std::string::npos) << rep.faults[0].message;
    }
}

/// posv and potrs against the residual: || A X - B ||_F / (||A||_F ||X||_F) within 32 n u, with A
/// the whole Hermitian matrix; B's padding unchanged.
template <class T>
void check_posv(context& ctx, index_t n, index_t nrhs, uplo u, layout lay, std::uint64_t seed, const blas3_call_options& call = {}) {
    spd_matrix<T> a = make_spd<T>(n, u, lay, seed);
    const spd_matrix<T> a0 = a;
    std::mt19937_64 rng(seed + 1000);
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    const index_t ldb = (lay == layout::col_major ? n : nrhs) + 2;
    std::vector<T> b(std::size_t(ldb * (lay == layout::col_major ? nrhs : n)), nan_of<T>());
    host_matrix_view<T> bv(b.data(), n, nrhs, lay, ldb);
    for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < nrhs; ++j) {
            if constexpr (is_complex_v<T>) bv(i, j) = T(real_type_t<T>(uni(rng)), real_type_t<T>(uni(rng)));
            else bv(i, j) = T(uni(rng));
        }
    const std::vector<T> b0 = b;
    const blas3_report rep = ctx.posv<T>(u, a.view(), bv, call);
    const std::string what = std::string(to_string(dtype_of<T>())) + " n=" + std::to_string(n) + " uplo=" +
                             std::string(to_string(u)) + " on " + ctx.device_names();
    ASSERT_EQ(rep.info, 0) << what;
    const host_matrix_view<const T> b0v(b0.data(), n, nrhs, lay, ldb);
    spd_matrix<T> full = a0;
    using W = std::conditional_t<is_complex_v<T>, std::complex<double>, double>;
    const auto value = [&](index_t i, index_t j) -> W {
        if (in_triangle(u, i, j)) {
            W v = W(full.at(i, j));
            if constexpr (is_complex_v<T>)
                if (i == j) v = W(v.real());
            return v;
        }
        if constexpr (is_complex_v<T>) return std::conj(W(full.at(j, i)));
        else return W(full.at(j, i));
    };
    double res = 0, na = 0, nx = 0;
    for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j) na += abs2(value(i, j));
    for (index_t c = 0; c < nrhs; ++c)
        for (index_t i = 0; i < n; ++i) {
            W s(0);
            for (index_t p = 0; p < n; ++p) s += value(i, p) * W(bv(p, c));
            res += abs2(s - W(b0v(i, c)));
            nx += abs2(W(bv(i, c)));
        }
    const double unit = std::ldexp(1.0, -dtype_traits(dtype_of<T>()).mantissa_bits);
    EXPECT_LE(std::sqrt(res), 32.0 * double(n) * unit * std::sqrt(na) * std::sqrt(nx)) << what;
    EXPECT_GT(nx, 0.0);
    std::size_t changed = 0;
    for (std::size_t x = 0; x < b.size(); ++x) {
        const index_t outer = index_t(x) / ldb, inner = index_t(x) % ldb;
        if (inner >= (lay == layout::col_major ? n : nrhs) && std::memcmp(&b[x], &b0[x], sizeof(T)) != 0) ++changed;
        (void)outer;
    }
    EXPECT_EQ(changed, 0u) << what << ": B's padding changed";
}

TEST(Posv, SolvesMatchTheResidualBound) {
    for (const char* spec : {"cpu", "cpu:3@40KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        if (std::string(spec) != "cpu") call.tile = 16;
        for (uplo u : {uplo::lower, uplo::upper}) {
            check_posv<double>(ctx, 71, 9, u, layout::col_major, 201, call);
            check_posv<float>(ctx, 53, 5, u, layout::row_major, 202, call);
            check_posv<std::complex<float>>(ctx, 47, 6, u, layout::col_major, 203, call);
            check_posv<std::complex<double>>(ctx, 45, 3, u, layout::row_major, 204, call);
        }
    }
}

TEST(Posv, NotPositiveDefiniteLeavesBUnchanged) {
    context ctx("cpu:2@40KiB");
    spd_matrix<double> a = make_spd<double>(40, uplo::lower, layout::col_major, 301, 21);
    std::vector<double> b(40 * 3, 0.5);
    const blas3_report rep =
        ctx.posv<double>(uplo::lower, a.view(), host_matrix_view<double>(b.data(), 40, 3, layout::col_major), {.tile = 16});
    EXPECT_EQ(rep.info, 22);
    for (double v : b) EXPECT_EQ(v, 0.5);
}

}  // namespace
}  // namespace tilestream
