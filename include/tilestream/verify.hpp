// Random test data and result checking: fills, relative errors, the tolerance --check uses and the
// GEMM check itself (sequential reference, blocked OpenBLAS float64 reference or Freivalds).
#pragma once

#include <tilestream/kernels.hpp>
#include <tilestream/matrix.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace tilestream {

/// Fills m with uniform values in [-1, 1] from a seeded generator (deterministic per seed); both
/// parts of complex elements, none of them (nearly) zero.
template <class T>
void fill_random(host_matrix_view<T> m, std::uint64_t seed);

/// Fills m with a quiet NaN ("poison"; NaN in both parts of complex elements), so unwritten
/// elements are caught.
template <class T>
void fill_nan(host_matrix_view<T> m);

/// ||x - ref||_F / ||ref||_F (ref in double precision: double, or std::complex<double> for complex
/// T); NaN in x gives +inf; ref of norm 0 gives ||x||_F.
template <class T>
double relative_frobenius_error(host_matrix_view<const T> x, host_matrix_view<const wide_type_t<T>> ref);

/// The relative Frobenius error of a GEMM result c against alpha*op(A)*op(B) + beta*c0 computed by
/// the sequential reference in float64 from the same operands (c0 is not read when beta == 0).
/// The tests' oracle: slow (a sequential triple loop); check_gemm is the fast, positional check.
template <class T>
double gemm_relative_error(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<const T> c0, host_matrix_view<const T> c);

/// Tolerance on the relative Frobenius error of a GEMM with inner dimension k:
/// 8 * sqrt(k) * unit roundoff (TF32's 2^-11 in tf32 mode), at least 16 units; complex types count
/// 2k terms (a complex multiply-add adds two real products to each part).
double gemm_tolerance(dtype t, index_t k, math_mode m = math_mode::strict);

/// How check_gemm compares C with alpha*op(A)*op(B) + beta*C0 (all in float64).
enum class gemm_check_method {
    reference,  ///< the sequential reference on upcast operands (small problems)
    blas,       ///< OpenBLAS dgemm on upcast blocks of the operands, a few MiB per thread
    freivalds,  ///< random projections C x and y^T C against the operands' (no product formed)
};
std::string_view to_string(gemm_check_method m) noexcept;

/// Problems up to this m*n*k (2^22, about 161^3) use the sequential reference.
inline constexpr double gemm_check_reference_max_mnk = 4194304.0;
/// Problems up to this m*n*k (2^36, 4096^3) use the OpenBLAS reference; larger ones Freivalds.
inline constexpr double gemm_check_blas_max_mnk = 68719476736.0;
/// Random +-1 vectors Freivalds applies from each side (C x and y^T C).
inline constexpr int gemm_check_freivalds_vectors = 4;

/// The method check_gemm picks for an m x n x k problem (see the limits above).
gemm_check_method choose_gemm_check(index_t m, index_t n, index_t k);

/// The tolerance a method applies: gemm_tolerance(t, k, m) for the two references; Freivalds adds
/// 8 * (sqrt(n) + sqrt(k)) * 2^-53, the float64 rounding of the projections it computes itself.
double gemm_check_tolerance(gemm_check_method method, dtype t, index_t n, index_t k,
                            math_mode m = math_mode::strict);

/// The outcome of check_gemm.
struct gemm_check_result {
    gemm_check_method method = gemm_check_method::reference;
    /// Relative Frobenius error over the elements finite in both C and the reference (Freivalds:
    /// its estimate, the largest residual of the projections over ||C||_F of those elements).
    double error = 0;
    double tolerance = 0;
    /// Elements that are NaN where the reference is NaN, or the same infinity.
    index_t nonfinite_matched = 0;
    /// Elements whose class (finite, NaN, +inf, -inf) differs from the reference's.
    index_t nonfinite_mismatched = 0;
    /// The first such element, e.g. "C(3, 5) is nan where the reference is 1.25".
    std::string first_mismatch;
    /// Wall-clock seconds the check took.
    double seconds = 0;

    bool passed() const { return nonfinite_mismatched == 0 && error <= tolerance; }
    /// One line: "relative Frobenius error E (tolerance T, METHOD, S s) ...: OK|FAILED".
    std::string summary() const;
};

/// Checks a GEMM result c against alpha*op(A)*op(B) + beta*c0 in float64 (complex: complex double)
/// with the method choose_gemm_check picks (c0 is not read when beta == 0; A and B are not read when
/// alpha == 0). NaN and infinities are compared by position: C must hold NaN exactly where the
/// reference does and the same infinity where it has one (a complex element: non-finite exactly
/// where the reference is; which part is NaN or infinite is the implementation's, as BLAS leaves
/// it); the error is over the elements finite in both. Complex Freivalds vectors have entries
/// +-1 and +-i.
template <class T>
gemm_check_result check_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                             T beta, host_matrix_view<const T> c0, host_matrix_view<const T> c,
                             math_mode m = math_mode::strict);

}  // namespace tilestream
