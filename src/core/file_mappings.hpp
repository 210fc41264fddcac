// Which host memory is a memory-mapped file (npy_array inputs, npy_output results): such memory is
// not pinned for devices when it is large (over a quarter of MemAvailable), since pinning would lock
// the whole file in RAM, and files larger than memory are what the mappings are for. Their tiles
// then go through the devices' staging.
#pragma once

#include <cstddef>

namespace tilestream::detail {

/// Whether any byte of [p, p + n) lies in a live file mapping made by npy_array or npy_output.
bool in_file_mapping(const void* p, std::size_t n);

}  // namespace tilestream::detail
