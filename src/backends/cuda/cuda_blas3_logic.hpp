// What a CUDA device does for one Level 3 tile operation, decided on the host (compiled in every
// build, so CI tests it): nothing, C scaled by our own kernel (cuBLAS would read A and B when
// alpha = 0), or one column-major cuBLAS call.
#pragma once

#include "core/engine/tile_mapping.hpp"

#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>

#include <string>

namespace tilestream::cuda {

struct cublas_tile_work {
    bool nothing = false;     ///< an empty operation or BLAS's quick return
    bool scale_only = false;  ///< `scale` (a gemm_call with k = 0) does all of it
    gemm_call scale;
    ::tilestream::detail::engine::column_major_tile call;
};

/// Throws invalid_argument naming the device when the operation has no cuBLAS form (mixed layouts
/// that would need a conjugate without a transpose; sizes beyond int).
cublas_tile_work plan_cublas_tile(const tile_op& op, const std::string& device_id);

/// The width of the diagonal blocks a trsm tile is solved in on a CUDA device
/// (engine::blocked_trsm: cuBLAS solves each block, GEMMs update the rest): `value` of
/// TILESTREAM_CUDA_TRSM_BLOCK when set (0: one cuBLAS solve per tile), else default_trsm_block.
/// Throws invalid_argument naming the variable when it is not a whole number in [0, 65536].
index_t trsm_block_from(const char* value);
inline constexpr index_t default_trsm_block = 512;

}  // namespace tilestream::cuda
