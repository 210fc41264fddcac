// JSON through nlohmann-json (Debian nlohmann-json3-dev), internal to the library, the tool and
// the benchmarks: no public header includes it, so programs using tilestream do not need it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace tilestream::detail {

/// Objects keep their keys in insertion order.
using json = nlohmann::ordered_json;

/// j on one line as `{"key": value, ...}` with ", " and ": " between items: the layout the tool
/// has always printed (scripts and tests find `"key": value` in it). Non-finite numbers are
/// null; bytes that are not UTF-8 are replaced rather than thrown on.
inline std::string json_line(const json& j) {
    const auto scalar = [](const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); };
    std::string r;
    if (j.is_object()) {
        r = "{";
        for (auto it = j.begin(); it != j.end(); ++it)
            r += (it == j.begin() ? "" : ", ") + scalar(json(it.key())) + ": " + json_line(it.value());
        return r + "}";
    }
    if (j.is_array()) {
        r = "[";
        for (auto it = j.begin(); it != j.end(); ++it) r += (it == j.begin() ? "" : ", ") + json_line(*it);
        return r + "]";
    }
    return scalar(j);
}

}  // namespace tilestream::detail
