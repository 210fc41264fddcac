/* A library with its own xerbla_, loaded by xerbla_host with dlopen(RTLD_LOCAL) the way Python
   loads numpy's lapack_lite: its xerbla_ is not in the program's global scope, so LAPACK and BLAS
   reach it only when nothing in the global scope defines xerbla_ (a preloaded drop-in must not). */
#include <stdio.h>
#include <string.h>

#include "xerbla_recorder.h"

void dgetrf_(const int*, const int*, double*, const int*, int*, int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*, size_t, size_t);

/* Calls LAPACK's dgetrf_ with m = -1 and BLAS's dgemm_ with m = -1; fills what xerbla_ saw for each. */
void plugin_illegal_calls(char* getrf_routine, int* getrf_info, char* gemm_routine, int* gemm_info) {
    double a[4] = {1, 2, 3, 4}, c[4] = {0};
    int ipiv[2], info = 0, m = -1, n = 2, one = 1;
    const double alpha = 1, beta = 0;
    last_routine[0] = 0, last_info = 0;
    dgetrf_(&m, &n, a, &n, ipiv, &info);
    strcpy(getrf_routine, last_routine), *getrf_info = last_info;
    last_routine[0] = 0, last_info = 0;
    dgemm_("N", "N", &m, &n, &one, &alpha, a, &n, a, &n, &beta, c, &n, 1, 1);
    strcpy(gemm_routine, last_routine), *gemm_info = last_info;
}
