// GEMM kernels in OpenCL C, built once per value type (-DREAL=float|double) and tile shape
// (-DTS, -DWPT): C <- alpha*op(A)*op(B) + beta*C with any row/column strides, so one build
// serves every layout and op. beta == 0 never reads C; alpha == 0 never reads A or B.
#ifdef TS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#pragma OPENCL FP_CONTRACT OFF

typedef REAL real;

inline void store_c(__global real* c, long idx, real acc, real alpha, real beta) {
    c[idx] = beta == (real)0 ? alpha * acc : alpha * acc + beta * c[idx];
}

// Seed 001: one work item per element of C (dimension 0 runs along the columns of C).
__kernel void gemm_naive(const long m, const long n, const long k, const real alpha, const real beta,
                         __global const real* a, const long a_off, const long a_rs, const long a_cs,
                         __global const real* b, const long b_off, const long b_rs, const long b_cs,
                         __global real* c, const long c_off, const long c_rs, const long c_cs) {
    const long j = get_global_id(0), i = get_global_id(1);
    if (i >= m || j >= n) return;
    real acc = (real)0;
    if (alpha != (real)0)
        for (long p = 0; p < k; ++p) acc += a[a_off + i * a_rs + p * a_cs] * b[b_off + p * b_rs + j * b_cs];
    store_c(c, c_off + i * c_rs + j * c_cs, acc, alpha, beta);
}

// Seed 004 with register blocking: a work group of RTS x RTS items computes a TS x TS tile of C,
// each item WPT x WPT elements; A and B pass through __local tiles. Items outside C (partial
// groups at the edges) still load zeros and reach every barrier: control flow around barriers
// depends only on arguments, never on the item.
#define RTS (TS / WPT)
__kernel __attribute__((reqd_work_group_size(RTS, RTS, 1)))
void gemm_tiled(const long m, const long n, const long k, const real alpha, const real beta,
                __global const real* a, const long a_off, const long a_rs, const long a_cs,
                __global const real* b, const long b_off, const long b_rs, const long b_cs,
                __global real* c, const long c_off, const long c_rs, const long c_cs) {
    __local real a_tile[TS][TS + 1];  // [row of C][p], padded against bank conflicts
    __local real b_tile[TS][TS + 1];  // [p][column of C]
    const int tx = get_local_id(0), ty = get_local_id(1);
    const long col0 = (long)get_group_id(0) * TS, row0 = (long)get_group_id(1) * TS;
    real acc[WPT][WPT];
    for (int r = 0; r < WPT; ++r)
        for (int q = 0; q < WPT; ++q) acc[r][q] = (real)0;
    const long k_used = alpha != (real)0 ? k : 0;
    for (long p0 = 0; p0 < k_used; p0 += TS) {
        for (int r = 0; r < WPT; ++r)
            for (int q = 0; q < WPT; ++q) {
                const int li = ty + r * RTS, lq = tx + q * RTS;
                const long gi = row0 + li, gp = p0 + lq;
                a_tile[li][lq] = (gi < m && gp < k) ? a[a_off + gi * a_rs + gp * a_cs] : (real)0;
                const long gp2 = p0 + li, gj = col0 + lq;
                b_tile[li][lq] = (gp2 < k && gj < n) ? b[b_off + gp2 * b_rs + gj * b_cs] : (real)0;
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = 0; p < TS; ++p) {
            real b_reg[WPT];
            for (int q = 0; q < WPT; ++q) b_reg[q] = b_tile[p][tx + q * RTS];
            for (int r = 0; r < WPT; ++r) {
                const real a_val = a_tile[ty + r * RTS][p];
                for (int q = 0; q < WPT; ++q) acc[r][q] += a_val * b_reg[q];
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
// beta == 0 case before CLBlast, which would otherwise read a C that may hold NaN.
__kernel void gemm_scale_c(const long m, const long n, const real beta, __global real* c, const long c_off,
                           const long c_rs, const long c_cs) {
    const long j = get_global_id(0), i = get_global_id(1);
    if (i >= m || j >= n) return;
    const long idx = c_off + i * c_rs + j * c_cs;
    c[idx] = beta == (real)0 ? (real)0 : beta * c[idx];
}
