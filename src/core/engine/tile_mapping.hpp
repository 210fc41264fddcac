// A tile operation (any kind but gemm) as one column-major vendor BLAS call: CBLAS (with
// CblasColMajor), cuBLAS and CLBlast all take this form. A row-major C turns the problem into its
// transpose (side and triangle flip); an operand stored the other way from that is read through its
// transpose. Combinations that would need a conjugate without a transpose are not representable
// (complex types with mixed layouts): the engine runs those on the reference kernel.
#pragma once

#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>

#include <complex>
#include <string>

namespace tilestream::detail::engine {

struct column_major_tile {
    bool representable = false;
    std::string why;  ///< when not representable
    tile_kind kind = tile_kind::trsm;
    side side_ = side::left;
    uplo uplo_ = uplo::lower;
    blas_trans trans = blas_trans::none;  ///< none, trans or conj_trans (never conj_none)
    diag diag_ = diag::non_unit;
    index_t m = 0, n = 0, k = 0;  ///< BLAS's m, n (and k for the rank-k kinds) after the mapping
    std::complex<double> alpha{1.0}, beta{0.0};
    const void* a = nullptr;
    index_t lda = 1;
    const void* b = nullptr;
    index_t ldb = 1;
    void* c = nullptr;
    index_t ldc = 1;
};

/// The column-major call equivalent to `op` (kind other than gemm). Leading dimensions are at
/// least what the vendor routines require of the operand's stored shape.
column_major_tile as_column_major(const tile_op& op);

}  // namespace tilestream::detail::engine
