// The CUDA backend's Jacobi sweep: out = 0.25*((N+S)+(W+E)) in the element type, bit-identical
// to the reference kernel, with 16-byte loads along rows and an optional fused squared residual.
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/vector_io.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tilestream::cuda {
namespace {

template <class T>
struct jacobi_args {
    const T* in;
    T* out;
    index_t ld;
    index_t row_begin, row_end;
    index_t col_begin, col_end;
    index_t first_group;  // column group of col_begin (groups are S columns, S-aligned)
    index_t groups;       // column groups that touch [col_begin, col_end)
    double* residual;
};

// The update in exactly the reference's order. The _rn intrinsics are never contracted into
// fused multiply-adds, so the rounding is that of the written expression whatever -fmad says.
__device__ __forceinline__ float jacobi_point(float n, float s, float w, float e) {
    return __fmul_rn(0.25f, __fadd_rn(__fadd_rn(n, s), __fadd_rn(w, e)));
}
__device__ __forceinline__ double jacobi_point(double n, double s, double w, double e) {
    return __dmul_rn(0.25, __dadd_rn(__dadd_rn(n, s), __dadd_rn(w, e)));
}


__device__ __forceinline__ double squared_change(double out, double in) {
    const double d = out - in;
    return d * d;
}

constexpr int block_x = jacobi_launch::block_x, block_y = jacobi_launch::block_y;  // 32 groups (one warp) x 8 rows

// Each thread updates one group of S consecutive columns (S = 4 floats or 2 doubles, one 16-byte
// vector) of a row; a warp covers 32 consecutive groups, so its loads of the N, S and centre rows
// are 512 contiguous bytes each. W and E of a group's ends are scalar loads that hit L1.
// VEC: in and out are 16-byte aligned and ld is a multiple of S, so whole groups are vectors.
template <class T, bool VEC>
__global__ void __launch_bounds__(block_x* block_y) jacobi_kernel(jacobi_args<T> p) {
    constexpr int S = vector_elements(sizeof(T));
    const index_t group = p.first_group + blockIdx.x * index_t(block_x) + threadIdx.x;
    const index_t c0 = group * S;
    const bool active = blockIdx.x * index_t(block_x) + threadIdx.x < p.groups;
    const bool whole = VEC && c0 >= p.col_begin && c0 + S <= p.col_end;
    double sum = 0;

    if (active) {
        for (index_t i = p.row_begin + blockIdx.y * index_t(block_y) + threadIdx.y; i < p.row_end;
             i += index_t(gridDim.y) * block_y) {
            const T* row = p.in + i * p.ld;
            T* out_row = p.out + i * p.ld;
            if (whole) {
                T n[S], s[S], c[S], r[S];
                load16_global(n, row - p.ld + c0);
                load16_global(s, row + p.ld + c0);
                load16_global(c, row + c0);
                const T west = __ldg(row + c0 - 1), east = __ldg(row + c0 + S);
#pragma unroll
                for (int e = 0; e < S; ++e) {
                    const T w = e == 0 ? west : c[e - 1];
                    const T x = e == S - 1 ? east : c[e + 1];
                    r[e] = jacobi_point(n[e], s[e], w, x);
                    if (p.residual != nullptr) sum += squared_change(r[e], c[e]);
                }
                store16(out_row + c0, r);
            } else {
#pragma unroll
                for (int e = 0; e < S; ++e) {
                    const index_t j = c0 + e;
                    if (j < p.col_begin || j >= p.col_end) continue;
                    const T r = jacobi_point(__ldg(row - p.ld + j), __ldg(row + p.ld + j),
                                             __ldg(row + j - 1), __ldg(row + j + 1));
                    out_row[j] = r;
                    if (p.residual != nullptr) sum += squared_change(r, __ldg(row + j));
                }
            }
        }
    }

    if (p.residual == nullptr) return;  // uniform across the grid: no thread reaches a barrier
    // Block reduction: warp shuffles, then one partial per warp through shared memory.
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
    __shared__ double partial[block_x * block_y / 32];
    const int tid = threadIdx.y * block_x + threadIdx.x;
    if (tid % 32 == 0) partial[tid / 32] = sum;
    __syncthreads();
    if (tid == 0) {
        double total = 0;
#pragma unroll
        for (int w = 0; w < block_x * block_y / 32; ++w) total += partial[w];
        atomicAdd(p.residual, total);
    }
}

// The grid, the first column group and the vector path were chosen by plan_jacobi_launch.
template <class T>
cudaError_t launch(const jacobi_call& call, const jacobi_launch& l, cudaStream_t stream) {
    if (!l.error.empty() || l.grid_x == 0 || l.grid_y == 0) return cudaErrorInvalidConfiguration;
    jacobi_args<T> args{};
    args.in = static_cast<const T*>(call.in);
    args.out = static_cast<T*>(call.out);
    args.ld = call.ld;
    args.row_begin = call.row_begin;
    args.row_end = call.row_end;
    args.col_begin = call.col_begin;
    args.col_end = call.col_end;
    args.first_group = l.first_group;
    args.groups = l.groups;
    args.residual = call.residual;
    const dim3 block(block_x, block_y), grid(l.grid_x, l.grid_y);
    (void)cudaGetLastError();  // the status returned below is this launch's alone
    if (l.vector)
        jacobi_kernel<T, true><<<grid, block, 0, stream>>>(args);
    else
        jacobi_kernel<T, false><<<grid, block, 0, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_jacobi_sweep(const jacobi_call& call, const jacobi_launch& launch_plan,
                                cudaStream_t stream) {
    switch (call.type) {
        case dtype::f32: return launch<float>(call, launch_plan, stream);
        case dtype::f64: return launch<double>(call, launch_plan, stream);
        case dtype::c32:
        case dtype::c64: break;  // Jacobi is real: plan_jacobi refuses complex fields
    }
    return cudaErrorNotSupported;
}

}  // namespace tilestream::cuda
