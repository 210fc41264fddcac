// Descriptions of the kernels a device runs: GEMM on device buffers and one Jacobi sweep.
#pragma once

#include <tilestream/types.hpp>

#include <string_view>

namespace tilestream {

/// GEMM kernel families. `reference` is sequential and exists on the host only (the oracle);
/// `naive` computes one output element per work item; `tiled` blocks for caches/shared memory;
/// `vendor` calls the platform BLAS (OpenBLAS on CPUs, cuBLAS on GPUs).
enum class gemm_kernel { reference, naive, tiled, vendor };
std::string_view to_string(gemm_kernel k) noexcept;
gemm_kernel parse_gemm_kernel(std::string_view s);

/// Floating-point mode for f32 GEMM: `strict` is IEEE fp32; `tf32` lets tensor cores round
/// inputs to TF32 (CUDA vendor kernel only; ignored elsewhere).
enum class math_mode { strict, tf32 };
std::string_view to_string(math_mode m) noexcept;
math_mode parse_math_mode(std::string_view s);

/// C <- alpha * op(A) * op(B) + beta * C on buffers in one device's memory space.
/// A is stored as rows_a x cols_a with layout_a and lda (op(A) is m x k), likewise B (k x n);
/// C is m x n. beta == 0 never reads C; alpha == 0 never reads A or B.
struct gemm_call {
    dtype type = dtype::f32;
    op op_a = op::n, op_b = op::n;
    index_t m = 0, n = 0, k = 0;
    double alpha = 1.0, beta = 0.0;
    const void* a = nullptr;
    index_t lda = 1;
    layout layout_a = layout::row_major;
    const void* b = nullptr;
    index_t ldb = 1;
    layout layout_b = layout::row_major;
    void* c = nullptr;
    index_t ldc = 1;
    layout layout_c = layout::row_major;
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;

    /// Strides of op(A)(i, p) = a[i * a_row_stride() + p * a_col_stride()], likewise B and C.
    index_t a_row_stride() const { return stride(layout_a, lda, op_a, true); }
    index_t a_col_stride() const { return stride(layout_a, lda, op_a, false); }
    index_t b_row_stride() const { return stride(layout_b, ldb, op_b, true); }
    index_t b_col_stride() const { return stride(layout_b, ldb, op_b, false); }
    index_t c_row_stride() const { return layout_c == layout::row_major ? ldc : 1; }
    index_t c_col_stride() const { return layout_c == layout::row_major ? 1 : ldc; }
    double flops() const { return 2.0 * double(m) * double(n) * double(k); }

private:
    static index_t stride(layout l, index_t ld, op o, bool row) {
        const bool stored_row = (o == op::n) == row;  // a row of op(X) is a row of X unless transposed
        const bool unit = (l == layout::row_major) != stored_row;
        return unit ? 1 : ld;
    }
};

/// One Jacobi sweep over the points [row_begin, row_end) x [col_begin, col_end) of a part stored
/// row-major with leading dimension ld (halo included): out = 0.25*((N+S)+(W+E)) read from in.
/// When residual is non-null, the sum of (out - in)^2 over the swept points is added to the
/// double it points to (device memory).
struct jacobi_call {
    dtype type = dtype::f32;
    const void* in = nullptr;
    void* out = nullptr;
    index_t ld = 0;
    index_t row_begin = 0, row_end = 0;
    index_t col_begin = 0, col_end = 0;
    double* residual = nullptr;
};

}  // namespace tilestream
