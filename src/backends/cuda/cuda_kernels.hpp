// Host-side launchers of the CUDA backend's own kernels (naive and tiled GEMM, C scaling, Jacobi).
// Each launches on `stream` of the current device and returns the launch status; the caller has
// made the right device current and checks the status.
#pragma once

#include <tilestream/kernels.hpp>

#include <cuda_runtime.h>

namespace tilestream::cuda {

/// The column-major product a BLAS is asked for to compute a gemm_call without copies:
/// Z (rows x cols, leading dimension ldz = the call's ldc) <- alpha*opx(X)*opy(Y) + beta*Z.
/// A column-major C is computed as is (X = A, Y = B); a row-major C as its transpose,
/// C^T = op(B)^T op(A)^T (X = B, Y = A). Every tilestream operand has one unit stride, so a
/// transpose flag describes it.
struct column_major_gemm {
    bool trans_x = false, trans_y = false;
    index_t rows = 0, cols = 0, k = 0;
    const void* x = nullptr;
    index_t ldx = 1;
    const void* y = nullptr;
    index_t ldy = 1;
    index_t ldz = 1;
};

inline column_major_gemm as_column_major(const gemm_call& call) {
    // When a matrix has a single row or column both strides can be 1: either reading is right.
    const bool a_kc = call.a_col_stride() == 1;  // op(A) contiguous along k
    const bool b_kc = call.b_row_stride() == 1;  // op(B) contiguous along k
    const index_t lda = a_kc ? call.a_row_stride() : call.a_col_stride();
    const index_t ldb = b_kc ? call.b_col_stride() : call.b_row_stride();
    column_major_gemm g;
    g.k = call.k;
    g.ldz = call.ldc;
    if (call.layout_c == layout::col_major) {
        // op(A) is column-major when contiguous along m; else op(A)^T is (k x m, ld lda).
        g.trans_x = a_kc, g.rows = call.m, g.x = call.a, g.ldx = lda;
        g.trans_y = !b_kc, g.cols = call.n, g.y = call.b, g.ldy = ldb;
    } else {
        // X = op(B)^T (n x k) is column-major when op(B) is contiguous along n;
        // Y = op(A)^T (k x m) is column-major when op(A) is contiguous along k.
        g.trans_x = b_kc, g.rows = call.n, g.x = call.b, g.ldx = ldb;
        g.trans_y = !a_kc, g.cols = call.m, g.y = call.a, g.ldy = lda;
    }
    return g;
}

/// C <- alpha*op(A)*op(B) + beta*C, one thread per element of C. Requires m, n, k > 0, alpha != 0.
cudaError_t launch_gemm_naive(const gemm_call& call, cudaStream_t stream);

/// Shared-memory tiled GEMM with register blocking (128x128x8 tiles for f32, 64x64x8 for f64).
/// Requires m, n, k > 0, alpha != 0.
cudaError_t launch_gemm_tiled(const gemm_call& call, cudaStream_t stream);

/// C <- beta*C without reading A or B (the alpha == 0 or k == 0 case); beta == 0 writes zeros
/// without reading C. Requires m, n > 0.
cudaError_t launch_gemm_scale_c(const gemm_call& call, cudaStream_t stream);

/// One Jacobi sweep (see jacobi_call) with the residual reduced into *call.residual when set.
/// Requires a non-empty range.
cudaError_t launch_jacobi_sweep(const jacobi_call& call, cudaStream_t stream);

}  // namespace tilestream::cuda
