// NumPy .npy files: read (versions 1-3, <f4/<f8, C or Fortran order, memory-mapped, guarded
// against truncation) and write
// (atomically: a temporary file renamed into place).
#pragma once

#include <tilestream/batch.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/types.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tilestream {

namespace detail {
struct npy_mapping;
struct npy_output_state;
class output_file;
}

/// A 2-D array read from a .npy file. C order is row-major, Fortran order column-major.
/// A 1-D array of length n reads as n x 1. read_npy_stack also reads arrays of 3 or more
/// dimensions (C order), stacks of matrices: rows() and cols() are then the last two dimensions.
class npy_array {
public:
    dtype type() const { return type_; }
    index_t rows() const { return rows_; }
    index_t cols() const { return cols_; }
    tilestream::layout layout() const { return layout_; }
    /// Dimensions of the array in the file: 2, or 1 for a vector (read as a column); 3 or more
    /// for a stack (read_npy_stack).
    int ndim() const { return ndim_; }
    /// A stack's leading dimensions (all but the last two; empty for 1-D and 2-D arrays).
    const std::vector<index_t>& leading_shape() const { return lead_; }
    /// Matrices in the array: the product of the leading dimensions (1 for 1-D and 2-D arrays).
    index_t count() const;
    const void* data() const { return data_; }
    const std::string& path() const { return path_; }

    /// A typed view; throws invalid_argument when T does not match the file's dtype.
    template <class T>
    host_matrix_view<const T> view() const;
    /// The array as a stack: its matrices one after another (a 2-D array: a stack of one).
    template <class T>
    host_batch_view<const T> stack_view() const;

    /// Throws file_error when the file was truncated or rewritten since read_npy mapped it, so
    /// that results computed from it must not be trusted. A mapped file truncated under a reader
    /// would end the process with SIGBUS; tilestream catches that signal for its mappings,
    /// reads zeros instead, and reports it here. Call after a run, before using its results.
    void check_unchanged() const;

    /// Drops the file's pages from this process's resident memory; they stay in the page cache
    /// and come back on the next access. A run streaming a mapped file larger than memory calls
    /// it between tiles, so that peak resident memory stays near the device budgets and staging
    /// rather than the file's size. No effect on a copy (a misaligned file read into memory).
    void release_resident() const;

    npy_array() = default;
    npy_array(npy_array&&) noexcept = default;
    npy_array& operator=(npy_array&&) noexcept = default;
    ~npy_array() = default;

private:
    friend npy_array read_npy(const std::string& path);
    friend npy_array read_npy_stack(const std::string& path);
    std::shared_ptr<void> storage_;  // the mapping (or buffer) that owns data_
    std::shared_ptr<const detail::npy_mapping> mapping_;  // the file as mapped (null for a copy)
    const void* data_ = nullptr;
    dtype type_ = dtype::f32;
    index_t rows_ = 0, cols_ = 0;
    tilestream::layout layout_ = layout::row_major;
    int ndim_ = 2;
    std::vector<index_t> lead_;
    std::string path_;
};

/// A .npy file written in place through a shared memory mapping, for results larger than
/// memory: a temporary file beside `path` gets the header and the whole size on disk at once (a
/// full disk or a file size limit is a file_error here, never a SIGBUS later), the caller writes
/// the elements through view(), and commit() flushes and renames it into place. Destroyed
/// without commit (an error, a signal), it is removed. Rows x cols of `type`, C order for
/// row-major and Fortran order for column-major.
class npy_output {
public:
    npy_output(const std::string& path, dtype type, index_t rows, index_t cols, tilestream::layout layout);
    npy_output(npy_output&&) noexcept;
    npy_output& operator=(npy_output&&) noexcept;
    ~npy_output();

    /// The elements; throws invalid_argument when T is not the file's dtype.
    template <class T>
    host_matrix_view<T> view() const;
    /// Throws file_error when the temporary was truncated under the mapping (its pages then read
    /// and write memory that is not the file: tilestream catches the SIGBUS such an access would
    /// raise). Call between runs writing into view(); finish() and commit() check it too.
    void check_intact() const;
    /// As npy_array::release_resident; written pages are kept by the page cache until written back.
    void release_resident() const;
    /// Writes the data back, unmaps, fsyncs and renames over `path` (keeping the mode and owner of
    /// a file it replaces; a symbolic link is followed and kept); throws file_error, also when the
    /// temporary was truncated while mapped.
    void commit();
    /// All of commit() but the rename: for callers that rename several outputs together
    /// (detail::commit_together, src/core/output_files.hpp). The object is then only destroyed.
    detail::output_file& finish();

private:
    std::unique_ptr<detail::npy_output_state> s_;
};

/// Reads a .npy file (memory-mapped). Throws file_error naming the file and what is wrong.
npy_array read_npy(const std::string& path);
/// read_npy that also takes arrays of 3 or more dimensions in C order (stacks of matrices, as
/// numpy's matmul reads them); a Fortran-ordered stack is a file_error saying how to save it.
npy_array read_npy_stack(const std::string& path);

/// Checks, before any work, that an output file (.npy, trace, image) can be written at `path`:
/// its directory exists and is writable and `path` is not a directory, or it is a device or FIFO
/// that may be written (written in place); symbolic links are followed. Throws file_error naming
/// the path and the reason.
void check_output_path(const std::string& path);

/// Writes m as a .npy file (row-major -> C order, column-major -> Fortran order). Writes to a
/// temporary file beside `path` and renames it, so a failure leaves no partial file; a file it
/// replaces keeps its mode and owner, a symbolic link is followed and kept, and a device or FIFO
/// (/dev/null, /dev/stdout) is written in place, as cp does.
template <class T>
void write_npy(const std::string& path, host_matrix_view<const T> m);

/// Writes a stack of matrices as one .npy array of shape `lead` + (rows, cols) in C order (as
/// numpy's matmul returns stacks), atomically like write_npy; `lead`'s product must be s.count().
template <class T>
void write_npy_stack(const std::string& path, const std::vector<index_t>& lead, host_batch_view<const T> s);

}  // namespace tilestream
