// Short timed probes of a device's kernels, shared by the cost model's rates (measure_rates) and
// the automatic kernel choice (choose_kernel).
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/plan.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tilestream::detail {

/// Each of `kernels`' timings (seconds) of one m x n x k GEMM (row-major, packed) on `dev`: `reps`
/// runs after a warm-up, the kernels alternating, on non-zero operands in the device's memory.
/// Empty for all when the operands do not fit what its budget leaves, and for a kernel that fails
/// there (when there are several; a single kernel's error is thrown).
std::vector<std::vector<double>> probe_gemm_times(device& dev, dtype type, std::span<const gemm_kernel> kernels,
                                                  math_mode math, index_t m, index_t n, index_t k, int reps);

/// Seconds of one m x n x k GEMM (row-major, packed) of each of `kernels` on `dev`: the median of
/// `reps` runs after a warm-up, the kernels alternating, on non-zero operands in the device's
/// memory. Empty for all when the operands do not fit what its budget leaves, and for a kernel
/// that fails there (when there are several; a single kernel's error is thrown).
std::vector<std::optional<double>> probe_gemm_seconds(device& dev, dtype type, std::span<const gemm_kernel> kernels,
                                                      math_mode math, index_t m, index_t n, index_t k, int reps);

/// A probe's shape.
struct probe_shape {
    index_t m, n, k;
};

/// The probe of a shape class with large sides `side`: the thin side 16 for thin_m and thin_n,
/// k = 32 for thin_k, small 64^3.
probe_shape probe_of(shape_class c, index_t side) noexcept;

/// Whether a choice measured on the probe of class `cls` is confirmed on a probe of twice the side
/// before it is kept: a square probe whose verdict displaces vendor (the verdict applies to every
/// size of the class; a vendor library gains with size, a smaller probe favours the other kernel).
bool confirm_on_larger_probe(const kernel_choice& c, shape_class cls) noexcept;

/// Sets c.kernel to the fastest measured of c.rates: vendor unless another beats it by more than
/// 5% (the probes' noise on a busy machine); c.measured when any was.
void pick_fastest(kernel_choice& c);

// ---- the kernel choice's steps, apart from the hardware (kernel_choice.cpp) ----

/// One probe's timings of the candidates (kernel_candidates(), in that order): seconds per call,
/// one per repetition, the candidates alternated; none for a candidate not measured (why: notes).
struct probe_timings {
    std::vector<std::vector<double>> seconds;
    std::vector<std::string> notes;
    bool complete = true;  ///< false: the probe did not fit what the budget left (measure again later)
};

/// Where a choice's timings come from: the probe of shape s run on the device or the host.
using probe_source = std::function<probe_timings(const probe_shape& s)>;

/// The kernels a default chooses between (vendor, tiled), in the order of probe_timings.
std::span<const gemm_kernel> kernel_candidates() noexcept;

/// A choice from one probe: each candidate's rate from the fastest of its timings (best of N: load
/// from other processes only ever slows a run down, so the fastest run is the closest to what the
/// kernel does on the machine alone), then pick_fastest.
kernel_choice choice_from_timings(dtype t, const probe_shape& s, const probe_timings& p);

/// Whether c displaces a vendor kernel that was measured: such a verdict is kept only when a second
/// measurement agrees.
bool displaces_vendor(const kernel_choice& c) noexcept;

/// A class's verdict as decide_kernel reaches it.
struct kernel_verdict {
    kernel_choice choice;
    probe_shape first{};    ///< the class's first probe (where a re-check measures)
    bool complete = true;   ///< every probe fitted: the verdict may be kept
};

/// The automatic choice for class c from `source`'s probes: the class's probe with large sides
/// `side`; a verdict against vendor is kept only if a second measurement agrees (square: the probe
/// of twice the side when `larger_fits`, whose rates are kept; other classes: the same probe
/// once more), otherwise vendor.
kernel_verdict decide_kernel(dtype t, shape_class c, index_t side, bool larger_fits, const probe_source& source);

/// The re-check of a verdict against vendor (decide_kernel's), one more measurement on its first
/// probe: the verdict stands if that agrees (or cannot measure), otherwise vendor on the new rates.
kernel_choice recheck_kernel(dtype t, const kernel_verdict& v, const probe_source& source);

/// A choice as the process keeps it; `recheck_at`: a verdict against vendor waits for its re-check,
/// made by the first call for the class from then (after that the choice is final, no more probes).
struct kept_choice {
    kernel_choice choice;
    std::optional<std::chrono::steady_clock::time_point> recheck_at;
};

/// choose_kernel and choose_host_kernel with the re-check's time (made by this call when due).
kept_choice choose_kernel_kept(device& dev, dtype t, shape_class c, math_mode math);
kept_choice choose_host_kernel_kept(dtype t, shape_class c, int openblas_threads);
/// choose_kernel's kept choice for the device when one was made before (no probe runs); none
/// otherwise.
std::optional<kernel_choice> known_kernel(const device& dev, dtype t, shape_class c, math_mode math);

/// The choice's measured rate of kernel k; null when k was not measured.
inline const kernel_rate* measured_rate(const kernel_choice& c, gemm_kernel k) {
    for (const kernel_rate& r : c.rates)
        if (r.kernel == k && r.measured) return &r;
    return nullptr;
}

/// Seconds after a verdict against vendor before its re-check (10 s; a test may change it).
double kernel_recheck_seconds();

/// Test hook (not part of the public headers): while alive, choose_kernel and choose_host_kernel
/// take their timings from `source` instead of running probes, a verdict against vendor is
/// re-checked `recheck_seconds` after it was made, and the kept choices are forgotten when it
/// starts and ends.
class scripted_kernel_probes {
public:
    struct request {
        std::string where;  ///< the device's id, or "host" (choose_host_kernel)
        dtype type;
        probe_shape shape;
    };
    scripted_kernel_probes(std::function<probe_timings(const request&)> source, double recheck_seconds);
    scripted_kernel_probes(const scripted_kernel_probes&) = delete;
    scripted_kernel_probes& operator=(const scripted_kernel_probes&) = delete;
    ~scripted_kernel_probes();
};

/// The fixed cost of one product inside a stack run on the calling thread (host_gemm_batched over
/// 64 products of 1x1x1 with kernel k, per product; seconds), measured once per process, type and
/// kernel: what a batched call costs per product beyond its arithmetic, below a direct call's.
double batched_item_seconds(dtype t, gemm_kernel k);

/// The kernel of the products of a stack, each on one thread (the calling thread, or one worker
/// each): vendor against tiled timed on a stack of products of the shape's bucket (each side
/// rounded up to a power of 2, the probe the bucket's largest product), on the calling thread,
/// alternated, best of 5 (kernel_choice's rule: vendor unless the other beats it by 5%, and a
/// verdict against vendor only when a second measurement agrees). Measured once per process, type
/// and bucket (at most 8^3 of the small class); the test hook scripts it as "host-stack", its
/// timings then seconds per product.
struct stack_choice {
    kernel_choice choice;                   ///< rates per product of the bucket's probe
    probe_shape probe{};                    ///< the bucket's product
    double seconds_per_product = 0;         ///< the chosen kernel's, on the probe (0: not measured)
    /// Predicted seconds of one m x n x k product of the bucket (scaled from the probe by m n k).
    double seconds_for(index_t m, index_t n, index_t k) const {
        return seconds_per_product * double(m) * double(n) * double(k) / (double(probe.m) * double(probe.n) * double(probe.k));
    }
};
stack_choice choose_stack_kernel(dtype t, index_t m, index_t n, index_t k);

}  // namespace tilestream::detail
