// OpenCL GEMM on this machine's OpenCL device (PoCL on the CPU in CI): naive, tiled and vendor
// (CLBlast) kernels through the default library path (tilestream::context, automatic plan), beside
// OpenBLAS called directly and the CPU backend's kernels in the same run; then out-of-core on
// opencl:0 with a budget of 25% of the operands against in-core on the same device. Each figure
// records where its time went (sums of the trace's spans by kind). Writes one JSON result file.
#include "bench_common.hpp"

#include <tilestream/context.hpp>
#include <tilestream/trace.hpp>
#include <tilestream/verify.hpp>

#include <cblas.h>

#include <cstdio>
#include <map>

namespace ts = tilestream;

namespace {

struct figure {
    std::string name, device, kernel, strategy;
    ts::dtype type = ts::dtype::f32;
    ts::index_t n = 0;
    int reps = 0;
    double seconds = 0, anchor_seconds = 0;
    std::map<std::string, double> busy;  ///< seconds per span kind summed over streams (last run)
    std::size_t bytes_h2d = 0, bytes_d2h = 0, peak = 0;
};

const char* kind_name(ts::span_kind k) {
    switch (k) {
        case ts::span_kind::copy_h2d: return "copy_h2d";
        case ts::span_kind::copy_d2h: return "copy_d2h";
        case ts::span_kind::copy_d2d: return "copy_d2d";
        case ts::span_kind::copy_peer: return "copy_peer";
        case ts::span_kind::kernel: return "kernel";
        case ts::span_kind::host: return "host";
    }
    return "other";
}

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: opencl_bench [--out F] [--git-hash H] [--reps R] [--n 2048] [--naive-reps 1] "
                              "[--device opencl:0]");
    const std::string out = args.get("out", "gemm-opencl.json"), git = args.get("git-hash", "unknown");
    const int reps = int(args.number("reps", 3));
    const int naive_reps = int(args.number("naive-reps", 1));
    const ts::index_t n = args.number("n", 2048);
    const std::string spec = args.get("device", "opencl:0");
    if (!args.finish()) return 2;
    const int cores = ts::inventory().cpu_cores;
    std::vector<figure> figures;

    for (ts::dtype type : {ts::dtype::f32, ts::dtype::f64})
        ts::visit_real_dtype(type, "bench", [&]<class T>() {
            ts::host_matrix<T> a(n, n), b(n, n), c(n, n), c2(n, n);
            ts::fill_random(a.view(), 1);
            ts::fill_random(b.view(), 2);
            openblas_set_num_threads(cores);
            const double anchor = ts::bench::time_median(reps, [&] {
                if constexpr (std::is_same_v<T, float>)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c2.data(), n);
                else
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c2.data(), n);
            });
            const auto measure = [&](const std::string& name, const std::string& devices, ts::gemm_kernel kernel,
                                     std::optional<std::size_t> budget, int r,
                                     ts::gemm_strategy strategy = ts::gemm_strategy::automatic) {
                ts::context_options o;
                o.kernel = kernel;
                o.memory_budget = budget;
                ts::context ctx(devices, o);
                // Compile the kernels (and fill the program caches) on a small problem first.
                ts::host_matrix<T> sa(64, 64), sb(64, 64), sc(64, 64);
                ts::fill_random(sa.view(), 3);
                ts::fill_random(sb.view(), 4);
                ctx.gemm<T>(sa.view(), sb.view(), sc.view());
                figure f{name, ctx.device_names(), std::string(ts::to_string(kernel)), "", type, n, r};
                std::vector<double> secs;
                ts::gemm_report rep;
                for (int i = 0; i < r; ++i) {
                    ts::trace_recorder rec;
                    ts::gemm_call_options call;
                    call.strategy = strategy;
                    call.run.trace = &rec;
                    ts::fill_nan(c.view());
                    rep = ctx.gemm<T>(a.view(), b.view(), c.view(), call);
                    secs.push_back(rep.seconds);
                    f.busy.clear();
                    for (const auto& s : rec.spans()) f.busy[kind_name(s.kind)] += s.t1 - s.t0;
                }
                const auto check = ts::check_gemm<T>(ts::op::n, ts::op::n, T(1), a.view(), b.view(), T(0),
                                                     c.view(), c.view());
                if (!check.passed()) std::fprintf(stderr, "%s: WRONG RESULT: %s\n", name.c_str(), check.summary().c_str());
                f.seconds = ts::bench::median(secs);
                f.anchor_seconds = anchor;
                f.strategy = std::string(ts::to_string(rep.plan.strategy));
                f.bytes_h2d = rep.bytes_h2d;
                f.bytes_d2h = rep.bytes_d2h;
                f.peak = rep.peak_device_bytes;
                const double flops = 2.0 * double(n) * double(n) * double(n);
                std::printf("%-34s %-4s n=%lld  %8.3f s  %7.2f GFLOP/s  OpenBLAS %7.2f GFLOP/s  ratio %.4f  [%s]",
                            name.c_str(), std::string(ts::to_string(type)).c_str(), (long long)n, f.seconds,
                            flops / f.seconds * 1e-9, flops / anchor * 1e-9, anchor / f.seconds, f.strategy.c_str());
                for (const auto& [k, v] : f.busy) std::printf(" %s %.3fs", k.c_str(), v);
                std::printf("\n");
                std::fflush(stdout);
                figures.push_back(f);
            };
            measure("cpu vendor (OpenBLAS in tilestream)", "cpu", ts::gemm_kernel::vendor, {}, reps);
            measure("cpu tiled", "cpu", ts::gemm_kernel::tiled, {}, reps);
            measure("opencl vendor (CLBlast)", spec, ts::gemm_kernel::vendor, {}, reps);
            measure("opencl tiled", spec, ts::gemm_kernel::tiled, {}, reps);
            measure("opencl naive", spec, ts::gemm_kernel::naive, {}, naive_reps);
            const std::size_t operands = 3 * std::size_t(n) * std::size_t(n) * sizeof(T);
            // Out-of-core against in-core on the same device (the automatic plan on an unbudgeted
            // device may itself stream; the anchor here is the whole problem resident).
            measure("opencl vendor, in-core", spec, ts::gemm_kernel::vendor, {}, reps, ts::gemm_strategy::in_core);
            measure("opencl vendor, 25% budget", spec, ts::gemm_kernel::vendor, operands / 4, reps);
        });

    ts::detail::json rows = ts::detail::json::array();
    for (const auto& f : figures) {
        ts::bench::json_builder busy;
        for (const auto& [k, v] : f.busy) busy.add(k, v);
        const double flops = 2.0 * double(f.n) * double(f.n) * double(f.n);
        rows.push_back(ts::bench::json_builder()
                           .add("figure", f.name)
                           .add("devices", f.device)
                           .add("kernel", f.kernel)
                           .add("dtype", std::string(ts::to_string(f.type)))
                           .add("n", f.n)
                           .add("strategy", f.strategy)
                           .add("reps", f.reps)
                           .add("median_seconds", f.seconds)
                           .add("gflops", flops / f.seconds * 1e-9)
                           .add("anchor", "OpenBLAS cblas_?gemm called directly, " + std::to_string(cores) + " threads")
                           .add("anchor_median_seconds", f.anchor_seconds)
                           .add("ratio_to_anchor", f.anchor_seconds / f.seconds)
                           .add("bytes_h2d", f.bytes_h2d)
                           .add("bytes_d2h", f.bytes_d2h)
                           .add("peak_device_bytes", f.peak)
                           .add("busy_seconds_by_span_kind", busy.json())
                           .json());
    }
    auto top = ts::bench::result_header("gemm_opencl", git, spec + " (" + ts::describe_present_devices() + ")");
    top.add("results", rows);
    ts::bench::write_file_atomically(out, top.text());
    std::printf("wrote %s\n", out.c_str());
    return 0;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("opencl_bench", [&] { return run(argc, argv); });
}
