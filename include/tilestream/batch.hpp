// Stacks of matrices of one shape in host memory, for batched GEMM (context::gemm_batched): each
// matrix at a fixed stride from the one before (cublasGemmStridedBatched; stride 0 repeats one
// matrix, numpy's broadcasting), or at the addresses of a pointer array (cblas_?gemm_batch,
// cublasGemmBatchedEx).
#pragma once

#include <tilestream/matrix.hpp>
#include <tilestream/types.hpp>

#include <span>
#include <string>
#include <type_traits>

namespace tilestream {

template <class T>
class host_batch_view {
public:
    using value_type = std::remove_const_t<T>;

    host_batch_view() = default;

    /// `count` matrices shaped like `first`, matrix i at first.data() + i * stride elements (a
    /// stride of 0 gives the same matrix to every product).
    static host_batch_view strided(host_matrix_view<T> first, index_t stride, index_t count) {
        if (count < 0 || stride < 0)
            detail::throw_bad_view("host_batch_view: negative count (" + std::to_string(count) + ") or stride (" +
                                   std::to_string(stride) + ")");
        host_batch_view v;
        v.shape_ = first;
        v.stride_ = stride;
        v.count_ = count;
        return v;
    }
    /// One matrix per pointer, each shaped like `shape` (rows, columns, layout, leading dimension;
    /// its data pointer is not used).
    static host_batch_view pointers(host_matrix_view<T> shape, std::span<T* const> pointers) {
        host_batch_view v;
        v.shape_ = shape;
        v.pointers_ = pointers;
        v.count_ = index_t(pointers.size());
        v.listed_ = true;
        for (T* p : pointers)
            if (p == nullptr && !shape.empty()) detail::throw_bad_view("host_batch_view: a null pointer in the list");
        return v;
    }

    index_t count() const { return count_; }
    index_t rows() const { return shape_.rows(); }
    index_t cols() const { return shape_.cols(); }
    index_t ld() const { return shape_.ld(); }
    tilestream::layout layout() const { return shape_.layout(); }
    /// Strided (true) or a pointer array.
    bool is_strided() const { return !listed_; }
    index_t stride() const { return stride_; }
    std::span<T* const> pointer_list() const { return pointers_; }

    /// Matrix i's first element.
    T* data(index_t i) const { return listed_ ? pointers_[std::size_t(i)] : shape_.data() + i * stride_; }
    host_matrix_view<T> operator[](index_t i) const {
        return host_matrix_view<T>(data(i), shape_.rows(), shape_.cols(), shape_.layout(), shape_.ld());
    }
    /// The same matrices, read-only.
    operator host_batch_view<const value_type>() const {  // NOLINT(google-explicit-constructor)
        host_batch_view<const value_type> v;
        v.shape_ = host_matrix_view<const value_type>(shape_);
        v.stride_ = stride_;
        v.count_ = count_;
        v.listed_ = listed_;
        v.pointers_ = std::span<const value_type* const>(reinterpret_cast<const value_type* const*>(pointers_.data()),
                                                         pointers_.size());
        return v;
    }

private:
    template <class U>
    friend class host_batch_view;
    host_matrix_view<T> shape_;
    index_t stride_ = 0, count_ = 0;
    bool listed_ = false;
    std::span<T* const> pointers_;
};

}  // namespace tilestream
