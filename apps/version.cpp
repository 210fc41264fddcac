// `tilestream --version`: kept in its own file so that a new commit recompiles only this.
#include "commands.hpp"

#include "tilestream_version.hpp"

namespace tilestream::cli {

std::string version_text() { return "tilestream " TILESTREAM_VERSION_TEXT; }

}  // namespace tilestream::cli
