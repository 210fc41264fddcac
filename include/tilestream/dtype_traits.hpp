// The element types (precisions) of tilestream in one table: one row per dtype with its size,
// names, .npy code, whether it is complex, the type of its parts, the k-block of reproducible
// plans and the type tags of the vendor libraries. Code that depends on the precision reads this
// table or switches over dtype exhaustively (the library builds with -Werror=switch), so a new
// precision is a new row plus the compile errors that point at every place that must handle it
// (BLIS indexes its kernels by datatype the same way; see docs/architecture.md).
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace tilestream {

/// All extents, leading dimensions and element counts are 64-bit signed.
using index_t = std::int64_t;

/// f32 and f64 are float and double; c32 and c64 are std::complex<float> and std::complex<double>
/// (two parts of f32 / f64 each, stored real part first, as numpy, BLAS and CUDA store them).
enum class dtype : std::uint8_t { f32, f64, c32, c64 };

/// Every dtype, in table order.
inline constexpr dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::c32, dtype::c64};

/// cuBLAS's cudaDataType_t of an element, with CUDA's values (library_types.h: CUDA_R_32F = 0,
/// CUDA_R_64F = 1, CUDA_C_32F = 4, CUDA_C_64F = 5); the CUDA backend checks them against the
/// header, so public headers need no CUDA.
enum class cuda_data_type : int { r_32f = 0, r_64f = 1, c_32f = 4, c_64f = 5 };

/// The MPI datatype of an element (MPI_FLOAT, MPI_DOUBLE, MPI_C_FLOAT_COMPLEX,
/// MPI_C_DOUBLE_COMPLEX); src/distributed maps it to MPI's handle with one switch.
enum class mpi_data_type : std::uint8_t { float_, double_, c_float_complex, c_double_complex };

/// One row of the table.
struct dtype_info {
    dtype type;
    std::string_view name;        ///< "f32": the CLI, JSON and messages
    std::string_view numpy_name;  ///< "float32": numpy's name (parse_dtype accepts both)
    std::string_view npy_descr;   ///< "<f4": the descr of a little-endian .npy file
    std::size_t size;             ///< bytes per element
    bool is_complex;
    dtype real;                   ///< the type of the real and imaginary parts (itself when real)
    /// Routine letter of BLAS, CBLAS, cuBLAS and CLBlast: 's', 'd', 'c', 'z' (cblas_zgemm).
    char blas_prefix;
    /// The k-block of reproducible plans (plan_options::reproducible), in elements of this type:
    /// for real types the tiled CPU kernel's KC and OpenBLAS's GEMM_Q on Haswell/Zen, for complex
    /// types half of it (the 1m kernel's KC counted in complex elements).
    index_t reproducible_k_block;
    /// Real floating-point operations of one multiply-add: 2, or 8 for complex (four real
    /// multiplies, four adds). GFLOP/s and the cost model count with it (8mnk for complex GEMM).
    int flops_per_multiply_add;
    int mantissa_bits;            ///< 24 or 53: the unit roundoff of a part is 2^-mantissa_bits
    cuda_data_type cuda;
    mpi_data_type mpi;
    std::string_view c_real_type;  ///< "float" or "double": the C type of a part (OpenCL programs)
};

/// The table, indexed by dtype.
inline constexpr dtype_info dtype_table[] = {
    {dtype::f32, "f32", "float32", "<f4", 4, false, dtype::f32, 's', 384, 2, 24, cuda_data_type::r_32f,
     mpi_data_type::float_, "float"},
    {dtype::f64, "f64", "float64", "<f8", 8, false, dtype::f64, 'd', 256, 2, 53, cuda_data_type::r_64f,
     mpi_data_type::double_, "double"},
    // Complex k-blocks are half the real ones: the tiled kernel (the 1m method) runs its real
    // micro-kernel over 2k, so a complex k-block is one real KC.
    {dtype::c32, "c32", "complex64", "<c8", 8, true, dtype::f32, 'c', 192, 8, 24, cuda_data_type::c_32f,
     mpi_data_type::c_float_complex, "float"},
    {dtype::c64, "c64", "complex128", "<c16", 16, true, dtype::f64, 'z', 128, 8, 53, cuda_data_type::c_64f,
     mpi_data_type::c_double_complex, "double"},
};

namespace detail {
constexpr bool dtype_table_is_complete() {
    if (std::size(dtype_table) != std::size(all_dtypes)) return false;
    for (std::size_t i = 0; i < std::size(all_dtypes); ++i)
        if (dtype_table[i].type != all_dtypes[i] || std::size_t(all_dtypes[i]) != i) return false;
    return true;
}
}  // namespace detail
static_assert(detail::dtype_table_is_complete(), "dtype_table needs one row per dtype, in enum order");

/// The row of a dtype.
constexpr const dtype_info& dtype_traits(dtype t) noexcept { return dtype_table[static_cast<std::size_t>(t)]; }

/// Size of one element of type t in bytes.
constexpr std::size_t size_of(dtype t) noexcept { return dtype_traits(t).size; }
constexpr bool is_complex(dtype t) noexcept { return dtype_traits(t).is_complex; }
std::string_view to_string(dtype t) noexcept;
/// Parses a dtype by its name or numpy's ("f32", "float32", "c64", "complex128"; "float" and
/// "double" too), case-insensitive; throws invalid_argument listing the names otherwise.
dtype parse_dtype(std::string_view s);
/// The dtype whose .npy descr is `descr` ("<c8"), or false.
bool dtype_from_npy_descr(std::string_view descr, dtype& out) noexcept;

// ---- the C++ type of each dtype ----

/// value_type_of<dtype::c32>::type is std::complex<float>.
template <dtype D>
struct value_type_of;
template <>
struct value_type_of<dtype::f32> {
    using type = float;
};
template <>
struct value_type_of<dtype::f64> {
    using type = double;
};
template <>
struct value_type_of<dtype::c32> {
    using type = std::complex<float>;
};
template <>
struct value_type_of<dtype::c64> {
    using type = std::complex<double>;
};

namespace detail {
template <class T>
struct dtype_of_value {
    static_assert(sizeof(T) == 0, "tilestream's element types are float, double, std::complex<float> and "
                                  "std::complex<double>");
};
template <>
struct dtype_of_value<float> {
    static constexpr dtype value = dtype::f32;
};
template <>
struct dtype_of_value<double> {
    static constexpr dtype value = dtype::f64;
};
template <>
struct dtype_of_value<std::complex<float>> {
    static constexpr dtype value = dtype::c32;
};
template <>
struct dtype_of_value<std::complex<double>> {
    static constexpr dtype value = dtype::c64;
};
template <class T>
struct real_of {
    using type = T;
};
template <class R>
struct real_of<std::complex<R>> {
    using type = R;
};
}  // namespace detail

/// The dtype of a value type (a compile error for any other type).
template <class T>
constexpr dtype dtype_of() {
    return detail::dtype_of_value<std::remove_cv_t<T>>::value;
}
/// Whether T is std::complex<float> or std::complex<double>.
template <class T>
inline constexpr bool is_complex_v = dtype_traits(dtype_of<T>()).is_complex;
/// The type of T's parts: float for float and std::complex<float>.
template <class T>
using real_type_t = typename detail::real_of<std::remove_cv_t<T>>::type;

namespace detail {
[[noreturn]] void throw_bad_dtype(dtype t);
[[noreturn]] void throw_real_only(std::string_view what, dtype t);
}  // namespace detail

/// T in double precision: double for real T, std::complex<double> for complex T (references and
/// checks compute in it).
template <class T>
using wide_type_t = std::conditional_t<is_complex_v<T>, std::complex<double>, double>;

/// Calls f.template operator()<T>() with the value type of t (float, double, std::complex<float>,
/// std::complex<double>). The switch is exhaustive: a dtype without a case does not compile.
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
    switch (t) {
        case dtype::f32: return f.template operator()<float>();
        case dtype::f64: return f.template operator()<double>();
        case dtype::c32: return f.template operator()<std::complex<float>>();
        case dtype::c64: return f.template operator()<std::complex<double>>();
    }
    detail::throw_bad_dtype(t);  // not reached: t is one of the cases
}
/// visit_dtype for code that works on real numbers only (Jacobi): f32 and f64 are visited, a
/// complex t throws invalid_argument "<what>: <dtype> is complex; only f32 and f64 are supported".
template <class F>
decltype(auto) visit_real_dtype(dtype t, std::string_view what, F&& f) {
    switch (t) {
        case dtype::f32: return f.template operator()<float>();
        case dtype::f64: return f.template operator()<double>();
        case dtype::c32:
        case dtype::c64: detail::throw_real_only(what, t);
    }
    detail::throw_bad_dtype(t);
}

/// A scalar of any dtype as the kernels carry it (gemm_call::alpha): complex double.
using scalar = std::complex<double>;
/// A scalar as a value of type T: its real part for real T.
template <class T>
constexpr T scalar_as(scalar s) {
    if constexpr (is_complex_v<T>)
        return T(static_cast<real_type_t<T>>(s.real()), static_cast<real_type_t<T>>(s.imag()));
    else
        return static_cast<T>(s.real());
}
/// A value of type T as a scalar.
template <class T>
constexpr scalar as_scalar(T v) {
    if constexpr (is_complex_v<T>)
        return scalar(double(v.real()), double(v.imag()));
    else
        return scalar(double(v), 0.0);
}
/// Parses a real or complex number as Python's complex() does: "2", "-1.5e3", "1.5-2j", "2j",
/// "-j", "(1+2i)" (j or i, no spaces). Throws invalid_argument naming the text.
scalar parse_scalar(std::string_view text);
/// "1.5", "1.5-2j", "-2j": the shortest text that parse_scalar reads back to the same value.
std::string format_scalar(scalar s);

}  // namespace tilestream
