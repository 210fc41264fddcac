// cblas_[sdcz]gemm (and ?gemv for a single row or column of C, ?trsm) by value type, and an operand's BLAS
// flag as CBLAS's: shared by the CPU vendor kernels, the OpenBLAS anchor and the float64 check.
// Private to the library (needs cblas.h).
#pragma once

#include <tilestream/error.hpp>
#include <tilestream/kernels.hpp>

#include <cblas.h>

#include <complex>
#include <string>
#include <type_traits>
#include <utility>

namespace tilestream::detail {

/// The CBLAS flag of a BLAS reading (OpenBLAS accepts CblasConjNoTrans for complex types).
inline CBLAS_TRANSPOSE to_cblas(blas_trans t) noexcept {
    switch (t) {
        case blas_trans::none: return CblasNoTrans;
        case blas_trans::trans: return CblasTrans;
        case blas_trans::conj_trans: return CblasConjTrans;
        case blas_trans::conj_none: return CblasConjNoTrans;
    }
    return CblasNoTrans;
}

/// How one operand is handed to CBLAS in `order`: its flag and a leading dimension CBLAS accepts.
struct cblas_operand {
    CBLAS_TRANSPOSE trans;
    index_t ld;
};
inline cblas_operand cblas_operand_of(const operand_desc& x, layout order, const char* name) {
    const operand_desc::blas_view v = x.for_blas(order);
    if (v.ld < v.min_ld)
        throw invalid_argument(std::string("gemm (vendor): leading dimension of ") + name + " is " +
                               std::to_string(x.ld) + ", below its " + std::to_string(v.min_ld) + "-element lines");
    return {to_cblas(v.trans), v.ld};
}

/// cblas_?gemm for T (sizes already known to fit CBLAS's int): the routine itself, as the anchors
/// of benchmarks call it ("OpenBLAS called directly").
template <class T>
void cblas_xgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, index_t m, index_t n, index_t k, T alpha,
                 const T* a, index_t lda, const T* b, index_t ldb, T beta, T* c, index_t ldc) {
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(order, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    else if constexpr (std::is_same_v<T, double>)
        cblas_dgemm(order, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    else if constexpr (std::is_same_v<T, std::complex<float>>)
        cblas_cgemm(order, ta, tb, int(m), int(n), int(k), &alpha, a, int(lda), b, int(ldb), &beta, c, int(ldc));
    else
        cblas_zgemm(order, ta, tb, int(m), int(n), int(k), &alpha, a, int(lda), b, int(ldb), &beta, c, int(ldc));
}

/// cblas_?trsm for T (sizes already known to fit CBLAS's int; complex alpha by address).
template <class T>
void cblas_xtrsm(CBLAS_ORDER order, CBLAS_SIDE side, CBLAS_UPLO uplo, CBLAS_TRANSPOSE trans, CBLAS_DIAG diag, index_t m,
                 index_t n, T alpha, const T* a, index_t lda, T* b, index_t ldb) {
    if constexpr (std::is_same_v<T, float>)
        cblas_strsm(order, side, uplo, trans, diag, int(m), int(n), alpha, a, int(lda), b, int(ldb));
    else if constexpr (std::is_same_v<T, double>)
        cblas_dtrsm(order, side, uplo, trans, diag, int(m), int(n), alpha, a, int(lda), b, int(ldb));
    else if constexpr (std::is_same_v<T, std::complex<float>>)
        cblas_ctrsm(order, side, uplo, trans, diag, int(m), int(n), &alpha, a, int(lda), b, int(ldb));
    else
        cblas_ztrsm(order, side, uplo, trans, diag, int(m), int(n), &alpha, a, int(lda), b, int(ldb));
}

/// cblas_?gemv for T (sizes already known to fit CBLAS's int).
template <class T>
void cblas_xgemv(CBLAS_ORDER order, CBLAS_TRANSPOSE t, index_t rows, index_t cols, T alpha, const T* a, index_t lda,
                 const T* x, index_t incx, T beta, T* y, index_t incy) {
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemv(order, t, int(rows), int(cols), alpha, a, int(lda), x, int(incx), beta, y, int(incy));
    else if constexpr (std::is_same_v<T, double>)
        cblas_dgemv(order, t, int(rows), int(cols), alpha, a, int(lda), x, int(incx), beta, y, int(incy));
    else if constexpr (std::is_same_v<T, std::complex<float>>)
        cblas_cgemv(order, t, int(rows), int(cols), &alpha, a, int(lda), x, int(incx), &beta, y, int(incy));
    else
        cblas_zgemv(order, t, int(rows), int(cols), &alpha, a, int(lda), x, int(incx), &beta, y, int(incy));
}

/// C <- alpha op(A) op(B) + beta C as a matrix-vector product when C is a single column or row, as
/// numpy runs such products (OpenBLAS's ?gemm is ~2.8x slower than its ?gemv at 1x4096x4096 f32):
/// n == 1 as C's column y <- alpha op(A) x + beta y with x op(B)'s column; m == 1 as C's row by
/// C^T = op(B)^T op(A)^T with x op(A)'s row. gemv conjugates only its matrix, so a conjugated vector
/// operand takes the other form when C is 1x1, else returns false having done nothing. Arguments
/// as cblas_?gemm takes them (valid, alpha != 0, k > 0).
template <class T>
bool cblas_gemv_product(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, index_t m, index_t n, index_t k,
                        T alpha, const T* a, index_t lda, const T* b, index_t ldb, T beta, T* c, index_t ldc) {
    const auto conjugates = [](CBLAS_TRANSPOSE t) { return t == CblasConjTrans || t == CblasConjNoTrans; };
    const auto transposes = [](CBLAS_TRANSPOSE t) { return t == CblasTrans || t == CblasConjTrans; };
    const bool row_major = order == CblasRowMajor;
    const bool column = n == 1 && !conjugates(tb);
    if (!column && !(m == 1 && !conjugates(ta))) return false;
    // x: op(B)(p, 0), or op(A)(0, p): steps of ld where the vector runs across the stored lines.
    const CBLAS_TRANSPOSE tx = column ? tb : ta;
    const index_t ldx = column ? ldb : lda;
    const bool x_across = column ? transposes(tx) != row_major : transposes(tx) == row_major;
    const index_t incx = k == 1 || !x_across ? 1 : ldx;
    // y: C's column (n == 1) or row.
    const index_t len_y = column ? m : n;
    const index_t incy = len_y == 1 || (column != row_major) ? 1 : ldc;
    // G = op(A) (m x k) or op(B)^T (n x k), as gemv reads a stored matrix: its rows x cols, order
    // and flag. op(B)^T is B^T for flag n, B for t, B^H for conj-no-trans, and for c conj(B): B's
    // storage read in the other order (as B^T), conjugate-transposed.
    const CBLAS_TRANSPOSE tg = column ? ta : tb;
    index_t rows = column ? (transposes(tg) ? k : m) : (transposes(tg) ? n : k);
    index_t cols = column ? (transposes(tg) ? m : k) : (transposes(tg) ? k : n);
    CBLAS_ORDER g_order = order;
    CBLAS_TRANSPOSE flag = tg;
    if (!column)
        flag = tg == CblasNoTrans ? CblasTrans : tg == CblasTrans ? CblasNoTrans : tg == CblasConjNoTrans ? CblasConjTrans : tg;
    if (flag == CblasConjNoTrans || (!column && tg == CblasConjTrans)) {
        g_order = row_major ? CblasColMajor : CblasRowMajor;
        std::swap(rows, cols);
        flag = CblasConjTrans;
    }
    if (beta == T(0))
        for (index_t i = 0; i < len_y; ++i) c[i * incy] = T(0);  // gemv's beta == 0 must not read C (NaN)
    cblas_xgemv<T>(g_order, flag, rows, cols, alpha, column ? a : b, column ? lda : ldb, column ? b : a, incx, beta, c,
                   incy);
    return true;
}

/// The vendor kernels' ?gemm for T (sizes already known to fit CBLAS's int): a single row or
/// column of C as ?gemv (cblas_gemv_product), else cblas_?gemm. Every vendor call site takes
/// this one, so a product gives the same bits alone, split over workers or in a batch.
template <class T>
void cblas_gemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, index_t m, index_t n, index_t k, T alpha,
                const T* a, index_t lda, const T* b, index_t ldb, T beta, T* c, index_t ldc) {
    if ((m == 1 || n == 1) && k > 0 && alpha != T(0) &&
        cblas_gemv_product<T>(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
        return;
    cblas_xgemm<T>(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace tilestream::detail
