// Byte sizes as users write them ("512MiB", "1.5GiB", "64KB", "4096"). A file of its own with no
// dependency beyond the standard library and the header-only error types: the BLAS drop-in, which
// does not link libtilestream, compiles it too.
#include <tilestream/error.hpp>
#include <tilestream/types.hpp>

#include <cctype>
#include <cmath>
#include <string>

namespace tilestream {

std::size_t parse_bytes(std::string_view text) {
    const std::string t(text);
    const auto bad = [&](const std::string& why) {
        return invalid_argument("bad byte size '" + t + "': " + why +
                                " (examples: 512MiB, 1.5GiB, 64KB, 4096)");
    };
    std::size_t pos = 0;
    while (pos < t.size() && (std::isdigit(static_cast<unsigned char>(t[pos])) || t[pos] == '.')) ++pos;
    if (pos == 0) throw bad("no number");
    double value = 0;
    try {
        std::size_t used = 0;
        value = std::stod(t.substr(0, pos), &used);
        if (used != pos) throw bad("malformed number");
    } catch (const std::logic_error&) {
        throw bad("malformed number");
    }
    std::string unit = t.substr(pos);
    for (char& ch : unit) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
    double scale = 1;
    if (unit.empty() || unit == "b") scale = 1;
    else if (unit == "k" || unit == "kib") scale = 1024.0;
    else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
    else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
    else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (unit == "p" || unit == "pib") scale = 1024.0 * 1024 * 1024 * 1024 * 1024;
    else if (unit == "e" || unit == "eib") scale = 1024.0 * 1024 * 1024 * 1024 * 1024 * 1024;
    else if (unit == "kb") scale = 1e3;
    else if (unit == "mb") scale = 1e6;
    else if (unit == "gb") scale = 1e9;
    else if (unit == "tb") scale = 1e12;
    else if (unit == "pb") scale = 1e15;
    else if (unit == "eb") scale = 1e18;
    else throw bad("unknown unit '" + unit + "'");
    const double bytes = value * scale;
    // Sizes are added and multiplied as 64-bit signed numbers elsewhere; 2^62 bytes (4 EiB) leaves
    // room for that and is beyond any memory.
    constexpr double max_bytes = 4611686018427387904.0;  // 2^62
    if (!std::isfinite(bytes) || bytes > max_bytes) throw bad("too large (at most 4 EiB)");
    return static_cast<std::size_t>(std::llround(bytes));
}

}  // namespace tilestream
