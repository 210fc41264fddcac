// Shared pieces of the benchmark programs: medians, timing, and the JSON header every result
// file carries (git hash, machine, device, date).
#pragma once

#include <tilestream/devices.hpp>
#include <tilestream/dtype_traits.hpp>
#include <tilestream/matrix.hpp>

#include "core/json_text.hpp"

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <cblas.h>

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

struct pair_timing {
    double ours = 0, anchor = 0;
};

/// One warm-up of each, then `reps` alternating timed runs of each (the order swapped every
/// repetition, so drift on a noisy machine falls on both); medians. before() runs ahead of every
/// run, warm-ups included, outside the clock (a fresh copy of an operand the call overwrites).
template <class F, class G, class H>
pair_timing alternate(int reps, F&& ours, G&& anchor, H&& before) {
    before();
    ours();
    before();
    anchor();
    std::vector<double> a, b;
    for (int r = 0; r < reps; ++r) {
        for (int side = 0; side < 2; ++side) {
            const bool ours_now = ((r % 2) ^ side) == 0;
            before();
            const auto t0 = std::chrono::steady_clock::now();
            if (ours_now)
                ours();
            else
                anchor();
            (ours_now ? a : b).push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    }
    return {median(a), median(b)};
}

template <class F, class G>
pair_timing alternate(int reps, F&& ours, G&& anchor) {
    return alternate(reps, std::forward<F>(ours), std::forward<G>(anchor), [] {});
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

/// The vector extensions the CPU reports (from /proc/cpuinfo), those that decide kernel choice.
inline std::string cpu_isa_flags() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, out;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        line += ' ';
        for (const char* f : {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile"})
            if (line.find(std::string(" ") + f + " ") != std::string::npos) out += (out.empty() ? "" : " ") + std::string(f);
        break;
    }
    return out;
}

/// The CPU's identity beyond its name (a VM's "AMD EPYC" is Zen 3 or Zen 4): vendor, family, model
/// and stepping from /proc/cpuinfo, then the cache sizes of cpu0 from sysfs.
inline std::string cpu_identity() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, out;
    for (const char* key : {"vendor_id", "cpu family", "model", "stepping"}) {
        in.clear();
        in.seekg(0);
        while (std::getline(in, line)) {
            const auto colon = line.find(':');
            if (colon == std::string::npos) continue;
            std::string name = line.substr(0, colon);
            name.erase(name.find_last_not_of(" \t") + 1);
            if (name != key) continue;
            const auto value = line.find_first_not_of(" \t", colon + 1);
            out += (out.empty() ? "" : ", ") + name + " " + (value == std::string::npos ? "" : line.substr(value));
            break;
        }
    }
    for (int i = 0; i < 8; ++i) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::ifstream level(dir + "level"), type(dir + "type"), size(dir + "size");
        std::string l, t, z;
        if (!(level >> l) || !(type >> t) || !(size >> z)) break;
        if (t == "Instruction") continue;
        out += ", L" + l + (t == "Data" ? "d " : " ") + z;
    }
    return out;
}

/// The environment variables that change which kernels OpenBLAS or tilestream run, and how many threads.
inline std::string kernel_environment() {
    std::string out;
    for (const char* v : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                          "GOTO_NUM_THREADS", "TILESTREAM_CPU_ISA"}) {
        const char* val = std::getenv(v);
        out += (out.empty() ? "" : ", ") + std::string(v) + "=" + (val ? val : "(unset)");
    }
    return out;
}

/// A JSON object (nlohmann's, keys in insertion order) built by chained add(); text() is one line
/// as the tool prints it.
class json_builder {
public:
    template <class V>
    json_builder& add(const std::string& key, V&& value) {
        j_[key] = std::forward<V>(value);
        return *this;
    }
    const detail::json& json() const { return j_; }
    std::string text() const { return detail::json_line(j_); }

private:
    detail::json j_ = detail::json::object();
};

/// The common header fields of a result file: what ran, where, when, and what decides the kernels.
inline json_builder result_header(const std::string& benchmark, const std::string& git_hash,
                                 const std::string& device) {
    json_builder o;
    o.add("benchmark", benchmark).add("git_hash", git_hash).add("machine", machine_name());
    o.add("cpu_model", inventory().cpu_name).add("cpu_id", cpu_identity()).add("cpu_cores", inventory().cpu_cores);
    o.add("cpu_isa_flags", cpu_isa_flags()).add("kernel_environment", kernel_environment());
    if (auto devs = open_devices("cpu"); !devs.empty())
        o.add("cpu_kernel_isa", devs.front()->info().isa.empty() ? std::string("(not reported)") : devs.front()->info().isa);
    o.add("openblas_corename", std::string(openblas_get_corename()));
    o.add("device", device).add("date", utc_date());
    return o;
}

/// "--name value" pairs of a benchmark's command line. Each option is read once with get(); finish()
/// rejects names nobody asked for, printing the usage.
class arguments {
public:
    arguments(int argc, char** argv, std::string usage) : usage_(std::move(usage)) {
        for (int i = 1; i < argc; i += 2) {
            const std::string k = argv[i];
            if (k.rfind("--", 0) != 0) {
                if (problem_.empty()) problem_ = "'" + k + "' is not an option (options are --name value)";
            } else if (i + 1 >= argc) {
                if (problem_.empty()) problem_ = k + " needs a value";
            } else {
                values_[k.substr(2)] = argv[i + 1];
            }
        }
    }
    std::string get(const std::string& name, const std::string& fallback) {
        asked_.push_back(name);
        auto it = values_.find(name);
        return it == values_.end() ? fallback : it->second;
    }
    long long number(const std::string& name, long long fallback) {
        const std::string v = get(name, "");
        return v.empty() ? fallback : parsed<long long>(name, v, [](const std::string& x, std::size_t* used) { return std::stoll(x, used); });
    }
    double real(const std::string& name, double fallback) {
        const std::string v = get(name, "");
        return v.empty() ? fallback : parsed<double>(name, v, [](const std::string& x, std::size_t* used) { return std::stod(x, used); });
    }
    /// True when every option given was one the benchmark reads; otherwise prints what is wrong
    /// (the first bad argument or unknown option) and the usage.
    bool finish() const {
        std::string problem = problem_;
        for (const auto& [k, v] : values_)
            if (problem.empty() && std::find(asked_.begin(), asked_.end(), k) == asked_.end())
                problem = "unknown option --" + k;
        if (problem.empty()) return true;
        std::fprintf(stderr, "error: %s\n%s\n", problem.c_str(), usage_.c_str());
        return false;
    }

private:
    /// The whole of v read by parse, or an error naming the option and its value.
    template <class R, class F>
    static R parsed(const std::string& name, const std::string& v, F parse) {
        std::size_t used = 0;
        try {
            const R x = parse(v, &used);
            if (used == v.size()) return x;
        } catch (const std::exception&) {
        }
        throw std::invalid_argument("--" + name + ": '" + v + "' is not a number");
    }

    std::string usage_;
    std::map<std::string, std::string> values_;
    std::vector<std::string> asked_;
    std::string problem_;  // the first malformed argument
};

/// Splits "a,b,c" at sep.
inline std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find(sep, start);
        if (end == std::string::npos) end = text.size();
        if (end > start) out.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return out;
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

/// Entries uniform in [-1, 1) (real and imaginary parts) from rng.
template <class T>
T random_entry(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    if constexpr (is_complex_v<T>) return T(u(rng), u(rng));
    else return T(u(rng));
}

/// Fills m column by column with random_entry.
template <class T>
void fill_uniform(host_matrix<T>& m, std::mt19937_64& rng) {
    for (index_t j = 0; j < m.cols(); ++j)
        for (index_t i = 0; i < m.rows(); ++i) m(i, j) = random_entry<T>(rng);
}

/// One figure of a goals benchmark: our time beside its anchor's, measured in the same run.
struct goal_row {
    std::string name, anchor;
    double ours = 0, anchor_seconds = 0, ratio = 0, goal = 0;  // goal <= 0: a figure without a goal
    bool ok = true;
    std::size_t bytes = 0, predicted_bytes = 0;  // bytes moved, measured and modelled, where known
};

/// The figures of a goals benchmark (lu_bench, potrf_bench, blas3_bench): each printed as it comes,
/// met when its ratio (anchor / ours) is at least goal x margin, and the result file at the end.
class goal_table {
public:
    explicit goal_table(double margin, int name_width = 52, bool with_bytes = false)
        : margin_(margin), width_(name_width), with_bytes_(with_bytes) {}

    void report(goal_row r) {
        r.ratio = r.anchor_seconds / r.ours;
        r.ok = r.goal <= 0 || r.ratio >= r.goal * margin_;
        std::printf("%-*s %9.4f s  anchor %9.4f s  ratio %6.3f", width_, r.name.c_str(), r.ours, r.anchor_seconds, r.ratio);
        if (r.goal > 0) std::printf("  goal >= %.2f  %s", r.goal, r.ok ? "ok" : "BELOW GOAL");
        else std::printf("  (no goal)");
        if (r.predicted_bytes) std::printf("  bytes %zu (model %zu)", r.bytes, r.predicted_bytes);
        std::printf("\n");
        std::fflush(stdout);
        rows_.push_back(std::move(r));
    }

    bool all_met() const {
        return std::all_of(rows_.begin(), rows_.end(), [](const goal_row& r) { return r.ok; });
    }

    /// The result file: the common header, the sizes, reps, margin, every row and all_goals_met.
    void write(const std::string& path, const std::string& benchmark, const std::string& git_hash, index_t n,
               index_t complex_n, int reps) const {
        json_builder j = result_header(benchmark, git_hash, "cpu");
        detail::json items = detail::json::array();
        for (const goal_row& r : rows_) {
            detail::json item = {{"name", r.name}, {"anchor", r.anchor}, {"seconds", r.ours},
                                 {"anchor_seconds", r.anchor_seconds}, {"ratio", r.ratio}, {"goal", r.goal},
                                 {"met", r.ok}};
            if (with_bytes_) {
                item["bytes_h2d"] = r.bytes;
                item["predicted_bytes_h2d"] = r.predicted_bytes;
            }
            items.push_back(std::move(item));
        }
        j.add("n", n).add("complex_n", complex_n).add("reps", reps).add("margin", margin_).add("rows", items);
        j.add("all_goals_met", all_met());
        write_file_atomically(path, j.text());
    }

private:
    double margin_;
    int width_;
    bool with_bytes_;
    std::vector<goal_row> rows_;
};

/// The parts a benchmark's --only list asks for: wanted("ooc").
class parts {
public:
    explicit parts(std::vector<std::string> names) : names_(std::move(names)) {}
    bool operator()(const char* part) const { return std::find(names_.begin(), names_.end(), part) != names_.end(); }

private:
    std::vector<std::string> names_;
};

/// The options every goals benchmark reads, with its defaults: --out, --git-hash, --reps, --n,
/// --complex-n, --only (the parts to run) and --margin (a goal is met at ratio >= goal x margin).
/// Bound by name: const auto [out, git, reps, n, complex_n, wanted, margin] = goal_options(...).
struct goal_options {
    std::string out, git_hash;
    int reps;
    index_t n, complex_n;
    parts wanted;
    double margin;

    goal_options(arguments& args, int default_reps, index_t default_n, index_t default_complex_n,
                 const std::string& default_parts)
        : out(args.get("out", "")),
          git_hash(args.get("git-hash", "unknown")),
          reps(int(args.number("reps", default_reps))),
          n(args.number("n", default_n)),
          complex_n(args.number("complex-n", default_complex_n)),
          wanted(split(args.get("only", default_parts), ',')),
          margin(args.real("margin", 1.0)) {}
};

/// A benchmark's main: the body's exceptions (a bad argument such as an unknown routine, a device
/// that cannot open) print one line naming the benchmark and end with exit status 2, not an abort.
template <class Body>
int guarded_main(const char* name, Body&& body) {
    try {
        return body();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: %s\n", name, e.what());
        return 2;
    }
}

}  // namespace tilestream::bench
