// The C interface between the preloaded drop-in (libtilestream_blas.so) and the part that runs calls
// on a tilestream::context (libtilestream_blas_context.so). The drop-in loads that part, and with it
// libtilestream and its OpenBLAS, privately (RTLD_LOCAL) on the first call it routes: a process that
// never routes a call maps none of them, and none of their symbols (xerbla_, the rest of OpenBLAS)
// ever joins the program's global scope.
#pragma once

#include <cstddef>

extern "C" {

/// Bumped whenever this file changes: a drop-in and a bridge from different builds are refused.
#define TILESTREAM_BLAS_BRIDGE_ABI 6

/// One GEMM in tilestream's terms: C(m x n) = alpha op(A) op(B) + beta C, every operand stored in one
/// order; alpha and beta point to values of the call's scalar type.
struct tilestream_blas_gemm_call {
    int dtype;          ///< 0 f32, 1 f64, 2 c32, 3 c64 (std::complex: the C and Fortran complex layouts)
    int row_major;      ///< 1: every operand row-major; 0: column-major
    char trans_a;       ///< 'N', 'T' or 'C' (conjugate transpose: 'T' on real data)
    char trans_b;
    int m, n, k;
    const void* alpha;
    const void* a;
    int lda;
    const void* b;
    int ldb;
    const void* beta;
    void* c;
    int ldc;
    int fields;         ///< 1: return the log fields on success; 0 (nobody logs): no text
};

/// One call of the rest of Level 3 BLAS in tilestream's terms (blas3.hpp): routine "symm", "syrk",
/// "syr2k", "trmm" or "trsm"; for trmm/trsm `c` is B (overwritten) and b, beta unused; syrk's b unused.
/// m x n is C (B); syrk family: C is n x n, op(A) n x k.
struct tilestream_blas_level3_call {
    int dtype;            ///< 0 f32, 1 f64, 2 c32, 3 c64
    int row_major;        ///< 1: every operand row-major; 0: column-major
    const char* routine;  ///< also "hemm", "herk", "her2k" (complex; herk's alpha and beta real)
    char side, uplo, trans, diag;  ///< 'L'/'R', 'U'/'L', 'N'/'T'/'C', 'N'/'U'
    int m, n, k;
    const void* alpha;
    const void* a;
    int lda;
    const void* b;
    int ldb;
    const void* beta;
    void* c;
    int ldc;
};

/// One LAPACK call (Fortran, column-major): routine "potrf", "potrs", "posv" (uplo), "getrf" (m x n),
/// "getrs" (trans) or "gesv". A is m x n (getrf) or n x n, B n x nrhs; ipiv 1-based, as LAPACK's.
/// The drop-in has checked the arguments; *info is written on success.
struct tilestream_blas_lapack_call {
    int dtype;            ///< 0 f32, 1 f64, 2 c32, 3 c64
    const char* routine;
    char uplo, trans;     ///< 'U'/'L'; 'N'/'T'/'C'
    int m, n, nrhs;
    void* a;              ///< const for potrs and getrs
    int lda;
    int* ipiv;            ///< written by getrf and gesv, read by getrs; unused otherwise
    void* b;
    int ldb;
    int* info;
};

struct tilestream_blas_bridge {
    int abi;  ///< TILESTREAM_BLAS_BRIDGE_ABI
    /// The file of libtilestream: its own BLAS calls come back through the drop-in, which sends them
    /// to the BLAS libtilestream links.
    const char* tilestream_library;
    /// Opens this process's context on `devices` (again in a child after fork). Returns 0, or 1 with
    /// a message in *text (malloc'ed; the caller frees it).
    int (*open)(const char* devices, int has_budget, unsigned long long budget, char** text);
    /// Runs one call. 0: done, *text holds the log fields (" devices=... strategy=...", or is null
    /// when call->fields is 0); 1: failed,
    /// *text holds why and C is as it was before the call. *text is malloc'ed; the caller frees it.
    int (*gemm)(const tilestream_blas_gemm_call* call, char** text);
    /// As gemm, for the other Level 3 routines: on failure C (B) is as it was before the call.
    int (*level3)(const tilestream_blas_level3_call* call, char** text);
    /// As gemm, for LAPACK's Cholesky and LU drivers: on failure A, B and ipiv are as they were
    /// before the call and *info is unwritten.
    int (*lapack)(const tilestream_blas_lapack_call* call, char** text);
};

/// The only symbol of libtilestream_blas_context.so.
const tilestream_blas_bridge* tilestream_blas_bridge_entry(void);
}
