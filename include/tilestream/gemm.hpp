// GEMM on devices with BLAS semantics: C <- alpha*op(A)*op(B) + beta*C, operands in host memory,
// planned (in-core or chunked and streamed) and executed with copies overlapped with compute. T is
// float, double, std::complex<float> or std::complex<double> (dtype_traits.hpp); op is n, t or c
// (conjugate transpose, the same as t on real data).
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/plan.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream {

struct gemm_options {
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    gemm_strategy strategy = gemm_strategy::automatic;  ///< any shape: out-of-core when it does not fit
    index_t tile_m = 0, tile_n = 0, tile_k = 0;
    transfer_mode transfer = transfer_mode::copy_2d;
    gemm_engine engine = gemm_engine::tasks;  ///< plan_options::engine
    std::optional<device_rates> rates;  ///< declared rates; measured on the device when absent
    bool reproducible = false;          ///< fixed k-order (plan_options::reproducible)
};

/// What one device did in a run.
struct device_share {
    std::string id;
    std::size_t units = 0;
    double flops = 0;
    std::size_t bytes_h2d = 0;
    std::size_t cache_hits = 0, cache_misses = 0, bytes_saved = 0;
    std::size_t peer_hits = 0, bytes_from_peers = 0;  ///< tiles copied from another device's cache
    std::size_t kept_hits = 0, kept_bytes_saved = 0;  ///< tiles of kept operands an earlier call left here
};

/// A device lost during a run: its unfinished units went back to the queue and other devices
/// redid them (the run still succeeded).
struct device_fault {
    std::string id;             ///< the device
    std::string message;        ///< what failed (the first error its streams or allocations reported)
    std::size_t units_redone = 0;  ///< its units (taken or assigned, not finished) other devices ran
};

/// What a run did, beside what its plan predicted.
struct gemm_report {
    gemm_plan plan;
    double seconds = 0;  ///< host to host: copies, device buffers and teardown included, pinning not
    std::size_t bytes_h2d = 0, bytes_d2h = 0, bytes_packed = 0;
    std::size_t peak_device_bytes = 0;  ///< the largest over the devices
    std::size_t cache_hits = 0, cache_misses = 0, bytes_saved = 0;  ///< tile loads avoided / done (cache on)
    std::size_t peer_hits = 0, bytes_from_peers = 0;
    /// Tile loads avoided because an earlier call of the same context left the tile on the device
    /// and the operand is kept unchanged (context::keep); not part of cache_hits.
    std::size_t kept_hits = 0, kept_bytes_saved = 0;
    std::vector<device_share> devices;
    /// What did not go as asked but did not stop the run (host memory a device refused to pin, a
    /// device that ran with fewer buffers after an allocation failed).
    std::vector<std::string> warnings;
    /// Devices lost during the run (see execute_gemm); empty when none failed.
    std::vector<device_fault> faults;
};

/// Whether a device may copy a missing tile from another device's cache instead of from the host.
/// `automatic`: between devices that are not host-addressable (GPUs with peer access), where such a
/// copy saves host-link bandwidth; CPU devices share one memory, so it would save nothing there.
enum class peer_tile_mode { automatic, on, off };
/// "auto", "on" or "off" (the CLI's --peer-tiles); invalid_argument naming the value otherwise.
peer_tile_mode parse_peer_tile_mode(std::string_view s);

struct gemm_run_options {
    trace_sink* trace = nullptr;                   ///< receives a span per copy and kernel
    /// Called per finished unit, from a device stream (the calling thread on the task engine in
    /// place on one CPU device).
    std::function<void(std::size_t)> on_unit_done;
    /// Called (from where on_unit_done is) after each kernel step with the steps done so far in the run
    /// (a unit has plan.steps / plan.units of them, steps of at most step_seconds in place): the
    /// progress of runs with few units.
    std::function<void(std::size_t)> on_step_done;
    bool register_host = true;  ///< pin host operands (before the clock) for devices that benefit
    /// Units a device may have queued but unfinished; more keeps its pipeline full, fewer keeps
    /// the shared queue responsive to device speed.
    int max_units_in_flight = 2;
    peer_tile_mode peer_tiles = peer_tile_mode::automatic;
    /// When it becomes true the run stops handing out units, lets the queued ones finish, frees
    /// its buffers and throws tilestream::cancelled (unless every unit had already finished).
    /// Checked between units and, on the compute stream, before each kernel step. A call planned
    /// with a cancel flag or on_step_done has steps of at most context_options::step_seconds; one
    /// planned with neither runs each unit as one kernel call.
    const std::atomic<bool>* cancel = nullptr;
};

/// Host operands pinned in place (register_host) for the devices that copy faster from pinned
/// memory, for the object's lifetime. execute_gemm pins on its own before its clock starts; a
/// caller that runs the same operands again makes one of these first and sets
/// gemm_run_options::register_host = false, so pinning is paid once and never timed.
class pinned_operands {
public:
    pinned_operands() = default;
    /// Pins each of the byte ranges for the first device that is not host-addressable
    /// (registration is per process for CUDA). A range that cannot be pinned stays pageable:
    /// copies still work, only slower; `refused()` lists what happened.
    pinned_operands(std::span<device* const> devices, std::span<const std::pair<const void*, std::size_t>> ranges);
    /// Pins the memory A, B and C span.
    template <class T>
    pinned_operands(std::span<device* const> devices, host_matrix_view<const T> a, host_matrix_view<const T> b,
                    host_matrix_view<T> c);
    pinned_operands(pinned_operands&& o) noexcept { std::swap(pinned_, o.pinned_); std::swap(refused_, o.refused_); }
    pinned_operands& operator=(pinned_operands&& o) noexcept {
        pinned_operands tmp(std::move(o));
        std::swap(pinned_, tmp.pinned_);
        std::swap(refused_, tmp.refused_);
        return *this;
    }
    pinned_operands(const pinned_operands&) = delete;
    pinned_operands& operator=(const pinned_operands&) = delete;
    ~pinned_operands();
    /// Messages of the registrations a device refused (empty when all were pinned or none needed).
    const std::vector<std::string>& refused() const { return refused_; }

private:
    std::vector<std::pair<device*, void*>> pinned_;
    std::vector<std::string> refused_;
};

/// Whether every device can compute on host operands where they lie: host-addressable, with no
/// budget given by the user (a budget asks a CPU device to stage data like an accelerator, which
/// is how out-of-core runs are exercised without a GPU). The planner may then pick zero-copy.
bool computes_in_place(std::span<device* const> devices);

/// Whether every device computes with the host's own cores (CPU devices, and CPU OpenCL runtimes
/// such as PoCL): their copies then run on the cores the kernels use and add to the compute time
/// (device_rates::host_memory), where a GPU's copy engines would overlap it.
bool computes_on_host_cores(std::span<device* const> devices);

/// Throws dimension_mismatch / invalid_argument naming the operands when the shapes do not fit.
void validate_gemm(op op_a, op op_b, index_t a_rows, index_t a_cols, index_t b_rows, index_t b_cols,
                   index_t c_rows, index_t c_cols);

/// The planner's view of a GEMM on these operands.
template <class T>
gemm_problem describe_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<T> c);

/// Runs a plan on one or more devices. Work units go to the devices from a shared queue (or
/// round-robin for row-panels); a device stops taking units when the fastest one would finish all
/// that remain before it finishes one more, so a slow device does not hold the finish back.
/// Every device must fit the plan's peak memory.
///
/// Faults: with two or more devices (and no tiles copied between devices), a device that fails
/// during the run (a kernel or copy error reported by its streams, an allocation that fails) is
/// dropped: its unfinished units, with their C blocks restored to the values they had before, go
/// back to the queue and the other devices finish the run; gemm_report::faults names it. The run
/// fails only when every device is lost, with every cause in the message. A device whose buffers
/// cannot all be allocated first retries with half as many (down to one per operand; on the task
/// engine, plan.engine == tasks, one per slot size and at least three).
template <class T>
gemm_report execute_gemm(const gemm_plan& plan, std::span<device* const> devices, T alpha,
                         host_matrix_view<const T> a, host_matrix_view<const T> b, T beta, host_matrix_view<T> c,
                         const gemm_run_options& run = {});

/// Plans (with opt) and runs on one device. Throws out_of_budget when nothing fits its budget.
template <class T>
gemm_report gemm(device& dev, op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                 host_matrix_view<const T> b, T beta, host_matrix_view<T> c, const gemm_options& opt = {});

/// The sequential reference on host data, accumulating in double (the test oracle).
template <class T>
void reference_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                    host_matrix_view<const T> b, T beta, host_matrix_view<T> c);

}  // namespace tilestream
