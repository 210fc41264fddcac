// Output files: resolved like cp resolves them, written to registered temporaries (or in place for
// devices and FIFOs), renamed into place together; a handler of the terminating signals removes
// the temporaries.
#include "core/output_files.hpp"

#include <tilestream/error.hpp>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <utility>

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tilestream::detail {

void (*output_file_write_hook)(const std::string& temporary) = nullptr;

namespace {

// ---- the signal handler's table ----
// The handler may only read plain memory and call async-signal-safe functions (unlink, sigaction,
// raise, nanosleep, getpid), so the names live in a fixed table; `used` is set after the name is
// complete.
constexpr int max_temporaries = 64;
constexpr std::size_t max_path = 4096;
struct temporary_slot {
    std::atomic<bool> claimed{false};
    std::atomic<bool> used{false};
    pid_t owner = 0;
    char name[max_path];
};
temporary_slot slots[max_temporaries];

// The thread renaming outputs into place (commit_together), 0 when none: a handler running on
// another thread waits for it, so that the outputs are all new or all old when the process ends.
std::atomic<pid_t> committing_thread{0};

struct handled_signal {
    int sig = 0;
    struct sigaction previous {};
};
constexpr int max_handled = 64;
handled_signal handled[max_handled];
std::atomic<int> handled_count{0};
std::once_flag handlers_once;

pid_t this_thread_id() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

bool chains_previous(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

void on_terminating_signal(int sig, siginfo_t* info, void* context) {
    const int saved_errno = errno;
    const pid_t self = this_thread_id();
    for (int waited = 0; waited < 5000; ++waited) {  // at most ~5 s: renames take microseconds
        const pid_t t = committing_thread.load(std::memory_order_acquire);
        if (t == 0 || t == self) break;
        const timespec ms{0, 1000000};
        ::nanosleep(&ms, nullptr);
    }
    const pid_t pid = ::getpid();
    for (auto& s : slots)
        if (s.used.load(std::memory_order_acquire) && s.owner == pid) ::unlink(s.name);
    const int n = handled_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
        if (handled[i].sig != sig) continue;
        const struct sigaction& prev = handled[i].previous;
        if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr) {
            prev.sa_sigaction(sig, info, context);
        } else if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
            prev.sa_handler(sig);
        } else {
            // Die of the same signal, as without us (the exit status says which signal it was):
            // the signal is blocked while its handler runs, so it is delivered on return.
            ::sigaction(sig, &prev, nullptr);
            ::raise(sig);
        }
    }
    errno = saved_errno;
}

void install_handlers() {
    for (int sig : cleanup_signals()) {
        struct sigaction current {};
        if (::sigaction(sig, nullptr, &current) != 0) continue;
        const bool ignored = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN;
        const bool default_action = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
        // An ignored signal (nohup) stays ignored; a signal another part of the program handles
        // keeps its meaning, except the three that ask a program to stop, whose handler is
        // called after the temporaries are removed.
        if (ignored || (!default_action && !chains_previous(sig))) continue;
        const int i = handled_count.load(std::memory_order_relaxed);
        if (i >= max_handled) break;
        handled[i].sig = sig;
        handled[i].previous = current;
        handled_count.store(i + 1, std::memory_order_release);
        struct sigaction ours {};
        ours.sa_sigaction = on_terminating_signal;
        ours.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&ours.sa_mask);
        ::sigaction(sig, &ours, nullptr);
    }
}

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw file_error(path + ": " + what); }

std::string errno_text(int err) { return std::strerror(err); }

std::string dir_of(const std::string& p) {
    const auto slash = p.find_last_of('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}
std::string base_of(const std::string& p) {
    const auto slash = p.find_last_of('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
}
std::string join(const std::string& dir, const std::string& base) { return dir == "/" ? "/" + base : dir + "/" + base; }

/// realpath of a directory, or the errno.
std::pair<std::string, int> real_directory(const std::string& dir) {
    char* r = ::realpath(dir.c_str(), nullptr);
    if (r == nullptr) return {std::string(), errno};
    std::string s(r);
    std::free(r);
    return {s, 0};
}

/// Longest file name the file system of `dir` takes.
long name_max(const std::string& dir) {
    errno = 0;
    const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
    return n > 0 ? n : 255;
}

/// A free name for a temporary or backup beside `path`: path.<what>.PID.N, or, when that would
/// not fit the file system's name limit, .tilestream.<what>.PID.N in the same directory.
std::string sibling_name(const std::string& path, const char* what) {
    static std::atomic<unsigned> counter{0};
    const std::string suffix =
        std::string(".") + what + "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    const std::string dir = dir_of(path), base = base_of(path);
    if (long(base.size() + suffix.size()) <= name_max(dir)) return path + suffix;
    return join(dir, ".tilestream" + suffix);
}

sigset_t cleanup_set() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : cleanup_signals()) sigaddset(&set, s);
    return set;
}

}  // namespace

std::vector<int> cleanup_signals() {
    std::vector<int> s = {SIGHUP,  SIGINT,    SIGQUIT,   SIGPIPE, SIGALRM, SIGTERM, SIGUSR1, SIGUSR2,
                          SIGXCPU, SIGXFSZ,   SIGVTALRM, SIGPROF, SIGIO,   SIGABRT};
#ifdef SIGPWR
    s.push_back(SIGPWR);
#endif
#ifdef SIGSTKFLT
    s.push_back(SIGSTKFLT);
#endif
    for (int r = SIGRTMIN; r <= SIGRTMAX; ++r) s.push_back(r);
    return s;
}

int register_temporary(const std::string& path) {
    std::call_once(handlers_once, install_handlers);
    if (path.size() >= max_path) return -1;
    for (int i = 0; i < max_temporaries; ++i) {
        bool expected = false;
        if (!slots[i].claimed.compare_exchange_strong(expected, true)) continue;
        std::memcpy(slots[i].name, path.c_str(), path.size() + 1);
        slots[i].owner = ::getpid();
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

// ---- resolving ----

output_target resolve_output(const std::string& given) {
    if (given.empty()) throw file_error("output file: empty file name");
    output_target t;
    t.given = given;
    std::string p = given;
    bool through_proc = false;
    for (int hops = 0;; ++hops) {
        const std::string dir = dir_of(p), base = base_of(p);
        if (base.empty() || base == "." || base == "..") fail(given, "cannot write: it is a directory");
        const auto [real_dir, err] = real_directory(dir);
        if (!real_dir.empty()) {
            struct stat ds {};
            if (::stat(real_dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode))
                fail(given, "cannot write: '" + dir + "' is not a directory");
        } else if (err == ENOTDIR) {
            fail(given, "cannot write: '" + dir + "' is not a directory");
        } else {
            fail(given, "cannot write: directory '" + dir + "': " + errno_text(err));
        }
        p = join(real_dir, base);
        // /dev/stdout -> /proc/self/fd/1: a link in /proc names an open file (a pipe, a
        // terminal, a file), not a path; it is written where it leads.
        if (real_dir == "/proc" || real_dir.rfind("/proc/", 0) == 0) {
            through_proc = true;
            break;
        }
        struct stat ls {};
        if (::lstat(p.c_str(), &ls) != 0) {
            const int e = errno;
            if (e == ENOENT) break;
            fail(given, "cannot write: " + errno_text(e));
        }
        if (!S_ISLNK(ls.st_mode)) break;
        if (hops >= 40) fail(given, "cannot write: " + errno_text(ELOOP));
        std::string link(PATH_MAX, '\0');
        const ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
        if (n < 0) fail(given, "cannot read the symbolic link '" + p + "': " + errno_text(errno));
        link.resize(std::size_t(n));
        if (link.empty()) fail(given, "cannot write: the symbolic link '" + p + "' is empty");
        p = link.front() == '/' ? link : join(real_dir, link);
    }
    t.path = p;
    const std::string dir = dir_of(p), base = base_of(p);
    if (through_proc) {
        if (::stat(p.c_str(), &t.st) != 0) fail(given, "cannot write: " + errno_text(errno));
        if (S_ISDIR(t.st.st_mode)) fail(given, "cannot write: it is a directory");
        t.kind = output_kind::in_place;
    } else if (::stat(p.c_str(), &t.st) == 0) {
        if (S_ISDIR(t.st.st_mode)) fail(given, "cannot write: it is a directory");
        if (S_ISSOCK(t.st.st_mode)) fail(given, "cannot write: it is a socket");
        t.kind = S_ISREG(t.st.st_mode) ? output_kind::replace : output_kind::in_place;
    } else {
        const int e = errno;
        if (e != ENOENT) fail(given, "cannot write: " + errno_text(e));
        t.kind = output_kind::create;
        t.st = {};
        if (long(base.size()) > name_max(dir)) fail(given, "cannot write: " + errno_text(ENAMETOOLONG));
    }
    if (t.kind == output_kind::in_place) {
        if (::access(p.c_str(), W_OK) != 0) fail(given, "cannot write: " + errno_text(errno));
        return t;
    }
    // The file is written as a temporary beside it and renamed, so the directory must be writable.
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        const int e = errno;
        fail(given, "cannot write in directory '" + dir + "': " + errno_text(e));
    }
    if (t.kind == output_kind::replace) {
        // In a sticky directory (/tmp) only the owner of a file, of the directory, or root may
        // replace it: rename would fail after the work.
        struct stat ds {};
        const uid_t me = ::geteuid();
        if (::stat(dir.c_str(), &ds) == 0 && (ds.st_mode & S_ISVTX) && me != 0 && t.st.st_uid != me && ds.st_uid != me)
            fail(given, "cannot replace it: it belongs to another user in a directory where only a file's owner may "
                        "replace it (sticky bit)");
    }
    return t;
}

// ---- identities ----

bool file_identity::same_file(const file_identity& o) const {
    if (exists != o.exists) return false;
    return exists ? dev == o.dev && ino == o.ino : path == o.path;
}

namespace {
file_identity identity_of_stat(const struct stat& st) {
    file_identity id;
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    id.mode = st.st_mode & S_IFMT;
    return id;
}
}  // namespace

file_identity identify(const std::string& path) {
    struct stat st {};
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) return identity_of_stat(st);
    file_identity id;
    const auto [real_dir, err] = real_directory(dir_of(path));
    id.path = err ? path : join(real_dir, base_of(path));
    return id;
}

file_identity identify(const output_target& t) {
    if (t.kind != output_kind::create) return identity_of_stat(t.st);
    file_identity id;
    id.path = t.path;
    return id;
}

file_identity identify_descriptor(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return {};
    return identity_of_stat(st);
}

// ---- writing ----

output_file::output_file(const std::string& path) : output_file(resolve_output(path)) {}

output_file::output_file(const output_target& target) : target_(target) {
    if (in_place()) {
        // A FIFO waits here for a reader, as with cp; a signal still ends the process.
        name_ = target_.path;
        const int flags = O_WRONLY | O_CLOEXEC | (S_ISREG(target_.st.st_mode) ? O_TRUNC : 0);
        do fd_ = ::open(name_.c_str(), flags);
        while (fd_ < 0 && errno == EINTR);
        if (fd_ < 0) fail(target_.given, "cannot open for writing: " + errno_text(errno));
        return;
    }
    int err = 0;
    // O_EXCL with our own name rather than mkstemp: mkstemp creates the file 0600, while mode
    // 0666 lets the umask give a new file the permissions of any other new file. A file that
    // replaces another starts private and gets that file's mode at close().
    for (int attempt = 0; attempt < 100; ++attempt) {
        name_ = sibling_name(target_.path, "tmp");
        // Registered before it exists, so that no signal can fall between creation and registration.
        slot_ = register_temporary(name_);
        fd_ = ::open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                     target_.kind == output_kind::replace ? 0600 : 0666);
        if (fd_ >= 0) return;
        err = errno;
        unregister_temporary(std::exchange(slot_, -1));
        if (err != EEXIST) break;
    }
    fail(target_.given, "cannot create temporary file '" + name_ + "': " + errno_text(err));
}

output_file::~output_file() {
    if (fd_ >= 0) ::close(fd_);
    if (!in_place() && !committed_) ::unlink(name_.c_str());
    unregister_temporary(slot_);
}

void output_file::write(const void* data, std::size_t n) {
    if (output_file_write_hook) output_file_write_hook(name_);
    if (fd_ < 0) fail(target_.given, "write after close");
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            const int err = errno;
            if (err == EINTR) continue;
            fail(target_.given, "cannot write" + written() + ": " + errno_text(err));
        }
        if (w == 0) fail(target_.given, "cannot write" + written() + ": the write made no progress");
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

std::string output_file::written() const { return in_place() ? std::string() : " '" + name_ + "'"; }

void output_file::reserve(std::size_t bytes) {
    if (bytes == 0 || in_place()) return;
    // posix_fallocate returns the error (it does not set errno); glibc writes zeros on
    // filesystems without fallocate.
    const int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
    if (err != 0)
        fail(target_.given, "cannot write '" + name_ + "' (" + std::to_string(bytes) + " bytes): " + errno_text(err));
}

void output_file::close() {
    if (closed_) return;
    if (target_.kind == output_kind::replace) {
        // Keep the replaced file's owner and group (where this process may set them: root, or a
        // group it belongs to), then its mode (chown clears set-user-ID bits, so mode last).
        struct stat now {};
        if (::fstat(fd_, &now) == 0 && (now.st_uid != target_.st.st_uid || now.st_gid != target_.st.st_gid)) {
            if (::fchown(fd_, target_.st.st_uid, target_.st.st_gid) != 0) (void)::fchown(fd_, uid_t(-1), target_.st.st_gid);
        }
        if (::fchmod(fd_, target_.st.st_mode & 07777) != 0)
            fail(target_.given, "cannot give '" + name_ + "' the mode of the file it replaces: " + errno_text(errno));
    }
    // fsync before rename, so that after a crash the target holds the old or the new contents,
    // never a renamed but empty file. File systems without fsync return EINVAL; devices and FIFOs
    // are not synced (cp does not either).
    if (!in_place() && ::fsync(fd_) != 0) {
        const int err = errno;
        if (err != EINVAL && err != EROFS) fail(target_.given, "cannot flush '" + name_ + "': " + errno_text(err));
    }
    closed_ = true;
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
        const int err = errno;
        if (err != EINTR) fail(target_.given, "cannot close" + written() + ": " + errno_text(err));
    }
}

void output_file::commit() { commit_together({this}); }

void commit_together(const std::vector<output_file*>& files) {
    for (output_file* f : files) f->close();
    std::vector<output_file*> renames;
    for (output_file* f : files)
        if (!f->in_place() && !f->committed_) renames.push_back(f);
    if (renames.empty()) return;

    // No terminating signal in this thread while the outputs change; a handler on another thread
    // waits until they all have (committing_thread).
    const sigset_t held = cleanup_set();
    sigset_t before;
    pthread_sigmask(SIG_BLOCK, &held, &before);
    committing_thread.store(this_thread_id(), std::memory_order_release);
    const auto done = [&] {
        committing_thread.store(0, std::memory_order_release);
        pthread_sigmask(SIG_SETMASK, &before, nullptr);
    };
    struct undo {
        std::string backup;  // a hard link to the replaced file, or empty
        bool created = false;
    };
    std::vector<undo> undos;
    for (std::size_t i = 0; i < renames.size(); ++i) {
        output_file& f = *renames[i];
        undo u;
        struct stat old {};
        const bool existed = ::lstat(f.target_.path.c_str(), &old) == 0;
        if (renames.size() > 1 && existed && S_ISREG(old.st_mode)) {
            u.backup = sibling_name(f.target_.path, "old");
            if (::link(f.target_.path.c_str(), u.backup.c_str()) != 0) u.backup.clear();
        }
        u.created = !existed;
        if (::rename(f.name_.c_str(), f.target_.path.c_str()) != 0) {
            const int err = errno;
            if (!u.backup.empty()) ::unlink(u.backup.c_str());
            for (std::size_t j = i; j-- > 0;) {
                const std::string& path = renames[j]->target_.path;
                if (!undos[j].backup.empty()) ::rename(undos[j].backup.c_str(), path.c_str());
                else if (undos[j].created) ::unlink(path.c_str());
            }
            done();
            fail(f.target_.given, "cannot rename '" + f.name_ + "' into place: " + errno_text(err) +
                                      (i > 0 ? " (the other outputs were left as they were)" : ""));
        }
        undos.push_back(std::move(u));
        f.committed_ = true;
        unregister_temporary(std::exchange(f.slot_, -1));
    }
    for (const undo& u : undos)
        if (!u.backup.empty()) ::unlink(u.backup.c_str());
    done();
}

}  // namespace tilestream::detail
