// The BLAS entry points the drop-in exports: one row per routine. A routine of an existing family
// (another precision) is one row here; a new family is a PARAMS/ARGS pair below, a decoding body in
// blas_front.cpp and a case in the bridge (blas_context.cpp).
#pragma once

#include <cstddef>

// X(symbol, family, scalar type)
#define TILESTREAM_BLAS_ROUTINES(X)        \
    X(sgemm_, fortran_gemm, float)         \
    X(dgemm_, fortran_gemm, double)        \
    X(cblas_sgemm, cblas_gemm, float)      \
    X(cblas_dgemm, cblas_gemm, double)

// Each family's C signature and the names of its arguments (the forwarded call passes them on as
// they came). Fortran: column-major, every argument by address, gfortran's hidden string lengths last.
#define TILESTREAM_BLAS_fortran_gemm_PARAMS(T)                                                             \
    const char *transa, const char *transb, const int *m, const int *n, const int *k, const T *alpha,      \
        const T *a, const int *lda, const T *b, const int *ldb, const T *beta, T *c, const int *ldc,        \
        std::size_t transa_len, std::size_t transb_len
#define TILESTREAM_BLAS_fortran_gemm_ARGS \
    transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, transa_len, transb_len
// CBLAS: order (101 row-major, 102 column-major) and transposes (111 N, 112 T, 113 C) as ints.
#define TILESTREAM_BLAS_cblas_gemm_PARAMS(T)                                                              \
    int order, int transa, int transb, int m, int n, int k, T alpha, const T *a, int lda, const T *b,     \
        int ldb, T beta, T *c, int ldc
#define TILESTREAM_BLAS_cblas_gemm_ARGS order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc

namespace tilestream::blas {

/// One id per row of the table, in order.
enum class routine : int {
#define TILESTREAM_BLAS_ID(name, family, T) name,
    TILESTREAM_BLAS_ROUTINES(TILESTREAM_BLAS_ID)
#undef TILESTREAM_BLAS_ID
};

inline constexpr const char* routine_names[] = {
#define TILESTREAM_BLAS_NAME(name, family, T) #name,
    TILESTREAM_BLAS_ROUTINES(TILESTREAM_BLAS_NAME)
#undef TILESTREAM_BLAS_NAME
};
inline constexpr int routine_count = int(sizeof routine_names / sizeof routine_names[0]);

}  // namespace tilestream::blas
