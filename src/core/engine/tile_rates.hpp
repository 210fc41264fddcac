// Measured rates of the tile operations other than GEMM on one device (device_rates::tile_rates):
// a GPU's vendor routines for the diagonal tiles run far below its GEMM (an H200 in f64, probed:
// cuSOLVER potrf 1.1 TFLOP/s + 0.16-0.21 ms a call, cuBLAS trsm 2.6-2.8 TFLOP/s + 0.12 ms, syrk
// 15-28, beside GEMM's 57), and priced at the GEMM rate a Cholesky of 4096 was predicted at 2.6 ms
// and took 24.
#pragma once

#include <tilestream/blas3.hpp>
#include <tilestream/device.hpp>
#include <tilestream/lu.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/tile_ops.hpp>

#include <compare>

#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace tilestream::detail::engine {

/// One tile kind as a routine's steps run it: BLAS's options and the layouts of the tiles (a vendor
/// routine may run another variant at another rate: cuBLAS trsm with A transposed on the right, as
/// Cholesky's solves are, or a row-major tile, which a column-major library sees transposed with
/// side and triangle swapped). A kind alone is its left, lower, untransposed, non-unit,
/// column-major variant.
struct tile_variant {
    tile_kind kind = tile_kind::gemm;
    tilestream::side side = tilestream::side::left;
    tilestream::uplo uplo = tilestream::uplo::lower;
    op trans = op::n;  ///< op(A); the rank-k kinds' op(B) too
    tilestream::diag diag = tilestream::diag::non_unit;
    layout layout_a = layout::col_major, layout_b = layout::col_major, layout_c = layout::col_major;
    /// The GEMMs a device splits the tile into (a trsm's blocks on CUDA) run in this mode.
    math_mode math = math_mode::strict;

    tile_variant() = default;
    tile_variant(tile_kind k) : kind(k) {}  // NOLINT(google-explicit-constructor): a kind is its default variant
    auto operator<=>(const tile_variant&) const = default;
};

/// The operation a probe of `v` times at `order` on buffers a, b, c (each in its layout of v,
/// leading dimension order): alpha 1 and beta 0.5 (C read, as the routines' updates read it).
tile_op probe_op(const tile_variant& v, dtype type, gemm_kernel kernel, index_t order, void* a, void* b, void* c);

/// The square orders a tile kind's probe measures by default: a small tile, where a call's fixed
/// cost shows, and a large one, where its rate does.
inline constexpr index_t tile_probe_orders[] = {256, 1024};

/// Seconds of one call of `kind` on `dev` at each of `orders` (square: the triangle's order, as many
/// columns; the rank-k kinds with k = order): the median of `reps` runs after a warm-up, on
/// well-conditioned non-zero operands in the device's memory, C copied in again before each run
/// (outside the timing). Empty when the kind has no kernel there, the operands do not fit the
/// device's budget, or the probe failed (an error is not thrown: the call goes on unmeasured).
std::vector<double> probe_tile_seconds(device& dev, dtype type, const tile_variant& variant, gemm_kernel kernel,
                                       std::span<const index_t> orders, int reps);

/// The rate two timings give, seconds = call_seconds + flops / rate: the slope between them and the
/// fixed cost the smaller call leaves; a slope that would leave a negative fixed cost gives the
/// larger call's average rate and none; a larger call no slower than the smaller gives a fixed cost
/// of its time and its flops a tenth of it. nullopt unless both timings and flops are positive and
/// the larger has more flops.
std::optional<tile_rate> fit_tile_rate(double flops_small, double seconds_small, double flops_large, double seconds_large);

/// The flops of one square probe call of `kind` at `order` (tile_op::flops of its shape).
double tile_probe_flops(tile_kind kind, dtype type, index_t order);

/// `variant` measured on `dev` at tile_probe_orders (3 runs each) and fitted; cached per device,
/// dtype, variant and kernel within the process; nullopt when it could not be measured.
std::optional<tile_rate> measured_tile_rate(device& dev, dtype type, const tile_variant& variant, gemm_kernel kernel);

/// The tile kinds other than GEMM that a routine's graph holds, each as its steps run it, one
/// variant per kind (posv and gesv plan as potrf or getrf, then trsm): a Level 3 routine's diagonal
/// tile with the call's options and layouts; potrf's potrf, its solves (lower: right side, A^T or
/// A^H; upper: left side) and its diagonal updates (syrk or herk: lower op n, upper op t or c), all
/// in the matrix's layout; getrf's panel and the unit lower left solve of its block rows of U.
std::vector<tile_variant> routine_tile_variants(const blas3_problem& problem);
std::vector<tile_variant> routine_tile_variants(const getrf_problem& problem);

}  // namespace tilestream::detail::engine
