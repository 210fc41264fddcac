// Shared pieces of the benchmark programs: medians, timing, and the JSON header every result
// file carries (git hash, machine, device, date).
#pragma once

#include <tilestream/devices.hpp>
#include <tilestream/json.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace tilestream::bench {

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Runs fn once to warm up, then `reps` timed runs; returns the median seconds.
template <class F>
double time_median(int reps, F&& fn) {
    fn();
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(t);
}

inline std::string utc_date() {
    std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return buf;
}

inline std::string machine_name() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    return std::string(host) + " (" + inventory().cpu_name + ", " + std::to_string(inventory().cpu_cores) +
           " cores)";
}

/// The common header fields of a result file.
inline json_object result_header(const std::string& benchmark, const std::string& git_hash,
                                 const std::string& device) {
    json_object o;
    o.add("benchmark", benchmark).add("git_hash", git_hash).add("machine", machine_name());
    o.add("device", device).add("date", utc_date());
    return o;
}

/// Writes text to path through a temporary file and a rename.
inline void write_file_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    {
        std::ofstream out(tmp);
        out << text << "\n";
        if (!out) throw std::runtime_error("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw std::runtime_error("cannot rename " + tmp + " to " + path);
    }
}

}  // namespace tilestream::bench
