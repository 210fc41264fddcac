// The automatic kernel choice: a device's kernels (vendor, tiled) timed per precision and shape
// class with a short probe each (best of 5, alternated), the fastest taken; a verdict against vendor
// only when a second measurement agrees, and re-checked once a while later; the same for the host's
// kernels on the calling thread (the direct path), and the direct call's fixed cost.
#include <tilestream/error.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/plan.hpp>

#include "core/gemm_direct.hpp"
#include "core/rate_probes.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace tilestream {

std::string_view to_string(shape_class c) noexcept {
    switch (c) {
        case shape_class::tiny: return "tiny";
        case shape_class::line: return "line";
        case shape_class::small: return "small";
        case shape_class::thin_k: return "thin-k";
        case shape_class::thin_m: return "thin-m";
        case shape_class::thin_n: return "thin-n";
        case shape_class::square: return "square";
    }
    return "?";
}

shape_class classify_gemm(index_t m, index_t n, index_t k) noexcept {
    const index_t most = std::max({m, n, k});
    if (most <= 16) return shape_class::tiny;
    if (std::min(m, n) == 1) return shape_class::line;
    if (most <= 128) return shape_class::small;
    const index_t mn = std::min(m, n);
    if (k < 64 && k <= mn) return shape_class::thin_k;
    if (mn < 64) return m <= n ? shape_class::thin_m : shape_class::thin_n;
    return shape_class::square;
}

detail::probe_shape detail::probe_of(shape_class c, index_t side) noexcept {
    // A thin side of 16: what panels and skinny products have (4096x16x4096, 16x4096x4096). It pads
    // a tiled micro-tile as such shapes do (half of a 32-wide nr, 16 of 24 rows of two 12-row mr),
    // where a wider probe side (32, a whole nr) would hide that waste and favour tiled.
    switch (c) {
        case shape_class::tiny: return {8, 8, 8};  // mid-band: the entry costs, not the arithmetic
        case shape_class::line: return {1, side, side};  // a row vector times a matrix (vendor: ?gemv)
        case shape_class::small: return {64, 64, 64};
        case shape_class::thin_k: return {side, side, 32};  // k is not padded by a micro-tile
        case shape_class::thin_m: return {16, side, side};
        case shape_class::thin_n: return {side, 16, side};
        case shape_class::square: break;
    }
    return {side, side, side};
}

bool detail::confirm_on_larger_probe(const kernel_choice& c, shape_class cls) noexcept {
    return cls == shape_class::square && c.measured && c.kernel != gemm_kernel::vendor;
}

namespace {

using clock = std::chrono::steady_clock;
using detail::kernel_verdict;
using detail::probe_of;
using detail::probe_shape;
using detail::probe_timings;

constexpr gemm_kernel candidates[] = {gemm_kernel::vendor, gemm_kernel::tiled};

double flops_of(dtype t, const probe_shape& s) {
    return double(dtype_traits(t).flops_per_multiply_add) * double(s.m) * double(s.n) * double(s.k);
}

/// Seconds per call of each of fns in 5 batches of calls at least 200 us long each, the functions
/// alternating (after a warm-up each).
std::vector<std::vector<double>> batch_seconds(const std::vector<std::function<void()>>& fns) {
    std::vector<int> calls(fns.size(), 1);
    for (std::size_t f = 0; f < fns.size(); ++f) {
        fns[f]();  // warm-up: first-touch pages, OpenBLAS's threads and buffers
        for (;;) {
            const auto t0 = clock::now();
            for (int i = 0; i < calls[f]; ++i) fns[f]();
            const double t = std::chrono::duration<double>(clock::now() - t0).count();
            if (t >= 200e-6 || calls[f] >= (1 << 20)) break;
            calls[f] *= 4;
        }
    }
    std::vector<std::vector<double>> batches(fns.size());
    for (int b = 0; b < 5; ++b)
        for (std::size_t f = 0; f < fns.size(); ++f) {
            const auto t0 = clock::now();
            for (int i = 0; i < calls[f]; ++i) fns[f]();
            batches[f].push_back(std::chrono::duration<double>(clock::now() - t0).count() / calls[f]);
        }
    return batches;
}

/// The median of batch_seconds for each of fns (a fixed cost per call, what a call typically pays).
std::vector<double> seconds_per_call(const std::vector<std::function<void()>>& fns) {
    std::vector<double> out;
    for (auto& v : batch_seconds(fns)) {
        std::sort(v.begin(), v.end());
        out.push_back(v[v.size() / 2]);
    }
    return out;
}

/// Host operands of a probe: A, B, C row-major and packed, non-zero.
template <class T>
struct host_operands {
    host_matrix<T> a, b, c;
    explicit host_operands(const probe_shape& s) : a(s.m, s.k), b(s.k, s.n), c(s.m, s.n) {
        using R = real_type_t<T>;
        for (host_matrix<T>* x : {&a, &b, &c})
            for (index_t i = 0; i < x->rows() * x->cols(); ++i) {
                const R v = R((i % 7) + 1) * R(0.125);
                if constexpr (is_complex_v<T>)
                    x->data()[i] = T(v, R(0.5) - v);
                else
                    x->data()[i] = v;
            }
    }
    gemm_call call(gemm_kernel k) {
        return detail::host_gemm_call<T>(op::n, op::n, T(1), a.view(), b.view(), T(0), c.view(), k);
    }
};

std::mutex& cache_mutex() {
    static std::mutex m;
    return m;
}

/// A kept verdict and when (if ever) it is re-checked.
struct kept_verdict {
    kernel_verdict verdict;
    std::optional<clock::time_point> recheck_at;
    bool rechecking = false;  ///< a call is making the re-check
};

// The kept choices (never destroyed: a run still in flight at exit, a BLAS drop-in client's
// thread, may read them), and the test hook's source; all under cache_mutex().
using device_key = std::tuple<std::string, int, int, int, int>;
using host_key = std::tuple<int, int, int>;
using scripted_fn = std::function<probe_timings(const detail::scripted_kernel_probes::request&)>;
struct kept_state {
    std::map<device_key, kept_verdict> devices;
    std::map<host_key, kept_verdict> host;
    scripted_fn scripted;
    double recheck_seconds = 10;
    std::map<std::tuple<int, index_t, index_t, index_t>, detail::stack_choice> stacks;  ///< choose_stack_kernel's
};
kept_state& state() {
    static auto& s = *new kept_state;
    return s;
}

/// The source of choose_kernel's and choose_host_kernel's timings: the test hook's while one is set.
std::optional<detail::probe_source> scripted_source(std::string where, dtype t) {
    std::lock_guard lock(cache_mutex());
    if (!state().scripted) return std::nullopt;
    return [fn = state().scripted, where = std::move(where), t](const probe_shape& s) { return fn({where, t, s}); };
}

/// The kept verdict of `key` in `cache`, decided by `decide` the first time; a verdict against
/// vendor is re-checked (`recheck`) by the first call from its re-check time on.
template <class Map, class Key, class Decide, class Recheck>
detail::kept_choice kept(Map& cache, const Key& key, Decide&& decide, Recheck&& recheck) {
    std::optional<kernel_verdict> due;
    {
        std::lock_guard lock(cache_mutex());
        if (auto it = cache.find(key); it != cache.end()) {
            kept_verdict& k = it->second;
            const auto now = clock::now();
            if (!k.recheck_at || now < *k.recheck_at) return {k.verdict.choice, k.recheck_at};
            // This call makes the re-check. Others meanwhile keep the verdict, asked to come back
            // soon (a context's route then measures again and finds the final choice).
            if (k.rechecking) return {k.verdict.choice, now + std::chrono::milliseconds(10)};
            k.rechecking = true;
            due = k.verdict;
        }
    }
    if (due) {
        kernel_choice c;
        try {
            c = recheck(*due);
        } catch (...) {
            std::lock_guard lock(cache_mutex());
            if (auto it = cache.find(key); it != cache.end()) it->second.rechecking = false;
            throw;
        }
        std::lock_guard lock(cache_mutex());
        if (auto it = cache.find(key); it != cache.end()) {
            it->second.verdict.choice = c;
            it->second.recheck_at.reset();
            it->second.rechecking = false;
        }
        return {c, std::nullopt};
    }
    kernel_verdict v = decide();
    if (!v.complete) return {v.choice, std::nullopt};  // measured again by the next call
    std::lock_guard lock(cache_mutex());
    std::optional<clock::time_point> at;
    // A verdict against vendor may come from load on the machine when it was measured (OpenBLAS's
    // threads suffer most from it, and a busy spell, a build, outlasts both measurements): a
    // process that started while the machine was busy would keep it for its whole life. One
    // re-check a while later, by a call of the class, lets it recover; after it no probe runs again.
    if (detail::displaces_vendor(v.choice))
        at = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(state().recheck_seconds));
    cache.insert_or_assign(key, kept_verdict{v, at});
    return {v.choice, at};
}

}  // namespace

std::span<const gemm_kernel> detail::kernel_candidates() noexcept { return candidates; }

kernel_choice detail::choice_from_timings(dtype t, const probe_shape& s, const probe_timings& p) {
    kernel_choice choice;
    choice.m = s.m;
    choice.n = s.n;
    choice.k = s.k;
    for (std::size_t i = 0; i < std::size(candidates); ++i) {
        kernel_rate r;
        r.kernel = candidates[i];
        const std::vector<double>* times = i < p.seconds.size() ? &p.seconds[i] : nullptr;
        if (times && !times->empty()) {
            // Best of N: interference (other processes, a descheduled thread) only adds time, so
            // the fastest run is the kernel's capability on this machine; a median keeps the load.
            const double fastest = *std::min_element(times->begin(), times->end());
            r.measured = fastest > 0;
            if (r.measured) r.flops = flops_of(t, s) / fastest;
        }
        if (!r.measured) r.note = i < p.notes.size() && !p.notes[i].empty() ? p.notes[i] : "not measured";
        choice.rates.push_back(std::move(r));
    }
    detail::pick_fastest(choice);
    return choice;
}

bool detail::displaces_vendor(const kernel_choice& c) noexcept {
    if (!c.measured || c.kernel == gemm_kernel::vendor) return false;
    for (const kernel_rate& r : c.rates)
        if (r.kernel == gemm_kernel::vendor) return r.measured;
    return false;
}

void detail::pick_fastest(kernel_choice& c) {
    // Within 5% of vendor's rate another kernel does not displace it: that is the probes' noise on a
    // busy machine, and the vendor library is tuned for shapes the probe does not cover.
    const kernel_rate* vendor = nullptr;
    const kernel_rate* best = nullptr;
    for (const kernel_rate& r : c.rates) {
        if (!r.measured) continue;
        if (r.kernel == gemm_kernel::vendor) vendor = &r;
        if (!best || r.flops > best->flops) best = &r;
    }
    c.measured = best != nullptr;
    if (!best) return;
    c.kernel = vendor && vendor->flops * 1.05 >= best->flops ? gemm_kernel::vendor : best->kernel;
}

kernel_verdict detail::decide_kernel(dtype t, shape_class c, index_t side, bool larger_fits, const probe_source& source) {
    kernel_verdict v;
    v.first = probe_of(c, side);
    const auto measure = [&](const probe_shape& s) {
        const probe_timings p = source(s);
        v.complete = v.complete && p.complete;
        return choice_from_timings(t, s, p);
    };
    v.choice = measure(v.first);
    if (!displaces_vendor(v.choice)) {
        // A kernel vendor cannot be measured against (no CLBlast, no fp64 there) still gets the
        // square class's larger probe: the verdict applies to every size of the class.
        if (confirm_on_larger_probe(v.choice, c) && larger_fits)
            if (kernel_choice larger = measure(probe_of(c, 2 * side)); larger.measured) v.choice = std::move(larger);
        return v;
    }
    // A verdict against vendor needs a second, independent measurement that agrees, else vendor
    // stays. The probes alternate the kernels and take each one's fastest run, which absorbs a
    // short interruption; what they cannot absorb is a burst of load that hits one kernel's runs
    // more than the other's (OpenBLAS's threads wait for each other, so one descheduled thread
    // stalls them all, where the tiled kernel's workers share the work out). A second measurement a
    // little later has to see the same verdict. The square class's is its probe of twice the side,
    // which it needs anyway (a vendor library gains with size, and the verdict applies to every
    // size of the class): that verdict and its rates stand, so the first call pays no more than
    // before. Other classes measure their small probe once more (a few milliseconds).
    // (A square probe of twice the side that does not fit what the budget leaves: the same probe.)
    const gemm_kernel first = v.choice.kernel;
    const bool larger = confirm_on_larger_probe(v.choice, c) && larger_fits;
    kernel_choice second = measure(larger ? probe_of(c, 2 * side) : v.first);
    if (!second.measured) {
        v.complete = false;  // not measured this time: vendor for now, measured again by a later call
        v.choice.kernel = gemm_kernel::vendor;
        return v;
    }
    // The second measurement's rates are kept: they agree with the verdict either way.
    if (second.kernel != first) second.kernel = gemm_kernel::vendor;
    v.choice = std::move(second);
    return v;
}

kernel_choice detail::recheck_kernel(dtype t, const kernel_verdict& v, const probe_source& source) {
    // On the class's first probe (the square class's smaller one, an eighth of the larger one's
    // cost): vendor there stands for the class (a vendor library gains with size); the other
    // kernel still ahead keeps the verdict, with the rates it was decided on.
    kernel_choice again = choice_from_timings(t, v.first, source(v.first));
    if (!again.measured || again.kernel == v.choice.kernel) return v.choice;
    again.kernel = gemm_kernel::vendor;
    return again;
}

double detail::kernel_recheck_seconds() {
    std::lock_guard lock(cache_mutex());
    return state().recheck_seconds;
}

detail::scripted_kernel_probes::scripted_kernel_probes(std::function<probe_timings(const request&)> source,
                                                       double recheck) {
    std::lock_guard lock(cache_mutex());
    state() = kept_state{{}, {}, std::move(source), recheck};
}

detail::scripted_kernel_probes::~scripted_kernel_probes() {
    std::lock_guard lock(cache_mutex());
    state() = kept_state{};
}

detail::kept_choice detail::choose_kernel_kept(device& dev, dtype t, shape_class c, math_mode math) {
    const std::size_t es = size_of(t);
    const std::size_t free = dev.budget() - std::min(dev.budget(), dev.bytes_in_use());
    index_t side = dev.info().kind == device_kind::cuda ? 2048 : dev.info().emulated ? 256 : 512;
    const auto bytes = [&](const probe_shape& s) {
        return (std::size_t(s.m) * std::size_t(s.k) + std::size_t(s.k) * std::size_t(s.n) + std::size_t(s.m) * std::size_t(s.n)) * es;
    };
    while (side > 64 && bytes(probe_of(c, side)) > free / 4) side /= 2;
    std::vector<gemm_kernel> run;
    for (gemm_kernel k : candidates)
        if (dev.supports(k)) run.push_back(k);
    probe_source source = [&](const probe_shape& s) {
        probe_timings p;
        const auto times = detail::probe_gemm_times(dev, t, run, math, s.m, s.n, s.k, 5);
        const bool any = std::any_of(times.begin(), times.end(), [](auto& x) { return !x.empty(); });
        for (gemm_kernel k : candidates) {
            const auto at = std::find(run.begin(), run.end(), k);
            p.seconds.emplace_back();
            p.notes.emplace_back();
            if (at == run.end()) {
                p.notes.back() = "not on this device";
            } else if (const auto& x = times[std::size_t(at - run.begin())]; !x.empty()) {
                p.seconds.back() = x;
            } else if (run.size() > 1 && any) {
                p.notes.back() = "failed on this device";
            } else {
                p.notes.back() = "the probe does not fit the budget";
                p.complete = false;
            }
        }
        return p;
    };
    if (auto s = scripted_source(dev.id(), t)) source = std::move(*s);
    const device_key key{dev.id(), dev.info().threads, int(t), int(c), int(math)};
    return kept(
        state().devices, key,
        [&] { return detail::decide_kernel(t, c, side, bytes(probe_of(c, 2 * side)) <= free / 4, source); },
        [&](const kernel_verdict& v) { return detail::recheck_kernel(t, v, source); });
}

std::optional<kernel_choice> detail::known_kernel(const device& dev, dtype t, shape_class c, math_mode math) {
    std::lock_guard lock(cache_mutex());
    const auto it = state().devices.find(device_key{dev.id(), dev.info().threads, int(t), int(c), int(math)});
    if (it == state().devices.end()) return std::nullopt;
    return it->second.verdict.choice;
}

kernel_choice choose_kernel(device& dev, dtype t, shape_class c, math_mode math) {
    return detail::choose_kernel_kept(dev, t, c, math).choice;
}

detail::kept_choice detail::choose_host_kernel_kept(dtype t, shape_class c, int openblas_threads) {
    probe_source source = [&](const probe_shape& s) {
        probe_timings p;
        visit_dtype(t, [&]<class T>() {
            host_operands<T> ops(s);
            std::vector<std::function<void()>> calls;
            for (gemm_kernel k : candidates)
                calls.push_back([call = ops.call(k), openblas_threads] { detail::host_gemm(call, openblas_threads); });
            try {
                p.seconds = batch_seconds(calls);
            } catch (const error& e) {
                p.seconds.clear();  // OpenBLAS refused (an address-space limit)
                p.notes.assign(std::size(candidates), e.what());
            }
        });
        return p;
    };
    if (auto s = scripted_source("host", t)) source = std::move(*s);
    return kept(
        state().host, host_key{int(t), int(c), openblas_threads},
        [&] { return detail::decide_kernel(t, c, 512, true, source); },
        [&](const kernel_verdict& v) { return detail::recheck_kernel(t, v, source); });
}

kernel_choice choose_host_kernel(dtype t, shape_class c, int openblas_threads) {
    return detail::choose_host_kernel_kept(t, c, openblas_threads).choice;
}

double detail::batched_item_seconds(dtype t, gemm_kernel k) {
    static auto& cache = *new std::map<std::pair<int, int>, double>;
    const auto key = std::make_pair(int(t), int(k));
    {
        std::lock_guard lock(cache_mutex());
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
    double seconds = 1e-6;
    visit_dtype(t, [&]<class T>() {
        host_operands<T> ops(probe_shape{1, 1, 1});
        gemm_batched_call g;
        g.call = ops.call(k);
        g.count = 64;  // strides 0: the same 1x1x1 product 64 times, one after the other
        try {
            seconds = seconds_per_call({[&] { detail::host_gemm_batched(g); }}).front() / double(g.count);
        } catch (const error&) {
        }
    });
    std::lock_guard lock(cache_mutex());
    cache.emplace(key, seconds);
    return seconds;
}

detail::stack_choice detail::choose_stack_kernel(dtype t, index_t m, index_t n, index_t k) {
    const auto bucket = [](index_t x) {
        index_t b = 1;
        while (b < x) b *= 2;
        return b;
    };
    const probe_shape shape{bucket(m), bucket(n), bucket(k)};
    const auto key = std::make_tuple(int(t), shape.m, shape.n, shape.k);
    {
        std::lock_guard lock(cache_mutex());
        if (auto it = state().stacks.find(key); it != state().stacks.end()) return it->second;
    }
    // About 64 KiB of operands a product set (at least 16 products, at most 1024), so the probe's
    // stack lives in the caches as a stack of the bucket's products would, and one run is tens of
    // microseconds at most (batch_seconds repeats it to 200 us).
    const double product_bytes = double(size_of(t)) * double(shape.m * shape.k + shape.k * shape.n + shape.m * shape.n);
    const index_t count = index_t(std::clamp(65536.0 / product_bytes, 16.0, 1024.0));
    probe_source source = [&](const probe_shape& s) {
        probe_timings p;
        visit_dtype(t, [&]<class T>() {
            std::vector<T> a(std::size_t(count * s.m * s.k)), b(std::size_t(count * s.k * s.n)), c(std::size_t(count * s.m * s.n));
            using R = real_type_t<T>;
            for (std::vector<T>* x : {&a, &b, &c})
                for (std::size_t i = 0; i < x->size(); ++i) {
                    const R v = R((i % 7) + 1) * R(0.125);
                    if constexpr (is_complex_v<T>)
                        (*x)[i] = T(v, R(0.5) - v);
                    else
                        (*x)[i] = v;
                }
            std::vector<std::function<void()>> calls;
            for (gemm_kernel kernel : candidates) {
                gemm_batched_call g;
                g.call = detail::host_gemm_call<T>(op::n, op::n, T(1), host_matrix_view<const T>(a.data(), s.m, s.k),
                                                   host_matrix_view<const T>(b.data(), s.k, s.n), T(0),
                                                   host_matrix_view<T>(c.data(), s.m, s.n), kernel);
                g.count = count;
                g.stride_a = s.m * s.k;
                g.stride_b = s.k * s.n;
                g.stride_c = s.m * s.n;
                calls.push_back([g] { detail::host_gemm_batched(g); });
            }
            try {
                p.seconds = batch_seconds(calls);
                for (auto& v : p.seconds)
                    for (double& x : v) x /= double(count);  // per product
            } catch (const error& e) {
                p.seconds.clear();
                p.notes.assign(std::size(candidates), e.what());
            }
        });
        return p;
    };
    if (auto sc = scripted_source("host-stack", t)) source = std::move(*sc);
    stack_choice out;
    out.probe = shape;
    out.choice = choice_from_timings(t, shape, source(shape));
    // A verdict against vendor stands only when a second measurement agrees (decide_kernel's rule).
    if (displaces_vendor(out.choice)) {
        kernel_choice second = choice_from_timings(t, shape, source(shape));
        if (second.measured && second.kernel != out.choice.kernel) second.kernel = gemm_kernel::vendor;
        if (second.measured) out.choice = std::move(second);
    }
    if (const kernel_rate* r = nullptr; out.choice.measured) {
        for (const kernel_rate& x : out.choice.rates)
            if (x.kernel == out.choice.kernel && x.measured) r = &x;
        if (r) out.seconds_per_product = flops_of(t, shape) / r->flops;
    }
    std::lock_guard lock(cache_mutex());
    state().stacks.emplace(key, out);
    return out;
}

double direct_call_seconds() {
    static const double seconds = [] {
        host_operands<double> ops(probe_shape{1, 1, 1});
        const gemm_call call = ops.call(gemm_kernel::vendor);
        try {
            return seconds_per_call({[&] { detail::host_gemm(call, 1); }}).front();
        } catch (const error&) {
            return 1e-6;
        }
    }();
    return seconds;
}

}  // namespace tilestream
