// Host matrix views (non-owning, any layout and leading dimension) and an owning host matrix.
#pragma once

#include <tilestream/error.hpp>
#include <tilestream/types.hpp>

#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

namespace tilestream {

namespace detail {
[[noreturn]] void throw_bad_view(const std::string& what);
void check_view_shape(index_t rows, index_t cols, index_t ld, layout l, const char* where);
}  // namespace detail

/// A matrix in host memory that this view does not own. Element (i, j) lives at
/// data[i * ld + j] (row-major) or data[i + j * ld] (column-major).
template <class T>
class host_matrix_view {
public:
    using value_type = std::remove_const_t<T>;

    host_matrix_view() = default;
    /// ld = 0 means "packed": cols for row-major, rows for column-major.
    host_matrix_view(T* data, index_t rows, index_t cols, layout l = layout::row_major,
                     index_t ld = 0)
        : data_(data), rows_(rows), cols_(cols), layout_(l) {
        ld_ = ld != 0 ? ld : (l == layout::row_major ? cols : rows);
        if (ld_ < 1) ld_ = 1;
        detail::check_view_shape(rows_, cols_, ld_, layout_, "host_matrix_view");
        if (data_ == nullptr && rows_ > 0 && cols_ > 0)
            detail::throw_bad_view("host_matrix_view: null data for a non-empty matrix");
    }

    /// A const view of the same data.
    operator host_matrix_view<const value_type>() const {  // NOLINT(google-explicit-constructor)
        return host_matrix_view<const value_type>(data_, rows_, cols_, layout_, ld_);
    }

    T* data() const { return data_; }
    index_t rows() const { return rows_; }
    index_t cols() const { return cols_; }
    index_t ld() const { return ld_; }
    tilestream::layout layout() const { return layout_; }
    index_t row_stride() const { return layout_ == layout::row_major ? ld_ : 1; }
    index_t col_stride() const { return layout_ == layout::row_major ? 1 : ld_; }
    bool empty() const { return rows_ == 0 || cols_ == 0; }

    T& operator()(index_t i, index_t j) const { return data_[i * row_stride() + j * col_stride()]; }

    /// The sub-matrix of nr x nc elements starting at (r0, c0); throws when it does not fit.
    host_matrix_view section(index_t r0, index_t c0, index_t nr, index_t nc) const {
        // Written as differences so that huge r0 + nr cannot overflow and wrap into range.
        if (r0 < 0 || c0 < 0 || nr < 0 || nc < 0 || r0 > rows_ || c0 > cols_ || nr > rows_ - r0 ||
            nc > cols_ - c0)
            detail::throw_bad_view("host_matrix_view::section: " + std::to_string(nr) + "x" +
                                   std::to_string(nc) + " elements at (" + std::to_string(r0) + ", " +
                                   std::to_string(c0) + ") is outside a " + std::to_string(rows_) + "x" +
                                   std::to_string(cols_) + " matrix");
        return host_matrix_view(nr && nc ? &(*this)(r0, c0) : data_, nr, nc, layout_, ld_);
    }

private:
    T* data_ = nullptr;
    index_t rows_ = 0;
    index_t cols_ = 0;
    index_t ld_ = 1;
    tilestream::layout layout_ = layout::row_major;
};

namespace detail {
struct aligned_free {
    void operator()(void* p) const noexcept { std::free(p); }
};
/// 64-byte aligned host allocation of `bytes` (at least one byte); throws std::bad_alloc.
void* aligned_host_alloc(std::size_t bytes);
/// Throws error("<what>: cannot allocate <bytes> of host memory for a RxC <type> matrix ...").
[[noreturn]] void throw_out_of_host_memory(const char* what, index_t rows, index_t cols, dtype t,
                                           std::size_t bytes);
}  // namespace detail

/// Host memory the kernel reports available (MemAvailable in /proc/meminfo), or 0 when unknown.
std::size_t available_host_memory();
/// Throws out_of_budget naming `what` when `bytes` of new host memory exceed
/// available_host_memory() (does nothing when that is unknown): a clear error before an
/// allocation the system cannot back.
void check_host_memory(std::size_t bytes, const std::string& what);

/// An owning, packed host matrix (64-byte aligned).
template <class T>
class host_matrix {
public:
    host_matrix() = default;
    host_matrix(index_t rows, index_t cols, tilestream::layout l = layout::row_major)
        : rows_(rows), cols_(cols), layout_(l) {
        detail::check_view_shape(rows, cols, l == layout::row_major ? (cols ? cols : 1) : (rows ? rows : 1),
                                 l, "host_matrix");
        const std::size_t bytes = checked_bytes(rows, cols, dtype_of<T>(), "host_matrix");
        try {
            data_.reset(static_cast<T*>(detail::aligned_host_alloc(bytes)));
        } catch (const std::bad_alloc&) {
            detail::throw_out_of_host_memory("host_matrix", rows, cols, dtype_of<T>(), bytes);
        }
    }

    host_matrix_view<T> view() { return {data_.get(), rows_, cols_, layout_}; }
    host_matrix_view<const T> view() const { return {data_.get(), rows_, cols_, layout_}; }
    T* data() { return data_.get(); }
    const T* data() const { return data_.get(); }
    index_t rows() const { return rows_; }
    index_t cols() const { return cols_; }
    index_t size() const { return rows_ * cols_; }
    tilestream::layout layout() const { return layout_; }
    T& operator()(index_t i, index_t j) { return view()(i, j); }
    const T& operator()(index_t i, index_t j) const { return view()(i, j); }

private:
    std::unique_ptr<T[], detail::aligned_free> data_;
    index_t rows_ = 0;
    index_t cols_ = 0;
    tilestream::layout layout_ = layout::row_major;
};

}  // namespace tilestream
