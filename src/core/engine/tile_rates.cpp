// Probes of a device's tile operations other than GEMM (device_rates::tile_rates).
#include "core/engine/tile_rates.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace tilestream::detail::engine {

namespace {

/// The probe's operation of `kind` at `order` on buffers a, b, c (column-major, leading dimension
/// order), alpha 1 and beta 0.5 (C read, as the routines' updates read it).
tile_op probe_op(tile_kind kind, dtype type, gemm_kernel kernel, index_t order, void* a, void* b, void* c) {
    tile_op op;
    op.kind = kind;
    op.type = type;
    op.kernel = kernel;
    op.m = op.n = op.k = order;
    op.alpha = 1.0;
    op.beta = 0.5;
    op.a = {a, order, layout::col_major};
    op.b = {b, order, layout::col_major};
    op.c = {c, order, layout::col_major};
    if (kind == tile_kind::getrf) op.b = {b, 1, layout::col_major};  // the pivots, 1 x order
    return op;
}

}  // namespace

double tile_probe_flops(tile_kind kind, dtype type, index_t order) {
    return probe_op(kind, type, gemm_kernel::vendor, order, nullptr, nullptr, nullptr).flops();
}

std::vector<double> probe_tile_seconds(device& dev, dtype type, tile_kind kind, gemm_kernel kernel,
                                       std::span<const index_t> orders, int reps) {
    std::vector<double> out;
    if (orders.empty() || reps < 1 || !dev.supports(kind, type, kernel)) return out;
    const std::size_t es = size_of(type);
    const index_t largest = *std::max_element(orders.begin(), orders.end());
    const std::size_t bytes = std::size_t(largest) * std::size_t(largest) * es;
    // Against the budget alone: allocate() reclaims memory the context's idle runs keep.
    if (3 * bytes + std::size_t(largest) * es > dev.budget()) return out;
    // potrf's info, written in stream order: it outlives the stream (destroyed first, after its
    // work), also when a step throws.
    int info = 0;
    try {
        auto a = dev.allocate(bytes), b = dev.allocate(bytes), c = dev.allocate(bytes);
        auto piv = dev.allocate(std::size_t(largest) * es);
        auto host = dev.allocate_host_staging(bytes);
        auto s = dev.create_stream();
        for (index_t n : orders) {
            // Diagonally dominant (n on the diagonal, off-diagonal values at most 1.5/n, a real
            // diagonal): the triangle potrf reads, mirrored, is positive definite, and trsm and
            // getrf are well conditioned; every element non-zero. The same values in A, B and C.
            visit_dtype(type, [&]<class T>() {
                using R = real_type_t<T>;
                T* h = static_cast<T*>(host.get());
                for (index_t j = 0; j < n; ++j)
                    for (index_t i = 0; i < n; ++i) {
                        const R v = R(((i * 7 + j * 13) % 11) + 1) / R(11 * n);
                        R re = i == j ? R(n) : v, im = i == j ? R(0) : (i > j ? v : -v) / R(2);
                        if constexpr (is_complex_v<T>)
                            h[i + j * n] = T(re, im);
                        else
                            h[i + j * n] = re + im;
                    }
            });
            const std::size_t nb = std::size_t(n) * std::size_t(n) * es;
            dev.copy_to_device(*s, a.get(), host.get(), nb);
            dev.copy_to_device(*s, b.get(), host.get(), nb);
            s->synchronize();
            info = 0;
            tile_op op = probe_op(kind, type, kernel, n, a.get(), kind == tile_kind::getrf ? piv.get() : b.get(), c.get());
            if (kind == tile_kind::potrf) op.info = &info;
            std::vector<double> t;
            for (int r = -1; r < reps; ++r) {
                dev.copy_to_device(*s, c.get(), host.get(), nb);  // C is overwritten by each run
                s->synchronize();
                const auto t0 = std::chrono::steady_clock::now();
                dev.execute(*s, op);
                s->synchronize();
                if (r >= 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            // A factorization that stopped early (it should not on these values) timed less work.
            if (info != 0) return {};
            std::sort(t.begin(), t.end());
            out.push_back(t[t.size() / 2]);
        }
    } catch (const error&) {
        // Not measured (the memory was taken meanwhile, or the kernel failed): the model keeps its
        // other rates, and the call goes on; a real fault shows again when the call runs.
        out.clear();
    }
    return out;
}

std::optional<tile_rate> fit_tile_rate(double flops_small, double seconds_small, double flops_large, double seconds_large) {
    if (!(flops_small > 0 && seconds_small > 0 && flops_large > flops_small && seconds_large > 0)) return std::nullopt;
    tile_rate r;
    if (seconds_large > seconds_small) {
        const double slope = (flops_large - flops_small) / (seconds_large - seconds_small);
        const double fixed = seconds_small - flops_small / slope;
        if (fixed >= 0) {
            r.flops = slope;
            r.call_seconds = fixed;
            return r;
        }
        // A slope that leaves the smaller call a negative fixed cost: rates alone, the larger call's.
        r.flops = flops_large / seconds_large;
        return r;
    }
    // The larger call no slower than the smaller one: both are mostly fixed cost (the smaller time),
    // the larger call's flops taking a tenth of its time at most.
    r.call_seconds = seconds_large;
    r.flops = flops_large / (0.1 * seconds_large);
    return r;
}

std::optional<tile_rate> measured_tile_rate(device& dev, dtype type, tile_kind kind, gemm_kernel kernel) {
    // Never destroyed: a run still in flight at exit may read them.
    static std::mutex& mutex = *new std::mutex;
    static auto& cache = *new std::map<std::tuple<std::string, int, int, int>, std::optional<tile_rate>>;
    const auto key = std::make_tuple(dev.id(), int(type), int(kind), int(kernel));
    {
        const std::lock_guard lock(mutex);
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
    const std::vector<double> t = probe_tile_seconds(dev, type, kind, kernel, tile_probe_orders, 3);
    if (t.size() != std::size(tile_probe_orders)) return std::nullopt;  // not measured: asked again later
    const std::optional<tile_rate> r = fit_tile_rate(tile_probe_flops(kind, type, tile_probe_orders[0]), t[0],
                                                     tile_probe_flops(kind, type, tile_probe_orders[1]), t[1]);
    const std::lock_guard lock(mutex);
    cache[key] = r;
    return r;
}

std::vector<tile_kind> routine_tile_kinds(std::string_view routine, dtype type) {
    const bool cplx = dtype_traits(type).is_complex;
    const tile_kind rank_k = cplx ? tile_kind::herk : tile_kind::syrk;
    if (routine == "potrf") return {tile_kind::potrf, tile_kind::trsm, rank_k};
    if (routine == "getrf") return {tile_kind::getrf, tile_kind::trsm};
    for (tile_kind k : {tile_kind::syrk, tile_kind::herk, tile_kind::syr2k, tile_kind::her2k, tile_kind::symm,
                        tile_kind::hemm, tile_kind::trmm, tile_kind::trsm})
        if (routine == to_string(k)) return {k};
    return {};
}

}  // namespace tilestream::detail::engine
