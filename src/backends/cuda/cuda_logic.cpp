// Host-only decisions of the CUDA backend (see cuda_logic.hpp); compiled in every build.
#include "backends/cuda/cuda_logic.hpp"
#include "core/blas_mapping.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <charconv>
#include <climits>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tilestream::cuda {

namespace {
constexpr std::size_t mib = std::size_t(1) << 20;
}

std::string cuda_version_string(int version) {
    return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string cuda_failure_text(cuda_count_failure failure, int driver, int runtime,
                              std::string_view cuda_message) {
    const std::string versions =
        " (driver " + (driver ? cuda_version_string(driver) : std::string("none")) + ", runtime " +
        cuda_version_string(runtime) + ")";
    if (failure == cuda_count_failure::no_device) return "no CUDA GPU present" + versions;
    if (driver == 0) return "no CUDA driver found (runtime " + cuda_version_string(runtime) + ")";
    if (failure == cuda_count_failure::insufficient_driver)
        return "CUDA driver " + cuda_version_string(driver) + " is older than the runtime " +
               cuda_version_string(runtime);
    return "CUDA unusable: cudaGetDeviceCount failed: " + std::string(cuda_message) + versions;
}

std::size_t default_budget(std::size_t share) {
    // 256 MiB covers the cuBLAS workspaces of a few streams; 1% more covers the growth of the
    // context (module loads, peer mappings) on large GPUs. Never more than a quarter of the share.
    const std::size_t reserve = std::min(share / 4, 256 * mib + share / 100);
    return share - reserve;
}

std::string logical_device_id(int ordinal, int slice, int slices) {
    const std::string gpu = "cuda:" + std::to_string(ordinal);
    return slices == 1 ? gpu : gpu + "." + std::to_string(slice);
}

void check_slice_request(int ordinal, int slice, int slices) {
    const std::string gpu = "cuda:" + std::to_string(ordinal);
    if (slices < 1)
        throw invalid_argument(gpu + "x" + std::to_string(slices) +
                               ": a GPU splits into at least 1 logical device");
    if (slice < 0 || slice >= slices)
        throw invalid_argument(gpu + ": slice " + std::to_string(slice) + " does not exist (" +
                               std::to_string(slices) + " slices)");
    if (ordinal < 0) throw invalid_argument(gpu + " does not exist: GPU numbers start at 0");
}

std::string missing_gpu_reason(int ordinal, int count) {
    if (ordinal >= 0 && ordinal < count) return {};
    if (ordinal < 0) return "GPU numbers start at 0";
    if (count <= 0) return "no CUDA GPU present";
    return std::to_string(count) + (count == 1 ? " CUDA GPU" : " CUDA GPUs") + " present";
}

slice_memory split_gpu_memory(int ordinal, int slice, int slices, std::size_t total,
                              std::size_t free, std::optional<std::size_t> budget) {
    check_slice_request(ordinal, slice, slices);
    const auto n = static_cast<std::size_t>(slices);
    slice_memory m;
    m.memory_bytes = total / n;
    m.memory_free = free / n;
    if (budget) {
        if (*budget > m.memory_free)
            throw invalid_argument(logical_device_id(ordinal, slice, slices) + ": budget " +
                                   format_bytes(*budget) + " exceeds its share of cuda:" +
                                   std::to_string(ordinal) + "'s free memory, " +
                                   format_bytes(m.memory_free) + " (" + format_bytes(free) +
                                   " free / " + std::to_string(slices) +
                                   (slices == 1 ? " slice)" : " slices)"));
        m.budget_bytes = *budget;
    } else {
        m.budget_bytes = default_budget(m.memory_free);
    }
    return m;
}

host_registration_choice choose_host_registration(bool read_only_memory,
                                                  bool device_supports_read_only) {
    host_registration_choice c;
    if (!read_only_memory) {
        c.pin = true;
        c.flags = host_register_portable;
    } else if (device_supports_read_only) {
        c.reason = "the memory is read-only (a mapped input): tilestream does not pin it, since "
                   "cudaHostRegister with cudaHostRegisterReadOnly hung on such memory";
    } else {
        c.reason = "the memory is read-only and this GPU cannot register read-only memory "
                   "(cudaDevAttrHostRegisterReadOnlySupported is 0)";
    }
    return c;
}

bool maps_read_only(std::string_view maps, std::uintptr_t begin, std::uintptr_t end) {
    const auto hex = [](std::string_view s, std::uintptr_t& v) {
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
        return ec == std::errc() && p == s.data() + s.size();
    };
    while (!maps.empty()) {
        const auto eol = maps.find('\n');
        const std::string_view line = maps.substr(0, eol);
        maps = eol == std::string_view::npos ? std::string_view() : maps.substr(eol + 1);
        const auto dash = line.find('-'), space = line.find(' ');
        if (dash == std::string_view::npos || space == std::string_view::npos || dash > space ||
            space + 2 >= line.size())
            continue;
        std::uintptr_t lo = 0, hi = 0;
        if (!hex(line.substr(0, dash), lo) || !hex(line.substr(dash + 1, space - dash - 1), hi))
            continue;
        const bool writable = line[space + 2] == 'w';  // perms "rwxp": the second letter
        if (lo < end && begin < hi && !writable) return true;
    }
    return false;
}

bool host_range_read_only(const void* p, std::size_t bytes) {
    if (p == nullptr || bytes == 0) return false;
    std::ifstream in("/proc/self/maps");
    if (!in) return false;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    return maps_read_only(text, begin, begin + bytes);
}

bool use_peer_path(bool can_access_peer, peer_enable_status enable) {
    if (!can_access_peer) return false;
    return enable == peer_enable_status::enabled || enable == peer_enable_status::already_enabled;
}

namespace {

// Least leading dimension of a rows x cols matrix stored with layout l.
index_t min_ld(index_t rows, index_t cols, layout l) {
    return std::max<index_t>(1, l == layout::row_major ? cols : rows);
}

void check_operand(const std::string& dev, const char* name, const void* p, index_t rows,
                   index_t cols, index_t ld, layout l) {
    if (rows == 0 || cols == 0) return;
    if (p == nullptr)
        throw invalid_argument("gemm on " + dev + ": " + name + " is null for a " +
                               std::to_string(rows) + "x" + std::to_string(cols) + " operand");
    if (ld < min_ld(rows, cols, l))
        throw invalid_argument("gemm on " + dev + ": leading dimension " + std::to_string(ld) +
                               " of " + name + " is too small for a " + std::to_string(rows) + "x" +
                               std::to_string(cols) + " " + std::string(to_string(l)) +
                               " matrix (needs at least " + std::to_string(min_ld(rows, cols, l)) +
                               ")");
}

std::string range_text(const jacobi_call& j) {
    return "rows [" + std::to_string(j.row_begin) + ", " + std::to_string(j.row_end) + ") x cols [" +
           std::to_string(j.col_begin) + ", " + std::to_string(j.col_end) + ")";
}

}  // namespace

gemm_work check_gemm_call(const gemm_call& call, const std::string& device_id) {
    if (call.m < 0 || call.n < 0 || call.k < 0)
        throw invalid_argument("gemm on " + device_id + ": negative size " + std::to_string(call.m) +
                               "x" + std::to_string(call.n) + "x" + std::to_string(call.k));
    if (call.kernel == gemm_kernel::reference)
        throw invalid_argument("gemm on " + device_id +
                               ": the reference kernel runs on the host only (use naive, tiled "
                               "or vendor on a CUDA device)");
    if (call.m == 0 || call.n == 0) return gemm_work::none;
    const bool reads_ab = call.k > 0 && call.alpha != 0.0;
    check_operand(device_id, "C", call.c, call.m, call.n, call.ldc, call.layout_c);
    if (!reads_ab) return gemm_work::scale_c;
    const operand_desc a = call.a_desc(), b = call.b_desc();
    check_operand(device_id, "A", call.a, a.stored_rows(), a.stored_cols(), call.lda, call.layout_a);
    check_operand(device_id, "B", call.b, b.stored_rows(), b.stored_cols(), call.ldb, call.layout_b);
    return gemm_work::product;
}

gemm_kernel kernel_for_call(const gemm_call& call) {
    if (call.kernel == gemm_kernel::vendor && !as_column_major(call).expressible()) return gemm_kernel::tiled;
    return call.kernel;
}

bool check_jacobi_call(const jacobi_call& call, const std::string& device_id) {
    if (call.row_end < call.row_begin || call.col_end < call.col_begin)
        throw invalid_argument("jacobi_sweep on " + device_id + ": empty-or-reversed range " +
                               range_text(call));
    if (call.row_end == call.row_begin || call.col_end == call.col_begin) return false;
    if (call.row_begin < 1 || call.col_begin < 1 || call.col_end >= call.ld)
        throw invalid_argument("jacobi_sweep on " + device_id + ": the swept points " +
                               range_text(call) + " need a halo inside ld " + std::to_string(call.ld));
    if (call.in == nullptr || call.out == nullptr || call.in == call.out)
        throw invalid_argument("jacobi_sweep on " + device_id +
                               ": needs distinct non-null input and output buffers");
    return true;
}

copy_2d_route plan_copy_2d(const copy_2d_desc& c, std::size_t max_pitch, const std::string& what) {
    if (c.width_bytes == 0 || c.height == 0) return copy_2d_route::nothing;
    if (c.height > 1 && (c.dst_pitch < c.width_bytes || c.src_pitch < c.width_bytes))
        throw invalid_argument(what + ": rows of " + std::to_string(c.width_bytes) +
                               " bytes do not fit pitches of " + std::to_string(c.src_pitch) +
                               " (source) and " + std::to_string(c.dst_pitch) + " (destination) bytes");
    if (c.height == 1 || (c.dst_pitch == c.width_bytes && c.src_pitch == c.width_bytes))
        return copy_2d_route::one_copy;
    return c.dst_pitch <= max_pitch && c.src_pitch <= max_pitch ? copy_2d_route::pitched
                                                                 : copy_2d_route::row_by_row;
}

unsigned grid_stride_blocks(index_t total) {
    const index_t blocks = (total + threads_per_block - 1) / threads_per_block;
    return static_cast<unsigned>(std::min<index_t>(std::max<index_t>(blocks, 1), index_t(1) << 20));
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

tiled_launch plan_tiled_launch(const gemm_call& call) {
    tiled_launch l;
    const index_t s = vector_elements(size_of(call.type));
    const index_t edge = tiled_tile_edge(size_of(call.type));
    // When a stride is 1 in both directions (a single row or column) either reading is right.
    l.a_k_contiguous = call.a_col_stride() == 1;
    l.b_k_contiguous = call.b_row_stride() == 1;
    const index_t lda = l.a_k_contiguous ? call.a_row_stride() : call.a_col_stride();
    const index_t ldb = l.b_k_contiguous ? call.b_col_stride() : call.b_row_stride();
    l.vector_ab = aligned16(call.a) && aligned16(call.b) && lda % s == 0 && ldb % s == 0;
    l.c_row_major = call.c_col_stride() == 1;
    l.vector_c = aligned16(call.c) && call.ldc % s == 0;
    const index_t tiles_m = (call.m + edge - 1) / edge, tiles_n = (call.n + edge - 1) / edge;
    // The kernel orders blocks in groups of tiled_group_rows tile rows with int arithmetic.
    if (tiles_n > INT_MAX / tiled_group_rows || tiles_m > INT_MAX ||
        tiles_m * tiles_n > index_t(max_grid_x))
        l.error = "the tiled kernel's grid of " + std::to_string(tiles_m) + " x " +
                  std::to_string(tiles_n) + " tiles exceeds " + std::to_string(max_grid_x) +
                  " blocks";
    else
        l.blocks = static_cast<unsigned>(tiles_m * tiles_n);
    return l;
}

jacobi_launch plan_jacobi_launch(const jacobi_call& call) {
    jacobi_launch l;
    const index_t s = vector_elements(size_of(call.type));
    l.first_group = call.col_begin / s;
    l.groups = (call.col_end - 1) / s - l.first_group + 1;
    l.vector = aligned16(call.in) && aligned16(call.out) && call.ld % s == 0;
    const index_t rows = call.row_end - call.row_begin;
    const index_t gx = (l.groups + jacobi_launch::block_x - 1) / jacobi_launch::block_x;
    const index_t gy = std::min<index_t>((rows + jacobi_launch::block_y - 1) / jacobi_launch::block_y,
                                         index_t(max_grid_y));
    if (gx > index_t(max_grid_x)) {
        l.error = "the Jacobi kernel's grid of " + std::to_string(gx) + " column blocks exceeds " +
                  std::to_string(max_grid_x);
        return l;
    }
    l.grid_x = static_cast<unsigned>(gx);
    l.grid_y = static_cast<unsigned>(gy);
    return l;
}

}  // namespace tilestream::cuda
