// Whole-file reads with a cap, for files read into memory (traces).
#include "core/input_files.hpp"

#include <tilestream/error.hpp>
#include <tilestream/types.hpp>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tilestream::detail {

std::string read_file_capped(const std::string& path, std::size_t limit, const std::string& what) {
    const auto fail = [&](const std::string& why) -> file_error { return file_error(path + ": " + why); };
    // O_NONBLOCK: opening a FIFO without a writer must not wait; it is cleared before reading.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw fail(std::string("cannot open: ") + std::strerror(errno));
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } close_it{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw fail(std::string("cannot stat: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) throw fail(std::string("cannot read: ") + std::strerror(EISDIR));
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
        throw fail(std::string("cannot read: it is a ") +
                   (S_ISCHR(st.st_mode) ? "character device" : S_ISBLK(st.st_mode) ? "block device" : "socket") +
                   ", not a regular file or pipe holding " + what);
    const auto too_large = [&](const std::string& size) {
        return fail(size + ": larger than the " + format_bytes(limit) + " tilestream reads as " + what);
    };
    if (S_ISREG(st.st_mode) && std::size_t(st.st_size) > limit)
        throw too_large(format_bytes(std::size_t(st.st_size)) + " (" + std::to_string(st.st_size) + " bytes)");
    if (S_ISFIFO(st.st_mode)) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    // Files in /proc and /sys say size 0 and pipes have none: read until the end, up to the cap.
    std::string text;
    text.resize(S_ISREG(st.st_mode) && st.st_size > 0 ? std::size_t(st.st_size) + 1 : std::size_t{1} << 16);
    std::size_t used = 0;
    for (;;) {
        if (used == text.size()) {
            if (used > limit) throw too_large("more than " + format_bytes(limit));
            text.resize(std::min(limit + 1, 2 * text.size()));
        }
        const ssize_t n = ::read(fd, text.data() + used, text.size() - used);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw fail(std::string("cannot read: ") + std::strerror(errno));
        }
        if (n == 0) break;
        used += std::size_t(n);
        if (used > limit) throw too_large("more than " + format_bytes(limit));
    }
    text.resize(used);
    return text;
}

}  // namespace tilestream::detail
