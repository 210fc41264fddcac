// cuBLAS's (and cuSOLVER's) names for tilestream's BLAS options and element types, shared by the
// Level 3 tiles (cuda_blas3.cpp) and Cholesky's (cuda_solver.cpp).
#pragma once

#include <tilestream/tile_ops.hpp>
#include <tilestream/types.hpp>

#include "core/engine/tile_mapping.hpp"

#include <cublas_v2.h>

#include <complex>
#include <type_traits>

namespace tilestream::cuda {

inline cublasSideMode_t side_of(side s) { return s == side::left ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT; }
inline cublasFillMode_t fill_of(uplo u) { return u == uplo::lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER; }
inline cublasDiagType_t diag_of(diag d) { return d == diag::unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT; }
inline cublasOperation_t op_of(blas_trans t) {
    return t == blas_trans::none ? CUBLAS_OP_N : t == blas_trans::trans ? CUBLAS_OP_T : CUBLAS_OP_C;
}

/// cuBLAS's element type of T (cuComplex and cuDoubleComplex share std::complex's layout).
template <class T>
using cu_t = std::conditional_t<std::is_same_v<T, std::complex<float>>, cuComplex,
                                std::conditional_t<std::is_same_v<T, std::complex<double>>, cuDoubleComplex, T>>;

}  // namespace tilestream::cuda
