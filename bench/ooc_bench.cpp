// Out-of-core GEMM against in-core on the same device in one run: a budget of 25% of the three
// operands, f32 and f64, every strategy's bytes beside the seed's cost formulas. Writes JSON.
#include "bench_common.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cstdio>
#include <iostream>

namespace ts = tilestream;

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: ooc_bench [--out F] [--git-hash H] [--reps R] [--n N] [--devices S] [--budget-fraction F]");
    const std::string out = args.get("out", "ooc-cpu.json"), git = args.get("git-hash", "unknown");
    const std::string spec = args.get("devices", "cpu");
    const ts::index_t n = args.number("n", 4096);
    const int reps = int(args.number("reps", 5));
    const double fraction = args.real("budget-fraction", 0.25);
    if (!args.finish()) return 2;
    ts::detail::json rows = ts::detail::json::array();
    std::string device_name;
    std::printf("%-4s %-16s %6s %10s %10s %14s %14s %8s\n", "type", "strategy", "tile", "seconds", "GFLOP/s", "bytes moved",
                "seed formula", "vs in-core");
    for (ts::dtype type : {ts::dtype::f32, ts::dtype::f64}) {
        ts::visit_real_dtype(type, "bench", [&]<class T>() {
            ts::host_matrix<T> a(n, n), b(n, n), c(n, n);
            ts::fill_random(a.view(), 1);
            ts::fill_random(b.view(), 2);
            const double flops = 2.0 * double(n) * double(n) * double(n);
            const std::size_t operands = 3 * std::size_t(n) * std::size_t(n) * sizeof(T);
            const auto budget = std::size_t(double(operands) * fraction);
            ts::open_options big, small;
            small.memory_budget = budget;
            auto in_dev = ts::open_devices(spec, big);
            auto ooc_dev = ts::open_devices(spec, small);
            device_name = in_dev.front()->id() + " (" + std::to_string(in_dev.front()->info().threads) + " threads)";

            const auto run = [&](ts::device& dev, ts::gemm_strategy s, ts::gemm_report& last) {
                return [&dev, s, &last, &a, &b, &c] {
                    ts::gemm_options opt;
                    opt.strategy = s;
                    last = ts::gemm<T>(dev, ts::op::n, ts::op::n, T(1), a.view(), b.view(), T(0), c.view(), opt);
                };
            };
            ts::gemm_report in_rep;
            std::vector<double> anchors;
            for (ts::gemm_strategy s : {ts::gemm_strategy::automatic, ts::gemm_strategy::tiles_3d, ts::gemm_strategy::a_panel,
                                        ts::gemm_strategy::a_panel_c_panel, ts::gemm_strategy::b_panel, ts::gemm_strategy::c_block}) {
                ts::gemm_report rep;
                // Each strategy alternates with the in-core anchor, so both see the same machine.
                const auto times = ts::bench::alternate(reps, run(*ooc_dev.front(), s, rep),
                                                        run(*in_dev.front(), ts::gemm_strategy::in_core, in_rep));
                const double t = times.ours, t_in = times.anchor;
                anchors.push_back(t_in);
                const auto& p = rep.plan;
                // The seed's formulas (elements): strategy 1 about 2n^3/T + n^2, strategies 2 and 4 about 2n^2 + n^3/T.
                const double nn = double(n), es = double(sizeof(T));
                double seed = 0;
                if (p.strategy == ts::gemm_strategy::tiles_3d) seed = (2 * nn * nn * nn / double(p.tile_m) + nn * nn) * es;
                if (p.strategy == ts::gemm_strategy::a_panel) seed = (2 * nn * nn + nn * nn * nn / double(p.tile_m)) * es;
                if (p.strategy == ts::gemm_strategy::b_panel) seed = (2 * nn * nn + nn * nn * nn / double(p.tile_n)) * es;
                const std::size_t moved = rep.bytes_h2d + rep.bytes_d2h;
                ts::bench::json_builder row;
                row.add("dtype", std::string(ts::to_string(type))).add("n", n).add("requested_strategy", std::string(ts::to_string(s)));
                row.add("strategy", std::string(ts::to_string(p.strategy)));
                row.add("tile_m", p.tile_m).add("tile_n", p.tile_n).add("tile_k", p.tile_k);
                row.add("budget_bytes", budget).add("operand_bytes", operands).add("peak_device_bytes", rep.peak_device_bytes);
                row.add("repetitions", reps).add("median_seconds", t).add("gflops", flops / t * 1e-9);
                row.add("bytes_h2d", rep.bytes_h2d).add("bytes_d2h", rep.bytes_d2h).add("bytes_packed", rep.bytes_packed);
                row.add("predicted_bytes_h2d", p.bytes_h2d).add("predicted_bytes_d2h", p.bytes_d2h);
                row.add("predicted_seconds", p.predicted_seconds).add("predicted_bound", p.bound);
                if (seed > 0) row.add("seed_formula_bytes", seed);
                row.add("anchor", "in-core tilestream gemm (vendor kernel) on the same device without a budget (in place), "
                                  "alternating with this row's runs");
                row.add("anchor_median_seconds", t_in).add("anchor_gflops", flops / t_in * 1e-9);
                row.add("ratio_to_anchor", t_in / t);
                rows.push_back(row.json());
                std::printf("%-4s %-16s %6lld %10.4f %10.1f %14zu %14.0f %8.3f\n", std::string(ts::to_string(type)).c_str(),
                            (std::string(ts::to_string(s)) + (s == ts::gemm_strategy::automatic ? "=" + std::string(ts::to_string(p.strategy)) : "")).c_str(),
                            (long long)p.tile_m, t, flops / t * 1e-9, moved, seed, t_in / t);
                std::fflush(stdout);
            }
            const double t_in = ts::bench::median(anchors);
            std::printf("%-4s %-16s %6s %10.4f %10.1f  (median of the rows' anchors)\n", std::string(ts::to_string(type)).c_str(),
                        "in-core (anchor)", "-", t_in, flops / t_in * 1e-9);
        });
    }
    auto top = ts::bench::result_header("gemm_out_of_core", git, device_name);
    top.add("statistic", "median of alternating runs").add("budget_fraction_of_operands", fraction);
    top.add("results", rows);
    ts::bench::write_file_atomically(out, top.text());
    std::printf("wrote %s\n", out.c_str());
    return 0;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("ooc_bench", [&] { return run(argc, argv); });
}
