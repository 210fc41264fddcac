// The rest of Level 3 BLAS on devices: SYMM, SYRK, SYR2K, TRMM and TRSM (HEMM, HERK and HER2K
// with the complex types) with the reference BLAS's semantics, planned as tile tasks with
// dependencies and run on one or many devices, out of core beyond their memory.
//
//     tilestream::context ctx("cpu:2", {.memory_budget = 256ull << 20});
//     ctx.trsm<double>(side::left, uplo::lower, op::n, diag::non_unit, 1.0, a.view(), b.view());
//
// Stages as for GEMM: describe_blas3 (validate) -> plan_blas3 (tiles, tasks, cost model) ->
// explain -> execute_blas3. A context does all of it for its devices.
#pragma once

#include <tilestream/anchor.hpp>
#include <tilestream/device.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/tile_ops.hpp>

#include <atomic>
#include <cstdint>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tilestream {

namespace detail::engine {
struct task_graph;
}

enum class blas3_routine { symm, hemm, syrk, herk, syr2k, her2k, trmm, trsm,
                           potrf };  ///< potrf: Cholesky of C in place (LAPACK semantics, info in the report)
std::string_view to_string(blas3_routine r) noexcept;
/// "trsm", "dtrsm", ... (a precision letter is accepted and ignored); invalid_argument otherwise.
blas3_routine parse_blas3_routine(std::string_view s);

/// BLAS's options of a call; each routine reads those it has: side (symm, hemm, trmm, trsm),
/// uplo (all), trans (syrk, syr2k: op(A) n or t; herk, her2k: n or c; trmm, trsm: n, t or c; c
/// is t on real data), diag (trmm, trsm).
struct blas3_flags {
    tilestream::side side = tilestream::side::left;
    tilestream::uplo uplo = tilestream::uplo::lower;
    op trans = op::n;
    tilestream::diag diag = tilestream::diag::non_unit;
};

/// A call's operands. symm: C <- alpha A B + beta C (left) or alpha B A + beta C. syrk:
/// C <- alpha op(A) op(A)^T + beta C (b unused). syr2k: C <- alpha (op(A) op(B)^T + op(B) op(A)^T)
/// + beta C. trmm: B <- alpha op(A) B (left) or alpha B op(A); trsm: solves op(A) X = alpha B (or
/// X op(A) = alpha B), B <- X: for these two `c` is B, overwritten in place (b and beta unused).
template <class T>
struct blas3_operands {
    T alpha = T(1), beta = T(0);
    host_matrix_view<const T> a, b;
    host_matrix_view<T> c;
};

/// One Level 3 call as the planner sees it (no data).
struct blas3_problem {
    blas3_routine routine = blas3_routine::trsm;
    dtype type = dtype::f32;
    blas3_flags flags;
    /// symm, trmm, trsm: C (B) is m x n, A is m x m (left) or n x n (right). syrk family: C is
    /// n x n and op(A) is n x k (m = n).
    index_t m = 0, n = 0, k = 0;
    layout layout_a = layout::row_major, layout_b = layout::row_major, layout_c = layout::row_major;
    index_t lda = 0, ldb = 0, ldc = 0;
    bool reads_ab = true;       ///< alpha != 0 (and k > 0 for the syrk family)
    bool reads_c = false;       ///< syrk family, symm: beta != 0; trmm, trsm: alpha != 0
    bool quick_return = false;  ///< BLAS returns at once: nothing is read or written
    double flops() const;  ///< real flops: a complex multiply-add counts 8
    double multiply_adds2() const;  ///< twice the multiply-adds
    /// "trsm side=left uplo=lower trans=n diag=non-unit: B 300x200, A 300x300, f64".
    std::string describe() const;
};

/// Validates a call (shapes: dimension_mismatch naming the operands; flags the routine does not
/// allow: invalid_argument) and describes it.
template <class T>
blas3_problem describe_blas3(blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& ops);

/// The order of a TRSM's tasks: left-looking computes each tile of X at once from the tiles
/// solved before it (each tile written once: the fewest bytes when out of core); right-looking
/// solves a block row and updates everything below it (more tasks in parallel, each B tile
/// written once per update). `automatic`: the cost model's choice.
enum class blas3_order { automatic, left_looking, right_looking };
std::string_view to_string(blas3_order o) noexcept;
blas3_order parse_blas3_order(std::string_view s);

struct blas3_options {
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    /// Tile sizes: along the triangular or symmetric dimension (and both of C in the syrk family),
    /// along the other dimension of B or C, along k (syrk family). 0: the planner's choice.
    index_t tile = 0, tile_free = 0, tile_k = 0;
    blas3_order order = blas3_order::automatic;
    int devices = 1;
    /// Devices the model spreads tasks over (0: all `devices`): the context leaves out those a
    /// device negligible_device_ratio faster keeps idle (the executor's balance), as GEMM's plans do.
    int working_devices = 0;
    /// Every device computes on host operands in place (CPU devices without a budget): no copies.
    bool in_place = false;
    /// Copying plans write the SYRK family's and Cholesky's diagonal tiles back whole, their other
    /// triangle loaded first and left as it is, instead of by their triangle (which on a device
    /// that cannot address host memory goes through host staging and a merge on the host). The
    /// context sets it when one of its devices cannot address host memory (GPUs, OpenCL).
    bool whole_diagonal_tiles = false;
    /// Results bitwise identical across budgets and device counts (fixed tiles along summed
    /// dimensions: the k-block; diagonal blocks on the reference kernel; GEMM tiles on the tiled one).
    bool reproducible = false;
    /// Per device (in the devices' order) the kernel of its GEMM tiles, where the GEMM tiles do not
    /// take `kernel` (empty: `kernel` everywhere); the other tile operations keep `kernel`. The
    /// context sets it when no kernel is asked for and a device's fastest measured GEMM kernel is
    /// not the vendor one (choose_kernel), e.g. OpenBLAS running kernels older than the CPU's.
    std::vector<gemm_kernel> gemm_kernels;
};

/// One order's predicted traffic and time (explain compares them).
struct blas3_alternative {
    blas3_order order = blas3_order::left_looking;
    index_t tile = 0;
    std::size_t bytes_h2d = 0, bytes_d2h = 0;
    double predicted_seconds = 0;
};

struct blas3_plan {
    blas3_problem problem;
    gemm_kernel kernel = gemm_kernel::vendor;
    std::vector<gemm_kernel> gemm_kernels;  ///< blas3_options::gemm_kernels
    /// Some of its trsm, trmm, symm or hemm tiles run in diagonal blocks, GEMMs between them on the
    /// GEMM tiles' kernel (device_rates::diagonal_block).
    bool blocked_diagonal = false;
    math_mode math = math_mode::strict;
    blas3_order order = blas3_order::left_looking;
    index_t tile = 0, tile_free = 0, tile_k = 0;
    bool in_place = false;
    bool reproducible = false;
    int devices = 1;
    std::size_t tasks = 0, steps = 0, dependencies = 0;
    /// Tile operations by kind ("gemm 24, trsm 16").
    std::vector<std::pair<tile_kind, std::size_t>> kernel_counts;
    int slots = 0;                 ///< device buffers per device (copying plans)
    std::size_t slot_bytes = 0;
    std::size_t bytes_h2d = 0, bytes_d2h = 0;
    std::size_t peak_device_bytes = 0, budget = 0;
    double predicted_seconds = 0, predicted_compute_seconds = 0;
    double predicted_h2d_seconds = 0, predicted_d2h_seconds = 0, predicted_critical_path_seconds = 0;
    std::string bound;  ///< "compute", "copy h2d", "copy d2h", "dependencies"
    device_rates rates;
    /// Per device (in the context's order) its measured GEMM rate (FLOP/s) when a context measured
    /// its devices one by one (empty: not measured): the balance's first estimate of each device.
    std::vector<double> device_flops;
    std::vector<blas3_alternative> alternatives;
    /// Candidate tilings (tile size and order) the planner built and modelled, and how many it
    /// could have: out of core it descends from the largest tile and stops early.
    int tilings_modelled = 0, tilings_possible = 0;
    std::shared_ptr<const detail::engine::task_graph> graph;  ///< the tasks (library-private)
};

/// Plans the call for `options.devices` devices with `budget` bytes each. Throws out_of_budget
/// naming the smallest budget that fits when nothing does.
blas3_plan plan_blas3(const blas3_problem& problem, std::size_t budget, const device_rates& rates,
                      const blas3_options& options = {});
/// The plan in a few lines: tiles, tasks, order (and the other's traffic), memory, bytes, time.
std::string explain(const blas3_plan& plan);

struct blas3_run_options {
    trace_sink* trace = nullptr;  ///< a span per copy and kernel
    /// Called as tasks finish, from device threads (in place on one CPU device: the calling
    /// thread, which runs the steps itself): (tasks done, tasks in all).
    std::function<void(std::size_t, std::size_t)> on_task_done;
    bool register_host = true;    ///< pin host operands (before the clock) for devices that benefit
    int max_tasks_in_flight = 2;  ///< per device (1 in place)
    /// Several devices: whether a device copies a tile another device holds from there instead of
    /// from the host (automatic: between devices that do not address host memory, as GEMM's).
    peer_tile_mode peer_tiles = peer_tile_mode::automatic;
    /// When it becomes true no task starts any more, the queued ones are skipped, and the run
    /// throws tilestream::cancelled (B or C are then partly updated).
    const std::atomic<bool>* cancel = nullptr;
};

/// What a run did, beside what its plan predicted.
struct blas3_report {
    blas3_plan plan;
    double seconds = 0;
    std::size_t bytes_h2d = 0, bytes_d2h = 0, peak_device_bytes = 0;
    std::size_t cache_hits = 0, cache_misses = 0, bytes_saved = 0;
    /// Tile loads avoided because an earlier call of the same context left the tile on the device
    /// and the operand is kept unchanged (context::keep).
    std::size_t kept_hits = 0, kept_bytes_saved = 0;
    std::size_t peer_hits = 0, bytes_from_peers = 0;  ///< tiles copied from another device's store
    std::vector<device_share> devices;  ///< `units` counts tasks
    std::vector<std::string> warnings;
    /// Devices lost during the run; their unfinished tasks were rerun elsewhere from the tiles'
    /// committed versions.
    std::vector<device_fault> faults;
    /// Factorizations (potrf): LAPACK's info, the 1-based index of the first non-positive pivot
    /// (0: the factor is complete).
    std::int64_t info = 0;
};

/// Runs a plan on devices (the plan's device count). Faults: with two or more devices a device
/// that fails is dropped and its unfinished tasks rerun on the others (their output tiles restored
/// first); the run fails only when every device is lost.
template <class T>
blas3_report execute_blas3(const blas3_plan& plan, std::span<device* const> devices, const blas3_operands<T>& ops,
                           const blas3_run_options& run = {});

/// Plans for one device (with its budget; in place when it can) and runs.
template <class T>
blas3_report blas3(device& dev, blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& ops,
                   const blas3_options& options = {});

/// The sequential reference on host data (accumulating in double): the tests' oracle.
template <class T>
void reference_blas3(blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& ops);

/// A Level 3 result checked in float64 (what the CLI's --check runs).
struct blas3_check_result {
    std::string method;            ///< TRSM: the residual; the others: float64 OpenBLAS on upcast operands
    double error = 0, tolerance = 0;
    std::size_t changed_outside = 0;  ///< SYRK family: elements of the other triangle that changed
    std::size_t nonfinite = 0;        ///< elements not finite where the reference is
    bool passed = false;
    double seconds = 0;
    std::string summary() const;
};

/// Checks `result` against the call on `inputs` (inputs.c holds C's, or B's, values before the
/// run). TRSM: || op(A) X - alpha B ||_F / (||A||_F ||X||_F) within max(16, 2 order) u; the
/// others: relative Frobenius error against float64 OpenBLAS within max(16, 8 sqrt(depth)) u, and
/// the SYRK family's other triangle bitwise unchanged.
template <class T>
blas3_check_result check_blas3(blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& inputs,
                               host_matrix_view<const T> result);

/// Times the same OpenBLAS routine (all hardware threads) on column-major copies of the operands,
/// C or B refreshed before each run: the anchor of `--anchor`.
template <class T>
blas_anchor time_host_blas3(blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& inputs, int repeat);

}  // namespace tilestream
