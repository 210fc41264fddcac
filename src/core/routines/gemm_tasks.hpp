// GEMM as tile tasks on the Level 3 engine: the case without dependencies (one task per tile of C,
// its k-steps in order, the first applying beta), in the order of C's tiles that a strategy of the
// GEMM pipeline follows (row by row: A's row panel reused; column by column: B's column panel), in
// slots sized per operand (slot_class), or in place. The public gemm runs here by default, on one
// device or several (plan_gemm adopts such plans: adopt_tasks; execute_gemm runs them:
// run_gemm_plan); `--engine pipeline` keeps GEMM's pipeline (core/gemm_engine.cpp). The tests and
// engines_bench pin both engines against each other (docs/architecture.md, "GEMM on the task engine").
#pragma once

#include "core/engine/executor.hpp"
#include "core/engine/schedule_model.hpp"
#include "core/engine/task_graph.hpp"
#include "core/gemm_memory.hpp"

#include <tilestream/gemm.hpp>

#include <span>

namespace tilestream::detail::routines {

struct gemm_tiling {
    index_t tile_m = 0, tile_n = 0, tile_k = 0;
    /// Reproducible plans: every step covers one k-block (tile_k is then a multiple of it).
    index_t k_block = 0;
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    /// C's tiles row by row (the tiles of A's row panel stay while B's stream: the pipeline's
    /// a_panel and c_block orders) or column by column (B's column panel stays: b_panel).
    bool by_columns = false;
    /// Tiles not contiguous in host memory: 2-D copies, or host staging and whole copies (pack).
    transfer_mode transfer = transfer_mode::copy_2d;
    /// The pipeline's row_panels: with D devices, device d runs the tiles of C's tile rows d, d+D,
    /// ... (a static split: no balance, each device's bytes known in advance); a lost device's
    /// rows go to the others. Off: every task from the shared queue.
    bool row_panels = false;
    /// C's tiles as wide as C (tile_m x n, held for all of a task: the pipeline's a_panel_c_panel
    /// and row_panels): each k-step streams B's column tiles (tile_k x tile_n) into the parts of
    /// the C panel they reach, A's tile loaded once per k-step. by_columns does not apply.
    bool c_panel = false;
    /// C's tiles in the reverse of that order (a context's calls on kept operands alternate, so
    /// each starts with the tiles the previous one read last, still on the device).
    bool reversed = false;
    /// The tile cache asked for (cache_mode::on): the budget left after the panel is filled with
    /// slots of the streamed operand, then of the reused one, up to all of their tiles.
    bool fill_budget = false;
};

/// The task engine's tiling of a GEMM pipeline plan: its tiles, order and transfers (in_core:
/// each operand one tile; b_panel by columns; a_panel_c_panel with C panels; row_panels with C
/// panels pinned to the devices; zero_copy as planned, the engine then computes in place).
gemm_tiling tiling_of(const gemm_plan& plan);

/// A GEMM task graph with the slots a device runs it in and what the cost model predicts.
struct gemm_task_plan {
    engine::task_graph graph;
    std::vector<engine::slot_class> slots;  ///< per device (empty: in place)
    /// The same slots by operand (bytes of each, count); count 0 where the run reads no tile of it.
    engine::slot_class a_slots, b_slots, c_slots;
    engine::model_result model;
};

/// Tasks and slots for devices with `budget` bytes each (in_place: computed where the operands
/// lie): a slot of each operand's tile, then as the budget holds a second of C's, of the reused
/// operand's (A's by rows, B's by columns) and of the other's, then as many of the reused operand's
/// as its panel has tiles (plus one), then of the other's (t.fill_budget: then up to all of the
/// other's tiles, then of the reused one's). Throws out_of_budget when not even one tile of each fits.
gemm_task_plan plan_gemm_tasks(const gemm_problem& p, const gemm_tiling& t, std::size_t budget, bool in_place,
                               const device_rates& rates, int devices);

/// The tasks of C <- alpha op(A) op(B) + beta C: operands A = 0, B = 1, C = 2 as stored; for
/// `devices` devices (row_panels pins tasks to them).
engine::task_graph build_gemm(const gemm_problem& p, const gemm_tiling& t, int devices = 1);

/// The task engine's own choice: each out-of-core strategy the pipeline plans for this budget
/// (row panels too on several devices; in core where everything fits) as tasks on its tiles, in
/// both orders of C's tiles, ranked by the task engine's cost model (engine::better_plan: faster
/// by more than 1%, then fewer bytes, then fewer steps). `chosen`: its tiling and the strategy
/// whose tiles it took. Throws out_of_budget when no strategy fits.
gemm_task_plan choose_gemm_tasks(const gemm_problem& p, std::size_t budget, bool in_place, const device_rates& rates,
                                 int devices, const plan_options& base, gemm_tiling* chosen,
                                 gemm_strategy* from_strategy = nullptr);

/// Whether plan_gemm's pick runs on the task engine: opt.engine tasks, not the direct path or a
/// batch (zero_copy runs in place: run_request::in_place).
bool runs_on_tasks(const gemm_plan& plan, const plan_options& opt);

/// Makes a pipeline plan the task engine's (plan.engine = tasks): the same tiles in the order its
/// strategy follows (tiling_of) and its transfers (2-D copies or pack), the slots plan_gemm_tasks
/// fills its budget with, and the task model's bytes (copied and packed), peak memory, time and
/// bound. `cache`: the tile cache asked for (cache_mode::on): the rest of the budget as slots
/// (t.fill_budget; plan.cache, the slots beyond the plan's without it its cache slots); otherwise
/// the automatic cache is what the store's spare slots do, and plan.cache is off.
/// `search` (neither strategy nor tiles given; a plan that copies and is not in core): the task
/// model also ranks coarser tilings than the pipeline's (m and n up to 8 times larger, k in the
/// usual blocks; in reproducible plans, which step through k by k-blocks, m and n only) in the
/// same budget and takes the best (engine::better_plan).
/// A and B keep two slots each where they have two tiles (the model does not see a copy waiting for
/// its slot; with one slot of B, f32 4096 at 48 MiB ran at 0.724 s against 0.690 with two), and so
/// does C on a device with memory of its own; on the host's cores, where copies add to the time in
/// the model, C may have one (f32 4096 at 48 MiB: half of C in one slot, 192 MiB copied in
/// instead of 320, 0.690 s against 0.715 s).
/// `devices`: the devices sharing the run's queue (row panels dealt round-robin), modelled as
/// identical (engine::model_settings::devices).
void adopt_tasks(gemm_plan& plan, int devices = 1, bool cache = false, bool search = false);

/// Runs a plan adopted by the task engine on the devices (the context's memory and kept
/// operands as the Level 3 routines use them; progress: a unit is a task, one C tile).
template <class T>
engine::run_result run_gemm_plan(const gemm_plan& plan, std::span<device* const> devices, T alpha,
                                 host_matrix_view<const T> a, host_matrix_view<const T> b, T beta, host_matrix_view<T> c,
                                 const gemm_run_options& run, gemm_memory* memory, const call_keeps& keeps);

/// Builds and runs GEMM on the task engine (slots: what the devices' smallest budget holds, or in
/// place when they compute on host memory). `model`: the plan's prediction, when asked.
template <class T>
engine::run_result gemm_on_tasks(std::span<device* const> devices, op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                                 host_matrix_view<const T> b, T beta, host_matrix_view<T> c, const gemm_tiling& t,
                                 const blas3_run_options& run = {}, engine::model_result* model = nullptr);

}  // namespace tilestream::detail::routines
