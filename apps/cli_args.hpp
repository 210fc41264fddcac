// Minimal command-line option parsing for the tilestream tool: --name value, --name=value, --flag.
#pragma once

#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/types.hpp>

#include <charconv>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tilestream::cli {

class args {
public:
    /// `valued` lists options that take a value, `flags` those that do not.
    args(int argc, char** argv, int first, std::set<std::string> valued, std::set<std::string> flags)
        : valued_(std::move(valued)), flags_(std::move(flags)) {
        for (int i = first; i < argc; ++i) {
            std::string a = argv[i];
            if (a.rfind("--", 0) != 0) {
                positional_.push_back(a);
                continue;
            }
            std::string name = a.substr(2), value;
            bool has_value = false;
            if (const auto eq = name.find('='); eq != std::string::npos) {
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
                has_value = true;
            }
            if (flags_.count(name)) {
                if (has_value) throw invalid_argument("option --" + name + " takes no value");
                set_flags_.insert(name);
            } else if (valued_.count(name)) {
                if (!has_value) {
                    if (i + 1 >= argc) throw invalid_argument("option --" + name + " needs a value");
                    value = argv[++i];
                }
                values_[name] = value;
            } else {
                throw invalid_argument("unknown option --" + name);
            }
        }
    }

    bool flag(const std::string& name) const { return set_flags_.count(name) > 0; }
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
        auto v = get(name);
        if (!v) return fallback;
        index_t r = 0;
        auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), r);
        if (ec == std::errc::result_out_of_range)
            throw size_overflow("--" + name + " " + *v + " does not fit in 64 bits");
        if (ec != std::errc() || p != v->data() + v->size())
            throw invalid_argument("--" + name + " expects an integer, got '" + *v + "'");
        if (r < lo || r > hi)
            throw invalid_argument("--" + name + " must be in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], got " + *v);
        return r;
    }
    double real(const std::string& name, double fallback) const {
        auto v = get(name);
        if (!v) return fallback;
        try {
            std::size_t used = 0;
            double r = std::stod(*v, &used);
            if (used != v->size()) throw std::invalid_argument("");
            return r;
        } catch (const std::exception&) {
            throw invalid_argument("--" + name + " expects a number, got '" + *v + "'");
        }
    }
    /// A real option converted to T; a finite value beyond T's range is an error, not infinity.
    template <class T>
    T scalar(const std::string& name, double fallback) const {
        const double v = real(name, fallback);
        if (std::isfinite(v) && std::fabs(v) > double(std::numeric_limits<T>::max()))
            throw invalid_argument("--" + name + " " + *get(name) + " is out of range for " +
                                   std::string(to_string(dtype_of<T>())));
        return static_cast<T>(v);
    }
    /// Checks, before any work, that each of these options that is given names a writable file.
    void check_output_paths(std::initializer_list<const char*> names) const {
        for (const char* n : names)
            if (auto p = get(n)) check_output_path(*p);
    }
    const std::vector<std::string>& positional() const { return positional_; }

private:
    std::set<std::string> valued_, flags_, set_flags_;
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
};

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
