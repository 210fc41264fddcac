// GEMM kernels in OpenCL C, built once per value type (-DREAL=float|double, -DCOMPLEX for complex
// elements of two REAL parts) and tile shape (-DTS, -DWPT): C <- alpha*op(A)*op(B) + beta*C with
// any row/column strides, so one build serves every layout and op; conj_a/conj_b read op(A)/op(B)
// conjugated (op::c on complex types). beta == 0 never reads C; alpha == 0 never reads A or B.
#ifdef TS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#pragma OPENCL FP_CONTRACT OFF

typedef REAL real;

// The value type and its arithmetic: a complex product is four real products (as BLAS computes
// it), and the real case is the plain expression, so real results keep their bits.
#ifdef COMPLEX
#define CAT2(a, b) a##b
#define VEC2(t) CAT2(t, 2)
typedef VEC2(REAL) elem;
#define ZERO ((elem)((real)0, (real)0))
inline elem mul(elem x, elem y) { return (elem)(x.x * y.x - x.y * y.y, x.x * y.y + x.y * y.x); }
inline elem mul_add(elem x, elem y, elem acc) {
    return (elem)(acc.x + (x.x * y.x - x.y * y.y), acc.y + (x.x * y.y + x.y * y.x));
}
inline elem conj_if(elem x, int c) { return c ? (elem)(x.x, -x.y) : x; }
inline int is_zero(elem x) { return x.x == (real)0 && x.y == (real)0; }
#else
typedef real elem;
#define ZERO ((real)0)
#define mul(x, y) ((x) * (y))
#define mul_add(x, y, acc) ((acc) + (x) * (y))
#define conj_if(x, c) (x)
#define is_zero(x) ((x) == (real)0)
#endif

inline void store_c(__global elem* c, long idx, elem acc, elem alpha, elem beta) {
    c[idx] = is_zero(beta) ? mul(alpha, acc) : mul_add(beta, c[idx], mul(alpha, acc));
}

// Seed 001: one work item per element of C (dimension 0 runs along the columns of C).
__kernel void gemm_naive(const long m, const long n, const long k, const elem alpha, const elem beta,
                         __global const elem* a, const long a_off, const long a_rs, const long a_cs,
                         __global const elem* b, const long b_off, const long b_rs, const long b_cs,
                         __global elem* c, const long c_off, const long c_rs, const long c_cs, const int conj_a,
                         const int conj_b) {
    const long j = get_global_id(0), i = get_global_id(1);
    if (i >= m || j >= n) return;
    elem acc = ZERO;
    if (!is_zero(alpha))
        for (long p = 0; p < k; ++p)
            acc = mul_add(conj_if(a[a_off + i * a_rs + p * a_cs], conj_a), conj_if(b[b_off + p * b_rs + j * b_cs], conj_b),
                          acc);
    store_c(c, c_off + i * c_rs + j * c_cs, acc, alpha, beta);
}

// Seed 004 with register blocking: a work group of RTS x RTS items computes a TS x TS tile of C,
// each item WPT x WPT elements; A and B pass through __local tiles (conjugated on the way in).
// Items outside C (partial groups at the edges) still load zeros and reach every barrier: control
// flow around barriers depends only on arguments, never on the item.
#define RTS (TS / WPT)
__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1)))
void gemm_tiled(const long m, const long n, const long k, const elem alpha, const elem beta,
                __global const elem* a, const long a_off, const long a_rs, const long a_cs,
                __global const elem* b, const long b_off, const long b_rs, const long b_cs,
                __global elem* c, const long c_off, const long c_rs, const long c_cs, const int conj_a,
                const int conj_b) {
    __local elem a_tile[TS][TS + 1];  // [row of C][p], padded against bank conflicts
    __local elem b_tile[TS][TS + 1];  // [p][column of C]
    const int tx = get_local_id(0), ty = get_local_id(1);
    const long col0 = (long)get_group_id(0) * TS, row0 = (long)get_group_id(1) * TS;
    elem acc[WPT][WPT];
    for (int r = 0; r < WPT; ++r)
        for (int q = 0; q < WPT; ++q) acc[r][q] = ZERO;
    const long k_used = !is_zero(alpha) ? k : 0;
    for (long p0 = 0; p0 < k_used; p0 += TS) {
        for (int r = 0; r < WPT; ++r)
            for (int q = 0; q < WPT; ++q) {
                const int li = ty + r * RTS, lq = tx + q * RTS;
                const long gi = row0 + li, gp = p0 + lq;
                a_tile[li][lq] = (gi < m && gp < k) ? conj_if(a[a_off + gi * a_rs + gp * a_cs], conj_a) : ZERO;
                const long gp2 = p0 + li, gj = col0 + lq;
                b_tile[li][lq] = (gp2 < k && gj < n) ? conj_if(b[b_off + gp2 * b_rs + gj * b_cs], conj_b) : ZERO;
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = 0; p < TS; ++p) {
            elem b_reg[WPT];
            for (int q = 0; q < WPT; ++q) b_reg[q] = b_tile[p][tx + q * RTS];
            for (int r = 0; r < WPT; ++r) {
                const elem a_val = a_tile[ty + r * RTS][p];
                for (int q = 0; q < WPT; ++q) acc[r][q] = mul_add(a_val, b_reg[q], acc[r][q]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < WPT; ++r)
        for (int q = 0; q < WPT; ++q) {
            const long gi = row0 + ty + r * RTS, gj = col0 + tx + q * RTS;
            if (gi < m && gj < n) store_c(c, c_off + gi * c_rs + gj * c_cs, acc[r][q], alpha, beta);
        }
}

// C <- beta*C (C <- 0 when beta == 0, never reading C): GEMMs with alpha == 0 or k == 0, and the
// beta == 0 case before CLBlast, which would otherwise read a C that may hold NaN. tri: 0 all of
// C, 1 its lower triangle (i >= j), 2 its upper one (the SYRK family's diagonal tiles).
__kernel void gemm_scale_c(const long m, const long n, const elem beta, __global elem* c, const long c_off,
                           const long c_rs, const long c_cs, const int tri) {
    const long j = get_global_id(0), i = get_global_id(1);
    if (i >= m || j >= n) return;
    if ((tri == 1 && i < j) || (tri == 2 && i > j)) return;
    const long idx = c_off + i * c_rs + j * c_cs;
    c[idx] = is_zero(beta) ? ZERO : mul(beta, c[idx]);
}
