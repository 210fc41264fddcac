// BLIS-style cache-blocked CPU GEMM: packed op(A) and op(B) panels and a register-blocked micro-kernel.
#include "cpu_kernels.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>

namespace tilestream::cpu {

namespace {

// Blocking parameters per value type. The micro-tile MR x NR lives in registers (NR is a whole
// number of 64-byte vectors: 2 or 3 AVX-512 registers per row, MR*NR/VL = 24 accumulators out of
// 32 registers); KC x NR of packed B is reused by every micro-tile of a column, MC x KC of packed
// A stays in L2 (1 MiB on Zen 5), KC x NC of packed B in L3. Chosen by measurement at 2048^3 on
// Zen 5 (2 cores): f32 MR=12/KC=384/MC=96 and f64 MR=8/NR=24/KC=256/MC=48 were the fastest of
// the MR 8..14, KC 192..512, MC 48..240 tried, within the +-10% noise of a shared machine.
template <class T>
struct blocking;
template <>
struct blocking<float> {
    static constexpr int mr = 12, nr = 32;
    static constexpr index_t kc = 384, mc = 96, nc = 2048;
};
template <>
struct blocking<double> {
    static constexpr int mr = 8, nr = 24;
    static constexpr index_t kc = 256, mc = 48, nc = 2016;  // multiples of MR and NR
};

constexpr std::size_t vector_bytes = 64;

// Problem in the form the blocked loops use: C(i, j) = c[i * rs_c + j] (unit column stride).
template <class T>
struct strided_problem {
    index_t m, n, k;
    const T* a;
    index_t rs_a, cs_a;
    const T* b;
    index_t rs_b, cs_b;
    T* c;
    index_t rs_c;
    T alpha, beta;
};

// Packing buffers grow on demand and are kept per thread, so repeated calls on the same pool
// workers never allocate. Cost: (MC*KC + KC*NC) elements per thread that ran a tiled GEMM, at most
// 3.3 MB for f32 and 4.2 MB for f64.
struct aligned_free {
    void operator()(void* p) const { ::operator delete(p, std::align_val_t(vector_bytes)); }
};
template <class T>
T* packing_buffer(int which, std::size_t elements) {
    thread_local std::unique_ptr<T, aligned_free> buffers[2];
    thread_local std::size_t capacity[2] = {0, 0};
    if (capacity[which] < elements) {
        buffers[which].reset();
        buffers[which].reset(static_cast<T*>(
            ::operator new(elements * sizeof(T), std::align_val_t(vector_bytes))));
        capacity[which] = elements;
    }
    return buffers[which].get();
}

// Packs the mc x kc block of op(A) at a into micro-panels of MR rows: panel r holds element
// (r*MR + i, p) at [p*MR + i]. Rows past mc are zero, so the micro-kernel never branches.
template <class T, int MR>
void pack_a(index_t mc, index_t kc, const T* a, index_t rs, index_t cs, T* __restrict dst) {
    for (index_t ir = 0; ir < mc; ir += MR, dst += kc * MR) {
        const index_t rows = std::min<index_t>(MR, mc - ir);
        const T* src = a + ir * rs;
        if (cs == 1) {
            for (index_t i = 0; i < rows; ++i)
                for (index_t p = 0; p < kc; ++p) dst[p * MR + i] = src[i * rs + p];
        } else {
            for (index_t p = 0; p < kc; ++p)
                for (index_t i = 0; i < rows; ++i) dst[p * MR + i] = src[i * rs + p * cs];
        }
        for (index_t i = rows; i < MR; ++i)
            for (index_t p = 0; p < kc; ++p) dst[p * MR + i] = T(0);
    }
}

// Packs the kc x nc block of op(B) at b into micro-panels of NR columns: panel r holds element
// (p, r*NR + j) at [p*NR + j]. Columns past nc are zero.
template <class T, int NR>
void pack_b(index_t kc, index_t nc, const T* b, index_t rs, index_t cs, T* __restrict dst) {
    for (index_t jr = 0; jr < nc; jr += NR, dst += kc * NR) {
        const index_t cols = std::min<index_t>(NR, nc - jr);
        const T* src = b + jr * cs;
        if (cs == 1) {
            for (index_t p = 0; p < kc; ++p) {
                T* d = dst + p * NR;
                const T* s = src + p * rs;
                for (index_t j = 0; j < cols; ++j) d[j] = s[j];
                for (index_t j = cols; j < NR; ++j) d[j] = T(0);
            }
        } else {
            for (index_t j = 0; j < cols; ++j)
                for (index_t p = 0; p < kc; ++p) dst[p * NR + j] = src[j * cs + p * rs];
            for (index_t p = 0; p < kc; ++p)
                for (index_t j = cols; j < NR; ++j) dst[p * NR + j] = T(0);
        }
    }
}

// C tile (mr x nr of it valid) = beta * C + alpha * (A panel * B panel), where beta == 0 never
// reads C. The accumulators are MR x NR/VL vector registers; each step of p loads one row of the
// B panel and broadcasts one element of A per row of the tile.
template <class T, int MR, int NR>
void micro_kernel(index_t kc, const T* __restrict a, const T* __restrict b, T* __restrict c,
                  index_t rs_c, T alpha, T beta, int mr, int nr) {
    typedef T vec __attribute__((vector_size(vector_bytes)));
    constexpr int vl = vector_bytes / sizeof(T);
    constexpr int nv = NR / vl;
    static_assert(NR % vl == 0, "NR must be a whole number of vectors");

    vec acc[MR][nv];
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) acc[i][v] = vec{};

    for (index_t p = 0; p < kc; ++p) {
        vec bv[nv];
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) bv[v] = *reinterpret_cast<const vec*>(b + p * NR + v * vl);
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) {
            const T ai = a[p * MR + i];
#pragma GCC unroll 4
            for (int v = 0; v < nv; ++v) acc[i][v] += ai * bv[v];
        }
    }

    if (mr == MR && nr == NR) {
        // Full tile: C rows are contiguous (unit column stride), update them a vector at a time.
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) {
            T* row = c + i * rs_c;
#pragma GCC unroll 4
            for (int v = 0; v < nv; ++v) {
                vec r = alpha * acc[i][v];
                if (beta != T(0)) {
                    vec old;
                    std::memcpy(&old, row + v * vl, sizeof old);
                    r += beta * old;
                }
                std::memcpy(row + v * vl, &r, sizeof r);
            }
        }
        return;
    }
    // Edge tile: spill the accumulators and update only the valid part of C.
    alignas(vector_bytes) T tile[MR * NR];
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < nv; ++v) std::memcpy(tile + i * NR + v * vl, &acc[i][v], sizeof(vec));
    for (int i = 0; i < mr; ++i) {
        T* row = c + i * rs_c;
        if (beta != T(0))
            for (int j = 0; j < nr; ++j) row[j] = alpha * tile[i * NR + j] + beta * row[j];
        else
            for (int j = 0; j < nr; ++j) row[j] = alpha * tile[i * NR + j];
    }
}

constexpr index_t round_up(index_t x, index_t unit) { return (x + unit - 1) / unit * unit; }

// The block size that covers `extent` in as few blocks of at most `limit` as possible, all of
// nearly equal size and a multiple of `unit` (limit must be a multiple of unit).
constexpr index_t even_block(index_t extent, index_t limit, index_t unit) {
    const index_t blocks = std::max<index_t>(1, (extent + limit - 1) / limit);
    return round_up((extent + blocks - 1) / blocks, unit);
}

// The sequential blocked algorithm on the sub-rectangle [m0, m1) x [n0, n1) of C.
template <class T>
void gemm_block(const strided_problem<T>& pr, index_t m0, index_t m1, index_t n0, index_t n1) {
    using bl = blocking<T>;
    constexpr int MR = bl::mr, NR = bl::nr;
    // Block extents are evened out over the blocks a dimension needs (NC rounded to whole
    // micro-tiles) so no thin leftover block repacks a whole operand for a sliver of work.
    const index_t nc_step = even_block(n1 - n0, bl::nc, NR);
    const index_t kc_step = even_block(pr.k, bl::kc, 1);
    T* bp = packing_buffer<T>(0, static_cast<std::size_t>(kc_step * round_up(nc_step, NR)));
    T* ap = packing_buffer<T>(1, static_cast<std::size_t>(kc_step * bl::mc));

    for (index_t jc = n0; jc < n1; jc += nc_step) {
        const index_t nc = std::min<index_t>(nc_step, n1 - jc);
        for (index_t pc = 0; pc < pr.k; pc += kc_step) {
            const index_t kc = std::min<index_t>(kc_step, pr.k - pc);
            // beta applies once, on the first KC block; later blocks accumulate into C.
            const T beta = pc == 0 ? pr.beta : T(1);
            pack_b<T, NR>(kc, nc, pr.b + pc * pr.rs_b + jc * pr.cs_b, pr.rs_b, pr.cs_b, bp);
            for (index_t ic = m0; ic < m1; ic += bl::mc) {
                const index_t mc = std::min<index_t>(bl::mc, m1 - ic);
                pack_a<T, MR>(mc, kc, pr.a + ic * pr.rs_a + pc * pr.cs_a, pr.rs_a, pr.cs_a, ap);
                for (index_t jr = 0; jr < nc; jr += NR) {
                    const int nr = static_cast<int>(std::min<index_t>(NR, nc - jr));
                    for (index_t ir = 0; ir < mc; ir += MR) {
                        const int mr = static_cast<int>(std::min<index_t>(MR, mc - ir));
                        micro_kernel<T, MR, NR>(kc, ap + ir * kc, bp + jr * kc,
                                                pr.c + (ic + ir) * pr.rs_c + jc + jr, pr.rs_c,
                                                pr.alpha, beta, mr, nr);
                    }
                }
            }
        }
    }
}

// C = beta * C over the sub-rectangle, never reading C when beta == 0 (alpha == 0 or k == 0).
template <class T>
void scale_block(const strided_problem<T>& pr, index_t m0, index_t m1, index_t n0, index_t n1) {
    for (index_t i = m0; i < m1; ++i) {
        T* row = pr.c + i * pr.rs_c;
        if (pr.beta == T(0))
            for (index_t j = n0; j < n1; ++j) row[j] = T(0);
        else
            for (index_t j = n0; j < n1; ++j) row[j] *= pr.beta;
    }
}

template <class T>
void gemm_tiled_typed(const gemm_call& call, thread_pool& pool) {
    strided_problem<T> pr{};
    pr.alpha = static_cast<T>(call.alpha);
    pr.beta = static_cast<T>(call.beta);
    pr.k = call.k;
    if (call.layout_c == layout::row_major) {
        pr.m = call.m;
        pr.n = call.n;
        pr.a = static_cast<const T*>(call.a);
        pr.rs_a = call.a_row_stride();
        pr.cs_a = call.a_col_stride();
        pr.b = static_cast<const T*>(call.b);
        pr.rs_b = call.b_row_stride();
        pr.cs_b = call.b_col_stride();
    } else {
        // A column-major C is a row-major C^T = op(B)^T op(A)^T: swapping the operands keeps the
        // micro-kernel's vector direction along C's contiguous dimension.
        pr.m = call.n;
        pr.n = call.m;
        pr.a = static_cast<const T*>(call.b);
        pr.rs_a = call.b_col_stride();
        pr.cs_a = call.b_row_stride();
        pr.b = static_cast<const T*>(call.a);
        pr.rs_b = call.a_col_stride();
        pr.cs_b = call.a_row_stride();
    }
    pr.c = static_cast<T*>(call.c);
    pr.rs_c = call.ldc;
    const bool scale_only = call.alpha == 0.0 || call.k == 0;  // alpha == 0 never reads A or B

    // Each worker runs the whole blocked algorithm on its own slab of C, split along the longer
    // side in whole micro-tiles: no barriers and no shared packing buffers, at the price of each
    // worker packing the operand it shares with the others (a k x n or m x k copy per slab).
    constexpr int MR = blocking<T>::mr, NR = blocking<T>::nr;
    const index_t row_tiles = (pr.m + MR - 1) / MR, col_tiles = (pr.n + NR - 1) / NR;
    const bool split_rows = row_tiles * MR >= col_tiles * NR;
    const index_t tiles = split_rows ? row_tiles : col_tiles;
    const int parts = static_cast<int>(std::min<index_t>(tiles, pool.size()));
    pool.run(parts, [&](int part) {
        const index_t t0 = tiles * part / parts, t1 = tiles * (part + 1) / parts;
        index_t m0 = 0, m1 = pr.m, n0 = 0, n1 = pr.n;
        if (split_rows) {
            m0 = t0 * MR;
            m1 = std::min(pr.m, t1 * MR);
        } else {
            n0 = t0 * NR;
            n1 = std::min(pr.n, t1 * NR);
        }
        if (m0 >= m1 || n0 >= n1) return;
        if (scale_only)
            scale_block(pr, m0, m1, n0, n1);
        else
            gemm_block(pr, m0, m1, n0, n1);
    });
}

}  // namespace

void gemm_tiled(const gemm_call& call, thread_pool& pool) {
    if (call.m <= 0 || call.n <= 0) return;
    visit_dtype(call.type, [&]<class T>() { gemm_tiled_typed<T>(call, pool); });
}

}  // namespace tilestream::cpu
