// `scale ... --ranks 1,2,4`: strong scaling over MPI ranks, each rank count one `mpirun -np R` of
// this tool with --json, its seconds (the slowest rank's) read back into a scaling row.
#include "cli_args.hpp"
#include "scale_ranks.hpp"
#include "core/json_text.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>

namespace tilestream::cli {
namespace {

/// The first executable `name` on PATH; empty when there is none.
std::string find_on_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "";
    std::size_t start = 0;
    while (start <= dirs.size()) {
        std::size_t colon = dirs.find(':', start);
        if (colon == std::string::npos) colon = dirs.size();
        const std::string dir = dirs.substr(start, colon - start);
        const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        start = colon + 1;
    }
    return {};
}

std::string shell_quoted(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

/// What one run printed as its JSON line (the last line of stdout that starts with '{').
detail::json run_json(const std::string& command) {
    std::FILE* pipe = ::popen(command.c_str(), "r");
    if (!pipe) throw runtime_failure("scale --ranks: could not start: " + command);
    std::string out;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
    const int status = ::pclose(pipe);
    if (status != 0)
        throw runtime_failure("scale --ranks: " + command + " failed (exit " +
                              std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128) + ")");
    std::size_t line = out.rfind("\n{");
    line = line == std::string::npos ? (out.rfind('{', 0) == 0 ? 0 : std::string::npos) : line + 1;
    if (line == std::string::npos) throw runtime_failure("scale --ranks: " + command + " printed no JSON line:\n" + out);
    try {
        return detail::json::parse(out.substr(line, out.find('\n', line) - line));
    } catch (const std::exception& e) {
        throw runtime_failure("scale --ranks: " + command + " printed a JSON line that does not parse: " + e.what());
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

std::vector<int> parse_rank_counts(const std::string& list) {
    std::vector<int> out;
    std::size_t start = 0;
    while (start <= list.size()) {
        std::size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        const std::string item = list.substr(start, comma - start);
        int v = 0;
        const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 1 || v > 4096)
            throw invalid_argument("--ranks expects rank counts from 1 to 4096 separated by commas, e.g. 1,2,4; got '" +
                                   list + "'");
        out.push_back(v);
        start = comma + 1;
    }
    return out;
}

std::vector<scaling_row> scale_over_ranks(const ranks_study& study) {
    const std::string mpirun = find_on_path("mpirun");
    if (mpirun.empty())
        throw invalid_argument("scale --ranks: mpirun was not found on PATH (install openmpi-bin, or give the "
                               "device sets with --devices alone to scale within one process)");
    std::error_code ec;
    std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec || self.empty()) self = study.argv0;
    // What OpenMPI needs in a container and on a small machine (as tests/mpi/run_mpi_test.sh
    // sets it); a variable the user set wins.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    std::vector<scaling_row> rows;
    for (int r : study.ranks) {
        std::string command = shell_quoted(mpirun) + " -np " + std::to_string(r) + " " + shell_quoted(self) + " " +
                              study.workload;
        for (const auto& a : study.args) command += " " + shell_quoted(a);
        // One rank runs over MPI too (the same code path as the others): --grid 1x1.
        command += r == 1 ? " --grid 1x1 --json" : " --json";
        std::vector<double> secs;
        double work = 0, bytes = 0;
        std::string grid, per_rank;
        for (int k = 0; k < study.repeat; ++k) {
            const detail::json j = run_json(command);
            // The per-rank figures of the run (gemm): the fastest and slowest rank and the most sent.
            if (j.contains("per_rank") && j["per_rank"].is_array() && !j["per_rank"].empty()) {
                double lo = 1e300, hi = 0, sent = 0;
                for (const auto& pr : j["per_rank"]) {
                    lo = std::min(lo, pr.value("seconds", 0.0));
                    hi = std::max(hi, pr.value("seconds", 0.0));
                    sent = std::max(sent, pr.value("bytes_sent", 0.0));
                }
                char text[160];
                std::snprintf(text, sizeof text, "; per rank %.4f..%.4f s, at most %s sent", lo, hi,
                              format_bytes(std::size_t(sent)).c_str());
                per_rank = text;
            }
            const double s = j.value("seconds", 0.0);
            if (!(s > 0)) throw runtime_failure("scale --ranks: " + command + " reported " + std::to_string(s) + " seconds");
            secs.push_back(s);
            work = j.value(study.rate_key, 0.0) * s;
            bytes = j.value(study.bytes_key, 0.0);
            grid = j.value("grid", std::string());
        }
        scaling_row row;
        row.devices = std::to_string(r) + (r == 1 ? " rank x " : " ranks x ") + study.devices;
        row.device_count = r;
        row.seconds = median(secs);
        row.rate = work / row.seconds;
        row.bytes_moved = bytes;
        row.problem = study.problem + " grid " + grid;
        rows.push_back(row);
        std::fprintf(stderr, "  %s: %.4f s%s\n", row.devices.c_str(), row.seconds, per_rank.c_str());
    }
    compute_scaling(rows, false);
    return rows;
}

}  // namespace tilestream::cli
