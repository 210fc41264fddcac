#pragma once
// Writing a block-cyclic matrix into an output that the caller commits (with others, all new or
// none): the piece of write_npy_blocks that the distributed CLI shares. Not a public header.

#include <tilestream/distributed.hpp>

#include "core/output_files.hpp"

namespace tilestream::distributed {

/// Writes the rows x cols block-cyclic matrix (this rank's blocks at `local`, column-major with
/// leading dimension ld) as .npy (C order) into `out`, which rank 0 of the grid holds (nullptr on
/// every other rank) and commits afterwards. A regular file: every rank writes its blocks into
/// out's temporary with MPI-IO (every byte reserved first; each status checked). A device or FIFO
/// (written in place, as cp does): rank 0 gathers the blocks and writes them in one stream.
/// Collective over grid.comm(); every rank throws collective_failure when any rank fails.
template <class T>
void write_npy_blocks_to(const process_grid& grid, detail::output_file* out, index_t rows, index_t cols, index_t block,
                         const T* local, index_t ld);

}  // namespace tilestream::distributed
