// Command-line options of the tilestream tool, declared with CLI11: each command declares its
// options (name, type, help), CLI11 parses --name value, --name=value and --flag and generates
// --help; integers and numbers are converted while parsing, with tilestream's error messages
// (which name the option); an unknown option or command gets a "did you mean" suggestion.
#pragma once

#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/types.hpp>

#include "core/output_files.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tilestream::cli {

/// "at least 1", "in [0, 100]": an integer range as a person writes it (no 19-digit bound).
inline std::string range_text(long long lo, long long hi) {
    if (hi == std::numeric_limits<long long>::max()) return "at least " + std::to_string(lo);
    return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

/// Levenshtein distance, for "did you mean".
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

/// " (did you mean X?)" for the closest of `known` to `given` when it is close enough, else "".
inline std::string did_you_mean(const std::string& given, const std::vector<std::string>& known) {
    std::string best;
    std::size_t best_d = std::numeric_limits<std::size_t>::max();
    for (const auto& k : known) {
        const std::size_t d = edit_distance(given, k);
        if (d < best_d) best_d = d, best = k;
    }
    const std::size_t limit = std::max<std::size_t>(2, given.size() / 3);
    return best_d <= limit ? " (did you mean " + best + "?)" : "";
}

/// The options of one command. Declare them, parse, then read the typed values.
class args {
public:
    /// `command` as shown in the usage line ("gemm", "scale gemm").
    args(const std::string& command, const std::string& description);
    ~args();
    args(const args&) = delete;
    args& operator=(const args&) = delete;

    /// An option with a text value (a path, a name, a size like 64MiB), read as given.
    args& text(const std::string& name, const std::string& help, const std::string& type = "TEXT") {
        add(name, help, type, [this, name](const std::string& v) { values_[name] = v; });
        return *this;
    }
    /// An option holding a 64-bit integer; the range is checked where it is read (integer()).
    args& integer_option(const std::string& name, const std::string& help) {
        add(name, help, "INT", [this, name](const std::string& v) {
            index_t r = 0;
            auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), r);
            if (ec == std::errc::result_out_of_range)
                throw size_overflow("--" + name + " " + v + " does not fit in 64 bits");
            if (ec != std::errc() || p != v.data() + v.size())
                throw invalid_argument("--" + name + " expects an integer, got '" + v + "'");
            values_[name] = v;
            integers_[name] = r;
        });
        return *this;
    }
    /// An option holding a real number.
    args& number_option(const std::string& name, const std::string& help) {
        add(name, help, "FLOAT", [this, name](const std::string& v) {
            double r = 0;
            try {
                std::size_t used = 0;
                r = std::stod(v, &used);
                if (used != v.size()) throw std::invalid_argument("");
            } catch (const std::exception&) {
                throw invalid_argument("--" + name + " expects a number, got '" + v + "'");
            }
            values_[name] = v;
            reals_[name] = r;
        });
        return *this;
    }
    /// An option holding a real or complex number, in Python's syntax (2, -1.5e3, 1.5-2j, 2j, (1+2j)).
    args& scalar_option(const std::string& name, const std::string& help) {
        add(name, help, "NUMBER", [this, name](const std::string& v) {
            try {
                scalars_[name] = parse_scalar(v);
            } catch (const invalid_argument&) {
                throw invalid_argument("--" + name + " expects a number, got '" + v +
                                       "' (a complex one is written 1.5-2j)");
            }
            values_[name] = v;
        });
        return *this;
    }
    /// An option without a value.
    args& flag_option(const std::string& name, const std::string& help);
    /// Collects the arguments that are not options (checked by the command).
    args& positionals(const std::string& name, const std::string& help);
    /// Text after the option list in --help.
    args& footer(const std::string& text);

    /// Parses argv[first..]. Returns false when --help was asked for (the help is printed).
    /// Bad usage throws invalid_argument (or size_overflow) naming the option.
    bool parse(int argc, char** argv, int first);
    std::string help() const;

    bool flag(const std::string& name) const { return flags_.count(name) > 0; }
    bool has(const std::string& name) const { return values_.count(name) > 0; }
    std::optional<std::string> get(const std::string& name) const {
        auto it = values_.find(name);
        if (it == values_.end()) return std::nullopt;
        return it->second;
    }
    std::string get_or(const std::string& name, const std::string& fallback) const {
        return get(name).value_or(fallback);
    }
    /// An integer option in [lo, hi]; the error names the option.
    index_t integer(const std::string& name, index_t fallback, index_t lo, index_t hi) const {
        auto it = integers_.find(name);
        if (it == integers_.end()) return fallback;
        if (it->second < lo || it->second > hi)
            throw invalid_argument("--" + name + " must be " + range_text(lo, hi) + ", got " + values_.at(name));
        return it->second;
    }
    double real(const std::string& name, double fallback) const {
        auto it = reals_.find(name);
        return it == reals_.end() ? fallback : it->second;
    }
    /// A scalar option (scalar_option) converted to T: an imaginary part for a real T, or a finite
    /// part beyond T's range, is an error (not dropped, not infinity).
    template <class T>
    T scalar(const std::string& name, double fallback) const {
        auto it = scalars_.find(name);
        const tilestream::scalar v = it == scalars_.end() ? tilestream::scalar(fallback) : it->second;
        const std::string type(to_string(dtype_of<T>()));
        if (!is_complex_v<T> && v.imag() != 0)
            throw invalid_argument("--" + name + " " + *get(name) + " has an imaginary part, but " + type +
                                   " is real (use --dtype c32 or c64)");
        const double most = double(std::numeric_limits<real_type_t<T>>::max());
        for (double part : {v.real(), v.imag()})
            if (std::isfinite(part) && std::fabs(part) > most)
                throw invalid_argument("--" + name + " " + *get(name) + " is out of range for " + type);
        return scalar_as<T>(v);
    }
    /// For fronts that write outputs on their own (gemm and jacobi over MPI ranks): each given output
    /// resolves (detail::resolve_output's checks), and none names an input or another output (by
    /// device and inode, or resolved path; a character device such as /dev/null may take several),
    /// except that --out may name the input `out_may_update` (read before it is replaced). Throws
    /// invalid_argument naming both options. The one-process commands use run_files, which also
    /// writes and commits the outputs together.
    void check_output_paths(std::initializer_list<const char*> outputs, std::initializer_list<const char*> inputs = {},
                            const char* out_may_update = nullptr) const {
        struct named {
            std::string option;
            detail::file_identity id;
            bool input;
        };
        std::vector<named> seen;
        for (const char* n : inputs)
            if (auto p = get(n)) seen.push_back({n, detail::identify(*p), true});
        for (const char* n : outputs) {
            auto p = get(n);
            if (!p) continue;
            const detail::file_identity id = detail::identify(detail::resolve_output(*p));
            for (const auto& other : seen) {
                if (!id.same_file(other.id)) continue;
                if (other.input && out_may_update && std::string(n) == "out" && other.option == out_may_update) continue;
                if (!other.input && id.exists && S_ISCHR(id.mode)) continue;
                throw invalid_argument("--" + std::string(n) + " " + *p + " and --" + other.option + " " +
                                       *get(other.option) + " name the same file: " +
                                       (other.input ? "an output may not overwrite an input" : "each output needs its own"));
            }
            seen.push_back({n, id, false});
        }
    }
    const std::vector<std::string>& positional() const { return positional_; }

private:
    void add(const std::string& name, const std::string& help, const std::string& type,
             std::function<void(const std::string&)> store);

    std::string command_;
    std::unique_ptr<CLI::App> app_;  // CLI11 is compiled in cli_args.cpp alone (8 s a file at -O2)
    std::vector<std::string> known_;
    std::set<std::string> flags_, flag_names_;
    std::map<std::string, std::string> values_;
    std::map<std::string, index_t> integers_;
    std::map<std::string, double> reals_;
    std::map<std::string, tilestream::scalar> scalars_;
    std::vector<std::string> positional_;
};

/// The command's devices: --devices, else TILESTREAM_DEVICES (the drop-in's setting, shared), else
/// "auto" (every GPU present, else the CPU).
inline std::string devices_of(const args& a) {
    if (a.has("devices")) return a.get_or("devices", "auto");
    const char* env = std::getenv("TILESTREAM_DEVICES");
    if (!env || !*env) return "auto";
    try {
        (void)parse_device_spec(env);
    } catch (const invalid_argument& e) {
        throw invalid_argument(std::string("TILESTREAM_DEVICES (the default of --devices): ") + e.what());
    }
    return env;
}

/// --memory-budget and --cpu-threads, taken by every command that opens devices.
inline void declare_device_options(args& a) {
    a.text("memory-budget", "budget of each device without its own @budget, e.g. 512MiB", "BYTES")
        .integer_option("cpu-threads", "threads per CPU device (at most 4 x cores, at least 16)");
}

/// The devices' options from declare_device_options.
inline open_options device_options(const args& a) {
    open_options o;
    if (auto b = a.get("memory-budget")) o.memory_budget = parse_bytes(*b);
    o.cpu_threads = static_cast<int>(a.integer("cpu-threads", 0, 1, std::numeric_limits<int>::max()));
    return o;
}

/// Refuses, before any work, a budget above what a device has: the planner would count on memory
/// that is not there (--memory-budget 4PiB) and the run would fail at its first allocation.
inline void check_budgets(const std::vector<device*>& devices) {
    const std::size_t host = std::size_t(::sysconf(_SC_PHYS_PAGES)) * std::size_t(::sysconf(_SC_PAGESIZE));
    for (const device* d : devices) {
        const bool cpu = d->info().kind == device_kind::cpu;
        const std::size_t have = cpu ? host : d->info().memory_bytes;
        if (have > 0 && d->budget() > have)
            throw invalid_argument("the memory budget of " + d->id() + ", " + format_bytes(d->budget()) + " (" +
                                   std::to_string(d->budget()) + " bytes), is more than " +
                                   (cpu ? std::string("the host's memory (") : "its memory (") + format_bytes(have) +
                                   "); give a budget it can hold, e.g. --memory-budget " + format_bytes(have / 2));
    }
}

/// A failure while running (an output that could not be written, an input that changed), as
/// opposed to bad usage or bad input: the tool exits with 3.
class runtime_failure : public error {
public:
    using error::error;
};

/// Runs an output write or a check of the inputs after a run; its file_error (disk full, I/O
/// error, an input truncated meanwhile) becomes a runtime_failure: the paths themselves were
/// checked before the run.
template <class F>
void as_runtime_failure(F&& step) {
    try {
        step();
    } catch (const file_error& e) {
        throw runtime_failure(e.what());
    }
}

}  // namespace tilestream::cli
