// The value types of the CUDA kernels and their arithmetic: float and double, and cplx<R> for the
// complex types (real part first, aligned like cuComplex/cuDoubleComplex, so a tile of them is the
// bytes std::complex<R> has on the host). A complex product is four real products, as BLAS
// computes it; conj_if reads an operand conjugated (op::c) and is the identity on real values.
#pragma once

#include <tilestream/kernels.hpp>

#include <complex>
#include <type_traits>

namespace tilestream::cuda {

template <class R>
struct alignas(2 * sizeof(R)) cplx {
    R re, im;
};

template <class R>
__host__ __device__ __forceinline__ bool operator==(cplx<R> x, cplx<R> y) {
    return x.re == y.re && x.im == y.im;
}
template <class R>
__host__ __device__ __forceinline__ bool operator!=(cplx<R> x, cplx<R> y) {
    return !(x == y);
}
template <class R>
__host__ __device__ __forceinline__ cplx<R> operator+(cplx<R> x, cplx<R> y) {
    return {x.re + y.re, x.im + y.im};
}
template <class R>
__host__ __device__ __forceinline__ cplx<R> operator*(cplx<R> x, cplx<R> y) {
    return {x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re};
}
/// x * y + z, fused: CUDA's for real values (declared here so they are found beside the complex
/// one), and with fused real multiply-adds for complex values.
__device__ __forceinline__ float fma(float x, float y, float z) { return ::fmaf(x, y, z); }
__device__ __forceinline__ double fma(double x, double y, double z) { return ::fma(x, y, z); }
template <class R>
__device__ __forceinline__ cplx<R> fma(cplx<R> x, cplx<R> y, cplx<R> z) {
    return {::fma(x.re, y.re, ::fma(-x.im, y.im, z.re)), ::fma(x.re, y.im, ::fma(x.im, y.re, z.im))};
}

__device__ __forceinline__ float conj_if(float x, bool) { return x; }
__device__ __forceinline__ double conj_if(double x, bool) { return x; }
template <class R>
__device__ __forceinline__ cplx<R> conj_if(cplx<R> x, bool c) {
    return c ? cplx<R>{x.re, -x.im} : x;
}

/// A read-only global load through the texture path.
__device__ __forceinline__ float load_global(const float* p) { return __ldg(p); }
__device__ __forceinline__ double load_global(const double* p) { return __ldg(p); }
__device__ __forceinline__ cplx<float> load_global(const cplx<float>* p) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(p));
    return {v.x, v.y};
}
__device__ __forceinline__ cplx<double> load_global(const cplx<double>* p) {
    const double2 v = __ldg(reinterpret_cast<const double2*>(p));
    return {v.x, v.y};
}

/// The kernel value type of a dtype's host type: float, double, cplx<float>, cplx<double>.
template <class T>
struct device_value {
    using type = T;
};
template <class R>
struct device_value<std::complex<R>> {
    using type = cplx<R>;
};

/// A gemm_call scalar as the kernels' value type T.
template <class T>
T device_scalar(scalar s) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
        return static_cast<T>(s.real());
    else
        return T{static_cast<decltype(T::re)>(s.real()), static_cast<decltype(T::re)>(s.imag())};
}

/// f(T{}) with the kernel value type of t (the launchers' dispatch over the dtype table).
template <class F>
auto visit_device_value(dtype t, F&& f) {
    switch (t) {
        case dtype::f32: return f(float{});
        case dtype::f64: return f(double{});
        case dtype::c32: return f(cplx<float>{});
        case dtype::c64: return f(cplx<double>{});
    }
    return f(float{});  // not reached: every dtype has a case
}

}  // namespace tilestream::cuda
