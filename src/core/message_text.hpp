// Text read from files (headers, JSON names) made safe for error messages: escaped and cut short.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace tilestream::detail {

/// The first `limit` bytes of `text` with bytes outside printable ASCII written as \xNN (so
/// terminal escape codes are shown, not obeyed), and "... (N bytes)" when it was cut.
inline std::string printable_text(std::string_view text, std::size_t limit = 80) {
    std::string r;
    const std::size_t shown = text.size() < limit ? text.size() : limit;
    for (std::size_t i = 0; i < shown; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x20 && c < 0x7f) {
            r += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            r += buf;
        }
    }
    if (shown < text.size()) r += "... (" + std::to_string(text.size()) + " bytes)";
    return r;
}

/// printable_text in single quotes.
inline std::string quote_text(std::string_view text, std::size_t limit = 80) {
    const std::string p = printable_text(text, limit);
    const auto cut = p.rfind("... (");
    return text.size() > limit ? "'" + p.substr(0, cut) + "'" + p.substr(cut) : "'" + p + "'";
}

}  // namespace tilestream::detail
