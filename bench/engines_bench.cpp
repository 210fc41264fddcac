// GEMM on its pipeline against GEMM as tile tasks on the Level 3 engine (issue 26: GEMM is to
// become the engine's case without dependencies, losing nothing). Out of core at a fraction of
// the operands, on the same devices, in one run: for each strategy the pipeline runs (its planner's
// choice, then each out-of-core strategy asked for), the task engine runs the same tiles in the
// same order (routines::tiling_of: B's column panels reused for b_panel, A's row panels otherwise,
// C panels for a_panel_c_panel) in slots sized per operand within the same budget. A last row
// times each engine's own choice: the pipeline's planner against the task model's. Alternating, medians; bytes copied each way beside
// each engine's own prediction. A spec that opens several devices (--device cpu:2) times a context's
// default call (the task engine) against the same with the pipeline, with the budget, and in place
// without one.
// Writes JSON.
#include "bench_common.hpp"

#include "core/routines/gemm_tasks.hpp"

#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cstdio>

namespace ts = tilestream;

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: engines_bench [--out F] [--git-hash H] [--reps R] [--n N] [--device S] "
                              "[--budget-fraction F] [--dtypes f32,f64,c32,c64]");
    const std::string out = args.get("out", "gemm-engines.json"), git = args.get("git-hash", "unknown");
    const std::string spec = args.get("device", "cpu");
    const ts::index_t n_real = args.number("n", 4096);
    const int reps = int(args.number("reps", 5));
    const double fraction = args.real("budget-fraction", 0.25);
    const std::string dtypes = args.get("dtypes", "f32,f64,c32,c64");
    if (!args.finish()) return 2;
    ts::detail::json rows = ts::detail::json::array();
    std::string device_name;
    std::printf("%-4s %5s %-22s %-16s %9s %9s %7s %12s %12s %12s\n", "type", "n", "strategy", "tiles m/n/k", "pipeline",
                "tasks", "ratio", "bytes pipe", "bytes tasks", "tasks model");
    for (const std::string& name : ts::bench::split(dtypes, ',')) {
        const ts::dtype type = ts::parse_dtype(name);
        // Complex at half the order: the same bytes as real at n/sqrt(2), four times the flops per element.
        const ts::index_t n = ts::dtype_traits(type).is_complex ? n_real / 2 : n_real;
        ts::visit_dtype(type, [&]<class T>() {
            ts::host_matrix<T> a(n, n), b(n, n), c(n, n);
            ts::fill_random(a.view(), 1);
            ts::fill_random(b.view(), 2);
            const std::size_t operands = 3 * std::size_t(n) * std::size_t(n) * sizeof(T);
            ts::open_options small;
            small.memory_budget = std::size_t(double(operands) * fraction);
            auto devs = ts::open_devices(spec, small);
            if (devs.size() > 1) {
                // Several devices: a context's default call (the task engine) against the same call
                // with --engine pipeline, out of core at the fraction and in place (no budget).
                device_name = spec + ": " + std::to_string(devs.size()) + " devices, " + devs.front()->id() + " first (" +
                              std::to_string(devs.front()->info().threads) + " threads)";
                const bool host_cores = devs.front()->info().kind == ts::device_kind::cpu;
                devs.clear();
                const double flops = ts::dtype_traits(type).flops_per_multiply_add * double(n) * double(n) * double(n);
                for (bool budgeted : {true, false}) {
                    ts::context_options co;
                    if (budgeted || !host_cores) co.memory_budget = *small.memory_budget;
                    ts::context ctx(spec, co);
                    ts::gemm_call_options tasks_call, pipe_call;
                    // Without a budget the default is the direct path on the calling thread (no
                    // engine): the devices in place are asked for.
                    // Elsewhere 3-D tiles at the budget are asked for (the default may be the direct path).
                    if (!budgeted) tasks_call.strategy = host_cores ? ts::gemm_strategy::zero_copy : ts::gemm_strategy::tiles_3d;
                    pipe_call = tasks_call;
                    pipe_call.engine = ts::gemm_engine::pipeline;
                    ts::gemm_report rt = ctx.gemm<T>(a.view(), b.view(), c.view(), tasks_call);
                    ts::gemm_report rp = ctx.gemm<T>(a.view(), b.view(), c.view(), pipe_call);
                    const auto timing = ts::bench::alternate(
                        reps, [&] { rp = ctx.gemm<T>(a.view(), b.view(), c.view(), pipe_call); },
                        [&] { rt = ctx.gemm<T>(a.view(), b.view(), c.view(), tasks_call); });
                    const std::string label = std::string(budgeted ? "several, budget" : host_cores ? "several, in place" : "several, asked") + " " +
                                              std::string(ts::to_string(rt.plan.strategy));
                    const std::string tiles = std::to_string(rt.plan.tile_m) + "/" + std::to_string(rt.plan.tile_n) + "/" +
                                              std::to_string(rt.plan.tile_k);
                    ts::bench::json_builder row;
                    row.add("dtype", name).add("n", n).add("devices", ctx.device_names());
                    row.add("case", budgeted ? "several devices, each with the budget fraction (context defaults)"
                                             : host_cores ? "several devices, no budget, in place (--strategy zero-copy)"
                                                          : "several devices, the budget fraction, --strategy tiles-3d");
                    row.add("tasks_strategy", std::string(ts::to_string(rt.plan.strategy)));
                    row.add("pipeline_strategy", std::string(ts::to_string(rp.plan.strategy)));
                    row.add("tasks_engine", std::string(ts::to_string(rt.plan.engine)));
                    row.add("pipeline_engine", std::string(ts::to_string(rp.plan.engine)));
                    row.add("tile_m", rt.plan.tile_m).add("tile_n", rt.plan.tile_n).add("tile_k", rt.plan.tile_k);
                    row.add("pipeline_tiles", std::to_string(rp.plan.tile_m) + "/" + std::to_string(rp.plan.tile_n) + "/" +
                                                  std::to_string(rp.plan.tile_k));
                    row.add("budget_bytes", co.memory_budget ? *co.memory_budget : 0).add("operand_bytes", operands);
                    row.add("repetitions", reps);
                    row.add("pipeline_median_seconds", timing.ours).add("pipeline_gflops", flops / timing.ours * 1e-9);
                    row.add("tasks_median_seconds", timing.anchor).add("tasks_gflops", flops / timing.anchor * 1e-9);
                    row.add("tasks_speed_relative_to_pipeline", timing.ours / timing.anchor);
                    row.add("pipeline_bytes_h2d", rp.bytes_h2d).add("pipeline_predicted_bytes_h2d", rp.plan.bytes_h2d);
                    row.add("tasks_bytes_h2d", rt.bytes_h2d).add("tasks_predicted_bytes_h2d", rt.plan.bytes_h2d);
                    row.add("tasks_peer_hits", rt.peer_hits).add("pipeline_peer_hits", rp.peer_hits);
                    rows.push_back(row.json());
                    std::printf("%-4s %5lld %-22s %-16s %9.4f %9.4f %7.3f %12zu %12zu %12zu\n", name.c_str(), (long long)n,
                                label.c_str(), tiles.c_str(), timing.ours, timing.anchor, timing.ours / timing.anchor,
                                rp.bytes_h2d + rp.bytes_d2h, rt.bytes_h2d + rt.bytes_d2h, rt.plan.bytes_h2d + rt.plan.bytes_d2h);
                    std::fflush(stdout);
                }
                return;
            }
            // One device (the first the spec opens): ts::gemm plans for one.
            const std::vector<ts::device*> raw{devs.front().get()};
            device_name = spec + ": " + devs.front()->id() + " (" + std::to_string(devs.front()->info().threads) + " threads)";
            const double flops = ts::dtype_traits(type).flops_per_multiply_add * double(n) * double(n) * double(n);
            // Last, each engine's own choice: the pipeline's planner against the task model's (choose_gemm_tasks).
            const std::pair<ts::gemm_strategy, bool> cases[] = {
                {ts::gemm_strategy::automatic, false}, {ts::gemm_strategy::a_panel, false},
                {ts::gemm_strategy::a_panel_c_panel, false}, {ts::gemm_strategy::b_panel, false},
                {ts::gemm_strategy::c_block, false}, {ts::gemm_strategy::tiles_3d, false},
                {ts::gemm_strategy::automatic, true}};
            for (const auto& [s, own] : cases) {
                ts::gemm_options opt;
                opt.strategy = s;
                opt.engine = ts::gemm_engine::pipeline;  // the default runs one device on the task engine
                ts::gemm_report pipe;
                try {
                    pipe = ts::gemm<T>(*raw.front(), ts::op::n, ts::op::n, T(1), a.view(), b.view(), T(0), c.view(), opt);
                } catch (const ts::out_of_budget& e) {
                    std::printf("%-4s %5lld %-16s  does not fit: %s\n", name.c_str(), (long long)n,
                                std::string(ts::to_string(s)).c_str(), e.what());
                    continue;
                }
                const ts::gemm_plan& p = pipe.plan;
                ts::detail::routines::gemm_tiling t = ts::detail::routines::tiling_of(p);
                ts::gemm_strategy tasks_from = p.strategy;
                if (own) {
                    ts::plan_options po;
                    po.kernel = p.kernel;
                    ts::detail::routines::choose_gemm_tasks(p.problem, *small.memory_budget, false, p.rates, 1, po, &t,
                                                            &tasks_from);
                }
                ts::detail::engine::run_result tasks;
                ts::detail::engine::model_result model;
                const auto timing = ts::bench::alternate(
                    reps,
                    [&] {
                        pipe = ts::gemm<T>(*raw.front(), ts::op::n, ts::op::n, T(1), a.view(), b.view(), T(0), c.view(), opt);
                    },
                    [&] {
                        tasks = ts::detail::routines::gemm_on_tasks<T>(raw, ts::op::n, ts::op::n, T(1), a.view(),
                                                                       b.view(), T(0), c.view(), t, {}, &model);
                    });
                const std::string tiles = std::to_string(t.tile_m) + "/" + std::to_string(t.tile_n) + "/" +
                                          std::to_string(t.tile_k);
                std::string label = std::string(ts::to_string(s)) +
                                    (s == ts::gemm_strategy::automatic ? "=" + std::string(ts::to_string(p.strategy)) : "");
                if (own) label = "own: " + std::string(ts::to_string(p.strategy)) + "/" + std::string(ts::to_string(tasks_from)) +
                                 (t.by_columns ? " cols" : "");
                ts::bench::json_builder row;
                row.add("dtype", name).add("n", n).add("requested_strategy", std::string(ts::to_string(s)));
                row.add("strategy", std::string(ts::to_string(p.strategy)));
                row.add("tasks_tiles_from", own ? "the task model's choice (choose_gemm_tasks) among every strategy's tiles "
                                                  "and both orders"
                                                : "the pipeline's plan (tiling_of)");
                row.add("tasks_strategy_tiles", std::string(ts::to_string(tasks_from)));
                row.add("tile_m", t.tile_m).add("tile_n", t.tile_n).add("tile_k", t.tile_k);
                row.add("tasks_order", t.c_panel ? "rows, C panels" : t.by_columns ? "columns" : "rows");
                row.add("budget_bytes", *small.memory_budget).add("operand_bytes", operands);
                row.add("repetitions", reps);
                row.add("pipeline_median_seconds", timing.ours).add("pipeline_gflops", flops / timing.ours * 1e-9);
                row.add("tasks_median_seconds", timing.anchor).add("tasks_gflops", flops / timing.anchor * 1e-9);
                row.add("tasks_speed_relative_to_pipeline", timing.ours / timing.anchor);
                row.add("pipeline_bytes_h2d", pipe.bytes_h2d).add("pipeline_bytes_d2h", pipe.bytes_d2h);
                row.add("pipeline_predicted_bytes_h2d", p.bytes_h2d).add("pipeline_peak_device_bytes", pipe.peak_device_bytes);
                row.add("tasks_bytes_h2d", tasks.bytes_h2d).add("tasks_bytes_d2h", tasks.bytes_d2h);
                row.add("tasks_predicted_bytes_h2d", model.bytes_h2d).add("tasks_peak_device_bytes", tasks.peak_device_bytes);
                rows.push_back(row.json());
                std::printf("%-4s %5lld %-22s %-16s %9.4f %9.4f %7.3f %12zu %12zu %12zu\n", name.c_str(), (long long)n,
                            label.c_str(), tiles.c_str(), timing.ours, timing.anchor, timing.ours / timing.anchor,
                            pipe.bytes_h2d + pipe.bytes_d2h, tasks.bytes_h2d + tasks.bytes_d2h,
                            model.bytes_h2d + model.bytes_d2h);
                std::fflush(stdout);
            }
        });
    }
    auto top = ts::bench::result_header("gemm_engines", git, device_name);
    top.add("statistic", "median of alternating runs (pipeline and tasks swapped every repetition)");
    top.add("budget_fraction_of_operands", fraction);
    top.add("ratio", "tasks_speed_relative_to_pipeline = pipeline seconds / tasks seconds (above 1: tasks faster)");
    top.add("results", rows);
    ts::bench::write_file_atomically(out, top.text());
    std::printf("wrote %s\n", out.c_str());
    return 0;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("engines_bench", [&] { return run(argc, argv); });
}
