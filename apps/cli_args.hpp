// Minimal command-line option parsing for the tilestream tool: --name value, --name=value, --flag.
#pragma once

#include <tilestream/error.hpp>
#include <tilestream/types.hpp>

#include <charconv>
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
    const std::vector<std::string>& positional() const { return positional_; }

private:
    std::set<std::string> valued_, flags_, set_flags_;
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
};

}  // namespace tilestream::cli
