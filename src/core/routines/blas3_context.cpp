// The context's Level 3 calls: plans for all its devices, runs one at a time on them.
#include <tilestream/context.hpp>
#include <tilestream/error.hpp>

#include "core/balance.hpp"
#include "core/context_routes.hpp"
#include "core/engine/tile_rates.hpp"
#include "core/engine/tile_store.hpp"
#include "core/gemm_memory.hpp"
#include "core/rate_probes.hpp"
#include "core/routines/routines.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

namespace tilestream {

namespace {

/// The order of the diagonal blocks that trsm, trmm, symm and hemm tiles keep on the vendor kernel
/// when the GEMM tiles run on a faster one (device_rates::diagonal_block): the rest of each tile is
/// GEMM updates of this rank. On the Emerald Rapids VM (2 cores; OpenBLAS on its Prescott kernels,
/// 29 GFLOP/s, beside the tiled kernel's 129) f64 n = 4096 in one call, medians of 3: trsm 0.66 s
/// in blocks of 256 against 0.70-0.78 in blocks of 96, 128, 192 and 384 (and 0.77-0.85 s in tiles
/// before); trmm 0.67 against 0.69-0.79; symm 1.30 against 1.39-1.48. Out of core at a quarter
/// budget (tiles of 2048) the block sizes were within the noise of each other. The tiled kernel
/// asked for runs the GEMMs between them too.
constexpr index_t host_diagonal_block = 256;

}  // namespace

blas3_plan context::plan(const blas3_problem& problem, const blas3_call_options& call) {
    blas3_options o;
    // The Level 3 tile kernels: the call's, else the context's, else vendor (the measured choice of
    // gemm's direct path covers whole products, not the tiles of a Level 3 plan).
    o.kernel = call.kernel ? *call.kernel : options_.kernel.value_or(gemm_kernel::vendor);
    o.math = options_.math;
    o.tile = call.tile;
    o.tile_free = call.tile_free;
    o.tile_k = call.tile_k;
    o.order = call.order;
    o.devices = int(device_ptrs_.size());
    o.in_place = in_place_;
    o.whole_diagonal_tiles = std::any_of(device_ptrs_.begin(), device_ptrs_.end(),
                                         [](const device* d) { return !d->host_addressable(); });
    o.reproducible = options_.reproducible;
    device_rates r = routine_rates(to_string(problem.routine), problem.type, o.kernel, problem.quick_return, call.rates,
                                   detail::engine::routine_tile_variants(problem));
    if (!call.kernel && !call.rates && !problem.quick_return) o.gemm_kernels = tile_gemm_kernels(problem.type, problem.flops(), r);
    // Each device's measured rate for the balance, also when the call declares the plan's rates
    // (those stand for every device; the model's scale is then theirs).
    const detail::device_balance b = problem.quick_return ? detail::device_balance{} : balance(problem.type);
    // The model spreads tasks over the devices that take them (a GPU beside its host's CPU: the
    // GPU alone), at their mean rate; the build and the executor still use every device.
    if (b.idle_ones(o.devices)) {
        o.working_devices = b.working;
        // Triangles are merged on the host only behind devices without host access that work.
        const double fastest = *std::max_element(b.flops.begin(), b.flops.end());
        bool merging = false;
        for (std::size_t d = 0; d < device_ptrs_.size(); ++d)
            merging = merging || (!device_ptrs_[d]->host_addressable() && b.flops[d] * detail::negligible_device_ratio > fastest);
        if (!merging) r.host_merge = 0;
    }
    if (!options_.rates && !call.rates) {
        b.scale(r, o.devices);
    }
    try {
        blas3_plan p = plan_blas3(problem, budget(), r, o);
        p.device_flops = b.flops;
        return p;
    } catch (const out_of_budget& e) {
        throw out_of_budget(names_ + ": " + e.what());
    }
}

device_rates context::routine_rates(std::string_view routine, dtype type, gemm_kernel kernel, bool quick_return,
                                    const std::optional<device_rates>& declared,
                                    std::span<const detail::engine::tile_variant> tiles) {
    for (auto* d : device_ptrs_)
        if (!d->supports(kernel))
            throw invalid_argument(std::string(routine) + ": device " + d->id() + " has no '" +
                                   std::string(to_string(kernel)) + "' kernel (the reference kernel runs on CPU devices only)");
    // One device in place runs one call whatever the rates: no probe.
    const bool probe = !quick_return && (!in_place_ || device_ptrs_.size() > 1);
    device_rates r = declared ? *declared : options_.rates ? *options_.rates : probe ? rates(type, kernel) : device_rates{};
    r.host_memory = computes_on_host_cores(device_ptrs_);
    // Cholesky's diagonal tiles on devices without a potrf: staged to the host's LAPACK (outside
    // reproducible mode and the reference kernel, which run the reference loops there). Priced at
    // half the host's measured GEMM rate (an H200 host: a staged 8192 tile took 3.6 s, 51 GFLOP/s,
    // against OpenBLAS's GEMM at 109), so a plan no longer takes one large potrf tile for free.
    // LU's panels and row interchanges likewise (this VM's OpenBLAS: dgetrf on 8192 x 256-1024
    // panels at 0.43-0.82 of its dgemm rate, dpotrf 1024-4096 at 0.58-0.78).
    const std::optional<tile_kind> lapack = routine == "potrf"   ? std::optional(tile_kind::potrf)
                                            : routine == "getrf" ? std::optional(tile_kind::getrf)
                                                                 : std::nullopt;
    const bool staged = lapack && std::any_of(device_ptrs_.begin(), device_ptrs_.end(), [&](const device* d) {
        return !d->host_addressable() && !d->supports(*lapack, type, kernel);
    });
    // (Rates declared for the call that do not give this rate get the host's: the CLI's --explain
    // declares the measured ones for one device, and must show the plan it runs.)
    if (staged && !quick_return && r.staged_flops == 0 && !options_.rates &&
        !options_.reproducible && kernel != gemm_kernel::reference) {
        // Measured with the threads the staged step takes (OpenBLAS's over every host core).
        const int host = int(std::max(1u, std::thread::hardware_concurrency()));
        const detail::kept_choice kc = detail::choose_host_kernel_kept(type, shape_class::square, host);
        for (const kernel_rate& k : kc.choice.rates)
            if (k.kernel == gemm_kernel::vendor && k.measured) r.staged_flops = 0.5 * k.flops;
    }
    // The tiles other than GEMM on a device that is not the host's run on its own vendor routines,
    // far below its GEMM rate and with a fixed cost per call (an H200: a Cholesky of 4096 in tiles
    // of 768 was predicted at 2.6 ms at the GEMM rate and took 24, 10 of them in 6 cuSOLVER potrf
    // calls): each kind the routine's tiles hold, as its steps run it (routine_tile_variants: their
    // options and layouts), is measured on the first device (the one the model plans for) once per
    // process and variant, 10-28 ms a kind on an H200 (the lazy loading of the kind's first
    // kernels included). Devices computing with the host's cores (CPUs, PoCL) keep
    // the vendor GEMM's rate for them (diagonal_flops): their BLAS runs the diagonal routines near
    // it, and their probes would cost seconds. Not with declared rates (the same plan every run),
    // nor in reproducible mode, whose diagonal tiles run on the host's reference loops.
    device* const first_device[] = {device_ptrs_.front()};
    if (probe && !declared && !options_.rates && !options_.reproducible && kernel != gemm_kernel::reference &&
        !computes_on_host_cores(first_device)) {
        device& first = *device_ptrs_.front();
        for (detail::engine::tile_variant v : tiles) {
            const tile_kind k = v.kind;
            if (r.tile_rates[std::size_t(k)].flops > 0) continue;
            v.math = options_.math;  // as the steps run (their GEMM pieces in tf32 when asked)
            const gemm_kernel use = first.supports(k, type, kernel) ? kernel : gemm_kernel::vendor;
            const std::lock_guard lock(mutex_);  // a probe must not share the device with a run
            if (const auto t = detail::engine::measured_tile_rate(first, type, v, use)) r.tile_rates[std::size_t(k)] = *t;
        }
    }
    // The SYRK family's diagonal tiles that are not read keep their triangle's write-back where
    // several devices share a call (write_regions_whole): from a device without host access that
    // is a merge on the host, priced at its measured rate (an H200 beside its CPU planned syrk
    // f64 8192 in 1536 tiles without it: 0.044 s, against 0.035 s in 1024 tiles).
    const bool rank_k = routine == "syrk" || routine == "herk" || routine == "syr2k" || routine == "her2k";
    const bool merges = rank_k && device_ptrs_.size() > 1 &&
                        std::any_of(device_ptrs_.begin(), device_ptrs_.end(), [](const device* d) { return !d->host_addressable(); });
    if (merges && !quick_return && r.host_merge == 0 && !options_.rates) r.host_merge = detail::engine::measure_triangle_merge_rate();
    // The tiled kernel asked for on devices computing with the host's cores: its GEMM tiles are
    // tiled, its diagonal tiles vendor (no tiled trsm, syrk, ...), and those that can go in blocks
    // do, so the rest of them runs on tiled too (trsm f64 4096 in one call on the 2-core VM: 2.2 s
    // whole on vendor, 0.7 s blocked).
    // (Also with declared rates: this is how the tiles run, which rates do not say.)
    if (kernel == gemm_kernel::tiled && !options_.reproducible &&
        std::all_of(device_ptrs_.begin(), device_ptrs_.end(), [](const device* d) { return d->host_addressable(); }))
        r.diagonal_block = host_diagonal_block;
    return r;
}

namespace {

/// The GEMM kernels' probe (choose_kernel's square class: each kernel 6 times at 512^3 and, when
/// the vendor kernel loses, at 1024^3: 1.45e10 multiply-adds) runs on a device that has not made it
/// yet once the context's Level 3 and LU work in the type, this call's included, is 3 times that: a
/// call never pays more for the probe than it gains (its GEMM tiles run several times faster, its
/// other tiles not: the whole call 1.7-2.8 times), and a context that makes many calls probes once
/// they add up. On the Emerald Rapids VM the probe took 0.3-0.5 s in f32, 0.7-1.5 s in f64, 1.3 s in
/// c32 and 2.4-3.0 s in c64 (vendor 30-65 GFLOP/s, tiled 125-270); dpotrf 6000 (7.2e10 flops) took
/// 2.5 s on vendor and 1.5 s with its GEMM tiles on tiled.
double level3_probe_flops(dtype t) { return 3.0 * 1.45e10 * double(dtype_traits(t).flops_per_multiply_add); }

}  // namespace

std::vector<gemm_kernel> context::tile_gemm_kernels(dtype type, double flops, device_rates& r) {
    if (options_.kernel || options_.reproducible || options_.rates || options_.math == math_mode::tf32) return {};
    // Only devices computing with the host's cores choose: a GPU's or an OpenCL device's vendor
    // GEMM (cuBLAS, CLBlast) is its fastest, and their probes would cost seconds for nothing (PoCL
    // compiles each kernel: the Hemm tests took 67 s instead of 4 with every device probed).
    std::vector<gemm_kernel> kernels(device_ptrs_.size(), gemm_kernel::vendor);
    const auto rate = [](const kernel_choice& c, gemm_kernel k) {
        const kernel_rate* x = detail::measured_rate(c, k);
        return x ? x->flops : 0.0;
    };
    double first = 0, first_vendor = 0;
    static_assert(std::tuple_size_v<decltype(level3_flops_)> == std::size(all_dtypes));
    const bool probe = level3_flops_[std::size_t(type)].fetch_add(flops) + flops >= level3_probe_flops(type);
    for (std::size_t d = 0; d < device_ptrs_.size(); ++d) {
        device& dev = *device_ptrs_[d];
        if (!dev.host_addressable()) continue;
        // A choice made before (by a GEMM call or an earlier Level 3 one) is free, without the
        // lock (which would wait for another thread's run; its re-check is GEMM's to make); a
        // probe runs once the work it could speed up outweighs it (level3_probe_flops).
        std::optional<kernel_choice> c = detail::known_kernel(dev, type, shape_class::square, options_.math);
        if (!c && probe) {
            const std::lock_guard lock(mutex_);  // a probe must not share the devices with a run
            c = detail::choose_kernel_kept(dev, type, shape_class::square, options_.math).choice;
        }
        if (!c || !c->measured) continue;
        kernels[d] = c->kernel;
        if (d == 0) first = rate(*c, c->kernel), first_vendor = rate(*c, gemm_kernel::vendor);
    }
    const bool vendor_everywhere =
        std::all_of(kernels.begin(), kernels.end(), [](gemm_kernel k) { return k == gemm_kernel::vendor; });
    if (vendor_everywhere) return {};  // the vendor kernel's plan, as when it is asked for
    // The model's rates: the first device's (the balance scales them to the others), its GEMM
    // tiles at the chosen kernel's rate and the rest at the vendor kernel's, both from one probe.
    // Only where every device computes with the host's cores: a GPU's diagonal blocks (cuBLAS,
    // cuSOLVER) are not the host's vendor routines, and priced at the CPU's ratio they would be
    // 4 times too slow beside a CPU listed first.
    const bool all_host = std::all_of(device_ptrs_.begin(), device_ptrs_.end(), [](const device* d) { return d->host_addressable(); });
    if (all_host && first > 0 && first_vendor > 0) {
        // One device in place probes nothing of its own (routine_rates): the copy rates, which
        // price the kernels' packing of their tiles, are measured now (once per type).
        if (!r.measured) r = rates(type, gemm_kernel::vendor);
        r.flops = first;
        r.diagonal_flops = first_vendor;
        if (first_vendor < 0.8 * first) r.diagonal_block = host_diagonal_block;
        r.measured = true;
    }
    return kernels;
}

detail::device_balance context::balance(dtype type) {
    // One device has no one to balance with; declared rates are the same for every device; CPU
    // devices are slices of one host's cores, of one speed (and their probes would only delay the
    // first call: under TSan, past a cancel test's second).
    if (device_ptrs_.size() <= 1 || options_.rates) return {};
    if (std::all_of(device_ptrs_.begin(), device_ptrs_.end(), [](const device* d) { return d->host_addressable(); }))
        return {};
    return detail::balance_of(routes_->get(type, shape_class::square, std::nullopt).device_flops);
}

std::string context::explain(const blas3_plan& p) const {
    if (p.problem.quick_return) return tilestream::explain(p);
    return tilestream::explain(p) + detail::balance_line(device_ptrs_, p.device_flops);
}

template <class T>
blas3_report context::execute(const blas3_plan& p, const blas3_operands<T>& ops, const blas3_call_options& call) {
    if (p.devices != int(device_ptrs_.size()))
        throw invalid_argument("context: the plan is for " + std::to_string(p.devices) + " device(s), this context has " +
                               std::to_string(device_ptrs_.size()) + " (" + names_ + ")");
    const std::lock_guard lock(mutex_);
    // Tiles of kept operands the call only reads may come from earlier calls; a kept operand the
    // call writes into (C, or B of trmm/trsm) has changed once it returns, however it returns.
    const bool writes_b = p.problem.routine == blas3_routine::trmm || p.problem.routine == blas3_routine::trsm;
    const auto kept = [&](auto v) {
        using V = std::remove_const_t<typename decltype(v)::value_type>;
        return detail::find_kept(*keeps_, v.data(), v.rows(), v.cols(), v.ld(), v.layout(), dtype_of<V>());
    };
    std::vector<detail::operand_keep> keeps = {kept(ops.a), writes_b ? detail::operand_keep{} : kept(ops.b), {}};
    struct written_guard {
        detail::keep_registry& registry;
        host_matrix_view<T> c;
        ~written_guard() {
            if (c.empty()) return;
            const index_t outer = c.layout() == layout::row_major ? c.rows() : c.cols();
            const index_t inner = c.layout() == layout::row_major ? c.cols() : c.rows();
            detail::kept_written(registry, c.data(), std::size_t((outer - 1) * c.ld() + inner) * sizeof(T));
        }
    } written{*keeps_, ops.c};
    return detail::execute_blas3_kept<T>(p, device_ptrs_, ops, call.run, memory_.get(), keeps);
}

#define TILESTREAM_INSTANTIATE(T)                                                                          \
    template blas3_report context::execute<T>(const blas3_plan&, const blas3_operands<T>&, const blas3_call_options&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
