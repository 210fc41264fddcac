/* The BLAS drop-in's Level 3 threshold, measured: times cblas_?trsm, ?trmm, ?symm, ?syrk, ?syr2k
 * (and z: hemm, herk, her2k) on n x n operands as a client program calls them. It links only the
 * system CBLAS, so bench/blas3_shim_threshold.py can run it as is and with libtilestream_blas.so
 * preloaded (default threshold, threshold 1), alternating the processes.
 *
 *   blas3_shim_threshold ROUTINES SIZES SECONDS
 *     ROUTINES  e.g. dtrsm,dtrmm,dsymm,dsyrk,dsyr2k,ztrsm,zhemm,zherk,zher2k
 *     SIZES     e.g. 64,128,256,512,1024,2048
 *     SECONDS   time spent per routine and size (at least 3 timed calls, at most 200)
 *
 * Per routine and size: one untimed warm-up call (with the drop-in preloaded, the first routed call
 * also opens its context), then timed calls until SECONDS are spent; one JSON object per line with
 * the median and minimum seconds of one call. TRSM and TRMM overwrite B: B is restored (untimed)
 * before each call, A is well conditioned (diagonal 1, off-diagonal entries of at most 1/n). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, strdup, strtok_r */

#include <cblas.h>

#include <complex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void* x, const void* y) {
    const double a = *(const double*)x, b = *(const double*)y;
    return (a > b) - (a < b);
}

/* Uniform in [-1, 1) from a 64-bit LCG: the same operands in every process. */
static double uniform(unsigned long long* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void fill(double* v, size_t count, unsigned long long seed, int triangular, int n, int complex_) {
    unsigned long long s = seed;
    for (size_t i = 0; i < count; ++i) v[i] = uniform(&s);
    if (!triangular) return;
    /* Column-major n x n, element (i, j) at (i + j n) * (1 or 2 doubles). */
    const int w = complex_ ? 2 : 1;
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) {
            double* e = v + ((size_t)i + (size_t)j * (size_t)n) * (size_t)w;
            if (i == j) {
                e[0] = 1.0;
                if (complex_) e[1] = 0.0;
            } else {
                e[0] /= n;
                if (complex_) e[1] /= n;
            }
        }
}

/* One call of `routine` on n x n column-major operands (side left, uplo lower, no transpose,
 * non-unit: the shapes the drop-in sizes as n^3). Returns 0 for an unknown routine. */
static int call(const char* routine, int n, double* a, double* b, double* c) {
    const double one[2] = {1.0, 0.0}, half[2] = {0.5, 0.0};
    if (!strcmp(routine, "dtrsm"))
        cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n, n, 1.0, a, n, b, n);
    else if (!strcmp(routine, "dtrmm"))
        cblas_dtrmm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n, n, 1.0, a, n, b, n);
    else if (!strcmp(routine, "dsymm"))
        cblas_dsymm(CblasColMajor, CblasLeft, CblasLower, n, n, 1.0, a, n, b, n, 0.5, c, n);
    else if (!strcmp(routine, "dsyrk"))
        cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, n, n, 1.0, a, n, 0.5, c, n);
    else if (!strcmp(routine, "dsyr2k"))
        cblas_dsyr2k(CblasColMajor, CblasLower, CblasNoTrans, n, n, 1.0, a, n, b, n, 0.5, c, n);
    else if (!strcmp(routine, "ztrsm"))
        cblas_ztrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n, n, one, a, n, b, n);
    else if (!strcmp(routine, "ztrmm"))
        cblas_ztrmm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, n, n, one, a, n, b, n);
    else if (!strcmp(routine, "zhemm"))
        cblas_zhemm(CblasColMajor, CblasLeft, CblasLower, n, n, one, a, n, b, n, half, c, n);
    else if (!strcmp(routine, "zherk"))
        cblas_zherk(CblasColMajor, CblasLower, CblasNoTrans, n, n, 1.0, a, n, 0.5, c, n);
    else if (!strcmp(routine, "zher2k"))
        cblas_zher2k(CblasColMajor, CblasLower, CblasNoTrans, n, n, one, a, n, b, n, 0.5, c, n);
    else
        return 0;
    return 1;
}

int main(int argc, char** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: blas3_shim_threshold ROUTINES SIZES SECONDS (e.g. dtrsm,dsyrk 64,512,2048 0.3)\n");
        return 2;
    }
    const double budget = atof(argv[3]);
    char* routines = strdup(argv[1]);
    for (char* save = NULL, *r = strtok_r(routines, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
        const int complex_ = r[0] == 'z';
        const int in_place = strstr(r, "trsm") || strstr(r, "trmm");
        char* sizes = strdup(argv[2]);
        for (char* save2 = NULL, *s = strtok_r(sizes, ",", &save2); s; s = strtok_r(NULL, ",", &save2)) {
            const int n = atoi(s);
            if (n <= 0) {
                fprintf(stderr, "blas3_shim_threshold: size '%s' is not a positive integer\n", s);
                return 2;
            }
            const size_t count = (size_t)n * (size_t)n * (complex_ ? 2u : 1u);
            double* a = malloc(count * sizeof(double));
            double* b = malloc(count * sizeof(double));
            double* b0 = malloc(count * sizeof(double));
            double* c = malloc(count * sizeof(double));
            if (!a || !b || !b0 || !c) {
                fprintf(stderr, "blas3_shim_threshold: out of memory at n = %d\n", n);
                return 1;
            }
            fill(a, count, 1, in_place, n, complex_);
            fill(b0, count, 2, 0, n, complex_);
            fill(c, count, 3, 0, n, complex_);
            memcpy(b, b0, count * sizeof(double));
            if (!call(r, n, a, b, c)) {
                fprintf(stderr, "blas3_shim_threshold: unknown routine '%s'\n", r);
                return 2;
            }
            double times[200];
            int done = 0;
            for (double spent = 0; done < 200 && (done < 3 || spent < budget); ++done) {
                if (in_place) memcpy(b, b0, count * sizeof(double));
                const double t0 = now();
                call(r, n, a, b, c);
                times[done] = now() - t0;
                spent += times[done];
            }
            qsort(times, (size_t)done, sizeof(double), by_value);
            const double median = done % 2 ? times[done / 2] : 0.5 * (times[done / 2 - 1] + times[done / 2]);
            printf("{\"routine\": \"%s\", \"n\": %d, \"calls\": %d, \"seconds\": %.9g, \"min_seconds\": %.9g}\n", r, n,
                   done, median, times[0]);
            fflush(stdout);
            free(a), free(b), free(b0), free(c);
        }
        free(sizes);
    }
    free(routines);
    return 0;
}
