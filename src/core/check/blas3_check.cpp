// Checking a Level 3 result in float64 (TRSM by its residual, the others against OpenBLAS's
// double-precision routine on upcast operands) and timing the same OpenBLAS routine on the host as
// the anchor of a run.
#include <tilestream/blas3.hpp>
#include <tilestream/error.hpp>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

namespace tilestream {

namespace {

/// A column-major double copy of a host view (ld = rows).
struct dmat {
    index_t rows = 0, cols = 0;
    std::vector<double> v;
    double& operator()(index_t i, index_t j) { return v[std::size_t(i + j * rows)]; }
    double operator()(index_t i, index_t j) const { return v[std::size_t(i + j * rows)]; }
    int ld() const { return int(std::max<index_t>(rows, 1)); }
    double* data() { return v.data(); }
};

template <class T>
dmat upcast(host_matrix_view<const T> m) {
    dmat d;
    d.rows = m.rows();
    d.cols = m.cols();
    d.v.assign(std::size_t(d.rows * d.cols), 0.0);
    for (index_t j = 0; j < d.cols; ++j)
        for (index_t i = 0; i < d.rows; ++i) d(i, j) = double(m(i, j));
    return d;
}

bool in_triangle(uplo u, index_t i, index_t j) { return u == uplo::lower ? i >= j : i <= j; }

CBLAS_SIDE cb(side s) { return s == side::left ? CblasLeft : CblasRight; }
CBLAS_UPLO cb(uplo u) { return u == uplo::lower ? CblasLower : CblasUpper; }
CBLAS_TRANSPOSE cb(op o) { return o == op::n ? CblasNoTrans : CblasTrans; }
CBLAS_DIAG cb(diag d) { return d == diag::unit ? CblasUnit : CblasNonUnit; }

void check_int(const blas3_problem& p) {
    if (std::max({p.m, p.n, p.k}) > INT_MAX)
        throw invalid_argument(p.describe() + ": sizes beyond CBLAS's 32-bit integers");
}

}  // namespace

std::string blas3_check_result::summary() const {
    std::ostringstream o;
    o << (passed ? "passed" : "FAILED") << " (" << method << ": " << error << ", tolerance " << tolerance;
    if (changed_outside) o << "; " << changed_outside << " elements written outside the triangle";
    if (nonfinite) o << "; " << nonfinite << " elements not finite";
    o << ", " << seconds << " s)";
    return o.str();
}

template <class T>
blas3_check_result check_blas3(blas3_routine routine, const blas3_flags& f, const blas3_operands<T>& inputs,
                               host_matrix_view<const T> result) {
    const auto t0 = std::chrono::steady_clock::now();
    const blas3_problem p = describe_blas3<T>(routine, f, inputs);
    check_int(p);
    blas3_check_result r;
    const double u = std::numeric_limits<T>::epsilon() / 2;
    const bool solves = routine == blas3_routine::trsm || routine == blas3_routine::trmm;
    const bool rank_k = routine == blas3_routine::syrk || routine == blas3_routine::syr2k;
    const index_t order = rank_k ? p.n : (f.side == side::left ? p.m : p.n);
    dmat c0 = upcast<T>(host_matrix_view<const T>(inputs.c));
    dmat x = upcast<T>(result);
    const double alpha = double(inputs.alpha), beta = double(inputs.beta);
    if (routine == blas3_routine::trsm && !p.quick_return && p.reads_ab) {
        // Residual: || op(A) X - alpha B || / (||A|| ||X||), A's referenced triangle.
        r.method = "residual ||op(A)X - alpha B|| / (||A|| ||X||)";
        dmat a = upcast<T>(inputs.a);
        double na = 0;
        for (index_t j = 0; j < order; ++j)
            for (index_t i = 0; i < order; ++i) {
                if (!in_triangle(f.uplo, i, j)) continue;
                const double v = i == j && f.diag == diag::unit ? 1.0 : a(i, j);
                na += v * v;
            }
        double nx = 0;
        for (double v : x.v) {
            nx += v * v;
            if (!std::isfinite(v)) ++r.nonfinite;
        }
        dmat y = x;
        cblas_dtrmm(CblasColMajor, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), int(p.m), int(p.n), 1.0, a.data(),
                    a.ld(), y.data(), y.ld());
        double nr = 0;
        for (std::size_t i = 0; i < y.v.size(); ++i) {
            const double d = y.v[i] - alpha * c0.v[i];
            nr += d * d;
        }
        r.error = nr > 0 ? std::sqrt(nr) / std::max(std::sqrt(na) * std::sqrt(nx), std::numeric_limits<double>::min()) : 0;
        r.tolerance = std::max(16.0, 2.0 * double(order)) * u;
    } else {
        r.method = "float64 OpenBLAS on upcast operands";
        dmat ref = c0;
        if (!p.quick_return) {
            dmat a = upcast<T>(inputs.a);
            dmat b = inputs.b.empty() ? dmat{} : upcast<T>(inputs.b);
            const int m = int(p.m), n = int(p.n), k = int(p.k);
            switch (routine) {
                case blas3_routine::trsm:  // alpha == 0: B <- 0
                case blas3_routine::trmm:
                    if (p.reads_ab)
                        cblas_dtrmm(CblasColMajor, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), m, n, alpha, a.data(),
                                    a.ld(), ref.data(), ref.ld());
                    else
                        std::fill(ref.v.begin(), ref.v.end(), 0.0);
                    break;
                case blas3_routine::symm:
                    if (p.reads_ab)
                        cblas_dsymm(CblasColMajor, cb(f.side), cb(f.uplo), m, n, alpha, a.data(), a.ld(), b.data(), b.ld(),
                                    beta, ref.data(), ref.ld());
                    else
                        for (double& v : ref.v) v = beta == 0 ? 0.0 : beta * v;
                    break;
                case blas3_routine::syrk:
                case blas3_routine::syr2k:
                    if (p.reads_ab && routine == blas3_routine::syrk)
                        cblas_dsyrk(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, alpha, a.data(), a.ld(), beta, ref.data(),
                                    ref.ld());
                    else if (p.reads_ab)
                        cblas_dsyr2k(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, alpha, a.data(), a.ld(), b.data(),
                                     b.ld(), beta, ref.data(), ref.ld());
                    else
                        for (index_t j = 0; j < n; ++j)
                            for (index_t i = 0; i < n; ++i)
                                if (in_triangle(f.uplo, i, j)) ref(i, j) = beta == 0 ? 0.0 : beta * ref(i, j);
                    break;
                default: throw invalid_argument("check: " + p.describe() + " is not checked yet");
            }
        }
        double diff = 0, norm = 0;
        for (index_t j = 0; j < ref.cols; ++j)
            for (index_t i = 0; i < ref.rows; ++i) {
                if (rank_k && !in_triangle(f.uplo, i, j)) {
                    // Bitwise: the element must be what the caller had there.
                    const double before = c0(i, j), now = x(i, j);
                    if (!(before == now || (std::isnan(before) && std::isnan(now)))) ++r.changed_outside;
                    continue;
                }
                if (!std::isfinite(x(i, j)) && std::isfinite(ref(i, j))) ++r.nonfinite;
                if (!std::isfinite(ref(i, j))) continue;
                const double d = x(i, j) - ref(i, j);
                diff += d * d;
                norm += ref(i, j) * ref(i, j);
            }
        r.error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
        const double depth = double(std::max<index_t>(rank_k ? p.k : order, 1));
        r.tolerance = std::max(16.0, 8.0 * std::sqrt(depth)) * u;
        (void)solves;
    }
    r.passed = r.error <= r.tolerance && r.nonfinite == 0 && r.changed_outside == 0;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

template <class T>
blas_anchor time_host_blas3(blas3_routine routine, const blas3_flags& f, const blas3_operands<T>& inputs, int repeat) {
    const blas3_problem p = describe_blas3<T>(routine, f, inputs);
    check_int(p);
    constexpr bool single = std::is_same_v<T, float>;
    // Column-major copies of the operands (taken once, outside the clock), C or B refreshed from
    // its input before each run.
    const auto copy = [](host_matrix_view<const T> v) {
        std::vector<T> out(std::size_t(v.rows() * v.cols()));
        for (index_t j = 0; j < v.cols(); ++j)
            for (index_t i = 0; i < v.rows(); ++i) out[std::size_t(i + j * v.rows())] = v(i, j);
        return out;
    };
    const std::vector<T> a = copy(inputs.a), b = inputs.b.empty() ? std::vector<T>{} : copy(inputs.b),
                         c0 = copy(host_matrix_view<const T>(inputs.c));
    std::vector<T> c(c0.size());
    const int lda = int(std::max<index_t>(inputs.a.rows(), 1)), ldb = int(std::max<index_t>(inputs.b.rows(), 1)),
              ldc = int(std::max<index_t>(inputs.c.rows(), 1));
    const int m = int(p.m), n = int(p.n), k = int(p.k);
    const T alpha = inputs.alpha, beta = inputs.beta;
    const auto o = CblasColMajor;
    const auto run = [&] {
        if (p.quick_return) return;
        switch (routine) {
            case blas3_routine::trsm:
                if constexpr (single) cblas_strsm(o, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), m, n, alpha, a.data(), lda, c.data(), ldc);
                else cblas_dtrsm(o, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), m, n, alpha, a.data(), lda, c.data(), ldc);
                break;
            case blas3_routine::trmm:
                if constexpr (single) cblas_strmm(o, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), m, n, alpha, a.data(), lda, c.data(), ldc);
                else cblas_dtrmm(o, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), m, n, alpha, a.data(), lda, c.data(), ldc);
                break;
            case blas3_routine::symm:
                if constexpr (single) cblas_ssymm(o, cb(f.side), cb(f.uplo), m, n, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
                else cblas_dsymm(o, cb(f.side), cb(f.uplo), m, n, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
                break;
            case blas3_routine::syrk:
                if constexpr (single) cblas_ssyrk(o, cb(f.uplo), cb(f.trans), n, k, alpha, a.data(), lda, beta, c.data(), ldc);
                else cblas_dsyrk(o, cb(f.uplo), cb(f.trans), n, k, alpha, a.data(), lda, beta, c.data(), ldc);
                break;
            case blas3_routine::syr2k:
                if constexpr (single) cblas_ssyr2k(o, cb(f.uplo), cb(f.trans), n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
                else cblas_dsyr2k(o, cb(f.uplo), cb(f.trans), n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
                break;
            default: throw invalid_argument("anchor: " + p.describe() + " has no OpenBLAS anchor yet");
        }
    };
    const int before = openblas_get_num_threads();
    const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
    openblas_set_num_threads(threads);
    std::vector<double> times;
    for (int r = 0; r <= std::max(1, repeat); ++r) {
        std::memcpy(c.data(), c0.data(), c0.size() * sizeof(T));
        const auto t0 = std::chrono::steady_clock::now();
        run();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) times.push_back(s);  // the first run warms up
    }
    openblas_set_num_threads(before);
    std::sort(times.begin(), times.end());
    blas_anchor out;
    out.name = "OpenBLAS cblas_" + std::string(single ? "s" : "d") + std::string(to_string(routine)) + " on the host, " +
               std::to_string(threads) + " threads";
    out.seconds = times[times.size() / 2];
    out.gflops = out.seconds > 0 ? p.flops() / out.seconds * 1e-9 : 0;
    out.threads = threads;
    out.repeat = int(times.size());
    return out;
}

#define TILESTREAM_INSTANTIATE(T)                                                                                  \
    template blas3_check_result check_blas3<T>(blas3_routine, const blas3_flags&, const blas3_operands<T>&,        \
                                               host_matrix_view<const T>);                                         \
    template blas_anchor time_host_blas3<T>(blas3_routine, const blas3_flags&, const blas3_operands<T>&, int);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
