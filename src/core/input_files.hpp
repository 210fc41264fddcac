// Reading a whole file into memory, safely: only regular files and pipes (a device such as
// /dev/zero never ends), never more than a cap, and never waiting for a FIFO's writer.
#pragma once

#include <cstddef>
#include <string>

namespace tilestream::detail {

/// The contents of `path`, a regular file or a pipe/FIFO of at most `limit` bytes; `what` names
/// the kind of file in messages ("a Chrome trace"). Throws file_error naming the path when it is
/// a directory, a device or a socket, cannot be read, or holds more than `limit` bytes.
std::string read_file_capped(const std::string& path, std::size_t limit, const std::string& what);

}  // namespace tilestream::detail
