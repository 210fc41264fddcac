// BLIS-style cache-blocked CPU GEMM: packed op(A) and op(B) panels around the micro-kernel and block
// sizes of the instruction set chosen at run time (cpu_isa.hpp); complex types by the 1m method on
// the same real micro-kernels.
#include "cpu_isa.hpp"
#include "cpu_kernels.hpp"

#include "core/complex_arith.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <complex>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

namespace tilestream::cpu {

namespace detail {
std::function<bool(std::size_t)> packing_allocation_hook;
}  // namespace detail

namespace {

constexpr std::size_t vector_bytes = 64;

// Problem in the form the blocked loops use: C(i, j) = c[i * rs_c + j * cs_c] (cs_c is 1 but for a
// column-major complex C, see gemm_tiled_typed); conj_a/conj_b: op(A)/op(B) are read conjugated
// (complex types).
template <class T>
struct strided_problem {
    index_t m, n, k;
    const T* a;
    index_t rs_a, cs_a;
    bool conj_a;
    const T* b;
    index_t rs_b, cs_b;
    bool conj_b;
    T* c;
    index_t rs_c, cs_c;
    T alpha, beta;
};

// Packing buffers grow on demand and are kept per thread, so repeated calls on the same pool
// workers never allocate. Cost: (MC*KC + KC*NC) elements per thread that ran a tiled GEMM, the
// entry's shares of L2 and of the core's L3 (up to 8.5 MiB on Zen 3; at most 9 Mi elements), and
// three KC*NC panels on a thread whose GEMM was split by rows.
// Slots 0-2 are a worker's own (B panel, A block, a C tile); 3-5 hold the three B panels that the
// workers of one call share (shared_panel), kept by the thread that called the GEMM.
struct aligned_free {
    void operator()(void* p) const { ::operator delete(p, std::align_val_t(vector_bytes)); }
};
template <class T>
T* packing_buffer(int which, std::size_t elements) {
    thread_local std::unique_ptr<T, aligned_free> buffers[6];
    thread_local std::size_t capacity[6] = {0, 0, 0, 0, 0, 0};
    if (capacity[which] < elements) {
        // The old buffer goes first (a lower peak); until the new one is there the slot holds
        // nothing, so a failed allocation (bad_alloc) leaves a slot the next call fills again
        // rather than a null buffer with the old capacity.
        buffers[which].reset();
        capacity[which] = 0;
        if (detail::packing_allocation_hook && !detail::packing_allocation_hook(elements * sizeof(T))) throw std::bad_alloc();
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
// (p, r*NR + j) at [p*NR + j]. Columns past nc are zero. Rows of B (cs == 1) are read whole, one
// after another, and dealt out to the micro-panels: read a micro-panel at a time, each row gave a
// line or two, too little for the hardware's prefetch to follow, and the copy waited on memory.
template <class T>
void pack_b(index_t kc, index_t nc, const T* b, index_t rs, index_t cs, T* __restrict dst, const index_t NR) {
    if (cs == 1) {
        for (index_t p = 0; p < kc; ++p) {
            const T* s = b + p * rs;
            for (index_t jr = 0; jr < nc; jr += NR) {
                const index_t cols = std::min<index_t>(NR, nc - jr);
                T* d = dst + jr * kc + p * NR;  // row p of micro-panel jr / NR
                for (index_t j = 0; j < cols; ++j) d[j] = s[jr + j];
                for (index_t j = cols; j < NR; ++j) d[j] = T(0);
            }
        }
        return;
    }
    for (index_t jr = 0; jr < nc; jr += NR, dst += kc * NR) {
        const index_t cols = std::min<index_t>(NR, nc - jr);
        const T* src = b + jr * cs;
        for (index_t j = 0; j < cols; ++j)
            for (index_t p = 0; p < kc; ++p) dst[p * NR + j] = src[j * cs + p * rs];
        for (index_t p = 0; p < kc; ++p)
            for (index_t j = cols; j < NR; ++j) dst[p * NR + j] = T(0);
    }
}

constexpr index_t round_up(index_t x, index_t unit) { return (x + unit - 1) / unit * unit; }

// The block size that covers `extent` in as few blocks of at most `limit` as possible, all of
// nearly equal size and a multiple of `unit` (limit must be a multiple of unit).
constexpr index_t even_block(index_t extent, index_t limit, index_t unit) {
    const index_t blocks = std::max<index_t>(1, (extent + limit - 1) / limit);
    return round_up((extent + blocks - 1) / blocks, unit);
}

// The packed op(B) that the workers of one call share, BLIS's parallelism over the rows of C:
// in each (jc, pc) iteration every worker packs its share of the panel's micro-panels, and each
// multiplies its own rows of C by the whole panel once every share is there. Without it each worker
// packed the whole panel for itself (2 workers, f64 2048^3: a 32 MiB copy per worker per call,
// about 4% of the call).
// The workers are coupled as loosely as that allows, so that a worker slowed for a while (a noisy
// core, an interrupt) does not hold the others at every panel: a worker packs its share of
// iteration i + 1 before it computes iteration i, and three panels rotate. A worker then waits only
// (a) before packing into panel (i + 1) % 3 until every worker has finished iteration i - 2, the last
// reader of that panel, and (b) before computing iteration i until every share of i is packed,
// which the others do as they start iteration i - 1: up to one iteration of slack each way. With one
// barrier per iteration (two panels) every worker waited for the slowest at each of them: on a
// 2-core Zen 3 VM, f64 4096^3 ran 0.95x OpenBLAS against 0.98x with no sharing at all, and c64
// 2048^3 0.89x against 0.93x. The packed values are those a worker packs alone: results are
// bitwise the same.
template <class R>
struct shared_panel {
    std::barrier<>* sync = nullptr;       // the one meeting, after every worker got its own buffers
    std::atomic<bool>* failed = nullptr;  // a worker could not get its own buffers
    R* panels[3] = {nullptr, nullptr, nullptr};
    std::atomic<int>* packed = nullptr;   // per iteration: shares packed
    std::atomic<int>* done = nullptr;     // per iteration: workers that finished reading its panel
    index_t iterations = 0;
    int part = 0, parts = 1;

    /// The micro-panels [q0, q1) of `count` this worker packs.
    std::pair<index_t, index_t> share(index_t count) const {
        return {count * part / parts, count * (part + 1) / parts};
    }
};

/// Waits until `counter` reaches `target` (another worker's release increment).
inline void wait_for(std::atomic<int>& counter, int target) {
    for (int v = counter.load(std::memory_order_acquire); v < target; v = counter.load(std::memory_order_acquire))
        counter.wait(v, std::memory_order_acquire);
}

inline void count_up(std::atomic<int>& counter) {
    counter.fetch_add(1, std::memory_order_release);
    counter.notify_all();
}

/// A worker's own buffers (`own`, which may throw bad_alloc), then the first meeting: every worker
/// returns false when one of them failed (that one rethrows), so none waits for it later.
template <class R, class Own>
bool start_shared(const shared_panel<R>& shared, Own&& own) {
    std::exception_ptr error;
    try {
        own();
    } catch (...) {
        error = std::current_exception();
        shared.failed->store(true);
    }
    shared.sync->arrive_and_wait();
    if (error) std::rethrow_exception(error);
    return !shared.failed->load();
}

/// The (jc, pc) iterations of a blocked sub-rectangle in order (blocks of n outer, of k inner; every
/// worker of a shared panel runs all of them), each as body(jc, nc, pc, kc, panel) on its B panel:
/// packed alone into `own`, or shared (shared_panel's protocol). pack(jc, pc, kc, first, cols, dst)
/// packs `cols` columns of the (jc, pc) panel from column `first` into dst; a micro-panel of `unit`
/// columns takes `unit_k * kc` elements.
template <class R, class Pack, class Body>
void panel_iterations(const shared_panel<R>* shared, R* own, index_t n0, index_t n1, index_t nc_step, index_t k,
                      index_t kc_step, index_t unit, index_t unit_k, Pack&& pack, Body&& body) {
    const index_t k_steps = (k + kc_step - 1) / kc_step;
    const index_t iterations = (n1 - n0 + nc_step - 1) / nc_step * k_steps;
    if (shared && iterations != shared->iterations) {
        // The counters were sized by gemm_tiled_typed for every worker's iterations: a mismatch
        // would index past them or wait for a count that never comes.
        std::fprintf(stderr, "tilestream: internal error: %lld panel iterations for %lld counters\n",
                     static_cast<long long>(iterations), static_cast<long long>(shared->iterations));
        std::abort();
    }
    struct step {
        index_t jc, nc, pc, kc;
    };
    const auto step_of = [&](index_t it) {
        const index_t jc = n0 + it / k_steps * nc_step, pc = it % k_steps * kc_step;
        return step{jc, std::min(nc_step, n1 - jc), pc, std::min(kc_step, k - pc)};
    };
    const auto pack_share = [&](index_t it) {
        const step st = step_of(it);
        R* panel = shared->panels[it % 3];
        const auto [q0, q1] = shared->share((st.nc + unit - 1) / unit);
        if (q0 < q1) pack(st.jc, st.pc, st.kc, q0 * unit, std::min(st.nc, q1 * unit) - q0 * unit, panel + q0 * unit_k * st.kc);
        count_up(shared->packed[it]);
    };
    for (index_t it = 0; it < iterations; ++it) {
        const step st = step_of(it);
        if (!shared) {
            pack(st.jc, st.pc, st.kc, 0, st.nc, own);
            body(st.jc, st.nc, st.pc, st.kc, static_cast<const R*>(own));
            continue;
        }
        // Past the first meeting nothing may leave early: the other workers would wait for its
        // counts. The packers and kernels do not throw; if one ever did, terminate, not hang.
        [&]() noexcept {
            if (it == 0) pack_share(0);
            if (it + 1 < iterations) {
                if (it >= 2) wait_for(shared->done[it - 2], shared->parts);
                pack_share(it + 1);
            }
            wait_for(shared->packed[it], shared->parts);
            body(st.jc, st.nc, st.pc, st.kc, static_cast<const R*>(shared->panels[it % 3]));
            count_up(shared->done[it]);
        }();
    }
}

// The sequential blocked algorithm on the sub-rectangle [m0, m1) x [n0, n1) of C. Every element
// of C sees the same sequence of operations whatever the sub-rectangle: KC-long sums from the
// micro-kernel, added to C in order of k; KC depends on k and the blocking only.
template <class T>
void gemm_block(const strided_problem<T>& pr, const block_sizes& bl, micro_kernel<T> kernel,
                index_t m0, index_t m1, index_t n0, index_t n1, const shared_panel<T>* shared = nullptr) {
    const index_t MR = bl.mr, NR = bl.nr;
    // Block extents are evened out over the blocks a dimension needs (NC rounded to whole
    // micro-tiles) so no thin leftover block repacks a whole operand for a sliver of work.
    const index_t nc_step = even_block(n1 - n0, bl.nc, NR);
    const index_t kc_step = even_block(pr.k, bl.kc, 1);
    const index_t mc_step = even_block(m1 - m0, bl.mc, MR);
    T* own_bp = nullptr;
    T* ap = nullptr;
    const auto own = [&] {
        if (!shared) own_bp = packing_buffer<T>(0, static_cast<std::size_t>(kc_step * round_up(nc_step, NR)));
        ap = packing_buffer<T>(1, static_cast<std::size_t>(kc_step * bl.mc));
    };
    if (!shared) own();
    else if (!start_shared(*shared, own)) return;

    const auto pack = [&](index_t jc, index_t pc, index_t kc, index_t first, index_t cols, T* dst) {
        pack_b<T>(kc, cols, pr.b + pc * pr.rs_b + (jc + first) * pr.cs_b, pr.rs_b, pr.cs_b, dst, NR);
    };
    panel_iterations(shared, own_bp, n0, n1, nc_step, pr.k, kc_step, NR, NR, pack,
                     [&](index_t jc, index_t nc, index_t pc, index_t kc, const T* bp) {
        // beta applies once, on the first KC block; later blocks accumulate into C.
        const T beta = pc == 0 ? pr.beta : T(1);
        for (index_t ic = m0; ic < m1; ic += mc_step) {
            const index_t mc = std::min<index_t>(mc_step, m1 - ic);
            pack_a<T>(mc, kc, pr.a + ic * pr.rs_a + pc * pr.cs_a, pr.rs_a, pr.cs_a, ap, MR);
            for (index_t jr = 0; jr < nc; jr += NR) {
                const int nr = static_cast<int>(std::min<index_t>(NR, nc - jr));
                for (index_t ir = 0; ir < mc; ir += MR) {
                    const int mr = static_cast<int>(std::min<index_t>(MR, mc - ir));
                    kernel(kc, ap + ir * kc, bp + jr * kc, pr.c + (ic + ir) * pr.rs_c + jc + jr, pr.rs_c, pr.alpha,
                           beta, mr, nr);
                }
            }
        }
    });
}

// C = beta * C over the sub-rectangle, never reading C when beta == 0 (alpha == 0 or k == 0).
template <class T>
void scale_block(const strided_problem<T>& pr, index_t m0, index_t m1, index_t n0, index_t n1) {
    for (index_t i = m0; i < m1; ++i) {
        T* row = pr.c + i * pr.rs_c;
        if (pr.beta == T(0))
            for (index_t j = n0; j < n1; ++j) row[j * pr.cs_c] = T(0);
        else
            for (index_t j = n0; j < n1; ++j) row[j * pr.cs_c] = tilestream::detail::mul(row[j * pr.cs_c], pr.beta);
    }
}

// ---- small products: no packing of A, no full register tile ----
//
// A product whose C rows fit a few vectors (small_cols) runs the small-product kernel (the stack
// kernel, micro::stack_kernel: one product, or every product of a stack) on rows of A and B where
// they lie (B copied a k-block at a time when its rows are not contiguous), C's rows in registers
// and masked vectors at its edge: at 4x4 the blocked path would pack a whole MR x KC and KC x NR
// panel with zeros and compute an MR x NR tile for 16 elements. Each element gets the same
// operations in the same order as in the blocked path (the same k-blocks, the micro-kernel's chain
// and update), so results are bitwise those of the blocked path, for any sub-problem
// (RowsAreBitwiseEqualInEverySubProblem checks both paths against each other).

/// Whether the small path takes the sub-rectangle: C rows within the kernel's panel (real
/// elements) and little enough work that skipping the packing of A cannot cost L1 reuse.
constexpr bool small_product(index_t m, index_t n_real, index_t k, int small_cols) {
    return n_real <= small_cols && double(m) * double(n_real) * double(k) <= 32768.0;
}

/// m * n * k up to which a product of a stack runs on the stack kernel (its rows of C in registers,
/// B where it lies). At f32 64^3 on AVX-512 (Zen 4, one thread, under load) it took 5.5-7.9 us a
/// product where the blocked path took 11-13.5 us (OpenBLAS 5.4-8.7).
constexpr double stack_flops_limit = 64.0 * 64.0 * 64.0;

/// Whether a real product runs on the stack kernel in a stack: C rows within its panel and A and B
/// read (alpha != 0, k > 0); the others take gemm_rectangle's paths.
template <class T>
bool stack_product(const isa_config& cfg, const strided_problem<T>& pr) {
    return pr.alpha != T(0) && pr.k > 0 && pr.n <= small_cols_of<T>(cfg) &&
           double(pr.m) * double(pr.n) * double(pr.k) <= stack_flops_limit;
}

/// The stack kernel's description of the sub-rectangle [m0, m1) x [n0, n1) of a real problem
/// (strides 0: one product), k-blocks of the blocked path's KC.
template <class T>
small_stack<T> stack_of(const isa_config& cfg, const block_sizes& bl, const strided_problem<T>& pr, index_t m0, index_t m1,
                        index_t n0, index_t n1) {
    small_stack<T> s;
    s.m = m1 - m0;
    s.n = n1 - n0;
    s.k = pr.k;
    s.kc = even_block(pr.k, bl.kc, 1);
    s.a = pr.a + m0 * pr.rs_a;
    s.rs_a = pr.rs_a;
    s.cs_a = pr.cs_a;
    s.b = pr.b + n0 * pr.cs_b;
    s.rs_b = pr.rs_b;
    s.cs_b = pr.cs_b;
    s.c = pr.c + m0 * pr.rs_c + n0;
    s.rs_c = pr.rs_c;
    s.alpha = pr.alpha;
    s.beta = pr.beta;
    if (s.cs_b != 1) s.panel = packing_buffer<T>(0, static_cast<std::size_t>(s.kc * small_cols_of<T>(cfg)));
    return s;
}

// ---- complex types: the 1m method ----
//
// BLIS's 1m method (Van Zee, "Inducing complex matrix multiplication via the 1m method", 2017)
// runs complex GEMM on the real micro-kernel: C (m x n,
// row-major, complex) is the real m x 2n matrix C_r of its parts, and C_r = A_r * B_e where A_r
// (m x 2k) holds each element of op(A) as its two parts side by side and B_e (2k x 2n) expands each
// element b of op(B) into the 2 x 2 block [[re b, im b], [-im b, re b]]:
//     C_r(i, 2j)     = sum_p re a re b - im a im b = re c,
//     C_r(i, 2j + 1) = sum_p re a im b + im a re b = im c.
// Packing writes A_r and B_e straight into the real kernel's panel formats, so the micro-kernel,
// its registry entry per instruction set and the run-time ISA choice are the real ones and no
// flop is wasted (8mnk, like a native complex kernel). We chose it over a native complex
// micro-kernel (one more kernel per ISA to write, tune and keep bitwise reproducible) and over 3m
// (fewer flops, but less accurate than BLAS users expect); docs/architecture.md says more.

// Packs the mc x kc block of op(A) as A_r into micro-panels of MR rows: panel r holds part h of
// element (r*MR + i, p) at [(2p + h)*MR + i]. Rows past mc are zero.
template <class R>
void pack_a_1r(index_t mc, index_t kc, const std::complex<R>* a, index_t rs, index_t cs, bool conj,
               R* __restrict dst, const index_t MR) {
    const R sign = conj ? R(-1) : R(1);
    for (index_t ir = 0; ir < mc; ir += MR, dst += 2 * kc * MR) {
        const index_t rows = std::min<index_t>(MR, mc - ir);
        const std::complex<R>* src = a + ir * rs;
        if (cs == 1) {
            for (index_t i = 0; i < rows; ++i)
                for (index_t p = 0; p < kc; ++p) {
                    const std::complex<R> v = src[i * rs + p];
                    dst[2 * p * MR + i] = v.real();
                    dst[(2 * p + 1) * MR + i] = sign * v.imag();
                }
        } else {
            for (index_t p = 0; p < kc; ++p)
                for (index_t i = 0; i < rows; ++i) {
                    const std::complex<R> v = src[i * rs + p * cs];
                    dst[2 * p * MR + i] = v.real();
                    dst[(2 * p + 1) * MR + i] = sign * v.imag();
                }
        }
        for (index_t i = rows; i < MR; ++i)
            for (index_t p = 0; p < 2 * kc; ++p) dst[p * MR + i] = R(0);
    }
}

// Packs the kc x nc block of op(B) (times `scale` when `scaled`) as B_e into micro-panels of NRc
// complex columns (2 NRc real ones): element (p, r*NRc + j) = b becomes re b at [2p][2j], im b at
// [2p][2j+1], -im b at [2p+1][2j] and re b at [2p+1][2j+1] of the panel's rows of 2 NRc. Columns
// past nc are zero.
template <class R>
void pack_b_1e(index_t kc, index_t nc, const std::complex<R>* b, index_t rs, index_t cs, bool conj, bool scaled,
               std::complex<R> scale, R* __restrict dst, const index_t NRc) {
    const index_t NR = 2 * NRc;
    const auto element = [&](const std::complex<R>& x) {
        const std::complex<R> v = tilestream::detail::conj_if(x, conj);
        return scaled ? tilestream::detail::mul(scale, v) : v;
    };
    const auto put = [&](R* d, index_t p, index_t j, std::complex<R> v) {
        d[2 * p * NR + 2 * j] = v.real();
        d[2 * p * NR + 2 * j + 1] = v.imag();
        d[(2 * p + 1) * NR + 2 * j] = -v.imag();
        d[(2 * p + 1) * NR + 2 * j + 1] = v.real();
    };
    if (cs == 1) {
        // Rows of B read whole and dealt out to the micro-panels (as pack_b). The common case as
        // plain loops over the parts (no complex arithmetic), which the compiler vectorizes: row 2p
        // is the row of B (imaginary parts negated when conj), row 2p + 1 its pairs swapped with
        // the new real parts negated; the values of `put`.
        const auto rows = [&]<bool Conj>() {
            for (index_t p = 0; p < kc; ++p) {
                for (index_t jr = 0; jr < nc; jr += NRc) {
                    const index_t cols = std::min<index_t>(NRc, nc - jr);
                    const R* s = reinterpret_cast<const R*>(b + p * rs + jr);
                    R* __restrict d0 = dst + 4 * jr * kc + 2 * p * NR;  // rows 2p, 2p + 1 of micro-panel jr / NRc
                    R* __restrict d1 = d0 + NR;
                    for (index_t j = 0; j < 2 * cols; j += 2) {
                        const R re = s[j], im = Conj ? -s[j + 1] : s[j + 1];
                        d0[j] = re;
                        d0[j + 1] = im;
                        d1[j] = -im;
                        d1[j + 1] = re;
                    }
                    for (index_t j = 2 * cols; j < NR; ++j) d0[j] = d1[j] = R(0);
                }
            }
        };
        if (scaled) {
            for (index_t p = 0; p < kc; ++p) {
                for (index_t jr = 0; jr < nc; jr += NRc) {
                    const index_t cols = std::min<index_t>(NRc, nc - jr);
                    R* d = dst + 4 * jr * kc;  // micro-panel jr / NRc
                    for (index_t j = 0; j < cols; ++j) put(d, p, j, element(b[p * rs + jr + j]));
                    for (index_t j = 2 * cols; j < NR; ++j) d[2 * p * NR + j] = d[(2 * p + 1) * NR + j] = R(0);
                }
            }
        } else if (conj) {
            rows.template operator()<true>();
        } else {
            rows.template operator()<false>();
        }
        return;
    }
    for (index_t jr = 0; jr < nc; jr += NRc, dst += 2 * kc * NR) {
        const index_t cols = std::min<index_t>(NRc, nc - jr);
        const std::complex<R>* src = b + jr * cs;
        for (index_t j = 0; j < cols; ++j)
            for (index_t p = 0; p < kc; ++p) put(dst, p, j, element(src[j * cs + p * rs]));
        for (index_t p = 0; p < 2 * kc; ++p)
            for (index_t j = 2 * cols; j < NR; ++j) dst[p * NR + j] = R(0);
    }
}

// The blocked algorithm of gemm_block on a complex sub-rectangle, blocks in complex elements
// (derive_block_sizes), the real micro-kernel over 2 kc. A real alpha is the kernel's alpha; any
// other is folded into packed B. A real beta is the kernel's beta (0 never reads C); any other is
// applied to the C block once, before its first k-block, which then adds with beta 1. Every element
// sees the same operations whatever the sub-rectangle, as in the real kernel.
template <class R>
void gemm_block_1m(const strided_problem<std::complex<R>>& pr, const block_sizes& bl, micro_kernel<R> kernel, index_t m0,
                   index_t m1, index_t n0, index_t n1, const shared_panel<R>* shared = nullptr) {
    using Z = std::complex<R>;
    const index_t MR = bl.mr, NRc = bl.nr;
    const index_t nc_step = even_block(n1 - n0, bl.nc, NRc);
    const index_t kc_step = even_block(pr.k, bl.kc, 1);
    const index_t mc_step = even_block(m1 - m0, bl.mc, MR);
    R* own_bp = nullptr;
    R* ap = nullptr;
    R* ct = nullptr;
    const auto own = [&] {
        if (!shared) own_bp = packing_buffer<R>(0, static_cast<std::size_t>(4 * kc_step * round_up(nc_step, NRc)));
        ap = packing_buffer<R>(1, static_cast<std::size_t>(2 * kc_step * bl.mc));
        if (pr.cs_c != 1) ct = packing_buffer<R>(2, static_cast<std::size_t>(MR * 2 * NRc));
    };
    if (!shared) own();
    else if (!start_shared(*shared, own)) return;
    const bool fold_alpha = pr.alpha.imag() != R(0);
    const R alpha = fold_alpha ? R(1) : pr.alpha.real();
    const bool real_beta = pr.beta.imag() == R(0);

    const auto pack = [&](index_t jc, index_t pc, index_t kc, index_t first, index_t cols, R* dst) {
        pack_b_1e<R>(kc, cols, pr.b + pc * pr.rs_b + (jc + first) * pr.cs_b, pr.rs_b, pr.cs_b, pr.conj_b, fold_alpha,
                     pr.alpha, dst, NRc);
    };
    panel_iterations(shared, own_bp, n0, n1, nc_step, pr.k, kc_step, NRc, 4 * NRc, pack,
                     [&](index_t jc, index_t nc, index_t pc, index_t kc, const R* bp) {
        // A complex beta scales this worker's C block once, before the block's first k-block.
        if (pc == 0 && !real_beta)
            for (index_t i = m0; i < m1; ++i) {
                Z* row = pr.c + i * pr.rs_c + jc * pr.cs_c;
                for (index_t j = 0; j < nc; ++j) row[j * pr.cs_c] = tilestream::detail::mul(row[j * pr.cs_c], pr.beta);
            }
        const R beta = pc == 0 && real_beta ? pr.beta.real() : R(1);
        for (index_t ic = m0; ic < m1; ic += mc_step) {
            const index_t mc = std::min<index_t>(mc_step, m1 - ic);
            pack_a_1r<R>(mc, kc, pr.a + ic * pr.rs_a + pc * pr.cs_a, pr.rs_a, pr.cs_a, pr.conj_a, ap, MR);
            for (index_t jr = 0; jr < nc; jr += NRc) {
                const int nr = static_cast<int>(2 * std::min<index_t>(NRc, nc - jr));
                for (index_t ir = 0; ir < mc; ir += MR) {
                    const int mr = static_cast<int>(std::min<index_t>(MR, mc - ir));
                    Z* cz = pr.c + (ic + ir) * pr.rs_c + (jc + jr) * pr.cs_c;
                    if (pr.cs_c == 1) {
                        kernel(2 * kc, ap + ir * 2 * kc, bp + jr * 4 * kc, reinterpret_cast<R*>(cz), 2 * pr.rs_c, alpha,
                               beta, mr, nr);
                        continue;
                    }
                    // A column-major C: the tile goes through a row-major copy, so that every
                    // element's operations are those of a row-major C (see gemm_tiled_typed).
                    R* tile = ct;
                    const index_t ldt = 2 * NRc;
                    if (beta != R(0))
                        for (int i = 0; i < mr; ++i)
                            for (int j = 0; j < nr / 2; ++j) {
                                const Z v = cz[i * pr.rs_c + j * pr.cs_c];
                                tile[i * ldt + 2 * j] = v.real();
                                tile[i * ldt + 2 * j + 1] = v.imag();
                            }
                    kernel(2 * kc, ap + ir * 2 * kc, bp + jr * 4 * kc, tile, ldt, alpha, beta, mr, nr);
                    for (int i = 0; i < mr; ++i)
                        for (int j = 0; j < nr / 2; ++j)
                            cz[i * pr.rs_c + j * pr.cs_c] = Z(tile[i * ldt + 2 * j], tile[i * ldt + 2 * j + 1]);
                }
            }
        }
    });
}

// The small path of a complex sub-rectangle: gemm_block_1m's operations (1m packing of A rows and
// of one B panel as wide as the product, alpha folded, beta applied as there) on the small-product
// kernel. A column-major C goes through a row-major copy of the block.
template <class R>
void gemm_small_1m(const strided_problem<std::complex<R>>& pr, const block_sizes& bl, small_stack_kernel<R> kernel,
                   index_t m0, index_t m1, index_t n0, index_t n1) {
    using Z = std::complex<R>;
    const index_t mc = m1 - m0, nc = n1 - n0;
    const index_t rs_bp = 2 * nc;  // the kernel reads no lane past the product
    const index_t kc_step = even_block(pr.k, bl.kc, 1);
    R* bp = packing_buffer<R>(0, static_cast<std::size_t>(2 * kc_step * rs_bp));
    R* ap = packing_buffer<R>(1, static_cast<std::size_t>(2 * kc_step * mc));
    const bool fold_alpha = pr.alpha.imag() != R(0);
    const R alpha = fold_alpha ? R(1) : pr.alpha.real();
    const bool real_beta = pr.beta.imag() == R(0);
    const R sign_a = pr.conj_a ? R(-1) : R(1);

    Z* c = pr.c + m0 * pr.rs_c + n0 * pr.cs_c;
    Z* work = c;  // C's block with unit column stride: C itself, or a row-major copy
    index_t rs_w = pr.rs_c;
    if (pr.cs_c != 1) {
        work = reinterpret_cast<Z*>(packing_buffer<R>(2, static_cast<std::size_t>(2 * mc * nc)));
        rs_w = nc;
        if (pr.beta != Z(0))
            for (index_t i = 0; i < mc; ++i)
                for (index_t j = 0; j < nc; ++j) work[i * rs_w + j] = c[i * pr.rs_c + j * pr.cs_c];
    }
    if (!real_beta)
        for (index_t i = 0; i < mc; ++i)
            for (index_t j = 0; j < nc; ++j) work[i * rs_w + j] = tilestream::detail::mul(work[i * rs_w + j], pr.beta);
    for (index_t pc = 0; pc < pr.k; pc += kc_step) {
        const index_t kc = std::min<index_t>(kc_step, pr.k - pc);
        const R beta = pc == 0 && real_beta ? pr.beta.real() : R(1);
        const Z* b = pr.b + pc * pr.rs_b + n0 * pr.cs_b;
        for (index_t p = 0; p < kc; ++p) {
            R* d0 = bp + 2 * p * rs_bp;
            R* d1 = d0 + rs_bp;
            for (index_t j = 0; j < nc; ++j) {
                const Z x = tilestream::detail::conj_if(b[p * pr.rs_b + j * pr.cs_b], pr.conj_b);
                const Z v = fold_alpha ? tilestream::detail::mul(pr.alpha, x) : x;
                d0[2 * j] = v.real();
                d0[2 * j + 1] = v.imag();
                d1[2 * j] = -v.imag();
                d1[2 * j + 1] = v.real();
            }
        }
        const Z* a = pr.a + m0 * pr.rs_a + pc * pr.cs_a;
        for (index_t i = 0; i < mc; ++i)
            for (index_t p = 0; p < kc; ++p) {
                const Z v = a[i * pr.rs_a + p * pr.cs_a];
                ap[i * 2 * kc + 2 * p] = v.real();
                ap[i * 2 * kc + 2 * p + 1] = sign_a * v.imag();
            }
        small_stack<R> st;  // one product, one k-block of 2 kc reals
        st.m = mc;
        st.n = 2 * nc;
        st.k = st.kc = 2 * kc;
        st.a = ap;
        st.rs_a = 2 * kc;
        st.cs_a = 1;
        st.b = bp;
        st.rs_b = rs_bp;
        st.cs_b = 1;
        st.c = reinterpret_cast<R*>(work);
        st.rs_c = 2 * rs_w;
        st.alpha = alpha;
        st.beta = beta;
        kernel(st, 0, 1);
    }
    if (work != c)
        for (index_t i = 0; i < mc; ++i)
            for (index_t j = 0; j < nc; ++j) c[i * pr.rs_c + j * pr.cs_c] = work[i * rs_w + j];
}

// The problem of a call in the blocked loops' row-major form. A column-major C is a row-major C^T =
// op(B)^T op(A)^T: swapping the operands keeps the micro-kernel's vector direction along C's
// contiguous dimension. Not for complex types: the 1m method adds the two products of an imaginary
// part in the order of the operands (re a im b, then im a re b), which the swap would reverse, so a
// column-major C would get other bits than a row-major one; complex C is read and written through
// row-major tiles instead. `swapped`: A and B traded places.
template <class T>
strided_problem<T> problem_of(const gemm_call& call, bool& swapped) {
    strided_problem<T> pr{};
    pr.alpha = scalar_as<T>(call.alpha);
    pr.beta = scalar_as<T>(call.beta);
    pr.k = call.k;
    const bool row = call.layout_c == layout::row_major || is_complex_v<T>;
    swapped = !row;
    const operand_desc da = call.a_desc(), db = call.b_desc();
    const operand_desc& x = row ? da : db;
    const operand_desc& y = row ? db : da;
    pr.m = row ? call.m : call.n;
    pr.n = row ? call.n : call.m;
    pr.a = static_cast<const T*>(row ? call.a : call.b);
    pr.rs_a = row ? x.row_stride() : x.col_stride();
    pr.cs_a = row ? x.col_stride() : x.row_stride();
    pr.conj_a = x.conjugated();
    pr.b = static_cast<const T*>(row ? call.b : call.a);
    pr.rs_b = row ? y.row_stride() : y.col_stride();
    pr.cs_b = row ? y.col_stride() : y.row_stride();
    pr.conj_b = y.conjugated();
    pr.c = static_cast<T*>(call.c);
    const bool c_columns = is_complex_v<T> && call.layout_c == layout::col_major;
    pr.rs_c = c_columns ? 1 : call.ldc;
    pr.cs_c = c_columns ? call.ldc : 1;
    return pr;
}

// The sequential algorithm on the sub-rectangle [m0, m1) x [n0, n1) of C: the scaling alone when
// A and B are not read (alpha == 0 or k == 0), the small path, or the blocked loops.
template <class T>
void gemm_rectangle(const isa_config& cfg, const block_sizes& bl, const strided_problem<T>& pr, index_t m0, index_t m1,
                    index_t n0, index_t n1, const shared_panel<real_type_t<T>>* shared = nullptr) {
    using R = real_type_t<T>;
    const int small_cols = small_cols_of<R>(cfg);
    if (pr.alpha == T(0) || pr.k == 0)  // alpha == 0 never reads A or B
        scale_block(pr, m0, m1, n0, n1);
    else if constexpr (is_complex_v<T>) {
        if (!shared && small_product(m1 - m0, 2 * (n1 - n0), pr.k, small_cols))
            gemm_small_1m(pr, bl, stack_kernel_of<R>(cfg), m0, m1, n0, n1);
        else
            gemm_block_1m(pr, bl, kernel_of<R>(cfg), m0, m1, n0, n1, shared);
    } else {
        if (!shared && small_product(m1 - m0, n1 - n0, pr.k, small_cols))
            stack_kernel_of<T>(cfg)(stack_of(cfg, bl, pr, m0, m1, n0, n1), 0, 1);
        else
            gemm_block(pr, bl, kernel_of<T>(cfg), m0, m1, n0, n1, shared);
    }
}

template <class T>
void gemm_tiled_typed(const isa_config& cfg, const block_sizes& bl, const gemm_call& call, thread_pool* pool) {
    bool swapped = false;
    const strided_problem<T> pr = problem_of<T>(call, swapped);

    // Each worker runs the blocked algorithm on its own slab of C, split along the longer side (a
    // square C by rows) in whole micro-tiles. Split by rows, the workers share the packed B panels
    // (shared_panel); split by columns (a wide C), each packs the rows of A it needs (an m x k copy
    // per slab, no waits). The sides are compared as they are, not rounded up to whole tiles: with
    // the 4x12 tile that rounding sent a square f64/c64 C whose n is not a multiple of 12 to
    // columns, 2-3% slower than rows for f64 at 2048^3 and 4096^3 on Zen 3; c64 was inconclusive
    // (bench/results/tiled-split-ab-zen3-2026-11-29.json).
    using R = real_type_t<T>;
    const index_t MR = bl.mr, NR = bl.nr;
    const index_t row_tiles = (pr.m + MR - 1) / MR, col_tiles = (pr.n + NR - 1) / NR;
    const bool split_rows = pr.m >= pr.n;
    const index_t tiles = split_rows ? row_tiles : col_tiles;
    const int parts = pool ? static_cast<int>(std::min<index_t>(tiles, pool->size())) : 1;
    struct bounds {
        index_t m0, m1, n0, n1;
    };
    const auto slab_of = [&](int part) {
        const index_t t0 = tiles * part / parts, t1 = tiles * (part + 1) / parts;
        if (split_rows) return bounds{t0 * MR, std::min(pr.m, t1 * MR), 0, pr.n};
        return bounds{0, pr.m, t0 * NR, std::min(pr.n, t1 * NR)};
    };
    // Shared only when every slab takes the blocked path (A and B read, not the small product's),
    // so that every worker packs its share of every panel.
    const index_t n_real = is_complex_v<T> ? 2 * pr.n : pr.n;
    bool share_b = parts > 1 && split_rows && pr.alpha != T(0) && pr.k > 0;
    for (int part = 0; share_b && part < parts; ++part) {
        const bounds b = slab_of(part);
        share_b = b.m0 < b.m1 && !small_product(b.m1 - b.m0, n_real, pr.k, small_cols_of<R>(cfg));
    }
    std::optional<std::barrier<>> sync;
    std::atomic<bool> failed{false};
    std::unique_ptr<std::atomic<int>[]> counters;
    shared_panel<R> shared;
    if (share_b) {
        const index_t kc_step = even_block(pr.k, bl.kc, 1), nc_step = even_block(pr.n, bl.nc, NR);
        const index_t panel = (is_complex_v<T> ? 4 : 1) * kc_step * round_up(nc_step, NR);
        for (int i = 0; i < 3; ++i) shared.panels[i] = packing_buffer<R>(3 + i, static_cast<std::size_t>(panel));
        // The iterations of gemm_block / gemm_block_1m (panel_iterations), every worker's the same.
        shared.iterations = (pr.n + nc_step - 1) / nc_step * ((pr.k + kc_step - 1) / kc_step);
        counters.reset(new std::atomic<int>[std::size_t(2 * shared.iterations)]());
        shared.packed = counters.get();
        shared.done = counters.get() + shared.iterations;
        sync.emplace(parts);
        shared.sync = &*sync;
        shared.failed = &failed;
        shared.parts = parts;
    }
    const auto slab = [&](int part) {
        const auto [m0, m1, n0, n1] = slab_of(part);
        if (!share_b) {
            if (m0 < m1 && n0 < n1) gemm_rectangle(cfg, bl, pr, m0, m1, n0, n1);
            return;
        }
        shared_panel<R> mine = shared;
        mine.part = part;
        gemm_rectangle(cfg, bl, pr, m0, m1, n0, n1, &mine);
    };
    // Without a pool (the calling thread's own kernel) there is one slab and no std::function.
    if (parts <= 1)
        slab(0);
    else
        pool->run(parts, slab);
}

// Products [begin, end) of a stack on the calling thread: the problem set up once, then per product
// only its pointers. Real products whose C rows fit the stack kernel's panel run on it (the bits of
// the small and blocked paths: the same operations per element); the others, and complex ones, on
// gemm_rectangle, as a loop of single calls would.
template <class T>
void gemm_tiled_items(const isa_config& cfg, const block_sizes& bl, const cache_sizes& caches, const gemm_batched_call& batch,
                      index_t begin, index_t end) {
    bool swapped = false;
    strided_problem<T> pr = problem_of<T>(batch.call, swapped);
    if constexpr (!is_complex_v<T>) {
        if (stack_product(cfg, pr)) {
            small_stack<T> s = stack_of(cfg, bl, pr, 0, pr.m, 0, pr.n);
            s.stride_a = swapped ? batch.stride_b : batch.stride_a;
            s.stride_b = swapped ? batch.stride_a : batch.stride_b;
            s.stride_c = batch.stride_c;
            if (batch.listed()) {
                s.a_list = swapped ? batch.b_list : batch.a_list;
                s.b_list = swapped ? batch.a_list : batch.b_list;
                s.c_list = batch.c_list;
            }
            // The whole stack's operands beyond this core's share of L3: its C lines would only
            // push A and B out before anyone reads them, so they are streamed to memory. (10,000
            // 16x16 products, 30-60 MB, are memory-bound on 2 cores: the read of each C line before
            // its write was a quarter of the traffic.)
            const auto per = [&](index_t stride, std::size_t one) { return (stride != 0 || batch.listed() ? double(batch.count) : 1.0) * double(one); };
            const double bytes = double(sizeof(T)) * (per(batch.stride_a, std::size_t(pr.m * pr.k)) + per(batch.stride_b, std::size_t(pr.k * pr.n)) +
                                                      per(1, std::size_t(pr.m * pr.n)));
            s.stream_c = caches.l3 > 0 && bytes > double(caches.l3);
            stack_kernel_of<T>(cfg)(s, begin, end);
            return;
        }
    }
    for (index_t i = begin; i < end; ++i) {
        const gemm_call g = batch.item(i);
        pr.a = static_cast<const T*>(swapped ? g.b : g.a);
        pr.b = static_cast<const T*>(swapped ? g.a : g.b);
        pr.c = static_cast<T*>(g.c);
        gemm_rectangle(cfg, bl, pr, 0, pr.m, 0, pr.n);
    }
}

}  // namespace

void gemm_tiled_with(isa s, const cache_sizes& caches, const gemm_call& call, thread_pool& pool) {
    if (call.m <= 0 || call.n <= 0) return;
    const block_sizes bl = derive_block_sizes(config_for(s), call.type, caches);
    visit_dtype(call.type, [&]<class T>() { gemm_tiled_typed<T>(config_for(s), bl, call, &pool); });
}

namespace {
/// The host's blocks for each type (its selected instruction set and caches, fixed for the
/// process), derived once: the direct path's tiny calls derived them every call (8% of one).
const block_sizes& host_block_sizes(dtype type) {
    static const auto table = [] {
        std::array<block_sizes, std::size(all_dtypes)> t{};
        for (dtype d : all_dtypes) t[std::size_t(d)] = derive_block_sizes(config_for(selected_isa()), d, host_cache_sizes());
        return t;
    }();
    return table[std::size_t(type)];
}
}  // namespace

void gemm_tiled_serial(const gemm_call& call) {
    if (call.m <= 0 || call.n <= 0) return;
    const isa_config& cfg = config_for(selected_isa());
    const block_sizes& bl = host_block_sizes(call.type);
    visit_dtype(call.type, [&]<class T>() { gemm_tiled_typed<T>(cfg, bl, call, nullptr); });
}

void gemm_tiled_serial_items(const gemm_batched_call& batch, index_t begin, index_t end) {
    const gemm_call& call = batch.call;
    if (call.m <= 0 || call.n <= 0 || begin >= end) return;
    const isa_config& cfg = config_for(selected_isa());
    const block_sizes& bl = host_block_sizes(call.type);
    const cache_sizes& caches = host_cache_sizes();
    visit_dtype(call.type, [&]<class T>() { gemm_tiled_items<T>(cfg, bl, caches, batch, begin, end); });
}

void gemm_tiled_items_with(isa s, const cache_sizes& caches, const gemm_batched_call& batch, index_t begin, index_t end) {
    const gemm_call& call = batch.call;
    if (call.m <= 0 || call.n <= 0 || begin >= end) return;
    const isa_config& cfg = config_for(s);
    // Block sizes once per range of products, not per product.
    const block_sizes bl = derive_block_sizes(cfg, call.type, caches);
    visit_dtype(call.type, [&]<class T>() { gemm_tiled_items<T>(cfg, bl, caches, batch, begin, end); });
}

void gemm_tiled(const gemm_call& call, thread_pool& pool) {
    gemm_tiled_with(selected_isa(), host_cache_sizes(), call, pool);
}

}  // namespace tilestream::cpu
