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

tile_op probe_op(const tile_variant& v, dtype type, gemm_kernel kernel, index_t order, void* a, void* b, void* c) {
    tile_op op;
    op.kind = v.kind;
    op.type = type;
    op.kernel = kernel;
    op.side = v.side;
    op.uplo = v.uplo;
    op.trans_a = v.trans;
    const bool rank_k = v.kind == tile_kind::syrk || v.kind == tile_kind::herk || v.kind == tile_kind::syr2k ||
                        v.kind == tile_kind::her2k;
    if (rank_k) op.trans_b = v.trans;
    op.diag = v.diag;
    op.math = v.math;
    op.m = op.n = op.k = order;
    op.alpha = 1.0;
    op.beta = 0.5;
    op.a = {a, order, v.layout_a};
    op.b = {b, order, v.layout_b};
    op.c = {c, order, v.layout_c};
    if (v.kind == tile_kind::getrf) op.b = {b, 1, layout::col_major};  // the pivots, 1 x order
    return op;
}

double tile_probe_flops(tile_kind kind, dtype type, index_t order) {
    return probe_op(tile_variant(kind), type, gemm_kernel::vendor, order, nullptr, nullptr, nullptr).flops();
}

std::vector<double> probe_tile_seconds(device& dev, dtype type, const tile_variant& variant, gemm_kernel kernel,
                                       std::span<const index_t> orders, int reps) {
    const tile_kind kind = variant.kind;
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
            tile_op op = probe_op(variant, type, kernel, n, a.get(), kind == tile_kind::getrf ? piv.get() : b.get(), c.get());
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

std::optional<tile_rate> measured_tile_rate(device& dev, dtype type, const tile_variant& variant, gemm_kernel kernel) {
    // Never destroyed: a run still in flight at exit may read them.
    static std::mutex& mutex = *new std::mutex;
    static auto& cache = *new std::map<std::tuple<std::string, int, tile_variant, int>, std::optional<tile_rate>>;
    const auto key = std::make_tuple(dev.id(), int(type), variant, int(kernel));
    {
        const std::lock_guard lock(mutex);
        if (auto it = cache.find(key); it != cache.end()) return it->second;
    }
    const std::vector<double> t = probe_tile_seconds(dev, type, variant, kernel, tile_probe_orders, 3);
    if (t.size() != std::size(tile_probe_orders)) return std::nullopt;  // not measured: asked again later
    const std::optional<tile_rate> r =
        fit_tile_rate(tile_probe_flops(variant.kind, type, tile_probe_orders[0]), t[0],
                      tile_probe_flops(variant.kind, type, tile_probe_orders[1]), t[1]);
    const std::lock_guard lock(mutex);
    cache[key] = r;
    return r;
}

std::vector<tile_variant> routine_tile_variants(const blas3_problem& p) {
    const auto variant = [&](tile_kind kind, side sd, op trans, diag dg) {
        tile_variant v(kind);
        v.side = sd;
        v.uplo = p.flags.uplo;
        v.trans = trans;
        v.diag = dg;
        v.layout_a = p.layout_a;
        v.layout_b = p.layout_b;
        v.layout_c = p.layout_c;
        return v;
    };
    const bool herm = dtype_traits(p.type).is_complex;
    switch (p.routine) {
        case blas3_routine::potrf: {
            // The matrix is C: every tile in its layout.
            const bool lower = p.flags.uplo == uplo::lower;
            const op back = herm ? op::c : op::t;
            std::vector<tile_variant> v = {variant(tile_kind::potrf, side::left, op::n, diag::non_unit),
                                           variant(tile_kind::trsm, lower ? side::right : side::left, back, diag::non_unit),
                                           variant(herm ? tile_kind::herk : tile_kind::syrk, side::left, lower ? op::n : back,
                                                   diag::non_unit)};
            for (tile_variant& x : v) x.layout_a = x.layout_b = p.layout_c;
            return v;
        }
        case blas3_routine::symm: return {variant(tile_kind::symm, p.flags.side, op::n, diag::non_unit)};
        case blas3_routine::hemm: return {variant(tile_kind::hemm, p.flags.side, op::n, diag::non_unit)};
        case blas3_routine::syrk: return {variant(tile_kind::syrk, side::left, p.flags.trans, diag::non_unit)};
        case blas3_routine::herk: return {variant(tile_kind::herk, side::left, p.flags.trans, diag::non_unit)};
        case blas3_routine::syr2k: return {variant(tile_kind::syr2k, side::left, p.flags.trans, diag::non_unit)};
        case blas3_routine::her2k: return {variant(tile_kind::her2k, side::left, p.flags.trans, diag::non_unit)};
        case blas3_routine::trmm: return {variant(tile_kind::trmm, p.flags.side, p.flags.trans, p.flags.diag)};
        case blas3_routine::trsm: return {variant(tile_kind::trsm, p.flags.side, p.flags.trans, p.flags.diag)};
    }
    return {};
}

std::vector<tile_variant> routine_tile_variants(const getrf_problem& p) {
    tile_variant panel(tile_kind::getrf), solve(tile_kind::trsm);
    panel.layout_a = panel.layout_b = panel.layout_c = p.lay;
    solve.layout_a = solve.layout_b = solve.layout_c = p.lay;
    solve.diag = diag::unit;  // left, lower, op n
    return {panel, solve};
}

}  // namespace tilestream::detail::engine
