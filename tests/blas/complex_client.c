/* A complex BLAS client linked with -lblas: cgemm_, zgemm_ (Fortran ABI, hidden string lengths) and
   cblas_cgemm, cblas_zgemm (row- and column-major, scalars by address), and cgemm3m_, zgemm3m_,
   cblas_cgemm3m, cblas_zgemm3m where the BLAS in front of it has them (OpenBLAS does, netlib's does
   not). Odd shapes, leading dimensions larger than the matrices, every op pair of N, T and C (C is
   the conjugate transpose: a drop-in that reads it as T fails), complex alpha and beta with both
   parts non-zero, beta == 0 with a NaN C, alpha == 0, k == 0 and an empty C. Each C is compared with
   the system BLAS (argv[1], opened by path and called through its own handle; a 3m routine it lacks
   is compared with its ?gemm). With "strict" (every call runs on tilestream), alpha == 0 calls get
   NaN A and B and their C must be beta C exactly as the reference BLAS defines it (OpenBLAS reads A
   and B then). The padding of A, B and C holds a NaN payload that must survive, and A and B must not
   change. Prints "call <routine> <order> <ta> <tb> <m> <n> <k> <alpha>" per call and "all N calls
   match the system BLAS" at the end; exits 1 when a call is wrong.
   usage: complex_client SYSTEM_BLAS_PATH [strict] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void fortran_t(const char*, const char*, const int*, const int*, const int*, const void*, const void*,
                       const int*, const void*, const int*, const void*, void*, const int*, size_t, size_t);
typedef void cblas_t(int, int, int, int, int, int, const void*, const void*, int, const void*, int, const void*,
                     void*, int);

/* What the process links (-lblas), or what a preloaded drop-in puts in front of it. */
fortran_t cgemm_, zgemm_;
cblas_t cblas_cgemm, cblas_zgemm;

enum api { fortran, cblas_row, cblas_col };

struct complex_case {
    int z; /* 0: single (c32), 1: double (c64) */
    int three_m;
    enum api api;
    char ta, tb;
    int m, n, k;
    double alpha_re, alpha_im, beta_re, beta_im;
    int pad_a, pad_b, pad_c;
};

static const struct complex_case cases[] = {
    {0, 0, fortran, 'N', 'N', 37, 29, 23, 1.5, -0.5, 0.0, 0.0, 1, 2, 3},
    {0, 0, fortran, 'C', 'N', 31, 41, 19, -0.75, 0.25, 0.5, -1.5, 2, 0, 1},
    {0, 0, fortran, 't', 'c', 17, 23, 45, 1.0, 1.0, 1.0, 0.0, 0, 3, 2},
    {1, 0, fortran, 'n', 'C', 43, 21, 27, 0.5, 2.0, -1.0, 0.5, 3, 1, 0},
    {1, 0, fortran, 'c', 'T', 19, 33, 29, 2.0, -1.0, 0.0, 0.0, 1, 1, 4},
    {1, 0, fortran, 'C', 'C', 25, 27, 31, -1.0, 0.5, 0.25, 0.75, 2, 2, 2},
    {0, 0, cblas_row, 'C', 'T', 29, 35, 21, 1.25, -0.5, -0.5, 1.0, 1, 2, 1},
    {0, 0, cblas_col, 'T', 'C', 33, 19, 37, 0.5, 0.5, 0.0, 0.0, 2, 1, 3},
    {1, 0, cblas_row, 'N', 'C', 27, 39, 17, -1.5, 1.0, 2.0, -0.25, 3, 0, 2},
    {1, 0, cblas_col, 'C', 'N', 41, 23, 33, 1.0, -2.0, 0.5, 0.5, 0, 2, 1},
    /* the 3m variants */
    {0, 1, fortran, 'C', 'N', 35, 27, 39, 1.5, 0.5, -1.0, 0.25, 1, 2, 1},
    {1, 1, fortran, 'N', 'C', 23, 37, 29, -0.5, 1.5, 0.0, 0.0, 2, 1, 3},
    {0, 1, cblas_row, 'T', 'C', 31, 25, 43, 2.0, -0.5, 1.0, 1.0, 0, 3, 2},
    {1, 1, cblas_col, 'C', 'T', 27, 33, 21, 0.75, 0.75, -0.5, 2.0, 1, 1, 1},
    /* the quick returns: alpha == 0 (A and B NaN), k == 0, an empty C */
    {0, 0, fortran, 'C', 'N', 21, 17, 13, 0.0, 0.0, -0.5, 1.5, 1, 1, 1},
    {1, 0, cblas_row, 'N', 'C', 19, 23, 15, 0.0, 0.0, 0.0, 0.0, 2, 0, 1},
    {1, 0, fortran, 'N', 'N', 23, 19, 0, 1.0, 1.0, 2.0, -1.0, 0, 1, 2},
    {0, 0, cblas_col, 'C', 'C', 0, 21, 17, 1.0, -1.0, 0.5, 0.5, 1, 0, 0},
};
enum { case_count = sizeof cases / sizeof cases[0] };

static uint64_t rng_state = 0x5851f42d4c957f2dull;
static double uniform(void) { /* in [-1, 1], never 0 */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 4503599627370496.0 - 1.0;
}

static const uint64_t poison64 = 0x7ff8dead0000beefull;
static const uint32_t poison32 = 0x7fc0beefu;

static int is_trans(char t) { return t != 'N' && t != 'n'; }
static char upper(char t) { return t >= 'a' ? (char)(t - 32) : t; }

/* A stored matrix of complex elements (two parts each): `lines` lines of `len` elements, `ld` apart. */
struct stored {
    size_t lines, len, ld, part; /* part: bytes of one real part */
    unsigned char* data;
};

static void set_part(const struct stored* s, size_t at, double v) {
    if (s->part == 8) memcpy(s->data + at * 8, &v, 8);
    else {
        float f = (float)v;
        memcpy(s->data + at * 4, &f, 4);
    }
}
static double get_part(const struct stored* s, const unsigned char* base, size_t at) {
    if (s->part == 8) {
        double v;
        memcpy(&v, base + at * 8, 8);
        return v;
    }
    float f;
    memcpy(&f, base + at * 4, 4);
    return f;
}
static void poison_part(const struct stored* s, size_t at) {
    memcpy(s->data + at * s->part, s->part == 8 ? (const void*)&poison64 : (const void*)&poison32, s->part);
}
static size_t bytes(const struct stored* s) { return (s->lines ? s->lines : 1) * s->ld * 2 * s->part; }

static struct stored make(int z, int rows, int cols, int row_major, int pad, int nan) {
    struct stored s;
    s.lines = (size_t)(row_major ? rows : cols);
    s.len = (size_t)(row_major ? cols : rows);
    s.ld = s.len + (size_t)pad;
    if (s.ld < 1) s.ld = 1;
    s.part = z ? 8 : 4;
    s.data = malloc(bytes(&s));
    for (size_t i = 0; i < (s.lines ? s.lines : 1); ++i)
        for (size_t j = 0; j < s.ld; ++j)
            for (size_t p = 0; p < 2; ++p) {
                const size_t at = (i * s.ld + j) * 2 + p;
                if (j < s.len && i < s.lines && !nan) set_part(&s, at, uniform());
                else poison_part(&s, at);
            }
    return s;
}

static void* copy_of(const struct stored* s) {
    void* p = malloc(bytes(s));
    memcpy(p, s->data, bytes(s));
    return p;
}

static const char* name_of(const struct complex_case* t) {
    static const char* names[2][2][2] = {{{"cgemm_", "cblas_cgemm"}, {"cgemm3m_", "cblas_cgemm3m"}},
                                         {{"zgemm_", "cblas_zgemm"}, {"zgemm3m_", "cblas_zgemm3m"}}};
    return names[t->z][t->three_m][t->api != fortran];
}

static void call(const struct complex_case* t, void* entry, const struct stored* a, const struct stored* b, void* c,
                 int ldc) {
    const char ta[1] = {t->ta}, tb[1] = {t->tb};
    int lda = (int)a->ld, ldb = (int)b->ld;
    double alpha[2] = {t->alpha_re, t->alpha_im}, beta[2] = {t->beta_re, t->beta_im};
    float alpha32[2] = {(float)t->alpha_re, (float)t->alpha_im}, beta32[2] = {(float)t->beta_re, (float)t->beta_im};
    const void* al = t->z ? (const void*)alpha : (const void*)alpha32;
    const void* be = t->z ? (const void*)beta : (const void*)beta32;
    const int cta = upper(t->ta) == 'N' ? 111 : upper(t->ta) == 'T' ? 112 : 113;
    const int ctb = upper(t->tb) == 'N' ? 111 : upper(t->tb) == 'T' ? 112 : 113;
    if (t->api == fortran)
        ((fortran_t*)entry)(ta, tb, &t->m, &t->n, &t->k, al, a->data, &lda, b->data, &ldb, be, c, &ldc, 1, 1);
    else
        ((cblas_t*)entry)(t->api == cblas_row ? 101 : 102, cta, ctb, t->m, t->n, t->k, al, a->data, lda, b->data, ldb,
                          be, c, ldc);
}

static int fail(const char* what, const char* name) {
    fprintf(stderr, "FAILED %s: %s\n", name, what);
    return 1;
}

/* 1: wrong, 0: right, -1: the routine is in neither BLAS (a 3m variant of a netlib BLAS) */
static int strict;

static int run_case(const struct complex_case* t, void* system) {
    const char* name = name_of(t);
    void* mine = t->three_m ? dlsym(RTLD_DEFAULT, name) : NULL;
    if (!t->three_m)
        mine = t->api == fortran ? (void*)(t->z ? zgemm_ : cgemm_) : (void*)(t->z ? cblas_zgemm : cblas_cgemm);
    void* ref = dlsym(system, name);
    if (!ref && t->three_m) ref = dlsym(system, name_of(&(struct complex_case){t->z, 0, t->api}));
    if (!mine || !ref) return -1;
    const int row_major = t->api == cblas_row;
    const int quick = strict && t->alpha_re == 0.0 && t->alpha_im == 0.0;
    const int ar = is_trans(t->ta) ? t->k : t->m, ac = is_trans(t->ta) ? t->m : t->k;
    const int br = is_trans(t->tb) ? t->n : t->k, bc = is_trans(t->tb) ? t->k : t->n;
    const int beta_zero = t->beta_re == 0.0 && t->beta_im == 0.0;
    struct stored a = make(t->z, ar, ac, row_major, t->pad_a, quick);
    struct stored b = make(t->z, br, bc, row_major, t->pad_b, quick);
    struct stored c = make(t->z, t->m, t->n, row_major, t->pad_c, beta_zero);
    void *a0 = copy_of(&a), *b0 = copy_of(&b), *expected = copy_of(&c);
    printf("call %s %s %c %c %d %d %d %g\n", name, t->api == fortran ? "col" : row_major ? "row" : "col",
           upper(t->ta), upper(t->tb), t->m, t->n, t->k, t->alpha_re);
    fflush(stdout);
    if (!quick) call(t, ref, &a, &b, expected, (int)c.ld);
    else /* C = beta C, beta == 0 without reading C */
        for (size_t i = 0; i < c.lines; ++i)
            for (size_t j = 0; j < c.len; ++j) {
                const size_t at = (i * c.ld + j) * 2;
                const double re = beta_zero ? 0 : get_part(&c, c.data, at), im = beta_zero ? 0 : get_part(&c, c.data, at + 1);
                struct stored e = c;
                e.data = expected;
                set_part(&e, at, t->beta_re * re - t->beta_im * im);
                set_part(&e, at + 1, t->beta_re * im + t->beta_im * re);
            }
    call(t, mine, &a, &b, c.data, (int)c.ld);

    int bad = 0;
    char what[256];
    if (memcmp(a0, a.data, bytes(&a)) != 0) bad = fail("A changed", name);
    if (memcmp(b0, b.data, bytes(&b)) != 0) bad = fail("B changed", name);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < c.lines && !bad; ++i)
        for (size_t j = 0; j < c.ld && !bad; ++j)
            for (size_t p = 0; p < 2; ++p) {
                const size_t at = (i * c.ld + j) * 2 + p;
                if (j >= c.len) {
                    if (memcmp(c.data + at * c.part, (unsigned char*)expected + at * c.part, c.part) != 0) {
                        snprintf(what, sizeof what, "padding of C written at line %zu, element %zu", i, j);
                        bad = fail(what, name);
                        break;
                    }
                    continue;
                }
                const double g = get_part(&c, c.data, at), w = get_part(&c, expected, at);
                if (isnan(g) || isnan(w)) {
                    snprintf(what, sizeof what, "NaN in C at line %zu, element %zu (C, A or B read when it must not be?)",
                             i, j);
                    bad = fail(what, name);
                    break;
                }
                diff += (g - w) * (g - w);
                norm += w * w;
            }
    /* Relative Frobenius error within max(16, 8 sqrt(k)) units of roundoff, doubled for the complex
       product's four real ones per term (and the 3m method's own error on the system's side). */
    const double u = t->z ? 1.1102230246251565e-16 : 5.9604644775390625e-08;
    const double tol = 2.0 * fmax(16.0, 8.0 * sqrt((double)t->k)) * u;
    if (!bad && norm == 0.0 && c.lines * c.len > 0 && diff != 0.0) bad = fail("C should be exactly zero", name);
    if (!bad && norm > 0.0 && sqrt(diff / norm) > tol) {
        snprintf(what, sizeof what, "relative error %.3g above %.3g", sqrt(diff / norm), tol);
        bad = fail(what, name);
    }
    free(a.data), free(b.data), free(c.data), free(a0), free(b0), free(expected);
    return bad;
}

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "strict") != 0)) {
        fprintf(stderr, "usage: %s SYSTEM_BLAS_PATH [strict]\n", argv[0]);
        return 2;
    }
    strict = argc == 3;
    void* system = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!system) {
        fprintf(stderr, "cannot open %s: %s\n", argv[1], dlerror());
        return 2;
    }
    int wrong = 0, made = 0;
    for (int i = 0; i < case_count; ++i) {
        const int r = run_case(&cases[i], system);
        if (r >= 0) wrong += r, ++made;
    }
    if (wrong) {
        fprintf(stderr, "%d of %d calls wrong\n", wrong, made);
        return 1;
    }
    printf("all %d calls match the system BLAS\n", made);
    return 0;
}
