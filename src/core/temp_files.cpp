// Atomic output files: a registered temporary beside the target, renamed on commit, unlinked on
// failure and by the handler of terminating signals.
#include "core/temp_files.hpp"

#include <tilestream/error.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace tilestream::detail {

void (*temp_file_write_hook)(const std::string& temporary) = nullptr;

namespace {

// The handler may only read plain memory and call async-signal-safe functions (unlink, sigaction,
// raise), so the names live in a fixed table; `used` is set after the name is complete.
constexpr int max_temporaries = 64;
constexpr std::size_t max_path = 4096;
struct temporary_slot {
    std::atomic<bool> claimed{false};
    std::atomic<bool> used{false};
    char name[max_path];
};
temporary_slot slots[max_temporaries];

constexpr int terminating_signals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction previous_actions[3];
std::once_flag handlers_once;

void on_terminating_signal(int sig, siginfo_t* info, void* context) {
    for (auto& s : slots)
        if (s.used.load(std::memory_order_acquire)) ::unlink(s.name);
    for (int i = 0; i < 3; ++i) {
        if (terminating_signals[i] != sig) continue;
        const struct sigaction& prev = previous_actions[i];
        if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr) {
            prev.sa_sigaction(sig, info, context);
        } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
            prev.sa_handler(sig);
        } else {
            // Die of the same signal, as without us (the exit status says which signal it was).
            ::sigaction(sig, &prev, nullptr);
            ::raise(sig);
        }
    }
}

void install_handlers() {
    for (int i = 0; i < 3; ++i) {
        struct sigaction current {};
        ::sigaction(terminating_signals[i], nullptr, &current);
        previous_actions[i] = current;
        // An ignored signal (nohup) stays ignored.
        if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) continue;
        struct sigaction ours {};
        ours.sa_sigaction = on_terminating_signal;
        ours.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&ours.sa_mask);
        ::sigaction(terminating_signals[i], &ours, nullptr);
    }
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw file_error(path + ": " + what);
}

}  // namespace

int register_temporary(const std::string& path) {
    std::call_once(handlers_once, install_handlers);
    if (path.size() >= max_path) return -1;
    for (int i = 0; i < max_temporaries; ++i) {
        bool expected = false;
        if (!slots[i].claimed.compare_exchange_strong(expected, true)) continue;
        std::memcpy(slots[i].name, path.c_str(), path.size() + 1);
        slots[i].used.store(true, std::memory_order_release);
        return i;
    }
    return -1;
}

void unregister_temporary(int slot) {
    if (slot < 0 || slot >= max_temporaries) return;
    slots[slot].used.store(false, std::memory_order_release);
    slots[slot].claimed.store(false, std::memory_order_release);
}

temp_file::temp_file(const std::string& target) : target_(target) {
    static std::atomic<unsigned> counter{0};
    int err = 0;
    // O_EXCL with our own name rather than mkstemp: mkstemp creates the file 0600, while
    // mode 0666 lets the umask give the result the permissions of any other new file.
    for (int attempt = 0; attempt < 100; ++attempt) {
        name_ = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
        // Registered before it exists, so that no signal can fall between creation and registration.
        slot_ = register_temporary(name_);
        fd_ = ::open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd_ >= 0) return;
        err = errno;
        unregister_temporary(std::exchange(slot_, -1));
        if (err != EEXIST) break;
    }
    fail(target_, "cannot create temporary file '" + name_ + "': " + std::strerror(err));
}

temp_file::~temp_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(name_.c_str());
    unregister_temporary(slot_);
}

void temp_file::write(const void* data, std::size_t n) {
    if (temp_file_write_hook) temp_file_write_hook(name_);
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            const int err = errno;
            if (err == EINTR) continue;
            fail(target_, "cannot write '" + name_ + "': " + std::strerror(err));
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

void temp_file::reserve(std::size_t bytes) {
    if (bytes == 0) return;
    // posix_fallocate returns the error (it does not set errno); glibc writes zeros on
    // filesystems without fallocate.
    const int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
    if (err != 0) fail(target_, "cannot write '" + name_ + "' (" + std::to_string(bytes) + " bytes): " + std::strerror(err));
}

void temp_file::commit() {
    // fsync before rename, so that after a crash the target holds the old or the new
    // contents, never a renamed but empty file. Filesystems without fsync return EINVAL.
    if (::fsync(fd_) != 0) {
        const int err = errno;
        if (err != EINVAL && err != EROFS) fail(target_, "cannot flush '" + name_ + "': " + std::strerror(err));
    }
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
        const int err = errno;
        fail(target_, "cannot close '" + name_ + "': " + std::strerror(err));
    }
    if (::rename(name_.c_str(), target_.c_str()) != 0) {
        const int err = errno;
        fail(target_, "cannot rename '" + name_ + "' into place: " + std::strerror(err));
    }
    committed_ = true;
}

}  // namespace tilestream::detail
