// One call, many devices: a context opens the devices of a spec once, measures their rates once and
// runs GEMMs and Jacobi solves on all of them with the automatic plan. Every front (the CLI, Python,
// the BLAS drop-in, each MPI rank) calls through a context.
//
//     tilestream::context ctx("cuda:0,cpu", {.memory_budget = 8ull << 30});
//     ctx.gemm(op::n, op::n, 1.0, a, b, 0.0, c);     // any shape, out-of-core when needed
//     ctx.gemm<std::complex<float>>(op::c, op::n, {1, -2}, za, zb, {0, 0}, zc);  // c32: C = (1-2i) A^H B
//
// Thread safety: every member may be called from several threads at once. Runs queue: one GEMM or
// Jacobi solve at a time owns the context's devices (each run already uses all of them), so
// concurrent callers get correct results in arrival order of the lock.
//
// Between calls the context keeps, per device, the buffers, pinned staging, streams and budget
// reservation of the last GEMM, for the next call whose plan uses buffers of the same sizes (a
// plan needing more than the reservation frees them first). Kept memory counts against the
// device's budget but is given back whenever another run or allocation on the device needs it.
// Tiles left in those buffers are reused by a later call only for operands the caller keeps:
//
//     auto ka = ctx.keep(a);           // promise: a's values do not change while ka lives
//     ctx.gemm(a, b1, c1);             // loads a's tiles
//     ctx.gemm(a, b2, c2);             // reuses those still on the devices (gemm_report::kept_hits)
//     write_into(a); ka.changed();     // a changed: its tiles are loaded again
#pragma once

#include <tilestream/batch.hpp>
#include <tilestream/blas3.hpp>
#include <tilestream/lu.hpp>
#include <tilestream/device.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/jacobi.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/plan.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream {

namespace detail {
struct gemm_memory;
struct keep_record;
struct keep_registry;
class context_routes;
struct device_balance;
namespace engine {
struct tile_variant;
}  // namespace engine
}  // namespace detail

/// A caller's promise, made with context::keep, that a host operand keeps its values and stays
/// allocated while the handle lives: tiles of it that a call left on the context's devices are then
/// used by later calls instead of being copied again (calls on a view inside the kept one too).
/// The operand is also pinned for the handle's lifetime (devices that copy faster from pinned
/// memory). changed() after writing into it; destroying or reset()ting the handle ends the promise
/// (and the reuse). Operands not kept are never reused across calls. Move-only; may outlive its
/// context (it then does nothing).
class kept_operand {
public:
    kept_operand() = default;
    kept_operand(kept_operand&&) noexcept = default;
    kept_operand& operator=(kept_operand&&) noexcept = default;
    kept_operand(const kept_operand&) = delete;
    kept_operand& operator=(const kept_operand&) = delete;
    ~kept_operand() = default;
    /// The operand's values changed: tiles of it read before are not used again. Not while a call
    /// that reads the operand runs.
    void changed();
    /// Ends the promise now.
    void reset() { record_.reset(); }
    explicit operator bool() const { return record_ != nullptr; }

private:
    friend class context;
    explicit kept_operand(std::shared_ptr<detail::keep_record> r) : record_(std::move(r)) {}
    std::shared_ptr<detail::keep_record> record_;
};

/// What a context is opened with; every call uses these unless it says otherwise.
struct context_options {
    std::optional<std::size_t> memory_budget;  ///< budget of each device without "@..." in the spec
    int cpu_threads = 0;                       ///< threads per CPU device; 0 = split the cores
    /// The kernel every device runs; absent: on each device the fastest measured for the call's
    /// precision and shape class (choose_kernel), and on the direct path the host's fastest.
    std::optional<gemm_kernel> kernel;
    math_mode math = math_mode::strict;
    cache_mode cache = cache_mode::automatic;
    bool reproducible = false;                 ///< fixed k-order (plan_options::reproducible)
    /// Declared rates for the planner; when absent they are measured once per dtype, on first need.
    /// Declared rates also stand for the host's kernels (the direct path): nothing is probed.
    std::optional<device_rates> rates;
    /// The longest one kernel step of the engine should take, in seconds at the measured rates:
    /// the granularity of cancellation and progress, for the calls that watch it (a cancel flag or
    /// an on_step_done callback in gemm_run_options, set when the call is planned). Calls that
    /// watch neither are not cut (steps cost 1.5-4% at f32 8192^3: a BLAS called per step re-reads
    /// C and re-packs). Calls predicted shorter than this, and no faster through the engine, go
    /// straight to the host's kernel on the calling thread (the direct path: no plan search,
    /// queue, thread hand-off or allocation); unwatched calls whenever the engine is no faster.
    /// 0: no bound.
    double step_seconds = 0.2;
};

/// What one call may change: the plan's shape and what the run reports as it goes.
struct gemm_call_options {
    gemm_strategy strategy = gemm_strategy::automatic;
    index_t tile_m = 0, tile_n = 0, tile_k = 0;  ///< 0 = the planner's choice
    transfer_mode transfer = transfer_mode::copy_2d;
    gemm_engine engine = gemm_engine::tasks;      ///< plan_options::engine
    std::optional<gemm_kernel> kernel;            ///< the context's when absent
    std::optional<cache_mode> cache;              ///< the context's when absent
    /// Rates for this plan (to explain a fixed strategy with measured figures, say); when absent
    /// the context's: declared, or measured when the automatic choice needs them.
    std::optional<device_rates> rates;
    /// Trace, per-unit callback, peer tiles... (register_host is the context's business: operands
    /// are pinned before the clock of each run).
    gemm_run_options run;
};

/// What one Level 3 call (symm, syrk, syr2k, trmm, trsm; blas3.hpp) may change.
struct blas3_call_options {
    blas3_order order = blas3_order::automatic;  ///< TRSM's task order
    index_t tile = 0, tile_free = 0, tile_k = 0;  ///< 0 = the planner's choice
    std::optional<gemm_kernel> kernel;            ///< the context's when absent
    std::optional<device_rates> rates;            ///< the context's (declared or measured) when absent
    blas3_run_options run;                        ///< trace, progress, cancel
};

/// What one LU call (getrf, gesv; lu.hpp) may change.
struct getrf_call_options {
    lu_order order = lu_order::automatic;
    index_t tile = 0;                             ///< block columns' width; 0 = the planner's choice
    std::optional<gemm_kernel> kernel;            ///< the context's when absent
    std::optional<device_rates> rates;            ///< the context's (declared or measured) when absent
    blas3_run_options run;                        ///< trace, progress, cancel
};

/// A solve with an LU factorization: its two triangular solves (TRSM on the engine).
struct getrs_report {
    blas3_report first, second;  ///< L then U (trans n), or U^T then L^T
    double seconds = 0;          ///< both solves and the row interchanges
};

/// gesv: the factorization, and the solve when info == 0 (LAPACK computes none otherwise).
struct gesv_report {
    getrf_report factor;
    getrs_report solve;
    index_t info = 0;
};

class context {
public:
    /// Opens the devices of `spec` (the CLI's grammar: "auto", the default: every GPU present, else
    /// the CPU; "all", "cpu:2", "cuda:0,cpu@4GiB", "opencl:0x2"...). Throws invalid_argument naming
    /// a bad item and the devices present.
    explicit context(std::string_view spec = "auto", const context_options& options = {});
    context(const context&) = delete;
    context& operator=(const context&) = delete;
    ~context();

    const std::vector<device*>& devices() const { return device_ptrs_; }
    /// The device ids, comma-separated ("cpu:0,cpu:1").
    const std::string& device_names() const { return names_; }
    const context_options& options() const { return options_; }
    /// The smallest budget a run may use on every device (what the planner plans for).
    std::size_t budget() const;
    /// Whether every device computes on host operands where they lie (no copies, zero-copy plan).
    bool computes_in_place() const { return in_place_; }

    /// The rates the planner uses for this dtype and kernel: declared, or measured on the first
    /// device the first time they are needed (measure_rates keeps them for the process). `measured` is false when the probe did not
    /// fit the budget (default rates are used then).
    device_rates rates(dtype type, std::optional<gemm_kernel> kernel = {});

    /// Plans C <- alpha op(A) op(B) + beta C for all the context's devices. Throws out_of_budget
    /// (naming the devices and the smallest budget that fits), invalid_argument, dimension_mismatch.
    gemm_plan plan(const gemm_problem& problem, const gemm_call_options& call = {});
    template <class T>
    gemm_plan plan(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                   host_matrix_view<T> c, const gemm_call_options& call = {}) {
        return plan(describe_gemm<T>(op_a, op_b, alpha, a, b, beta, c), call);
    }
    /// The plan in a few lines (strategy and why, tiles, predicted traffic and time).
    std::string explain(const gemm_plan& p) const;

    /// Runs a plan made by this context on its devices.
    template <class T>
    gemm_report execute(const gemm_plan& p, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                        T beta, host_matrix_view<T> c, const gemm_call_options& call = {});

    /// Plans and runs: any shape, on all devices, out-of-core when the operands do not fit. A
    /// call the context's measured rates predict faster on the host than through the engine (and
    /// shorter than step_seconds) runs on the calling thread with the host's kernel (the direct
    /// path: the report's plan says gemm_strategy::direct), with no plan search when the devices
    /// compute in place.
    template <class T>
    gemm_report gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                     host_matrix_view<T> c, const gemm_call_options& call = {});
    /// C <- A B.
    template <class T>
    gemm_report gemm(host_matrix_view<const T> a, host_matrix_view<const T> b, host_matrix_view<T> c,
                     const gemm_call_options& call = {}) {
        return gemm<T>(op::n, op::n, T(1), a, b, T(0), c, call);
    }

    /// Batched GEMM: C_i <- alpha op(A_i) op(B_i) + beta C_i for each matrix i of c, where a and b
    /// hold as many matrices or one (used for every product: numpy's broadcasting). Strided or
    /// pointer-array stacks (host_batch_view); C's matrices must not overlap. The stack is cut into
    /// groups that each device runs as one batched kernel call (CPU: the products of a group split
    /// over the workers, one thread each, when they are small; cuBLAS and CLBlast strided-batched),
    /// groups taken from a shared queue; devices that copy stage each group through their budget
    /// (out of core: a stack larger than the budget streams through it, the next group's copies
    /// overlapping the current one's products). A product too large for the budget on its own runs
    /// as its own gemm. A stack too small to be worth a hand-off runs on the calling thread. The
    /// report's plan describes one product; plan.batch and plan.batch_group say how it was cut.
    template <class T>
    gemm_report gemm_batched(op op_a, op op_b, T alpha, host_batch_view<const T> a, host_batch_view<const T> b, T beta,
                             host_batch_view<T> c, const gemm_call_options& call = {});
    /// The strided form (cublasGemmStridedBatched): `batch` products, A_i at a.data() + i * stride_a
    /// elements (0: the same A for all), likewise B and C.
    template <class T>
    gemm_report gemm_strided_batched(op op_a, op op_b, T alpha, host_matrix_view<const T> a, index_t stride_a,
                                     host_matrix_view<const T> b, index_t stride_b, T beta, host_matrix_view<T> c,
                                     index_t stride_c, index_t batch, const gemm_call_options& call = {}) {
        return gemm_batched<T>(op_a, op_b, alpha, host_batch_view<const T>::strided(a, stride_a, batch),
                               host_batch_view<const T>::strided(b, stride_b, batch), beta,
                               host_batch_view<T>::strided(c, stride_c, batch), call);
    }

    /// Whether a gemm of this precision and shape with default call options plus a cancel flag or
    /// a step callback (a call that watches its steps, as Python's do; one that watches neither
    /// also goes direct past the step bound where the engine is no faster) and `kernel`, else the
    /// context's, runs on the direct path, measuring the rates on first need. Contexts whose
    /// devices copy decide per plan: false there. A front may then run such a call on its own
    /// thread rather than hand it to a worker (Python does).
    bool runs_direct(dtype type, index_t m, index_t n, index_t k, std::optional<gemm_kernel> kernel = {});
    // ---- the rest of Level 3 BLAS (blas3.hpp), BLAS semantics, all devices, out of core ----
    /// Plans a Level 3 call for all the context's devices (in place on CPU devices without a budget).
    blas3_plan plan(const blas3_problem& problem, const blas3_call_options& call = {});
    std::string explain(const blas3_plan& p) const;
    /// Runs a plan made by this context.
    template <class T>
    blas3_report execute(const blas3_plan& p, const blas3_operands<T>& ops, const blas3_call_options& call = {});
    template <class T>
    blas3_report blas3(blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& ops,
                       const blas3_call_options& call = {}) {
        return execute<T>(plan(describe_blas3<T>(routine, flags, ops), call), ops, call);
    }
    /// Solves op(A) X = alpha B (left) or X op(A) = alpha B (right); B <- X.
    template <class T>
    blas3_report trsm(side s, uplo u, op trans, diag d, T alpha, host_matrix_view<const T> a, host_matrix_view<T> b,
                      const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::trsm, {s, u, trans, d}, {alpha, T(0), a, {}, b}, call);
    }
    /// B <- alpha op(A) B (left) or alpha B op(A) (right), A triangular.
    template <class T>
    blas3_report trmm(side s, uplo u, op trans, diag d, T alpha, host_matrix_view<const T> a, host_matrix_view<T> b,
                      const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::trmm, {s, u, trans, d}, {alpha, T(0), a, {}, b}, call);
    }
    /// C <- alpha A B + beta C (left) or alpha B A + beta C (right), A symmetric (`u` stored).
    template <class T>
    blas3_report symm(side s, uplo u, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                      host_matrix_view<T> c, const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::symm, {s, u, op::n, diag::non_unit}, {alpha, beta, a, b, c}, call);
    }
    /// C <- alpha op(A) op(A)^T + beta C on the `u` triangle of C.
    template <class T>
    blas3_report syrk(uplo u, op trans, T alpha, host_matrix_view<const T> a, T beta, host_matrix_view<T> c,
                      const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::syrk, {side::left, u, trans, diag::non_unit}, {alpha, beta, a, {}, c}, call);
    }
    /// C <- alpha op(A) op(B)^T + alpha op(B) op(A)^T + beta C on the `u` triangle of C.
    template <class T>
    blas3_report syr2k(uplo u, op trans, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                       host_matrix_view<T> c, const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::syr2k, {side::left, u, trans, diag::non_unit}, {alpha, beta, a, b, c}, call);
    }

    /// C <- alpha A B + beta C (left) or alpha B A + beta C (right), A Hermitian (complex T).
    template <class T>
    blas3_report hemm(side s, uplo u, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                      host_matrix_view<T> c, const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::hemm, {s, u, op::n, diag::non_unit}, {alpha, beta, a, b, c}, call);
    }
    /// C <- alpha op(A) op(A)^H + beta C on the `u` triangle of C (trans n or c; alpha, beta real).
    template <class T>
    blas3_report herk(uplo u, op trans, real_type_t<T> alpha, host_matrix_view<const T> a, real_type_t<T> beta,
                      host_matrix_view<T> c, const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::herk, {side::left, u, trans, diag::non_unit}, {T(alpha), T(beta), a, {}, c}, call);
    }
    /// C <- alpha op(A) op(B)^H + conj(alpha) op(B) op(A)^H + beta C on the `u` triangle (beta real).
    template <class T>
    blas3_report her2k(uplo u, op trans, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                       real_type_t<T> beta, host_matrix_view<T> c, const blas3_call_options& call = {}) {
        return blas3<T>(blas3_routine::her2k, {side::left, u, trans, diag::non_unit}, {alpha, T(beta), a, b, c}, call);
    }

    // ---- LU (lu.hpp), LAPACK semantics, all devices, out of core ----
    /// Plans getrf for all the context's devices (in place on CPU devices without a budget).
    getrf_plan plan(const getrf_problem& problem, const getrf_call_options& call = {});
    std::string explain(const getrf_plan& p) const;
    template <class T>
    getrf_report execute(const getrf_plan& p, host_matrix_view<T> a, std::span<index_t> ipiv,
                         const getrf_call_options& call = {});
    /// A = P L U in place, min(m, n) pivots into ipiv (1-based); the report's info is LAPACK's.
    template <class T>
    getrf_report getrf(host_matrix_view<T> a, std::span<index_t> ipiv, const getrf_call_options& call = {}) {
        return execute<T>(plan(describe_getrf<T>(a), call), a, ipiv, call);
    }
    /// Solves op(A) X = B (n x n A factored by getrf into lu and ipiv), B <- X (LAPACK's ?getrs).
    template <class T>
    getrs_report getrs(op trans, host_matrix_view<const T> lu, std::span<const index_t> ipiv, host_matrix_view<T> b,
                       const blas3_call_options& call = {});
    /// A X = B: getrf of A (overwritten by its factors), then getrs when info == 0 (LAPACK's ?gesv).
    template <class T>
    gesv_report gesv(host_matrix_view<T> a, std::span<index_t> ipiv, host_matrix_view<T> b,
                     const getrf_call_options& call = {});
    // ---- Cholesky: LAPACK's potrf, potrs and posv, all devices, out of core (potrf_context.cpp) ----
    /// Factors the Hermitian (symmetric) positive definite A in place: A = L L^H (lower) or U^H U
    /// (upper), only the `u` triangle read and written; report.info is LAPACK's (the 1-based index
    /// of the first non-positive pivot, 0 when the factor is complete).
    template <class T>
    blas3_report potrf(uplo u, host_matrix_view<T> a, const blas3_call_options& call = {});
    /// Solves A X = B with A's Cholesky factor from potrf (two triangular solves); B <- X.
    template <class T>
    blas3_report potrs(uplo u, host_matrix_view<const T> a, host_matrix_view<T> b, const blas3_call_options& call = {});
    /// potrf, then potrs when the factor is complete (B unchanged when info > 0).
    template <class T>
    blas3_report posv(uplo u, host_matrix_view<T> a, host_matrix_view<T> b, const blas3_call_options& call = {});

    /// Keeps `v` (see kept_operand): its tiles survive between calls while the handle lives.
    template <class T>
    kept_operand keep(host_matrix_view<const T> v);
    template <class T>
    kept_operand keep(host_matrix_view<T> v) {
        return keep<T>(host_matrix_view<const T>(v));
    }

    /// Cuts a Jacobi problem over the context's devices.
    jacobi_plan plan_jacobi(const jacobi_problem& problem, const jacobi_options& options = {}) const;
    /// Solves from `field` (ny x nx, row-major): on return it holds the final field.
    template <class T>
    jacobi_report jacobi(const jacobi_problem& problem, host_matrix_view<T> field, const jacobi_options& options = {});
    /// Solves from the default starting field (fill_jacobi_start) and returns the final one.
    template <class T>
    jacobi_solution<T> jacobi(const jacobi_problem& problem, const jacobi_options& options = {});

private:
    plan_options plan_options_for(const gemm_problem& problem, const gemm_call_options& call) const;
    gemm_plan plan_for_devices(const gemm_problem& problem, const gemm_call_options& call);
    template <class T>
    gemm_report run_direct(const gemm_plan& p, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<T> c, const gemm_call_options& call);
    double engine_fixed_seconds();
    /// The rates a tile routine's planner gets (the call's, the context's, measured, or none when
    /// one device in place runs one call), after checking that every device has `kernel`; on a GPU
    /// the rates of the tile kinds other than GEMM, each as the routine runs it (`tiles`).
    device_rates routine_rates(std::string_view routine, dtype type, gemm_kernel kernel, bool quick_return,
                               const std::optional<device_rates>& declared,
                               std::span<const detail::engine::tile_variant> tiles);
    /// Several devices: each one's measured GEMM rate for `type` (their kernel choice's probes),
    /// for the task engine's first balance and its model (detail::balance_of); none with one
    /// device, only CPU devices (slices of one host), declared rates or no measure.
    detail::device_balance balance(dtype type);
    /// No kernel asked for (call or context), outside reproducible mode and declared rates: the
    /// kernel of each device's GEMM tiles in a Level 3 or LU plan of `flops`, its fastest measured
    /// GEMM kernel (empty when that is vendor on every device), with `r` set to that kernel's rate
    /// and the vendor kernel's, which the other tile operations keep (device_rates::diagonal_flops).
    std::vector<gemm_kernel> tile_gemm_kernels(dtype type, double flops, device_rates& r);
    /// Throws device_error in a child made with fork() after the context was opened when it has
    /// devices other than CPUs (their runtimes do not survive fork; CPU devices start their
    /// threads again in the child).
    void check_process() const;

    context_options options_;
    std::vector<std::unique_ptr<device>> devices_;
    std::vector<device*> device_ptrs_;
    std::string names_;
    bool in_place_ = false;
    std::mutex mutex_;  ///< one run or rate probe at a time on the devices
    /// Buffers, streams and reservations kept between GEMM calls, given back on demand (the ids of
    /// its idle holders on the devices), and the operands kept by the caller.
    std::unique_ptr<detail::gemm_memory> memory_;
    std::vector<std::uint64_t> holders_;
    std::shared_ptr<detail::keep_registry> keeps_;
    std::uint64_t fork_generation_ = 0;  ///< the process's when opened (see check_process)
    /// The direct path or the engine, each side's kernel (measured once), and the plans kept.
    std::unique_ptr<detail::context_routes> routes_;
    /// FLOPs of the Level 3 and LU calls planned so far, by dtype: the GEMM kernels' probe of
    /// tile_gemm_kernels runs once they outweigh it.
    std::array<std::atomic<double>, 4> level3_flops_{};
};

}  // namespace tilestream
