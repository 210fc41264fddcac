// Checking a Level 3 result in float64 (TRSM by its residual, the others against OpenBLAS's
// double-precision routine on upcast operands) and timing the same OpenBLAS routine on the host as
// the anchor of a run.
#include <tilestream/blas3.hpp>
#include <tilestream/error.hpp>
#include "core/check/host_anchor.hpp"

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

CBLAS_SIDE cb(side s) { return s == side::left ? CblasLeft : CblasRight; }
CBLAS_UPLO cb(uplo u) { return u == uplo::lower ? CblasLower : CblasUpper; }
CBLAS_DIAG cb(diag d) { return d == diag::unit ? CblasUnit : CblasNonUnit; }
CBLAS_TRANSPOSE cb(op o) { return o == op::n ? CblasNoTrans : o == op::t ? CblasTrans : CblasConjTrans; }

/// A column-major copy of a host view in double precision (W: double or std::complex<double>).
template <class W>
struct wmat {
    index_t rows = 0, cols = 0;
    std::vector<W> v;
    W& operator()(index_t i, index_t j) { return v[std::size_t(i + j * rows)]; }
    W operator()(index_t i, index_t j) const { return v[std::size_t(i + j * rows)]; }
    int ld() const { return int(std::max<index_t>(rows, 1)); }
    W* data() { return v.data(); }
};

template <class T>
wmat<wide_type_t<T>> upcast(host_matrix_view<const T> m) {
    wmat<wide_type_t<T>> d;
    d.rows = m.rows();
    d.cols = m.cols();
    d.v.assign(std::size_t(d.rows * d.cols), wide_type_t<T>(0));
    for (index_t j = 0; j < d.cols; ++j)
        for (index_t i = 0; i < d.rows; ++i) d(i, j) = wide_type_t<T>(m(i, j));
    return d;
}

template <class W>
double sq(W x) {
    if constexpr (std::is_same_v<W, double>) return x * x;
    else return std::norm(x);
}
template <class W>
bool finite(W x) {
    if constexpr (std::is_same_v<W, double>) return std::isfinite(x);
    else return std::isfinite(x.real()) && std::isfinite(x.imag());
}

bool in_triangle(uplo u, index_t i, index_t j) { return u == uplo::lower ? i >= j : i <= j; }

/// The float64 (or complex128) routines, one entry per kind: cblas_d... or cblas_z...
template <class W>
struct wide_blas {
    static constexpr bool z = !std::is_same_v<W, double>;
    static void trmm(const blas3_flags& f, int m, int n, W alpha, const W* a, int lda, W* b, int ldb) {
        if constexpr (z) cblas_ztrmm(CblasColMajor, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), m, n, &alpha, a, lda, b, ldb);
        else cblas_dtrmm(CblasColMajor, cb(f.side), cb(f.uplo), cb(f.trans), cb(f.diag), m, n, alpha, a, lda, b, ldb);
    }
    static void symm(bool herm, const blas3_flags& f, int m, int n, W alpha, const W* a, int lda, const W* b, int ldb, W beta,
                     W* c, int ldc) {
        if constexpr (z) {
            if (herm) cblas_zhemm(CblasColMajor, cb(f.side), cb(f.uplo), m, n, &alpha, a, lda, b, ldb, &beta, c, ldc);
            else cblas_zsymm(CblasColMajor, cb(f.side), cb(f.uplo), m, n, &alpha, a, lda, b, ldb, &beta, c, ldc);
        } else {
            cblas_dsymm(CblasColMajor, cb(f.side), cb(f.uplo), m, n, alpha, a, lda, b, ldb, beta, c, ldc);
        }
    }
    static void rank_k(bool herm, const blas3_flags& f, int n, int k, W alpha, const W* a, int lda, W beta, W* c, int ldc) {
        if constexpr (z) {
            if (herm) cblas_zherk(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, alpha.real(), a, lda, beta.real(), c, ldc);
            else cblas_zsyrk(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, &alpha, a, lda, &beta, c, ldc);
        } else {
            cblas_dsyrk(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, alpha, a, lda, beta, c, ldc);
        }
    }
    static void rank_2k(bool herm, const blas3_flags& f, int n, int k, W alpha, const W* a, int lda, const W* b, int ldb,
                        W beta, W* c, int ldc) {
        if constexpr (z) {
            if (herm) cblas_zher2k(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, &alpha, a, lda, b, ldb, beta.real(), c, ldc);
            else cblas_zsyr2k(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
        } else {
            cblas_dsyr2k(CblasColMajor, cb(f.uplo), cb(f.trans), n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        }
    }
};

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
    const detail::host_blas_threads all_threads;  // the reference on every core
    if (routine == blas3_routine::potrf) throw invalid_argument("check_blas3: potrf is checked by check_potrf");
    const blas3_problem p = describe_blas3<T>(routine, f, inputs);
    check_int(p);
    blas3_check_result r;
    const double u = std::ldexp(1.0, -dtype_traits(dtype_of<T>()).mantissa_bits);
    const bool solves = routine == blas3_routine::trsm || routine == blas3_routine::trmm;
    const bool rank_k = routine == blas3_routine::syrk || routine == blas3_routine::syr2k ||
                        routine == blas3_routine::herk || routine == blas3_routine::her2k;
    const index_t order = rank_k ? p.n : (f.side == side::left ? p.m : p.n);
    using W = wide_type_t<T>;
    using B = wide_blas<W>;
    const bool herm = routine == blas3_routine::hemm || routine == blas3_routine::herk || routine == blas3_routine::her2k;
    auto c0 = upcast<T>(host_matrix_view<const T>(inputs.c));
    auto x = upcast<T>(result);
    const W alpha = W(inputs.alpha), beta = W(inputs.beta);
    const blas3_flags& g = p.flags;  // trans normalised (c is t on real data)
    if (routine == blas3_routine::trsm && !p.quick_return && p.reads_ab) {
        // Residual: || op(A) X - alpha B || / (||A|| ||X||), A's referenced triangle.
        r.method = "residual ||op(A)X - alpha B|| / (||A|| ||X||)";
        auto a = upcast<T>(inputs.a);
        double na = 0;
        for (index_t j = 0; j < order; ++j)
            for (index_t i = 0; i < order; ++i) {
                if (!in_triangle(f.uplo, i, j)) continue;
                na += i == j && f.diag == diag::unit ? 1.0 : sq(a(i, j));
            }
        double nx = 0;
        for (const W& v : x.v) {
            nx += sq(v);
            if (!finite(v)) ++r.nonfinite;
        }
        auto y = x;
        B::trmm(g, int(p.m), int(p.n), W(1), a.data(), a.ld(), y.data(), y.ld());
        double nr = 0;
        for (std::size_t i = 0; i < y.v.size(); ++i) nr += sq(W(y.v[i] - alpha * c0.v[i]));
        r.error = nr > 0 ? std::sqrt(nr) / std::max(std::sqrt(na) * std::sqrt(nx), std::numeric_limits<double>::min()) : 0;
        r.tolerance = std::max(16.0, 2.0 * double(order)) * u;
    } else {
        r.method = std::string(is_complex_v<T> ? "complex128" : "float64") + " OpenBLAS on upcast operands";
        auto ref = c0;
        if (!p.quick_return) {
            auto a = upcast<T>(inputs.a);
            decltype(a) b;
            if (!inputs.b.empty()) b = upcast<T>(inputs.b);
            const int m = int(p.m), n = int(p.n), k = int(p.k);
            switch (routine) {
                case blas3_routine::trsm:  // alpha == 0: B <- 0
                case blas3_routine::trmm:
                    if (p.reads_ab) B::trmm(g, m, n, alpha, a.data(), a.ld(), ref.data(), ref.ld());
                    else std::fill(ref.v.begin(), ref.v.end(), W(0));
                    break;
                case blas3_routine::symm:
                case blas3_routine::hemm:
                    if (p.reads_ab) B::symm(herm, g, m, n, alpha, a.data(), a.ld(), b.data(), b.ld(), beta, ref.data(), ref.ld());
                    else for (W& v : ref.v) v = beta == W(0) ? W(0) : W(beta * v);
                    break;
                case blas3_routine::syrk:
                case blas3_routine::herk:
                case blas3_routine::syr2k:
                case blas3_routine::her2k: {
                    const bool two = routine == blas3_routine::syr2k || routine == blas3_routine::her2k;
                    if (p.reads_ab && !two) B::rank_k(herm, g, n, k, alpha, a.data(), a.ld(), beta, ref.data(), ref.ld());
                    else if (p.reads_ab) B::rank_2k(herm, g, n, k, alpha, a.data(), a.ld(), b.data(), b.ld(), beta, ref.data(), ref.ld());
                    else
                        for (index_t j = 0; j < n; ++j)
                            for (index_t i = 0; i < n; ++i) {
                                if (!in_triangle(f.uplo, i, j)) continue;
                                W v = beta == W(0) ? W(0) : W(beta * ref(i, j));
                                if constexpr (is_complex_v<T>)
                                    if (herm && i == j) v = W(v.real());
                                ref(i, j) = v;
                            }
                    break;
                }
                case blas3_routine::potrf: break;  // refused above: factorizations have their own check
            }
        }
        double diff = 0, norm = 0;
        for (index_t j = 0; j < ref.cols; ++j)
            for (index_t i = 0; i < ref.rows; ++i) {
                if (rank_k && !in_triangle(f.uplo, i, j)) {
                    // Bitwise: the element must be what the caller had there.
                    const W before = c0(i, j), now = x(i, j);
                    if (!(before == now || (!finite(before) && !finite(now)))) ++r.changed_outside;
                    continue;
                }
                if (!finite(x(i, j)) && finite(ref(i, j))) ++r.nonfinite;
                if (!finite(ref(i, j))) continue;
                diff += sq(W(x(i, j) - ref(i, j)));
                norm += sq(ref(i, j));
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
    if (routine == blas3_routine::potrf) throw invalid_argument("time_host_blas3: potrf's anchor is OpenBLAS ?potrf (time_host_potrf)");
    const blas3_problem p = describe_blas3<T>(routine, f, inputs);
    check_int(p);
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
    const real_type_t<T> alpha_re = real_type_t<T>(as_scalar(alpha).real()), beta_re = real_type_t<T>(as_scalar(beta).real());
    const blas3_flags& g = p.flags;
    const auto o = CblasColMajor;
    // Scalars as CBLAS takes them: real ones by value, complex ones by address.
    const auto sc = [](const T& v) {
        if constexpr (is_complex_v<T>) return static_cast<const void*>(&v);
        else return v;
    };
    constexpr dtype t = dtype_of<T>();
#define TS_CBLAS(name, ...)                                                 \
    do {                                                                    \
        if constexpr (t == dtype::f32) cblas_s##name(__VA_ARGS__);          \
        else if constexpr (t == dtype::f64) cblas_d##name(__VA_ARGS__);     \
        else if constexpr (t == dtype::c32) cblas_c##name(__VA_ARGS__);    \
        else cblas_z##name(__VA_ARGS__);                                    \
    } while (0)
    const auto run = [&] {
        if (p.quick_return) return;
        switch (routine) {
            case blas3_routine::trsm: TS_CBLAS(trsm, o, cb(g.side), cb(g.uplo), cb(g.trans), cb(g.diag), m, n, sc(alpha), a.data(), lda, c.data(), ldc); break;
            case blas3_routine::trmm: TS_CBLAS(trmm, o, cb(g.side), cb(g.uplo), cb(g.trans), cb(g.diag), m, n, sc(alpha), a.data(), lda, c.data(), ldc); break;
            case blas3_routine::symm: TS_CBLAS(symm, o, cb(g.side), cb(g.uplo), m, n, sc(alpha), a.data(), lda, b.data(), ldb, sc(beta), c.data(), ldc); break;
            case blas3_routine::syrk: TS_CBLAS(syrk, o, cb(g.uplo), cb(g.trans), n, k, sc(alpha), a.data(), lda, sc(beta), c.data(), ldc); break;
            case blas3_routine::syr2k: TS_CBLAS(syr2k, o, cb(g.uplo), cb(g.trans), n, k, sc(alpha), a.data(), lda, b.data(), ldb, sc(beta), c.data(), ldc); break;
            case blas3_routine::hemm:
                if constexpr (t == dtype::c32) cblas_chemm(o, cb(g.side), cb(g.uplo), m, n, &alpha, a.data(), lda, b.data(), ldb, &beta, c.data(), ldc);
                else if constexpr (t == dtype::c64) cblas_zhemm(o, cb(g.side), cb(g.uplo), m, n, &alpha, a.data(), lda, b.data(), ldb, &beta, c.data(), ldc);
                break;
            case blas3_routine::herk:
                if constexpr (t == dtype::c32) cblas_cherk(o, cb(g.uplo), cb(g.trans), n, k, alpha_re, a.data(), lda, beta_re, c.data(), ldc);
                else if constexpr (t == dtype::c64) cblas_zherk(o, cb(g.uplo), cb(g.trans), n, k, alpha_re, a.data(), lda, beta_re, c.data(), ldc);
                break;
            case blas3_routine::her2k:
                if constexpr (t == dtype::c32) cblas_cher2k(o, cb(g.uplo), cb(g.trans), n, k, &alpha, a.data(), lda, b.data(), ldb, beta_re, c.data(), ldc);
                else if constexpr (t == dtype::c64) cblas_zher2k(o, cb(g.uplo), cb(g.trans), n, k, &alpha, a.data(), lda, b.data(), ldb, beta_re, c.data(), ldc);
                break;
            case blas3_routine::potrf: break;  // refused above
        }
    };
#undef TS_CBLAS
    return detail::time_host_anchor("cblas_" + std::string(1, dtype_traits(dtype_of<T>()).blas_prefix) +
                                        std::string(to_string(routine)),
                                    p.flops(), repeat, [&] { std::memcpy(c.data(), c0.data(), c0.size() * sizeof(T)); }, run);
}

#define TILESTREAM_INSTANTIATE(T)                                                                                  \
    template blas3_check_result check_blas3<T>(blas3_routine, const blas3_flags&, const blas3_operands<T>&,        \
                                               host_matrix_view<const T>);                                         \
    template blas_anchor time_host_blas3<T>(blas3_routine, const blas3_flags&, const blas3_operands<T>&, int);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
