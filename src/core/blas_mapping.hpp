// How a gemm_call is handed to a column-major BLAS (cuBLAS, CLBlast in column-major mode) without
// copies: transpose flags and leading dimensions that the BLAS's argument checks accept.
#pragma once

#include <tilestream/kernels.hpp>

#include <string>

namespace tilestream {

/// The column-major product a BLAS is asked for to compute a gemm_call:
/// Z (rows x cols, leading dimension ldz) <- alpha*opx(X)*opy(Y) + beta*Z, where opx(X) is
/// rows x k and opy(Y) is k x cols. A column-major C is computed as is (X = A, Y = B, Z = C); a
/// row-major C as its transpose, C^T = op(B)^T op(A)^T (X = B, Y = A, Z = C^T).
struct column_major_gemm {
    bool trans_x = false, trans_y = false;
    index_t rows = 0, cols = 0, k = 0;
    const void* x = nullptr;
    index_t ldx = 1;
    const void* y = nullptr;
    index_t ldy = 1;
    void* z = nullptr;
    index_t ldz = 1;
};

/// One operand as a column-major BLAS sees it: a transpose flag and a leading dimension.
struct column_major_operand {
    bool trans = false;
    index_t ld = 1;
};

/// Reads a rows x cols matrix whose element (i, j) is at i*row_stride + j*col_stride (one of the
/// strides is 1, or the matrix is a single row or column) as a column-major operand. The leading
/// dimension always satisfies the BLAS rule ld >= max(1, stored rows): where the stored matrix has
/// a single column, ld never steps and is raised to that minimum (a minimal row-major n x 1
/// operand has ld 1, which a transposed reading would need to be n).
column_major_operand as_column_major_operand(index_t rows, index_t cols, index_t row_stride,
                                             index_t col_stride);

/// The mapping of a call (sizes and strides as the call describes them; nothing is read).
column_major_gemm as_column_major(const gemm_call& call);

/// "" when g satisfies the argument rules column-major BLAS GEMMs document (cuBLAS, CLBlast,
/// reference BLAS: sizes >= 0, lda >= max(1, transa ? k : m), ldb >= max(1, transb ? n : k),
/// ldc >= max(1, m)); otherwise which argument breaks which rule, for an error message.
std::string column_major_gemm_violation(const column_major_gemm& g);

}  // namespace tilestream
