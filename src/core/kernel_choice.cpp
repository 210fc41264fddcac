// The automatic kernel choice: a device's kernels (vendor, tiled) timed once per precision and
// shape class with a short probe each, the fastest taken; the same for the host's kernels on the
// calling thread (the direct path), and the direct call's fixed cost.
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
        case shape_class::small: return "small";
        case shape_class::thin_k: return "thin-k";
        case shape_class::thin_m: return "thin-m";
        case shape_class::thin_n: return "thin-n";
        case shape_class::square: return "square";
    }
    return "?";
}

shape_class classify_gemm(index_t m, index_t n, index_t k) noexcept {
    if (std::max({m, n, k}) <= 128) return shape_class::small;
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

using detail::probe_of;
using detail::probe_shape;

constexpr gemm_kernel candidates[] = {gemm_kernel::vendor, gemm_kernel::tiled};

double flops_of(dtype t, const probe_shape& s) {
    return double(dtype_traits(t).flops_per_multiply_add) * double(s.m) * double(s.n) * double(s.k);
}

/// Seconds per call of each of fns: batches of calls at least 200 us long, the functions
/// alternating, the median of 5 batches each.
std::vector<double> seconds_per_call(const std::vector<std::function<void()>>& fns) {
    using clock = std::chrono::steady_clock;
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
    std::vector<double> out;
    for (auto& v : batches) {
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

}  // namespace

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

kernel_choice choose_kernel(device& dev, dtype t, shape_class c, math_mode math) {
    // Never destroyed: a run still in flight at exit (a BLAS drop-in client's thread) may read it.
    static auto& cache = *new std::map<std::tuple<std::string, int, int, int, int>, kernel_choice>;
    const auto key = std::make_tuple(dev.id(), dev.info().threads, int(t), int(c), int(math));
    {
        std::lock_guard lock(cache_mutex());
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
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
    bool complete = true;
    const auto measure = [&](const probe_shape& s) {
        kernel_choice choice;
        choice.m = s.m;
        choice.n = s.n;
        choice.k = s.k;
        const auto seconds = detail::probe_gemm_seconds(dev, t, run, math, s.m, s.n, s.k, 5);
        for (gemm_kernel k : candidates) {
            kernel_rate r;
            r.kernel = k;
            const auto at = std::find(run.begin(), run.end(), k);
            if (at == run.end()) {
                r.note = "not on this device";
            } else if (const auto sec = seconds[std::size_t(at - run.begin())]) {
                r.flops = flops_of(t, s) / *sec;
                r.measured = true;
            } else {
                r.note = seconds.size() > 1 && std::any_of(seconds.begin(), seconds.end(), [](auto& x) { return x.has_value(); })
                             ? "failed on this device"
                             : "the probe does not fit the budget";
                complete = complete && r.note != "the probe does not fit the budget";
            }
            choice.rates.push_back(std::move(r));
        }
        detail::pick_fastest(choice);
        return choice;
    };
    kernel_choice choice = measure(probe_of(c, side));
    if (detail::confirm_on_larger_probe(choice, c) && bytes(probe_of(c, 2 * side)) <= free / 4) {
        // The larger probe's verdict stands (with its rates, which it was decided on).
        if (kernel_choice larger = measure(probe_of(c, 2 * side)); larger.measured) choice = std::move(larger);
    }
    if (complete) {
        std::lock_guard lock(cache_mutex());
        cache.emplace(key, choice);
    }
    return choice;
}

kernel_choice choose_host_kernel(dtype t, shape_class c, int openblas_threads) {
    static auto& cache = *new std::map<std::tuple<int, int, int>, kernel_choice>;
    const auto key = std::make_tuple(int(t), int(c), openblas_threads);
    {
        std::lock_guard lock(cache_mutex());
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
    const auto measure = [&](const probe_shape& s) {
        kernel_choice choice;
        choice.m = s.m;
        choice.n = s.n;
        choice.k = s.k;
        visit_dtype(t, [&]<class T>() {
            host_operands<T> ops(s);
            std::vector<std::function<void()>> calls;
            for (gemm_kernel k : candidates)
                calls.push_back([call = ops.call(k), openblas_threads] { detail::host_gemm(call, openblas_threads); });
            std::vector<double> per_call;
            std::string failure;
            try {
                per_call = seconds_per_call(calls);
            } catch (const error& e) {
                failure = e.what();  // OpenBLAS refused (an address-space limit)
            }
            for (std::size_t i = 0; i < std::size(candidates); ++i) {
                kernel_rate r;
                r.kernel = candidates[i];
                r.measured = failure.empty();
                if (r.measured) r.flops = flops_of(t, s) / per_call[i];
                r.note = failure;
                choice.rates.push_back(std::move(r));
            }
        });
        detail::pick_fastest(choice);
        return choice;
    };
    kernel_choice choice = measure(probe_of(c, 512));
    if (detail::confirm_on_larger_probe(choice, c))
        if (kernel_choice larger = measure(probe_of(c, 1024)); larger.measured) choice = std::move(larger);
    std::lock_guard lock(cache_mutex());
    cache.emplace(key, choice);
    return choice;
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
