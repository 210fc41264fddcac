// The task executor: runs a task graph on devices. Tasks become ready when the tasks whose tile
// versions they read (or overwrite) have committed theirs; ready tasks go to the devices from one
// shared queue by priority (the critical path first), a device preferring among the most urgent
// the ones whose tiles it holds, and declining work a faster device would finish sooner. Each
// device runs its tasks through its tile store (slots in its memory: an LRU cache of tile versions,
// loads on a copy-in stream, kernels on a compute stream, write-back on a copy-out stream), or on
// the host operands in place. A task commits when its output tiles are back in host memory; a device
// that fails is dropped and its unfinished tasks rerun elsewhere from the committed versions.
#pragma once

#include "core/engine/task_graph.hpp"
#include "core/gemm_memory.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/device.hpp>
#include <tilestream/gemm.hpp>

#include <complex>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tilestream::detail::engine {

/// One operand of the graph in host memory: element (i, j) at base + (i*row_stride + j*col_stride)*es.
struct host_operand {
    char* base = nullptr;
    index_t ld = 1;
    layout lay = layout::row_major;
};

struct run_request {
    const task_graph* graph = nullptr;
    std::string what = "blas3";          ///< what the run's errors name first ("blas3: cancelled ...")
    std::vector<host_operand> operands;  ///< by graph operand number
    std::complex<double> alpha{1.0}, beta{0.0};
    bool in_place = false;               ///< compute on the host operands, no slots
    int slots = 0;                       ///< tile slots per device (copying runs)
    std::size_t slot_bytes = 0;
    /// Slots of several sizes instead (non-empty: slots and slot_bytes are not used).
    std::vector<slot_class> slot_classes;
    /// How tiles that are not contiguous in host memory reach the slots and come back: 2-D strided
    /// copies, or gathered into host staging and copied whole (pack).
    transfer_mode transfer = transfer_mode::copy_2d;
    /// Diagonal blocks on the reference (reproducible plans).
    bool deterministic = false;
    /// Each device's measured GEMM rate (FLOP/s; empty or 0: none): its rate for the balance until
    /// it has finished a task, so a device far slower than another takes no task it would finish
    /// after the others have done all of them.
    std::vector<double> device_flops;
    /// By device: the kernel of its GEMM steps where it is not the step's own (empty: the steps'
    /// kernels everywhere); blas3_plan::gemm_kernels.
    std::vector<gemm_kernel> gemm_kernels;
    /// trsm, trmm, symm and hemm steps on the vendor kernel beside GEMM steps on another (gemm_kernels,
    /// or the steps' own kernel asked for): in diagonal blocks of this order on vendor and GEMMs on
    /// the GEMM steps' kernel (0: whole); device_rates::diagonal_block.
    index_t diagonal_block = 0;
    blas3_run_options run;
    /// Called on a device's compute stream after each step's kernels (null: not called); GEMM's
    /// progress per kernel step (gemm_run_options::on_step_done).
    std::function<void()> on_step_done;
    /// A context's memory: each device's tile store (reservation, slots, streams) is taken from it
    /// and given back after a run that succeeded (null: made and freed here).
    gemm_memory* memory = nullptr;
    /// By graph operand: the kept operand it lies in (id 0: none; only operands the call does not
    /// write), so tiles an earlier call left on a device are used without a copy.
    std::vector<operand_keep> keeps;
};

struct run_result {
    double seconds = 0;
    std::size_t bytes_h2d = 0, bytes_d2h = 0, peak_device_bytes = 0;
    std::size_t bytes_packed = 0;  ///< of those, through host staging (transfer_mode::pack)
    std::size_t cache_hits = 0, cache_misses = 0, bytes_saved = 0;
    std::size_t kept_hits = 0, kept_bytes_saved = 0;
    std::size_t peer_hits = 0, bytes_from_peers = 0;  ///< tiles copied from another device's store
    std::vector<device_share> devices;
    std::vector<device_fault> faults;
    std::vector<std::string> warnings;
    /// potrf steps: the smallest global 1-based index of a non-positive pivot (0: none).
    std::int64_t info = 0;
};

/// The request's slots per device, by class.
std::vector<slot_class> slot_classes_of(const run_request& rq);

/// Runs every task of the graph on the devices (each listed once). Throws cancelled when the run's
/// cancel flag stopped it, device_error (or out_of_budget) when every device failed, a device's
/// error when one failed in a run that cannot recover (one device).
run_result run_tasks(const run_request& request, std::span<device* const> devices);

/// A run's figures into a routine's report (blas3_report, getrf_report, gemm_report: the fields
/// each has), its warnings after those already there.
template <class Report>
void report_run(Report& rep, run_result&& r) {
    rep.seconds = r.seconds;
    rep.bytes_h2d = r.bytes_h2d;
    rep.bytes_d2h = r.bytes_d2h;
    rep.peak_device_bytes = r.peak_device_bytes;
    rep.cache_hits = r.cache_hits;
    rep.cache_misses = r.cache_misses;
    rep.bytes_saved = r.bytes_saved;
    if constexpr (requires { rep.kept_hits; }) {
        rep.kept_hits = r.kept_hits;
        rep.kept_bytes_saved = r.kept_bytes_saved;
    }
    if constexpr (requires { rep.bytes_packed; }) rep.bytes_packed = r.bytes_packed;
    if constexpr (requires { rep.peer_hits; }) {
        rep.peer_hits = r.peer_hits;
        rep.bytes_from_peers = r.bytes_from_peers;
    }
    rep.devices = std::move(r.devices);
    rep.faults = std::move(r.faults);
    for (auto& w : r.warnings) rep.warnings.push_back(std::move(w));
}

}  // namespace tilestream::detail::engine
