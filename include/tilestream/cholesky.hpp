// Checking and timing a Cholesky factorization (the context's potrf, potrs and posv; context.hpp):
// the residual ||A - L L^H|| / (||A|| n u) in float64, the backward error of a solve, and LAPACK's
// ?potrf of the OpenBLAS tilestream links as the anchor (what the CLI's --check and --anchor run).
#pragma once

#include <tilestream/anchor.hpp>
#include <tilestream/blas3.hpp>
#include <tilestream/matrix.hpp>

namespace tilestream {

/// `factor` (potrf's result) against `a` (its input; only the `u` triangle is read, a complex
/// diagonal's imaginary part ignored, as LAPACK does): ||A - L L^H||_F / (||A||_F n u) on the
/// triangle (A = U^H U for upper), in float64 (complex128) OpenBLAS, within 30 (LAPACK's test
/// threshold); the other triangle must be bitwise as in `a` (changed_outside counts it).
template <class T>
blas3_check_result check_potrf(uplo u, host_matrix_view<const T> a, host_matrix_view<const T> factor);

/// A solve's backward error ||A X - B||_F / (||A||_F ||X||_F n u) in float64 with A Hermitian from its
/// `u` triangle, within 30.
template <class T>
blas3_check_result check_solve_hermitian(uplo u, host_matrix_view<const T> a, host_matrix_view<const T> b,
                                         host_matrix_view<const T> x);

/// Times LAPACK ?potrf of OpenBLAS (all hardware threads) on a column-major copy of `a`, refreshed
/// before each run: the anchor of `tilestream potrf --anchor`.
template <class T>
blas_anchor time_host_potrf(uplo u, host_matrix_view<const T> a, int repeat);

}  // namespace tilestream
