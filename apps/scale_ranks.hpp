// Strong scaling over MPI ranks for `scale gemm|jacobi --ranks` (scale_ranks.cpp).
#pragma once

#include <tilestream/report.hpp>

#include <string>
#include <vector>

namespace tilestream::cli {

/// "1,2,4" -> {1, 2, 4}; throws invalid_argument naming the text otherwise.
std::vector<int> parse_rank_counts(const std::string& list);

/// One study: `mpirun -np R <this tool> <workload> <args> --json` for each R, `repeat` times.
struct ranks_study {
    std::string workload;            ///< "gemm" or "jacobi"
    std::vector<std::string> args;   ///< the problem and per-rank options, passed on as given
    std::vector<int> ranks;
    int repeat = 1;
    std::string devices;             ///< each rank's devices, for the table
    std::string problem;             ///< e.g. "1024x1024 f32"
    std::string rate_key, bytes_key; ///< JSON keys of the rate (per second) and of the bytes moved
    std::string argv0;               ///< this tool, when /proc/self/exe cannot be read
};

/// The rows (median seconds of each rank count, speedup and efficiency against the first);
/// throws invalid_argument when mpirun is not on PATH, runtime_failure when a run fails.
std::vector<scaling_row> scale_over_ranks(const ranks_study& study);

}  // namespace tilestream::cli
