// Arithmetic on the value types of the kernels (float, double, std::complex of either) written out
// as BLAS kernels compute it: a complex product is four real products and two sums, with no
// C99 Annex G recovery of infinities (std::complex's operator* calls __mulsc3 for that), so the
// oracle, the host kernels and the check see NaN and Inf where OpenBLAS, cuBLAS and CLBlast do.
#pragma once

#include <tilestream/dtype_traits.hpp>

#include <cmath>
#include <complex>

namespace tilestream::detail {

/// x * y.
template <class T>
constexpr T mul(T x, T y) noexcept {
    if constexpr (is_complex_v<T>)
        return T(x.real() * y.real() - x.imag() * y.imag(), x.real() * y.imag() + x.imag() * y.real());
    else
        return x * y;
}

/// acc + x * y, each part summed in the order real kernels do: acc + (products).
template <class T>
constexpr T mul_add(T x, T y, T acc) noexcept {
    if constexpr (is_complex_v<T>)
        return T(acc.real() + (x.real() * y.real() - x.imag() * y.imag()),
                 acc.imag() + (x.real() * y.imag() + x.imag() * y.real()));
    else
        return acc + x * y;
}

/// conj(x) when `c`, else x (real values are their own conjugates).
template <class T>
constexpr T conj_if(T x, bool c) noexcept {
    if constexpr (is_complex_v<T>)
        return c ? T(x.real(), -x.imag()) : x;
    else
        return x;
}

/// Both parts finite.
template <class T>
bool is_finite(T x) noexcept {
    if constexpr (is_complex_v<T>)
        return std::isfinite(x.real()) && std::isfinite(x.imag());
    else
        return std::isfinite(x);
}

/// |x|^2: x^2, or re^2 + im^2.
template <class T>
constexpr double norm2(T x) noexcept {
    if constexpr (is_complex_v<T>)
        return double(x.real()) * double(x.real()) + double(x.imag()) * double(x.imag());
    else
        return double(x) * double(x);
}

/// The value in double precision: double or std::complex<double>.
template <class T>
using wide_t = wide_type_t<T>;
template <class T>
constexpr wide_t<T> widen(T x) noexcept {
    if constexpr (is_complex_v<T>)
        return {double(x.real()), double(x.imag())};
    else
        return double(x);
}
/// A wide value rounded once to T.
template <class T>
constexpr T narrow(wide_t<T> x) noexcept {
    if constexpr (is_complex_v<T>)
        return T(static_cast<real_type_t<T>>(x.real()), static_cast<real_type_t<T>>(x.imag()));
    else
        return static_cast<T>(x);
}

}  // namespace tilestream::detail
