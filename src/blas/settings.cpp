// Settings of the BLAS drop-in, read once per process from a `key = value` file and the environment.
#include "settings.hpp"

#include <tilestream/types.hpp>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <string_view>

namespace tilestream::blas {

namespace {

constexpr const char* keys[] = {"TILESTREAM_DEVICES", "TILESTREAM_MEMORY_BUDGET", "TILESTREAM_BLAS_THRESHOLD",
                                "TILESTREAM_BLAS_LOG", "TILESTREAM_BLAS_LIB"};

std::string_view trim(std::string_view s) {
    const auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return {};
    return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

std::optional<std::uint64_t> parse_count(std::string_view s) {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return v;
}

// "16777216" or "256^3" (a cube, the usual way to think of the threshold).
std::optional<std::uint64_t> parse_threshold(std::string_view s) {
    if (s.size() > 2 && s.substr(s.size() - 2) == "^3") {
        const auto side = parse_count(s.substr(0, s.size() - 2));
        if (!side || *side > 2642245) return std::nullopt;  // 2642245^3 < 2^64
        return *side * *side * *side;
    }
    return parse_count(s);
}

void apply(settings& s, std::string_view key, std::string_view value, const std::string& where) {
    if (key == "TILESTREAM_DEVICES") {
        if (value.empty()) s.problems.push_back(where + ": TILESTREAM_DEVICES is empty (kept 'all')");
        else s.devices = value;
    } else if (key == "TILESTREAM_MEMORY_BUDGET") {
        try {
            s.memory_budget = parse_bytes(value);
        } catch (const std::exception& e) {
            s.problems.push_back(where + ": TILESTREAM_MEMORY_BUDGET: " + e.what() + " (ignored)");
        }
    } else if (key == "TILESTREAM_BLAS_THRESHOLD") {
        if (const auto t = parse_threshold(value)) s.threshold = *t;
        else
            s.problems.push_back(where + ": TILESTREAM_BLAS_THRESHOLD '" + std::string(value) +
                                 "' is not a count like 16777216 or 256^3 (kept " +
                                 std::to_string(s.threshold) + ")");
    } else if (key == "TILESTREAM_BLAS_LOG") {
        s.log_path = value;
    } else if (key == "TILESTREAM_BLAS_LIB") {
        s.system_blas = value;
    } else {
        s.problems.push_back(where + ": unknown key '" + std::string(key) +
                             "' (known: TILESTREAM_DEVICES, TILESTREAM_MEMORY_BUDGET, TILESTREAM_BLAS_THRESHOLD, "
                             "TILESTREAM_BLAS_LOG, TILESTREAM_BLAS_LIB)");
    }
}

void read_file(settings& s, const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        s.problems.push_back("TILESTREAM_BLAS_CONFIG: cannot read '" + path + "' (ignored)");
        return;
    }
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
        std::string_view l = trim(line);
        if (l.empty() || l.front() == '#') continue;
        const std::string where = path + ":" + std::to_string(number);
        const auto eq = l.find('=');
        if (eq == std::string_view::npos) {
            s.problems.push_back(where + ": expected 'key = value', got '" + std::string(l) + "'");
            continue;
        }
        apply(s, trim(l.substr(0, eq)), trim(l.substr(eq + 1)), where);
    }
}

}  // namespace

settings read_settings() {
    settings s;
    if (const char* path = std::getenv("TILESTREAM_BLAS_CONFIG"); path && *path) read_file(s, path);
    for (const char* key : keys)
        if (const char* value = std::getenv(key)) apply(s, key, trim(value), "environment");
    return s;
}

}  // namespace tilestream::blas
