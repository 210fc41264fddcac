// Short probes of a device's copy bandwidths and GEMM rate for the planner's cost model.
#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/plan.hpp>

#include "core/rate_probes.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <span>
#include <mutex>
#include <tuple>
#include <vector>

namespace tilestream {
namespace {

template <class F>
double median_seconds(int reps, F&& fn) {
    std::vector<double> t;
    fn();  // warm-up
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace

std::vector<std::vector<double>> detail::probe_gemm_times(device& dev, dtype type, std::span<const gemm_kernel> kernels,
                                                          math_mode math, index_t m, index_t n, index_t k, int reps) {
    std::vector<std::vector<double>> times(kernels.size());
    const std::size_t es = size_of(type);
    const std::size_t a_bytes = std::size_t(m) * std::size_t(k) * es, b_bytes = std::size_t(k) * std::size_t(n) * es,
                      c_bytes = std::size_t(m) * std::size_t(n) * es;
    const std::size_t free = dev.budget() - std::min(dev.budget(), dev.bytes_in_use());
    if (a_bytes + b_bytes + c_bytes > free) return times;
    try {
        auto a = dev.allocate(a_bytes), b = dev.allocate(b_bytes), c = dev.allocate(c_bytes);
        auto s = dev.create_stream();
        // Non-zero operands: copy a pattern in once.
        const std::size_t pattern_bytes = std::max(a_bytes, b_bytes);
        auto host = dev.allocate_host_staging(pattern_bytes);
        visit_dtype(type, [&]<class T>() {
            using R = real_type_t<T>;
            for (std::size_t i = 0; i < pattern_bytes / es; ++i) {
                const R v = R((i % 7) + 1) * R(0.125);
                if constexpr (is_complex_v<T>)
                    static_cast<T*>(host.get())[i] = T(v, R(0.5) - v);
                else
                    static_cast<T*>(host.get())[i] = v;
            }
        });
        dev.copy_to_device(*s, a.get(), host.get(), a_bytes);
        dev.copy_to_device(*s, b.get(), host.get(), b_bytes);
        s->synchronize();
        gemm_call call;
        call.type = type;
        call.m = m;
        call.n = n;
        call.k = k;
        call.a = a.get();
        call.b = b.get();
        call.c = c.get();
        call.lda = std::max<index_t>(1, k);
        call.ldb = std::max<index_t>(1, n);
        call.ldc = std::max<index_t>(1, n);
        call.math = math;
        // Kernels alternate (a warm-up of each first), so that a busy machine's drift falls on all.
        std::vector<bool> failed(kernels.size(), false);
        for (int r = -1; r < reps; ++r)
            for (std::size_t i = 0; i < kernels.size(); ++i) {
                if (failed[i]) continue;
                call.kernel = kernels[i];
                try {
                    const auto t0 = std::chrono::steady_clock::now();
                    dev.gemm(*s, call);
                    s->synchronize();
                    if (r >= 0) times[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
                } catch (const out_of_budget&) {
                    throw;
                } catch (const error&) {
                    if (kernels.size() == 1) throw;
                    failed[i] = true;  // this kernel cannot run here (no fp64, no CLBlast): the others go on
                    times[i].clear();
                }
            }
    } catch (const out_of_budget&) {
        // another caller took the memory in the meantime: not measured
        for (auto& t : times) t.clear();
    }
    return times;
}

std::vector<std::optional<double>> detail::probe_gemm_seconds(device& dev, dtype type, std::span<const gemm_kernel> kernels,
                                                              math_mode math, index_t m, index_t n, index_t k, int reps) {
    std::vector<std::optional<double>> out(kernels.size());
    auto times = probe_gemm_times(dev, type, kernels, math, m, n, k, reps);
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        if (times[i].empty()) continue;
        std::sort(times[i].begin(), times[i].end());
        out[i] = times[i][times[i].size() / 2];
    }
    return out;
}

device_rates measure_rates(device& dev, dtype type, gemm_kernel kernel, math_mode math) {
    static std::mutex mutex;
    // Never destroyed: a run still in flight at exit (a BLAS drop-in client's thread) may read it.
    static auto& cache = *new std::map<std::tuple<std::string, int, int, int, int>, device_rates>;
    const auto key = std::make_tuple(dev.id(), dev.info().threads, int(type), int(kernel), int(math));
    {
        std::lock_guard lock(mutex);
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
    // Each probe runs only when its buffers fit what the budget leaves (a probe that does not fit
    // keeps the default rate); results are cached only when every probe ran.
    device_rates r;
    device* const one[] = {&dev};
    r.host_memory = computes_on_host_cores(one);
    const std::size_t free = dev.budget() - std::min(dev.budget(), dev.bytes_in_use());
    const std::size_t es = size_of(type);
    bool copies_measured = false, gemm_measured = false;
    // Copies: 16 MiB (less on small budgets, at least 64 KiB) from a staging buffer, as the pipeline copies;
    // never more than half of what is free: a caller planning on the same device meanwhile reads the
    // probe's buffer as memory outside runs (four Python threads on one context of 64 KiB devices:
    // a 64 KiB probe left them a 0 B budget, 6 runs in 15).
    const std::size_t min_copy_bytes = 64 * 1024;
    const std::size_t copy_bytes = std::min(std::max(min_copy_bytes, std::min<std::size_t>(16u << 20, free / 4)), free / 2);
    if (copy_bytes > 0) {
        try {
            auto buf = dev.allocate(copy_bytes);
            auto host = dev.allocate_host_staging(copy_bytes);
            std::fill_n(static_cast<char*>(host.get()), copy_bytes, char(1));
            auto s = dev.create_stream();
            r.h2d = double(copy_bytes) / median_seconds(3, [&] {
                        dev.copy_to_device(*s, buf.get(), host.get(), copy_bytes);
                        s->synchronize();
                    });
            r.d2h = double(copy_bytes) / median_seconds(3, [&] {
                        dev.copy_to_host(*s, host.get(), buf.get(), copy_bytes);
                        s->synchronize();
                    });
            copies_measured = true;
        } catch (const out_of_budget&) {
            // Another caller took the memory in the meantime: keep the default copy rates.
        }
    }
    // GEMM rate: the largest square up to 1024 (2048 on GPUs) whose operands fit a quarter of the
    // budget, at least 64 (smaller squares say little about the rate of real tiles). An emulated
    // device (OpenCL on the host's cores) runs its naive kernel near 1 GFLOP/s: 256 keeps its probe
    // well under a second.
    index_t n = dev.info().kind == device_kind::cuda ? 2048 : dev.info().emulated ? 256 : 1024;
    while (n > 64 && 3 * std::size_t(n) * std::size_t(n) * es > free / 4) n /= 2;
    const gemm_kernel probed[] = {kernel};
    if (const auto t = detail::probe_gemm_seconds(dev, type, probed, math, n, n, n, 3).front()) {
        r.flops = double(dtype_traits(type).flops_per_multiply_add) * double(n) * double(n) * double(n) / *t;
        gemm_measured = true;
    }
    r.measured = copies_measured && gemm_measured;
    if (!r.measured) return r;
    std::lock_guard lock(mutex);
    cache[key] = r;
    return r;
}

}  // namespace tilestream
