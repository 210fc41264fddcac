// The context: devices opened once, plans for all of them, runs one at a time; buffers and the
// tiles of kept operands survive between calls.
#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>

#include "core/balance.hpp"
#include "core/context_routes.hpp"
#include "core/gemm_direct.hpp"
#include "core/gemm_memory.hpp"
#include "core/process_fork.hpp"
#include "core/tick_clock.hpp"

#include <algorithm>
#include <numeric>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>

namespace tilestream {

namespace detail {

/// The operands kept by a context's callers and the pinning each holds; `alive` until the
/// context (and its devices) is gone.
struct keep_registry {
    std::mutex mutex;
    bool alive = true;
    std::uint64_t next_id = 1;
    std::vector<std::weak_ptr<keep_record>> records;
    std::map<std::uint64_t, pinned_operands> pins;
};

/// One kept operand: where it lies, as a view, and its generation.
struct keep_record {
    std::shared_ptr<keep_registry> registry;
    std::uint64_t id = 0;
    std::atomic<std::uint64_t> generation{1};
    std::uintptr_t base = 0;
    index_t rows = 0, cols = 0, ld = 0;
    layout lay = layout::row_major;
    dtype type = dtype::f32;
    std::size_t es = 0;
    std::size_t span = 0;  ///< bytes from the first element to the last
    index_t inner() const { return lay == layout::row_major ? cols : rows; }
    index_t outer() const { return lay == layout::row_major ? rows : cols; }

    /// Whether every element of the view (data, rows x cols, ld, layout, type) is one of this
    /// operand's.
    bool covers(std::uintptr_t data, index_t r, index_t c, index_t v_ld, layout v_lay, dtype v_type) const {
        if (v_type != type || v_lay != lay || v_ld != ld || data < base || (data - base) % es != 0) return false;
        const std::uintptr_t e = (data - base) / es;
        const index_t o = index_t(e / std::uintptr_t(ld)), i = index_t(e % std::uintptr_t(ld));
        const index_t v_inner = v_lay == layout::row_major ? c : r, v_outer = v_lay == layout::row_major ? r : c;
        return i + v_inner <= inner() && o + v_outer <= outer();
    }

    ~keep_record() {
        std::lock_guard lock(registry->mutex);
        registry->pins.erase(id);  // unpins (the context erased all when it went first)
        std::erase_if(registry->records, [](const std::weak_ptr<keep_record>& w) { return w.expired(); });
    }
};

operand_keep find_kept(keep_registry& registry, const void* data, index_t rows, index_t cols, index_t ld, layout lay,
                       dtype type) {
    std::lock_guard lock(registry.mutex);
    operand_keep k;
    if (data == nullptr || rows == 0 || cols == 0) return k;
    for (const auto& w : registry.records)
        if (auto r = w.lock(); r && r->covers(reinterpret_cast<std::uintptr_t>(data), rows, cols, ld, lay, type)) {
            k.id = r->id;
            k.generation = r->generation.load();
            break;
        }
    return k;
}

void kept_written(keep_registry& registry, const void* data, std::size_t bytes) {
    if (data == nullptr || bytes == 0) return;
    std::vector<std::shared_ptr<keep_record>> hit;  // released outside the lock (a last reference locks)
    {
        std::lock_guard lock(registry.mutex);
        const auto c0 = reinterpret_cast<std::uintptr_t>(data), c1 = c0 + bytes;
        for (const auto& w : registry.records)
            if (auto r = w.lock(); r && r->span > 0 && r->base < c1 && c0 < r->base + r->span) {
                ++r->generation;
                hit.push_back(std::move(r));
            }
    }
}

}  // namespace detail

namespace {

/// Bytes a host view spans, first element to last.
template <class V>
std::size_t span_of(const V& v) {
    const index_t outer = v.layout() == layout::row_major ? v.rows() : v.cols();
    const index_t inner = v.layout() == layout::row_major ? v.cols() : v.rows();
    return v.empty() ? 0 : std::size_t((outer - 1) * v.ld() + inner) * sizeof(typename V::value_type);
}

}  // namespace

void kept_operand::changed() {
    if (record_) ++record_->generation;
}

context::context(std::string_view spec, const context_options& options)
    : options_(options), fork_generation_(detail::fork_generation()) {  // before any device starts a thread
    open_options oo;
    oo.memory_budget = options.memory_budget;
    oo.cpu_threads = options.cpu_threads;
    devices_ = open_devices(spec, oo);
    for (auto& d : devices_) {
        device_ptrs_.push_back(d.get());
        names_ += (names_.empty() ? "" : ",") + d->id();
    }
    in_place_ = tilestream::computes_in_place(device_ptrs_);
    memory_ = std::make_unique<detail::gemm_memory>();
    memory_->kits.resize(device_ptrs_.size());
    keeps_ = std::make_shared<detail::keep_registry>();
    // What is kept idle on a device goes back to it when another run or allocation there needs it.
    for (std::size_t i = 0; i < device_ptrs_.size(); ++i)
        holders_.push_back(device_ptrs_[i]->add_idle_holder([m = memory_.get(), i] { return m->release(i); }));
    detail::context_routes::setup rs;
    rs.devices = device_ptrs_;
    rs.in_place = in_place_;
    rs.kernel = options.kernel;
    rs.math = options.math;
    rs.reproducible = options.reproducible;
    rs.rates = options.rates;
    rs.step_seconds = options.step_seconds;
    rs.device_mutex = &mutex_;
    rs.engine_fixed = [this] { return engine_fixed_seconds(); };
    routes_ = std::make_unique<detail::context_routes>(std::move(rs));
}

context::~context() {
    if (detail::fork_generation() != fork_generation_ &&
        std::any_of(device_ptrs_.begin(), device_ptrs_.end(), [](device* d) { return d->info().kind != device_kind::cpu; })) {
        // A forked child's copy of GPU devices: their runtimes' threads are not in this process and
        // releasing anything there may wait for them forever. Left as they are (the child's memory
        // goes with the child).
        const std::lock_guard lock(keeps_->mutex);
        keeps_->alive = false;
        new std::map<std::uint64_t, pinned_operands>(std::move(keeps_->pins));  // never unpinned here
        (void)memory_.release();
        for (auto& d : devices_) (void)d.release();
        return;
    }
    for (std::size_t i = 0; i < holders_.size(); ++i) device_ptrs_[i]->remove_idle_holder(holders_[i]);
    memory_->release();
    std::map<std::uint64_t, pinned_operands> pins;  // unpinned below, outside the lock
    {
        std::lock_guard lock(keeps_->mutex);
        keeps_->alive = false;
        pins.swap(keeps_->pins);
    }
}

template <class T>
kept_operand context::keep(host_matrix_view<const T> v) {
    check_process();
    auto rec = std::make_shared<detail::keep_record>();
    rec->registry = keeps_;
    rec->base = reinterpret_cast<std::uintptr_t>(v.data());
    rec->rows = v.rows();
    rec->cols = v.cols();
    rec->ld = v.ld();
    rec->lay = v.layout();
    rec->type = dtype_of<T>();
    rec->es = sizeof(T);
    rec->span = span_of(v);
    pinned_operands pins(device_ptrs_, std::array{std::pair<const void*, std::size_t>{v.data(), rec->span}});
    std::lock_guard lock(keeps_->mutex);
    rec->id = keeps_->next_id++;
    keeps_->records.push_back(rec);
    keeps_->pins.emplace(rec->id, std::move(pins));
    return kept_operand(std::move(rec));
}

std::size_t context::budget() const {
    std::size_t budget = std::numeric_limits<std::size_t>::max();
    for (auto* d : device_ptrs_) budget = std::min(budget, d->budget_for_runs());
    return budget;
}

void context::check_process() const {
    if (detail::fork_generation() == fork_generation_) return;
    std::string others;
    for (auto* d : device_ptrs_)
        if (d->info().kind != device_kind::cpu) others += (others.empty() ? "" : ",") + d->id();
    if (!others.empty())
        throw device_error("context " + names_ + ": opened before this process was forked, and its devices " + others +
                           " cannot be used in the child (the CUDA and OpenCL runtimes do not survive fork()): open "
                           "GPU devices after forking, or start the child with multiprocessing's 'spawn' or "
                           "'forkserver' method (CPU devices work in a forked child)");
}

device_rates context::rates(dtype type, std::optional<gemm_kernel> kernel) {
    check_process();
    if (options_.rates) return *options_.rates;
    const std::lock_guard lock(mutex_);  // a probe must not share the devices with a run
    return measure_rates(*device_ptrs_.front(), type, kernel.value_or(options_.kernel.value_or(gemm_kernel::vendor)),
                         options_.math);
}

plan_options context::plan_options_for(const gemm_problem&, const gemm_call_options& call) const {
    plan_options po;
    po.strategy = call.strategy;
    po.tile_m = call.tile_m;
    po.tile_n = call.tile_n;
    po.tile_k = call.tile_k;
    po.transfer = call.transfer;
    po.engine = call.engine;
    po.kernel = call.kernel.value_or(options_.kernel.value_or(gemm_kernel::vendor));
    po.math = options_.math;
    po.cache = call.cache.value_or(options_.cache);
    po.devices = int(device_ptrs_.size());
    po.in_place = in_place_;
    po.reproducible = options_.reproducible;
    po.max_step_seconds = detail::watches_steps(call.run) ? options_.step_seconds : 0;  // no one to see a step
    po.direct_threads = routes_->host_threads();
    return po;
}

gemm_plan context::plan(const gemm_problem& problem, const gemm_call_options& call) {
    check_process();
    // Repeated calls (a loop over one shape, the BLAS drop-in, an MPI rank's panels) reuse their plan.
    const std::size_t bytes = budget();
    if (auto kept = routes_->cached_plan(problem, call, bytes)) return *kept;
    gemm_plan p = plan_for_devices(problem, call);
    if (p.rates.measured || options_.rates) routes_->keep_plan(problem, call, bytes, p);
    return p;
}

gemm_plan context::plan_for_devices(const gemm_problem& problem, const gemm_call_options& call) {
    plan_options po = plan_options_for(problem, call);
    const std::optional<gemm_kernel> asked = call.kernel ? call.kernel : options_.kernel;
    const bool automatic = detail::automatic_call(call);
    const bool direct = call.strategy == gemm_strategy::direct;
    // The route (each side's kernel, the crossover) when the kernel is left to measurement or the
    // direct path may take the call.
    const detail::route* route =
        !asked || automatic || direct ? &routes_->get(problem.type, classify_gemm(problem.m, problem.n, problem.k), asked)
                                      : nullptr;
    const auto direct_plan = [&](std::string why) {
        plan_options dpo = po;
        // Counted whole: the route below may have narrowed po.devices to the working ones.
        dpo.devices = int(device_ptrs_.size());
        dpo.strategy = gemm_strategy::direct;
        dpo.kernel = route->host_kernel;
        device_rates hr;
        if (route->host_flops > 0) hr.flops = route->host_flops;
        hr.op_overhead = route->host_fixed;
        hr.measured = route->measured;
        hr.host_memory = true;
        gemm_plan p = plan_gemm(problem, budget(), hr, dpo);
        p.choice = route->kernels_text + route->crossover_text + why;
        return p;
    };
    const double flops = problem.reads_ab ? problem.flops() : 0.0;
    if (direct) {
        if (!route->direct_possible)
            throw invalid_argument("gemm: the direct strategy runs the vendor or tiled kernel on the calling thread, on "
                                   "host operands; it is not for budgeted CPU devices (which stage like accelerators) "
                                   "nor for the " + std::string(to_string(po.kernel)) + " kernel");
        return direct_plan("  route           direct (asked for)\n");
    }
    const bool watched = detail::watches_steps(call.run);
    if (automatic && route->direct_possible && in_place_ && flops <= route->limit_for(watched))
        return direct_plan("  route           direct: under the crossover\n");
    std::vector<gemm_kernel> kernels(device_ptrs_.size(), po.kernel);
    if (route && !asked) {
        kernels = route->device_kernels;
        po.kernel = kernels.front();
    }
    for (std::size_t i = 0; i < device_ptrs_.size(); ++i)
        if (!device_ptrs_[i]->supports(kernels[i]))
            throw invalid_argument("gemm: device " + device_ptrs_[i]->id() + " has no '" + std::string(to_string(kernels[i])) +
                                   "' kernel (the reference kernel runs on CPU devices only)");
    // Rates steer the automatic choice: the copies, and in place on several devices the kernels'
    // packing that larger units save against the balance smaller ones give. One device in place
    // runs one unit whose steps the kernel's measured rate bounds.
    const bool probe = po.strategy == gemm_strategy::automatic && (!in_place_ || device_ptrs_.size() > 1);
    device_rates r = call.rates ? *call.rates : options_.rates ? *options_.rates : probe ? rates(problem.type, po.kernel) : device_rates{};
    if (!call.rates && !options_.rates && !probe && route && in_place_ && route->device_flops.front() > 0) {
        r.flops = route->device_flops.front();
        r.measured = route->measured;
    }
    r.host_memory = computes_on_host_cores(device_ptrs_);
    // Devices measured one by one: the model takes the mean rate of those that take work, the
    // engine each one's own.
    const detail::device_balance balance = route ? detail::balance_of(route->device_flops) : detail::device_balance{};
    // A device far slower than another takes no unit while that one works (the engine's tail rule):
    // the units are sized for the devices that work. Planned for both, an H200 beside its host's
    // CPU got C in twice the units, each reading all of B once more: 0.39 s against 0.20 s alone.
    const int all_devices = po.devices;
    // The run takes every device, the idle ones too (the engine's tail rule keeps them idle).
    const bool idle_ones = balance.idle_ones(all_devices);
    if (idle_ones) po.devices = balance.working;
    if (!call.rates && !options_.rates) r.flops *= balance.rate_scale(all_devices);
    if (!r.measured && !call.rates && !options_.rates) po.max_step_seconds = 0;  // no rate to bound a step with
    gemm_plan p;
    try {
        p = plan_gemm(problem, budget(), r, po);
        // Row panels are dealt to every device, the idle ones too: those plans count them all.
        if (idle_ones && p.static_assignment) {
            po.devices = all_devices;
            // Dealt to the idle ones too, the panels run on the pipeline: the task engine would pin
            // them to those devices while its model counts them as identical.
            po.engine = gemm_engine::pipeline;
            r.flops *= balance.model_scale / balance.working_scale;
            p = plan_gemm(problem, budget(), r, po);
        }
    } catch (const out_of_budget& e) {
        throw out_of_budget(names_ + ": " + e.what());
    }
    p.devices = all_devices;
    if (std::any_of(kernels.begin(), kernels.end(), [&](gemm_kernel k) { return k != kernels.front(); }))
        p.device_kernels = kernels;
    p.device_flops = balance.flops;
    if (!route) return p;
    p.choice = route->kernels_text + route->crossover_text;
    if (automatic && route->direct_possible && !in_place_ && route->host_flops > 0) {
        // Devices that copy: the direct path when the host is predicted faster than the engine's
        // plan, copies and its fixed cost included (NVBLAS keeps small calls on the CPU likewise).
        const double host = route->host_fixed + flops / route->host_flops;
        const double engine = p.predicted_seconds + routes_->engine_fixed();
        char buf[200];
        std::snprintf(buf, sizeof buf, "  route           host %.6f s against the engine's %.6f s (plan %.6f s + %.6f s fixed)",
                      host, engine, p.predicted_seconds, engine - p.predicted_seconds);
        if (host < engine && (options_.step_seconds <= 0 || !watched || host <= options_.step_seconds))
            return direct_plan(std::string(buf) + ": direct\n");
        p.choice += std::string(buf) + ": the engine\n";
    } else if (automatic) {
        p.choice += "  route           the engine" +
                    std::string(route->direct_possible ? " (over the crossover)" : " (no direct path here)") + "\n";
    }
    return p;
}

std::string context::explain(const gemm_plan& p) const { return tilestream::explain(p); }

template <class T>
gemm_report context::execute(const gemm_plan& p, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                             T beta, host_matrix_view<T> c, const gemm_call_options& call) {
    check_process();
    if (p.devices != int(device_ptrs_.size()))
        throw invalid_argument("context: the plan is for " + std::to_string(p.devices) + " device(s), this context has " +
                               std::to_string(device_ptrs_.size()) + " (" + names_ + ")");
    if (p.strategy == gemm_strategy::direct) return run_direct<T>(p, alpha, a, b, beta, c, call);
    const std::lock_guard lock(mutex_);
    // The kept operands A and B lie in (their tiles may come from earlier calls; they are pinned).
    // (Copied out under the lock, released after it: the last reference ends a record, which locks.)
    std::vector<std::shared_ptr<detail::keep_record>> kept;
    {
        std::lock_guard keep_lock(keeps_->mutex);
        for (const auto& w : keeps_->records)
            if (auto r = w.lock()) kept.push_back(std::move(r));
    }
    detail::call_keeps keeps;
    std::vector<std::pair<const void*, std::size_t>> ranges;
    const auto find = [&](auto v) {
        using V = typename decltype(v)::value_type;
        detail::operand_keep k;
        if (v.empty()) return k;
        for (const auto& r : kept)
            if (r->covers(reinterpret_cast<std::uintptr_t>(v.data()), v.rows(), v.cols(), v.ld(), v.layout(),
                          dtype_of<std::remove_const_t<V>>())) {
                k.id = r->id;
                k.generation = r->generation.load();
                return k;
            }
        ranges.emplace_back(v.data(), span_of(v));
        return k;
    };
    keeps.a = find(a);
    keeps.b = find(b);
    find(host_matrix_view<const T>(c));  // C: pinned for this run (unless a kept view holds it)
    // A kept operand this call writes into (as C) has changed once it returns, however it returns.
    struct written_guard {
        std::vector<detail::keep_record*> records;
        ~written_guard() {
            for (auto* r : records) ++r->generation;
        }
    } written;
    if (!c.empty()) {
        const auto c0 = reinterpret_cast<std::uintptr_t>(c.data()), c1 = c0 + span_of(c);
        for (const auto& r : kept)
            if (r->span > 0 && r->base < c1 && c0 < r->base + r->span) written.records.push_back(r.get());
    }
    // Pinned before the clock, for this run (execute_gemm would otherwise pin inside its call).
    const pinned_operands pinned(device_ptrs_, ranges);
    gemm_run_options run = call.run;
    run.register_host = false;
    gemm_report report = detail::execute_gemm_kept<T>(p, device_ptrs_, alpha, a, b, beta, c, run, memory_.get(), keeps);
    for (const auto& w : pinned.refused()) report.warnings.push_back("host memory not pinned (copies stay pageable): " + w);
    return report;
}

namespace {

/// The direct path's run into `rep` (its plan made): the kernel on the calling thread, timed, and
/// the progress callbacks. No allocation, lock or plan copy: the fixed cost of a small call.
template <class T>
void run_on_calling_thread(gemm_report& rep, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                           host_matrix_view<T> c, const gemm_call_options& call) {
    if (call.run.cancel != nullptr && call.run.cancel->load()) throw cancelled("gemm: cancelled before it started");
    const gemm_plan& p = rep.plan;
    const std::uint64_t t0 = detail::tick_clock::now();
    detail::host_gemm(detail::host_gemm_call<T>(p.problem.op_a, p.problem.op_b, alpha, a, b, beta, c, p.kernel),
                      p.direct_threads, p.k_block);
    rep.seconds = detail::tick_clock::seconds(t0, detail::tick_clock::now());
    if (call.run.on_step_done) call.run.on_step_done(1);
    if (call.run.on_unit_done) call.run.on_unit_done(1);
}

}  // namespace

template <class T>
gemm_report context::gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                          host_matrix_view<T> c, const gemm_call_options& call) {
    // In place, a call under the crossover runs here with no plan search: one validation, a table
    // lookup, the report's plan filled in place and the kernel.
    if (in_place_ && detail::automatic_call(call)) {
        validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
        const index_t m = c.rows(), n = c.cols(), k = is_transposed(op_a) ? a.rows() : a.cols();
        const std::optional<gemm_kernel> asked = call.kernel ? call.kernel : options_.kernel;
        const detail::route& r = routes_->get(dtype_of<T>(), classify_gemm(m, n, k), asked);
        const double flops = double(dtype_traits(dtype_of<T>()).flops_per_multiply_add) * double(m) * double(n) * double(k);
        if (r.direct_possible && flops <= r.limit_for(detail::watches_steps(call.run))) {
            gemm_report rep;
            gemm_plan& p = rep.plan;
            p.problem = detail::describe_validated_gemm<T>(op_a, op_b, alpha, a, b, beta, c);
            p.strategy = gemm_strategy::direct;
            p.kernel = r.host_kernel;
            p.devices = int(device_ptrs_.size());
            p.units = p.steps = 1;
            p.tile_m = m;
            p.tile_n = n;
            p.tile_k = k;
            p.tiles_m = p.tiles_n = p.tiles_k = 1;
            p.direct_threads = routes_->host_threads();
            p.k_block = options_.reproducible ? reproducible_k_block(dtype_of<T>()) : 0;
            p.rates.flops = r.host_flops;
            p.rates.op_overhead = r.host_fixed;
            p.rates.measured = r.measured;
            p.predicted_seconds = p.predicted_compute_seconds = r.host_fixed + flops / r.host_flops;
            run_on_calling_thread<T>(rep, alpha, a, b, beta, c, call);
            return rep;
        }
    }
    return execute<T>(plan<T>(op_a, op_b, alpha, a, b, beta, c, call), alpha, a, b, beta, c, call);
}

template <class T>
gemm_report context::run_direct(const gemm_plan& p, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                                T beta, host_matrix_view<T> c, const gemm_call_options& call) {
    const gemm_problem actual = describe_gemm(p.problem.op_a, p.problem.op_b, alpha, a, b, beta, c);
    const gemm_problem& q = p.problem;
    if (actual.m != q.m || actual.n != q.n || actual.k != q.k || actual.type != q.type || actual.reads_c != q.reads_c ||
        actual.reads_ab != q.reads_ab || actual.layout_a != q.layout_a || actual.layout_b != q.layout_b ||
        actual.layout_c != q.layout_c)
        throw invalid_argument("execute_gemm: the operands do not match the problem the plan was made for");
    if (!in_place_ && !c.empty()) {
        // A kept operand written as C has changed (or may: a cancelled call writes nothing): tiles
        // of it left on the devices are stale.
        const auto c0 = reinterpret_cast<std::uintptr_t>(c.data()), c1 = c0 + span_of(c);
        std::lock_guard keep_lock(keeps_->mutex);
        for (const auto& w : keeps_->records)
            if (auto r = w.lock(); r && r->span > 0 && r->base < c1 && c0 < r->base + r->span) ++r->generation;
    }
    gemm_report rep;
    rep.plan = p;
    run_on_calling_thread<T>(rep, alpha, a, b, beta, c, call);
    return rep;
}

bool context::runs_direct(dtype type, index_t m, index_t n, index_t k, std::optional<gemm_kernel> kernel) {
    if (!in_place_) return false;
    const detail::route& r = routes_->get(type, classify_gemm(m, n, k), kernel ? kernel : options_.kernel);
    return r.direct_possible &&
           double(dtype_traits(type).flops_per_multiply_add) * double(m) * double(n) * double(k) <= r.flops_limit;
}

double context::engine_fixed_seconds() {
    // A 1x1x1 product through the engine on every device, as a call runs it (streams and buffers
    // kept between calls): the median of ten after a warm-up.
    host_matrix<double> a(1, 1), b(1, 1), c(1, 1);
    a(0, 0) = b(0, 0) = 1.0;
    plan_options po;
    po.devices = int(device_ptrs_.size());
    po.in_place = in_place_;
    po.kernel = gemm_kernel::tiled;
    for (gemm_kernel k : {gemm_kernel::vendor, gemm_kernel::tiled})
        if (std::all_of(device_ptrs_.begin(), device_ptrs_.end(), [&](device* d) { return d->supports(k); })) {
            po.kernel = k;
            break;
        }
    device_rates r;
    r.host_memory = computes_on_host_cores(device_ptrs_);
    try {
        const gemm_plan p = plan_gemm(describe_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view()),
                                      budget(), r, po);
        gemm_run_options run;
        run.register_host = false;
        std::vector<double> t;
        for (int i = 0; i < 11; ++i) {
            const std::lock_guard lock(mutex_);
            const auto t0 = std::chrono::steady_clock::now();
            detail::execute_gemm_kept<double>(p, device_ptrs_, 1.0, a.view(), b.view(), 0.0, c.view(), run, memory_.get(),
                                              {});
            if (i > 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
    } catch (const error&) {
        return 1e-3;  // the devices cannot run even this (a budget, a device error): say the engine is slow
    }
}

jacobi_plan context::plan_jacobi(const jacobi_problem& problem, const jacobi_options& options) const {
    check_process();
    return tilestream::plan_jacobi(problem, device_ptrs_, options);
}

template <class T>
jacobi_report context::jacobi(const jacobi_problem& problem, host_matrix_view<T> field, const jacobi_options& options) {
    const jacobi_plan plan = plan_jacobi(problem, options);
    const std::lock_guard lock(mutex_);
    memory_->release();  // GEMM buffers make room for the solve
    return run_jacobi<T>(plan, field);
}

template <class T>
jacobi_solution<T> context::jacobi(const jacobi_problem& problem, const jacobi_options& options) {
    const jacobi_plan plan = plan_jacobi(problem, options);
    const std::lock_guard lock(mutex_);
    memory_->release();  // GEMM buffers make room for the solve
    return solve_jacobi<T>(plan);
}

#define TILESTREAM_INSTANTIATE(T)                                                                               \
    template gemm_report context::gemm<T>(op, op, T, host_matrix_view<const T>, host_matrix_view<const T>, T,        \
                                          host_matrix_view<T>, const gemm_call_options&);                          \
    template gemm_report context::execute<T>(const gemm_plan&, T, host_matrix_view<const T>,                    \
                                             host_matrix_view<const T>, T, host_matrix_view<T>,                 \
                                             const gemm_call_options&);                                         \
    template kept_operand context::keep<T>(host_matrix_view<const T>);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE
// Jacobi is real.
#define TILESTREAM_INSTANTIATE(T)                                                                               \
    template jacobi_report context::jacobi<T>(const jacobi_problem&, host_matrix_view<T>, const jacobi_options&); \
    template jacobi_solution<T> context::jacobi<T>(const jacobi_problem&, const jacobi_options&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
