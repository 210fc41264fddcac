// Timing OpenBLAS on the host as the anchor of a figure (the Level 3, potrf and getrf anchors).
#pragma once

#include <tilestream/anchor.hpp>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tilestream::detail {

/// OpenBLAS on every hardware thread for this scope, its previous count restored after. A check's
/// float64 reference needs it: a run may leave OpenBLAS's process-wide count at 1 (each CPU worker
/// calls it single-threaded), and then `syrk --n 8192 --check` beside an H200 took 39 s on one of
/// the host's 16 cores (2026-11-27).
class host_blas_threads {
public:
    host_blas_threads() : before_(openblas_get_num_threads()) {
        const int all = int(std::max(1u, std::thread::hardware_concurrency()));
        if (before_ != all) openblas_set_num_threads(all);
    }
    ~host_blas_threads() {
        if (openblas_get_num_threads() != before_) openblas_set_num_threads(before_);
    }
    host_blas_threads(const host_blas_threads&) = delete;
    host_blas_threads& operator=(const host_blas_threads&) = delete;

private:
    int before_;
};

/// `reset` then `run`, 1 + max(1, repeat) times with OpenBLAS on all hardware threads (its previous
/// thread count restored); the first run warms up. `what` names the call ("cblas_dtrsm"); `flops`
/// gives the GFLOP/s of the median.
template <class Reset, class Run>
blas_anchor time_host_anchor(const std::string& what, double flops, int repeat, Reset&& reset, Run&& run) {
    const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
    const host_blas_threads all_threads;  // restored at return
    std::vector<double> times;
    for (int r = 0; r <= std::max(1, repeat); ++r) {
        reset();
        const auto t0 = std::chrono::steady_clock::now();
        run();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) times.push_back(s);
    }
    std::sort(times.begin(), times.end());
    blas_anchor out;
    out.name = "OpenBLAS " + what + " on the host, " + std::to_string(threads) + " threads";
    out.seconds = times[times.size() / 2];
    out.gflops = out.seconds > 0 ? flops / out.seconds * 1e-9 : 0;
    out.threads = threads;
    out.repeat = int(times.size());
    return out;
}

}  // namespace tilestream::detail
