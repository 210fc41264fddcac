// cblas_[sdcz]gemm by value type, and an operand's BLAS flag as CBLAS's: shared by the CPU vendor
// kernel, the OpenBLAS anchor and the float64 check. Private to the library (needs cblas.h).
#pragma once

#include <tilestream/error.hpp>
#include <tilestream/kernels.hpp>

#include <cblas.h>

#include <complex>
#include <string>
#include <type_traits>

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

/// cblas_?gemm for T (sizes already known to fit CBLAS's int).
template <class T>
void cblas_gemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, index_t m, index_t n, index_t k, T alpha,
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

}  // namespace tilestream::detail
