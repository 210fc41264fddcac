// The Level 3 routines' task builders (one per routine, <routine>_plan.cpp): each turns a problem
// and a tiling into tile tasks. Operands are numbered A = 0, B = 1, C = 2 in every graph (TRMM and
// TRSM write B; SYRK has an empty B).
#pragma once

#include "core/engine/task_graph.hpp"
#include "core/gemm_memory.hpp"

#include <tilestream/blas3.hpp>

namespace tilestream::detail::routines {

inline constexpr int operand_a = 0, operand_b = 1, operand_c = 2;

struct build_settings {
    /// Tile sizes: along the triangular or symmetric dimension (both of C in the syrk family),
    /// along the other dimension of B or C, along k (syrk family).
    index_t tile = 1, tile_free = 1, tile_k = 1;
    blas3_order order = blas3_order::left_looking;
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
    /// The operations run on the host operands themselves: a diagonal tile of C in the syrk
    /// family cannot be scaled as a full tile (its other triangle is the caller's).
    bool in_place = false;
    /// Diagonal tiles go back whole (engine::write_regions_whole): devices without host access.
    bool whole_diagonal_tiles = false;
    int devices = 1;  ///< devices sharing the call
};

/// A tile_op of `kind` with the settings' kernel.
tile_op base_op(tile_kind kind, const build_settings& s);

engine::task_graph build_trsm(const blas3_problem& p, const build_settings& s);
engine::task_graph build_trmm(const blas3_problem& p, const build_settings& s);
engine::task_graph build_syrk(const blas3_problem& p, const build_settings& s);  ///< syrk, herk
engine::task_graph build_syr2k(const blas3_problem& p, const build_settings& s); ///< syr2k, her2k
engine::task_graph build_symm(const blas3_problem& p, const build_settings& s);  ///< symm, hemm
/// Cholesky of C in place (potrf_plan.cpp); s.order: left- or right-looking.
engine::task_graph build_potrf(const blas3_problem& p, const build_settings& s);

/// The SYRK family's tiles and tasks (syrk_plan.cpp); `two`: syr2k, her2k.
engine::task_graph build_rank_k(const blas3_problem& p, const build_settings& s, bool two);

/// The routine's builder.
engine::task_graph build_tasks(const blas3_problem& p, const build_settings& s);

/// op(A)'s tile (i, p) of a triangular or symmetric A read through its stored tiles: the tile and
/// the transpose to apply (op n: A's tile (i, p); op t: A's tile (p, i) transposed).
struct tile_ref {
    int tile = -1;
    op trans = op::n;
};

/// Tasks that only scale their output tile (alpha == 0 or an empty inner dimension): one per tile
/// of `operand` (all of it, or the `uplo` triangle of a square tiling), C <- beta C, beta == 0
/// overwriting without reading. Diagonal tiles of a triangle keep their other half.
void add_scaling_tasks(engine::task_graph& g, int operand, const build_settings& s, bool reads_c,
                       const blas3_problem& p, bool triangle);

/// The explanation's line for tiles staged to the host's LAPACK ("" when the rates stage none).
std::string staged_tiles_line(const device_rates& r, std::string_view tiles);
/// explain: "kernel vendor", or with GEMM tiles on other kernels (gemm_kernels, by device)
/// "kernel auto: GEMM tiles tiled, the other tiles vendor".
std::string kernels_text(gemm_kernel kernel, const std::vector<gemm_kernel>& gemm_kernels);
/// explain: the rates line, with the diagonal blocks' rate where it differs.
/// `blocked`: the plan runs some tiles in diagonal blocks (a line says so).
std::string rates_line(const device_rates& r, bool blocked);

}  // namespace tilestream::detail::routines

namespace tilestream::detail {

/// execute_blas3 with each device's tile store taken from a context's memory and given back after
/// a run that succeeded, and tiles of kept operands (by graph operand: A, B, C) reused across calls.
template <class T>
blas3_report execute_blas3_kept(const blas3_plan& plan, std::span<device* const> devices, const blas3_operands<T>& ops,
                                const blas3_run_options& run, gemm_memory* memory, const std::vector<operand_keep>& keeps);

}  // namespace tilestream::detail

// ---- LU (getrf_plan.cpp, getrf_execute.cpp) ----
#include <tilestream/lu.hpp>

namespace tilestream::detail::routines {
/// getrf's tasks over block columns of width nb: operand 0 is A (tiles m x nb), operand 1 the
/// pivots (one row, a tile per panel).
engine::task_graph build_getrf(const getrf_problem& p, index_t nb, lu_order order, gemm_kernel kernel, math_mode math);
}  // namespace tilestream::detail::routines

namespace tilestream::detail {
/// execute_getrf with each device's tile store taken from a context's memory and given back after
/// a run that succeeded.
template <class T>
getrf_report execute_getrf_kept(const getrf_plan& plan, std::span<device* const> devices, host_matrix_view<T> a,
                                std::span<index_t> ipiv, const blas3_run_options& run, gemm_memory* memory);
}  // namespace tilestream::detail
