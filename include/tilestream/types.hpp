// Basic vocabulary of tilestream: element types (dtype_traits.hpp), layouts, ops, checked 64-bit sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include <tilestream/dtype_traits.hpp>

namespace tilestream {

enum class layout { row_major, col_major };
/// What a routine applies to an operand: nothing, a transpose, or a conjugate transpose (BLAS's
/// 'N', 'T', 'C'). On real data c equals t.
enum class op { n, t, c };

/// Whether o transposes (t or c), and whether it conjugates (c).
constexpr bool is_transposed(op o) noexcept { return o != op::n; }
constexpr bool is_conjugated(op o) noexcept { return o == op::c; }

std::string_view to_string(layout l) noexcept;
std::string_view to_string(op o) noexcept;
/// Parses "n", "t" or "c" (case-insensitive; BLAS's characters); throws invalid_argument otherwise.
op parse_op(std::string_view s);

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
