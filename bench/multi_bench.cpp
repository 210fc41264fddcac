// One GEMM over several devices against one device in the same run: seconds, speedup,
// efficiency, bytes moved, cache hits and each device's share of the work. Writes JSON.
#include "bench_common.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>

namespace ts = tilestream;

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: multi_bench [--out F] [--git-hash H] [--reps R] [--n N] [--sets cpu:1,cpu:2,cuda:0+cpu]"
                              " [--cpu-threads T] [--budget-fraction F] [--cache auto|on|off]");
    const std::string out = args.get("out", "multi-cpu.json"), git = args.get("git-hash", "unknown");
    const std::string sets_arg = args.get("sets", "cpu:1,cpu:2");
    const ts::index_t n = args.number("n", 4096);
    const int reps = int(args.number("reps", 5)), threads = int(args.number("cpu-threads", 1));
    const double fraction = args.real("budget-fraction", 0.25);
    const ts::cache_mode cache = ts::parse_cache_mode(args.get("cache", "auto"));
    if (!args.finish()) return 2;
    // Commas separate device sets, '+' joins the devices of one set.
    std::vector<std::string> sets = ts::bench::split(sets_arg, ',');
    for (auto& set : sets) std::replace(set.begin(), set.end(), '+', ',');
    using T = float;
    ts::host_matrix<T> a(n, n), b(n, n), c(n, n);
    ts::fill_random(a.view(), 1);
    ts::fill_random(b.view(), 2);
    const double flops = 2.0 * double(n) * double(n) * double(n);
    const std::size_t operands = 3 * std::size_t(n) * std::size_t(n) * sizeof(T);
    const auto budget = std::size_t(double(operands) * fraction);
    ts::detail::json rows = ts::detail::json::array();
    double base_seconds = 0;
    int base_count = 1;
    std::printf("%-16s %8s %10s %10s %8s %10s %14s %10s  %s\n", "devices", "count", "seconds", "GFLOP/s", "speedup",
                "efficiency", "bytes moved", "cache hit", "units per device");
    for (const auto& set : sets) {
        ts::open_options oo;
        oo.memory_budget = budget;
        oo.cpu_threads = threads;
        auto devs = ts::open_devices(set, oo);
        std::vector<ts::device*> ptrs;
        for (auto& d : devs) ptrs.push_back(d.get());
        const auto problem = ts::describe_gemm<T>(ts::op::n, ts::op::n, T(1), a.view(), b.view(), T(0), c.view());
        ts::plan_options po;
        po.devices = int(ptrs.size());
        po.cache = cache;
        const auto rates = ts::measure_rates(*ptrs.front(), ts::dtype::f32, po.kernel);
        const auto plan = ts::plan_gemm(problem, budget, rates, po);
        ts::gemm_report rep;
        const double t = ts::bench::time_median(reps, [&] {
            rep = ts::execute_gemm<T>(plan, ptrs, T(1), a.view(), b.view(), T(0), c.view());
        });
        if (rows.empty()) {
            base_seconds = t;
            base_count = int(ptrs.size());
        }
        const double speedup = base_seconds / t;
        const double efficiency = speedup / (double(ptrs.size()) / base_count);
        ts::detail::json shares = ts::detail::json::array();
        std::string units;
        double total_flops = 0;
        for (const auto& d : rep.devices) total_flops += d.flops;
        for (const auto& d : rep.devices) {
            shares.push_back(ts::bench::json_builder().add("id", d.id).add("units", d.units).add("work_share", d.flops / total_flops)
                                 .add("bytes_h2d", d.bytes_h2d).add("cache_hits", d.cache_hits)
                                 .add("bytes_saved", d.bytes_saved).json());
            units += d.id + "=" + std::to_string(d.units) + " ";
        }
        const double hit = rep.cache_hits + rep.cache_misses ? double(rep.cache_hits) / double(rep.cache_hits + rep.cache_misses) : 0;
        ts::bench::json_builder row;
        row.add("devices", set).add("device_count", int(ptrs.size())).add("cpu_threads_per_device", threads);
        row.add("n", n).add("dtype", "f32").add("budget_bytes_per_device", budget);
        row.add("strategy", std::string(ts::to_string(plan.strategy)));
        row.add("tile_m", plan.tile_m).add("tile_n", plan.tile_n).add("tile_k", plan.tile_k);
        row.add("repetitions", reps).add("median_seconds", t).add("gflops", flops / t * 1e-9);
        row.add("anchor", sets.front() + " measured in the same run").add("anchor_median_seconds", base_seconds);
        row.add("speedup", speedup).add("efficiency", efficiency);
        row.add("bytes_h2d", rep.bytes_h2d).add("bytes_d2h", rep.bytes_d2h).add("bytes_saved_by_cache", rep.bytes_saved);
        row.add("cache_hit_rate", hit).add("device_shares", shares);
        rows.push_back(row.json());
        std::printf("%-16s %8zu %10.4f %10.1f %8.3f %9.1f%% %14zu %9.1f%%  %s\n", set.c_str(), ptrs.size(), t,
                    flops / t * 1e-9, speedup, 100 * efficiency, rep.bytes_h2d + rep.bytes_d2h, 100 * hit, units.c_str());
        std::fflush(stdout);
    }
    auto top = ts::bench::result_header("gemm_multi_device", git, sets_arg);
    top.add("statistic", "median").add("budget_fraction_of_operands", fraction).add("cache", std::string(ts::to_string(cache)));
    top.add("results", rows);
    ts::bench::write_file_atomically(out, top.text());
    std::printf("wrote %s\n", out.c_str());
    return 0;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("multi_bench", [&] { return run(argc, argv); });
}
