/* A LAPACK client linked with -llapack: ?potrf_ ?potrs_ ?posv_ ?getrf_ ?getrs_ ?gesv_ in s, d, c and z,
   called as gfortran calls them (every argument by address, the hidden length of UPLO/TRANS last).
   Random non-zero data, odd and non-square shapes, leading dimensions larger than the matrices whose
   padding (and the triangle potrf/posv must not touch) holds a NaN payload that must survive; inputs
   that potrs/getrs only read must not change, ipiv and info are poisoned before each call. Hermitian
   matrices get a non-zero imaginary part on the diagonal (LAPACK ignores it). Besides the ordinary
   cases: not positive definite (potrf, posv: LAPACK's info, B untouched), an exactly singular matrix
   (getrf, gesv: info, the factorization still completes, B untouched), the quick returns, one
   dpotrf_ above the drop-in's default threshold (n = 777), and illegal arguments, which must reach
   this program's xerbla_ with LAPACK's routine name and argument number and return info = -number.

   The LU matrices are P0 L0 U0 with |L0| <= 1/2 (LAPACK's |re| + |im| for complex): every pivot
   LAPACK chooses wins by a factor 2, so the pivots are compared exactly whatever the rounding.

   Run twice with the same seed: `write FILE` (without the drop-in: the system LAPACK) stores every
   result, `compare FILE` (with the drop-in preloaded) compares each result with the stored one, to a
   tolerance (the tile algorithms add in another order) and counts those equal bitwise. A result is
   never computed by calling the system LAPACK from the checking process: that LAPACK's own calls of
   ?potrf_/?trsm_ would bind to the drop-in. Prints "call <routine> <uplo> <trans> <m> <n> <nrhs> <info>"
   per call (as the drop-in logs it), "illegal <routine> <number> <name seen> <number seen> ok|WRONG" per
   illegal call, and "all N calls match" at the end; exits 1 on any mismatch.
   usage: lapack_client write|compare FILE */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void potrf_t(const char*, const int*, void*, const int*, int*, size_t);
typedef void potrs_t(const char*, const int*, const int*, const void*, const int*, void*, const int*, int*, size_t);
typedef void posv_t(const char*, const int*, const int*, void*, const int*, void*, const int*, int*, size_t);
typedef void getrf_t(const int*, const int*, void*, const int*, int*, int*);
typedef void getrs_t(const char*, const int*, const int*, const void*, const int*, const int*, void*, const int*, int*,
                     size_t);
typedef void gesv_t(const int*, const int*, void*, const int*, int*, void*, const int*, int*);

/* What the process links (-llapack), or what a preloaded drop-in puts in front of it. */
potrf_t spotrf_, dpotrf_, cpotrf_, zpotrf_;
potrs_t spotrs_, dpotrs_, cpotrs_, zpotrs_;
posv_t sposv_, dposv_, cposv_, zposv_;
getrf_t sgetrf_, dgetrf_, cgetrf_, zgetrf_;
getrs_t sgetrs_, dgetrs_, cgetrs_, zgetrs_;
gesv_t sgesv_, dgesv_, cgesv_, zgesv_;

struct precision {
    char letter;
    int complex_, single;
    size_t size; /* bytes per element */
    potrf_t* potrf;
    potrs_t* potrs;
    posv_t* posv;
    getrf_t* getrf;
    getrs_t* getrs;
    gesv_t* gesv;
};
static const struct precision precisions[] = {
    {'s', 0, 1, 4, spotrf_, spotrs_, sposv_, sgetrf_, sgetrs_, sgesv_},
    {'d', 0, 0, 8, dpotrf_, dpotrs_, dposv_, dgetrf_, dgetrs_, dgesv_},
    {'c', 1, 1, 8, cpotrf_, cpotrs_, cposv_, cgetrf_, cgetrs_, cgesv_},
    {'z', 1, 0, 16, zpotrf_, zpotrs_, zposv_, zgetrf_, zgetrs_, zgesv_},
};

#include "xerbla_recorder.h" /* this program's xerbla_: records what LAPACK reported */

/* ---- data ---- */
static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double uniform(void) { /* in [-1, 1], never 0 */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 4503599627370496.0 - 1.0;
}

static const uint64_t poison64 = 0x7ff8dead0000beefull;
static const uint32_t poison32 = 0x7fc0beefu;

/* A column-major matrix of one precision: rows x cols inside ld x cols elements. */
struct matrix {
    const struct precision* p;
    int rows, cols, ld;
    unsigned char* data;
};

static size_t real_size(const struct precision* p) { return p->single ? 4 : 8; }

static void poison_at(const struct precision* p, unsigned char* at) {
    const int parts = p->complex_ ? 2 : 1;
    for (int k = 0; k < parts; ++k)
        if (p->single) memcpy(at + 4 * k, &poison32, 4);
        else memcpy(at + 8 * k, &poison64, 8);
}
static int is_poison(const struct precision* p, const unsigned char* at) {
    unsigned char expected[16];
    poison_at(p, expected);
    return memcmp(at, expected, p->size) == 0;
}

static struct matrix make(const struct precision* p, int rows, int cols, int pad) {
    struct matrix m = {p, rows, cols, (rows > 1 ? rows : 1) + pad, NULL};
    const size_t count = (size_t)m.ld * (size_t)(cols > 0 ? cols : 1);
    m.data = malloc(count * p->size);
    for (size_t i = 0; i < count; ++i) poison_at(p, m.data + i * p->size);
    return m;
}
static unsigned char* at(const struct matrix* m, int i, int j) {
    return m->data + ((size_t)i + (size_t)j * (size_t)m->ld) * m->p->size;
}
static void set(const struct matrix* m, int i, int j, double re, double im) {
    unsigned char* a = at(m, i, j);
    if (m->p->single) {
        const float v[2] = {(float)re, (float)im};
        memcpy(a, v, m->p->complex_ ? 8 : 4);
    } else {
        const double v[2] = {re, im};
        memcpy(a, v, m->p->complex_ ? 16 : 8);
    }
}
static void get(const struct matrix* m, int i, int j, double* re, double* im) {
    const unsigned char* a = at(m, i, j);
    *im = 0;
    if (m->p->single) {
        float v[2] = {0, 0};
        memcpy(v, a, m->p->complex_ ? 8 : 4);
        *re = v[0], *im = v[1];
    } else {
        double v[2] = {0, 0};
        memcpy(v, a, m->p->complex_ ? 16 : 8);
        *re = v[0], *im = v[1];
    }
}
static struct matrix copy_of(const struct matrix* m) {
    struct matrix c = *m;
    const size_t bytes = (size_t)m->ld * (size_t)(m->cols > 0 ? m->cols : 1) * m->p->size;
    c.data = malloc(bytes);
    memcpy(c.data, m->data, bytes);
    return c;
}
static int same_bytes(const struct matrix* a, const struct matrix* b) {
    return memcmp(a->data, b->data, (size_t)a->ld * (size_t)(a->cols > 0 ? a->cols : 1) * a->p->size) == 0;
}

/* A Hermitian (symmetric) positive definite n x n matrix, only its `uplo` triangle stored (the
   other and the padding poisoned); the diagonal's imaginary part is non-zero (LAPACK ignores it). */
static struct matrix hpd(const struct precision* p, int n, char uplo, int pad) {
    struct matrix m = make(p, n, n, pad);
    const int upper = uplo == 'U' || uplo == 'u';
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) {
            if (upper ? i > j : i < j) continue;
            if (i == j) set(&m, i, j, n + uniform(), p->complex_ ? uniform() : 0);
            else set(&m, i, j, uniform(), p->complex_ ? uniform() : 0);
        }
    return m;
}

/* A Cholesky factor (the `uplo` triangle: diagonal real in [1, 2], the rest small), what potrs reads. */
static struct matrix cholesky_factor(const struct precision* p, int n, char uplo, int pad) {
    struct matrix m = make(p, n, n, pad);
    const int upper = uplo == 'U' || uplo == 'u';
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) {
            if (upper ? i > j : i < j) continue;
            if (i == j) set(&m, i, j, 1.5 + 0.5 * uniform(), 0);
            else set(&m, i, j, uniform() / n, p->complex_ ? uniform() / n : 0);
        }
    return m;
}

static struct matrix general(const struct precision* p, int rows, int cols, int pad) {
    struct matrix m = make(p, rows, cols, pad);
    for (int j = 0; j < cols; ++j)
        for (int i = 0; i < rows; ++i) set(&m, i, j, uniform(), p->complex_ ? uniform() : 0);
    return m;
}

/* P0 L0 U0 (m x n): |L0| <= 1/2 in |re| + |im|, U0's diagonal in [1, 2] and its other entries small:
   LAPACK's pivots are P0's with a margin of 2. `zero_column` >= 0: that column of A is exactly zero
   (U(j, j) = 0: info = j + 1; the factorization goes on past it). */
static struct matrix pivoted_lu_matrix(const struct precision* p, int rows, int cols, int pad, int zero_column) {
    const int k = rows < cols ? rows : cols;
    double* l = calloc((size_t)rows * (size_t)k * 2, sizeof(double)); /* rows x k, re/im pairs */
    double* u = calloc((size_t)k * (size_t)cols * 2, sizeof(double)); /* k x cols */
    int* perm = malloc((size_t)rows * sizeof(int));
    for (int i = 0; i < rows; ++i) perm[i] = i;
    /* A zero pivot leaves its column's rows unpermuted; with P0 = I every later pivot keeps its
       margin (about 2 - 1/n), so the singular cases keep P0 = I. */
    for (int i = zero_column >= 0 ? 0 : rows - 1; i > 0; --i) {
        const int j = (int)((uniform() + 1) * 0.5 * (i + 1)) % (i + 1);
        const int t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    const double lscale = p->complex_ ? 0.25 : 0.5;
    for (int j = 0; j < k; ++j)
        for (int i = j; i < rows; ++i) {
            double* e = l + 2 * ((size_t)i + (size_t)j * rows);
            if (i == j) e[0] = 1, e[1] = 0;
            else e[0] = lscale * uniform(), e[1] = p->complex_ ? lscale * uniform() : 0;
        }
    for (int j = 0; j < cols; ++j)
        for (int i = 0; i <= j && i < k; ++i) {
            double* e = u + 2 * ((size_t)i + (size_t)j * k);
            if (j == zero_column) continue;
            if (i == j) e[0] = 1.5 + 0.5 * uniform(), e[1] = p->complex_ ? 0.25 * uniform() : 0;
            else e[0] = uniform() / cols, e[1] = p->complex_ ? uniform() / cols : 0;
        }
    struct matrix m = make(p, rows, cols, pad);
    for (int j = 0; j < cols; ++j)
        for (int i = 0; i < rows; ++i) {
            double re = 0, im = 0;
            for (int t = 0; t < k; ++t) {
                const double* a = l + 2 * ((size_t)i + (size_t)t * rows);
                const double* b = u + 2 * ((size_t)t + (size_t)j * k);
                re += a[0] * b[0] - a[1] * b[1];
                im += a[0] * b[1] + a[1] * b[0];
            }
            set(&m, perm[i], j, re, im);
        }
    free(l), free(u), free(perm);
    return m;
}

/* LU factors as getrf leaves them (unit L below the diagonal, U on and above, both well
   conditioned) and valid 1-based pivots: what getrs reads. */
static struct matrix lu_factors(const struct precision* p, int n, int pad, int* ipiv) {
    struct matrix m = make(p, n, n, pad);
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i) {
            if (i == j) set(&m, i, j, 1.5 + 0.5 * uniform(), p->complex_ ? 0.25 * uniform() : 0);
            else set(&m, i, j, uniform() / n, p->complex_ ? uniform() / n : 0);
        }
    for (int i = 0; i < n; ++i) ipiv[i] = i + 1 + (int)((uniform() + 1) * 0.5 * (n - i)) % (n - i);
    return m;
}

/* ---- results: stored (write) or compared (compare) ---- */
static FILE* results;
static int writing;
static int calls, failures, compared, bitwise;

static void fail(const char* what) {
    printf("WRONG: %s\n", what);
    ++failures;
}

/* The elements (i, j) of `m` with rows0 <= i < rows1 (per column: only a triangle when tri is 'U'
   or 'L'), against the stored result. */
static void result(const char* what, const struct matrix* m, char tri) {
    const struct precision* p = m->p;
    const int parts = p->complex_ ? 2 : 1;
    size_t count = 0;
    for (int j = 0; j < m->cols; ++j)
        for (int i = 0; i < m->rows; ++i)
            if (!(tri == 'U' && i > j) && !(tri == 'L' && i < j)) ++count;
    double* got = malloc((count ? count : 1) * 2 * sizeof(double));
    size_t c = 0;
    for (int j = 0; j < m->cols; ++j)
        for (int i = 0; i < m->rows; ++i)
            if (!(tri == 'U' && i > j) && !(tri == 'L' && i < j)) get(m, i, j, &got[2 * c], &got[2 * c + 1]), ++c;
    if (writing) {
        fwrite(&count, sizeof count, 1, results);
        fwrite(got, sizeof(double), 2 * count, results);
        free(got);
        return;
    }
    size_t stored = 0;
    double* want = malloc((count ? count : 1) * 2 * sizeof(double));
    if (fread(&stored, sizeof stored, 1, results) != 1 || stored != count ||
        fread(want, sizeof(double), 2 * count, results) != 2 * count) {
        fail(what);
        printf("  the stored results do not line up (a different run?)\n");
        exit(1);
    }
    double scale = 0, worst = 0;
    int equal = 1;
    for (size_t e = 0; e < 2 * count; ++e) scale = fmax(scale, fabs(want[e]));
    for (size_t e = 0; e < 2 * count; ++e) {
        if (e % 2 == 1 && parts == 1) continue;
        if (got[e] != want[e]) equal = 0;
        const double d = fabs(got[e] - want[e]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    const int n = m->rows > m->cols ? m->rows : m->cols;
    const double tol = 100.0 * (n > 1 ? n : 1) * (p->single ? 5.96e-8 : 1.11e-16) * (scale > 1 ? scale : 1);
    ++compared;
    bitwise += equal;
    if (!(worst <= tol)) {
        char text[256];
        snprintf(text, sizeof text, "%s: differs from the system LAPACK's by %.3g (tolerance %.3g)", what, worst, tol);
        fail(text);
    }
    free(got), free(want);
}

static void int_result(const char* what, const int* v, int count) {
    if (writing) {
        fwrite(&count, sizeof count, 1, results);
        fwrite(v, sizeof(int), (size_t)count, results);
        return;
    }
    int stored = -1;
    int* want = malloc((size_t)(count > 0 ? count : 1) * sizeof(int));
    if (fread(&stored, sizeof stored, 1, results) != 1 || stored != count ||
        fread(want, sizeof(int), (size_t)count, results) != (size_t)count) {
        fail(what);
        exit(1);
    }
    if (count > 0 && memcmp(v, want, (size_t)count * sizeof(int)) != 0) {
        char text[256];
        int i = 0;
        while (v[i] == want[i]) ++i;
        snprintf(text, sizeof text, "%s: entry %d is %d, the system LAPACK's %d", what, i, v[i], want[i]);
        fail(text);
    }
    free(want);
}

/* The padding rows of m (and the triangle it must not touch: 'U' keeps the strictly lower one
   poisoned, 'L' the strictly upper one) still hold the poison. */
static void untouched(const char* what, const struct matrix* m, char tri) {
    for (int j = 0; j < (m->cols > 0 ? m->cols : 1); ++j)
        for (int i = 0; i < m->ld; ++i) {
            const int outside = i >= m->rows || j >= m->cols || (tri == 'U' && i > j) || (tri == 'L' && i < j);
            if (outside && !is_poison(m->p, at(m, i, j))) {
                char text[200];
                snprintf(text, sizeof text, "%s: element (%d, %d) outside what it may write changed", what, i, j);
                fail(text);
                return;
            }
        }
}

static char upper_char(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }

static void announce(const struct precision* p, const char* routine, char uplo, char trans, int m, int n, int nrhs,
                     int info) {
    printf("call %c%s_ %c %c %d %d %d %d\n", p->letter, routine, uplo, trans, m, n, nrhs, info);
    ++calls;
}

static void check_info(const char* what, int info) {
    int v = info;
    int_result(what, &v, 1);
}

/* ---- the cases ---- */

static void potrf_case(const struct precision* p, int n, char uplo, int pad, int not_pd_at) {
    char what[96];
    snprintf(what, sizeof what, "%cpotrf_ uplo %c n %d%s", p->letter, uplo, n, not_pd_at >= 0 ? " (not PD)" : "");
    struct matrix a = hpd(p, n, uplo, pad);
    if (not_pd_at >= 0) set(&a, not_pd_at, not_pd_at, -1.0, 0);
    int info = 12345;
    p->potrf(&uplo, &n, a.data, &a.ld, &info, 1);
    announce(p, "potrf", upper_char(uplo), '-', n, n, 0, info);
    const char tri = upper_char(uplo);
    check_info(what, info);
    if (not_pd_at < 0) result(what, &a, tri);
    untouched(what, &a, tri);
    free(a.data);
}

static void potrs_case(const struct precision* p, int n, int nrhs, char uplo, int pad) {
    char what[96];
    snprintf(what, sizeof what, "%cpotrs_ uplo %c n %d nrhs %d", p->letter, uplo, n, nrhs);
    struct matrix a = cholesky_factor(p, n, uplo, pad), b = general(p, n, nrhs, pad + 1);
    const struct matrix a0 = copy_of(&a);
    int info = 12345;
    p->potrs(&uplo, &n, &nrhs, a.data, &a.ld, b.data, &b.ld, &info, 1);
    announce(p, "potrs", upper_char(uplo), '-', n, n, nrhs, info);
    check_info(what, info);
    result(what, &b, 0);
    untouched(what, &b, 0);
    if (!same_bytes(&a, &a0)) fail("potrs changed A");
    free(a.data), free(b.data), free(a0.data);
}

static void posv_case(const struct precision* p, int n, int nrhs, char uplo, int pad, int not_pd_at) {
    char what[96];
    snprintf(what, sizeof what, "%cposv_ uplo %c n %d nrhs %d%s", p->letter, uplo, n, nrhs,
             not_pd_at >= 0 ? " (not PD)" : "");
    struct matrix a = hpd(p, n, uplo, pad), b = general(p, n, nrhs, pad + 2);
    if (not_pd_at >= 0) set(&a, not_pd_at, not_pd_at, -1.0, 0);
    const struct matrix b0 = copy_of(&b);
    int info = 12345;
    p->posv(&uplo, &n, &nrhs, a.data, &a.ld, b.data, &b.ld, &info, 1);
    announce(p, "posv", upper_char(uplo), '-', n, n, nrhs, info);
    const char tri = upper_char(uplo);
    check_info(what, info);
    if (not_pd_at < 0) {
        result(what, &a, tri);
        result(what, &b, 0);
    } else if (!same_bytes(&b, &b0)) {
        fail("posv changed B although A is not positive definite");
    }
    untouched(what, &a, tri);
    untouched(what, &b, 0);
    free(a.data), free(b.data), free(b0.data);
}

static void getrf_case(const struct precision* p, int m, int n, int pad, int zero_column) {
    char what[96];
    snprintf(what, sizeof what, "%cgetrf_ %dx%d%s", p->letter, m, n, zero_column >= 0 ? " (singular)" : "");
    struct matrix a = pivoted_lu_matrix(p, m, n, pad, zero_column);
    const int k = m < n ? m : n;
    int* ipiv = malloc((size_t)(k + 1) * sizeof(int));
    for (int i = 0; i <= k; ++i) ipiv[i] = -7;
    int info = 12345;
    p->getrf(&m, &n, a.data, &a.ld, ipiv, &info);
    announce(p, "getrf", '-', '-', m, n, 0, info);
    check_info(what, info);
    result(what, &a, 0);
    int_result(what, ipiv, k);
    if (ipiv[k] != -7) fail("getrf wrote past min(m, n) pivots");
    untouched(what, &a, 0);
    free(a.data), free(ipiv);
}

static void getrs_case(const struct precision* p, int n, int nrhs, char trans, int pad) {
    char what[96];
    snprintf(what, sizeof what, "%cgetrs_ trans %c n %d nrhs %d", p->letter, trans, n, nrhs);
    int* ipiv = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    struct matrix a = lu_factors(p, n, pad, ipiv), b = general(p, n, nrhs, pad + 1);
    const struct matrix a0 = copy_of(&a);
    int* ipiv0 = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    memcpy(ipiv0, ipiv, (size_t)n * sizeof(int));
    int info = 12345;
    p->getrs(&trans, &n, &nrhs, a.data, &a.ld, ipiv, b.data, &b.ld, &info, 1);
    announce(p, "getrs", '-', upper_char(trans), n, n, nrhs, info);
    check_info(what, info);
    result(what, &b, 0);
    untouched(what, &b, 0);
    if (!same_bytes(&a, &a0) || memcmp(ipiv, ipiv0, (size_t)n * sizeof(int)) != 0) fail("getrs changed A or ipiv");
    free(a.data), free(b.data), free(a0.data), free(ipiv), free(ipiv0);
}

static void gesv_case(const struct precision* p, int n, int nrhs, int pad, int zero_column) {
    char what[96];
    snprintf(what, sizeof what, "%cgesv_ n %d nrhs %d%s", p->letter, n, nrhs, zero_column >= 0 ? " (singular)" : "");
    struct matrix a = pivoted_lu_matrix(p, n, n, pad, zero_column), b = general(p, n, nrhs, pad + 1);
    const struct matrix b0 = copy_of(&b);
    int* ipiv = malloc((size_t)(n + 1) * sizeof(int));
    for (int i = 0; i <= n; ++i) ipiv[i] = -7;
    int info = 12345;
    p->gesv(&n, &nrhs, a.data, &a.ld, ipiv, b.data, &b.ld, &info);
    announce(p, "gesv", '-', '-', n, n, nrhs, info);
    check_info(what, info);
    result(what, &a, 0);
    int_result(what, ipiv, n);
    if (zero_column < 0) result(what, &b, 0);
    else if (!same_bytes(&b, &b0)) fail("gesv changed B although A is singular");
    untouched(what, &a, 0);
    untouched(what, &b, 0);
    free(a.data), free(b.data), free(b0.data), free(ipiv);
}

/* One illegal call: xerbla_ must see `routine` (upper case) and `number`, and info must be -number. */
static void illegal(const struct precision* p, const char* routine, int number, int* info_) {
    const int info = *info_;
    *info_ = 12345; /* poison for the next call */
    char name[16];
    snprintf(name, sizeof name, "%c%s", p->letter - 32, routine);
    for (char* c = name + 1; *c; ++c) *c = upper_char(*c);
    /* The system LAPACK alone (write) may leave info unset (OpenBLAS 0.3.21's ?getrs_ does): said, not
       failed; through the drop-in info must be LAPACK's. */
    for (size_t len = strlen(last_routine); len > 0 && last_routine[len - 1] == ' ';) last_routine[--len] = 0;
    const int reported = strcmp(last_routine, name) == 0 && last_info == number;
    const int ok = reported && (info == -number || writing);
    printf("illegal %c%s_ %d %s %d info %d %s%s\n", p->letter, routine, number, last_routine[0] ? last_routine : "-",
           last_info, info, ok ? "ok" : "WRONG", info == -number ? "" : " (info is not -number)");
    if (!ok) ++failures;
    last_routine[0] = 0, last_info = 0;
}

static void illegal_cases(const struct precision* p) {
    double buffer[64] = {0};
    int ipiv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int info = 12345, n = 4, m = 4, nrhs = 2, one = 1, minus = -1, ld = 4, small = 2;
    last_routine[0] = 0;
    p->potrf("X", &n, buffer, &ld, &info, 1);
    illegal(p, "potrf", 1, &info);
    p->potrf("L", &minus, buffer, &ld, &info, 1);
    illegal(p, "potrf", 2, &info);
    p->potrf("u", &n, buffer, &small, &info, 1);
    illegal(p, "potrf", 4, &info);
    p->potrs("U", &n, &minus, buffer, &ld, buffer, &ld, &info, 1);
    illegal(p, "potrs", 3, &info);
    p->potrs("L", &n, &nrhs, buffer, &ld, buffer, &small, &info, 1);
    illegal(p, "potrs", 7, &info);
    p->posv("L", &n, &nrhs, buffer, &small, buffer, &small, &info, 1);  /* lda before ldb */
    illegal(p, "posv", 5, &info);
    p->posv("?", &minus, &nrhs, buffer, &ld, buffer, &ld, &info, 1);    /* uplo before n */
    illegal(p, "posv", 1, &info);
    p->getrf(&minus, &n, buffer, &ld, ipiv, &info);
    illegal(p, "getrf", 1, &info);
    p->getrf(&m, &n, buffer, &small, ipiv, &info);
    illegal(p, "getrf", 4, &info);
    p->getrs("X", &n, &nrhs, buffer, &ld, ipiv, buffer, &ld, &info, 1);
    illegal(p, "getrs", 1, &info);
    p->getrs("t", &n, &nrhs, buffer, &ld, ipiv, buffer, &small, &info, 1);
    illegal(p, "getrs", 8, &info);
    p->gesv(&n, &minus, buffer, &ld, ipiv, buffer, &ld, &info);
    illegal(p, "gesv", 2, &info);
    p->gesv(&one, &nrhs, buffer, &one, ipiv, buffer, &minus, &info);
    illegal(p, "gesv", 7, &info);
}

int main(int argc, char** argv) {
    if (argc != 3 || (strcmp(argv[1], "write") != 0 && strcmp(argv[1], "compare") != 0)) {
        fprintf(stderr, "usage: lapack_client write|compare FILE\n");
        return 2;
    }
    writing = strcmp(argv[1], "write") == 0;
    results = fopen(argv[2], writing ? "wb" : "rb");
    if (!results) {
        perror(argv[2]);
        return 2;
    }
    for (int k = 0; k < 4; ++k) {
        const struct precision* p = &precisions[k];
        potrf_case(p, 37, 'L', 2, -1);
        potrf_case(p, 29, 'u', 1, -1);
        potrf_case(p, 23, 'U', 3, 11);          /* not positive definite: info 12 */
        potrs_case(p, 31, 5, 'l', 2);
        potrs_case(p, 27, 3, 'U', 1);
        posv_case(p, 33, 4, 'U', 1, -1);
        posv_case(p, 25, 3, 'L', 2, -1);
        posv_case(p, 21, 2, 'l', 1, 6);         /* not positive definite: info 7, B untouched */
        getrf_case(p, 41, 29, 2, -1);
        getrf_case(p, 23, 37, 1, -1);
        getrf_case(p, 35, 35, 3, 9);            /* U(10, 10) = 0: info 10, completed */
        getrs_case(p, 33, 4, 'N', 1);
        getrs_case(p, 29, 3, 't', 2);
        getrs_case(p, 27, 2, 'C', 1);
        gesv_case(p, 39, 5, 2, -1);
        gesv_case(p, 31, 3, 1, 4);              /* singular: info 5, B untouched */
        /* quick returns */
        potrf_case(p, 0, 'L', 0, -1);
        getrf_case(p, 0, 7, 1, -1);
        getrs_case(p, 9, 0, 'N', 1);
        posv_case(p, 13, 0, 'U', 1, -1);        /* A is still factored */
        gesv_case(p, 0, 3, 0, -1);
        illegal_cases(p);
    }
    potrf_case(&precisions[1], 777, 'L', 1, -1); /* above the default threshold (777^3 / 3 flops) */
    fclose(results);
    if (writing) {
        printf("wrote the results of %d calls\n", calls);
        return failures ? 1 : 0;
    }
    printf("%d results compared, %d equal bitwise\n", compared, bitwise);
    if (failures) {
        printf("%d calls, %d failures\n", calls, failures);
        return 1;
    }
    printf("all %d calls match the system LAPACK\n", calls);
    return 0;
}
