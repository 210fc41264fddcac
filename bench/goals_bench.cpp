// The CPU goals of the project measured in one run, each figure beside its anchor with runs
// alternated (ours, anchor, ours, ...) so a noisy machine hits both alike. Prints every ratio
// beside its goal and exits 1 when one falls below it, so a change that slows a default path
// cannot land silently. Every tilestream figure goes through the default path a newcomer gets
// (the library call with default options); tuned settings are listed as such.
#include "bench_common.hpp"
#include "core/cblas_gemm.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <stdexcept>
#include <thread>

namespace ts = tilestream;

namespace {

// OpenBLAS called directly: cblas_[sdcz]gemm, C = A B.
template <class T>
void blas_gemm(ts::index_t n, const T* a, const T* b, T* c) {
    ts::detail::cblas_xgemm<T>(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, T(1), a, n, b, n, T(0), c, n);
}

/// A GEMM through the library on devices opened from a spec, planned as the CLI plans it with
/// the given options; returns the report of the last run.
template <class T>
struct planned_gemm {
    std::vector<std::unique_ptr<ts::device>> devs;
    std::vector<ts::device*> ptrs;
    ts::gemm_plan plan;

    planned_gemm(const std::string& spec, const ts::open_options& oo, ts::plan_options po, ts::host_matrix_view<const T> a,
                 ts::host_matrix_view<const T> b, ts::host_matrix_view<T> c)
        : planned_gemm(ts::open_devices(spec, oo), po, a, b, c) {}
    /// Plans on devices another planned_gemm already holds (the devices stay with their owner), so
    /// two options compare on the same devices.
    /// `budget`: plan for at most this much of each device (less than the devices were opened with).
    planned_gemm(const planned_gemm& on, ts::plan_options po, ts::host_matrix_view<const T> a, ts::host_matrix_view<const T> b,
                 ts::host_matrix_view<T> c, std::size_t budget = std::numeric_limits<std::size_t>::max())
        : ptrs(on.ptrs) {
        make_plan(po, a, b, c, budget);
    }
    planned_gemm(std::vector<std::unique_ptr<ts::device>> opened, ts::plan_options po, ts::host_matrix_view<const T> a,
                 ts::host_matrix_view<const T> b, ts::host_matrix_view<T> c)
        : devs(std::move(opened)) {
        for (auto& d : devs) ptrs.push_back(d.get());
        make_plan(po, a, b, c);
    }
    void make_plan(ts::plan_options po, ts::host_matrix_view<const T> a, ts::host_matrix_view<const T> b,
                   ts::host_matrix_view<T> c, std::size_t budget = std::numeric_limits<std::size_t>::max()) {
        for (auto* d : ptrs) budget = std::min(budget, d->budget());
        po.devices = int(ptrs.size());
        po.in_place = ts::computes_in_place(ptrs);
        const auto q = ts::describe_gemm<T>(ts::op::n, ts::op::n, T(1), a, b, T(0), c);
        plan = ts::plan_gemm(q, budget, ts::measure_rates(*ptrs.front(), q.type, po.kernel), po);
    }
    ts::gemm_report run(ts::host_matrix_view<const T> a, ts::host_matrix_view<const T> b, ts::host_matrix_view<T> c) {
        return ts::execute_gemm<T>(plan, ptrs, T(1), a, b, T(0), c);
    }
};

std::string describe_plan(const ts::gemm_plan& p) {
    return "strategy " + std::string(ts::to_string(p.strategy)) + " tiles " + std::to_string(p.tile_m) + "x" +
           std::to_string(p.tile_n) + "x" + std::to_string(p.tile_k) + (p.cache ? ", cache on" : ", cache off");
}

bool same_plan(const ts::gemm_plan& a, const ts::gemm_plan& b) {
    return a.strategy == b.strategy && a.tile_m == b.tile_m && a.tile_n == b.tile_n && a.tile_k == b.tile_k &&
           a.cache == b.cache && a.a_slots == b.a_slots && a.b_slots == b.b_slots && a.c_slots == b.c_slots;
}

struct goal_row {
    std::string name, anchor, detail;
    double ours_seconds = 0, anchor_seconds = 0, ratio = 0, goal = 0;
    bool ok = true;
    /// The default chose exactly the plan it is compared with: "never slower" holds by construction,
    /// and the measured ratio is this machine's run-to-run noise (recorded, not judged).
    bool identical_plans = false;
};

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: goals_bench [--out F] [--git-hash H] [--reps R] [--sizes 2048,4096] [--ooc-n 4096]"
                              " [--complex-n 2048] [--complex-ooc-n 2048] [--margin 1.0]"
                              " [--only tiled,vendor,reproducible,multi,scaling,ooc,complex]");
    const std::string out = args.get("out", ""), git = args.get("git-hash", "unknown");
    const int reps = int(args.number("reps", 9));
    std::vector<ts::index_t> sizes;
    for (const auto& t : ts::bench::split(args.get("sizes", "2048,4096"), ',')) sizes.push_back(std::stoll(t));
    const ts::index_t ooc_n = args.number("ooc-n", 4096);
    // Complex GEMM costs 4x the flops of real at the same n: one size, 2048 by default.
    const ts::index_t complex_n = args.number("complex-n", 2048);
    const ts::index_t complex_ooc_n = args.number("complex-ooc-n", 2048);
    // A goal is met when ratio >= goal * margin; CI's short run uses a generous margin for noise.
    const double margin = args.real("margin", 1.0);
    const auto only = ts::bench::split(args.get("only", "tiled,vendor,reproducible,multi,scaling,ooc,complex"), ',');
    if (!args.finish()) return 2;
    const auto wanted = [&](const char* part) { return std::find(only.begin(), only.end(), part) != only.end(); };
    const int cores = ts::inventory().cpu_cores;
    std::vector<goal_row> goals;
    const auto report = [&](goal_row g) {
        g.ratio = g.anchor_seconds / g.ours_seconds;
        g.ok = g.identical_plans || g.ratio >= g.goal * margin;
        if (g.goal <= 0)  // a measurement without a goal
            std::printf("%-44s %9.4f s  anchor %9.4f s  ratio %6.3f  (measured, no goal)\n", g.name.c_str(),
                        g.ours_seconds, g.anchor_seconds, g.ratio);
        else
            std::printf("%-44s %9.4f s  anchor %9.4f s  ratio %6.3f  goal >= %.2f%s  %s\n", g.name.c_str(), g.ours_seconds,
                        g.anchor_seconds, g.ratio, g.goal,
                        margin != 1.0 ? (" (x" + std::to_string(margin).substr(0, 4) + ")").c_str() : "",
                        g.identical_plans ? "ok (identical plans: the ratio is noise)" : g.ok ? "ok" : "BELOW GOAL");
        std::fflush(stdout);
        goals.push_back(std::move(g));
    };

    // The default library call with each kernel beside OpenBLAS on the same operands, and what
    // --reproducible costs; complex types at complex_n, with the vendor goal 0.95 (issue 25).
    const auto kernel_rows = [&](ts::dtype type, ts::index_t n) {
        ts::visit_dtype(type, [&]<class T>() {
            ts::host_matrix<T> a(n, n), b(n, n), c(n, n), c2(n, n);
            ts::fill_random(a.view(), 1);
            ts::fill_random(b.view(), 2);
            const std::string shape = std::string(ts::to_string(type)) + " n=" + std::to_string(n);
            const auto openblas = [&] {
                openblas_set_num_threads(cores);
                blas_gemm<T>(n, a.data(), b.data(), c2.data());
            };
            const std::string anchor = "OpenBLAS cblas_" + std::string(1, ts::dtype_traits(type).blas_prefix) +
                                       "gemm called directly, " + std::to_string(cores) + " threads";
            const double vendor_goal = ts::is_complex(type) ? 0.95 : 0.97;
            // The library call with default options on the default device, as `gemm --kernel K` runs it.
            for (const char* kname : {"tiled", "vendor"}) {
                if (!wanted(kname)) continue;
                auto devs = ts::open_devices("cpu");
                ts::gemm_options opt;
                opt.kernel = ts::parse_gemm_kernel(kname);
                opt.strategy = ts::gemm_strategy::automatic;
                ts::gemm_report rep;
                const auto t = ts::bench::alternate(reps,
                                         [&] {
                                             openblas_set_num_threads(1);
                                             rep = ts::gemm<T>(*devs.front(), ts::op::n, ts::op::n, T(1), a.view(), b.view(),
                                                               T(0), c.view(), opt);
                                         },
                                         openblas);
                report({std::string("default gemm --kernel ") + kname + " / OpenBLAS, " + shape, anchor,
                        "strategy " + std::string(ts::to_string(rep.plan.strategy)),
                        t.ours, t.anchor, 0, std::string(kname) == "tiled" ? 0.80 : vendor_goal});
            }
            // What --reproducible on costs against the default (no goal: it decides whether
            // reproducibility may be the default, which needs a cost under 3%).
            if (wanted("reproducible") && !ts::is_complex(type)) {
                auto devs = ts::open_devices("cpu");
                ts::gemm_options def, repro;
                repro.reproducible = true;
                const auto run = [&](const ts::gemm_options& o) {
                    return [&] { ts::gemm<T>(*devs.front(), ts::op::n, ts::op::n, T(1), a.view(), b.view(), T(0), c.view(), o); };
                };
                const auto t = ts::bench::alternate(reps, run(repro), run(def));
                report({"gemm --reproducible on / default, " + shape, "default gemm (vendor kernel) in the same run",
                        "reproducible runs the tiled kernel in k-blocks", t.ours, t.anchor, 0, 0.0});
            }
        });
    };
    for (ts::dtype type : {ts::dtype::f32, ts::dtype::f64})
        for (ts::index_t n : sizes) kernel_rows(type, n);
    if (wanted("complex"))
        for (ts::dtype type : {ts::dtype::c32, ts::dtype::c64}) kernel_rows(type, complex_n);

    using T = float;
    for (ts::index_t n : sizes) {
        ts::host_matrix<T> a(n, n), b(n, n), c(n, n);
        ts::fill_random(a.view(), 1);
        ts::fill_random(b.view(), 2);
        const std::string shape = "f32 n=" + std::to_string(n);
        if (wanted("multi")) {
            // cpu:2 with default options against the same with the tile cache off, and the same
            // pair under a budget of 25% of the operands (where the budgeted, copying path runs).
            for (bool budgeted : {false, true}) {
                ts::open_options oo;
                if (budgeted) oo.memory_budget = 3 * std::size_t(n) * std::size_t(n) * sizeof(T) / 4;
                ts::plan_options def, off;
                def.cache = ts::cache_mode::automatic;
                off.cache = ts::cache_mode::off;
                planned_gemm<T> g_def("cpu:2", oo, def, a.view(), b.view(), c.view());
                planned_gemm<T> g_off(g_def, off, a.view(), b.view(), c.view());  // the same two devices
                const auto t = ts::bench::alternate(reps, [&] { g_def.run(a.view(), b.view(), c.view()); },
                                         [&] { g_off.run(a.view(), b.view(), c.view()); });
                const bool same = same_plan(g_def.plan, g_off.plan);
                report({"cpu:2 default / --cache off, " + shape + (budgeted ? ", 25% budget" : ""), "the same with --cache off",
                        describe_plan(g_def.plan) + (same ? " (the same plan as --cache off)" : "; --cache off: " + describe_plan(g_off.plan)),
                        t.ours, t.anchor, 0, 1.0, true, same});
            }
        }
        if (wanted("scaling")) {
            // Efficiency of cpu:2 against cpu:1, one thread per device, default options, no budget.
            ts::open_options oo;
            oo.cpu_threads = 1;
            ts::plan_options po;
            po.cache = ts::cache_mode::automatic;
            planned_gemm<T> one("cpu:1", oo, po, a.view(), b.view(), c.view());
            planned_gemm<T> two("cpu:2", oo, po, a.view(), b.view(), c.view());
            openblas_set_num_threads(1);
            const auto t = ts::bench::alternate(reps, [&] { two.run(a.view(), b.view(), c.view()); },
                                     [&] { one.run(a.view(), b.view(), c.view()); });
            // Efficiency = speedup / 2: the anchor's time is halved so the ratio reads as efficiency.
            report({"cpu:2 / cpu:1 efficiency (1 thread each), " + shape, "cpu:1 in the same run",
                    "strategy " + std::string(ts::to_string(two.plan.strategy)), t.ours, t.anchor / 2, 0, 0.90});
            // The machine's own ceiling for that figure (no goal): OpenBLAS alone, one thread on the
            // whole against two threads each calling it on half the rows at once (they share the
            // L3 and the memory bandwidth, so even this is below 1).
            const auto rows = [&](ts::index_t r0, ts::index_t count) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(count), int(n), int(n), 1.f, a.data() + r0 * n, int(n),
                            b.data(), int(n), 0.f, c.data() + r0 * n, int(n));
            };
            const auto halves = [&] {
                std::thread top([&] { rows(0, n / 2); });
                rows(n / 2, n - n / 2);
                top.join();
            };
            const auto ceiling = ts::bench::alternate(reps, halves, [&] { rows(0, n); });
            report({"OpenBLAS two threads on halves / one thread, " + shape, "one single-threaded OpenBLAS call in the same run",
                    "the efficiency above cannot beat this on this machine", ceiling.ours, ceiling.anchor / 2, 0, 0.0});
        }
    }

    if (wanted("ooc")) {
        for (ts::dtype type : ts::all_dtypes) {
            if (ts::is_complex(type) && !wanted("complex")) continue;
            const ts::index_t n = ts::is_complex(type) ? complex_ooc_n : ooc_n;
            ts::visit_dtype(type, [&]<class T>() {
                ts::host_matrix<T> a(n, n), b(n, n), c(n, n);
                ts::fill_random(a.view(), 1);
                ts::fill_random(b.view(), 2);
                const std::size_t operands = 3 * std::size_t(n) * std::size_t(n) * sizeof(T);
                ts::open_options whole;
                whole.memory_budget = operands + (operands / 8);  // room for in-core: copies like an accelerator
                ts::plan_options po;
                ts::plan_options in;
                in.strategy = ts::gemm_strategy::in_core;
                // One CPU device, as a user's run has: with two alive, each kernel runs on the
                // device's own threads calling single-threaded OpenBLAS on parts of the tile (each
                // packing all of B's tile) instead of OpenBLAS's threads, which the out-of-core
                // tiles paid for more (f32 4096: 0.87-0.89 of in-core there, 0.94 from the CLI).
                // The out-of-core plan is made for a quarter of the operands and held to it.
                planned_gemm<T> incore("cpu", whole, in, a.view(), b.view(), c.view());
                planned_gemm<T> ooc(incore, po, a.view(), b.view(), c.view(), operands / 4);
                std::size_t ooc_peak = 0;
                const auto t = ts::bench::alternate(
                    std::max(3, reps / 2), [&] { ooc_peak = std::max(ooc_peak, ooc.run(a.view(), b.view(), c.view()).peak_device_bytes); },
                    [&] { incore.run(a.view(), b.view(), c.view()); });
                if (ooc_peak > operands / 4 || ooc_peak == 0)
                    throw std::runtime_error("goals_bench: the out-of-core run held " + std::to_string(ooc_peak) +
                                             " bytes of the device, not at most a quarter of the operands (" +
                                             std::to_string(operands / 4) + ")");
                report({"out-of-core (25% budget) / in-core, " + std::string(ts::to_string(type)) + " n=" + std::to_string(n),
                        "in-core on the same device with a budget that fits (copies in and out)",
                        "strategy " + std::string(ts::to_string(ooc.plan.strategy)) + " tiles " + std::to_string(ooc.plan.tile_m) +
                            "x" + std::to_string(ooc.plan.tile_n) + "x" + std::to_string(ooc.plan.tile_k) + " on the " +
                            std::string(ts::to_string(ooc.plan.engine)) + " engine (in-core on the " +
                            std::string(ts::to_string(incore.plan.engine)) + "), device memory held " +
                            std::to_string(ooc_peak) + " of " + std::to_string(operands / 4) + " bytes",
                        t.ours, t.anchor, 0, 0.90});
            });
        }
    }

    bool all_ok = true;
    ts::detail::json rows = ts::detail::json::array();
    for (const auto& g : goals) {
        all_ok = all_ok && g.ok;
        rows.push_back(ts::bench::json_builder()
                           .add("figure", g.name)
                           .add("anchor", g.anchor)
                           .add("detail", g.detail)
                           .add("median_seconds", g.ours_seconds)
                           .add("anchor_median_seconds", g.anchor_seconds)
                           .add("ratio", g.ratio)
                           .add("goal", g.goal)
                           .add("met", g.ok)
                           .add("identical_plans", g.identical_plans)
                           .json());
    }
    if (!out.empty()) {
        auto top = ts::bench::result_header("cpu_goals", git, "cpu (default devices)");
        top.add("statistic", "median of alternating runs").add("repetitions", reps).add("margin", margin);
        top.add("results", rows);
        ts::bench::write_file_atomically(out, top.text());
        std::printf("wrote %s\n", out.c_str());
    }
    std::printf("%s\n", all_ok ? "all goals met" : "SOME GOALS NOT MET");
    return all_ok ? 0 : 1;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("goals_bench", [&] { return run(argc, argv); });
}
