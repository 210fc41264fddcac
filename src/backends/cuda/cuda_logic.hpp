// The CUDA backend's decisions that need no GPU, as plain host functions compiled into every build
// (CUDA or not) so that CI tests them: budgets and slices, pinning flags, peer fallback, launch
// configurations. The CUDA code calls these and stays thin. No CUDA header is included here.
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tilestream::cuda {

// ------------------------------------------------------------------ discovery messages

/// "13.0" from CUDA's 13000.
std::string cuda_version_string(int version);
/// Why cudaGetDeviceCount found no usable GPU, as the runtime reported it.
enum class cuda_count_failure { no_device, insufficient_driver, other };
/// One line saying why CUDA is unusable: "no CUDA driver found (runtime 13.0)" when the driver
/// version is 0, "CUDA driver 12.4 is older than the runtime 13.0", "no CUDA GPU present (driver
/// 13.0, runtime 13.0)", else CUDA's own message with the versions.
std::string cuda_failure_text(cuda_count_failure failure, int driver, int runtime,
                              std::string_view cuda_message);

// ------------------------------------------------------------------ budgets and slices

/// Default budget of a logical device whose share of the GPU's free memory is `share`: the share
/// less a reserve for what CUDA allocates outside the budget (cuBLAS workspaces, context growth).
std::size_t default_budget(std::size_t share);

/// "cuda:0" for a whole GPU, "cuda:0.2" for slice 2 of several.
std::string logical_device_id(int ordinal, int slice, int slices);

/// Throws invalid_argument naming the item when (ordinal, slice, slices) cannot name a device.
void check_slice_request(int ordinal, int slice, int slices);

/// Why GPU `ordinal` cannot be opened when the runtime counts `count` GPUs; "" when it can.
std::string missing_gpu_reason(int ordinal, int count);

/// Memory of one logical device: an equal share of the GPU's total and free memory, and its budget
/// (`budget` when given, else default_budget of the share).
struct slice_memory {
    std::size_t memory_bytes = 0, memory_free = 0, budget_bytes = 0;
};
/// Throws invalid_argument naming the device when `budget` exceeds the slice's share of free memory.
slice_memory split_gpu_memory(int ordinal, int slice, int slices, std::size_t total,
                              std::size_t free, std::optional<std::size_t> budget);

// ------------------------------------------------------------------ pinning host memory

/// cudaHostRegister flags, with CUDA's values (cuda_device.cpp checks them against the headers).
enum host_register_flag : unsigned {
    host_register_portable = 0x01,   ///< cudaHostRegisterPortable: pinned for every GPU
    host_register_read_only = 0x08,  ///< cudaHostRegisterReadOnly: the device never writes it
};

/// How to pin a host range, or why it cannot be pinned.
struct host_registration_choice {
    bool pin = false;
    unsigned flags = 0;   ///< host_register_flag bits
    std::string reason;   ///< when !pin: why, for the warning
};
/// Writable memory is registered portable. Memory the process may not write (a read-only mapped
/// .npy input) is not pinned: CUDA needs the read-only flag for it, and cudaHostRegister with that
/// flag on a read-only file mapping hung (over 150 s for 16 MiB, never returned) on the first GPU
/// this project ran on (H200, driver 580.159.04, Firecracker VM, 2026-11-26). Copies from such
/// memory stay pageable: slower, never stuck. device_supports_read_only only shapes the reason.
host_registration_choice choose_host_registration(bool read_only_memory,
                                                  bool device_supports_read_only);

/// True when some byte of [begin, end) lies in a mapping without write permission, per a
/// /proc/self/maps text ("start-end perms offset dev inode path" lines, hexadecimal addresses).
bool maps_read_only(std::string_view proc_maps, std::uintptr_t begin, std::uintptr_t end);
/// maps_read_only for this process's current mappings (false when /proc/self/maps is unreadable).
bool host_range_read_only(const void* p, std::size_t bytes);

// ------------------------------------------------------------------ peer access

/// What cudaDeviceEnablePeerAccess answered.
enum class peer_enable_status { enabled, already_enabled, refused, context_lost };
/// Whether copies between two GPUs go direct (true) or through host staging (false). A refusal
/// (too many peers, unsupported topology) falls back to staging even when cudaDeviceCanAccessPeer
/// said yes; only a lost context is an error, which the caller throws.
bool use_peer_path(bool can_access_peer, peer_enable_status enable);

// ------------------------------------------------------------------ argument checks

/// What a GEMM call asks of the device: nothing (C is empty), C <- beta*C (alpha == 0 or k == 0:
/// A and B are never read), or the product.
enum class gemm_work { none, scale_c, product };
/// Throws invalid_argument naming `device_id` and the operand for negative sizes, the host-only
/// reference kernel, null operands and leading dimensions below the stored row or column length.
gemm_work check_gemm_call(const gemm_call& call, const std::string& device_id);

/// The kernel that runs a product call: call.kernel, except that a vendor call cuBLAS cannot
/// express (a conjugated operand that is not transposed in the column-major mapping: op::c on a
/// complex operand stored in the other layout than C) runs the tiled kernel, which conjugates on load.
gemm_kernel kernel_for_call(const gemm_call& call);

/// False when the sweep has no points; throws invalid_argument naming `device_id` for a reversed
/// range, points without a halo inside ld, and missing or aliased buffers.
bool check_jacobi_call(const jacobi_call& call, const std::string& device_id);

/// How a 2-D copy is issued: not at all (empty), as one 1-D copy (one row, or rows back to back
/// on both sides), as one pitched copy, or row by row (a pitch above the GPU's cudaMemcpy2D limit).
enum class copy_2d_route { nothing, one_copy, pitched, row_by_row };
/// Throws invalid_argument naming `what` (operation and device) when rows do not fit the pitches.
copy_2d_route plan_copy_2d(const copy_2d_desc& c, std::size_t max_pitch, const std::string& what);

// ------------------------------------------------------------------ launch configurations

constexpr int threads_per_block = 256;
/// Largest grid.x and grid.y of a CUDA launch (compute capability 3.0 and later).
constexpr std::uint64_t max_grid_x = 0x7fffffffu, max_grid_y = 65535u;

/// Elements of one 16-byte vector: 4 for f32, 2 for f64.
constexpr int vector_elements(std::size_t element_bytes) { return int(16 / element_bytes); }
/// Edge of the tiled GEMM kernel's square C tile: 32 vectors (128 for f32, 64 for f64).
constexpr int tiled_tile_edge(std::size_t element_bytes) { return 32 * vector_elements(element_bytes); }
/// Tile rows walked together by the tiled kernel's grouped block order.
constexpr int tiled_group_rows = 8;

/// Blocks of a grid-stride loop over `total` items: enough to fill any GPU, at least 1, at most 2^20.
unsigned grid_stride_blocks(index_t total);

/// 16-byte alignment of a device address.
bool aligned16(const void* p);

/// The tiled GEMM kernel's specialisation and grid for one call.
struct tiled_launch {
    bool a_k_contiguous = false;  ///< op(A) has unit stride along k (else along m)
    bool b_k_contiguous = false;  ///< op(B) has unit stride along k (else along n)
    bool vector_ab = false;       ///< A and B 16-byte aligned, leading dimensions multiples of a vector
    bool vector_c = false;        ///< likewise C, for the epilogue
    bool c_row_major = false;
    unsigned blocks = 0;          ///< one per tile of C
    std::string error;            ///< non-empty when the grid exceeds what CUDA or the kernel's int indices hold
};
tiled_launch plan_tiled_launch(const gemm_call& call);

/// The Jacobi kernel's grid: column groups of one vector (aligned to vectors), 32 x 8 threads.
struct jacobi_launch {
    static constexpr int block_x = 32, block_y = 8;
    index_t first_group = 0;  ///< vector-aligned group holding col_begin
    index_t groups = 0;       ///< groups touching [col_begin, col_end)
    unsigned grid_x = 0, grid_y = 0;  ///< grid_y capped at max_grid_y (rows are a grid-stride loop)
    bool vector = false;      ///< in, out aligned and ld a multiple of a vector
    std::string error;
};
/// Requires a non-empty range.
jacobi_launch plan_jacobi_launch(const jacobi_call& call);

}  // namespace tilestream::cuda
