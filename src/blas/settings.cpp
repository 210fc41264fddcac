// Settings of the BLAS drop-in, read once per process from a `key = value` file and the environment.
#include "settings.hpp"

#include <tilestream/types.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tilestream::blas {

namespace {

constexpr const char* keys[] = {"TILESTREAM_DEVICES", "TILESTREAM_MEMORY_BUDGET", "TILESTREAM_BLAS_THRESHOLD",
                                "TILESTREAM_BLAS_LOG", "TILESTREAM_BLAS_LIB", "TILESTREAM_LAPACK_LIB"};

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
        if (value.empty()) s.problems.push_back(where + ": TILESTREAM_DEVICES is empty (kept 'auto')");
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
    } else if (key == "TILESTREAM_LAPACK_LIB") {
        s.system_lapack = value;
    } else {
        s.problems.push_back(where + ": unknown key '" + std::string(key) +
                             "' (known: TILESTREAM_DEVICES, TILESTREAM_MEMORY_BUDGET, TILESTREAM_BLAS_THRESHOLD, "
                             "TILESTREAM_BLAS_LOG, TILESTREAM_BLAS_LIB, TILESTREAM_LAPACK_LIB)");
    }
}

// A settings file has a few lines: anything larger, or not a regular file (a FIFO would block the
// client, /dev/zero never ends), is refused with a message and the defaults stay.
constexpr std::size_t max_config_bytes = 64 * 1024;

void read_file(settings& s, const std::string& path) {
    auto refuse = [&](const std::string& why) {
        s.problems.push_back("TILESTREAM_BLAS_CONFIG '" + path + "' " + why + " (ignored)");
    };
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return refuse(std::string("cannot be read: ") + std::strerror(errno));
    struct stat st {};
    std::string text;
    const char* why = nullptr;
    if (::fstat(fd, &st) != 0) why = "cannot be examined (fstat failed)";
    else if (!S_ISREG(st.st_mode)) why = S_ISFIFO(st.st_mode) ? "is a FIFO, not a regular file"
                                        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "is a device, not a regular file"
                                                                                     : "is not a regular file";
    else if (std::uint64_t(st.st_size) > max_config_bytes) why = "is larger than 64 KiB, too large for a settings file";
    else {
        // The file may grow while read: at most one byte more than the limit is read.
        text.resize(max_config_bytes + 1);
        std::size_t got = 0;
        while (got < text.size()) {
            const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                why = "cannot be read";
                break;
            }
            if (n == 0) break;
            got += std::size_t(n);
        }
        if (!why && got > max_config_bytes) why = "is larger than 64 KiB, too large for a settings file";
        text.resize(got);
    }
    ::close(fd);
    if (why) return refuse(why);
    std::string_view rest = text;
    for (int number = 1; !rest.empty(); ++number) {
        const auto end = rest.find('\n');
        std::string_view l = trim(rest.substr(0, end));
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
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
