// A context's routes (context_routes.hpp): the direct path or the engine, and each side's kernel,
// from rates measured once; the plans of repeated calls.
#include "core/context_routes.hpp"

#include "core/gemm_direct.hpp"
#include "core/rate_probes.hpp"
#include "core/balance.hpp"
#include "core/tick_clock.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tilestream::detail {

namespace {

std::size_t kernel_index(std::optional<gemm_kernel> k) { return k ? 1 + std::size_t(*k) : 0; }

/// "vendor 245.1, tiled 60.3 GFLOP/s" (what could not be measured, and why).
std::string rates_text(const kernel_choice& c) {
    std::ostringstream s;
    bool first = true;
    for (const kernel_rate& r : c.rates) {
        s << (first ? "" : ", ") << to_string(r.kernel) << " ";
        if (r.measured) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.1f", r.flops * 1e-9);
            s << buf;
        } else {
            s << "(" << r.note << ")";
        }
        first = false;
    }
    s << " GFLOP/s at " << c.m << "x" << c.n << "x" << c.k;
    return s.str();
}

std::string seconds_text(double s) {
    char buf[32];
    if (s < 1e-3)
        std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.3f s", s);
    return buf;
}

}  // namespace

device_balance balance_of(const std::vector<double>& device_flops) {
    device_balance b;
    if (device_flops.size() < 2 || std::any_of(device_flops.begin(), device_flops.end(), [](double f) { return f <= 0; }))
        return b;
    b.flops = device_flops;
    const double fastest = *std::max_element(device_flops.begin(), device_flops.end());
    double working = 0;
    for (double f : device_flops)
        if (f * negligible_device_ratio > fastest) working += f, ++b.working;
    b.model_scale = working / double(device_flops.size()) / device_flops.front();
    b.working_scale = working / double(b.working) / device_flops.front();
    return b;
}

std::string balance_line(const std::vector<device*>& devices, const std::vector<double>& device_flops) {
    if (devices.size() < 2 || std::all_of(devices.begin(), devices.end(), [](const device* d) { return d->host_addressable(); }))
        return {};
    std::ostringstream o;
    o << "  balance         ";
    if (device_flops.size() != devices.size()) {
        o << "no measured rate per device: each device's first task sets its rate\n";
        return o.str();
    }
    const double fastest = *std::max_element(device_flops.begin(), device_flops.end());
    std::vector<std::string> out;
    for (std::size_t d = 0; d < devices.size(); ++d) {
        char rate[64];
        std::snprintf(rate, sizeof rate, " %.1f", device_flops[d] * 1e-9);
        o << (d ? ", " : "") << devices[d]->id() << rate;
        if (device_flops[d] * negligible_device_ratio <= fastest) out.push_back(devices[d]->id());
    }
    o << " GFLOP/s (each device's measured GEMM rate)";
    for (std::size_t i = 0; i < out.size(); ++i) o << (i ? ", " : "; ") << out[i];
    if (!out.empty())
        o << " take" << (out.size() == 1 ? "s" : "") << " no task while a device " << negligible_device_ratio
          << "x faster works";
    o << "\n";
    return o.str();
}

bool automatic_call(const gemm_call_options& call) {
    return call.strategy == gemm_strategy::automatic && call.tile_m == 0 && call.tile_n == 0 && call.tile_k == 0 &&
           call.transfer == transfer_mode::copy_2d && !call.rates && call.run.trace == nullptr;
}

context_routes::context_routes(setup s) : s_(std::move(s)), host_threads_(detail::host_threads(s_.devices)) {}

namespace {

// Read on every call that finds its route (the direct path's fixed cost): the tick clock, not
// steady_clock, once a re-check is pending.
bool recheck_due(const route& r) { return r.recheck_tick != 0 && detail::tick_clock::now() >= r.recheck_tick; }

}  // namespace

std::size_t context_routes::slot(dtype t, shape_class c, std::optional<gemm_kernel> kernel) {
    return (std::size_t(t) * std::size(all_shape_classes) + std::size_t(c)) * 5 + kernel_index(kernel);
}

const route& context_routes::get(dtype t, shape_class c, std::optional<gemm_kernel> kernel) {
    const std::size_t i = slot(t, c, kernel);
    const auto settled = [](const route* r) { return r && !recheck_due(*r); };
    if (const route* r = routes_[i].load(std::memory_order_acquire); settled(r)) return *r;
    std::lock_guard lock(mutex_);  // one measurement at a time; a second caller finds it made
    const route* old = routes_[i].load(std::memory_order_acquire);
    if (settled(old)) return *old;
    // Routes are never freed (a caller may still hold one); a re-measured one replaces the pointer.
    owned_.push_back(std::make_unique<route>(measure(t, c, kernel)));
    routes_[i].store(owned_.back().get(), std::memory_order_release);
    if (old) {
        std::lock_guard plans_lock(plans_mutex_);  // plans made with the old route's kernels
        plans_.clear();
    }
    return *owned_.back();
}

double context_routes::engine_fixed_seconds() {
    if (!engine_fixed_) engine_fixed_ = s_.engine_fixed ? s_.engine_fixed() : 0.0;
    return *engine_fixed_;
}

double context_routes::engine_fixed() {
    std::lock_guard lock(mutex_);
    return engine_fixed_seconds();
}

route context_routes::measure(dtype t, shape_class c, std::optional<gemm_kernel> kernel) {
    route r;
    // A reproducible plan runs the tiled kernel where vendor is asked for (plan_options::reproducible).
    const auto resolve = [&](gemm_kernel k) { return s_.reproducible && k == gemm_kernel::vendor ? gemm_kernel::tiled : k; };
    bool budgeted_cpu = false;
    for (const device* d : s_.devices) budgeted_cpu = budgeted_cpu || (d->host_addressable() && d->info().budget_given);
    r.direct_possible = !budgeted_cpu && (!kernel || *kernel == gemm_kernel::vendor || *kernel == gemm_kernel::tiled);
    r.measured = !s_.rates;
    std::ostringstream text;
    const std::string what = std::string(to_string(t)) + " " + std::string(to_string(c));

    // The engine: each device's kernel, and (in place) its rate.
    std::vector<kernel_choice> measured(s_.devices.size());
    for (std::size_t i = 0; i < s_.devices.size(); ++i) {
        device& d = *s_.devices[i];
        gemm_kernel k = resolve(kernel.value_or(s_.reproducible ? gemm_kernel::tiled : gemm_kernel::vendor));
        double flops = s_.rates ? s_.rates->flops : 0;
        // TF32 is the vendor kernel's (cuBLAS on tensor cores): no choice to make then.
        const bool choose = !kernel && !s_.reproducible && !s_.rates && s_.math != math_mode::tf32;
        if (choose || (s_.in_place && !s_.rates)) {
            {
                std::unique_lock lock(*s_.device_mutex);  // a probe must not share the devices with a run
                const kept_choice kc = choose_kernel_kept(d, t, c, s_.math);
                measured[i] = kc.choice;
                if (choose && kc.recheck_at) r.recheck_at = std::min(r.recheck_at.value_or(*kc.recheck_at), *kc.recheck_at);
            }
            if (choose) k = measured[i].kernel;
            if (const kernel_rate* dr = measured_rate(measured[i], k)) flops = dr->flops;
            else r.measured = false;
            text << "  kernels         " << d.id() << ": " << rates_text(measured[i]) << " -> " << to_string(k)
                 << (choose ? "" : " (asked for)") << "\n";
        }
        r.device_kernels.push_back(k);
        r.device_flops.push_back(flops);
        r.engine_flops += flops;
    }

    // The direct path: the host's kernels on the calling thread. With one CPU device in place of
    // as many threads as the direct call's, its probes are the host's: vendor is the same OpenBLAS
    // call on the same cores, tiled the same kernel on one of them (its rate over the threads).
    // Not for tiny and small products (probes of 8^3 and 64^3): there each kernel's entry cost
    // weighs, and a device's probe adds the engine's hand-off, which dividing by the threads does
    // not remove (on an Emerald Rapids VM the device's f32 64^3 probe put tiled on one thread at
    // 14.5 GFLOP/s against OpenBLAS's 23.6, so 32-128^3 ran OpenBLAS's misdetected Prescott kernels
    // on the calling thread, about 4x slower than tiled there). The host's own probe runs both.
    if (r.direct_possible) {
        r.host_fixed = direct_call_seconds();
        const device* only = s_.devices.size() == 1 ? s_.devices.front() : nullptr;
        if (s_.rates) {
            r.host_kernel = resolve(kernel.value_or(gemm_kernel::vendor));
            r.host_flops = s_.rates->flops;
        } else {
            kernel_choice hc;
            std::string source;
            if (s_.in_place && only && only->info().threads == host_threads_ && measured.front().measured &&
                c != shape_class::tiny && c != shape_class::small) {
                hc = measured.front();
                for (kernel_rate& x : hc.rates)
                    if (x.kernel == gemm_kernel::tiled) x.flops /= double(std::max(1, host_threads_));
                detail::pick_fastest(hc);
                source = " from " + only->id() + "'s (tiled on one thread)";
            } else {
                const kept_choice kc = choose_host_kernel_kept(t, c, host_threads_);
                hc = kc.choice;
                if (!kernel && !s_.reproducible && kc.recheck_at)
                    r.recheck_at = std::min(r.recheck_at.value_or(*kc.recheck_at), *kc.recheck_at);
            }
            r.host_kernel = resolve(kernel.value_or(s_.reproducible ? gemm_kernel::tiled : hc.kernel));
            const kernel_rate* hr = measured_rate(hc, r.host_kernel);
            r.host_flops = hr ? hr->flops : 0;
            r.direct_possible = hr != nullptr;
            text << "  kernels         direct (calling thread, " << host_threads_ << " OpenBLAS thread(s))" << source
                 << ": " << rates_text(hc) << " -> " << to_string(r.host_kernel) << (kernel ? " (asked for)" : "")
                 << "\n";
        }
    }
    r.kernels_text = text.str();
    if (r.direct_possible) r.host_item_fixed = batched_item_seconds(t, r.host_kernel);

    // In place, the crossover: the direct path while its predicted time is below the engine's (a
    // fixed cost more, at the devices' rates) and below a step's bound (past it the engine cuts the
    // work so that a cancel or a progress report comes within a step).
    if (s_.in_place && r.direct_possible && r.host_flops > 0) {
        // The same kernel on the same cores runs at the same rate either way: the two probes
        // differ only by noise, which must not move the crossover.
        int device_threads = 0;
        for (const device* d : s_.devices) device_threads += d->info().threads;
        const bool same = std::all_of(r.device_kernels.begin(), r.device_kernels.end(), [&](gemm_kernel k) {
            return k == r.host_kernel && k == gemm_kernel::vendor;
        }) && device_threads == host_threads_;
        if (same) r.engine_flops = r.host_flops;
        r.engine_fixed = engine_fixed_seconds();
        const double inf = std::numeric_limits<double>::infinity();
        const double by_bound = s_.step_seconds > 0 ? std::max(0.0, (s_.step_seconds - r.host_fixed) * r.host_flops) : inf;
        const double by_rate = r.engine_flops > r.host_flops
                                   ? std::max(0.0, (r.engine_fixed - r.host_fixed) / (1.0 / r.host_flops - 1.0 / r.engine_flops))
                                   : inf;
        r.flops_limit = std::min(by_bound, by_rate);
        r.flops_limit_unwatched = by_rate;
        const double mnk = r.flops_limit / double(dtype_traits(t).flops_per_multiply_add);
        const double mnk_unwatched = by_rate / double(dtype_traits(t).flops_per_multiply_add);
        char unwatched[120] = "any size (the engine is no faster)";
        if (std::isfinite(mnk_unwatched))
            std::snprintf(unwatched, sizeof unwatched, "up to m*n*k = %.3g (about %.0f^3)", mnk_unwatched,
                          std::cbrt(mnk_unwatched));
        char buf[600];
        if (s_.step_seconds > 0)
            std::snprintf(buf, sizeof buf,
                          "  crossover       %s: direct while its predicted time (%s + flops at %.1f GFLOP/s) is under "
                          "the engine's (%s + flops at %.1f GFLOP/s)%s and, for a call with a cancel flag or a step "
                          "callback, under %.2f s a step: up to m*n*k = %.3g (about %.0f^3); without them %s\n",
                          what.c_str(), seconds_text(r.host_fixed).c_str(), r.host_flops * 1e-9,
                          seconds_text(r.engine_fixed).c_str(), r.engine_flops * 1e-9, same ? ", the same kernel" : "",
                          s_.step_seconds, mnk, std::cbrt(mnk), unwatched);
        else
            std::snprintf(buf, sizeof buf,
                          "  crossover       %s: direct while its predicted time (%s + flops at %.1f GFLOP/s) is under "
                          "the engine's (%s + flops at %.1f GFLOP/s)%s (no step bound): %s\n",
                          what.c_str(), seconds_text(r.host_fixed).c_str(), r.host_flops * 1e-9,
                          seconds_text(r.engine_fixed).c_str(), r.engine_flops * 1e-9, same ? ", the same kernel" : "",
                          unwatched);
        r.crossover_text = buf;
    }
    if (r.recheck_at) r.recheck_tick = detail::tick_clock::at(*r.recheck_at);
    return r;
}

context_routes::plan_key context_routes::key_of(const gemm_problem& q, const gemm_call_options& call,
                                                std::size_t budget) {
    plan_key k;
    k.v = {std::int64_t(q.type),   std::int64_t(q.op_a),     std::int64_t(q.op_b),     q.m,
           q.n,                    q.k,                      std::int64_t(q.layout_a), std::int64_t(q.layout_b),
           std::int64_t(q.layout_c), q.lda,                  q.ldb,                    q.ldc,
           std::int64_t(q.reads_ab) * 2 + std::int64_t(q.reads_c),
           std::int64_t(call.strategy), call.tile_m,         call.tile_n,              call.tile_k,
           std::int64_t(call.transfer) * 16 + std::int64_t(call.kernel ? 1 + int(*call.kernel) : 0),
           std::int64_t(call.cache ? 1 + int(*call.cache) : 0), std::int64_t(budget),
           std::int64_t(watches_steps(call.run)) * 2 + std::int64_t(call.engine)};
    return k;
}

std::size_t context_routes::plan_key_hash::operator()(const plan_key& k) const noexcept {
    std::size_t h = 1469598103934665603ull;
    for (std::int64_t v : k.v) h = (h ^ std::size_t(v)) * 1099511628211ull;
    return h;
}

std::optional<gemm_plan> context_routes::cached_plan(const gemm_problem& q, const gemm_call_options& call,
                                                     std::size_t budget) {
    if (call.rates) return std::nullopt;
    if (!call.kernel && !s_.kernel) {
        // The kernels were the measured choice: a route due for its re-check plans again (get()
        // measures it, and drops the plans made with its old kernels).
        const route* r = routes_[slot(q.type, classify_gemm(q.m, q.n, q.k), std::nullopt)].load(std::memory_order_acquire);
        if (r && recheck_due(*r)) return std::nullopt;
    }
    std::lock_guard lock(plans_mutex_);
    const auto it = plans_.find(key_of(q, call, budget));
    if (it == plans_.end()) return std::nullopt;
    return it->second;
}

void context_routes::keep_plan(const gemm_problem& q, const gemm_call_options& call, std::size_t budget,
                               const gemm_plan& p) {
    if (call.rates) return;
    std::lock_guard lock(plans_mutex_);
    if (plans_.size() >= 256) plans_.clear();  // many shapes: start over rather than track use
    plans_.insert_or_assign(key_of(q, call, budget), p);
}

}  // namespace tilestream::detail
