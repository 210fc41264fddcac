// The BLAS entry points the drop-in exports: one row per family and its precisions (s, d, c, z; the
// build's export list and blas_drop_in_loading read these rows). Another precision of an existing
// family is one more letter in its row; a new family is a PARAMS/ARGS pair below, a decoding body in
// blas_front.cpp and a case in the bridge (blas_context.cpp).
#pragma once

#include <complex>
#include <cstddef>

// X(symbol, family, scalar type), written a family and its precisions at a time (TILESTREAM_BLAS_SD
// and the others below). The ?gemm3m routines (OpenBLAS, MKL: the same call as ?gemm,
// computed by the 3m method) are routed like ?gemm; a system BLAS without them (netlib's) gets such
// calls on its ?gemm entry (system_blas.cpp), so the drop-in exports them whatever the BLAS.
#define TILESTREAM_BLAS_ROUTINES(X)                              \
    TILESTREAM_BLAS_SD(X, gemm_, fortran_gemm)                   \
    TILESTREAM_CBLAS_SD(X, gemm, cblas_gemm)                     \
    TILESTREAM_BLAS_CZ(X, gemm_, fortran_gemm)                   \
    TILESTREAM_CBLAS_CZ(X, gemm, cblas_complex_gemm)             \
    TILESTREAM_BLAS_CZ(X, gemm3m_, fortran_gemm)                 \
    TILESTREAM_CBLAS_CZ(X, gemm3m, cblas_complex_gemm)           \
    TILESTREAM_BLAS_LEVEL3_ROUTINES(X)                           \
    TILESTREAM_LAPACK_ROUTINES(X)

// The rest of Level 3 BLAS (real precisions): symm, syrk, syr2k, trmm and trsm, Fortran and CBLAS.
#define TILESTREAM_BLAS_LEVEL3_ROUTINES(X)          \
    TILESTREAM_BLAS_SD(X, symm_, fortran_symm)      \
    TILESTREAM_BLAS_SD(X, syrk_, fortran_syrk)      \
    TILESTREAM_BLAS_SD(X, syr2k_, fortran_syr2k)    \
    TILESTREAM_BLAS_SD(X, trmm_, fortran_trmm)      \
    TILESTREAM_BLAS_SD(X, trsm_, fortran_trsm)      \
    TILESTREAM_CBLAS_SD(X, symm, cblas_symm)        \
    TILESTREAM_CBLAS_SD(X, syrk, cblas_syrk)        \
    TILESTREAM_CBLAS_SD(X, syr2k, cblas_syr2k)      \
    TILESTREAM_CBLAS_SD(X, trmm, cblas_trmm)        \
    TILESTREAM_CBLAS_SD(X, trsm, cblas_trsm)        \
    TILESTREAM_BLAS_LEVEL3_COMPLEX_ROUTINES(X)

// The complex ones (HEMM, HERK, HER2K besides): CBLAS passes their scalars by address (void*), HERK's
// alpha and beta and HER2K's beta are real.
#define TILESTREAM_BLAS_LEVEL3_COMPLEX_ROUTINES(X)  \
    TILESTREAM_BLAS_CZ(X, symm_, fortran_symm)      \
    TILESTREAM_BLAS_CZ(X, hemm_, fortran_hemm)      \
    TILESTREAM_BLAS_CZ(X, syrk_, fortran_syrk)      \
    TILESTREAM_BLAS_CZ(X, herk_, fortran_herk)      \
    TILESTREAM_BLAS_CZ(X, syr2k_, fortran_syr2k)    \
    TILESTREAM_BLAS_CZ(X, her2k_, fortran_her2k)    \
    TILESTREAM_BLAS_CZ(X, trmm_, fortran_trmm)      \
    TILESTREAM_BLAS_CZ(X, trsm_, fortran_trsm)      \
    TILESTREAM_CBLAS_CZ(X, symm, cblas_symm_cx)     \
    TILESTREAM_CBLAS_CZ(X, hemm, cblas_hemm_cx)     \
    TILESTREAM_CBLAS_CZ(X, syrk, cblas_syrk_cx)     \
    TILESTREAM_CBLAS_CZ(X, herk, cblas_herk_cx)     \
    TILESTREAM_CBLAS_CZ(X, syr2k, cblas_syr2k_cx)   \
    TILESTREAM_CBLAS_CZ(X, her2k, cblas_her2k_cx)   \
    TILESTREAM_CBLAS_CZ(X, trmm, cblas_trmm_cx)     \
    TILESTREAM_CBLAS_CZ(X, trsm, cblas_trsm_cx)

// LAPACK's Cholesky and LU drivers (Fortran only: what numpy's umath_linalg, SciPy's flapack and
// Octave call). Their system entries come from the system LAPACK (system_blas.cpp), and their size
// against the threshold is their flop count (blas_front.cpp).
#define TILESTREAM_LAPACK_ROUTINES(X)                 \
    TILESTREAM_BLAS_SDCZ(X, potrf_, lapack_potrf)     \
    TILESTREAM_BLAS_SDCZ(X, potrs_, lapack_potrs)     \
    TILESTREAM_BLAS_SDCZ(X, posv_, lapack_posv)       \
    TILESTREAM_BLAS_SDCZ(X, getrf_, lapack_getrf)     \
    TILESTREAM_BLAS_SDCZ(X, getrs_, lapack_getrs)     \
    TILESTREAM_BLAS_SDCZ(X, gesv_, lapack_gesv)

// One family's rows in the precisions it has, in the order s, d, c, z: the precision's letter and
// the stem make the symbol (s + potrf_ = spotrf_; cblas_s + symm = cblas_ssymm).
#define TILESTREAM_BLAS_SD(X, stem, family) X(s##stem, family, float) X(d##stem, family, double)
#define TILESTREAM_BLAS_CZ(X, stem, family) \
    X(c##stem, family, std::complex<float>) X(z##stem, family, std::complex<double>)
#define TILESTREAM_BLAS_SDCZ(X, stem, family) TILESTREAM_BLAS_SD(X, stem, family) TILESTREAM_BLAS_CZ(X, stem, family)
#define TILESTREAM_CBLAS_SD(X, stem, family) X(cblas_s##stem, family, float) X(cblas_d##stem, family, double)
#define TILESTREAM_CBLAS_CZ(X, stem, family) \
    X(cblas_c##stem, family, std::complex<float>) X(cblas_z##stem, family, std::complex<double>)

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
// CBLAS complex: as cblas_gemm, but alpha and beta by address (CBLAS declares every complex
// argument `const void *`; the ABI is the same).
#define TILESTREAM_BLAS_cblas_complex_gemm_PARAMS(T)                                                      \
    int order, int transa, int transb, int m, int n, int k, const T *alpha, const T *a, int lda,           \
        const T *b, int ldb, const T *beta, T *c, int ldc
#define TILESTREAM_BLAS_cblas_complex_gemm_ARGS TILESTREAM_BLAS_cblas_gemm_ARGS

// Level 3 families (netlib's argument order; CBLAS enums as ints: order 101/102, side 141 left/142
// right, uplo 121 upper/122 lower, trans 111/112/113, diag 131 non-unit/132 unit).
#define TILESTREAM_BLAS_fortran_symm_PARAMS(T)                                                              \
    const char *side, const char *uplo, const int *m, const int *n, const T *alpha, const T *a,             \
        const int *lda, const T *b, const int *ldb, const T *beta, T *c, const int *ldc, std::size_t side_len, \
        std::size_t uplo_len
#define TILESTREAM_BLAS_fortran_symm_ARGS side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc, side_len, uplo_len
#define TILESTREAM_BLAS_fortran_syrk_PARAMS(T)                                                              \
    const char *uplo, const char *trans, const int *n, const int *k, const T *alpha, const T *a,            \
        const int *lda, const T *beta, T *c, const int *ldc, std::size_t uplo_len, std::size_t trans_len
#define TILESTREAM_BLAS_fortran_syrk_ARGS uplo, trans, n, k, alpha, a, lda, beta, c, ldc, uplo_len, trans_len
#define TILESTREAM_BLAS_fortran_syr2k_PARAMS(T)                                                             \
    const char *uplo, const char *trans, const int *n, const int *k, const T *alpha, const T *a,            \
        const int *lda, const T *b, const int *ldb, const T *beta, T *c, const int *ldc, std::size_t uplo_len, \
        std::size_t trans_len
#define TILESTREAM_BLAS_fortran_syr2k_ARGS uplo, trans, n, k, alpha, a, lda, b, ldb, beta, c, ldc, uplo_len, trans_len
#define TILESTREAM_BLAS_fortran_trmm_PARAMS(T)                                                              \
    const char *side, const char *uplo, const char *transa, const char *diag, const int *m, const int *n,   \
        const T *alpha, const T *a, const int *lda, T *b, const int *ldb, std::size_t side_len,              \
        std::size_t uplo_len, std::size_t transa_len, std::size_t diag_len
#define TILESTREAM_BLAS_fortran_trmm_ARGS \
    side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb, side_len, uplo_len, transa_len, diag_len
#define TILESTREAM_BLAS_fortran_trsm_PARAMS(T) TILESTREAM_BLAS_fortran_trmm_PARAMS(T)
#define TILESTREAM_BLAS_fortran_trsm_ARGS TILESTREAM_BLAS_fortran_trmm_ARGS
#define TILESTREAM_BLAS_cblas_symm_PARAMS(T)                                                                \
    int order, int side, int uplo, int m, int n, T alpha, const T *a, int lda, const T *b, int ldb, T beta, \
        T *c, int ldc
#define TILESTREAM_BLAS_cblas_symm_ARGS order, side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc
#define TILESTREAM_BLAS_cblas_syrk_PARAMS(T) \
    int order, int uplo, int trans, int n, int k, T alpha, const T *a, int lda, T beta, T *c, int ldc
#define TILESTREAM_BLAS_cblas_syrk_ARGS order, uplo, trans, n, k, alpha, a, lda, beta, c, ldc
#define TILESTREAM_BLAS_cblas_syr2k_PARAMS(T)                                                               \
    int order, int uplo, int trans, int n, int k, T alpha, const T *a, int lda, const T *b, int ldb, T beta, \
        T *c, int ldc
#define TILESTREAM_BLAS_cblas_syr2k_ARGS order, uplo, trans, n, k, alpha, a, lda, b, ldb, beta, c, ldc
#define TILESTREAM_BLAS_cblas_trmm_PARAMS(T)                                                                \
    int order, int side, int uplo, int transa, int diag, int m, int n, T alpha, const T *a, int lda, T *b,  \
        int ldb
#define TILESTREAM_BLAS_cblas_trmm_ARGS order, side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb
#define TILESTREAM_BLAS_cblas_trsm_PARAMS(T) TILESTREAM_BLAS_cblas_trmm_PARAMS(T)
#define TILESTREAM_BLAS_cblas_trsm_ARGS TILESTREAM_BLAS_cblas_trmm_ARGS

#define TILESTREAM_BLAS_fortran_hemm_PARAMS(T) TILESTREAM_BLAS_fortran_symm_PARAMS(T)
#define TILESTREAM_BLAS_fortran_hemm_ARGS TILESTREAM_BLAS_fortran_symm_ARGS
#define TILESTREAM_BLAS_fortran_herk_PARAMS(T)                                                              \
    const char *uplo, const char *trans, const int *n, const int *k, const typename T::value_type *alpha,   \
        const T *a, const int *lda, const typename T::value_type *beta, T *c, const int *ldc,                \
        std::size_t uplo_len, std::size_t trans_len
#define TILESTREAM_BLAS_fortran_herk_ARGS TILESTREAM_BLAS_fortran_syrk_ARGS
#define TILESTREAM_BLAS_fortran_her2k_PARAMS(T)                                                             \
    const char *uplo, const char *trans, const int *n, const int *k, const T *alpha, const T *a,            \
        const int *lda, const T *b, const int *ldb, const typename T::value_type *beta, T *c, const int *ldc, \
        std::size_t uplo_len, std::size_t trans_len
#define TILESTREAM_BLAS_fortran_her2k_ARGS TILESTREAM_BLAS_fortran_syr2k_ARGS
// CBLAS complex: every complex scalar and array by address.
#define TILESTREAM_BLAS_cblas_symm_cx_PARAMS(T)                                                             \
    int order, int side, int uplo, int m, int n, const void *alpha, const void *a, int lda, const void *b,  \
        int ldb, const void *beta, void *c, int ldc
#define TILESTREAM_BLAS_cblas_symm_cx_ARGS TILESTREAM_BLAS_cblas_symm_ARGS
#define TILESTREAM_BLAS_cblas_hemm_cx_PARAMS(T) TILESTREAM_BLAS_cblas_symm_cx_PARAMS(T)
#define TILESTREAM_BLAS_cblas_hemm_cx_ARGS TILESTREAM_BLAS_cblas_symm_ARGS
#define TILESTREAM_BLAS_cblas_syrk_cx_PARAMS(T)                                                             \
    int order, int uplo, int trans, int n, int k, const void *alpha, const void *a, int lda, const void *beta, \
        void *c, int ldc
#define TILESTREAM_BLAS_cblas_syrk_cx_ARGS TILESTREAM_BLAS_cblas_syrk_ARGS
#define TILESTREAM_BLAS_cblas_herk_cx_PARAMS(T)                                                             \
    int order, int uplo, int trans, int n, int k, typename T::value_type alpha, const void *a, int lda,     \
        typename T::value_type beta, void *c, int ldc
#define TILESTREAM_BLAS_cblas_herk_cx_ARGS TILESTREAM_BLAS_cblas_syrk_ARGS
#define TILESTREAM_BLAS_cblas_syr2k_cx_PARAMS(T)                                                            \
    int order, int uplo, int trans, int n, int k, const void *alpha, const void *a, int lda, const void *b,  \
        int ldb, const void *beta, void *c, int ldc
#define TILESTREAM_BLAS_cblas_syr2k_cx_ARGS TILESTREAM_BLAS_cblas_syr2k_ARGS
#define TILESTREAM_BLAS_cblas_her2k_cx_PARAMS(T)                                                            \
    int order, int uplo, int trans, int n, int k, const void *alpha, const void *a, int lda, const void *b,  \
        int ldb, typename T::value_type beta, void *c, int ldc
#define TILESTREAM_BLAS_cblas_her2k_cx_ARGS TILESTREAM_BLAS_cblas_syr2k_ARGS
#define TILESTREAM_BLAS_cblas_trmm_cx_PARAMS(T)                                                             \
    int order, int side, int uplo, int transa, int diag, int m, int n, const void *alpha, const void *a,    \
        int lda, void *b, int ldb
#define TILESTREAM_BLAS_cblas_trmm_cx_ARGS TILESTREAM_BLAS_cblas_trmm_ARGS
#define TILESTREAM_BLAS_cblas_trsm_cx_PARAMS(T) TILESTREAM_BLAS_cblas_trmm_cx_PARAMS(T)
#define TILESTREAM_BLAS_cblas_trsm_cx_ARGS TILESTREAM_BLAS_cblas_trmm_ARGS

// LAPACK (netlib's argument order; INFO last before the hidden length of UPLO or TRANS, which C
// callers such as numpy often leave out: it is never read).
#define TILESTREAM_BLAS_lapack_potrf_PARAMS(T) \
    const char *uplo, const int *n, T *a, const int *lda, int *info, std::size_t uplo_len
#define TILESTREAM_BLAS_lapack_potrf_ARGS uplo, n, a, lda, info, uplo_len
#define TILESTREAM_BLAS_lapack_potrs_PARAMS(T)                                                              \
    const char *uplo, const int *n, const int *nrhs, const T *a, const int *lda, T *b, const int *ldb,       \
        int *info, std::size_t uplo_len
#define TILESTREAM_BLAS_lapack_potrs_ARGS uplo, n, nrhs, a, lda, b, ldb, info, uplo_len
#define TILESTREAM_BLAS_lapack_posv_PARAMS(T)                                                               \
    const char *uplo, const int *n, const int *nrhs, T *a, const int *lda, T *b, const int *ldb, int *info,  \
        std::size_t uplo_len
#define TILESTREAM_BLAS_lapack_posv_ARGS TILESTREAM_BLAS_lapack_potrs_ARGS
#define TILESTREAM_BLAS_lapack_getrf_PARAMS(T) const int *m, const int *n, T *a, const int *lda, int *ipiv, int *info
#define TILESTREAM_BLAS_lapack_getrf_ARGS m, n, a, lda, ipiv, info
#define TILESTREAM_BLAS_lapack_getrs_PARAMS(T)                                                              \
    const char *trans, const int *n, const int *nrhs, const T *a, const int *lda, const int *ipiv, T *b,     \
        const int *ldb, int *info, std::size_t trans_len
#define TILESTREAM_BLAS_lapack_getrs_ARGS trans, n, nrhs, a, lda, ipiv, b, ldb, info, trans_len
#define TILESTREAM_BLAS_lapack_gesv_PARAMS(T) \
    const int *n, const int *nrhs, T *a, const int *lda, int *ipiv, T *b, const int *ldb, int *info
#define TILESTREAM_BLAS_lapack_gesv_ARGS n, nrhs, a, lda, ipiv, b, ldb, info

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

/// True for the LAPACK rows: their system entries are the system LAPACK's.
constexpr bool is_lapack(routine r) {
    switch (r) {
#define TILESTREAM_LAPACK_CASE(name, family, T) case routine::name:
        TILESTREAM_LAPACK_ROUTINES(TILESTREAM_LAPACK_CASE)
#undef TILESTREAM_LAPACK_CASE
        return true;
        default: return false;
    }
}

/// The routine whose entry answers for `r` in a BLAS that lacks r: ?gemm for ?gemm3m (the same
/// arguments and result), else r itself.
constexpr routine stand_in(routine r) {
    switch (r) {
        case routine::cgemm3m_: return routine::cgemm_;
        case routine::zgemm3m_: return routine::zgemm_;
        case routine::cblas_cgemm3m: return routine::cblas_cgemm;
        case routine::cblas_zgemm3m: return routine::cblas_zgemm;
        default: return r;
    }
}

}  // namespace tilestream::blas
