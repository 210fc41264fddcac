// Checking a Cholesky factor or a Hermitian solve in float64 (complex128) OpenBLAS, and timing
// LAPACK's ?potrf as the anchor of a run (cholesky.hpp).
#include <tilestream/cholesky.hpp>
#include <tilestream/error.hpp>

#include "core/lapack_calls.hpp"
#include "core/check/host_anchor.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace tilestream {

namespace {

bool in_triangle(uplo u, index_t i, index_t j) { return u == uplo::lower ? i >= j : i <= j; }

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
template <class W>
W conj_of(W x) {
    if constexpr (std::is_same_v<W, double>) return x;
    else return std::conj(x);
}

void check_order(index_t n, const char* what) {
    if (n > INT_MAX) throw invalid_argument(std::string(what) + ": order beyond CBLAS's 32-bit integers");
}

/// A's element (i, j) of the whole Hermitian matrix from its `u` triangle, in W.
template <class T, class W = wide_type_t<T>>
W hermitian_at(uplo u, host_matrix_view<const T> a, index_t i, index_t j) {
    if (i == j) {
        if constexpr (is_complex_v<T>) return W(double(a(i, i).real()));
        else return W(a(i, i));
    }
    return in_triangle(u, i, j) ? W(a(i, j)) : conj_of(W(a(j, i)));
}

double unit_roundoff(dtype t) { return std::ldexp(1.0, -dtype_traits(t).mantissa_bits); }

}  // namespace

template <class T>
blas3_check_result check_potrf(uplo u, host_matrix_view<const T> a, host_matrix_view<const T> factor) {
    using W = wide_type_t<T>;
    const auto t0 = std::chrono::steady_clock::now();
    const detail::host_blas_threads all_threads;  // the reference on every core
    const index_t n = a.rows();
    if (a.cols() != n || factor.rows() != n || factor.cols() != n)
        throw dimension_mismatch("check_potrf: A and its factor must be square and of one order");
    check_order(n, "check_potrf");
    blas3_check_result r;
    r.method = "||A - " + std::string(u == uplo::lower ? "L L^H" : "U^H U") + "||_F / (||A||_F n u)";
    // The factor, column-major in W with zeros outside its triangle; R = F F^H (lower) or F^H F.
    std::vector<W> f(std::size_t(n * n), W(0)), prod(std::size_t(n * n), W(0));
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < n; ++i) {
            if (in_triangle(u, i, j)) {
                f[std::size_t(i + j * n)] = W(factor(i, j));
                if (!finite(W(factor(i, j)))) ++r.nonfinite;
            } else if (std::memcmp(&factor(i, j), &a(i, j), sizeof(T)) != 0) {
                ++r.changed_outside;
            }
        }
    const int ni = int(std::max<index_t>(n, 1));
    if (n > 0) {
        const CBLAS_UPLO ul = u == uplo::lower ? CblasLower : CblasUpper;
        // lower: F F^H (F n x n, no transpose); upper: F^H F.
        if constexpr (std::is_same_v<W, double>)
            cblas_dsyrk(CblasColMajor, ul, u == uplo::lower ? CblasNoTrans : CblasTrans, int(n), int(n), 1.0, f.data(), ni, 0.0,
                        prod.data(), ni);
        else
            cblas_zherk(CblasColMajor, ul, u == uplo::lower ? CblasNoTrans : CblasConjTrans, int(n), int(n), 1.0, f.data(), ni,
                        0.0, prod.data(), ni);
    }
    double diff = 0, norm = 0;
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < n; ++i) {
            if (!in_triangle(u, i, j)) continue;
            const W want = hermitian_at<T>(u, a, i, j);
            diff += sq(W(prod[std::size_t(i + j * n)] - want));
            norm += sq(want);
        }
    const double scale = std::sqrt(norm) * double(std::max<index_t>(n, 1)) * unit_roundoff(dtype_of<T>());
    r.error = diff > 0 ? std::sqrt(diff) / std::max(scale, std::numeric_limits<double>::min()) : 0.0;
    if (!std::isfinite(r.error)) r.error = std::numeric_limits<double>::infinity();
    r.tolerance = 30.0;
    r.passed = r.error <= r.tolerance && r.changed_outside == 0 && r.nonfinite == 0;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

template <class T>
blas3_check_result check_solve_hermitian(uplo u, host_matrix_view<const T> a, host_matrix_view<const T> b,
                                         host_matrix_view<const T> x) {
    using W = wide_type_t<T>;
    const auto t0 = std::chrono::steady_clock::now();
    const detail::host_blas_threads all_threads;  // the reference on every core
    const index_t n = a.rows(), nrhs = b.cols();
    if (a.cols() != n || b.rows() != n || x.rows() != n || x.cols() != nrhs)
        throw dimension_mismatch("check_solve_hermitian: A must be square, B and X of its order and one shape");
    check_order(std::max(n, nrhs), "check_solve_hermitian");
    blas3_check_result r;
    r.method = "||A X - B||_F / (||A||_F ||X||_F n u)";
    std::vector<W> aw(std::size_t(n * n)), xw(std::size_t(n * nrhs)), res(std::size_t(n * nrhs));
    double na = 0, nx = 0;
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < n; ++i) {
            aw[std::size_t(i + j * n)] = hermitian_at<T>(u, a, i, j);
            na += sq(aw[std::size_t(i + j * n)]);
        }
    for (index_t j = 0; j < nrhs; ++j)
        for (index_t i = 0; i < n; ++i) {
            xw[std::size_t(i + j * n)] = W(x(i, j));
            res[std::size_t(i + j * n)] = W(b(i, j));
            nx += sq(W(x(i, j)));
            if (!finite(W(x(i, j)))) ++r.nonfinite;
        }
    if (n > 0 && nrhs > 0) {
        const int ni = int(n);
        if constexpr (std::is_same_v<W, double>)
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, ni, int(nrhs), ni, 1.0, aw.data(), ni, xw.data(), ni, -1.0,
                        res.data(), ni);
        else {
            const W one(1.0), minus(-1.0);
            cblas_zgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, ni, int(nrhs), ni, &one, aw.data(), ni, xw.data(), ni, &minus,
                        res.data(), ni);
        }
    }
    double nr = 0;
    for (const W& v : res) nr += sq(v);
    const double scale = std::sqrt(na) * std::sqrt(nx) * double(std::max<index_t>(n, 1)) * unit_roundoff(dtype_of<T>());
    r.error = nr > 0 ? std::sqrt(nr) / std::max(scale, std::numeric_limits<double>::min()) : 0.0;
    if (!std::isfinite(r.error)) r.error = std::numeric_limits<double>::infinity();
    r.tolerance = 30.0;
    r.passed = r.error <= r.tolerance && r.nonfinite == 0;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

template <class T>
blas_anchor time_host_potrf(uplo u, host_matrix_view<const T> a, int repeat) {
    const index_t n = a.rows();
    if (a.cols() != n) throw dimension_mismatch("time_host_potrf: A must be square");
    check_order(n, "time_host_potrf");
    std::vector<T> a0(std::size_t(n * n)), work(std::size_t(n * n));
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < n; ++i) a0[std::size_t(i + j * n)] = a(i, j);
    const char c = u == uplo::lower ? 'L' : 'U';
    const int ni = int(n), ld = int(std::max<index_t>(n, 1));
    const double flops = double(dtype_traits(dtype_of<T>()).flops_per_multiply_add) / 2.0 * double(n) * double(n) * double(n) / 3.0;
    return detail::time_host_anchor(
        "LAPACK " + std::string(1, dtype_traits(dtype_of<T>()).blas_prefix) + "potrf", flops, repeat,
        [&] { std::memcpy(work.data(), a0.data(), a0.size() * sizeof(T)); },
        [&] { detail::lapack_potrf<T>(c, ni, work.data(), ld); });
}

#define TILESTREAM_INSTANTIATE(T)                                                                                  \
    template blas3_check_result check_potrf<T>(uplo, host_matrix_view<const T>, host_matrix_view<const T>);      \
    template blas3_check_result check_solve_hermitian<T>(uplo, host_matrix_view<const T>, host_matrix_view<const T>, \
                                                         host_matrix_view<const T>);                           \
    template blas_anchor time_host_potrf<T>(uplo, host_matrix_view<const T>, int);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
