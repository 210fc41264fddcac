/* A BLAS client linked with -lblas: sgemm_/dgemm_ (Fortran ABI, hidden string lengths) and
   cblas_sgemm/cblas_dgemm (row- and column-major) on odd shapes with leading dimensions larger
   than the matrices, alpha/beta != (1, 0) and transposes. Every C is compared with the system BLAS
   (argv[1], opened by path and called through its own handle, so never through a preloaded
   drop-in); the padding of A, B and C holds a NaN payload that must survive untouched, A and B
   must not change, and with beta == 0 C starts as NaN (BLAS must not read it). The BLAS quick
   returns are among the calls: an empty C (m or n 0), k == 0 and alpha == 0 (C = beta C), and a C
   that should be exactly zero must be so. With "strict" as third argument (every call runs on
   tilestream), alpha == 0 calls get NaN A and B too and are checked against C = beta C as the
   reference BLAS defines it: OpenBLAS 0.3.21, the system BLAS here, reads A and B then (0 * NaN).
   Prints one line per call ("call <routine> <order> <ta> <tb> <m> <n> <k> <alpha>") for the driver,
   and exits 1 when a call is wrong. With a thread count as second argument, that many threads make
   all the calls at once (the drop-in's first, lazy opening of its context included). */
#include <dlfcn.h>
#include <pthread.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void sgemm_t(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                     const int*, const float*, const int*, const float*, float*, const int*, size_t, size_t);
typedef void dgemm_t(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
                     const int*, const double*, const int*, const double*, double*, const int*, size_t, size_t);
typedef void cblas_sgemm_t(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                           float*, int);
typedef void cblas_dgemm_t(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                           double*, int);

/* What the process links (-lblas), or what a preloaded drop-in puts in front of it. */
sgemm_t sgemm_;
dgemm_t dgemm_;
cblas_sgemm_t cblas_sgemm;
cblas_dgemm_t cblas_dgemm;

static sgemm_t* ref_sgemm;
static dgemm_t* ref_dgemm;
static cblas_sgemm_t* ref_cblas_sgemm;
static cblas_dgemm_t* ref_cblas_dgemm;

enum api { fortran, cblas_row, cblas_col };

struct gemm_case {
    int f64;
    enum api api;
    char ta, tb; /* as written to the call: N, n, T, t, C or c */
    int m, n, k;
    double alpha, beta;
    int pad_a, pad_b, pad_c; /* extra elements per stored line */
};

static _Thread_local uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* in [-1, 1], never 0 */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 4503599627370496.0 - 1.0;
}

static const uint64_t poison64 = 0x7ff8dead0000beefull; /* a quiet NaN with a payload */
static const uint32_t poison32 = 0x7fc0beefu;

static int strict; /* alpha == 0: A and B NaN, expected C = beta C (not the system BLAS's) */

static int is_trans(char t) { return t != 'N' && t != 'n'; }
static char log_trans(char t) { return is_trans(t) ? (t == 'C' || t == 'c' ? 'C' : 'T') : 'N'; } /* as logged */

/* A stored matrix: `lines` lines of `len` elements, `ld` apart. */
struct stored {
    size_t lines, len, ld;
    void* data;
};

static void poison(const struct stored* s, int f64) { /* every element NaN, the padding stays */
    for (size_t i = 0; i < s->lines; ++i)
        for (size_t j = 0; j < s->len; ++j)
            memcpy((char*)s->data + (i * s->ld + j) * (f64 ? 8 : 4),
                   f64 ? (const void*)&poison64 : (const void*)&poison32, f64 ? 8 : 4);
}

static struct stored make(int f64, int rows, int cols, int row_major, int pad) {
    struct stored s;
    s.lines = (size_t)(row_major ? rows : cols);
    s.len = (size_t)(row_major ? cols : rows);
    s.ld = s.len + (size_t)pad;
    if (s.ld < 1) s.ld = 1;
    s.data = malloc((s.lines ? s.lines : 1) * s.ld * (f64 ? 8 : 4));
    for (size_t i = 0; i < s.lines; ++i)
        for (size_t j = 0; j < s.ld; ++j) {
            size_t at = i * s.ld + j;
            if (f64) {
                double v = uniform();
                if (j < s.len) memcpy((double*)s.data + at, &v, 8);
                else memcpy((double*)s.data + at, &poison64, 8);
            } else {
                float v = (float)uniform();
                if (j < s.len) memcpy((float*)s.data + at, &v, 4);
                else memcpy((float*)s.data + at, &poison32, 4);
            }
        }
    return s;
}

static void* copy_of(const struct stored* s, int f64) {
    size_t bytes = (s->lines ? s->lines : 1) * s->ld * (f64 ? 8 : 4);
    void* p = malloc(bytes);
    memcpy(p, s->data, bytes);
    return p;
}

static int fail(const char* what, const char* name) {
    fprintf(stderr, "FAILED %s: %s\n", name, what);
    return 1;
}

static void call(const struct gemm_case* t, int reference, const struct stored* a, const struct stored* b,
                 void* c, int ldc) {
    const char ta[1] = {t->ta}, tb[1] = {t->tb};
    int lda = (int)a->ld, ldb = (int)b->ld;
    int order = t->api == cblas_row ? 101 : 102;
    int cta = is_trans(t->ta) ? (t->ta == 'C' || t->ta == 'c' ? 113 : 112) : 111;
    int ctb = is_trans(t->tb) ? (t->tb == 'C' || t->tb == 'c' ? 113 : 112) : 111;
    if (t->f64) {
        double alpha = t->alpha, beta = t->beta;
        if (t->api == fortran)
            (reference ? ref_dgemm : dgemm_)(ta, tb, &t->m, &t->n, &t->k, &alpha, a->data, &lda, b->data, &ldb,
                                             &beta, c, &ldc, 1, 1);
        else
            (reference ? ref_cblas_dgemm : cblas_dgemm)(order, cta, ctb, t->m, t->n, t->k, alpha, a->data, lda,
                                                         b->data, ldb, beta, c, ldc);
    } else {
        float alpha = (float)t->alpha, beta = (float)t->beta;
        if (t->api == fortran)
            (reference ? ref_sgemm : sgemm_)(ta, tb, &t->m, &t->n, &t->k, &alpha, a->data, &lda, b->data, &ldb,
                                             &beta, c, &ldc, 1, 1);
        else
            (reference ? ref_cblas_sgemm : cblas_sgemm)(order, cta, ctb, t->m, t->n, t->k, alpha, a->data, lda,
                                                         b->data, ldb, beta, c, ldc);
    }
}

static int run_case(const struct gemm_case* t) {
    static const char* routines[2][3] = {{"sgemm_", "cblas_sgemm", "cblas_sgemm"},
                                         {"dgemm_", "cblas_dgemm", "cblas_dgemm"}};
    const char* name = routines[t->f64][t->api];
    const int row_major = t->api == cblas_row;
    const int ar = is_trans(t->ta) ? t->k : t->m, ac = is_trans(t->ta) ? t->m : t->k;
    const int br = is_trans(t->tb) ? t->n : t->k, bc = is_trans(t->tb) ? t->k : t->n;
    struct stored a = make(t->f64, ar, ac, row_major, t->pad_a);
    struct stored b = make(t->f64, br, bc, row_major, t->pad_b);
    struct stored c = make(t->f64, t->m, t->n, row_major, t->pad_c);
    const size_t es = t->f64 ? 8 : 4;
    if (t->beta == 0.0) poison(&c, t->f64); /* C must not be read */
    const int quick = strict && t->alpha == 0.0;
    if (quick) poison(&a, t->f64), poison(&b, t->f64); /* nor A and B */
    void* a0 = copy_of(&a, t->f64);
    void* b0 = copy_of(&b, t->f64);
    void* expected = copy_of(&c, t->f64);

    printf("call %s %s %c %c %d %d %d %g\n", name, row_major ? "row" : "col", log_trans(t->ta), log_trans(t->tb),
           t->m, t->n, t->k, t->alpha);
    fflush(stdout);
    if (!quick) call(t, 1, &a, &b, expected, (int)c.ld);
    else
        for (size_t i = 0; i < c.lines; ++i)
            for (size_t j = 0; j < c.len; ++j) {
                char* e = (char*)expected + (i * c.ld + j) * es;
                if (t->f64) *(double*)e = t->beta == 0.0 ? 0.0 : t->beta * *(double*)e;
                else *(float*)e = t->beta == 0.0 ? 0.0f : (float)t->beta * *(float*)e;
            }
    call(t, 0, &a, &b, c.data, (int)c.ld);

    char what[256];
    int bad = 0;
    if (memcmp(a0, a.data, (a.lines ? a.lines : 1) * a.ld * es) != 0) bad = fail("A changed", name);
    if (memcmp(b0, b.data, (b.lines ? b.lines : 1) * b.ld * es) != 0) bad = fail("B changed", name);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < c.lines && !bad; ++i)
        for (size_t j = 0; j < c.ld; ++j) {
            const char* got = (const char*)c.data + (i * c.ld + j) * es;
            const char* want = (const char*)expected + (i * c.ld + j) * es;
            if (j >= c.len) { /* padding: the exact NaN payload, untouched */
                if (memcmp(got, want, es) != 0) {
                    snprintf(what, sizeof what, "padding of C written at line %zu, element %zu", i, j);
                    bad = fail(what, name);
                    break;
                }
                continue;
            }
            double g = t->f64 ? *(const double*)got : *(const float*)got;
            double w = t->f64 ? *(const double*)want : *(const float*)want;
            if (isnan(g) || isnan(w)) {
                snprintf(what, sizeof what, "NaN in C at line %zu, element %zu (C read with beta 0?)", i, j);
                bad = fail(what, name);
                break;
            }
            diff += (g - w) * (g - w);
            norm += w * w;
        }
    /* The CLI's --check tolerance: max(16, 8 sqrt(k)) unit roundoffs, relative Frobenius. */
    const double u = t->f64 ? 1.1102230246251565e-16 : 5.9604644775390625e-08;
    const double tol = fmax(16.0, 8.0 * sqrt((double)t->k)) * u;
    /* A C that is exactly zero (beta == 0 with alpha == 0 or k == 0) must be exactly that; an empty
       one has only its padding to check. */
    const int exact = norm == 0.0 && c.lines * c.len > 0;
    if (!bad && exact && diff != 0.0) bad = fail("C should be exactly zero", name);
    if (!bad && norm > 0.0 && sqrt(diff / norm) > tol) {
        snprintf(what, sizeof what, "relative error %.3g above %.3g (|C| = %.3g)", sqrt(diff / (norm > 0 ? norm : 1)),
                 tol, sqrt(norm));
        bad = fail(what, name);
    }
    free(a.data), free(b.data), free(c.data), free(a0), free(b0), free(expected);
    return bad;
}

static const struct gemm_case cases[] = {
    /* f64 Fortran: every transpose spelling, lda/ldb/ldc above the matrices */
    {1, fortran, 'N', 'N', 67, 45, 33, 1.5, 0.0, 3, 5, 7},
    {1, fortran, 't', 'N', 67, 45, 33, -0.75, 0.5, 1, 2, 3},
    {1, fortran, 'N', 'c', 129, 3, 77, 2.0, -1.25, 4, 0, 9},
    {1, fortran, 'C', 'T', 5, 131, 61, 0.5, 1.0, 2, 3, 1},
    {1, fortran, 'n', 't', 1, 50, 40, 1.0, 0.25, 6, 1, 2},
    {1, fortran, 'T', 't', 50, 1, 40, -2.0, 0.0, 1, 4, 5},
    {1, fortran, 'N', 'N', 513, 519, 505, 0.75, 0.5, 5, 3, 11}, /* above 512^3 */
    /* f32 Fortran */
    {0, fortran, 'N', 'N', 71, 39, 45, 1.25, 0.0, 2, 3, 4},
    {0, fortran, 'T', 'n', 33, 97, 29, -1.0, 2.0, 5, 1, 3},
    {0, fortran, 'n', 'T', 83, 61, 127, 0.5, -0.5, 1, 6, 2},
    {0, fortran, 'C', 'C', 41, 43, 47, 1.0, 1.0, 3, 3, 3},
    {0, fortran, 'N', 'N', 512, 512, 512, 1.0, 0.0, 1, 2, 3}, /* at 512^3 */
    /* CBLAS, row- and column-major */
    {1, cblas_row, 'N', 'N', 61, 53, 37, 1.5, 0.0, 3, 2, 5},
    {1, cblas_row, 'T', 'N', 44, 77, 31, -0.5, 1.5, 1, 4, 2},
    {1, cblas_row, 'N', 'T', 512, 512, 511, 2.0, -1.0, 2, 2, 2}, /* just below 512^3 */
    {1, cblas_col, 'T', 'T', 39, 71, 43, 1.0, 0.75, 5, 1, 6},
    {0, cblas_row, 'N', 'N', 57, 63, 49, 1.0, 0.0, 4, 3, 1},
    {0, cblas_row, 'T', 'T', 35, 29, 83, 0.25, 2.0, 2, 5, 3},
    {0, cblas_col, 'N', 'T', 75, 81, 23, -1.5, 0.5, 1, 2, 7},
    {0, cblas_col, 'C', 'N', 27, 37, 91, 1.0, -2.0, 3, 4, 5},
    /* the quick returns: k == 0 and alpha == 0 (C = beta C, A and B NaN), an empty C */
    {1, fortran, 'N', 'T', 37, 29, 0, 1.5, -2.0, 1, 2, 3},
    {0, cblas_row, 'T', 'N', 31, 23, 0, 1.0, 0.0, 2, 0, 1},
    {1, cblas_col, 'N', 'N', 41, 33, 27, 0.0, -0.5, 1, 2, 3},
    {0, fortran, 'T', 'N', 35, 27, 19, 0.0, 0.0, 0, 3, 2},
    {0, fortran, 'N', 'N', 0, 31, 17, 1.0, 0.5, 0, 1, 0},
    {1, cblas_row, 'N', 'T', 23, 0, 19, 2.0, 0.0, 1, 0, 2},
    {1, fortran, 'T', 'T', 0, 0, 0, 1.0, 1.0, 0, 0, 0},
};
enum { case_count = sizeof cases / sizeof cases[0] };

static void* run_all(void* failures) {
    rng_state ^= (uint64_t)(uintptr_t)failures; /* other operands on each thread */
    for (size_t i = 0; i < case_count; ++i) *(int*)failures += run_case(&cases[i]);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 2 || argc > 4 || (argc == 4 && strcmp(argv[3], "strict") != 0)) {
        fprintf(stderr, "usage: %s SYSTEM_BLAS_PATH [THREADS [strict]]\n", argv[0]);
        return 2;
    }
    strict = argc == 4;
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot open %s: %s\n", argv[1], dlerror());
        return 2;
    }
    ref_sgemm = (sgemm_t*)dlsym(h, "sgemm_");
    ref_dgemm = (dgemm_t*)dlsym(h, "dgemm_");
    ref_cblas_sgemm = (cblas_sgemm_t*)dlsym(h, "cblas_sgemm");
    ref_cblas_dgemm = (cblas_dgemm_t*)dlsym(h, "cblas_dgemm");
    if (!ref_sgemm || !ref_dgemm || !ref_cblas_sgemm || !ref_cblas_dgemm) {
        fprintf(stderr, "%s lacks a GEMM entry point\n", argv[1]);
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (threads < 1 || threads > 16) {
        fprintf(stderr, "thread count %s: expected 1 to 16\n", argv[2]);
        return 2;
    }
    pthread_t thread[16];
    int failures[16] = {0}, total = 0;
    for (int t = 1; t < threads; ++t) pthread_create(&thread[t], NULL, run_all, &failures[t]);
    run_all(&failures[0]);
    for (int t = 1; t < threads; ++t) pthread_join(thread[t], NULL);
    for (int t = 0; t < threads; ++t) total += failures[t];
    if (total) {
        fprintf(stderr, "%d of %d calls wrong\n", total, case_count * threads);
        return 1;
    }
    printf("all %d calls match the system BLAS\n", case_count * threads);
    return 0;
}
