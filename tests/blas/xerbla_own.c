/* A program linked with -lblas that defines its own xerbla_ (so it is in the global scope): dgemm_ and
   cblas_dgemm called with m = -1, through whatever the process binds them to (the drop-in when
   preloaded), must report to it. Exits 1 when a call did not. */
#include <stdio.h>
#include <string.h>

#include "xerbla_recorder.h"

void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*, size_t, size_t);
void cblas_dgemm(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                 int);

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
    return gemm_ok && cblas_ok ? 0 : 1;
}
