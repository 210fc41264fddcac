// Host-side launchers of the CUDA backend's own kernels (naive and tiled GEMM, C scaling, Jacobi).
// Each launches on `stream` of the current device and returns the launch status; the caller has
// made the right device current and checks the status.
#pragma once

#include "backends/cuda/cuda_logic.hpp"

#include <tilestream/kernels.hpp>

#include <cuda_runtime.h>

namespace tilestream::cuda {

/// C <- alpha*op(A)*op(B) + beta*C, one thread per element of C. Requires m, n, k > 0, alpha != 0.
cudaError_t launch_gemm_naive(const gemm_call& call, cudaStream_t stream);

/// Shared-memory tiled GEMM with register blocking (128x128x8 tiles for f32, 64x64x8 for f64).
/// Requires m, n, k > 0, alpha != 0 and `launch` = plan_tiled_launch(call) without error.
cudaError_t launch_gemm_tiled(const gemm_call& call, const tiled_launch& launch, cudaStream_t stream);

/// C <- beta*C without reading A or B (the alpha == 0 or k == 0 case); beta == 0 writes zeros
/// without reading C. Requires m, n > 0.
cudaError_t launch_gemm_scale_c(const gemm_call& call, cudaStream_t stream);

/// One Jacobi sweep (see jacobi_call) with the residual reduced into *call.residual when set.
/// Requires a non-empty range and `launch` = plan_jacobi_launch(call) without error.
cudaError_t launch_jacobi_sweep(const jacobi_call& call, const jacobi_launch& launch,
                                cudaStream_t stream);

}  // namespace tilestream::cuda
