// How the engine runs one tile operation on a device: the device's own kernel for the requested
// family where it has one, else its vendor routine, else the sequential reference on the host
// (directly on host-addressable memory, through host staging elsewhere).
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>

#include <cstddef>
#include <vector>

namespace tilestream::detail::engine {

/// A gemm tile as the device interface's gemm_call.
gemm_call as_gemm_call(const tile_op& op);

/// The operand with its first element moved to (i, j).
tile_matrix shifted(const tile_matrix& m, index_t i, index_t j, std::size_t element_bytes);

/// Whether BLAS has a routine for the diagonal-block kind in this type (the Hermitian kinds are
/// complex only): what a vendor library (OpenBLAS, cuBLAS, CLBlast) offers.
bool blas_has(tile_kind kind, dtype type) noexcept;

/// A trsm tile as a blocked solve, in order: trsm on `block`-wide diagonal blocks of A, each
/// followed by one gemm updating the rest of C (LAPACK's blocked order: forward or backward as
/// op(A) and the side make it). The steps read and write sub-views of op's own operands, so they
/// run on any device whose tile memory is addressed by pointer arithmetic. Returns {op} unchanged
/// when the triangle is not wider than `block` (or block = 0), or when alpha = 0 (C <- 0).
/// For vendor solves that run far below the device's GEMM rate on whole tiles (cuBLAS).
std::vector<tile_op> blocked_trsm(const tile_op& op, index_t block);

/// A trmm tile the same way: on each `block`-wide diagonal block, one gemm adding the block's
/// share of op(A) C to the rows (left) or columns (right) already multiplied, then the block's own
/// trmm (in the order that reads every block of C before it is overwritten). {op} as above.
std::vector<tile_op> blocked_trmm(const tile_op& op, index_t block);

/// A symm or hemm tile the same way: for each `block`-wide block column (left) or row (right) of
/// the full symmetric A, the diagonal block's symm/hemm and one gemm each for the parts of A above
/// and below it (read from the stored triangle, transposed or conjugated where they are not
/// stored); beta applies on the first step that writes each row (column). {op} as above.
std::vector<tile_op> blocked_symm(const tile_op& op, index_t block);

/// The blocked form of a trsm, trmm, symm or hemm tile (above); {op} for the other kinds.
std::vector<tile_op> blocked_diagonal(const tile_op& op, index_t block);
/// Whether blocked_diagonal splits this kind of tile operation.
bool blockable(tile_kind kind) noexcept;
/// The share of a blockable tile operation's flops that its diagonal blocks do when it is split
/// in blocks of `block` (its triangle's order `order`): block / order (all of them when it is not split).
double blocked_diagonal_share(index_t order, index_t block) noexcept;

enum class tile_route {
    device_kernel,   ///< the device runs op.kernel itself
    device_vendor,   ///< the device's vendor routine (op.kernel has no such operation there)
    host_reference,  ///< reference::execute on the host
};
std::string_view to_string(tile_route r) noexcept;

/// Where `op` runs on `dev`. With `deterministic` (reproducible plans) diagonal blocks run on the
/// reference, whose result does not depend on the tile's shape or the thread count.
tile_route route_of(const device& dev, const tile_op& op, bool deterministic);

}  // namespace tilestream::detail::engine
