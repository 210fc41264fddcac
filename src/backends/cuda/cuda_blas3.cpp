// The Level 3 diagonal blocks on CUDA devices through cuBLAS (vendor kernel, real types): trsm,
// trmm (in place: C passed as both B and its output), symm, syrk, syr2k. cuBLAS does not read C when
// beta = 0.
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_device.hpp"

#include <tilestream/error.hpp>

namespace tilestream::cuda {

namespace {

using ::tilestream::detail::engine::blas_trans;

cublasSideMode_t side_of(side s) { return s == side::left ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT; }
cublasFillMode_t fill_of(uplo u) { return u == uplo::lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER; }
cublasDiagType_t diag_of(diag d) { return d == diag::unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT; }
cublasOperation_t op_of(blas_trans t) {
    return t == blas_trans::n ? CUBLAS_OP_N : t == blas_trans::t ? CUBLAS_OP_T : CUBLAS_OP_C;
}

template <class T>
void run_typed(cublasHandle_t h, const ::tilestream::detail::engine::column_major_tile& r, const std::string& id) {
    constexpr bool f = std::is_same_v<T, float>;
    const T alpha = T(r.alpha.real()), beta = T(r.beta.real());
    const T* a = static_cast<const T*>(r.a);
    const T* b = static_cast<const T*>(r.b);
    T* c = static_cast<T*>(r.c);
    const int m = int(r.m), n = int(r.n), k = int(r.k), lda = int(r.lda), ldb = int(r.ldb), ldc = int(r.ldc);
    switch (r.kind) {
        case tile_kind::trsm:
            if constexpr (f) TS_CUDA_CHECK(cublasStrsm(h, side_of(r.side_), fill_of(r.uplo_), op_of(r.trans), diag_of(r.diag_), m, n, &alpha, a, lda, c, ldc), id);
            else TS_CUDA_CHECK(cublasDtrsm(h, side_of(r.side_), fill_of(r.uplo_), op_of(r.trans), diag_of(r.diag_), m, n, &alpha, a, lda, c, ldc), id);
            return;
        case tile_kind::trmm:
            if constexpr (f) TS_CUDA_CHECK(cublasStrmm(h, side_of(r.side_), fill_of(r.uplo_), op_of(r.trans), diag_of(r.diag_), m, n, &alpha, a, lda, c, ldc, c, ldc), id);
            else TS_CUDA_CHECK(cublasDtrmm(h, side_of(r.side_), fill_of(r.uplo_), op_of(r.trans), diag_of(r.diag_), m, n, &alpha, a, lda, c, ldc, c, ldc), id);
            return;
        case tile_kind::symm:
            if constexpr (f) TS_CUDA_CHECK(cublasSsymm(h, side_of(r.side_), fill_of(r.uplo_), m, n, &alpha, a, lda, b, ldb, &beta, c, ldc), id);
            else TS_CUDA_CHECK(cublasDsymm(h, side_of(r.side_), fill_of(r.uplo_), m, n, &alpha, a, lda, b, ldb, &beta, c, ldc), id);
            return;
        case tile_kind::syrk:
            if constexpr (f) TS_CUDA_CHECK(cublasSsyrk(h, fill_of(r.uplo_), op_of(r.trans), n, k, &alpha, a, lda, &beta, c, ldc), id);
            else TS_CUDA_CHECK(cublasDsyrk(h, fill_of(r.uplo_), op_of(r.trans), n, k, &alpha, a, lda, &beta, c, ldc), id);
            return;
        case tile_kind::syr2k:
            if constexpr (f) TS_CUDA_CHECK(cublasSsyr2k(h, fill_of(r.uplo_), op_of(r.trans), n, k, &alpha, a, lda, b, ldb, &beta, c, ldc), id);
            else TS_CUDA_CHECK(cublasDsyr2k(h, fill_of(r.uplo_), op_of(r.trans), n, k, &alpha, a, lda, b, ldb, &beta, c, ldc), id);
            return;
        default:
            throw invalid_argument(id + ": no cuBLAS tile kernel for " + std::string(to_string(r.kind)));
    }
}

}  // namespace

void run_cublas_tile(cublasHandle_t h, const ::tilestream::detail::engine::column_major_tile& r, dtype type, const std::string& device_id) {
    if (type == dtype::f32) run_typed<float>(h, r, device_id);
    else if (type == dtype::f64) run_typed<double>(h, r, device_id);
    else throw invalid_argument(device_id + ": no cuBLAS tile kernel for " + std::string(to_string(type)));
}

bool cuda_device::supports(tile_kind kind, dtype type, gemm_kernel k) const {
    if (kind == tile_kind::gemm) return supports(k);
    const bool real = type == dtype::f32 || type == dtype::f64;
    switch (kind) {
        case tile_kind::syrk:
        case tile_kind::syr2k:
        case tile_kind::symm:
        case tile_kind::trmm:
        case tile_kind::trsm: return k == gemm_kernel::vendor && real;
        default: return false;
    }
}

}  // namespace tilestream::cuda
