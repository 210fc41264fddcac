// The device interface every backend implements: budgeted memory, in-order streams, events,
// asynchronous copies (1-D and 2-D strided) and a handful of kernels.
#pragma once

#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>
#include <tilestream/types.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tilestream {

class device;
class budget_reservation;

enum class device_kind { cpu, cuda, opencl };
std::string_view to_string(device_kind k) noexcept;

/// What a device is; filled by its backend.
struct device_info {
    std::string id;               ///< "cpu:0", "cuda:1", "cuda:0.2" (logical slice 2 of GPU 0)
    device_kind kind = device_kind::cpu;
    std::string name;             ///< processor or GPU model
    std::size_t memory_bytes = 0; ///< memory this device may use (its share of the physical memory)
    std::size_t memory_free = 0;  ///< free memory when discovered (GPU), else memory_bytes
    std::size_t budget_bytes = 0; ///< accounting budget for allocations
    bool budget_given = false;    ///< the budget was set by the user (`@budget`, memory_budget)
    int threads = 0;              ///< CPU worker threads; for a GPU its SM count
    std::string isa;              ///< CPU: instruction set of its kernels (generic, avx2, avx512)
    std::string blocking;         ///< CPU: tiled GEMM block sizes, "f32 6x16 kc=256 mc=252 nc=8192, f64 ..."
    // GPU-only facts.
    int physical_index = -1;      ///< the GPU ordinal behind a (logical) CUDA device
    int slice = 0, slices = 1;    ///< logical slice of the physical device
    int cc_major = 0, cc_minor = 0;
    std::vector<int> peer_access; ///< GPU ordinals this GPU can read and write directly
    // OpenCL-only facts ("opencl:2", "opencl:0.1" for logical slice 1 of OpenCL device 0).
    std::string platform, vendor, driver, device_type;  ///< device_type: "GPU", "CPU", ...
    std::size_t local_memory = 0;  ///< work-group local memory per compute unit
    bool fp64 = true;              ///< double precision kernels available
    bool emulated = false;         ///< a CPU behind an OpenCL runtime: used only when named
};

/// Kind of work an operation on a stream does, for traces and counters.
enum class span_kind { copy_h2d, copy_d2h, copy_d2d, copy_peer, kernel, host };
std::string_view to_string(span_kind k) noexcept;

/// Receives one timed span per stream operation when a device has a sink attached.
class trace_sink {
public:
    virtual ~trace_sink() = default;
    /// t0, t1 are seconds on the steady clock (trace_clock_seconds()).
    virtual void record(const std::string& device_id, int stream_id, span_kind kind,
                        const std::string& name, std::size_t bytes, double flops, double t0,
                        double t1) = 0;
    /// The role of a stream in the run ("copy in", "compute", "copy out", "halo out", ...), told by
    /// the engine that made it, so timelines can name their lanes. Optional.
    virtual void name_stream(const std::string& device_id, int stream_id, const std::string& role) {
        (void)device_id, (void)stream_id, (void)role;
    }
};
/// Seconds on the steady clock shared by every backend's spans.
double trace_clock_seconds();

/// An allocation in a device's memory space. Move-only; frees itself and returns its bytes to
/// the device budget. The pointer is a device address: never dereference it on the host unless
/// the device says its memory is host-addressable.
class device_buffer {
public:
    device_buffer() = default;
    device_buffer(device_buffer&& o) noexcept { swap(o); }
    device_buffer& operator=(device_buffer&& o) noexcept {
        device_buffer tmp(std::move(o));
        swap(tmp);
        return *this;
    }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;
    ~device_buffer() { reset(); }

    void* get() const { return ptr_; }
    template <class T>
    T* as() const { return static_cast<T*>(ptr_); }
    std::size_t size() const { return bytes_; }
    device* owner() const { return dev_; }
    explicit operator bool() const { return ptr_ != nullptr; }
    void reset() noexcept;

private:
    friend class device;
    device_buffer(device* d, void* p, std::size_t n, budget_reservation* from = nullptr, std::size_t reserved = 0)
        : dev_(d), ptr_(p), bytes_(n), from_(from), reserved_(reserved) {}
    void swap(device_buffer& o) noexcept {
        std::swap(dev_, o.dev_);
        std::swap(ptr_, o.ptr_);
        std::swap(bytes_, o.bytes_);
        std::swap(from_, o.from_);
        std::swap(reserved_, o.reserved_);
    }
    device* dev_ = nullptr;
    void* ptr_ = nullptr;
    std::size_t bytes_ = 0;
    budget_reservation* from_ = nullptr;  ///< the run it was allocated for, if any
    std::size_t reserved_ = 0;            ///< of bytes_, those drawn from that run's reservation
};

/// A share of one device's budget held by one run (a GEMM call), so that runs sharing a device
/// never take each other's memory: the constructor waits, in turn with other runs, until the
/// bytes are free (runs end, so the wait does too) and throws out_of_budget at once when they
/// could never be (more than the budget less the memory allocated outside runs). Buffers
/// allocated with it count against it, and in_use()/peak() are the run's own figures, whatever
/// other runs on the device do. Not movable: it lives for the run, and its buffers are freed
/// before it ends.
class budget_reservation {
public:
    budget_reservation(device& dev, std::size_t bytes);
    ~budget_reservation();
    budget_reservation(const budget_reservation&) = delete;
    budget_reservation& operator=(const budget_reservation&) = delete;

    device& owner() const { return dev_; }
    std::size_t bytes() const { return bytes_; }
    /// This run's buffers on the device now, and at most since the reservation was made.
    std::size_t in_use() const { return in_use_.load(); }
    std::size_t peak() const { return peak_.load(); }
    /// Starts peak() again from in_use() (a reservation kept for another run: that run's peak).
    void reset_peak() { peak_.store(in_use_.load()); }

private:
    friend class device;
    device& dev_;
    std::size_t bytes_;
    std::atomic<std::size_t> in_use_{0}, peak_{0};
};

/// Host memory suited to fast copies with a device (pinned for CUDA). Move-only.
class host_staging_buffer {
public:
    host_staging_buffer() = default;
    host_staging_buffer(void* p, std::size_t n, std::function<void(void*)> release)
        : ptr_(p), bytes_(n), release_(std::move(release)) {}
    host_staging_buffer(host_staging_buffer&& o) noexcept { swap(o); }
    host_staging_buffer& operator=(host_staging_buffer&& o) noexcept {
        host_staging_buffer tmp(std::move(o));
        swap(tmp);
        return *this;
    }
    host_staging_buffer(const host_staging_buffer&) = delete;
    host_staging_buffer& operator=(const host_staging_buffer&) = delete;
    ~host_staging_buffer() {
        if (ptr_ && release_) release_(ptr_);
    }
    void* get() const { return ptr_; }
    std::size_t size() const { return bytes_; }

private:
    void swap(host_staging_buffer& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(bytes_, o.bytes_);
        std::swap(release_, o.release_);
    }
    void* ptr_ = nullptr;
    std::size_t bytes_ = 0;
    std::function<void(void*)> release_;
};

/// normal and high: a queue the device serves on its own (high first where it can choose).
/// calling_thread: a high-priority queue whose operations a device computing with the host's cores
/// runs on the thread that enqueues them, before the enqueue returns, with the same error rules (an
/// operation after a failed one is skipped, synchronize() rethrows); in order for one enqueuing
/// thread (operations enqueued by two threads at once run at once, each on its own thread);
/// synchronize() from another thread waits for a running one. Other devices give a high-priority
/// stream. For runs on host memory in place, where handing each operation to
/// a queue's thread and waiting for it cost more than a small operation (a 4 x 4 LU: about 100 us
/// of thread wake-ups on a 2-core VM).
enum class stream_priority { normal, high, calling_thread };

/// An in-order queue of operations on one device.
class stream {
public:
    virtual ~stream() = default;
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;
    /// Blocks until every operation enqueued so far has finished; rethrows the first error an
    /// operation of this stream raised (naming the operation).
    virtual void synchronize() = 0;
    device& owner() const { return *owner_; }
    int id() const { return id_; }

protected:
    stream(device& owner, int id) : owner_(&owner), id_(id) {}

private:
    device* owner_;
    int id_;
};

/// A marker in a stream; other streams (of any device) and the host can wait for it.
class event {
public:
    virtual ~event() = default;
    event(const event&) = delete;
    event& operator=(const event&) = delete;
    /// Marks the point after everything enqueued on s so far.
    virtual void record(stream& s) = 0;
    /// Blocks the host until the last recorded point is reached (immediately if never recorded).
    virtual void synchronize() = 0;
    /// True when the last recorded point has been reached.
    virtual bool ready() = 0;
    /// A host-blocking wait for the point recorded last as of this call (later records do not move
    /// it); the returned function stays valid after the event is destroyed. Streams of other
    /// backends use it to honour "wait for the record current at wait()".
    virtual std::function<void()> host_waiter() = 0;

protected:
    event() = default;
};

/// 2-D strided copy: `height` rows of `width_bytes` each, rows `*_pitch` bytes apart.
struct copy_2d_desc {
    void* dst = nullptr;
    std::size_t dst_pitch = 0;
    const void* src = nullptr;
    std::size_t src_pitch = 0;
    std::size_t width_bytes = 0;
    std::size_t height = 0;
};

/// A device: memory accounted against a budget, streams, events, copies and kernels.
/// Every operation taking a stream is asynchronous and ordered within that stream.
class device {
public:
    virtual ~device();
    device(const device&) = delete;
    device& operator=(const device&) = delete;

    const device_info& info() const { return info_; }
    const std::string& id() const { return info_.id; }

    // ---- memory, accounted against the budget (shared by all backends) ----
    /// Allocates `bytes` of device memory; throws out_of_budget naming device, request and budget.
    /// With a reservation of this device, the bytes come from it while it has room (beyond it,
    /// from the free budget) and count in its in_use() and peak().
    device_buffer allocate(std::size_t bytes, budget_reservation* from = nullptr);
    std::size_t budget() const { return info_.budget_bytes; }
    /// Bytes allocated outside reservations plus bytes reserved.
    std::size_t bytes_in_use() const { return in_use_.load(); }
    /// The budget less the memory allocated outside reservations: what one run may plan for
    /// (concurrent runs then take turns, see budget_reservation).
    std::size_t budget_for_runs() const;
    /// Highest bytes_in_use() since construction or the last reset_peak().
    std::size_t peak_bytes() const { return peak_.load(); }
    void reset_peak() { peak_.store(in_use_.load()); }
    /// True when the host can read and write this device's buffers directly (CPU devices).
    virtual bool host_addressable() const = 0;
    /// Memory kept between runs by a holder that can give it back (a context's buffers and tile
    /// cache): a reservation that would wait for memory, or an allocation beyond the budget, first
    /// calls every holder's `give_back` (outside the device's locks), which frees what it holds
    /// idle on this device and says whether it freed anything. Returns the id remove_idle_holder
    /// takes; removal waits for a give_back under way.
    std::uint64_t add_idle_holder(std::function<bool()> give_back);
    void remove_idle_holder(std::uint64_t id);

    /// Host memory for staging copies (pinned on CUDA). Not counted against the budget.
    virtual host_staging_buffer allocate_host_staging(std::size_t bytes) = 0;
    /// Pins user memory in place for faster copies (cudaHostRegister); no-op where meaningless.
    virtual void register_host(void* p, std::size_t bytes) = 0;
    virtual void unregister_host(void* p) = 0;

    // ---- streams and events ----
    virtual std::unique_ptr<stream> create_stream(stream_priority p = stream_priority::normal) = 0;
    virtual std::unique_ptr<event> create_event() = 0;
    /// Operations enqueued on s after this call wait until e's last recorded point.
    /// e may belong to another device.
    virtual void wait(stream& s, event& e) = 0;
    /// Blocks until all streams of this device are idle.
    virtual void synchronize() = 0;
    /// Enqueues a host function on s (runs after everything before it on s). On CUDA it runs on the
    /// runtime's callback thread: it must not call CUDA, and it must not wait for host work that
    /// the enqueuing thread does later, since a copy from pageable host memory blocks that thread
    /// until s is idle (CUDA's rule; registered or staging memory does not).
    virtual void enqueue_host(stream& s, std::function<void()> fn, const std::string& name) = 0;

    // ---- copies (asynchronous on s; src/dst are in the spaces the names say) ----
    virtual void copy_to_device(stream& s, void* dst, const void* host_src, std::size_t bytes) = 0;
    virtual void copy_to_host(stream& s, void* host_dst, const void* src, std::size_t bytes) = 0;
    virtual void copy_within(stream& s, void* dst, const void* src, std::size_t bytes) = 0;
    virtual void copy_2d_to_device(stream& s, const copy_2d_desc& c) = 0;
    virtual void copy_2d_to_host(stream& s, const copy_2d_desc& c) = 0;
    virtual void copy_2d_within(stream& s, const copy_2d_desc& c) = 0;
    /// Whether copy_peer can write straight into `other`'s memory.
    virtual bool can_copy_peer(const device& other) const = 0;
    /// Copies from this device's memory to dst on `other`; requires can_copy_peer(other).
    /// Routing through the host when peers cannot talk is core's job (copy_between).
    virtual void copy_peer(stream& s, device& other, void* dst, const void* src,
                           std::size_t bytes) = 0;
    virtual void copy_2d_peer(stream& s, device& other, const copy_2d_desc& c) = 0;

    // ---- kernels ----
    /// Kernels this device implements for GEMM.
    virtual bool supports(gemm_kernel k) const = 0;
    /// C <- alpha*op(A)*op(B) + beta*C on device buffers described by call.
    virtual void gemm(stream& s, const gemm_call& call) = 0;
    /// A stack of GEMMs of one shape (see gemm_batched_call). Pointer lists only on host-addressable
    /// devices. By default one gemm() per product; backends run their batched routines.
    virtual void gemm_batched(stream& s, const gemm_batched_call& call);
    /// One Jacobi sweep over a part (see jacobi_call); optional squared-residual output.
    virtual void jacobi_sweep(stream& s, const jacobi_call& call) = 0;
    /// Whether this device runs tile operation `kind` on `type` with `kernel` itself. The engine
    /// runs the others with the device's vendor routine, or the host reference (src/core/engine).
    /// The base class runs gemm tiles through gemm() and nothing else.
    virtual bool supports(tile_kind kind, dtype type, gemm_kernel kernel) const;
    /// Runs one tile operation (operands in this device's memory) on s; throws invalid_argument for
    /// a kind supports() denies.
    virtual void execute(stream& s, const tile_op& op);

    // ---- observation ----
    /// Attach (or detach with nullptr) a sink receiving one span per stream operation.
    void set_trace_sink(trace_sink* sink) { sink_.store(sink); }
    trace_sink* trace() const { return sink_.load(); }

protected:
    explicit device(device_info info) : info_(std::move(info)) {}
    virtual void* raw_allocate(std::size_t bytes) = 0;
    virtual void raw_free(void* p) noexcept = 0;
    device_info info_;

private:
    friend class device_buffer;
    friend class budget_reservation;
    void release(void* p, std::size_t bytes, budget_reservation* from, std::size_t reserved) noexcept;
    void notify_budget_waiters();
    /// Asks the idle holders for their memory; true when one freed something.
    bool reclaim_idle();
    std::mutex holders_mutex_;
    std::vector<std::pair<std::uint64_t, std::function<bool()>>> holders_;
    std::uint64_t next_holder_ = 1;
    std::atomic<std::size_t> in_use_{0};
    std::atomic<std::size_t> reserved_{0};  ///< held by live reservations (part of in_use_)
    std::mutex budget_mutex_;               ///< reservations: turns and waits
    std::condition_variable budget_freed_;
    std::uint64_t next_turn_ = 0, serving_turn_ = 0;
    std::atomic<int> budget_waiters_{0};
    std::atomic<std::size_t> peak_{0};
    std::atomic<trace_sink*> sink_{nullptr};
};

inline void device_buffer::reset() noexcept {
    if (ptr_ != nullptr) dev_->release(ptr_, bytes_, from_, reserved_);
    dev_ = nullptr;
    from_ = nullptr;
    reserved_ = 0;
    ptr_ = nullptr;
    bytes_ = 0;
}

}  // namespace tilestream
