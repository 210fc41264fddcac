// Temporary output files removed when SIGINT, SIGTERM or SIGHUP ends the process mid-write.
#pragma once

#include <cstddef>
#include <string>

namespace tilestream::detail {

/// Registers `path` (a temporary being written) so that a terminating signal unlinks it before
/// the process dies; the first call installs the handlers (only for signals that are not
/// ignored; a previous handler is called after the unlinking). Returns a slot for
/// unregister_temporary, or -1 when the table is full or the path too long (then unprotected).
int register_temporary(const std::string& path);
/// Forgets the slot (after the temporary was renamed or removed); -1 is ignored.
void unregister_temporary(int slot);

/// Creates a temporary file beside `target` (target.tmp.PID.N, O_EXCL, mode 0666 before the
/// umask), registered as above, and removed unless committed. Throws file_error naming target.
class temp_file {
public:
    explicit temp_file(const std::string& target);
    temp_file(const temp_file&) = delete;
    temp_file& operator=(const temp_file&) = delete;
    ~temp_file();

    const std::string& name() const { return name_; }
    /// The open descriptor (read-write), for mapping the temporary; -1 after commit.
    int fd() const { return fd_; }
    /// Allocates `bytes` on disk now (posix_fallocate), so that a full disk or a file size limit
    /// is an error here rather than a failed write (or a SIGBUS in a mapping) later; throws file_error.
    void reserve(std::size_t bytes);
    /// Writes all n bytes (retrying short writes and EINTR); throws file_error.
    void write(const void* data, std::size_t n);
    /// fsync, close and rename over the target; throws file_error (the temporary is then removed).
    void commit();

private:
    std::string target_;
    std::string name_;
    int fd_ = -1;
    int slot_ = -1;
    bool committed_ = false;
};

/// Test hook: called by temp_file::write before each write (empty in normal runs).
extern void (*temp_file_write_hook)(const std::string& temporary);

}  // namespace tilestream::detail
