// Jacobi GLUP/s and GB/s through tilestream on CPU device lists (overlap on and off), beside the
// roofline measured in the same run: a stencil-shaped copy (each interior row copied from one
// buffer to the other, the same rows per thread, the same thread count). Writes one JSON file.
#include "bench_common.hpp"
#include "backends/cpu/thread_pool.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/jacobi.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace ts = tilestream;

namespace {

/// The anchor: a stencil-shaped copy, out[i][j] = in[i][j] over the interior rows and columns,
/// rows split over the threads exactly as the CPU Jacobi kernel splits them, buffers swapped
/// after each sweep like the solver's.
template <class T>
class stencil_copy {
public:
    stencil_copy(ts::index_t nx, ts::index_t ny, int threads)
        : nx_(nx), ny_(ny), ld_((nx + 63) / 64 * 64), a_(ny, ld_), b_(ny, ld_), pool_(threads) {
        std::memset(a_.data(), 0, sizeof(T) * std::size_t(a_.size()));
        std::memset(b_.data(), 0, sizeof(T) * std::size_t(b_.size()));
    }
    /// Seconds for `iters` sweeps; `plain`: an element loop (vector loads and ordinary stores, the
    /// kernel's kind of store), else memcpy per row (which may use stores that skip reading the
    /// destination first, and so moves fewer bytes than any stencil with ordinary stores).
    double run(ts::index_t iters, bool plain) {
        const ts::index_t rows = ny_ - 2, cols = nx_ - 2, ld = ld_;
        const int parts = static_cast<int>(std::min<ts::index_t>(rows, pool_.size()));
        T* in = a_.data();
        T* out = b_.data();
        const auto t0 = std::chrono::steady_clock::now();
        for (ts::index_t t = 0; t < iters; ++t) {
            pool_.run(parts, [&](int part) {
                const ts::index_t begin = 1 + rows * part / parts, end = 1 + rows * (part + 1) / parts;
                for (ts::index_t i = begin; i < end; ++i) {
                    if (plain) copy_row(out + i * ld + 1, in + i * ld + 1, cols);
                    else std::memcpy(out + i * ld + 1, in + i * ld + 1, sizeof(T) * std::size_t(cols));
                }
            });
            std::swap(in, out);
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

private:
    // Kept a loop: the compiler would otherwise turn it into a call to memcpy.
    __attribute__((noinline, optimize("no-tree-loop-distribute-patterns"))) static void copy_row(
        T* __restrict out, const T* __restrict in, ts::index_t n) {
        for (ts::index_t j = 0; j < n; ++j) out[j] = in[j];
    }
    ts::index_t nx_, ny_, ld_;
    ts::host_matrix<T> a_, b_;
    ts::cpu::thread_pool pool_;
};

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: jacobi_bench [--out F] [--git-hash H] [--reps R] [--n N] [--iters I]\n"
                              "                    [--devices 'cpu;cpu:2'] [--dtypes 'f32;f64']");
    const std::string out = args.get("out", "jacobi-cpu.json"), git = args.get("git-hash", "unknown");
    const int reps = int(args.number("reps", 5));
    const ts::index_t n = args.number("n", 4096), iters = args.number("iters", 50);
    const std::vector<std::string> specs = ts::bench::split(args.get("devices", "cpu;cpu:2"), ';');
    const std::vector<std::string> types = ts::bench::split(args.get("dtypes", "f32;f64"), ';');
    if (!args.finish()) return 2;
    ts::detail::json rows = ts::detail::json::array();
    std::string device_text;
    std::printf("%-8s %-4s %-8s %-8s %10s %10s %12s %8s %12s %8s\n", "devices", "type", "decomp", "overlap",
                "GLUP/s", "GB/s", "copy GB/s", "ratio", "memcpy GB/s", "ratio");
    for (const auto& spec : specs) {
        auto devs = ts::open_devices(spec);
        int threads = 0;
        std::string ids;
        for (const auto& d : devs) {
            threads += d->info().threads;
            ids += (ids.empty() ? "" : ",") + d->id() + " (" + std::to_string(d->info().threads) + " threads)";
        }
        device_text += (device_text.empty() ? "" : "; ") + ids;
        for (const auto& tname : types) {
            const ts::dtype type = ts::parse_dtype(tname);
            const ts::jacobi_problem pb{n, n, type};
            const double points = double(pb.interior_points());
            const double bytes_per_point = double(pb.bytes_per_point());
            // The anchor and both overlap modes take turns in every repetition, so a neighbour's load
            // on a shared machine falls on all of them alike; medians of each.
            std::vector<double> copy_s, memcpy_s;
            std::vector<std::vector<double>> jac_s(2);
            std::vector<ts::jacobi_plan> plans;
            for (bool overlap : {true, false}) {
                ts::jacobi_options opt;
                opt.overlap = overlap;
                opt.iters = iters;
                plans.push_back(ts::plan_jacobi(pb, devs, opt));
            }
            ts::visit_real_dtype(type, "bench", [&]<class T>() {
                stencil_copy<T> copy(n, n, threads);
                ts::host_matrix<T> start(n, n), field(n, n);
                ts::fill_jacobi_start<T>(start.view());
                for (int r = 0; r <= reps; ++r) {  // round 0 warms up
                    const double c = copy.run(iters, true), m = copy.run(iters, false);
                    if (r > 0) copy_s.push_back(c / double(iters)), memcpy_s.push_back(m / double(iters));
                    for (std::size_t m = 0; m < plans.size(); ++m) {
                        std::memcpy(field.data(), start.data(), sizeof(T) * std::size_t(field.size()));
                        // seconds: the iterations alone, parts resident (allocation and copies excluded)
                        const auto rep = ts::run_jacobi<T>(plans[m], field.view());
                        if (r > 0) jac_s[m].push_back(rep.seconds / double(iters));
                    }
                }
            });
            const double anchor_s = ts::bench::median(copy_s);
            const double copy_gbps = points * bytes_per_point / anchor_s * 1e-9;
            const double memcpy_gbps = points * bytes_per_point / ts::bench::median(memcpy_s) * 1e-9;
            for (std::size_t m = 0; m < plans.size(); ++m) {
                const auto& plan = plans[m];
                const bool overlap = plan.options().overlap;
                const double s = ts::bench::median(jac_s[m]);
                const double glups = points / s * 1e-9, gbps = glups * bytes_per_point;
                ts::bench::json_builder row;
                row.add("devices", spec).add("device_threads", threads).add("dtype", tname);
                row.add("nx", n).add("ny", n).add("iterations", iters).add("repetitions", reps);
                row.add("decomp", ts::to_string(plan.decomposition())).add("overlap", overlap);
                row.add("check_every", plan.options().check_every);
                row.add("halo_bytes_per_iteration", plan.halo_bytes_per_iteration());
                row.add("median_seconds_per_iteration", s).add("glups", glups).add("gbps", gbps);
                row.add("anchor", "stencil-shaped copy: out[i][j] = in[i][j] over the interior of two " +
                                      std::to_string(n) + "x" + std::to_string(n) + " buffers, rows split over " +
                                      std::to_string(threads) + " threads as the Jacobi kernel splits them");
                row.add("anchor_median_seconds_per_iteration", anchor_s).add("anchor_gbps", copy_gbps);
                row.add("ratio_to_anchor", gbps / copy_gbps);
                row.add("memcpy_rows_gbps", memcpy_gbps).add("ratio_to_memcpy_rows", gbps / memcpy_gbps);
                rows.push_back(row.json());
                std::printf("%-8s %-4s %-8s %-8s %10.3f %10.2f %12.2f %8.3f %12.2f %8.3f\n", spec.c_str(),
                            tname.c_str(), ts::to_string(plan.decomposition()).c_str(), overlap ? "on" : "off",
                            glups, gbps, copy_gbps, gbps / copy_gbps, memcpy_gbps, gbps / memcpy_gbps);
                std::fflush(stdout);
            }
        }
    }
    auto top = ts::bench::result_header("jacobi_cpu", git, device_text);
    top.add("statistic", "median").add("bytes_per_point", "8 in f32, 16 in f64 (one read, one write)");
    top.add("results", rows);
    ts::bench::write_file_atomically(out, top.text());
    std::printf("wrote %s\n", out.c_str());
    return 0;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("jacobi_bench", [&] { return run(argc, argv); });
}
