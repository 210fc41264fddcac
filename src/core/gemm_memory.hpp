// What a context keeps on its devices between GEMM calls: per device the budget reservation, the
// buffers ("slots", with pinned staging) and streams of the last run, and in the A and B slots the
// tiles they hold, which a later call reuses only for operands the caller keeps (context::keep).
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/gemm.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace tilestream::detail {

namespace engine {
struct tiles_kit;  // the Level 3 engine's tile store of one device (core/engine/tile_store.hpp)
}

/// A rectangle of a host matrix in its own storage order.
struct host_rect {
    char* base = nullptr;  // element (0, 0) of the rectangle
    index_t rows = 0, cols = 0, ld = 0;
    layout lay = layout::row_major;
    std::size_t es = 0;
    index_t inner() const { return lay == layout::row_major ? cols : rows; }
    index_t outer() const { return lay == layout::row_major ? rows : cols; }
    std::size_t bytes() const { return std::size_t(rows) * std::size_t(cols) * es; }
    bool contiguous() const { return outer() <= 1 || inner() == ld; }
    bool operator==(const host_rect&) const = default;
};

/// A 2-D copy between a host rectangle and packed storage (ld = the rectangle's inner extent).
copy_2d_desc packed_copy(void* packed, const host_rect& r, bool to_packed);

/// Throws the error of a run every device of which was lost: out_of_budget when every cause was
/// one, else device_error, naming each device's cause ("<what>: every device failed (d of n
/// <units> done); cpu:0: ...").
[[noreturn]] void throw_every_device_failed(const std::string& what, std::size_t done, std::size_t total,
                                            const std::string& units, const std::vector<device_fault>& faults,
                                            const std::vector<std::exception_ptr>& errors);

/// Which kept operand a call's A or B lies in, and that operand's generation (bumped by
/// kept_operand::changed); id 0: not kept, its tiles are never reused by another call.
struct operand_keep {
    std::uint64_t id = 0, generation = 0;
};
struct call_keeps {
    operand_keep a, b;
};

struct slot {
    device_buffer buf;
    host_staging_buffer stage_in, stage_out;  // pack mode only
    std::unique_ptr<event> ready, released;
    std::unique_ptr<event> inputs;  // C slots of runs that survive faults: the unit's loads are checked
    std::optional<std::pair<index_t, index_t>> key;  // the tile this run knows the slot by
    std::uint64_t last_use = 0;
    /// The host bytes the slot holds a copy of, and the kept operand (with its generation) they were
    /// read from: a later call on that operand, unchanged, uses the copy (keep.id 0: never).
    host_rect origin;
    operand_keep keep;
    /// Other devices' copies out of this slot (guarded by run_state::directory_mutex); the slot
    /// is not overwritten before they are done.
    std::vector<std::shared_ptr<event>> peer_reads;
};

/// One device's buffers, streams and reservation, between runs.
struct device_kit {
    std::unique_ptr<budget_reservation> reservation;  // first: destroyed after its buffers
    std::vector<slot> a, b, c;
    std::unique_ptr<stream> h2d, compute, d2h, peer;
    device_kit() = default;
    device_kit(const device_kit&) = delete;
    device_kit& operator=(const device_kit&) = delete;
    ~device_kit();
};

/// What a context keeps, per device (index as in its device list); null: nothing kept there. A
/// run takes a device's kit out under the mutex and puts it back when it succeeded, so what is
/// here is idle and may be freed at any time (device::add_idle_holder).
struct gemm_memory {
    std::mutex mutex;
    std::vector<std::unique_ptr<device_kit>> kits;
    /// Calls on kept operands alternate the unit order, so that each starts with the units whose
    /// tiles the previous one loaded last (still in the slots).
    bool reverse_next = false;
    /// Per device, the Level 3 engine's tile slots, streams and reservation between its calls
    /// (shared_ptr: its type is complete in the engine only). Freed with the rest by release().
    std::vector<std::shared_ptr<engine::tiles_kit>> tile_kits;
    /// Frees what is kept on device i (all devices when i is npos); true when there was something.
    bool release(std::size_t i = std::size_t(-1));
};

struct keep_registry;
/// The kept operand of a context's registry that the view lies in (id 0: none).
operand_keep find_kept(keep_registry& registry, const void* data, index_t rows, index_t cols, index_t ld, layout lay,
                       dtype type);
/// A call wrote [data, data + bytes): every kept operand overlapping it has changed.
void kept_written(keep_registry& registry, const void* data, std::size_t bytes);

/// execute_gemm with buffers, streams and reservations taken from `memory` and given back after a
/// run that succeeded (a failed or cancelled run frees them), and tiles of kept operands reused.
template <class T>
gemm_report execute_gemm_kept(const gemm_plan& plan, std::span<device* const> devices, T alpha,
                              host_matrix_view<const T> a, host_matrix_view<const T> b, T beta, host_matrix_view<T> c,
                              const gemm_run_options& run, gemm_memory* memory, const call_keeps& keeps);

}  // namespace tilestream::detail
