// A small ordered JSON object writer used for --json output, benchmarks and traces.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tilestream {

/// Escapes s as a JSON string literal (with quotes).
inline std::string json_quote(std::string_view s) {
    std::string r = "\"";
    for (unsigned char ch : s) {
        switch (ch) {
            case '"': r += "\\\""; break;
            case '\\': r += "\\\\"; break;
            case '\n': r += "\\n"; break;
            case '\t': r += "\\t"; break;
            case '\r': r += "\\r"; break;
            default:
                if (ch < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", ch);
                    r += buf;
                } else {
                    r += static_cast<char>(ch);
                }
        }
    }
    return r + "\"";
}

/// Builds {"key": value, ...} in insertion order. Non-finite numbers are written as null.
class json_object {
public:
    json_object& add(std::string_view key, std::string_view v) { return raw(key, json_quote(v)); }
    json_object& add(std::string_view key, const char* v) { return raw(key, json_quote(v)); }
    json_object& add(std::string_view key, const std::string& v) { return raw(key, json_quote(v)); }
    json_object& add(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
    template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
    json_object& add(std::string_view key, N v) {
        if constexpr (std::is_floating_point_v<N>) {
            if (!std::isfinite(static_cast<double>(v))) return raw(key, "null");
            char buf[40];
            std::snprintf(buf, sizeof buf, "%.10g", static_cast<double>(v));
            return raw(key, buf);
        } else {
            return raw(key, std::to_string(v));
        }
    }
    json_object& add(std::string_view key, const json_object& v) { return raw(key, v.str()); }
    /// Adds an already-serialised JSON value (an array, say).
    json_object& raw(std::string_view key, std::string value) {
        fields_.emplace_back(std::string(key), std::move(value));
        return *this;
    }
    std::string str() const {
        std::string r = "{";
        for (std::size_t i = 0; i < fields_.size(); ++i) {
            if (i) r += ", ";
            r += json_quote(fields_[i].first) + ": " + fields_[i].second;
        }
        return r + "}";
    }

private:
    std::vector<std::pair<std::string, std::string>> fields_;
};

/// Joins serialised JSON values into an array.
inline std::string json_array(const std::vector<std::string>& items) {
    std::string r = "[";
    for (std::size_t i = 0; i < items.size(); ++i) r += (i ? ", " : "") + items[i];
    return r + "]";
}

}  // namespace tilestream
