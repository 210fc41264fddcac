// Random test data and result checking: fills, relative errors and the tolerance --check uses.
#pragma once

#include <tilestream/kernels.hpp>
#include <tilestream/matrix.hpp>

#include <cstdint>

namespace tilestream {

/// Fills m with uniform values in [-1, 1] from a seeded generator (deterministic per seed).
template <class T>
void fill_random(host_matrix_view<T> m, std::uint64_t seed);

/// Fills m with a quiet NaN ("poison"), so unwritten elements are caught.
template <class T>
void fill_nan(host_matrix_view<T> m);

/// ||x - ref||_F / ||ref||_F (ref in double); NaN in x gives +inf; ref of norm 0 gives ||x||_F.
template <class T>
double relative_frobenius_error(host_matrix_view<const T> x, host_matrix_view<const double> ref);

/// The relative Frobenius error of a GEMM result c against alpha*op(A)*op(B) + beta*c0 computed by
/// the sequential reference in float64 from the same operands (c0 is not read when beta == 0).
template <class T>
double gemm_relative_error(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<const T> c0, host_matrix_view<const T> c);

/// Tolerance on the relative Frobenius error of a GEMM with inner dimension k:
/// 8 * sqrt(k) * unit roundoff (TF32's 2^-11 in tf32 mode), at least 16 units.
double gemm_tolerance(dtype t, index_t k, math_mode m = math_mode::strict);

}  // namespace tilestream
