// The register-blocked GEMM micro-kernel, written once over a vector-traits type V and compiled
// once per instruction set: each gemm_kernel_<isa>.cpp includes this header last, after
// `#pragma GCC target(...)` (clang: `#pragma clang attribute`), so everything here is compiled
// for that set. Every function is a template of V (a type local to that file), so no two
// instruction sets ever share a symbol that the linker could pick for a CPU lacking it.
//
// V provides: value (float or double), reg (a vector register), width (lanes), zero(), load(p),
// store(p, r), broadcast(p), mul(x, y), fma(x, y, z) (x*y + z, fused or not; fixed per V).
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

/// The small-product kernel's rows: MR rows of C (rs_c apart) from rows of A read where they lie
/// (a[i * rs_a + p * cs_a]) and a B panel of NV vectors a row (rows rs_b apart, zero past nr).
/// Each element gets the micro-kernel's operations in its order (a zero accumulator, one
/// multiply-add per step p, update_rows), so its bits are the micro-kernel's: a small product
/// skips packing A and the full MR x NR register tile without changing any result.
template <class V, int MR, int NV>
__attribute__((always_inline)) inline void small_rows(index_t kc, const typename V::value* a, index_t rs_a,
                                                      index_t cs_a, const typename V::value* b, index_t rs_b,
                                                      typename V::value* c, index_t rs_c, typename V::value alpha,
                                                      typename V::value beta, int nr) {
    using T = typename V::value;
    using reg = typename V::reg;
    constexpr int NR = NV * V::width;
    reg acc[MR][NV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
    for (index_t p = 0; p < kc; ++p) {
        reg bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = V::load(b + p * rs_b + v * V::width);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const reg ai = V::broadcast(a + i * rs_a + p * cs_a);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(ai, bv[v], acc[i][v]);
        }
    }
    if (nr == NR) {
        update_rows<V, MR, NV>(acc, c, rs_c, alpha, beta);
        return;
    }
    alignas(64) T tile[MR * NR];
    if (beta != T(0))
        for (int i = 0; i < MR; ++i)
            for (int j = 0; j < NR; ++j) tile[i * NR + j] = j < nr ? c[i * rs_c + j] : T(0);
    update_rows<V, MR, NV>(acc, tile, NR, alpha, beta);
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < nr; ++j) c[i * rs_c + j] = tile[i * NR + j];
}

/// m rows of C: groups of rows sharing each load of B (fewer when the panel is wide, so that the
/// accumulators stay in 16 registers), then the remaining rows one at a time.
template <class V, int NV>
void small_panel(index_t kc, index_t m, const typename V::value* a, index_t rs_a, index_t cs_a,
                 const typename V::value* b, index_t rs_b, typename V::value* c, index_t rs_c,
                 typename V::value alpha, typename V::value beta, int nr) {
    constexpr int MR = NV <= 2 ? 4 : 2;
    index_t i = 0;
    for (; i + MR <= m; i += MR)
        small_rows<V, MR, NV>(kc, a + i * rs_a, rs_a, cs_a, b, rs_b, c + i * rs_c, rs_c, alpha, beta, nr);
    for (; i < m; ++i) small_rows<V, 1, NV>(kc, a + i * rs_a, rs_a, cs_a, b, rs_b, c + i * rs_c, rs_c, alpha, beta, nr);
}

/// The small-product kernel (cpu_isa.hpp's small_kernel): C (m x nr, rows rs_c apart) = alpha *
/// A * B panel + beta * C for nr up to 4 vectors, beta == 0 never reading C.
template <class V>
void small_kernel(index_t kc, index_t m, const typename V::value* a, index_t rs_a, index_t cs_a,
                  const typename V::value* b, index_t rs_b, typename V::value* c, index_t rs_c,
                  typename V::value alpha, typename V::value beta, int nr) {
    switch ((nr + V::width - 1) / V::width) {
        case 1: small_panel<V, 1>(kc, m, a, rs_a, cs_a, b, rs_b, c, rs_c, alpha, beta, nr); return;
        case 2: small_panel<V, 2>(kc, m, a, rs_a, cs_a, b, rs_b, c, rs_c, alpha, beta, nr); return;
        case 3: small_panel<V, 3>(kc, m, a, rs_a, cs_a, b, rs_b, c, rs_c, alpha, beta, nr); return;
        case 4: small_panel<V, 4>(kc, m, a, rs_a, cs_a, b, rs_b, c, rs_c, alpha, beta, nr); return;
        default: return;  // the caller keeps nr within 4 vectors (isa_config::small_cols)
    }
}

}  // namespace tilestream::cpu::micro
