// Issue 27's speed goals from C++: the time of one context::gemm call (default options: the
// direct path or the engine, as the context chooses) beside OpenBLAS called directly (cblas_?gemm),
// over the square sweep n = 1, 2, 4, ..., max-n and the skinny shapes, f32 and f64; the fixed cost
// per call (ours - OpenBLAS, microseconds); and batched stacks (context::gemm_strided_batched)
// beside a loop of OpenBLAS calls over the same stack; and small f64 getrf, potrf and trsm calls
// (the task engine's fixed cost per call) beside LAPACK/CBLAS called directly. Runs alternate (ours, anchor, anchor, ours,
// ...) and each figure is a median. Writes one JSON object (git hash, machine, CPU model, ISA,
// OPENBLAS_CORETYPE and the other kernel settings, date) and prints each ratio beside its goal;
// exits 1 when a goal is not met. numpy's side of the goals is bench/small_python.py.
//
//   build/bench/small_bench --git-hash $(git rev-parse --short HEAD) --out bench/results/small.json
#include "bench_common.hpp"
#include "core/cblas_gemm.hpp"
#include "core/lapack_calls.hpp"

#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

namespace ts = tilestream;

namespace {

struct shape {
    ts::index_t m, n, k;
};

/// Repetitions so that one side takes about `budget` seconds (at least 3, at most `most`).
int reps_for(double flops, int most, double budget = 0.5) {
    const double guess = flops / 50e9 + 1e-6;
    return int(std::clamp(budget / guess, 3.0, double(most)));
}

template <class T>
ts::detail::json one_call(ts::context& ctx, shape s, int most_reps, double goal, bool& met) {
    ts::host_matrix<T> a(s.m, s.k), b(s.k, s.n), c(s.m, s.n), d(s.m, s.n);
    ts::fill_random(a.view(), 1);
    ts::fill_random(b.view(), 2);
    ts::gemm_report last;
    const auto ours = [&] { last = ctx.gemm<T>(a.view(), b.view(), c.view()); };
    const auto anchor = [&] {
        ts::detail::cblas_xgemm<T>(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, T(1), a.data(), s.k, b.data(),
                                  s.n, T(0), d.data(), s.n);
    };
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    const int reps = reps_for(flops, most_reps);
    const ts::bench::pair_timing t = ts::bench::alternate(reps, ours, anchor);
    const double ratio = t.ours > 0 ? t.anchor / t.ours : 0;
    const bool ok = ratio >= goal;
    met = met && ok;
    std::printf("  %-4s %5lldx%5lldx%5lld  ours %10.2f us  openblas %10.2f us  fixed %+8.2f us  ratio %.3f (goal %.2f)%s  %s/%s\n",
                std::string(ts::to_string(ts::dtype_of<T>())).c_str(), (long long)s.m, (long long)s.n, (long long)s.k,
                t.ours * 1e6, t.anchor * 1e6, (t.ours - t.anchor) * 1e6, ratio, goal, ok ? "" : "  NOT MET",
                std::string(ts::to_string(last.plan.strategy)).c_str(), std::string(ts::to_string(last.plan.kernel)).c_str());
    ts::detail::json row = {{"dtype", std::string(ts::to_string(ts::dtype_of<T>()))},
                            {"m", s.m},
                            {"n", s.n},
                            {"k", s.k},
                            {"reps", reps},
                            {"seconds", t.ours},
                            {"openblas_seconds", t.anchor},
                            {"fixed_cost_us", (t.ours - t.anchor) * 1e6},
                            {"ratio", ratio},
                            {"goal", goal},
                            {"met", ok},
                            {"strategy", std::string(ts::to_string(last.plan.strategy))},
                            {"kernel", std::string(ts::to_string(last.plan.kernel))}};
    return row;
}

template <class T>
ts::detail::json batched(ts::context& ctx, ts::index_t count, ts::index_t n, int most_reps, double goal, bool& met) {
    const ts::index_t one = n * n;
    std::vector<T> a(std::size_t(count * one)), b(std::size_t(count * one)), c(std::size_t(count * one)),
        d(std::size_t(count * one));
    ts::fill_random(ts::host_matrix_view<T>(a.data(), count * n, n), 3);
    ts::fill_random(ts::host_matrix_view<T>(b.data(), count * n, n), 4);
    const ts::host_matrix_view<const T> a0(a.data(), n, n), b0(b.data(), n, n);
    const ts::host_matrix_view<T> c0(c.data(), n, n);
    ts::gemm_report last;
    const auto ours = [&] {
        last = ctx.gemm_strided_batched<T>(ts::op::n, ts::op::n, T(1), a0, one, b0, one, T(0), c0, one, count);
    };
    const auto anchor = [&] {
        for (ts::index_t i = 0; i < count; ++i)
            ts::detail::cblas_xgemm<T>(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, T(1), a.data() + i * one, n,
                                      b.data() + i * one, n, T(0), d.data() + i * one, n);
    };
    const int reps = reps_for(2.0 * double(count) * double(n * n * n), most_reps);
    const ts::bench::pair_timing t = ts::bench::alternate(reps, ours, anchor);
    const double ratio = t.ours > 0 ? t.anchor / t.ours : 0;
    const bool ok = ratio >= goal;
    met = met && ok;
    std::printf("  %-4s batch %lld of %lldx%lld  ours %10.1f us  openblas loop %10.1f us  ratio %.3f (goal %.2f)%s  %s/%s\n",
                std::string(ts::to_string(ts::dtype_of<T>())).c_str(), (long long)count, (long long)n, (long long)n,
                t.ours * 1e6, t.anchor * 1e6, ratio, goal, ok ? "" : "  NOT MET",
                std::string(ts::to_string(last.plan.strategy)).c_str(), std::string(ts::to_string(last.plan.kernel)).c_str());
    return {{"dtype", std::string(ts::to_string(ts::dtype_of<T>()))},
            {"count", count},
            {"kernel", std::string(ts::to_string(last.plan.kernel))},
            {"n", n},
            {"reps", reps},
            {"seconds", t.ours},
            {"openblas_loop_seconds", t.anchor},
            {"ratio", ratio},
            {"goal", goal},
            {"met", ok},
            {"strategy", std::string(ts::to_string(last.plan.strategy))},
            {"batch_group", last.plan.batch_group}};
}

/// One small factorization or solve through the context (default options) beside the same LAPACK
/// or CBLAS routine called directly on a copy of the same operands, each restored before every run
/// outside the clock; f64, column-major. No goal: the fixed cost per call is recorded.
ts::detail::json lapack_call(ts::context& ctx, const std::string& routine, ts::index_t n, int most_reps) {
    using T = double;
    const ts::layout cm = ts::layout::col_major;
    ts::host_matrix<T> a0(n, n, cm), a(n, n, cm), a2(n, n, cm), b0(n, 8, cm), b(n, 8, cm), b2(n, 8, cm);
    ts::fill_random(a0.view(), 5);
    ts::fill_random(b0.view(), 6);
    for (ts::index_t i = 0; i < n; ++i) a0.view()(i, i) += T(2 * n);  // well conditioned, and SPD's lower triangle
    for (ts::index_t j = 0; j < n; ++j)
        for (ts::index_t i = 0; i < j; ++i) a0.view()(i, j) = a0.view()(j, i);
    std::vector<ts::index_t> ipiv(static_cast<std::size_t>(n));
    std::vector<int> ipiv32(static_cast<std::size_t>(n));
    const int ni = int(n);
    const auto restore = [&] {
        std::copy(a0.data(), a0.data() + a0.size(), a.data());
        std::copy(a0.data(), a0.data() + a0.size(), a2.data());
        std::copy(b0.data(), b0.data() + b0.size(), b.data());
        std::copy(b0.data(), b0.data() + b0.size(), b2.data());
    };
    std::function<void()> ours, anchor;
    if (routine == "getrf") {
        ours = [&] { ctx.getrf<T>(a.view(), ipiv); };
        anchor = [&] { ts::detail::lapack_getrf<T>(ni, ni, a2.data(), ni, ipiv32.data()); };
    } else if (routine == "potrf") {
        ours = [&] { ctx.potrf<T>(ts::uplo::lower, a.view()); };
        anchor = [&] { ts::detail::lapack_potrf<T>('L', ni, a2.data(), ni); };
    } else {  // trsm: L X = B, 8 right-hand sides
        ours = [&] {
            ctx.trsm<T>(ts::side::left, ts::uplo::lower, ts::op::n, ts::diag::non_unit, T(1), a.view(), b.view());
        };
        anchor = [&] {
            cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, ni, 8, 1.0, a2.data(), ni,
                        b2.data(), ni);
        };
    }
    const double flops = routine == "trsm" ? double(n) * double(n) * 8.0 : routine == "getrf" ? 2.0 / 3.0 * double(n) * n * n
                                                                                              : 1.0 / 3.0 * double(n) * n * n;
    const int reps = reps_for(flops, most_reps, 0.2);
    const ts::bench::pair_timing t = ts::bench::alternate(reps, ours, anchor, restore);
    std::printf("  f64  %-5s n=%-5lld  ours %10.2f us  LAPACK/CBLAS %10.2f us  fixed %+8.2f us  ratio %.3f\n",
                routine.c_str(), (long long)n, t.ours * 1e6, t.anchor * 1e6, (t.ours - t.anchor) * 1e6,
                t.ours > 0 ? t.anchor / t.ours : 0.0);
    return {{"dtype", "f64"},
            {"routine", routine},
            {"n", n},
            {"nrhs", routine == "trsm" ? 8 : 0},
            {"reps", reps},
            {"seconds", t.ours},
            {"lapack_seconds", t.anchor},
            {"fixed_cost_us", (t.ours - t.anchor) * 1e6},
            {"ratio", t.ours > 0 ? t.anchor / t.ours : 0.0}};
}

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: small_bench [--out F] [--git-hash H] [--devices cpu] [--max-n 4096] [--reps 51] "
                              "[--dtypes f32,f64] [--batch 10000] [--small-batch 10] [--batch-sizes 4,16,64] "
                              "[--lapack-sizes 4,16,64,256] [--only batched|calls|lapack]");
    const std::string out = args.get("out", "");
    const std::string hash = args.get("git-hash", "unknown");
    const std::string devices = args.get("devices", "cpu");
    const ts::index_t max_n = args.number("max-n", 4096);
    const int most_reps = int(args.number("reps", 51));
    const auto dtypes = ts::bench::split(args.get("dtypes", "f32,f64"), ',');
    const ts::index_t batch = args.number("batch", 10000);
    // A short stack too (a few products: the batched call's fixed cost shows there); 0: none.
    const ts::index_t small_batch = args.number("small-batch", 10);
    const auto batch_sizes = ts::bench::split(args.get("batch-sizes", "4,16,64"), ',');
    // Small LAPACK calls (getrf, potrf) and trsm: the task engine's fixed cost per call.
    const auto lapack_sizes = ts::bench::split(args.get("lapack-sizes", "4,16,64,256"), ',');
    // Only one part: "batched" (the stacks), "calls" (the sweep and the skinny shapes) or "lapack".
    const std::string only = args.get("only", "");
    if (!args.finish()) return 2;
    if (!only.empty() && only != "batched" && only != "calls" && only != "lapack") {
        std::fprintf(stderr, "small_bench: --only takes 'batched', 'calls' or 'lapack', got '%s'\n", only.c_str());
        return 2;
    }

    std::vector<shape> shapes;
    for (ts::index_t n = 1; n <= max_n; n *= 2) shapes.push_back({n, n, n});
    if (max_n >= 4096)
        for (shape s : {shape{4096, 4096, 16}, shape{16, 16, 4096}, shape{4096, 16, 4096}, shape{1, 4096, 4096}})
            shapes.push_back(s);

    ts::context ctx(devices);  // default options: what a newcomer gets
    auto header = ts::bench::result_header("small_bench", hash, devices);
    bool met = true;
    ts::detail::json calls = ts::detail::json::array(), stacks = ts::detail::json::array();
    std::printf("one call (context::gemm, default options) against cblas_?gemm, goal >= 0.90x:\n");
    for (const auto& d : dtypes)
        for (shape s : !only.empty() && only != "calls" ? std::vector<shape>{} : shapes) {
            if (d == "f32") calls.push_back(one_call<float>(ctx, s, most_reps, 0.90, met));
            else if (d == "f64") calls.push_back(one_call<double>(ctx, s, most_reps, 0.90, met));
            else throw std::invalid_argument("small_bench: --dtypes takes f32 and f64, got " + d);
        }
    std::printf("batched (context::gemm_strided_batched) against a loop of cblas_?gemm (numpy's side: small_python.py):\n");
    for (const auto& d : dtypes)
        for (const auto& nb : !only.empty() && only != "batched" ? std::vector<std::string>{} : batch_sizes) {
            const ts::index_t n = std::stoll(nb);
            // No goal against the C loop (the goal, 1.5x, is against numpy's matmul): recorded.
            bool ignored = true;
            for (const ts::index_t count : {batch, small_batch}) {
                if (count <= 0) continue;
                if (d == "f32") stacks.push_back(batched<float>(ctx, count, n, most_reps, 0.0, ignored));
                else stacks.push_back(batched<double>(ctx, count, n, most_reps, 0.0, ignored));
            }
        }
    std::printf("small LAPACK calls and trsm (context, default options) against LAPACK/CBLAS called directly (no goal):\n");
    ts::detail::json lapack = ts::detail::json::array();
    for (const auto& nb : !only.empty() && only != "lapack" ? std::vector<std::string>{} : lapack_sizes)
        for (const char* routine : {"getrf", "potrf", "trsm"}) lapack.push_back(lapack_call(ctx, routine, std::stoll(nb), most_reps));
    auto result = header.json();
    result["conditions"] = "alternating runs (ours, anchor, anchor, ours, ...), medians, after one warm-up of each";
    result["calls"] = calls;
    result["batched"] = stacks;
    result["lapack"] = lapack;
    result["goals_met"] = met;
    const std::string text = result.dump(1);
    if (out.empty()) std::printf("%s\n", text.c_str());
    else ts::bench::write_file_atomically(out, text);
    return met ? 0 : 1;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("small_bench", [&] { return run(argc, argv); });
}
