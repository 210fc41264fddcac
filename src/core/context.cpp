// The context: devices opened once, plans for all of them, runs one at a time.
#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>

#include <algorithm>
#include <limits>

namespace tilestream {

context::context(std::string_view spec, const context_options& options) : options_(options) {
    open_options oo;
    oo.memory_budget = options.memory_budget;
    oo.cpu_threads = options.cpu_threads;
    devices_ = open_devices(spec, oo);
    for (auto& d : devices_) {
        device_ptrs_.push_back(d.get());
        names_ += (names_.empty() ? "" : ",") + d->id();
    }
    in_place_ = tilestream::computes_in_place(device_ptrs_);
}

context::~context() = default;

std::size_t context::budget() const {
    std::size_t budget = std::numeric_limits<std::size_t>::max();
    for (auto* d : device_ptrs_) budget = std::min(budget, d->budget_for_runs());
    return budget;
}

device_rates context::rates(dtype type, std::optional<gemm_kernel> kernel) {
    if (options_.rates) return *options_.rates;
    const std::lock_guard lock(mutex_);  // a probe must not share the devices with a run
    return measure_rates(*device_ptrs_.front(), type, kernel.value_or(options_.kernel), options_.math);
}

plan_options context::plan_options_for(const gemm_problem&, const gemm_call_options& call) const {
    plan_options po;
    po.strategy = call.strategy;
    po.tile_m = call.tile_m;
    po.tile_n = call.tile_n;
    po.tile_k = call.tile_k;
    po.transfer = call.transfer;
    po.kernel = call.kernel.value_or(options_.kernel);
    po.math = options_.math;
    po.cache = call.cache.value_or(options_.cache);
    po.devices = int(device_ptrs_.size());
    po.in_place = in_place_;
    po.reproducible = options_.reproducible;
    return po;
}

gemm_plan context::plan(const gemm_problem& problem, const gemm_call_options& call) {
    const plan_options po = plan_options_for(problem, call);
    for (auto* d : device_ptrs_)
        if (!d->supports(po.kernel))
            throw invalid_argument("gemm: device " + d->id() + " has no '" + std::string(to_string(po.kernel)) +
                                   "' kernel (the reference kernel runs on CPU devices only)");
    // Rates steer the automatic choice: the copies, and in place on several devices the kernels'
    // packing that larger units save against the balance smaller ones give. One device in place
    // runs one call whatever the rates: no probe.
    const bool probe = po.strategy == gemm_strategy::automatic && (!in_place_ || device_ptrs_.size() > 1);
    device_rates r = call.rates ? *call.rates : options_.rates ? *options_.rates : probe ? rates(problem.type, po.kernel) : device_rates{};
    r.host_memory = computes_on_host_cores(device_ptrs_);
    try {
        return plan_gemm(problem, budget(), r, po);
    } catch (const out_of_budget& e) {
        throw out_of_budget(names_ + ": " + e.what());
    }
}

std::string context::explain(const gemm_plan& p) const { return tilestream::explain(p); }

template <class T>
gemm_report context::execute(const gemm_plan& p, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                             T beta, host_matrix_view<T> c, const gemm_call_options& call) {
    if (p.devices != int(device_ptrs_.size()))
        throw invalid_argument("context: the plan is for " + std::to_string(p.devices) + " device(s), this context has " +
                               std::to_string(device_ptrs_.size()) + " (" + names_ + ")");
    const std::lock_guard lock(mutex_);
    // Pinned before the clock, for this run (execute_gemm would otherwise pin inside its call).
    const pinned_operands pinned(device_ptrs_, a, b, c);
    gemm_run_options run = call.run;
    run.register_host = false;
    gemm_report report = execute_gemm<T>(p, device_ptrs_, alpha, a, b, beta, c, run);
    for (const auto& w : pinned.refused()) report.warnings.push_back("host memory not pinned (copies stay pageable): " + w);
    return report;
}

jacobi_plan context::plan_jacobi(const jacobi_problem& problem, const jacobi_options& options) const {
    return tilestream::plan_jacobi(problem, device_ptrs_, options);
}

template <class T>
jacobi_report context::jacobi(const jacobi_problem& problem, host_matrix_view<T> field, const jacobi_options& options) {
    const jacobi_plan plan = plan_jacobi(problem, options);
    const std::lock_guard lock(mutex_);
    return run_jacobi<T>(plan, field);
}

template <class T>
jacobi_solution<T> context::jacobi(const jacobi_problem& problem, const jacobi_options& options) {
    const jacobi_plan plan = plan_jacobi(problem, options);
    const std::lock_guard lock(mutex_);
    return solve_jacobi<T>(plan);
}

#define TILESTREAM_INSTANTIATE(T)                                                                               \
    template gemm_report context::execute<T>(const gemm_plan&, T, host_matrix_view<const T>,                    \
                                             host_matrix_view<const T>, T, host_matrix_view<T>,                 \
                                             const gemm_call_options&);                                         \
    template jacobi_report context::jacobi<T>(const jacobi_problem&, host_matrix_view<T>, const jacobi_options&); \
    template jacobi_solution<T> context::jacobi<T>(const jacobi_problem&, const jacobi_options&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
