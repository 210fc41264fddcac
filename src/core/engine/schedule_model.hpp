// The cost model of a task graph: a list-scheduling replay of the executor on identical devices
// (ready tasks by priority to the first free device, each device's tile cache an LRU over its
// slots, copies on their own streams or, on devices computing with the host's cores, added to the
// compute) that predicts the bytes copied each way and the time.
#pragma once

#include "core/engine/task_graph.hpp"

#include <tilestream/plan.hpp>

#include <cstddef>

namespace tilestream::detail::engine {

struct model_settings {
    device_rates rates;
    int devices = 1;
    bool in_place = false;  ///< devices compute on the host operands: nothing is copied
    int slots = 0;          ///< tile slots per device (copying runs), each holding any tile
    std::vector<slot_class> slot_classes;  ///< slots of several sizes instead (non-empty: slots unused)
    /// Pack transfers (transfer_mode::pack): tiles not contiguous in host memory are gathered into
    /// host staging before their copy in and scattered after their copy out (both on the copy
    /// streams, at the copy's rate), counted in bytes_packed. Needs each operand's host storage.
    transfer_mode transfer = transfer_mode::copy_2d;
    struct host_storage {
        layout lay = layout::row_major;
        index_t ld = 0;
    };
    std::vector<host_storage> hosts;  ///< per operand, as the run's host operands lie
};

struct model_result {
    std::size_t bytes_h2d = 0, bytes_d2h = 0;
    std::size_t bytes_packed = 0;  ///< of those, through host staging (pack transfers)
    std::size_t loads = 0, cache_hits = 0;
    double seconds = 0;                  ///< the last task's end
    double compute_seconds = 0;          ///< the busiest device's kernels (packing included)
    double h2d_seconds = 0, d2h_seconds = 0;  ///< the busiest device's copy streams
    double critical_path_seconds = 0;    ///< the longest dependency chain's kernels alone
    std::string bound;                   ///< "compute", "copy h2d", "copy d2h", "dependencies"
};

/// The planners' one ranking of candidate plans: `a` (whose graph has `a_steps` tile operations)
/// beats `b` when it is modelled faster by more than 1%; within 1%, fewer bytes win, then fewer
/// steps (larger calls).
bool better_plan(const model_result& a, std::size_t a_steps, const model_result& b, std::size_t b_steps);

/// Seconds one step of a task takes on a device with these rates (kernel, fixed cost, and on a
/// device computing with the host's cores the packing of its operands).
double step_seconds(const task_graph& g, const task_step& s, const device_rates& r);

/// Whether the executor runs one of the graph's steps in diagonal blocks (a trsm, trmm, symm or hemm
/// step wider than r.diagonal_block: blocked_diagonal), the GEMMs between them on the GEMM tiles' kernel.
bool splits_diagonal_tiles(const task_graph& g, const device_rates& r);

model_result model_run(const task_graph& g, const model_settings& m);

}  // namespace tilestream::detail::engine
