// Instruction sets of the CPU kernels: what the CPU supports, the cache sizes it reports, and the
// registry of GEMM micro-kernels with their block sizes, one entry per instruction set (BLIS's
// configuration registry). Private to the library; the tests reach every variant through it.
#pragma once

#include "thread_pool.hpp"

#include <tilestream/kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream::cpu {

/// Instruction sets with their own micro-kernels, from the portable one up.
enum class isa { generic, avx2, avx512 };
std::string_view to_string(isa s) noexcept;
/// "generic", "avx2" or "avx512"; anything else is an invalid_argument naming the choices.
isa parse_isa(std::string_view s);

/// The instruction sets this CPU and its operating system support (the CPU's flags and the
/// register state the OS saves), portable first. `generic` is always present.
std::vector<isa> supported_isas();

/// The instruction set the kernels use: `requested` (TILESTREAM_CPU_ISA) when given, else the
/// widest of `available`. A requested set missing from `available` is an invalid_argument that
/// names what the CPU has.
isa choose_isa(const char* requested, const std::vector<isa>& available);
/// choose_isa(getenv("TILESTREAM_CPU_ISA"), supported_isas()), decided once per process.
isa selected_isa();

/// Data cache sizes in bytes available to one core: L1 data, L2, and its share of L3.
struct cache_sizes {
    std::size_t l1d = 0, l2 = 0, l3 = 0;
    /// The CPU is Intel's (cpuid): the entries' Intel shares apply (isa_config::intel_l1_share).
    bool intel = false;
};
/// From /sys/devices/system/cpu/cpu0/cache (L3 divided among the CPUs sharing it), else sysconf,
/// else typical sizes (32 KiB, 512 KiB, 2 MiB); cached after the first call.
cache_sizes host_cache_sizes();

/// Blocking of the tiled GEMM: an MR x NR micro-tile of C in registers; a KC x NR micro-panel of
/// packed B reused from L1 by every micro-tile of a column; an MC x KC block of packed A in L2;
/// a KC x NC block of packed B in L3.
struct block_sizes {
    int mr = 0, nr = 0;
    index_t kc = 0, mc = 0, nc = 0;
};

/// C tile (mr x nr of it valid, rows rs_c apart, unit column stride) = alpha * A panel * B panel +
/// beta * C, where beta == 0 never reads C. Panels are packed: a[p * MR + i], b[p * NR + j].
template <class T>
using micro_kernel = void (*)(index_t kc, const T* a, const T* b, T* c, index_t rs_c, T alpha,
                              T beta, int mr, int nr);

/// Small products (one, or a stack) for small_stack_kernel, in the tiled kernel's row-major form (a
/// column-major C is C^T = op(B)^T op(A)^T, operands swapped): C_i (m x n, rows rs_c apart) =
/// alpha * A_i * B_i + beta * C_i, A_i(r, p) = a_i[r * rs_a + p * cs_a], B_i(p, j) = b_i[p * rs_b +
/// j * cs_b]; product i's matrices are `stride_*` elements after product i-1's, or listed (a_list,
/// b_list, c_list, each all or none). n is at most the entry's small_cols; k runs in blocks of kc
/// (the tiled kernel's KC), beta on the first only. `panel` (kc x 4 vectors) holds a k-block of B
/// when its rows are not contiguous (cs_b != 1).
template <class T>
struct small_stack {
    index_t m = 0, n = 0, k = 0, kc = 1;
    const T* a = nullptr;
    index_t rs_a = 0, cs_a = 0, stride_a = 0;
    const T* b = nullptr;
    index_t rs_b = 0, cs_b = 0, stride_b = 0;
    T* c = nullptr;
    index_t rs_c = 0, stride_c = 0;
    const void* const* a_list = nullptr;
    const void* const* b_list = nullptr;
    void* const* c_list = nullptr;
    T alpha = T(1), beta = T(0);
    T* panel = nullptr;
    /// Store C with streaming (non-temporal) stores where the kernel can: a stack too large for the
    /// caches, whose C would only evict A and B (and cost a read of each line before its write).
    bool stream_c = false;
};

/// The stack kernel: products [begin, end) of a small_stack, each element with the micro-kernel's
/// operations in its order (so the bits of a loop of single tiled calls), B and C read where they
/// lie (masked vectors at the edge), A's elements broadcast from where they lie: no packing of A,
/// no register tile larger than the product, and nothing per product but its three pointers.
template <class T>
using small_stack_kernel = void (*)(const small_stack<T>& s, index_t begin, index_t end);

/// One registry entry: the micro-kernel of each real value type with its register tile, and the shares
/// of each cache level the blocks are sized to fill.
struct isa_config {
    isa set = isa::generic;
    micro_kernel<float> kernel_f32 = nullptr;
    int mr_f32 = 0, nr_f32 = 0;
    micro_kernel<double> kernel_f64 = nullptr;
    int mr_f64 = 0, nr_f64 = 0;
    /// Of L1 for the KC x NR micro-panel of B, per real type. Above 1 the micro-panel streams from
    /// L2 (each micro-tile reads it once per KC steps): a longer KC means fewer passes over C (read
    /// and written once per k-block), which the entries with 24 accumulators measured to be worth more.
    double l1_share_f32 = 0.5;
    double l1_share_f64 = 0.5;
    double l2_share = 0.5;  ///< of L2 for the MC x KC block of A
    double l3_share = 0.5;  ///< of this core's L3 share for the KC x NC block of B
    /// The widest panel of the small-product kernels (4 vectors), in real elements, and the kernels.
    int small_cols_f32 = 0;
    int small_cols_f64 = 0;
    small_stack_kernel<float> stack_f32 = nullptr;
    small_stack_kernel<double> stack_f64 = nullptr;
    /// On Intel cores (cache_sizes::intel), when above 0: the L1 share of both real types and the
    /// L2 share instead of those above (measured apart: AVX-512 runs on full-width units there).
    double intel_l1_share = 0;
    double intel_l2_share = 0;
};
/// The registry entry of an instruction set (compiled on every x86-64 build).
const isa_config& config_for(isa s);

/// MR x NR of the entry's micro-kernel for a real type (f32 or f64; invalid_argument otherwise).
struct micro_tile {
    int mr = 0, nr = 0;
};
micro_tile register_tile(const isa_config& cfg, dtype real);
/// The entry's micro-kernel for real type T.
template <class T>
micro_kernel<T> kernel_of(const isa_config& cfg) {
    if constexpr (std::is_same_v<T, float>)
        return cfg.kernel_f32;
    else
        return cfg.kernel_f64;
}

/// The entry's small-product kernel for real type T, and its widest panel (real elements).
template <class T>
small_stack_kernel<T> stack_kernel_of(const isa_config& cfg) {
    if constexpr (std::is_same_v<T, float>)
        return cfg.stack_f32;
    else
        return cfg.stack_f64;
}
template <class T>
int small_cols_of(const isa_config& cfg) {
    if constexpr (std::is_same_v<T, float>)
        return cfg.small_cols_f32;
    else
        return cfg.small_cols_f64;
}

/// Block sizes of `cfg` for `type` on a CPU with `caches` (BLIS's analytical model): KC from L1,
/// MC from L2, NC from L3, each rounded down to whole micro-tiles and kept within a floor (KC 16,
/// MC MR, NC NR) and a cap (1024, 1024, 8192) so a tiny or absurd report still works. Complex
/// types get the blocks of their parts' real kernel counted in complex elements (NR, KC and NC
/// halved: the 1m method packs a complex element as two reals along k and n).
block_sizes derive_block_sizes(const isa_config& cfg, dtype type, const cache_sizes& caches);

/// "f32 6x16 kc=256 mc=168 nc=4096, f64 ..." for `devices`.
std::string describe_blocking(isa s, const cache_sizes& caches);

/// The tiled GEMM with the micro-kernel of `s` (which this CPU must support), blocked for `caches`.
/// gemm_tiled() calls it with selected_isa() and host_cache_sizes(); tests call it per variant
/// and with small caches, to cross every block edge on small shapes.
void gemm_tiled_with(isa s, const cache_sizes& caches, const gemm_call& call, thread_pool& pool);
/// Products [begin, end) of a stack with the tiled kernel of `s` on the calling thread (what
/// gemm_tiled_serial_items runs with selected_isa()): the stack kernel where the products fit it.
void gemm_tiled_items_with(isa s, const cache_sizes& caches, const gemm_batched_call& batch, index_t begin, index_t end);

// The micro-kernels, one translation unit per instruction set (gemm_kernel_<isa>.cpp).
extern const isa_config generic_config;
#if defined(__x86_64__)
extern const isa_config avx2_config;
extern const isa_config avx512_config;
#endif

}  // namespace tilestream::cpu
