// Planning a GEMM whose operands live in host memory: chunking strategies, tile sizes, and the
// cost model (bytes copied and packed, peak device memory, predicted time with overlap).
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>
#include <tilestream/types.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace tilestream {

/// How C = op(A) op(B) is chunked and streamed through a device.
enum class gemm_strategy {
    automatic,        ///< the planner's choice (minimum predicted time that fits the budget)
    in_core,          ///< every operand resident at once, no overlap
    tiles_3d,         ///< one tile size T for m, n, k; A and B tiles copied for every product
    a_panel,          ///< a row panel of A (all of k) resident; B column panels streamed; C tiles back
    a_panel_c_panel,  ///< as a_panel, with the whole C row panel resident and copied back once
    b_panel,          ///< a column panel of B resident; A row panels streamed; C tiles back
    c_block,          ///< a resident C block, k-slabs of A and B streamed through three buffers
    row_panels,       ///< several devices: device d takes C row panels d, d+D, ... (static), streaming
                      ///< B column panels through its own buffers (the classic multi-device split)
    zero_copy,        ///< devices that address host memory compute on the operands where they lie:
                      ///< no device buffers, no copies; units are C blocks (all of k)
    direct,           ///< the host's kernel on the calling thread, on the operands where they lie: no
                      ///< devices, queue, copies or threads handed the work (a context's small calls)
};
std::string_view to_string(gemm_strategy s) noexcept;
gemm_strategy parse_gemm_strategy(std::string_view s);

/// How host tiles reach the device.
enum class transfer_mode {
    copy_2d,  ///< 2-D strided copies straight from the host operands (no packing)
    pack,     ///< non-contiguous tiles gathered into host staging buffers, then 1-D copies
};
std::string_view to_string(transfer_mode t) noexcept;

/// The shape of one GEMM as the planner sees it (no data).
struct gemm_problem {
    dtype type = dtype::f32;
    op op_a = op::n, op_b = op::n;
    index_t m = 0, n = 0, k = 0;
    layout layout_a = layout::row_major, layout_b = layout::row_major, layout_c = layout::row_major;
    index_t lda = 0, ldb = 0, ldc = 0;  ///< host leading dimensions (0 = packed)
    bool reads_ab = true;               ///< false when alpha == 0 or k == 0
    bool reads_c = false;               ///< true when beta != 0
    /// Real floating-point operations: 2mnk, 8mnk for complex types.
    double flops() const {
        return double(dtype_traits(type).flops_per_multiply_add) * double(m) * double(n) * double(k);
    }
    /// The host operands as the engine reads them (leading dimension 0 resolved to packed).
    operand_desc a_desc() const { return host_desc(operand_op(type, op_a), layout_a, lda, m, k); }
    operand_desc b_desc() const { return host_desc(operand_op(type, op_b), layout_b, ldb, k, n); }
    operand_desc c_desc() const { return host_desc(op::n, layout_c, ldc, m, n); }

private:
    static operand_desc host_desc(op o, layout l, index_t ld, index_t rows, index_t cols) {
        operand_desc d{o, l, ld, rows, cols};
        if (d.ld <= 0)
            d.ld = std::max<index_t>(1, l == layout::row_major ? d.stored_cols() : d.stored_rows());
        return d;
    }
};

/// The measured rate of one kind of tile operation on a device: a call of f flops takes about
/// call_seconds + f / flops.
struct tile_rate {
    double flops = 0;  ///< 0: not measured
    double call_seconds = 0;
};

/// Throughputs the cost model uses (bytes/s, FLOP/s) and a fixed cost per operation (s).
struct device_rates {
    double h2d = 10e9, d2h = 10e9;
    double flops = 100e9;
    double op_overhead = 10e-6;
    bool measured = false;
    /// The device computes with the host's cores (a CPU device, or a CPU OpenCL runtime): its
    /// copies are memcpy on the cores its kernels use, so they add to the compute time instead of
    /// hiding behind it, and each kernel call's packing of its A rows and B columns is such a copy
    /// too (fewer, larger calls pack less). Set by measure_rates (computes_on_host_cores).
    bool host_memory = false;
    /// The rate of Cholesky's diagonal tiles and LU's panels where a device without a potrf or
    /// getrf of its own (a GPU, an OpenCL device) stages them through host memory to the host's
    /// LAPACK (FLOP/s); 0: the devices run them at `flops`. Set by the context from the host's
    /// measured GEMM rate.
    double staged_flops = 0;
    /// Bytes of tile per second at which the host merges a triangle written back through host
    /// staging (the SYRK family's diagonal tiles that are not read, on a device that cannot
    /// address host memory, when several devices share a call); 0: no such merge is priced. Set
    /// by the context from a probe (engine::measure_triangle_merge_rate).
    double host_merge = 0;
    /// FLOP/s of the tile operations other than GEMM (the diagonal blocks: trsm, syrk, potrf, LU's
    /// panels, ...) where they run on another kernel than the GEMM tiles; 0: `flops`. Set by the
    /// context when the GEMM tiles take a kernel measured faster than the vendor routines that
    /// the diagonal blocks keep (blas3_options::gemm_kernels): the vendor kernel's measured rate.
    double diagonal_flops = 0;
    /// Where the GEMM tiles run on another kernel than the vendor routines (the measured choice,
    /// or tiled asked for): the trsm, trmm, symm and hemm tiles wider than this run in diagonal
    /// blocks of this order on the vendor kernel, and the rest of each tile as GEMMs on the GEMM
    /// tiles' kernel (with diagonal_flops set, a share block / order of their flops is priced at
    /// it); 0: whole tiles. Set by the context on devices computing with the host's cores.
    index_t diagonal_block = 0;
    /// Per tile kind (indexed by its value): the measured rate of the kind's calls on a device that
    /// is not the host's (a GPU: cuSOLVER potrf in f64 at 1.1 TFLOP/s + 0.16-0.21 ms a call on an
    /// H200, beside its GEMM's 57 TFLOP/s); flops 0: not measured, the kind runs at diagonal_flops,
    /// else flops. Set by the context from short probes of the kinds a routine's tiles hold
    /// (engine::measured_tile_rate); unsplit steps of a measured kind are priced by it.
    std::array<tile_rate, tile_kind_count> tile_rates{};
};
/// Measures copy bandwidths and the kernel's FLOP rate on dev with short probes (cached per
/// device id, dtype and kernel within the process).
device_rates measure_rates(device& dev, dtype t, gemm_kernel kernel, math_mode math = math_mode::strict);
/// Parses "h2d=12GB/s,d2h=12GB/s,gflops=150,overhead=10us" over defaults.
device_rates parse_rates(std::string_view text, device_rates base = {});

/// Which engine runs a GEMM plan that copies its operands to a device.
enum class gemm_engine {
    /// The tile-task engine of the Level 3 routines, Cholesky and LU: one task per tile of C (its
    /// k-steps in order), in an LRU tile store of per-operand slot classes filled to the budget.
    tasks,
    /// GEMM's own pipeline of work units: its A, B and C buffers, the tile cache, peer copies,
    /// packed transfers and the static and shared splits over several devices.
    pipeline,
};
std::string_view to_string(gemm_engine e) noexcept;
gemm_engine parse_gemm_engine(std::string_view s);

/// Whether spare device memory caches A and B tiles across work units.
enum class cache_mode { automatic, on, off };
std::string_view to_string(cache_mode c) noexcept;
cache_mode parse_cache_mode(std::string_view s);

struct plan_options {
    gemm_strategy strategy = gemm_strategy::automatic;
    index_t tile_m = 0, tile_n = 0, tile_k = 0;  ///< 0 = the planner's choice
    transfer_mode transfer = transfer_mode::copy_2d;
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    /// Keep A and B tiles in spare device memory (LRU) and reuse them in later units; the
    /// planner then orders units to raise reuse. `automatic`: only when the cost model predicts
    /// the saved copies make the run faster. Off: every strategy copies what it says.
    cache_mode cache = cache_mode::off;
    /// Devices that will share the work (the rates are per device); 1 for a single device.
    int devices = 1;
    /// Every device can compute on host operands in place (host-addressable, no user budget):
    /// `automatic` then considers zero-copy, which copies nothing; `zero_copy` requires it.
    bool in_place = false;
    /// Fix the accumulation order over k: every kernel call covers one k-block (see
    /// reproducible_k_block) and k-tiles are whole multiples of it, so devices running the same
    /// kernel give bitwise identical results whatever the strategy, tiles, budget and device
    /// count. A --tile-k that is not a multiple is rounded up to one (explain says so). The vendor
    /// kernel is replaced by the tiled one (vendor BLAS pick their blocking by the call's shape).
    /// Off by default: the tiled kernel runs at 0.81-0.98x OpenBLAS on the AVX-512 machines
    /// measured (0.95-1.05x on an AVX2 one), more than the 3% a default may cost (goals_bench
    /// measures it).
    bool reproducible = false;
    /// The longest a kernel step should take (seconds, at the rates given); 0: no bound. In place,
    /// a unit whose one call would take longer is cut into steps along k (whole k-blocks, which
    /// costs no extra pass over C in a BLAS that adds k in blocks of the same size), then into
    /// smaller C blocks, so that cancellation and progress come at that granularity.
    double max_step_seconds = 0;
    /// direct: the OpenBLAS threads the calling thread's vendor call may use (the context's cores).
    int direct_threads = 1;
    /// tasks (default): a plan runs on the task engine, on one device or several (copying its
    /// operands or in place; not the direct path or a batch), its slots and predictions then the
    /// task model's; the others, and every plan with `pipeline`, run on GEMM's pipeline.
    gemm_engine engine = gemm_engine::tasks;
};

/// The k-block of reproducible plans: the tiled CPU kernel's KC and OpenBLAS's GEMM_Q on
/// Haswell/Zen (384 f32, 256 f64; 192 c32 and 128 c64, half of them, the 1m kernel's KC in complex
/// elements; dtype_traits), so a call covers exactly one pass of the kernel.
constexpr index_t reproducible_k_block(dtype t) noexcept { return dtype_traits(t).reproducible_k_block; }

/// Kernel calls a plan may make; more (tiny tiles on a large problem) is refused with the tile
/// counts named, rather than run for hours.
inline constexpr std::size_t max_plan_kernel_calls = std::size_t(1) << 18;

/// One work unit: a block of C and the steps (k-slabs) that accumulate into it, in fixed order.
struct gemm_step {
    index_t a_tile_row = 0;  ///< tile coordinates in op(A): row block, k block
    index_t k_block = 0;
    index_t b_tile_col = 0;  ///< tile coordinates in op(B): column block
    index_t c_row = 0, c_col = 0;  ///< offset of the step's C sub-block inside the unit
    index_t rows = 0, cols = 0, depth = 0;
};
struct gemm_unit {
    index_t row0 = 0, col0 = 0, rows = 0, cols = 0;  ///< C block of this unit
    std::vector<gemm_step> steps;
};

/// A complete plan: tiles, slots, the predicted traffic and time.
struct gemm_plan {
    gemm_problem problem;
    gemm_strategy strategy = gemm_strategy::in_core;
    transfer_mode transfer = transfer_mode::copy_2d;
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    index_t tile_m = 0, tile_n = 0, tile_k = 0;
    index_t tiles_m = 0, tiles_n = 0, tiles_k = 0;
    /// Reproducible plans: each kernel call covers one k-block, in order (0: calls cover k-tiles).
    index_t k_block = 0;
    bool tile_k_rounded = false;  ///< a requested tile-k was rounded up to a multiple of k_block
    /// The engine that runs the plan (tasks: the slots and predictions below are the task model's).
    gemm_engine engine = gemm_engine::pipeline;
    /// Device buffers per operand ("slots") and the bytes of each.
    int a_slots = 0, b_slots = 0, c_slots = 0;
    std::size_t a_slot_bytes = 0, b_slot_bytes = 0, c_slot_bytes = 0;
    bool reuse_a = false, reuse_b = false;  ///< a resident panel is kept and reused across units
    bool cache = false;                     ///< spare slots hold tiles for reuse (LRU); bytes are then an upper bound
    int cache_slots_a = 0, cache_slots_b = 0;  ///< of a_slots/b_slots, the spare ones
    bool static_assignment = false;         ///< unit u runs on device u % devices (row-panels)
    int devices = 1;
    // Predictions.
    std::size_t bytes_h2d = 0, bytes_d2h = 0, bytes_packed = 0;
    std::size_t peak_device_bytes = 0;
    std::size_t budget = 0;
    double predicted_seconds = 0, predicted_copy_seconds = 0, predicted_compute_seconds = 0;
    double predicted_h2d_seconds = 0, predicted_d2h_seconds = 0;  ///< each copy stream's busy time
    std::string bound;  ///< "compute", "copy h2d", "copy d2h"
    device_rates rates;
    std::size_t units = 0, steps = 0;
    /// direct: OpenBLAS threads of the calling thread's vendor call.
    int direct_threads = 1;
    /// Per device (in the context's order) the kernel it runs when they differ (the automatic
    /// choice is made per device); empty: every device runs `kernel`.
    std::vector<gemm_kernel> device_kernels;
    /// Per device (in the context's order) its kernel's measured rate (FLOP/s) when the devices
    /// were measured one by one; empty or 0: unknown. Before a device has finished a unit, its time
    /// for one is estimated from this, so a device far slower than another (a CPU beside a GPU)
    /// takes no unit that would finish after the others have done all of them.
    std::vector<double> device_flops;
    /// Batched runs (context::gemm_batched): the products in the stack, and how many each kernel
    /// call (a unit) takes; 0 for a single product.
    index_t batch = 0, batch_group = 0;
    /// Why this plan was chosen over the other route (a context's direct path against its engine,
    /// the crossover from measured rates) and how its kernel was chosen; explain prints it.
    std::string choice;
    /// The task engine's search of tile sizes, when it ran (no tiles given): how many tilings its
    /// model ranked and what the pipeline's formulas had chosen; explain prints it.
    std::string tile_choice;
};

/// Plans the problem for a device with `budget` bytes. Throws out_of_budget naming the smallest
/// budget that would fit when nothing fits, invalid_argument for bad tiles or strategies.
gemm_plan plan_gemm(const gemm_problem& p, std::size_t budget, const device_rates& rates,
                    const plan_options& opt = {});

/// Work unit `index` (< plan.units) in execution order, computed from the index: units are not
/// stored, so a plan with millions of them costs no memory.
gemm_unit plan_unit(const gemm_plan& plan, std::size_t index);

/// The work units of a plan in their execution order (plan_unit for every index).
std::vector<gemm_unit> plan_units(const gemm_plan& plan);

/// A human-readable explanation of the plan (strategy, tiles, bytes, memory, time and its bound).
std::string explain(const gemm_plan& plan);

/// Shapes of products whose kernels are measured and chosen apart: `tiny` (no dimension above 16:
/// a vendor library's entry cost is most of the call), `line` (C a single row or column, a side above
/// 16: the vendor kernel runs ?gemv), `small` (no dimension above 128), `thin_k` (k the smallest and below 64: rank-k updates), `thin_m` (m the smallest of m and n
/// and below 64: a few rows, vector-matrix-like), `thin_n` (n below 64 and below m: a few columns,
/// matrix-vector-like), `square` (the rest). m-thin and n-thin are apart because a tiled kernel's
/// register tile (mr x nr) is not square: a thin side pads up to a whole mr or nr, not the same waste.
enum class shape_class { small, thin_k, thin_m, thin_n, square, tiny, line };
inline constexpr shape_class all_shape_classes[] = {shape_class::tiny,   shape_class::line,   shape_class::small,
                                                    shape_class::thin_k, shape_class::thin_m, shape_class::thin_n,
                                                    shape_class::square};
std::string_view to_string(shape_class c) noexcept;
shape_class classify_gemm(index_t m, index_t n, index_t k) noexcept;

/// One kernel's GEMM rate on a device for a precision and shape class.
struct kernel_rate {
    gemm_kernel kernel = gemm_kernel::vendor;
    double flops = 0;       ///< FLOP/s, 0 when it could not be measured
    bool measured = false;  ///< false: the probe did not fit the budget, or the kernel failed
    std::string note;       ///< why it was not measured
};

/// The default kernel of a device for a precision and shape class: the fastest measured.
struct kernel_choice {
    gemm_kernel kernel = gemm_kernel::vendor;  ///< the fastest measured; vendor when none was
    index_t m = 0, n = 0, k = 0;               ///< the probe's shape
    std::vector<kernel_rate> rates;            ///< every candidate (vendor, tiled), as measured
    bool measured = false;                     ///< at least one candidate was measured
};

/// Measures the kernels a device's default chooses between (vendor and tiled) with one short
/// probe each on `dev` for the shape class (square 512^3 on CPUs, 256^3 emulated, 2048^3 on
/// GPUs; thin-m and thin-n keep their thin side at 16, a representative one; thin-k k = 32; small 64^3; the
/// kernels alternating, each kernel's rate from the fastest of its 5 runs), and picks the fastest; a
/// kernel within 5% of vendor's rate does not displace it (the probes' noise on a busy machine).
/// A verdict that would displace vendor stands only when a second measurement agrees: the square
/// class's probe of twice the side (the verdict then applies to every size of the class, and vendor
/// libraries gain with size; its rates are kept), the same probe again for other classes. Kept for
/// the process per device, threads, precision, class and math mode; a verdict against vendor is
/// measured once more on the class's probe by the first call 10 s after it was made (a process that
/// started while the machine was busy recovers), and vendor replaces it if that disagrees.
kernel_choice choose_kernel(device& dev, dtype t, shape_class c, math_mode math = math_mode::strict);

/// The same choice for the host's kernels run on the calling thread (a context's direct path):
/// vendor with `openblas_threads` of OpenBLAS's threads, tiled on the calling thread alone.
kernel_choice choose_host_kernel(dtype t, shape_class c, int openblas_threads);

/// The fixed cost of one direct call on the calling thread (a 1x1x1 product: validation, the
/// kernel's entry), measured once per process (seconds).
double direct_call_seconds();

}  // namespace tilestream
