// Measured rates of the tile operations other than GEMM on one device (device_rates::tile_rates):
// a GPU's vendor routines for the diagonal tiles run far below its GEMM (an H200 in f64, probed:
// cuSOLVER potrf 1.1 TFLOP/s + 0.16-0.21 ms a call, cuBLAS trsm 2.6-2.8 TFLOP/s + 0.12 ms, syrk
// 15-28, beside GEMM's 57), and priced at the GEMM rate a Cholesky of 4096 was predicted at 2.6 ms
// and took 24.
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/tile_ops.hpp>

#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace tilestream::detail::engine {

/// The square orders a tile kind's probe measures by default: a small tile, where a call's fixed
/// cost shows, and a large one, where its rate does.
inline constexpr index_t tile_probe_orders[] = {256, 1024};

/// Seconds of one call of `kind` on `dev` at each of `orders` (square: the triangle's order, as many
/// columns; the rank-k kinds with k = order): the median of `reps` runs after a warm-up, on
/// well-conditioned non-zero operands in the device's memory, C copied in again before each run
/// (outside the timing). Empty when the kind has no kernel there, the operands do not fit the
/// device's budget, or the probe failed (an error is not thrown: the call goes on unmeasured).
std::vector<double> probe_tile_seconds(device& dev, dtype type, tile_kind kind, gemm_kernel kernel,
                                       std::span<const index_t> orders, int reps);

/// The rate two timings give, seconds = call_seconds + flops / rate: the slope between them and the
/// fixed cost the smaller call leaves; a slope that would leave a negative fixed cost gives the
/// larger call's average rate and none; a larger call no slower than the smaller gives a fixed cost
/// of its time and its flops a tenth of it. nullopt unless both timings and flops are positive and
/// the larger has more flops.
std::optional<tile_rate> fit_tile_rate(double flops_small, double seconds_small, double flops_large, double seconds_large);

/// The flops of one square probe call of `kind` at `order` (tile_op::flops of its shape).
double tile_probe_flops(tile_kind kind, dtype type, index_t order);

/// `kind` measured on `dev` at tile_probe_orders (3 runs each) and fitted; cached per device,
/// dtype, kind and kernel within the process; nullopt when it could not be measured.
std::optional<tile_rate> measured_tile_rate(device& dev, dtype type, tile_kind kind, gemm_kernel kernel);

/// The tile kinds other than GEMM that a routine's graph holds (the names context::routine_rates
/// gets: "potrf", "getrf", "trsm", ...; posv and gesv plan as potrf or getrf, then trsm).
std::vector<tile_kind> routine_tile_kinds(std::string_view routine, dtype type);

}  // namespace tilestream::detail::engine
