// Basic vocabulary of tilestream: element types, layouts, transpose flags, checked 64-bit sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace tilestream {

/// All extents, leading dimensions and element counts are 64-bit signed.
using index_t = std::int64_t;

enum class dtype { f32, f64 };
enum class layout { row_major, col_major };
enum class op { n, t };

/// Size of one element of type t in bytes.
std::size_t size_of(dtype t) noexcept;
std::string_view to_string(dtype t) noexcept;
std::string_view to_string(layout l) noexcept;
std::string_view to_string(op o) noexcept;
/// Parses "f32"/"float32"/"float" and "f64"/"float64"/"double"; throws invalid_argument otherwise.
dtype parse_dtype(std::string_view s);
/// Parses "n"/"t" (case-insensitive); throws invalid_argument otherwise.
op parse_op(std::string_view s);

template <class T>
constexpr dtype dtype_of() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "tilestream supports float and double");
    return std::is_same_v<T, float> ? dtype::f32 : dtype::f64;
}

/// Calls f.template operator()<T>() with T = float or double according to t.
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
    if (t == dtype::f32) return f.template operator()<float>();
    return f.template operator()<double>();
}

/// a*b, throwing size_overflow naming `what` when the product does not fit in index_t
/// or either factor is negative.
index_t checked_mul(index_t a, index_t b, std::string_view what);
/// a+b with the same checks.
index_t checked_add(index_t a, index_t b, std::string_view what);
/// Number of bytes of a rows x cols matrix of dtype t, checked.
std::size_t checked_bytes(index_t rows, index_t cols, dtype t, std::string_view what);

/// Human-readable byte count: "512.0 MiB".
std::string format_bytes(std::size_t bytes);
/// Parses "512MiB", "1.5GiB", "64KB", "4096" (plain bytes). Throws invalid_argument naming the text.
std::size_t parse_bytes(std::string_view text);

}  // namespace tilestream
