// The LAPACK routines tilestream calls in the OpenBLAS it links (Fortran interface: 32-bit
// integers, every argument by address, the hidden length of a character argument last), as one
// template over the four precisions: Cholesky's ?potrf, LU's ?getrf.
#pragma once

#include <complex>
#include <cstddef>
#include <type_traits>

extern "C" {
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, std::size_t uplo_len);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t uplo_len);
void cpotrf_(const char* uplo, const int* n, std::complex<float>* a, const int* lda, int* info, std::size_t uplo_len);
void zpotrf_(const char* uplo, const int* n, std::complex<double>* a, const int* lda, int* info, std::size_t uplo_len);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void cgetrf_(const int* m, const int* n, std::complex<float>* a, const int* lda, int* ipiv, int* info);
void zgetrf_(const int* m, const int* n, std::complex<double>* a, const int* lda, int* ipiv, int* info);
}

namespace tilestream::detail {

/// ?potrf on the column-major n x n matrix a (uplo 'L' or 'U'); returns LAPACK's info.
template <class T>
int lapack_potrf(char uplo, int n, T* a, int lda) {
    int info = 0;
    if constexpr (std::is_same_v<T, float>) spotrf_(&uplo, &n, a, &lda, &info, 1);
    else if constexpr (std::is_same_v<T, double>) dpotrf_(&uplo, &n, a, &lda, &info, 1);
    else if constexpr (std::is_same_v<T, std::complex<float>>) cpotrf_(&uplo, &n, a, &lda, &info, 1);
    else {
        static_assert(std::is_same_v<T, std::complex<double>>, "lapack_potrf: f32, f64, c32 or c64");
        zpotrf_(&uplo, &n, a, &lda, &info, 1);
    }
    return info;
}

/// ?getrf on the column-major m x n matrix a, min(m, n) 1-based pivots into ipiv; returns LAPACK's info.
template <class T>
int lapack_getrf(int m, int n, T* a, int lda, int* ipiv) {
    int info = 0;
    if constexpr (std::is_same_v<T, float>) sgetrf_(&m, &n, a, &lda, ipiv, &info);
    else if constexpr (std::is_same_v<T, double>) dgetrf_(&m, &n, a, &lda, ipiv, &info);
    else if constexpr (std::is_same_v<T, std::complex<float>>) cgetrf_(&m, &n, a, &lda, ipiv, &info);
    else {
        static_assert(std::is_same_v<T, std::complex<double>>, "lapack_getrf: f32, f64, c32 or c64");
        zgetrf_(&m, &n, a, &lda, ipiv, &info);
    }
    return info;
}

}  // namespace tilestream::detail
