// Writing .npy data into an output file that the caller commits (alone or with other outputs).
#pragma once

#include "core/output_files.hpp"

#include <tilestream/batch.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/types.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace tilestream::detail {

/// Writes m as .npy (header and data) into `out`, which is not committed.
template <class T>
void write_npy_to(output_file& out, host_matrix_view<const T> m);

/// Writes a stack as one .npy array of shape lead + (rows, cols), C order, into `out`.
template <class T>
void write_npy_stack_to(output_file& out, const std::vector<index_t>& lead, host_batch_view<const T> s);

/// Writes v as a one-dimensional .npy array of int64 ('<i8'; LU's pivots) into `out`.
void write_npy_indices_to(output_file& out, std::span<const index_t> v);

/// Bytes of the .npy file write_npy_to writes for a rows x cols matrix of `type` in `lay`.
std::size_t npy_file_bytes(dtype type, index_t rows, index_t cols, tilestream::layout lay);

}  // namespace tilestream::detail
