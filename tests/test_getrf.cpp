// getrf (LU with partial pivoting), getrs and gesv on the tile-task engine against LAPACK (OpenBLAS's
// ?getrf_): the same pivots, the same info, factors within rounding; in place, out of core, on three
// devices, on OpenCL, in both task orders, reproducible bitwise, through a device fault.
//
// Matrices with a known pivot order: A = P0 L0 U0 with |L0| <= 1/2 (|re| + |im| for complex), so
// partial pivoting picks P0's rows with a margin of 2 whatever the rounding: ipiv is compared
// exactly, on any machine and blocking. Plain random matrices are compared too.
#include "test_support.hpp"

#include "core/fault_injection.hpp"

#include <tilestream/context.hpp>
#include <tilestream/lu.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

extern "C" {
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void cgetrf_(const int* m, const int* n, std::complex<float>* a, const int* lda, int* ipiv, int* info);
void zgetrf_(const int* m, const int* n, std::complex<double>* a, const int* lda, int* ipiv, int* info);
}

namespace tilestream {
namespace {

namespace fi = fault_injection;

template <class T>
T random_entry(std::mt19937_64& rng, double scale) {
    std::uniform_real_distribution<double> uni(-scale, scale);
    if constexpr (is_complex_v<T>) {
        using R = real_type_t<T>;
        return T(R(uni(rng) / 2), R(uni(rng) / 2));  // |re| + |im| <= scale
    } else {
        return T(uni(rng));
    }
}

/// A column-major m x n matrix (ld = m).
template <class T>
struct matrix {
    index_t m = 0, n = 0;
    std::vector<T> v;
    host_matrix_view<T> view() { return {v.data(), m, n, layout::col_major, m}; }
    T& operator()(index_t i, index_t j) { return v[std::size_t(i + j * m)]; }
};

/// P0 L0 U0 with |L0| <= 1/2 below its unit diagonal and U0's diagonal at least 1/2 in magnitude.
template <class T>
matrix<T> known_pivots(index_t m, index_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    const index_t mn = std::min(m, n);
    matrix<T> a{m, n, std::vector<T>(std::size_t(m * n), T(0))};
    std::vector<index_t> perm(static_cast<std::size_t>(m));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<T> l(std::size_t(m * mn)), u(std::size_t(mn * n));
    // Small off-diagonal entries keep both factors well conditioned (random triangular matrices
    // are not), so the factors are compared with LAPACK's element by element, not only by residual.
    const double lmax = std::min(0.5, 4.0 / std::sqrt(double(m)));
    const double umax = std::min(1.0, 4.0 / std::sqrt(double(n)));
    for (index_t j = 0; j < mn; ++j)
        for (index_t i = 0; i < m; ++i) l[std::size_t(i + j * m)] = i == j ? T(1) : i > j ? random_entry<T>(rng, lmax) : T(0);
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < mn; ++i) {
            T x = i <= j ? random_entry<T>(rng, umax) : T(0);
            if (i == j) x += T(std::real(x) < 0 ? -1.5 : 1.5);
            u[std::size_t(i + j * mn)] = x;
        }
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < m; ++i) {
            T s(0);
            for (index_t p = 0; p <= std::min(i, mn - 1); ++p) s += l[std::size_t(i + p * m)] * u[std::size_t(p + j * mn)];
            a(perm[std::size_t(i)], j) = s;
        }
    return a;
}

template <class T>
matrix<T> random_matrix(index_t m, index_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    matrix<T> a{m, n, std::vector<T>(std::size_t(m * n))};
    for (T& x : a.v) x = random_entry<T>(rng, 1.0);
    return a;
}

struct lapack_result {
    std::vector<index_t> ipiv;
    index_t info = 0;
};

template <class T>
lapack_result lapack_getrf(matrix<T>& a) {
    const int m = int(a.m), n = int(a.n), lda = int(std::max<index_t>(a.m, 1));
    std::vector<int> ipiv(std::size_t(std::max<index_t>(std::min(a.m, a.n), 1)));
    int info = 0;
    if constexpr (std::is_same_v<T, float>) sgetrf_(&m, &n, a.v.data(), &lda, ipiv.data(), &info);
    else if constexpr (std::is_same_v<T, double>) dgetrf_(&m, &n, a.v.data(), &lda, ipiv.data(), &info);
    else if constexpr (std::is_same_v<T, std::complex<float>>) cgetrf_(&m, &n, a.v.data(), &lda, ipiv.data(), &info);
    else zgetrf_(&m, &n, a.v.data(), &lda, ipiv.data(), &info);
    lapack_result r;
    r.ipiv.assign(ipiv.begin(), ipiv.begin() + std::min(a.m, a.n));
    r.info = info;
    return r;
}

template <class T>
double tolerance() {
    return double(std::numeric_limits<real_type_t<T>>::epsilon());
}

/// Factors A (in `lay`) through the context and compares with LAPACK: ipiv (poisoned before) and
/// info equal, factors within rounding of LAPACK's, ||PA - LU|| small.
template <class T>
getrf_report factor_and_compare(context& ctx, const matrix<T>& original, layout lay, const getrf_call_options& call,
                                const std::string& what, bool exact_pivots = true) {
    const index_t m = original.m, n = original.n, mn = std::min(m, n);
    matrix<T> expected = original;
    const lapack_result want = lapack_getrf(expected);
    // Our copy in the requested layout, with a padded leading dimension.
    const index_t ld = (lay == layout::col_major ? m : n) + 3;
    std::vector<T> store(std::size_t(ld * (lay == layout::col_major ? n : m)), T(-77));
    host_matrix_view<T> a(store.data(), m, n, lay, ld);
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) a(i, j) = original.v[std::size_t(i + j * m)];
    std::vector<index_t> ipiv(std::size_t(mn) + 2, index_t(-7));
    const getrf_report rep = ctx.getrf<T>(a, std::span<index_t>(ipiv.data(), std::size_t(mn)), call);
    EXPECT_EQ(rep.info, want.info) << what;
    EXPECT_EQ(ipiv[std::size_t(mn)], -7) << what << ": ipiv written past min(m, n)";
    if (exact_pivots) {
        for (index_t i = 0; i < mn; ++i)
            if (ipiv[std::size_t(i)] != want.ipiv[std::size_t(i)]) {
                ADD_FAILURE() << what << ": ipiv[" << i << "] = " << ipiv[std::size_t(i)] << ", LAPACK's "
                              << want.ipiv[std::size_t(i)];
                break;
            }
    }
    // Padding untouched, factors against LAPACK's.
    const index_t outer = lay == layout::col_major ? n : m, inner = lay == layout::col_major ? m : n;
    for (index_t o = 0; o < outer; ++o)
        for (index_t p = inner; p < ld; ++p)
            if (store[std::size_t(o * ld + p)] != T(-77)) {
                ADD_FAILURE() << what << ": padding written";
                o = outer;
                break;
            }
    double worst = 0, scale = 0;
    index_t wi = 0, wj = 0;
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < m; ++i) {
            const double d = double(std::abs(a(i, j) - expected(i, j)));
            if (d > worst) {
                worst = d;
                wi = i;
                wj = j;
            }
            scale = std::max(scale, double(std::abs(expected(i, j))));
        }
    if (exact_pivots)
        EXPECT_LE(worst, 64.0 * double(std::max(m, n)) * tolerance<T>() * std::max(scale, 1.0))
            << what << ": factors differ from LAPACK's by " << worst << " at (" << wi << ", " << wj << ")";
    const double residual = getrf_residual<T>(host_matrix_view<const T>(const_cast<T*>(original.v.data()), m, n,
                                                                        layout::col_major, m),
                                              host_matrix_view<const T>(a), ipiv);
    EXPECT_LT(residual, 8.0) << what << ": ||PA - LU|| / (||A|| max(m, n) eps) = " << residual;
    return rep;
}

template <class T>
void every_shape(context& ctx, const getrf_call_options& call, const std::string& where) {
    const std::vector<std::pair<index_t, index_t>> shapes = {{157, 157}, {203, 131}, {97, 180}, {1, 5}, {6, 1}};
    std::uint64_t seed = 11;
    for (const auto& [m, n] : shapes)
        for (layout lay : {layout::col_major, layout::row_major}) {
            const matrix<T> a = known_pivots<T>(m, n, ++seed);
            factor_and_compare<T>(ctx, a, lay, call,
                                  where + " " + std::string(to_string(dtype_of<T>())) + " " + std::to_string(m) + "x" +
                                      std::to_string(n) + (lay == layout::col_major ? " col" : " row"));
        }
}

template <class T>
void random_square(context& ctx, const getrf_call_options& call, const std::string& where) {
    const matrix<T> a = random_matrix<T>(173, 173, 5);
    for (layout lay : {layout::col_major, layout::row_major})
        factor_and_compare<T>(ctx, a, lay, call,
                              where + " random " + std::string(to_string(dtype_of<T>())) +
                                  (lay == layout::col_major ? " col" : " row"));
}

TEST(Getrf, InPlaceMatchesLapackEveryPrecision) {
    context ctx("cpu");
    getrf_call_options tiled;
    tiled.tile = 40;  // block columns that do not divide any size: the task algorithm in place
    for (const getrf_call_options& call : {getrf_call_options{}, tiled}) {
        const std::string where = call.tile ? "cpu tile 40" : "cpu (one LAPACK call)";
        every_shape<float>(ctx, call, where);
        every_shape<double>(ctx, call, where);
        every_shape<std::complex<float>>(ctx, call, where);
        every_shape<std::complex<double>>(ctx, call, where);
        random_square<double>(ctx, call, where);
        random_square<std::complex<double>>(ctx, call, where);
    }
}

TEST(Getrf, OutOfCoreOnThreeDevicesBothOrdersMatchLapack) {
    // 203 rows of f64: a 16-wide block column is 26 KiB; 128 KiB holds four.
    context ctx("cpu:3@128KiB");
    for (lu_order order : {lu_order::left_looking, lu_order::right_looking}) {
        getrf_call_options call;
        call.order = order;
        const std::string where = "cpu:3@128KiB " + std::string(to_string(order));
        const matrix<double> a = known_pivots<double>(203, 190, 3);
        const getrf_report rep = factor_and_compare<double>(ctx, a, layout::col_major, call, where);
        EXPECT_EQ(rep.plan.order, order);
        EXPECT_FALSE(rep.plan.in_place);
        EXPECT_GT(rep.bytes_h2d, std::size_t(203 * 190 * 8)) << where;
        EXPECT_LE(rep.peak_device_bytes, std::size_t(128) << 10) << where;
        factor_and_compare<std::complex<float>>(ctx, known_pivots<std::complex<float>>(150, 171, 4), layout::row_major,
                                                call, where + " c32 row-major");
    }
    EXPECT_NE(explain(ctx.plan(describe_getrf<double>(host_matrix_view<const double>(nullptr, 0, 0)))).find("nothing to do"),
              std::string::npos);
}

TEST(Getrf, InPlaceOnThreeDevicesMatchesLapack) {
    context ctx("cpu:3");
    getrf_call_options call;
    call.tile = 32;
    factor_and_compare<float>(ctx, known_pivots<float>(211, 200, 8), layout::col_major, call, "cpu:3 f32");
    factor_and_compare<std::complex<double>>(ctx, known_pivots<std::complex<double>>(120, 141, 9), layout::col_major, call,
                                             "cpu:3 c64");
}

TEST(Getrf, OnOpenCLMatchesLapack) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    context ctx("opencl:0@256KiB");
    getrf_call_options call;
    call.tile = 48;
    factor_and_compare<float>(ctx, known_pivots<float>(150, 131, 21), layout::col_major, call, "opencl f32");
    factor_and_compare<double>(ctx, known_pivots<double>(131, 150, 22), layout::row_major, call, "opencl f64 row-major");
    // OpenCL has no getrf or laswp: the plan prices its staged panels at the host's rate, and says
    // so; a CPU device factors its own (nothing staged).
    const getrf_report rep = factor_and_compare<double>(ctx, known_pivots<double>(140, 120, 23), layout::col_major, call,
                                                        "opencl f64, explained");
    EXPECT_GT(rep.plan.rates.staged_flops, 0) << explain(rep.plan);
    EXPECT_NE(explain(rep.plan).find("staged tiles    getrf panels and row interchanges through host memory"),
              std::string::npos) << explain(rep.plan);
    context cpu("cpu@256KiB");
    EXPECT_EQ(factor_and_compare<double>(cpu, known_pivots<double>(140, 120, 24), layout::col_major, call, "cpu f64")
                  .plan.rates.staged_flops, 0);
}

TEST(GetrfCuda, MatchesLapack) {
    // scripts/gpu-check.sh runs it (*Cuda*): cuBLAS GEMM and trsm tiles, the panels and row swaps
    // through staging; out of core through 1 MiB, both orders, a singular column (LAPACK's info).
    TILESTREAM_SKIP_WITHOUT_GPU("cuda:0");
    context ctx("cuda:0@1MiB");
    getrf_call_options call;
    call.tile = 64;
    for (lu_order o : {lu_order::left_looking, lu_order::right_looking}) {
        call.order = o;
        factor_and_compare<double>(ctx, known_pivots<double>(301, 277, 31), layout::col_major, call, "cuda f64");
        factor_and_compare<std::complex<float>>(ctx, random_matrix<std::complex<float>>(190, 203, 32), layout::row_major,
                                                call, "cuda c32 row-major");
    }
    matrix<double> a = random_matrix<double>(200, 200, 33);
    for (index_t i = 0; i < a.m; ++i) a(i, 141) = 0.0;
    EXPECT_EQ(factor_and_compare<double>(ctx, a, layout::col_major, call, "cuda singular").info, 142);
}

TEST(Getrf, ExactlyZeroColumnGivesLapacksInfoAndCompletes) {
    for (const char* spec : {"cpu", "cpu:2@96KiB"}) {
        context ctx(spec);
        matrix<double> a = random_matrix<double>(120, 110, 17);
        for (index_t i = 0; i < a.m; ++i) a(i, 37) = 0.0;
        getrf_call_options call;
        call.tile = 24;
        const getrf_report rep = factor_and_compare<double>(ctx, a, layout::col_major, call, spec);
        EXPECT_EQ(rep.info, 38) << spec;
        matrix<std::complex<float>> c = random_matrix<std::complex<float>>(90, 90, 18);
        for (index_t i = 0; i < c.m; ++i) c(i, 61) = 0.0f;
        EXPECT_EQ(factor_and_compare<std::complex<float>>(ctx, c, layout::col_major, call, std::string(spec) + " c32").info, 62);
    }
    // Row-major in one task: the CPU's blocked LU (block columns of 128 real, 64 complex) finds the
    // zero pivot in a later block column and still completes, as LAPACK does.
    context ctx("cpu");
    matrix<double> a = random_matrix<double>(300, 280, 19);
    for (index_t i = 0; i < a.m; ++i) a(i, 200) = 0.0;
    EXPECT_EQ(factor_and_compare<double>(ctx, a, layout::row_major, {}, "cpu row-major f64").info, 201);
    matrix<std::complex<double>> z = random_matrix<std::complex<double>>(150, 170, 20);
    for (index_t i = 0; i < z.m; ++i) z(i, 100) = 0.0;
    EXPECT_EQ(factor_and_compare<std::complex<double>>(ctx, z, layout::row_major, {}, "cpu row-major c64").info, 101);
}

TEST(Getrf, ReproducibleIsBitwiseAcrossDevicesBudgetsAndOrders) {
    // Two panels of the f64 k-block (256) and a ragged third.
    const matrix<double> a = random_matrix<double>(300, 290, 23);
    std::vector<double> first;
    std::vector<index_t> first_piv;
    for (const char* spec : {"cpu", "cpu:3", "cpu@2MiB", "cpu:2@2MiB"})
        for (lu_order order : {lu_order::left_looking, lu_order::right_looking}) {
            context ctx(spec, {.reproducible = true});
            matrix<double> b = a;
            std::vector<index_t> ipiv(290);
            getrf_call_options call;
            call.order = order;
            const getrf_report rep = ctx.getrf<double>(b.view(), ipiv, call);
            EXPECT_TRUE(rep.plan.reproducible);
            EXPECT_EQ(rep.plan.tile, 256);
            if (first.empty()) {
                first = b.v;
                first_piv = ipiv;
                EXPECT_LT(getrf_residual<double>(host_matrix_view<const double>(a.v.data(), 300, 290, layout::col_major, 300),
                                                 host_matrix_view<const double>(b.v.data(), 300, 290, layout::col_major, 300),
                                                 ipiv),
                          8.0);
            } else {
                EXPECT_TRUE(b.v == first) << spec << " " << to_string(order) << " differs from cpu left-looking";
                EXPECT_TRUE(ipiv == first_piv) << spec << " " << to_string(order);
            }
        }
}

class getrf_faults : public ::testing::Test {
protected:
    void TearDown() override { fi::clear(); }
};

TEST_F(getrf_faults, DeviceFaultMidFactorizationRerunsItsTasks) {
    for (const char* spec : {"cpu:3@96KiB", "cpu:3"}) {
        context ctx(spec);
        const fi::slowdown slow({{ctx.devices()[0]->id(), 0.003}, {ctx.devices()[2]->id(), 0.003}});
        getrf_call_options call;
        call.tile = 16;
        call.order = lu_order::right_looking;
        getrf_report rep;
        for (int attempt = 0; attempt < 8 && rep.faults.empty(); ++attempt) {
            fi::clear();
            fi::faults f;
            f.fail_after_units = 2;
            fi::arm(*ctx.devices()[1], f);
            rep = factor_and_compare<double>(ctx, known_pivots<double>(150, 140, 31 + attempt), layout::col_major, call, spec);
        }
        ASSERT_EQ(rep.faults.size(), 1u) << spec << " (8 runs)";
        EXPECT_EQ(rep.faults[0].id, ctx.devices()[1]->id());
        EXPECT_NE(rep.faults[0].message.find("injected"), std::string::npos) << rep.faults[0].message;
    }
}

/// ||op(A) X - B||_F / (||A||_F ||X||_F n eps) in double.
template <class T>
double solve_residual(op trans, const matrix<T>& a, const matrix<T>& x, const matrix<T>& b) {
    double r = 0, na = 0, nx = 0;
    for (const T& v : a.v) na += std::norm(std::complex<double>(v));
    for (const T& v : x.v) nx += std::norm(std::complex<double>(v));
    for (index_t j = 0; j < b.n; ++j)
        for (index_t i = 0; i < b.m; ++i) {
            std::complex<double> s = 0;
            for (index_t p = 0; p < a.n; ++p) {
                std::complex<double> e = trans == op::n ? std::complex<double>(a.v[std::size_t(i + p * a.m)])
                                                        : std::complex<double>(a.v[std::size_t(p + i * a.m)]);
                if (trans == op::c) e = std::conj(e);
                s += e * std::complex<double>(x.v[std::size_t(p + j * x.m)]);
            }
            r += std::norm(s - std::complex<double>(b.v[std::size_t(i + j * b.m)]));
        }
    return std::sqrt(r) / (std::sqrt(na) * std::sqrt(nx) * double(a.n) * tolerance<T>());
}

template <class T>
void solves(context& ctx, const std::string& where) {
    const index_t n = 141, nrhs = 9;
    const matrix<T> a = random_matrix<T>(n, n, 41);
    const matrix<T> b = random_matrix<T>(n, nrhs, 42);
    matrix<T> lu = a, x = b;
    std::vector<index_t> ipiv(n, -7);
    getrf_call_options call;
    call.tile = 16;  // c64: three 141 x 16 block columns in the 160 KiB budget
    const gesv_report rep = ctx.gesv<T>(lu.view(), ipiv, x.view(), call);
    EXPECT_EQ(rep.info, 0) << where;
    EXPECT_LT(solve_residual(op::n, a, x, b), 4.0) << where << " gesv";
    for (op trans : {op::n, op::t, op::c}) {
        matrix<T> y = b;
        ctx.getrs<T>(trans, host_matrix_view<const T>(lu.view()), ipiv, y.view());
        EXPECT_LT(solve_residual(trans, a, y, b), 4.0) << where << " getrs trans " << to_string(trans);
    }
}

TEST(Gesv, SolvesEveryPrecisionInPlaceAndOutOfCore) {
    for (const char* spec : {"cpu", "cpu:2@160KiB"}) {
        context ctx(spec);
        solves<float>(ctx, spec);
        solves<double>(ctx, spec);
        solves<std::complex<float>>(ctx, spec);
        solves<std::complex<double>>(ctx, spec);
    }
}

TEST(Gesv, SingularMatrixReturnsInfoWithoutSolving) {
    context ctx("cpu");
    matrix<double> a = random_matrix<double>(50, 50, 3);
    for (index_t i = 0; i < 50; ++i) a(i, 0) = 0.0;
    matrix<double> b = random_matrix<double>(50, 2, 4);
    const matrix<double> before = b;
    std::vector<index_t> ipiv(50);
    const gesv_report rep = ctx.gesv<double>(a.view(), ipiv, b.view());
    EXPECT_EQ(rep.info, 1);
    EXPECT_TRUE(b.v == before.v) << "B changed though A is singular";
}

template <class T>
void reference_loop_matches(index_t m, index_t n) {
    const matrix<T> a = known_pivots<T>(m, n, std::uint64_t(m * 31 + n));
    matrix<T> want = a, got = a;
    const lapack_result r = lapack_getrf(want);
    std::vector<index_t> ipiv(std::size_t(std::min(m, n)), -7);
    EXPECT_EQ(reference_getrf<T>(got.view(), ipiv), r.info);
    EXPECT_TRUE(ipiv == r.ipiv) << to_string(dtype_of<T>()) << " " << m << "x" << n;
    double worst = 0;
    for (std::size_t i = 0; i < got.v.size(); ++i) worst = std::max(worst, double(std::abs(got.v[i] - want.v[i])));
    EXPECT_LE(worst, 64.0 * double(std::max(m, n)) * tolerance<T>() * 4.0) << to_string(dtype_of<T>());
}

TEST(Getrf, ReferenceLoopMatchesLapack) {
    for (const auto& [m, n] : std::vector<std::pair<index_t, index_t>>{{9, 9}, {13, 7}, {6, 11}}) {
        reference_loop_matches<float>(m, n);
        reference_loop_matches<double>(m, n);
        reference_loop_matches<std::complex<float>>(m, n);
        reference_loop_matches<std::complex<double>>(m, n);
    }
}

TEST(Getrf, BadArgumentsAreNamed) {
    context ctx("cpu");
    matrix<double> a = random_matrix<double>(10, 8, 1);
    std::vector<index_t> ipiv(7);
    try {
        ctx.getrf<double>(a.view(), ipiv);
        ADD_FAILURE() << "a short ipiv was accepted";
    } catch (const dimension_mismatch& e) {
        EXPECT_NE(std::string(e.what()).find("ipiv"), std::string::npos) << e.what();
    }
    matrix<double> b = random_matrix<double>(9, 2, 2);
    std::vector<index_t> p(8);
    EXPECT_THROW(ctx.gesv<double>(a.view(), p, b.view()), dimension_mismatch);
    EXPECT_THROW(parse_lu_order("sideways"), invalid_argument);
    // 400 rows of f64: three single columns need 9600 bytes, more than 8 KiB.
    EXPECT_THROW(context("cpu@8KiB").getrf<double>(random_matrix<double>(400, 400, 1).view(), ipiv), out_of_budget);
    // A fixed width that does not fit is refused, naming the widest that would.
    std::vector<index_t> piv(400);
    getrf_call_options wide;
    wide.tile = 32;
    try {
        context("cpu@64KiB").getrf<double>(random_matrix<double>(400, 400, 1).view(), piv, wide);
        ADD_FAILURE() << "32-wide block columns of 400 rows were planned in 64 KiB";
    } catch (const out_of_budget& e) {
        EXPECT_NE(std::string(e.what()).find("block columns of at most 6 fit"), std::string::npos) << e.what();
    }
}

TEST(Getrf, TallPanelsNarrowWhenA16WideBlockColumnDoesNotFit) {
    // 1000 rows of f64: a 16-wide block column is 125 KiB, more than the whole 100 KiB budget;
    // three 4-wide ones fit. The pivots are still LAPACK's (each panel searches its whole column).
    // (2000 rows at 200 KiB until 2026-11-29: the same plans, 21 s under ASan.)
    for (const char* spec : {"cpu@100KiB", "opencl:0@100KiB"}) {
        std::string why;
        ASSERT_FALSE(testing::gpu_missing(spec, why)) << why;  // PoCL in CI: never skipped
        context ctx(spec);
        for (lu_order order : {lu_order::left_looking, lu_order::right_looking}) {
            getrf_call_options call;
            call.order = order;
            const std::string where = std::string(spec) + " " + std::string(to_string(order));
            const getrf_report rep = factor_and_compare<double>(ctx, known_pivots<double>(1000, 150, 31), layout::col_major,
                                                                call, where);
            EXPECT_LT(rep.plan.tile, 16) << where;
            EXPECT_FALSE(rep.plan.in_place) << where;
            EXPECT_LE(rep.peak_device_bytes, std::size_t(100) << 10) << where;
            EXPECT_NE(explain(rep.plan).find("narrower than 16: three 16-wide block columns need 375.0 KiB"),
                      std::string::npos) << explain(rep.plan);
        }
        // 750 rows of c32: three 16-wide block columns need 281 KiB, three 5-wide ones fit.
        factor_and_compare<std::complex<float>>(ctx, known_pivots<std::complex<float>>(750, 97, 32), layout::row_major, {},
                                                std::string(spec) + " c32 row-major");
    }
}

}  // namespace
}  // namespace tilestream
