// Issue 27: what splitting long in-core work into steps of about step_seconds (0.2 s, the default)
// costs. One context with the defaults (what the CLI and Python open) against one opened with
// step_seconds = 0 (no bound: the in-core product is one kernel call), same devices, same operands,
// runs alternated (split, whole, whole, split, ...), medians. Goal: the split run >= 0.98x the
// speed of the whole one. Also shown: the split plan's steps, the gaps between the progress
// callbacks of one run (what the progress line and a cancel see: the largest gap is the longest
// a Ctrl-C can wait for the step under way), and the time from a cancel at random moments to the
// call's return (API side; bench/cancel_latency.py measures the CLI's Ctrl-C and Python's
// KeyboardInterrupt). Writes one JSON object (git hash, machine, CPU model, ISA, kernel settings,
// date); exits 1 when the goal is not met.
//
//   build/bench/split_bench --git-hash $(git rev-parse --short HEAD) --n 4096 --dtype f64 --out split.json
#include "bench_common.hpp"

#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace ts = tilestream;

namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

template <class T>
int run(const std::string& devices, ts::index_t n, int reps, int cancels,
        double goal, const std::string& hash, const std::string& out) {
    ts::host_matrix<T> a(n, n), b(n, n), c(n, n);
    ts::fill_random(a.view(), 1);
    ts::fill_random(b.view(), 2);
    ts::context split(devices);  // defaults: step_seconds = 0.2
    ts::context_options whole_options;
    whole_options.step_seconds = 0;  // no bound: one step per unit
    ts::context whole(devices, whole_options);

    // Steps are planned for calls that watch them: the split side carries a cancel flag (never
    // raised), as Python's calls do.
    std::atomic<bool> never{false};
    ts::gemm_call_options watched;
    watched.run.cancel = &never;
    ts::gemm_report split_report, whole_report;
    const ts::bench::pair_timing t = ts::bench::alternate(
        reps, [&] { split_report = split.gemm<T>(a.view(), b.view(), c.view(), watched); },
        [&] { whole_report = whole.gemm<T>(a.view(), b.view(), c.view()); });
    const double speed = t.ours > 0 ? t.anchor / t.ours : 0;
    const bool met = speed >= goal;

    // One split run with its progress callbacks timed.
    std::vector<clock_type::time_point> at;
    std::mutex m;
    ts::gemm_call_options progress;
    progress.run.on_step_done = [&](std::size_t) {
        const auto now = clock_type::now();
        const std::lock_guard lock(m);
        at.push_back(now);
    };
    const auto t0 = clock_type::now();
    split.gemm<T>(a.view(), b.view(), c.view(), progress);
    const double total = since(t0);
    std::vector<double> gaps;
    auto previous = t0;
    for (const auto x : at) {
        gaps.push_back(std::chrono::duration<double>(x - previous).count());
        previous = x;
    }
    const double largest_gap = gaps.empty() ? total : *std::max_element(gaps.begin(), gaps.end());

    // Cancels at random moments of split runs: time from the flag to the call's return.
    std::mt19937 rng(27);
    std::vector<double> latencies;
    int finished_first = 0;
    for (int i = 0; i < cancels; ++i) {
        std::atomic<bool> cancel{false};
        ts::gemm_call_options call;
        call.run.cancel = &cancel;
        const double delay = std::uniform_real_distribution<double>(0.05, 0.9 * t.ours)(rng);
        clock_type::time_point raised{};
        std::thread stopper([&] {
            std::this_thread::sleep_for(std::chrono::duration<double>(delay));
            raised = clock_type::now();
            cancel = true;
        });
        bool cancelled = false;
        try {
            split.gemm<T>(a.view(), b.view(), c.view(), call);
        } catch (const ts::cancelled&) {
            cancelled = true;
        }
        const auto returned = clock_type::now();
        stopper.join();
        if (!cancelled) ++finished_first;
        else latencies.push_back(std::chrono::duration<double>(returned - raised).count());
    }
    std::sort(latencies.begin(), latencies.end());

    const std::string dt(ts::to_string(ts::dtype_of<T>()));
    std::printf("%s %lldx%lldx%lld on %s: split %.3f s (%zu units, %zu steps, %s/%s), whole %.3f s (%zu steps); "
                "speed %.3f (goal %.2f)%s\n",
                dt.c_str(), (long long)n, (long long)n, (long long)n, devices.c_str(), t.ours, split_report.plan.units,
                split_report.plan.steps, std::string(ts::to_string(split_report.plan.strategy)).c_str(),
                std::string(ts::to_string(split_report.plan.kernel)).c_str(), t.anchor, whole_report.plan.steps, speed,
                goal, met ? "" : "  NOT MET");
    std::printf("progress: %zu callbacks in %.3f s, largest gap %.3f s; cancel -> return: median %.3f s, max %.3f s "
                "(%zu cancelled, %d finished first)\n",
                at.size(), total, largest_gap, latencies.empty() ? 0.0 : ts::bench::median(latencies),
                latencies.empty() ? 0.0 : latencies.back(), latencies.size(), finished_first);

    auto result = ts::bench::result_header("split_bench", hash, devices).json();
    result["conditions"] = "alternating runs (split, whole, whole, split, ...), medians, after one warm-up of each";
    result["dtype"] = dt;
    result["n"] = n;
    result["reps"] = reps;
    result["split"] = {{"seconds", t.ours},
                       {"step_seconds", 0.2},
                       {"units", split_report.plan.units},
                       {"steps", split_report.plan.steps},
                       {"strategy", std::string(ts::to_string(split_report.plan.strategy))},
                       {"kernel", std::string(ts::to_string(split_report.plan.kernel))}};
    result["whole"] = {{"seconds", t.anchor},
                       {"step_seconds", 0.0},
                       {"units", whole_report.plan.units},
                       {"steps", whole_report.plan.steps},
                       {"strategy", std::string(ts::to_string(whole_report.plan.strategy))},
                       {"kernel", std::string(ts::to_string(whole_report.plan.kernel))}};
    result["speed_split_vs_whole"] = speed;
    result["goal"] = goal;
    result["met"] = met;
    result["progress"] = {{"callbacks", at.size()}, {"run_seconds", total}, {"largest_gap_seconds", largest_gap},
                          {"gaps_seconds", gaps}};
    result["api_cancel"] = {{"tries", cancels},
                            {"cancelled", latencies.size()},
                            {"finished_first", finished_first},
                            {"median_seconds", latencies.empty() ? 0.0 : ts::bench::median(latencies)},
                            {"max_seconds", latencies.empty() ? 0.0 : latencies.back()},
                            {"seconds", latencies}};
    result["goals_met"] = met;
    const std::string text = result.dump(1);
    if (out.empty()) std::printf("%s\n", text.c_str());
    else ts::bench::write_file_atomically(out, text);
    return met ? 0 : 1;
}

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: split_bench [--out F] [--git-hash H] [--devices cpu] [--n 4096] [--dtype f64] "
                              "[--reps 5] [--cancels 8] [--goal 0.98]");
    const std::string out = args.get("out", "");
    const std::string hash = args.get("git-hash", "unknown");
    const std::string devices = args.get("devices", "cpu");  // the CLI's default
    const ts::index_t n = args.number("n", 4096);
    const std::string dtype = args.get("dtype", "f64");
    const int reps = int(args.number("reps", 5));
    const int cancels = int(args.number("cancels", 8));
    const double goal = args.real("goal", 0.98);
    if (!args.finish()) return 2;
    if (dtype == "f32") return run<float>(devices, n, reps, cancels, goal, hash, out);
    if (dtype == "f64") return run<double>(devices, n, reps, cancels, goal, hash, out);
    std::fprintf(stderr, "split_bench: --dtype takes f32 or f64, got %s\n", dtype.c_str());
    return 2;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("split_bench", [&] { return run(argc, argv); });
}
