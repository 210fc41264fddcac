// BLIS-style cache-blocked CPU GEMM: packed op(A) and op(B) panels around the micro-kernel and block
// sizes of the instruction set chosen at run time (cpu_isa.hpp).
#include "cpu_isa.hpp"
#include "cpu_kernels.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace tilestream::cpu {

namespace {

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
// workers never allocate. Cost: (MC*KC + KC*NC) elements per thread that ran a tiled GEMM, the
// entry's shares of L2 and of the core's L3 (up to 8.5 MiB on Zen 3; at most 9 Mi elements).
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
template <class T>
void pack_a(index_t mc, index_t kc, const T* a, index_t rs, index_t cs, T* __restrict dst, const index_t MR) {
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
template <class T>
void pack_b(index_t kc, index_t nc, const T* b, index_t rs, index_t cs, T* __restrict dst, const index_t NR) {
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

constexpr index_t round_up(index_t x, index_t unit) { return (x + unit - 1) / unit * unit; }

// The block size that covers `extent` in as few blocks of at most `limit` as possible, all of
// nearly equal size and a multiple of `unit` (limit must be a multiple of unit).
constexpr index_t even_block(index_t extent, index_t limit, index_t unit) {
    const index_t blocks = std::max<index_t>(1, (extent + limit - 1) / limit);
    return round_up((extent + blocks - 1) / blocks, unit);
}

// The sequential blocked algorithm on the sub-rectangle [m0, m1) x [n0, n1) of C. Every element
// of C sees the same sequence of operations whatever the sub-rectangle: KC-long sums from the
// micro-kernel, added to C in order of k; KC depends on k and the blocking only.
template <class T>
void gemm_block(const strided_problem<T>& pr, const block_sizes& bl, micro_kernel<T> kernel,
                index_t m0, index_t m1, index_t n0, index_t n1) {
    const index_t MR = bl.mr, NR = bl.nr;
    // Block extents are evened out over the blocks a dimension needs (NC rounded to whole
    // micro-tiles) so no thin leftover block repacks a whole operand for a sliver of work.
    const index_t nc_step = even_block(n1 - n0, bl.nc, NR);
    const index_t kc_step = even_block(pr.k, bl.kc, 1);
    T* bp = packing_buffer<T>(0, static_cast<std::size_t>(kc_step * round_up(nc_step, NR)));
    T* ap = packing_buffer<T>(1, static_cast<std::size_t>(kc_step * bl.mc));

    for (index_t jc = n0; jc < n1; jc += nc_step) {
        const index_t nc = std::min<index_t>(nc_step, n1 - jc);
        for (index_t pc = 0; pc < pr.k; pc += kc_step) {
            const index_t kc = std::min<index_t>(kc_step, pr.k - pc);
            // beta applies once, on the first KC block; later blocks accumulate into C.
            const T beta = pc == 0 ? pr.beta : T(1);
            pack_b<T>(kc, nc, pr.b + pc * pr.rs_b + jc * pr.cs_b, pr.rs_b, pr.cs_b, bp, NR);
            for (index_t ic = m0; ic < m1; ic += bl.mc) {
                const index_t mc = std::min<index_t>(bl.mc, m1 - ic);
                pack_a<T>(mc, kc, pr.a + ic * pr.rs_a + pc * pr.cs_a, pr.rs_a, pr.cs_a, ap, MR);
                for (index_t jr = 0; jr < nc; jr += NR) {
                    const int nr = static_cast<int>(std::min<index_t>(NR, nc - jr));
                    for (index_t ir = 0; ir < mc; ir += MR) {
                        const int mr = static_cast<int>(std::min<index_t>(MR, mc - ir));
                        kernel(kc, ap + ir * kc, bp + jr * kc, pr.c + (ic + ir) * pr.rs_c + jc + jr,
                               pr.rs_c, pr.alpha, beta, mr, nr);
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
void gemm_tiled_typed(const isa_config& cfg, const block_sizes& bl, const gemm_call& call, thread_pool& pool) {
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

    const micro_kernel<T> kernel = [&] {
        if constexpr (std::is_same_v<T, float>) return cfg.kernel_f32;
        else return cfg.kernel_f64;
    }();
    // Each worker runs the whole blocked algorithm on its own slab of C, split along the longer
    // side in whole micro-tiles: no barriers and no shared packing buffers, at the price of each
    // worker packing the operand it shares with the others (a k x n or m x k copy per slab).
    const index_t MR = bl.mr, NR = bl.nr;
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
            gemm_block(pr, bl, kernel, m0, m1, n0, n1);
    });
}

}  // namespace

void gemm_tiled_with(isa s, const cache_sizes& caches, const gemm_call& call, thread_pool& pool) {
    if (call.m <= 0 || call.n <= 0) return;
    const block_sizes bl = derive_block_sizes(config_for(s), call.type, caches);
    visit_dtype(call.type, [&]<class T>() { gemm_tiled_typed<T>(config_for(s), bl, call, pool); });
}

void gemm_tiled(const gemm_call& call, thread_pool& pool) {
    gemm_tiled_with(selected_isa(), host_cache_sizes(), call, pool);
}

}  // namespace tilestream::cpu
