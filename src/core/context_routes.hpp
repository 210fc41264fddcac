// How a context routes its calls: straight to the host's kernel on the calling thread (the direct
// path) or through the engine, with which kernel on each device, from rates measured once per
// precision, shape class and kernel setting; and the plans of repeated calls, kept per shape and
// settings.
#pragma once

#include <tilestream/context.hpp>
#include <tilestream/plan.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tilestream::detail {

/// What a context measured for calls of one precision, shape class and kernel setting.
struct route {
    /// Whether the direct path may take these calls at all (not with budgeted CPU devices, which
    /// stand in for accelerators, nor for the naive and reference kernels).
    bool direct_possible = false;
    gemm_kernel host_kernel = gemm_kernel::vendor;  ///< the direct path's kernel
    double host_flops = 0;                          ///< its rate on the calling thread (FLOP/s)
    double host_fixed = 0;                          ///< its fixed cost per call (s)
    double host_item_fixed = 0;                     ///< its fixed cost per product of a stack (s)
    /// The engine's kernel on each device (in the context's order), and their rates there.
    std::vector<gemm_kernel> device_kernels;
    std::vector<double> device_flops;
    double engine_flops = 0;  ///< in place: all devices together
    double engine_fixed = 0;  ///< a tiny call through the engine (s); in-place contexts only
    /// In-place contexts: a call goes direct while its FLOP count is at most this. A call that
    /// watches its steps (watches_steps: a cancel flag or a step callback) takes the crossover
    /// with the engine and the step bound (past it the engine cuts the work so that a cancel or a
    /// progress report comes within a step); one that does not, the crossover alone.
    double flops_limit = 0;
    double flops_limit_unwatched = 0;
    double limit_for(bool watched) const { return watched ? flops_limit : flops_limit_unwatched; }
    bool measured = false;  ///< rates measured (false: declared, or probes that did not fit)
    /// A kernel chosen against vendor waits for its re-check (choose_kernel_kept): the first call
    /// from then measures the route again, which makes the re-check.
    std::optional<std::chrono::steady_clock::time_point> recheck_at;
    std::uint64_t recheck_tick = 0;  ///< recheck_at on detail::tick_clock (what calls read); 0: none
    std::string kernels_text;    ///< explain: the kernels each side chose, and from which rates
    std::string crossover_text;  ///< explain: where the direct path ends
};

/// The routes of one context, measured on first need and kept; thread-safe.
class context_routes {
public:
    struct setup {
        std::vector<device*> devices;
        bool in_place = false;
        std::optional<gemm_kernel> kernel;  ///< the context's kernel (absent: measured choice)
        math_mode math = math_mode::strict;
        bool reproducible = false;
        std::optional<device_rates> rates;  ///< declared: no probe, these rates for both routes
        double step_seconds = 0.2;
        std::mutex* device_mutex = nullptr;  ///< held while probing the devices (runs hold it too)
        /// Seconds of a tiny call through the engine on the devices (called with no lock held).
        std::function<double()> engine_fixed;
    };
    explicit context_routes(setup s);

    /// The route of calls of type t, class c and kernel setting `kernel` (the call's or the
    /// context's; absent: the measured choice), measured the first time, and once more when a
    /// kernel it chose against vendor is due for its re-check (the plans kept are then dropped).
    /// No lock is taken once measured.
    const route& get(dtype t, shape_class c, std::optional<gemm_kernel> kernel);

    /// Seconds of a tiny call through the engine, measured once (no lock may be held).
    double engine_fixed();

    bool in_place() const { return s_.in_place; }
    int host_threads() const { return host_threads_; }
    double step_seconds() const { return s_.step_seconds; }

    /// A plan made before for this problem and call settings, or none.
    std::optional<gemm_plan> cached_plan(const gemm_problem& q, const gemm_call_options& call, std::size_t budget);
    /// Keeps `p` for later calls with the same problem and settings (a few hundred at most).
    void keep_plan(const gemm_problem& q, const gemm_call_options& call, std::size_t budget, const gemm_plan& p);

private:
    static std::size_t slot(dtype t, shape_class c, std::optional<gemm_kernel> kernel);
    route measure(dtype t, shape_class c, std::optional<gemm_kernel> kernel);
    double engine_fixed_seconds();

    setup s_;
    int host_threads_ = 1;
    std::mutex mutex_;        ///< measurements, one at a time
    std::mutex plans_mutex_;  ///< the plan cache
    static constexpr std::size_t slots = 4 * std::size(all_shape_classes) * 5;  // dtype x shape class x (auto + 4 kernels)
    std::array<std::atomic<const route*>, slots> routes_{};
    std::vector<std::unique_ptr<route>> owned_;
    std::optional<double> engine_fixed_;

    struct plan_key {
        std::array<std::int64_t, 21> v{};
        bool operator==(const plan_key&) const = default;
    };
    struct plan_key_hash {
        std::size_t operator()(const plan_key& k) const noexcept;
    };
    static plan_key key_of(const gemm_problem& q, const gemm_call_options& call, std::size_t budget);
    std::unordered_map<plan_key, gemm_plan, plan_key_hash> plans_;
};

/// Whether a call's options leave the plan to the context (what the direct path may take).
bool automatic_call(const gemm_call_options& call);

/// Whether a run can use steps of bounded time (context_options::step_seconds): it has a cancel
/// flag or a step callback. Steps cost a little speed (a BLAS called once per step re-reads C and
/// re-packs; 1.5-4% at f32 8192^3 on 2 threads), so a call that watches neither runs unsplit.
inline bool watches_steps(const gemm_run_options& run) { return run.cancel != nullptr || bool(run.on_step_done); }

/// Several devices measured one by one (a GPU beside the CPU: rates 50x apart): each one's rate,
/// for the engines' first balance, and the factor that turns the first device's rate (what the
/// model's probe measured) into the mean rate of the devices that take work (a device
/// negligible_device_ratio slower than the fastest takes none). Empty, and 1, unless every device
/// of several has a measured rate. `working` of them take work (0: no rates, all of them), at a
/// mean rate `working_scale` times the first device's: GEMM's tiles are sized for those.
struct device_balance {
    std::vector<double> flops;
    double model_scale = 1.0;
    int working = 0;
    double working_scale = 1.0;
    /// Whether some of `devices` sit out: the models then plan for the `working` ones alone.
    bool idle_ones(int devices) const { return working > 0 && working < devices; }
    /// The factor for the first device's probed rate in a model over the devices it plans for.
    double rate_scale(int devices) const { return idle_ones(devices) ? working_scale : model_scale; }
    /// r's compute rates (GEMM's, the diagonal tiles', each tile kind's measured one) scaled for
    /// a model over `devices`.
    void scale(device_rates& r, int devices) const {
        const double f = rate_scale(devices);
        r.flops *= f;
        r.diagonal_flops *= f;
        for (tile_rate& k : r.tile_rates) k.flops *= f;
    }
};
device_balance balance_of(const std::vector<double>& device_flops);

/// The explanation's line for a task-engine plan on `devices`: each one's rate for the balance
/// (`device_flops`, the plan's) and which sit out; "" for one device or CPU slices of one host
/// (one speed: no rate per device).
std::string balance_line(const std::vector<device*>& devices, const std::vector<double>& device_flops);

}  // namespace tilestream::detail
