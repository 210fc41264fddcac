// Constants shared by the Jacobi planner and engine (private to the library).
#pragma once

#include <cstddef>

namespace tilestream::detail {

/// Rows of a part's buffers are padded to this many bytes, so that every row starts aligned for
/// vector loads (16 bytes on GPUs, 64 on CPUs) whatever the part's width.
inline constexpr std::size_t jacobi_row_alignment = 64;

/// Doubles of residual storage per part: a zero to clear slots with, then two slots (one per
/// check in flight) of two sums each (boundary-strip stream, interior stream).
inline constexpr std::size_t jacobi_residual_doubles = 5;

}  // namespace tilestream::detail
