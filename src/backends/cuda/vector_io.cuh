// 16-byte vector loads and stores shared by the CUDA kernels: float4 for f32 (4 values), double2
// for f64 (2), float4 for c32 (2 complex values), double2 for c64 (1).
#pragma once

#include "backends/cuda/cuda_values.cuh"

#include <type_traits>

namespace tilestream::cuda {

template <class T>
__device__ __forceinline__ void from_vector(T* r, float4 v) {
    if constexpr (std::is_same_v<T, float>) {
        r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
    } else {
        r[0] = {v.x, v.y}, r[1] = {v.z, v.w};
    }
}
template <class T>
__device__ __forceinline__ void from_vector(T* r, double2 v) {
    if constexpr (std::is_same_v<T, double>) {
        r[0] = v.x, r[1] = v.y;
    } else {
        r[0] = {v.x, v.y};
    }
}

// The 16-byte vector type holding T's parts.
template <class T>
using vector16 = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, cplx<float>>, float4, double2>;

template <class T>
__device__ __forceinline__ void load16_global(T* r, const T* p) {
    from_vector(r, __ldg(reinterpret_cast<const vector16<T>*>(p)));
}

template <class T>
__device__ __forceinline__ void load16(T* r, const T* p) {
    from_vector(r, *reinterpret_cast<const vector16<T>*>(p));
}

template <class T>
__device__ __forceinline__ void store16(T* p, const T* r) {
    if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
    } else if constexpr (std::is_same_v<T, double>) {
        *reinterpret_cast<double2*>(p) = make_double2(r[0], r[1]);
    } else if constexpr (std::is_same_v<T, cplx<float>>) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0].re, r[0].im, r[1].re, r[1].im);
    } else {
        *reinterpret_cast<double2*>(p) = make_double2(r[0].re, r[0].im);
    }
}

}  // namespace tilestream::cuda
