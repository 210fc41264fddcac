// Output files written as `cp` writes them, and never half: what an output path names (symlinks
// followed, devices and FIFOs written in place), files compared by identity, temporaries beside the
// target that every catchable terminating signal removes, and several outputs renamed into place
// together (all new, or none). Used by the .npy, PNG, trace and SVG writers and by the CLI; the MPI
// front can use the same pieces (resolve_output, identities, register_temporary, commit_together).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace tilestream::detail {

// ---- temporaries removed by terminating signals ----

/// Registers `path` (a temporary being written) so that a terminating signal unlinks it before the
/// process dies; the first call installs the handlers (see cleanup_signals). Only the process that
/// registered a path removes it (a forked child dying of a signal leaves its parent's files alone).
/// Returns a slot for unregister_temporary, or -1 when the table is full or the path too long
/// (then unprotected).
int register_temporary(const std::string& path);
/// Forgets the slot (after the temporary was renamed or removed); -1 is ignored.
void unregister_temporary(int slot);
/// The signals whose handler removes the registered temporaries and then ends the process as the
/// signal would have (shell status 128 + signal): SIGINT, SIGTERM and SIGHUP (a handler installed
/// before ours is called after the removal), and every other signal whose default action ends the
/// process and that is neither a fault of the program (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP,
/// SIGSYS) nor already handled or ignored when the first temporary is registered: SIGQUIT, SIGPIPE,
/// SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT,
/// SIGABRT and the real-time signals.
std::vector<int> cleanup_signals();

// ---- what an output path names ----

/// How an output reaches its file.
enum class output_kind {
    create,   ///< nothing there yet: a temporary beside it, renamed into place
    replace,  ///< an existing regular file: a temporary with its mode and owner, renamed over it
    in_place  ///< a character or block device, a FIFO, or a file reached through /proc/self/fd (such
              ///< as /dev/stdout): opened and written where it is, as cp does
};

/// An output path resolved before any work.
struct output_target {
    std::string given;  ///< as named by the caller (shown in messages)
    std::string path;   ///< where the bytes go: `given` with its symbolic links followed (the links stay)
    output_kind kind = output_kind::create;
    struct stat st {};  ///< of `path` when it exists (replace, in_place)
};

/// Resolves an output path: follows symbolic links (a dangling link gets its target created), and
/// checks what can be checked without writing: the name and its temporary fit the file system's
/// name limits, the directory exists and may be written (for create and replace), a device or FIFO
/// may be opened for writing, and the path is not a directory. Creates nothing. Throws file_error
/// naming `given` and the reason.
output_target resolve_output(const std::string& given);

/// Which file a path names, for "the same file" checks: (device, inode) when it exists, else the
/// absolute path with the symbolic links of its existing part followed.
struct file_identity {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    mode_t mode = 0;   ///< file type bits when it exists
    std::string path;  ///< resolved path when it does not exist
    bool same_file(const file_identity& o) const;
};
/// The identity of an input (or any existing path); a path that does not exist gets its resolved name.
file_identity identify(const std::string& path);
file_identity identify(const output_target& t);
/// The identity of an open descriptor (standard output, for instance).
file_identity identify_descriptor(int fd);

// ---- writing an output ----

/// One output being written: a temporary beside the target (registered above; removed unless
/// renamed into place), or, for in_place targets, the device or FIFO itself, opened for writing (a
/// FIFO waits for a reader, as with cp). Every write, flush and close is checked and throws
/// file_error naming the target.
class output_file {
public:
    explicit output_file(const output_target& target);
    /// resolve_output(path) first.
    explicit output_file(const std::string& path);
    output_file(const output_file&) = delete;
    output_file& operator=(const output_file&) = delete;
    ~output_file();

    const output_target& target() const { return target_; }
    bool in_place() const { return target_.kind == output_kind::in_place; }
    /// The temporary being written (for in_place targets: the path opened).
    const std::string& name() const { return name_; }
    /// The open descriptor (read-write for temporaries, for mapping them); -1 after close().
    int fd() const { return fd_; }
    /// Allocates `bytes` on disk now (posix_fallocate), so that a full disk or a file size limit is
    /// an error here rather than a failed write (or a SIGBUS in a mapping) later; nothing for
    /// in_place targets. Throws file_error.
    void reserve(std::size_t bytes);
    /// Writes all n bytes (retrying short writes and EINTR); throws file_error.
    void write(const void* data, std::size_t n);
    /// The data is complete: gives a replaced file's mode and owner to the temporary (the owner
    /// where the process may set it), fsyncs and closes it; closes a device or FIFO. Throws
    /// file_error. Called by commit() when not called before.
    void close();
    /// close(), then renames the temporary over the target. Throws file_error (the temporary is
    /// then removed). For several outputs that must all be new or none, use commit_together.
    void commit();

private:
    friend void commit_together(const std::vector<output_file*>& files);
    /// " 'temporary name'" for messages, or "" when the target itself is written.
    std::string written() const;
    output_target target_;
    std::string name_;
    int fd_ = -1;
    int slot_ = -1;
    bool closed_ = false;
    bool committed_ = false;
};

/// Commits several outputs at once: closes each, then renames every temporary into place with the
/// terminating signals held off, so a signal sees all of them new or none; when a rename fails the
/// files already replaced get their previous contents back (kept as hard links until the end) and
/// the new ones are removed, then file_error is thrown. In-place outputs were written already and
/// are only closed.
void commit_together(const std::vector<output_file*>& files);

/// Test hook: called by output_file::write before each write (empty in normal runs).
extern void (*output_file_write_hook)(const std::string& temporary);

}  // namespace tilestream::detail
