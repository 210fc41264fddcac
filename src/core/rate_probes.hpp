// Short timed probes of a device's kernels, shared by the cost model's rates (measure_rates) and
// the automatic kernel choice (choose_kernel).
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/plan.hpp>

#include <optional>
#include <span>
#include <vector>

namespace tilestream::detail {

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

/// The fixed cost of one product inside a stack run on the calling thread (host_gemm_batched over
/// 64 products of 1x1x1 with kernel k, per product; seconds), measured once per process, type and
/// kernel: what a batched call costs per product beyond its arithmetic, below a direct call's.
double batched_item_seconds(dtype t, gemm_kernel k);

}  // namespace tilestream::detail
