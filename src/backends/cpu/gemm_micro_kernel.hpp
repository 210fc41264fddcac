// The register-blocked GEMM micro-kernel, written once over a vector-traits type V and compiled
// once per instruction set: each gemm_kernel_<isa>.cpp includes this header last, after
// `#pragma GCC target(...)` (clang: `#pragma clang attribute`), so everything here is compiled
// for that set. Every function is a template of V (a type local to that file), so no two
// instruction sets ever share a symbol that the linker could pick for a CPU lacking it.
//
// V provides: value (float or double), reg (a vector register), width (lanes), zero(), load(p),
// store(p, r), broadcast(p), mul(x, y), fma(x, y, z) (x*y + z, fused or not; fixed per V), and
// load_part(p, n) / store_part(p, r, n): the first n lanes only (0 < n < width; the others read as
// zero and are left alone, and their memory is never touched).
#pragma once

namespace tilestream::cpu::micro {

/// C rows (MR of them, rs_c apart, NV vectors wide) = alpha * acc + beta * C. The same operations
/// in the same order for every element, full tile or edge, so a result never depends on where
/// the element sat in a micro-tile.
template <class V, int MR, int NV>
__attribute__((always_inline)) inline void update_rows(typename V::reg (&acc)[MR][NV],
                                                       typename V::value* c, index_t rs_c,
                                                       typename V::value alpha,
                                                       typename V::value beta) {
    using reg = typename V::reg;
    const reg va = V::broadcast(&alpha);
    if (beta == typename V::value(0)) {
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) V::store(c + i * rs_c + v * V::width, V::mul(va, acc[i][v]));
        return;
    }
    const reg vb = V::broadcast(&beta);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            typename V::value* p = c + i * rs_c + v * V::width;
            V::store(p, V::fma(vb, V::load(p), V::mul(va, acc[i][v])));
        }
}

/// The micro-kernel: MR x NV accumulator registers; each step p loads NV vectors of the B panel
/// and broadcasts one element of A per row, one multiply-add per element and step (the
/// accumulation order of an element depends on kc only).
template <class V, int MR, int NV>
void kernel(index_t kc, const typename V::value* __restrict a, const typename V::value* __restrict b,
            typename V::value* __restrict c, index_t rs_c, typename V::value alpha,
            typename V::value beta, int mr, int nr) {
    using T = typename V::value;
    using reg = typename V::reg;
    constexpr int NR = NV * V::width;

    // The C tile is written (and read unless beta == 0) after the loop; fetching its lines now
    // hides the misses behind the FMAs.
    if (mr == MR && nr == NR)
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) {
            __builtin_prefetch(c + i * rs_c, 1);
            __builtin_prefetch(c + i * rs_c + NR - 1, 1);
        }

    reg acc[MR][NV];
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();

#pragma GCC unroll 4
    for (index_t p = 0; p < kc; ++p) {
        reg bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = V::load(b + v * V::width);
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) {
            const reg ai = V::broadcast(a + i);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(ai, bv[v], acc[i][v]);
        }
        __builtin_prefetch(a + 16 * MR);  // the A panel streams from L2: ask 16 steps ahead
        a += MR;
        b += NR;
    }

    if (mr == MR && nr == NR) {
        update_rows<V, MR, NV>(acc, c, rs_c, alpha, beta);
        return;
    }
    // Edge tile: the valid part of C goes through a local full tile, updated by the same code.
    alignas(64) T tile[MR * NR] = {};
    if (beta != T(0))
        for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j) tile[i * NR + j] = c[i * rs_c + j];
    update_rows<V, MR, NV>(acc, tile, NR, alpha, beta);
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr; ++j) c[i * rs_c + j] = tile[i * NR + j];
}

}  // namespace tilestream::cpu::micro

namespace tilestream::cpu::micro {

/// MR rows of one product of a stack (small_stack_kernel): C rows (rs_c apart) = alpha * A rows *
/// B + beta * C, B rows rs_b apart and NV vectors wide, the last vector `tail` lanes (1..width);
/// lanes past the tail are neither read nor written (V::load_part, V::store_part), so B and C are
/// read where they lie, with no panel and no tile. Each element gets the micro-kernel's operations
/// in its order (a zero accumulator, one multiply-add per step p, then update_rows' alpha * acc or
/// beta * C + alpha * acc), so its bits are the micro-kernel's. Stream: C's whole vectors go
/// around the caches (beta == 0, every row on a vector boundary; the same values).
template <class V, int MR, int NV, bool Stream>
__attribute__((always_inline)) inline void stack_rows(index_t kc, const typename V::value* a, index_t rs_a,
                                                      index_t cs_a, const typename V::value* b, index_t rs_b, int tail,
                                                      typename V::value* c, index_t rs_c, typename V::value alpha,
                                                      typename V::value beta) {
    using T = typename V::value;
    using reg = typename V::reg;
    const bool full = tail == V::width;
    reg acc[MR][NV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
    for (index_t p = 0; p < kc; ++p) {
        reg bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV - 1; ++v) bv[v] = V::load(b + p * rs_b + v * V::width);
        bv[NV - 1] = full ? V::load(b + p * rs_b + (NV - 1) * V::width) : V::load_part(b + p * rs_b + (NV - 1) * V::width, tail);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const reg ai = V::broadcast(a + i * rs_a + p * cs_a);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(ai, bv[v], acc[i][v]);
        }
    }
    const reg va = V::broadcast(&alpha);
    const reg vb = V::broadcast(&beta);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            T* p = c + i * rs_c + v * V::width;
            const bool whole = v < NV - 1 || full;
            reg r = V::mul(va, acc[i][v]);
            if (beta != T(0)) r = V::fma(vb, whole ? V::load(p) : V::load_part(p, tail), r);
            if (whole && Stream)
                V::stream(p, r);
            else if (whole)
                V::store(p, r);
            else
                V::store_part(p, r, tail);
        }
}

/// Rows [0, m) of one k-block of a product in groups of MR rows sharing each load of B, then MR/2,
/// MR/4, ..., 1 for the rest.
template <class V, int MR, int NV, bool Stream>
__attribute__((always_inline)) inline void stack_row_groups(index_t m, index_t kc, const typename V::value* a,
                                                            index_t rs_a, index_t cs_a, const typename V::value* b,
                                                            index_t rs_b, int tail, typename V::value* c, index_t rs_c,
                                                            typename V::value alpha, typename V::value beta) {
    index_t i = 0;
    for (; i + MR <= m; i += MR)
        stack_rows<V, MR, NV, Stream>(kc, a + i * rs_a, rs_a, cs_a, b, rs_b, tail, c + i * rs_c, rs_c, alpha, beta);
    if constexpr (MR > 1)
        if (i < m) stack_row_groups<V, MR / 2, NV, Stream>(m - i, kc, a + i * rs_a, rs_a, cs_a, b, rs_b, tail, c + i * rs_c, rs_c, alpha, beta);
}

/// Products [begin, end) of a stack whose C rows fit NV vectors, each k-block (kc, the tiled
/// kernel's) as groups of rows (as many as the registers hold: a 512-bit set has 32, the others
/// 16). B is read where it lies when its rows are contiguous, else copied a k-block at a time into
/// s.panel.
template <class V, int NV>
void stack_items(const small_stack<typename V::value>& s, index_t begin, index_t end) {
    using T = typename V::value;
    constexpr int regs = sizeof(typename V::reg) == 64 ? 32 : 16;
    // Accumulators, B's vectors and a broadcast within the registers; a power of 2.
    constexpr int fit = (regs - NV - 1) / NV;
    constexpr int MR = fit >= 8 ? 8 : fit >= 4 ? 4 : fit >= 2 ? 2 : 1;
    const int tail = static_cast<int>(s.n - (NV - 1) * V::width);
    const index_t rs_p = NV * V::width;
    // Streamed C (s.stream_c): one k-block written once with beta == 0, rows a whole number of
    // vectors apart; each product's C on a vector boundary.
    constexpr std::size_t vector_bytes = sizeof(typename V::reg);
    const bool may_stream = s.stream_c && s.beta == T(0) && s.k <= s.kc && (std::size_t(s.rs_c) * sizeof(T)) % vector_bytes == 0;
    bool streamed = false;
    for (index_t it = begin; it < end; ++it) {
        const T* a = s.a_list ? static_cast<const T*>(s.a_list[it]) : s.a + it * s.stride_a;
        const T* b = s.b_list ? static_cast<const T*>(s.b_list[it]) : s.b + it * s.stride_b;
        T* c = s.c_list ? static_cast<T*>(s.c_list[it]) : s.c + it * s.stride_c;
        for (index_t pc = 0; pc < s.k; pc += s.kc) {
            const index_t kc = pc + s.kc <= s.k ? s.kc : s.k - pc;
            const T beta = pc == 0 ? s.beta : T(1);
            const T* bb = b + pc * s.rs_b;
            index_t rs_b = s.rs_b;
            if (s.cs_b != 1) {
                for (index_t p = 0; p < kc; ++p)
                    for (index_t j = 0; j < s.n; ++j) s.panel[p * rs_p + j] = bb[p * s.rs_b + j * s.cs_b];
                bb = s.panel;
                rs_b = rs_p;
            }
            if (may_stream && reinterpret_cast<std::uintptr_t>(c) % vector_bytes == 0) {
                stack_row_groups<V, MR, NV, true>(s.m, kc, a + pc * s.cs_a, s.rs_a, s.cs_a, bb, rs_b, tail, c, s.rs_c, s.alpha, beta);
                streamed = true;
            } else {
                stack_row_groups<V, MR, NV, false>(s.m, kc, a + pc * s.cs_a, s.rs_a, s.cs_a, bb, rs_b, tail, c, s.rs_c, s.alpha, beta);
            }
        }
    }
    if (streamed) V::fence();  // the streamed stores are visible before the caller reports the range done
}

/// The stack kernel (cpu_isa.hpp's small_stack_kernel): products [begin, end) of s, C rows up to 4
/// vectors wide.
template <class V>
void stack_kernel(const small_stack<typename V::value>& s, index_t begin, index_t end) {
    switch ((s.n + V::width - 1) / V::width) {
        case 1: stack_items<V, 1>(s, begin, end); return;
        case 2: stack_items<V, 2>(s, begin, end); return;
        case 3: stack_items<V, 3>(s, begin, end); return;
        case 4: stack_items<V, 4>(s, begin, end); return;
        default: return;  // the caller keeps n within 4 vectors (isa_config::small_cols)
    }
}

}  // namespace tilestream::cpu::micro
