// Builds without the MPI layer: --grid, --layers, or a run under mpirun with several ranks, is refused with
// the reason instead of every rank solving the whole problem alone.
#include "commands.hpp"

#include <tilestream/error.hpp>

#include <cstdlib>
#include <string>

namespace tilestream::cli {

bool wants_ranks(int argc, char** argv) {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
        if (const char* s = std::getenv(v); s && std::atoi(s) > 1) return true;
    for (int i = 2; i < argc; ++i)
        if (std::string(argv[i]).rfind("--grid", 0) == 0 || std::string(argv[i]).rfind("--layers", 0) == 0) return true;
    return false;
}

int cmd_distributed(const std::string& cmd, int, char**) {
    throw invalid_argument(cmd + " over MPI ranks (--grid, --layers, mpirun) needs the MPI layer, which this build of tilestream "
                                 "lacks: install libopenmpi-dev and configure again (TILESTREAM_WITH_MPI)");
}

}  // namespace tilestream::cli
