// In-core GEMM GFLOP/s of every CPU kernel through tilestream, beside OpenBLAS called directly
// (its own threads) in the same run. Writes one JSON result file.
#include "bench_common.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace ts = tilestream;

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: gemm_bench [--out F] [--git-hash H] [--reps R] [--sizes 1024,2048] [--kernels a,b]");
    const std::string out = args.get("out", "gemm-cpu.json"), git = args.get("git-hash", "unknown");
    const int reps = int(args.number("reps", 5));
    std::vector<ts::index_t> sizes;
    for (const auto& t : ts::bench::split(args.get("sizes", "1024,2048"), ',')) sizes.push_back(std::stoll(t));
    const std::vector<std::string> kernels = ts::bench::split(args.get("kernels", "naive,tiled,vendor"), ',');
    if (!args.finish()) return 2;
    const int cores = ts::inventory().cpu_cores;
    auto devs = ts::open_devices("cpu");
    ts::device& dev = *devs.front();
    ts::detail::json rows = ts::detail::json::array();
    std::printf("%-8s %-4s %6s %12s %12s %12s %8s\n", "kernel", "type", "n", "GFLOP/s", "end-to-end", "OpenBLAS", "ratio");
    for (ts::dtype type : {ts::dtype::f32, ts::dtype::f64}) {
        for (ts::index_t n : sizes) {
            ts::visit_real_dtype(type, "bench", [&]<class T>() {
                ts::host_matrix<T> a(n, n), b(n, n), c(n, n);
                ts::fill_random(a.view(), 1);
                ts::fill_random(b.view(), 2);
                ts::fill_random(c.view(), 3);
                const double flops = 2.0 * double(n) * double(n) * double(n);
                // Anchor: OpenBLAS directly, with its own threads over all cores.
                openblas_set_num_threads(cores);
                const double t_anchor = ts::bench::time_median(reps, [&] {
                    if constexpr (std::is_same_v<T, float>)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
                    else
                        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
                });
                openblas_set_num_threads(1);
                // The same problem through tilestream: device-resident operands, kernel on a stream.
                const std::size_t bytes = std::size_t(n) * n * sizeof(T);
                auto da = dev.allocate(bytes), db = dev.allocate(bytes), dc = dev.allocate(bytes);
                auto s = dev.create_stream();
                dev.copy_to_device(*s, da.get(), a.data(), bytes);
                dev.copy_to_device(*s, db.get(), b.data(), bytes);
                s->synchronize();
                for (const auto& kname : kernels) {
                    ts::gemm_call call;
                    call.type = type;
                    call.m = call.n = call.k = n;
                    call.a = da.get();
                    call.b = db.get();
                    call.c = dc.get();
                    call.lda = call.ldb = call.ldc = n;
                    call.kernel = ts::parse_gemm_kernel(kname);
                    const int r = kname == "naive" ? 1 : reps;  // naive runs for tens of seconds at 2048
                    const double t = ts::bench::time_median(r, [&] {
                        dev.gemm(*s, call);
                        s->synchronize();
                    });
                    ts::gemm_options opt;
                    opt.kernel = call.kernel;
                    const double t_e2e = ts::bench::time_median(r, [&] {
                        ts::gemm<T>(dev, ts::op::n, ts::op::n, T(1), a.view(), b.view(), T(0), c.view(), opt);
                    });
                    ts::bench::json_builder row;
                    row.add("kernel", kname).add("dtype", std::string(ts::to_string(type))).add("n", n);
                    row.add("repetitions", r).add("median_seconds", t).add("gflops", flops / t * 1e-9);
                    row.add("end_to_end_median_seconds", t_e2e).add("end_to_end_gflops", flops / t_e2e * 1e-9);
                    row.add("anchor", "OpenBLAS cblas_" + std::string(type == ts::dtype::f32 ? "s" : "d") +
                                          "gemm called directly, " + std::to_string(cores) + " threads");
                    row.add("anchor_median_seconds", t_anchor).add("anchor_gflops", flops / t_anchor * 1e-9);
                    row.add("ratio_to_anchor", t_anchor / t);
                    rows.push_back(row.json());
                    std::printf("%-8s %-4s %6lld %12.1f %12.1f %12.1f %8.3f\n", kname.c_str(),
                                std::string(ts::to_string(type)).c_str(), (long long)n, flops / t * 1e-9,
                                flops / t_e2e * 1e-9, flops / t_anchor * 1e-9, t_anchor / t);
                    std::fflush(stdout);
                }
            });
        }
    }
    auto top = ts::bench::result_header("gemm_incore_cpu", git, dev.id() + " (" + std::to_string(dev.info().threads) + " threads)");
    top.add("statistic", "median");
    top.add("results", rows);
    ts::bench::write_file_atomically(out, top.text());
    std::printf("wrote %s\n", out.c_str());
    return 0;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("gemm_bench", [&] { return run(argc, argv); });
}
