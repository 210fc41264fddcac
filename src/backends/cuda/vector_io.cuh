// 16-byte vector loads and stores (float4 for f32, double2 for f64) shared by the CUDA kernels.
#pragma once

#include <type_traits>

namespace tilestream::cuda {

template <class T>
__device__ __forceinline__ void load16_global(T* r, const T* p) {
    if constexpr (std::is_same_v<T, float>) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p));
        r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
    } else {
        const double2 v = __ldg(reinterpret_cast<const double2*>(p));
        r[0] = v.x, r[1] = v.y;
    }
}

template <class T>
__device__ __forceinline__ void load16(T* r, const T* p) {
    if constexpr (std::is_same_v<T, float>) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
    } else {
        const double2 v = *reinterpret_cast<const double2*>(p);
        r[0] = v.x, r[1] = v.y;
    }
}

template <class T>
__device__ __forceinline__ void store16(T* p, const T* r) {
    if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
    } else {
        *reinterpret_cast<double2*>(p) = make_double2(r[0], r[1]);
    }
}

}  // namespace tilestream::cuda
