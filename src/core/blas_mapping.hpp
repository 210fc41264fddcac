// How a gemm_call is handed to a column-major BLAS (cuBLAS, CLBlast in column-major mode) without
// copies: transpose flags and leading dimensions that the BLAS's argument checks accept.
#pragma once

#include <tilestream/kernels.hpp>

#include <string>

namespace tilestream {

/// The column-major product a BLAS is asked for to compute a gemm_call:
/// Z (rows x cols, leading dimension ldz) <- alpha*opx(X)*opy(Y) + beta*Z, where opx(X) is
/// rows x k and opy(Y) is k x cols. A column-major C is computed as is (X = A, Y = B, Z = C); a
/// row-major C as its transpose, C^T = op(B)^T op(A)^T (X = B, Y = A, Z = C^T). opx transposes when
/// trans_x and conjugates when conj_x (cuBLAS's and CLBlast's 'C' when both); conj_x without trans_x
/// is a conjugate that is not transposed, which neither accepts (see expressible()).
struct column_major_gemm {
    bool trans_x = false, trans_y = false;
    bool conj_x = false, conj_y = false;
    index_t rows = 0, cols = 0, k = 0;
    const void* x = nullptr;
    index_t ldx = 1;
    const void* y = nullptr;
    index_t ldy = 1;
    void* z = nullptr;
    index_t ldz = 1;
    /// Every flag is N, T or C: a BLAS without a conjugate-only flag (cuBLAS, CLBlast) can run it.
    bool expressible() const { return (trans_x || !conj_x) && (trans_y || !conj_y); }
};

/// The mapping of a call (sizes and strides as the call describes them; nothing is read): each
/// operand's reading is operand_desc::for_blas in C's layout, which a column-major BLAS applies to
/// the swapped operands of a row-major C unchanged.
column_major_gemm as_column_major(const gemm_call& call);

/// "" when g satisfies the argument rules column-major BLAS GEMMs document (cuBLAS, CLBlast,
/// reference BLAS: sizes >= 0, lda >= max(1, transa ? k : m), ldb >= max(1, transb ? n : k),
/// ldc >= max(1, m)); otherwise which argument breaks which rule, for an error message.
std::string column_major_gemm_violation(const column_major_gemm& g);

}  // namespace tilestream
