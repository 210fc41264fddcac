// The CUDA backend's device, stream and event classes (private to the library; benchmarks and
// tests of this backend may include it to reach the native CUDA stream).
#pragma once

#include "backends/cuda/cuda_logic.hpp"

#include <tilestream/device.hpp>

#include <cublas_v2.h>
#include <cusolverDn.h>

#include "core/engine/tile_mapping.hpp"
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream::cuda {

/// Makes GPU `ordinal` current for the guard's lifetime and restores the previous one: several
/// devices (and threads) share the process, and CUDA's current device is per thread.
class device_guard {
public:
    /// Throws device_error naming `device_id` when the GPU cannot be made current.
    device_guard(int ordinal, std::string_view device_id);
    /// For destructors and callbacks: failures are ignored.
    device_guard(int ordinal, std::nothrow_t) noexcept;
    ~device_guard();
    device_guard(const device_guard&) = delete;
    device_guard& operator=(const device_guard&) = delete;

private:
    int previous_ = -1;
    bool switched_ = false;
};

/// One line saying why CUDA is unusable, from the error cudaGetDeviceCount returned:
/// "no CUDA driver found", "CUDA driver 12.4 is older than the runtime 13.0", "no CUDA GPU present".
std::string describe_cuda_failure(cudaError_t count_error);
/// The facts of GPU `ordinal` (id "cuda:<ordinal>"), of `count` GPUs; throws device_error.
device_info describe_gpu(int ordinal, int count);

class cuda_device;

/// Converts CUDA event times to the host trace clock: an event recorded on an idle stream,
/// with the host time at which it completed.
struct clock_anchor {
    cudaEvent_t event = nullptr;
    double host_seconds = 0;
    int ordinal = 0;
    clock_anchor() = default;
    clock_anchor(const clock_anchor&) = delete;
    clock_anchor& operator=(const clock_anchor&) = delete;
    ~clock_anchor();
};

/// A traced operation whose two timing events have been enqueued but not yet read back.
struct pending_span {
    cudaEvent_t begin = nullptr, end = nullptr;
    span_kind kind = span_kind::kernel;
    std::string name;
    std::size_t bytes = 0;
    double flops = 0;
    std::shared_ptr<const clock_anchor> anchor;
};

class cuda_stream final : public stream {
public:
    cuda_stream(cuda_device& dev, int id, stream_priority priority);
    ~cuda_stream() override;
    void synchronize() override;

    cudaStream_t native() const { return stream_; }
    cuda_device& gpu() const { return dev_; }
    /// This stream's cuBLAS handle (created on first use, bound to this stream). Callers hold
    /// blas_mutex() while using it and have made the device current.
    cublasHandle_t blas();
    std::mutex& blas_mutex() { return blas_mutex_; }
    /// This stream's cuSOLVER handle (created on first use, bound to this stream), a device
    /// workspace of at least `bytes` (grown as needed; stream-ordered use only), the device int
    /// cuSOLVER reports info in and a pinned host int it is copied to. Under blas_mutex(), the
    /// device current.
    cusolverDnHandle_t solver();
    void* solver_workspace(std::size_t bytes);
    int* solver_info_device();
    int* solver_info_host();

    /// Keeps the first error a host function of this stream raised, for synchronize().
    void store_error(std::exception_ptr e) noexcept;
    /// Rethrows (and forgets) the stored error, if any.
    void rethrow_stored_error();
    /// Whether a host function of this stream failed since the last synchronize: the host
    /// functions after it are skipped, as a CPU stream skips what follows an error (core's
    /// markers and peer-tile flags rely on it).
    bool has_error();

    void add_span(pending_span&& span);
    /// Reports every finished span at the head of the queue to the device's trace sink.
    void report_finished_spans() noexcept;

private:
    cuda_device& dev_;
    cudaStream_t stream_ = nullptr;
    std::mutex blas_mutex_;
    cublasHandle_t blas_ = nullptr;
    cusolverDnHandle_t solver_ = nullptr;
    void* solver_workspace_ = nullptr;
    std::size_t solver_workspace_bytes_ = 0;
    int* solver_info_device_ = nullptr;
    int* solver_info_host_ = nullptr;
    std::mutex error_mutex_;
    std::exception_ptr error_;
    std::mutex spans_mutex_;
    std::deque<pending_span> spans_;
};

/// Destroys a CUDA event handle; on a CUDA callback thread (a host function), where CUDA calls are
/// not permitted, the handle is parked and destroyed by destroy_parked_events() on the next
/// ordinary thread that records, enqueues or synchronizes.
void destroy_event(int ordinal, cudaEvent_t event) noexcept;
void destroy_parked_events() noexcept;

/// One CUDA event handle and the GPU it lives on; destroyed with its last owner.
struct native_event {
    cudaEvent_t event = nullptr;
    int ordinal = 0;
    std::string device_id;  // device whose stream recorded it (for messages)
    native_event() = default;
    native_event(const native_event&) = delete;
    native_event& operator=(const native_event&) = delete;
    ~native_event();
};

/// Each record uses a handle nobody else holds: the current one when no waiter kept it, else a
/// fresh one. A host_waiter() keeps the handle current at its call, so a later record cannot
/// move the point it waits for.
class cuda_event final : public event {
public:
    explicit cuda_event(cuda_device& dev);
    ~cuda_event() override = default;
    void record(stream& s) override;
    void synchronize() override;
    bool ready() override;
    std::function<void()> host_waiter() override;

    /// The handle of the last record, or null when never recorded.
    std::shared_ptr<const native_event> current() const;

private:
    std::string device_id_;  // the device that created it (for messages)
    mutable std::mutex mutex_;
    std::shared_ptr<native_event> current_;  // null until the first record
};

class cuda_device final : public device {
public:
    cuda_device(device_info info, int ordinal);
    ~cuda_device() override;

    /// The physical GPU behind this (logical) device.
    int ordinal() const { return ordinal_; }

    bool host_addressable() const override { return false; }
    host_staging_buffer allocate_host_staging(std::size_t bytes) override;
    void register_host(void* p, std::size_t bytes) override;
    void unregister_host(void* p) override;

    std::unique_ptr<stream> create_stream(stream_priority p) override;
    std::unique_ptr<event> create_event() override;
    void wait(stream& s, event& e) override;
    void synchronize() override;
    void enqueue_host(stream& s, std::function<void()> fn, const std::string& name) override;

    void copy_to_device(stream& s, void* dst, const void* host_src, std::size_t bytes) override;
    void copy_to_host(stream& s, void* host_dst, const void* src, std::size_t bytes) override;
    void copy_within(stream& s, void* dst, const void* src, std::size_t bytes) override;
    void copy_2d_to_device(stream& s, const copy_2d_desc& c) override;
    void copy_2d_to_host(stream& s, const copy_2d_desc& c) override;
    void copy_2d_within(stream& s, const copy_2d_desc& c) override;
    bool can_copy_peer(const device& other) const override;
    void copy_peer(stream& s, device& other, void* dst, const void* src, std::size_t bytes) override;
    void copy_2d_peer(stream& s, device& other, const copy_2d_desc& c) override;

    bool supports(gemm_kernel k) const override { return k != gemm_kernel::reference; }
    void gemm(stream& s, const gemm_call& call) override;
    /// Real vendor stacks as one cublasGemmStridedBatchedEx; the rest one gemm() per product.
    void gemm_batched(stream& s, const gemm_batched_call& call) override;
    void jacobi_sweep(stream& s, const jacobi_call& call) override;
    /// The Level 3 diagonal blocks through cuBLAS, Cholesky's through cuSOLVER (vendor kernel;
    /// cuda_blas3.cpp).
    bool supports(tile_kind kind, dtype type, gemm_kernel k) const override;
    void execute(stream& s, const tile_op& op) override;

    // For cuda_stream: stream registry and the timing-event pool of traces.
    void add_stream(cuda_stream* s);
    void remove_stream(cuda_stream* s) noexcept;
    cudaEvent_t take_timing_event();
    void return_timing_event(cudaEvent_t e) noexcept;

protected:
    void* raw_allocate(std::size_t bytes) override;
    void raw_free(void* p) noexcept override;

private:
    cuda_stream& own_stream(stream& s, const char* operation);
    /// Warns (once per reason) and throws device_error: `what` could not be pinned.
    [[noreturn]] void refuse_pinning(const std::string& what, const std::string& reason);
    void copy_1d(cuda_stream& cs, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                 span_kind span, const char* name);
    void copy_2d(cuda_stream& cs, const copy_2d_desc& c, cudaMemcpyKind kind, span_kind span,
                 const char* name);
    void gemm_vendor(cuda_stream& cs, const gemm_call& call);
    /// Cholesky's diagonal tile through cuSOLVER, info back to op.info in stream order.
    void potrf(cuda_stream& cs, const tile_op& op);
    std::shared_ptr<const clock_anchor> current_anchor();
    /// Runs `op` (which enqueues one operation on cs); when a trace sink is attached, brackets
    /// it with timing events so that its span is reported once it has finished.
    template <class Name, class Op>
    void traced(cuda_stream& cs, span_kind kind, Name&& name, std::size_t bytes, double flops,
                Op&& op);

    int ordinal_;
    std::size_t max_pitch_ = 0;
    index_t trsm_block_ = 0;  ///< trsm tiles wider than this are solved in blocks (execute)
    std::atomic<int> next_stream_id_{0};

    std::mutex streams_mutex_;
    std::vector<cuda_stream*> streams_;

    std::mutex events_mutex_;
    std::vector<cudaEvent_t> free_timing_events_;

    std::mutex anchor_mutex_;
    cudaStream_t anchor_stream_ = nullptr;
    std::shared_ptr<const clock_anchor> anchor_;
};

/// The CUDA stream behind a stream of a CUDA device; throws invalid_argument for other streams.
cudaStream_t native_stream(stream& s);

/// One cuBLAS call for a column-major tile operation (cuda_blas3.cpp); the handle's stream and device
/// are current.
void run_cublas_tile(cublasHandle_t h, const ::tilestream::detail::engine::column_major_tile& r, dtype type, const std::string& device_id);

/// Whether cuSOLVER could be opened (cuda_solver.cpp: once per process, on first use).
bool cusolver_available();
/// Cholesky of a column-major tile through cuSOLVER (?potrf) on cs, its info left in
/// cs.solver_info_device(); under cs.blas_mutex(), the device current (cuda_solver.cpp).
void run_cusolver_potrf(cuda_stream& cs, const ::tilestream::detail::engine::column_major_tile& r, dtype type,
                        const std::string& device_id);
/// cusolverDnDestroy through the opened library (nothing when it was never opened).
void destroy_cusolver_handle(cusolverDnHandle_t h) noexcept;

}  // namespace tilestream::cuda
