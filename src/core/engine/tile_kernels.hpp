// How the engine runs one tile operation on a device: the device's own kernel for the requested
// family where it has one, else its vendor routine, else the sequential reference on the host
// (directly on host-addressable memory, through host staging elsewhere).
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>

#include <cstddef>

namespace tilestream::detail::engine {

/// A gemm tile as the device interface's gemm_call.
gemm_call as_gemm_call(const tile_op& op);

/// The operand with its first element moved to (i, j).
tile_matrix shifted(const tile_matrix& m, index_t i, index_t j, std::size_t element_bytes);

/// Whether BLAS has a routine for the diagonal-block kind in this type (the Hermitian kinds are
/// complex only): what a vendor library (OpenBLAS, cuBLAS, CLBlast) offers.
bool blas_has(tile_kind kind, dtype type) noexcept;

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
