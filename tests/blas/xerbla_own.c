/* A program linked with -lblas that defines its own xerbla_ (so it is in the global scope): dgemm_ and
   cblas_dgemm called with m = -1, and the complex routines with an illegal argument each (cgemm_ a
   bad transa, zgemm_ m = -1, cgemm_ and zgemm_ a small lda or ldc, cblas_zgemm and cblas_cgemm a bad
   transb of 110 and m = -1), through whatever the process binds them to (the drop-in when preloaded), must
   report to it with the routine's name and the argument's number. Exits 1 when a call did not. */
#include <stdio.h>
#include <string.h>

#include "xerbla_recorder.h"

void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*, size_t, size_t);
void cblas_dgemm(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                 int);

typedef struct { float re, im; } c32;
typedef struct { double re, im; } c64;
void cgemm_(const char*, const char*, const int*, const int*, const int*, const c32*, const c32*, const int*,
            const c32*, const int*, const c32*, c32*, const int*, size_t, size_t);
void zgemm_(const char*, const char*, const int*, const int*, const int*, const c64*, const c64*, const int*,
            const c64*, const int*, const c64*, c64*, const int*, size_t, size_t);
void cblas_cgemm(int, int, int, int, int, int, const void*, const void*, int, const void*, int, const void*, void*,
                 int);
void cblas_zgemm(int, int, int, int, int, int, const void*, const void*, int, const void*, int, const void*, void*,
                 int);

/* One complex call with an illegal argument; 1 when xerbla_ saw `routine` and argument `info`. */
static int complex_case(const char* what, int z, const char* ta, int m, int lda, int ldc, const char* routine,
                        int info) {
    c32 a32[16] = {{1, 1}}, c32v[16] = {{0, 0}}, one32 = {1, -1};
    c64 a64[16] = {{1, 1}}, c64v[16] = {{0, 0}}, one64 = {1, -1};
    const int n = 2, k = 2, ldb = 2;
    last_routine[0] = 0, last_info = 0;
    if (z)
        zgemm_(ta, "C", &m, &n, &k, &one64, a64, &lda, a64, &ldb, &one64, c64v, &ldc, 1, 1);
    else
        cgemm_(ta, "C", &m, &n, &k, &one32, a32, &lda, a32, &ldb, &one32, c32v, &ldc, 1, 1);
    const int ok = strstr(last_routine, routine) != NULL && last_info == info;
    printf("%s: the program's xerbla_ saw '%s' parameter %d: %s\n", what, last_routine, last_info,
           ok ? "ok" : "WRONG");
    return ok;
}

int main(void) {
    double a[4] = {1, 2, 3, 4}, c[4] = {0};
    int m = -1, n = 2, one = 1;
    const double alpha = 1, beta = 0;
    dgemm_("N", "N", &m, &n, &one, &alpha, a, &n, a, &n, &beta, c, &n, 1, 1);
    const int gemm_ok = strstr(last_routine, "DGEMM") != NULL && last_info == 3;
    printf("dgemm_ m=-1: the program's xerbla_ saw '%s' parameter %d: %s\n", last_routine, last_info,
           gemm_ok ? "ok" : "WRONG (expected DGEMM parameter 3)");
    last_routine[0] = 0, last_info = 0;
    cblas_dgemm(102, 111, 111, -1, 2, 1, 1.0, a, 2, a, 2, 0.0, c, 2);
    const int cblas_ok = strstr(last_routine, "GEMM") != NULL && last_info > 0;
    printf("cblas_dgemm m=-1: the program's xerbla_ saw '%s' parameter %d: %s\n", last_routine, last_info,
           cblas_ok ? "ok" : "WRONG (expected a GEMM parameter)");
    int complex_ok = complex_case("cgemm_ transa='X'", 0, "X", 2, 2, 2, "CGEMM", 1);
    complex_ok &= complex_case("zgemm_ m=-1", 1, "N", -1, 2, 2, "ZGEMM", 3);
    complex_ok &= complex_case("cgemm_ lda=1 < m=2", 0, "N", 2, 1, 2, "CGEMM", 8);
    complex_ok &= complex_case("zgemm_ ldc=1 < m=2", 1, "c", 2, 2, 1, "ZGEMM", 13);
    const c64 z_one = {1, 0};
    c64 z[16] = {{1, 1}};
    last_routine[0] = 0, last_info = 0;
    cblas_zgemm(101, 111, 110, 2, 2, 2, &z_one, z, 2, z, 2, &z_one, z + 8, 2);
    int ok = strstr(last_routine, "GEMM") != NULL && last_info > 0;
    printf("cblas_zgemm transb=110: the program's xerbla_ saw '%s' parameter %d: %s\n", last_routine, last_info,
           ok ? "ok" : "WRONG (expected a GEMM parameter)");
    complex_ok &= ok;
    last_routine[0] = 0, last_info = 0;
    cblas_cgemm(102, 113, 111, -1, 2, 2, &z_one, z, 2, z, 2, &z_one, z + 8, 2);
    ok = strstr(last_routine, "GEMM") != NULL && last_info > 0;
    printf("cblas_cgemm m=-1: the program's xerbla_ saw '%s' parameter %d: %s\n", last_routine, last_info,
           ok ? "ok" : "WRONG (expected a GEMM parameter)");
    complex_ok &= ok;
    return gemm_ok && cblas_ok && complex_ok ? 0 : 1;
}
