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

/// How a BLAS reads an operand: as stored, transposed, conjugate-transposed (CBLAS_TRANSPOSE,
/// cublasOperation_t, CLBlastTranspose), or conjugated without a transpose, which only OpenBLAS
/// accepts (CblasConjNoTrans); cuBLAS and CLBlast have no such flag.
enum class blas_trans { none, trans, conj_trans, conj_none };
std::string_view to_string(blas_trans t) noexcept;

/// The op a kernel applies to an operand of type t: o itself, except that conjugating real data
/// changes nothing (op::c reads as op::t).
constexpr op operand_op(dtype t, op o) noexcept { return o == op::c && !is_complex(t) ? op::t : o; }

/// One matrix operand as a kernel reads it, SLATE's Tile without the data: X is stored in layout
/// `stored` with leading dimension `ld`, and the kernel reads op(X), which is rows x cols (X itself
/// is cols x rows when op transposes). This is the one place where strides, stored extents, tile
/// rectangles and BLAS flags are derived from op and layout; kernels, the engine, the BLAS
/// mappings and the verifier all ask it.
struct operand_desc {
    op o = op::n;
    layout stored = layout::row_major;
    index_t ld = 1;
    index_t rows = 0, cols = 0;  ///< extents of op(X)

    constexpr bool transposed() const noexcept { return is_transposed(o); }
    constexpr bool conjugated() const noexcept { return is_conjugated(o); }
    /// Extents of X as stored.
    constexpr index_t stored_rows() const noexcept { return transposed() ? cols : rows; }
    constexpr index_t stored_cols() const noexcept { return transposed() ? rows : cols; }
    /// op(X)(i, j) is the element at i * row_stride() + j * col_stride() of X's storage (its
    /// conjugate when conjugated()).
    constexpr index_t row_stride() const noexcept { return unit_along_rows() ? 1 : ld; }
    constexpr index_t col_stride() const noexcept { return unit_along_rows() ? ld : 1; }
    constexpr index_t offset(index_t i, index_t j) const noexcept { return i * row_stride() + j * col_stride(); }
    /// The layout in which op(X) lies in memory: X's, flipped by a transpose.
    constexpr layout op_layout() const noexcept {
        return transposed() == (stored == layout::row_major) ? layout::col_major : layout::row_major;
    }

    /// A block of op(X), in X's storage coordinates: the first stored row and column and the
    /// stored extents of op(X)'s nr x nc block at (i, j).
    struct stored_rect {
        index_t row = 0, col = 0, rows = 0, cols = 0;
    };
    constexpr stored_rect stored_block(index_t i, index_t j, index_t nr, index_t nc) const noexcept {
        return transposed() ? stored_rect{j, i, nc, nr} : stored_rect{i, j, nr, nc};
    }

    /// How a BLAS called in `order` (C's layout) reads op(X), with a leading dimension its argument
    /// checks accept. The flag transposes when op(X) lies in the other layout, and conjugates when
    /// op conjugates. The BLAS's stored matrix has the same lines as X, so X's own ld is legal;
    /// only a single line (where ld never steps) gets the least value the BLAS accepts.
    struct blas_view {
        blas_trans trans = blas_trans::none;
        index_t ld = 1;
        index_t min_ld = 1;  ///< the least ld the BLAS accepts (ld below it: the operand is malformed)
    };
    blas_view for_blas(layout order) const noexcept;

private:
    // Unit stride along the rows of op(X) (i.e. between op(X)(i, j) and op(X)(i + 1, j)): op(X)
    // is column-major in memory.
    constexpr bool unit_along_rows() const noexcept { return op_layout() == layout::col_major; }
};

/// C <- alpha * op(A) * op(B) + beta * C on buffers in one device's memory space.
/// A is stored as rows_a x cols_a with layout_a and lda (op(A) is m x k), likewise B (k x n);
/// C is m x n. beta == 0 never reads C; alpha == 0 never reads A or B. alpha and beta are complex
/// doubles for every type (a real type uses the real parts: the planner refuses an imaginary part
/// there); conjugating ops (op::c) conjugate complex operands and equal op::t on real ones.
struct gemm_call {
    dtype type = dtype::f32;
    op op_a = op::n, op_b = op::n;
    index_t m = 0, n = 0, k = 0;
    scalar alpha = 1.0, beta = 0.0;
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

    /// The operands as kernels read them: op(A) m x k, op(B) k x n, C m x n (op n). On a real
    /// type op::c is op::t (operand_op), so only complex operands are ever conjugated.
    operand_desc a_desc() const { return {operand_op(type, op_a), layout_a, lda, m, k}; }
    operand_desc b_desc() const { return {operand_op(type, op_b), layout_b, ldb, k, n}; }
    operand_desc c_desc() const { return {op::n, layout_c, ldc, m, n}; }
    /// Strides of op(A)(i, p) = a[i * a_row_stride() + p * a_col_stride()], likewise B and C.
    index_t a_row_stride() const { return a_desc().row_stride(); }
    index_t a_col_stride() const { return a_desc().col_stride(); }
    index_t b_row_stride() const { return b_desc().row_stride(); }
    index_t b_col_stride() const { return b_desc().col_stride(); }
    index_t c_row_stride() const { return c_desc().row_stride(); }
    index_t c_col_stride() const { return c_desc().col_stride(); }
    /// Real floating-point operations: 2mnk, 8mnk for complex types.
    double flops() const {
        return double(dtype_traits(type).flops_per_multiply_add) * double(m) * double(n) * double(k);
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
