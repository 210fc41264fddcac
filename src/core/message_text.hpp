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

/// `text` with every byte that could steer a terminal written as \xNN: control characters other
/// than newline and tab (the escape character starting colour and cursor sequences), DEL, the C1
/// controls (U+0080..U+009F) and bytes that are not UTF-8. Printable UTF-8 (a file name in any
/// language) stays as it is. For whole messages printed to a terminal.
inline std::string terminal_safe(std::string_view text) {
    std::string r;
    r.reserve(text.size());
    const auto escape = [&r](unsigned char c) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        r += buf;
    };
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
            if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t') r += static_cast<char>(c);
            else escape(c);
            ++i;
            continue;
        }
        // A UTF-8 sequence: its length from the lead byte, continuation bytes 10xxxxxx.
        const std::size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        bool valid = len > 0 && i + len <= text.size();
        for (std::size_t k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
        const bool c1 = len == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0;
        if (!valid || c1) {
            escape(c);
            ++i;
            continue;
        }
        r.append(text.substr(i, len));
        i += len;
    }
    return r;
}

/// printable_text in single quotes.
inline std::string quote_text(std::string_view text, std::size_t limit = 80) {
    const std::string p = printable_text(text, limit);
    const auto cut = p.rfind("... (");
    return text.size() > limit ? "'" + p.substr(0, cut) + "'" + p.substr(cut) : "'" + p + "'";
}

}  // namespace tilestream::detail
