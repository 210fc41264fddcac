// Fuzzer inputs as files: readers that take a path get the bytes through an in-memory file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace tilestream::fuzz {

/// An anonymous in-memory file holding the bytes, reachable as /proc/self/fd/N; closed on scope exit.
class memory_file {
public:
    memory_file(const std::uint8_t* data, std::size_t size) : fd_(::memfd_create("tilestream-fuzz", MFD_CLOEXEC)) {
        std::size_t done = 0;
        while (fd_ >= 0 && done < size) {
            const ssize_t w = ::write(fd_, data + done, size - done);
            if (w <= 0) break;
            done += std::size_t(w);
        }
    }
    memory_file(const memory_file&) = delete;
    memory_file& operator=(const memory_file&) = delete;
    ~memory_file() {
        if (fd_ >= 0) ::close(fd_);
    }
    bool ok() const { return fd_ >= 0; }
    std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

private:
    int fd_;
};

}  // namespace tilestream::fuzz
