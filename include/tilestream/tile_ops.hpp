// Tile operations a device runs on its own memory: GEMM and the diagonal-block kernels of the
// Level 3 routines, one descriptor for all of them, so a backend adds kernels without new
// interface methods (device::execute, device::supports).
#pragma once

#include <tilestream/kernels.hpp>
#include <tilestream/types.hpp>

#include <complex>
#include <cstddef>
#include <string_view>

namespace tilestream {

/// Where the triangular or symmetric matrix stands in a product: op(A) X (left) or X op(A) (right).
enum class side { left, right };
/// Which triangle of a triangular, symmetric or Hermitian matrix is stored (and, for C of the
/// SYRK family, written).
enum class uplo { lower, upper };
/// Whether a triangular matrix has ones on its diagonal (not stored, never read).
enum class diag { non_unit, unit };

std::string_view to_string(side s) noexcept;
std::string_view to_string(uplo u) noexcept;
std::string_view to_string(diag d) noexcept;
/// "left"/"l", "right"/"r" (case-insensitive); throws invalid_argument otherwise.
side parse_side(std::string_view s);
/// "lower"/"l", "upper"/"u".
uplo parse_uplo(std::string_view s);
/// "non-unit"/"n", "unit"/"u".
diag parse_diag(std::string_view s);

/// The operations a device may run on tiles in its memory. `gemm` is every off-diagonal update;
/// the others are the diagonal blocks of the Level 3 routines (BLAS semantics, below) and the
/// factorizations' panels and diagonal tiles.
enum class tile_kind {
    gemm, syrk, herk, syr2k, her2k, symm, hemm, trmm, trsm,
    potrf,        // Cholesky's diagonal tile (LAPACK semantics)
    getrf, laswp  // LU's panel and row interchanges (LAPACK semantics, below)
};
/// How many tile kinds there are (tables indexed by a kind's value).
inline constexpr std::size_t tile_kind_count = std::size_t(tile_kind::laswp) + 1;
std::string_view to_string(tile_kind k) noexcept;

/// One matrix operand of a tile operation: element (i, j) at data[i * ld + j] (row-major) or
/// data[i + j * ld] (column-major), in the executing device's memory.
struct tile_matrix {
    const void* data = nullptr;
    index_t ld = 1;
    layout lay = layout::col_major;
};

/// One tile operation, with the reference BLAS's semantics (C is the written operand):
///   gemm   C(m x n) = alpha op(A)(m x k) op(B)(k x n) + beta C
///   syrk   C(n x n) = alpha op(A) op(A)^T + beta C, op(A) n x k, only the `uplo` triangle of C
///   herk   as syrk with ^H; alpha, beta real; the imaginary parts of C's diagonal become zero
///   syr2k  C(n x n) = alpha op(A) op(B)^T + alpha op(B) op(A)^T + beta C, `uplo` triangle only
///   her2k  C = alpha op(A) op(B)^H + conj(alpha) op(B) op(A)^H + beta C, beta real
///   symm   C(m x n) = alpha A B + beta C (left; A m x m) or alpha B A + beta C (right; A n x n),
///          A symmetric with its `uplo` triangle stored; hemm: Hermitian
///   trmm   C(m x n) = alpha op(A) C (left; A m x m) or alpha C op(A) (right), A triangular
///   trsm   solves op(A) X = alpha C (left) or X op(A) = alpha C (right); C <- X
///   getrf  C(m x n) = P L U in place (LAPACK's ?getrf: partial pivoting, the first largest |x| (complex:
///          |re| + |im|) of each column); B (1 x min(m, n), C's type) gets the pivots, 1-based
///          rows of C, as real values; an exactly zero pivot leaves its column unscaled
///   laswp  C(m x n): for i in [0, k), rows i and piv(i) - 1 of C swapped in turn (LAPACK's ?laswp
///          with incx 1), piv(i) the real part of A(0, i) (A 1 x k)
///   potrf  C(n x n) <- its Cholesky factor (LAPACK ?potrf): L with C = L L^H (lower) or U with
///          C = U^H U (upper), only the `uplo` triangle read and written; the first non-positive
///          pivot's 1-based index within the tile (0 when none) is written to *info
/// beta == 0 never reads C; alpha == 0 never reads A or B (trmm/trsm: C <- 0). syrk-family ops
/// use n and k (m is ignored), trans_a for op(A) (and op(B)). getrf and laswp always read C and
/// ignore the scalars.
struct tile_op {
    tile_kind kind = tile_kind::gemm;
    dtype type = dtype::f32;
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    tilestream::side side = tilestream::side::left;
    tilestream::uplo uplo = tilestream::uplo::lower;
    op trans_a = op::n, trans_b = op::n;
    tilestream::diag diag = tilestream::diag::non_unit;
    index_t m = 0, n = 0, k = 0;
    std::complex<double> alpha{1.0}, beta{0.0};
    tile_matrix a, b, c;
    /// potrf: where the kernel writes LAPACK's info for the tile (host memory; null: not reported).
    int* info = nullptr;

    /// Whether the operation reads A (and B): alpha != 0 and, for products, k > 0.
    bool reads_ab() const;
    /// Whether it reads C: trmm/trsm when alpha != 0, the others when beta != 0.
    bool reads_c() const;
    /// Floating-point operations (a real multiply-add 2, a complex one 8), for rates and traces.
    double flops() const;

private:
    double multiply_adds2(double m, double n, double k) const;  ///< twice the multiply-adds
};

}  // namespace tilestream
