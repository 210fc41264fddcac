// The OpenCL device: buffers behind reserved addresses, mapped pinned staging, in-order profiled
// queues per stream, events that any device can wait on, 1-D/2-D/peer copies, the GEMM kernels
// (naive, tiled, CLBlast) and the Jacobi sweep, and trace spans from the queues' profiling.
#include "backends/backend_module.hpp"
#include "backends/opencl/opencl_check.hpp"
#include "backends/opencl/opencl_runtime.hpp"
#include "core/engine/tile_kernels.hpp"
#include "core/engine/tile_mapping.hpp"

#include "opencl_sources.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <thread>

#include <sys/mman.h>

#ifdef TILESTREAM_HAVE_CLBLAST
#include <clblast_c.h>
#endif

namespace tilestream::opencl {
namespace {

constexpr std::size_t mib = std::size_t(1) << 20;

// ------------------------------------------------------------------ device addresses

/// cl_mem is a handle, not an address, while the engine offsets device pointers. Each buffer
/// gets a range of reserved, inaccessible address space (so a host dereference faults, and no
/// two buffers of any device share an address); copies and kernels map a pointer back to its
/// buffer and offset in O(log n).
class address_table {
public:
    struct location {
        cl_mem mem = nullptr;
        std::size_t offset = 0;
        cl_context context = nullptr;
    };

    void* insert(cl_mem mem, std::size_t bytes, cl_context ctx, const std::string& device) {
        void* base = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED)
            throw out_of_budget("no address space left to place a buffer of " + format_bytes(bytes) + " on " +
                                device);
        std::unique_lock lock(mutex_);
        entries_[reinterpret_cast<std::uintptr_t>(base)] = {bytes, mem, ctx};
        return base;
    }

    /// Removes the buffer at `base` and returns its cl_mem (null when unknown).
    cl_mem erase(void* base) noexcept {
        cl_mem mem = nullptr;
        std::size_t bytes = 0;
        {
            std::unique_lock lock(mutex_);
            auto it = entries_.find(reinterpret_cast<std::uintptr_t>(base));
            if (it == entries_.end()) return nullptr;
            mem = it->second.mem;
            bytes = it->second.bytes;
            entries_.erase(it);
        }
        munmap(base, bytes);
        return mem;
    }

    /// The buffer holding [p, p + bytes); throws invalid_argument naming the operation otherwise.
    location find(const void* p, std::size_t bytes, const std::string& device, std::string_view what) const {
        const auto addr = reinterpret_cast<std::uintptr_t>(p);
        std::shared_lock lock(mutex_);
        auto it = entries_.upper_bound(addr);
        if (it != entries_.begin()) {
            --it;
            const std::uintptr_t base = it->first;
            if (addr >= base && addr - base <= it->second.bytes && bytes <= it->second.bytes - (addr - base))
                return {it->second.mem, addr - base, it->second.context};
        }
        std::ostringstream s;
        s << what << " on " << device << ": " << p << " (+" << bytes
          << " bytes) is not inside a buffer of an OpenCL device";
        throw invalid_argument(s.str());
    }

private:
    struct entry {
        std::size_t bytes;
        cl_mem mem;
        cl_context context;
    };
    mutable std::shared_mutex mutex_;
    std::map<std::uintptr_t, entry> entries_;
};

address_table& addresses() {
    static auto* t = new address_table;  // outlives every device, whatever the destruction order
    return *t;
}

// ------------------------------------------------------------------ helpers

std::size_t default_budget(std::size_t share) {
    // As for CUDA: room for the runtime's own allocations (programs, CLBlast's scratch).
    return share - std::min(share / 4, 256 * mib + share / 100);
}

index_t min_ld(index_t rows, index_t cols, layout l) {
    return std::max<index_t>(1, l == layout::row_major ? cols : rows);
}

void check_operand(const std::string& dev, const char* name, const void* p, index_t rows, index_t cols,
                   index_t ld, layout l) {
    if (rows == 0 || cols == 0) return;
    if (p == nullptr)
        throw invalid_argument("gemm on " + dev + ": " + name + " is null for a " + std::to_string(rows) + "x" +
                               std::to_string(cols) + " operand");
    if (ld < min_ld(rows, cols, l))
        throw invalid_argument("gemm on " + dev + ": leading dimension " + std::to_string(ld) + " of " + name +
                               " is too small for a " + std::to_string(rows) + "x" + std::to_string(cols) + " " +
                               std::string(to_string(l)) + " matrix (needs at least " +
                               std::to_string(min_ld(rows, cols, l)) + ")");
}

// Bytes from the first to one past the last element of a strided rows x cols view.
std::size_t extent_bytes(index_t rows, index_t cols, index_t row_stride, index_t col_stride, std::size_t es) {
    if (rows == 0 || cols == 0) return 0;
    return std::size_t((rows - 1) * row_stride + (cols - 1) * col_stride + 1) * es;
}

std::string gemm_span_name(const gemm_call& c) {
    std::ostringstream name;
    name << "gemm " << to_string(c.kernel) << " " << to_string(c.type) << " " << to_string(c.op_a)
         << to_string(c.op_b) << " " << c.m << "x" << c.n << "x" << c.k;
    return name.str();
}

#ifdef TILESTREAM_HAVE_CLBLAST
std::mutex& clblast_mutex() {
    static std::mutex m;  // CLBlast compiles and caches its kernels on first use: one caller at a time
    return m;
}
#endif

class ocl_device;

// ------------------------------------------------------------------ stream

class ocl_stream final : public stream {
public:
    ocl_stream(ocl_device& dev, int id, stream_priority priority);
    ~ocl_stream() override;

    void synchronize() override;
    cl_command_queue queue() const { return queue_.get(); }
    ocl_device& dev() const { return dev_; }

    /// After each enqueue: submit it, and keep its event for the trace when a sink is attached.
    void submitted(cl_event ev, span_kind kind, std::string name, std::size_t bytes, double flops);
    /// Event out-parameter for an enqueue: non-null only while tracing.
    cl_event* trace_event(cl_event& slot) const;

    /// Runs fn on this stream's host thread once everything before it on the queue has finished;
    /// what is enqueued after it waits for fn. `always` runs it even after an error (waits).
    void enqueue_host(std::function<void()> fn, std::string name, bool always);

    /// Kernels are per stream: clSetKernelArg is not thread-safe on a shared cl_kernel.
    std::unique_lock<std::mutex> launch_lock() { return std::unique_lock(launch_mutex_); }
    cl_kernel kernel(cl_program prog, const char* name);
    /// Device scratch of at least `bytes` for this stream's kernels (the Jacobi row residuals).
    cl_mem scratch(std::size_t bytes);

private:
    struct pending_span {
        event_handle event;
        span_kind kind;
        std::string name;
        std::size_t bytes;
        double flops;
    };
    struct host_job {
        event_handle marker;  // reached when everything before the job has finished
        cl_event gate;        // user event the queue waits on until the job has run
        std::function<void()> fn;
        std::string name;
        bool always;
    };
    void report_finished_spans(bool block) noexcept;
    void serve_host_jobs();
    void store_error(std::exception_ptr e) noexcept;

    ocl_device& dev_;
    queue_handle queue_;

    std::mutex spans_mutex_;
    std::deque<pending_span> spans_;

    std::mutex host_mutex_;
    std::condition_variable host_cv_, host_idle_cv_;
    std::deque<host_job> host_jobs_;
    std::size_t host_pending_ = 0;
    bool host_stopping_ = false;
    std::thread host_thread_;  // started on the first host job
    std::exception_ptr error_;

    std::mutex launch_mutex_;
    std::map<std::pair<cl_program, std::string>, kernel_handle> kernels_;
    mem_handle scratch_;
    std::size_t scratch_bytes_ = 0;
};

// ------------------------------------------------------------------ event

/// Each record() enqueues a marker and keeps it: a snapshot of the point recorded last is the
/// marker itself, so waits honour the record current at wait() time.
class ocl_event final : public event {
public:
    explicit ocl_event(std::string device_id) : device_id_(std::move(device_id)) {}

    void record(stream& s) override {
        auto* os = dynamic_cast<ocl_stream*>(&s);
        if (os == nullptr)
            throw invalid_argument("event of " + device_id_ + " cannot be recorded on a stream of " + s.owner().id() +
                                   ", which is not an OpenCL device");
        event_handle marker;
        TS_CL_CHECK(clEnqueueMarkerWithWaitList(os->queue(), 0, nullptr, marker.out()), s.owner().id());
        TS_CL_CHECK(clFlush(os->queue()), s.owner().id());
        cl_context ctx = nullptr;
        TS_CL_CHECK(clGetEventInfo(marker.get(), CL_EVENT_CONTEXT, sizeof ctx, &ctx, nullptr), s.owner().id());
        std::lock_guard lock(mutex_);
        marker_ = std::move(marker);
        context_ = ctx;
        device_id_ = s.owner().id();
    }
    void synchronize() override { host_waiter()(); }
    bool ready() override {
        const auto [ev, ctx] = snapshot();
        if (!ev) return true;
        cl_int status = CL_COMPLETE;
        TS_CL_CHECK(clGetEventInfo(ev.get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr),
                    device_id_);
        if (status < 0) throw_cl_error("the event's command", device_id_, status);
        return status == CL_COMPLETE;
    }
    std::function<void()> host_waiter() override {
        auto [ev, ctx] = snapshot();
        if (!ev) return [] {};
        std::string dev;
        {
            std::lock_guard lock(mutex_);
            dev = device_id_;
        }
        return [ev = std::move(ev), dev] {
            cl_event e = ev.get();
            TS_CL_CHECK(clWaitForEvents(1, &e), dev);
        };
    }
    /// The marker recorded last (null when never recorded) and its context.
    std::pair<event_handle, cl_context> snapshot() {
        std::lock_guard lock(mutex_);
        return {marker_, context_};
    }

private:
    std::mutex mutex_;
    std::string device_id_;
    event_handle marker_;
    cl_context context_ = nullptr;
};

// ------------------------------------------------------------------ device

struct tile_shape {
    int ts = 8, wpt = 1;
};

class ocl_device final : public device {
public:
    ocl_device(device_info info, root_device& root, int index)
        : device(std::move(info)), root_(root), index_(index), context_(root.context()) {
        util_ = make_queue(stream_priority::normal);
        // Anchor the device's profiling clock to trace_clock_seconds(): a tiny timed write.
        cl_int e = CL_SUCCESS;
        mem_handle probe(clCreateBuffer(context_, CL_MEM_READ_WRITE, 4, nullptr, &e));
        if (e != CL_SUCCESS) throw_cl_error("clCreateBuffer", id(), e);
        const int word = 0;
        event_handle ev;
        TS_CL_CHECK(clEnqueueWriteBuffer(util_.get(), probe.get(), CL_TRUE, 0, 4, &word, 0, nullptr, ev.out()), id());
        const double host = trace_clock_seconds();
        cl_ulong end = 0;
        if (clGetEventProfilingInfo(ev.get(), CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) == CL_SUCCESS)
            clock_offset_ = host - 1e-9 * double(end);
    }
    ~ocl_device() override {
        if (util_) clFinish(util_.get());
    }

    root_device& root() const { return root_; }
    int index() const { return index_; }
    cl_context context() const { return context_; }
    double clock_offset() const { return clock_offset_; }

    queue_handle make_queue(stream_priority p) {
        cl_int e = CL_SUCCESS;
        cl_command_queue q = nullptr;
        if (root_.version.rfind("OpenCL 1.", 0) == 0) {
            q = clCreateCommandQueue(context_, root_.device, CL_QUEUE_PROFILING_ENABLE, &e);
        } else {
            cl_queue_properties props[5] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0, 0, 0};
            if (root_.has_extension("cl_khr_priority_hints")) {
                props[2] = CL_QUEUE_PRIORITY_KHR;
                props[3] = p != stream_priority::normal ? CL_QUEUE_PRIORITY_HIGH_KHR : CL_QUEUE_PRIORITY_MED_KHR;
            }
            q = clCreateCommandQueueWithProperties(context_, root_.device, props, &e);
        }
        if (e != CL_SUCCESS) throw_cl_error("clCreateCommandQueue", id(), e);
        return queue_handle(q);
    }

    void add_stream(ocl_stream* s) {
        std::lock_guard lock(streams_mutex_);
        streams_.push_back(s);
    }
    void remove_stream(ocl_stream* s) noexcept {
        std::lock_guard lock(streams_mutex_);
        std::erase(streams_, s);
    }

    bool host_addressable() const override { return false; }

    host_staging_buffer allocate_host_staging(std::size_t bytes) override {
        if (bytes == 0) return {};
        cl_int e = CL_SUCCESS;
        mem_handle mem(clCreateBuffer(context_, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, nullptr, &e));
        if (e != CL_SUCCESS) throw_cl_error("clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) of " + format_bytes(bytes), id(), e);
        void* p = clEnqueueMapBuffer(util_.get(), mem.get(), CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0,
                                     nullptr, nullptr, &e);
        if (e != CL_SUCCESS) throw_cl_error("clEnqueueMapBuffer", id(), e);
        // The staging buffer may outlive this device: it keeps its own references.
        return host_staging_buffer(p, bytes, [mem, q = util_](void* ptr) {
            if (clEnqueueUnmapMemObject(q.get(), mem.get(), ptr, 0, nullptr, nullptr) == CL_SUCCESS)
                clFinish(q.get());
        });
    }
    // OpenCL cannot pin user memory in place; copies from it are staged by the runtime.
    void register_host(void*, std::size_t) override {}
    void unregister_host(void*) override {}

    std::unique_ptr<stream> create_stream(stream_priority p) override {
        return std::make_unique<ocl_stream>(*this, next_stream_id_++, p);
    }
    std::unique_ptr<event> create_event() override { return std::make_unique<ocl_event>(id()); }

    void wait(stream& s, event& e) override {
        ocl_stream& st = own(s, "wait");
        if (auto* oe = dynamic_cast<ocl_event*>(&e)) {
            auto [ev, ctx] = oe->snapshot();
            if (!ev) return;  // never recorded: nothing to wait for
            if (ctx == context_) {
                cl_event list = ev.get();
                TS_CL_CHECK(clEnqueueBarrierWithWaitList(st.queue(), 1, &list, nullptr), id());
                TS_CL_CHECK(clFlush(st.queue()), id());
                return;
            }
        }
        // Another backend's event, or another context's: a user event bridges it. The waiter is
        // taken now, so a later record() of e does not move what s waits for.
        st.enqueue_host(e.host_waiter(), "wait for a foreign event", true);
    }

    void synchronize() override {
        std::vector<ocl_stream*> streams;
        {
            std::lock_guard lock(streams_mutex_);
            streams = streams_;
        }
        std::exception_ptr first;
        for (auto* s : streams) {
            try {
                s->synchronize();
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        }
        TS_CL_CHECK(clFinish(util_.get()), id());
        if (first) std::rethrow_exception(first);
    }

    void enqueue_host(stream& s, std::function<void()> fn, const std::string& name) override {
        own(s, "enqueue_host").enqueue_host(std::move(fn), name, false);
    }

    // ---- copies

    void copy_to_device(stream& s, void* dst, const void* src, std::size_t bytes) override {
        host_transfer(own(s, "copy_to_device"), true, dst, const_cast<void*>(src), bytes, span_kind::copy_h2d, "h2d");
    }
    void copy_to_host(stream& s, void* dst, const void* src, std::size_t bytes) override {
        host_transfer(own(s, "copy_to_host"), false, const_cast<void*>(src), dst, bytes, span_kind::copy_d2h, "d2h");
    }
    void copy_within(stream& s, void* dst, const void* src, std::size_t bytes) override {
        device_to_device(own(s, "copy_within"), dst, src, bytes, span_kind::copy_d2d, "d2d");
    }
    void copy_2d_to_device(stream& s, const copy_2d_desc& c) override {
        host_transfer_2d(own(s, "copy_2d_to_device"), true, c, span_kind::copy_h2d, "h2d 2-D");
    }
    void copy_2d_to_host(stream& s, const copy_2d_desc& c) override {
        host_transfer_2d(own(s, "copy_2d_to_host"), false, c, span_kind::copy_d2h, "d2h 2-D");
    }
    void copy_2d_within(stream& s, const copy_2d_desc& c) override {
        device_to_device_2d(own(s, "copy_2d_within"), c, span_kind::copy_d2d, "d2d 2-D");
    }
    // Peers: devices sharing this context (logical slices) copy directly; host-addressable
    // devices (CPU) are written by reading into their memory. Others go through core's staging.
    bool can_copy_peer(const device& other) const override {
        if (other.host_addressable()) return true;
        const auto* o = dynamic_cast<const ocl_device*>(&other);
        return o != nullptr && o->context_ == context_;
    }
    void copy_peer(stream& s, device& other, void* dst, const void* src, std::size_t bytes) override {
        ocl_stream& st = own(s, "copy_peer");
        check_peer(other);
        if (other.host_addressable())
            host_transfer(st, false, const_cast<void*>(src), dst, bytes, span_kind::copy_peer, "peer to " + other.id());
        else
            device_to_device(st, dst, src, bytes, span_kind::copy_peer, "peer to " + other.id());
    }
    void copy_2d_peer(stream& s, device& other, const copy_2d_desc& c) override {
        ocl_stream& st = own(s, "copy_2d_peer");
        check_peer(other);
        if (other.host_addressable())
            host_transfer_2d(st, false, c, span_kind::copy_peer, "peer 2-D to " + other.id());
        else
            device_to_device_2d(st, c, span_kind::copy_peer, "peer 2-D to " + other.id());
    }

    // ---- kernels

    bool supports(gemm_kernel k) const override {
        switch (k) {
            case gemm_kernel::naive:
            case gemm_kernel::tiled: return true;
#ifdef TILESTREAM_HAVE_CLBLAST
            case gemm_kernel::vendor: return true;
#endif
            default: return false;
        }
    }

    void gemm(stream& s, const gemm_call& c) override { gemm_or_scale(s, c, std::nullopt); }
    /// Vendor stacks as one CLBlast GemmStridedBatched; the rest one gemm() per product.
    void gemm_batched(stream& s, const gemm_batched_call& b) override;
    void jacobi_sweep(stream& s, const jacobi_call& c) override;
    /// The Level 3 diagonal blocks through CLBlast (vendor kernel, real types); the engine runs the
    /// other kernels' on the host reference.
    bool supports(tile_kind kind, dtype type, gemm_kernel k) const override;
    void execute(stream& s, const tile_op& op) override;

protected:
    /// gemm; where it only scales C (alpha == 0 or k == 0), only C's `triangle` when one is given.
    void gemm_or_scale(stream& s, const gemm_call& c, std::optional<uplo> triangle);

    void* raw_allocate(std::size_t bytes) override {
        if (bytes > root_.max_alloc)
            throw out_of_budget("clCreateBuffer on " + id() + ": " + format_bytes(bytes) +
                                " is more than the device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE " +
                                format_bytes(root_.max_alloc) + ")");
        cl_int e = CL_SUCCESS;
        cl_mem mem = clCreateBuffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &e);
        if (e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_HOST_MEMORY || e == CL_OUT_OF_RESOURCES)
            throw out_of_budget("clCreateBuffer on " + id() + " failed allocating " + format_bytes(bytes) + ": " +
                                error_name(e) + " (budget " + format_bytes(budget()) + ", " +
                                format_bytes(bytes_in_use()) + " in use)");
        if (e != CL_SUCCESS) throw_cl_error("clCreateBuffer of " + format_bytes(bytes), id(), e);
        try {
            return addresses().insert(mem, bytes, context_, id());
        } catch (...) {
            clReleaseMemObject(mem);
            throw;
        }
    }
    void raw_free(void* p) noexcept override {
        // Commands still queued on the buffer keep it alive: OpenCL retains it for them.
        if (cl_mem mem = addresses().erase(p)) clReleaseMemObject(mem);
    }

private:
    ocl_stream& own(stream& s, const char* operation) {
        auto* os = dynamic_cast<ocl_stream*>(&s);
        if (os == nullptr || &os->dev() != this)
            throw invalid_argument(std::string(operation) + " on " + id() + ": the stream belongs to " +
                                   s.owner().id());
        return *os;
    }
    void check_peer(const device& other) const {
        if (!can_copy_peer(other))
            throw invalid_argument(id() + ": no peer path to " + other.id() + " (copy through the host)");
    }
    bool check_2d(const copy_2d_desc& c) const {
        if (c.height > 1 && (c.dst_pitch < c.width_bytes || c.src_pitch < c.width_bytes))
            throw invalid_argument(id() + ": 2-D copy pitch smaller than its row width");
        return c.width_bytes != 0 && c.height != 0;
    }
    static std::size_t pitch(std::size_t p, const copy_2d_desc& c) { return c.height > 1 ? p : c.width_bytes; }
    static std::size_t extent_2d(const copy_2d_desc& c, std::size_t p) {
        return (c.height - 1) * pitch(p, c) + c.width_bytes;
    }
    // Host <-> device: `to_device` writes host memory into the buffer at device address `dev`.
    void host_transfer(ocl_stream& st, bool to_device, void* dev, void* host, std::size_t bytes, span_kind kind,
                       const std::string& name) {
        if (bytes == 0) return;
        const auto w = addresses().find(dev, bytes, id(), name + (to_device ? " destination" : " source"));
        cl_event ev = nullptr;
        if (to_device)
            TS_CL_CHECK(clEnqueueWriteBuffer(st.queue(), w.mem, CL_FALSE, w.offset, bytes, host, 0, nullptr,
                                             st.trace_event(ev)),
                        id());
        else
            TS_CL_CHECK(clEnqueueReadBuffer(st.queue(), w.mem, CL_FALSE, w.offset, bytes, host, 0, nullptr,
                                            st.trace_event(ev)),
                        id());
        st.submitted(ev, kind, name, bytes, 0);
    }
    void host_transfer_2d(ocl_stream& st, bool to_device, const copy_2d_desc& c, span_kind kind,
                          const std::string& name) {
        if (!check_2d(c)) return;
        const void* dev = to_device ? c.dst : c.src;
        const std::size_t dev_pitch = pitch(to_device ? c.dst_pitch : c.src_pitch, c);
        const std::size_t host_pitch = pitch(to_device ? c.src_pitch : c.dst_pitch, c);
        const auto w = addresses().find(dev, extent_2d(c, dev_pitch), id(), name + (to_device ? " destination" : " source"));
        const std::size_t buffer_origin[3] = {w.offset, 0, 0}, host_origin[3] = {0, 0, 0};
        const std::size_t region[3] = {c.width_bytes, c.height, 1};
        cl_event ev = nullptr;
        if (to_device)
            TS_CL_CHECK(clEnqueueWriteBufferRect(st.queue(), w.mem, CL_FALSE, buffer_origin, host_origin, region,
                                                 dev_pitch, 0, host_pitch, 0, c.src, 0, nullptr, st.trace_event(ev)),
                        id());
        else
            TS_CL_CHECK(clEnqueueReadBufferRect(st.queue(), w.mem, CL_FALSE, buffer_origin, host_origin, region,
                                                dev_pitch, 0, host_pitch, 0, c.dst, 0, nullptr, st.trace_event(ev)),
                        id());
        st.submitted(ev, kind, name, c.width_bytes * c.height, 0);
    }
    void device_to_device(ocl_stream& st, void* dst, const void* src, std::size_t bytes, span_kind kind,
                          const std::string& name) {
        if (bytes == 0) return;
        const auto r = addresses().find(src, bytes, id(), name + " source");
        const auto d = addresses().find(dst, bytes, id(), name + " destination");
        cl_event ev = nullptr;
        TS_CL_CHECK(clEnqueueCopyBuffer(st.queue(), r.mem, d.mem, r.offset, d.offset, bytes, 0, nullptr,
                                        st.trace_event(ev)),
                    id());
        st.submitted(ev, kind, name, bytes, 0);
    }
    void device_to_device_2d(ocl_stream& st, const copy_2d_desc& c, span_kind kind, const std::string& name) {
        if (!check_2d(c)) return;
        const auto r = addresses().find(c.src, extent_2d(c, c.src_pitch), id(), name + " source");
        const auto d = addresses().find(c.dst, extent_2d(c, c.dst_pitch), id(), name + " destination");
        const std::size_t src_origin[3] = {r.offset, 0, 0}, dst_origin[3] = {d.offset, 0, 0};
        const std::size_t region[3] = {c.width_bytes, c.height, 1};
        cl_event ev = nullptr;
        TS_CL_CHECK(clEnqueueCopyBufferRect(st.queue(), r.mem, d.mem, src_origin, dst_origin, region,
                                            pitch(c.src_pitch, c), 0, pitch(c.dst_pitch, c), 0, 0, nullptr,
                                            st.trace_event(ev)),
                    id());
        st.submitted(ev, kind, name, c.width_bytes * c.height, 0);
    }

    // Tile of the tiled GEMM from the device's limits: the largest whose work group and two
    // padded local tiles fit.
    tile_shape tile_for(dtype t) const {
        const std::size_t es = size_of(t);
        for (tile_shape s : {tile_shape{32, 4}, tile_shape{16, 2}, tile_shape{8, 1}}) {
            const std::size_t items = std::size_t(s.ts / s.wpt) * std::size_t(s.ts / s.wpt);
            if (items <= root_.max_work_group && 2 * std::size_t(s.ts) * std::size_t(s.ts + 1) * es <= info_.local_memory)
                return s;
        }
        return {8, 1};
    }
    // Program options of a value type, from the dtype table: the C type of its parts (REAL),
    // cl_khr_fp64 for double parts, and COMPLEX for two parts per element.
    std::string real_options(dtype t) const {
        const dtype_info& d = dtype_traits(t);
        return "-DREAL=" + std::string(d.c_real_type) + (d.real == dtype::f64 ? " -DTS_FP64" : "") +
               (d.is_complex ? " -DCOMPLEX" : "");
    }
    void require_fp64(const char* what, dtype t) const {
        if (dtype_traits(t).real == dtype::f64 && !info_.fp64)
            throw invalid_argument(std::string(what) + " " + std::string(to_string(t)) + " on " + id() + " (" +
                                   info_.name + "): the device has no double precision (cl_khr_fp64)");
    }

    root_device& root_;
    int index_;
    cl_context context_;
    queue_handle util_;  // staging maps and the clock anchor
    double clock_offset_ = 0;
    std::mutex streams_mutex_;
    std::vector<ocl_stream*> streams_;
    std::atomic<int> next_stream_id_{0};
};

// ------------------------------------------------------------------ stream implementation

ocl_stream::ocl_stream(ocl_device& dev, int id, stream_priority priority)
    : stream(dev, id), dev_(dev), queue_(dev.make_queue(priority)) {
    dev_.add_stream(this);
}

ocl_stream::~ocl_stream() {
    dev_.remove_stream(this);
    clFinish(queue_.get());  // host jobs run meanwhile on their thread and open the gates
    {
        std::unique_lock lock(host_mutex_);
        host_idle_cv_.wait(lock, [this] { return host_pending_ == 0; });
        host_stopping_ = true;
    }
    host_cv_.notify_all();
    if (host_thread_.joinable()) host_thread_.join();
    report_finished_spans(true);
}

void ocl_stream::synchronize() {
    const cl_int e = clFinish(queue_.get());
    {
        std::unique_lock lock(host_mutex_);
        host_idle_cv_.wait(lock, [this] { return host_pending_ == 0; });
    }
    report_finished_spans(true);
    if (e != CL_SUCCESS) throw_cl_error("clFinish", dev_.id() + " (stream " + std::to_string(id()) + ")", e);
    std::exception_ptr err;
    {
        std::lock_guard lock(host_mutex_);
        std::swap(err, error_);
    }
    if (err) std::rethrow_exception(err);
}

cl_event* ocl_stream::trace_event(cl_event& slot) const { return dev_.trace() != nullptr ? &slot : nullptr; }

void ocl_stream::submitted(cl_event ev, span_kind kind, std::string name, std::size_t bytes, double flops) {
    event_handle owned(ev);
    TS_CL_CHECK(clFlush(queue_.get()), dev_.id());
    if (owned) {
        std::lock_guard lock(spans_mutex_);
        spans_.push_back({std::move(owned), kind, std::move(name), bytes, flops});
    }
    report_finished_spans(false);
}

void ocl_stream::report_finished_spans(bool block) noexcept {
    struct finished {
        span_kind kind;
        std::string name;
        std::size_t bytes;
        double flops, t0, t1;
    };
    std::vector<finished> done;
    {
        std::lock_guard lock(spans_mutex_);
        while (!spans_.empty()) {
            pending_span& s = spans_.front();
            cl_int status = CL_COMPLETE;
            if (clGetEventInfo(s.event.get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr) !=
                CL_SUCCESS)
                status = -1;
            if (status > CL_COMPLETE && !block) break;
            if (status > CL_COMPLETE) {
                cl_event e = s.event.get();
                if (clWaitForEvents(1, &e) != CL_SUCCESS) status = -1;
                else status = CL_COMPLETE;
            }
            cl_ulong start = 0, end = 0;
            if (status == CL_COMPLETE &&
                clGetEventProfilingInfo(s.event.get(), CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr) ==
                    CL_SUCCESS &&
                clGetEventProfilingInfo(s.event.get(), CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) ==
                    CL_SUCCESS)
                done.push_back({s.kind, std::move(s.name), s.bytes, s.flops, dev_.clock_offset() + 1e-9 * double(start),
                                dev_.clock_offset() + 1e-9 * double(end)});
            spans_.pop_front();
        }
    }
    trace_sink* sink = dev_.trace();
    if (sink == nullptr) return;
    for (auto& d : done) {
        try {
            sink->record(dev_.id(), id(), d.kind, d.name, d.bytes, d.flops, d.t0, d.t1);
        } catch (...) {
            // A failing sink must not break the stream it observes.
        }
    }
}

void ocl_stream::store_error(std::exception_ptr e) noexcept {
    std::lock_guard lock(host_mutex_);
    if (!error_) error_ = std::move(e);
}

void ocl_stream::enqueue_host(std::function<void()> fn, std::string name, bool always) {
    const std::string& dev = dev_.id();
    host_job job;
    job.fn = std::move(fn);
    job.name = std::move(name);
    job.always = always;
    cl_int e = CL_SUCCESS;
    job.gate = clCreateUserEvent(dev_.context(), &e);
    if (e != CL_SUCCESS) throw_cl_error("clCreateUserEvent", dev, e);
    e = clEnqueueMarkerWithWaitList(queue_.get(), 0, nullptr, job.marker.out());
    if (e == CL_SUCCESS) e = clEnqueueBarrierWithWaitList(queue_.get(), 1, &job.gate, nullptr);
    if (e != CL_SUCCESS) {
        clSetUserEventStatus(job.gate, CL_COMPLETE);
        clReleaseEvent(job.gate);
        throw_cl_error("clEnqueueBarrierWithWaitList", dev, e);
    }
    TS_CL_CHECK(clFlush(queue_.get()), dev);
    {
        std::lock_guard lock(host_mutex_);
        host_jobs_.push_back(std::move(job));
        ++host_pending_;
        if (!host_thread_.joinable()) host_thread_ = std::thread([this] { serve_host_jobs(); });
    }
    host_cv_.notify_all();
}

void ocl_stream::serve_host_jobs() {
    for (;;) {
        host_job job;
        {
            std::unique_lock lock(host_mutex_);
            host_cv_.wait(lock, [this] { return host_stopping_ || !host_jobs_.empty(); });
            if (host_jobs_.empty()) return;
            job = std::move(host_jobs_.front());
            host_jobs_.pop_front();
        }
        cl_event marker = job.marker.get();
        const bool reached = clWaitForEvents(1, &marker) == CL_SUCCESS;
        bool skip = false;
        {
            std::lock_guard lock(host_mutex_);
            skip = !job.always && (error_ != nullptr || !reached);
        }
        if (!skip) {
            trace_sink* sink = dev_.trace();
            const double t0 = sink != nullptr ? trace_clock_seconds() : 0.0;
            try {
                job.fn();
            } catch (const tilestream::error&) {
                store_error(std::current_exception());
            } catch (const std::exception& ex) {
                store_error(std::make_exception_ptr(device_error("host function '" + job.name + "' on " + dev_.id() +
                                                                 " failed: " + ex.what())));
            } catch (...) {
                store_error(std::make_exception_ptr(
                    device_error("host function '" + job.name + "' on " + dev_.id() + " failed")));
            }
            if (sink != nullptr && !job.always) {
                try {
                    sink->record(dev_.id(), id(), span_kind::host, job.name, 0, 0, t0, trace_clock_seconds());
                } catch (...) {
                }
            }
        }
        clSetUserEventStatus(job.gate, CL_COMPLETE);
        clReleaseEvent(job.gate);
        {
            std::lock_guard lock(host_mutex_);
            --host_pending_;
        }
        host_idle_cv_.notify_all();
    }
}

cl_kernel ocl_stream::kernel(cl_program prog, const char* name) {
    auto key = std::make_pair(prog, std::string(name));
    if (auto it = kernels_.find(key); it != kernels_.end()) return it->second.get();
    cl_int e = CL_SUCCESS;
    kernel_handle k(clCreateKernel(prog, name, &e));
    if (e != CL_SUCCESS) throw_cl_error(std::string("clCreateKernel(") + name + ")", dev_.id(), e);
    return kernels_.emplace(key, std::move(k)).first->second.get();
}

cl_mem ocl_stream::scratch(std::size_t bytes) {
    if (bytes > scratch_bytes_) {
        const std::size_t size = std::max(bytes, 2 * scratch_bytes_);
        cl_int e = CL_SUCCESS;
        mem_handle m(clCreateBuffer(dev_.context(), CL_MEM_READ_WRITE, size, nullptr, &e));
        if (e != CL_SUCCESS) throw_cl_error("clCreateBuffer (scratch of " + format_bytes(size) + ")", dev_.id(), e);
        scratch_ = std::move(m);  // commands still queued on the old one keep it alive
        scratch_bytes_ = size;
    }
    return scratch_.get();
}

// ------------------------------------------------------------------ kernels

/// Sets the arguments of a kernel in order: cl_mem, cl_long, cl_int, float or double values.
struct kernel_args {
    cl_kernel k;
    const std::string& dev;
    cl_uint next = 0;
    template <class T>
    kernel_args& operator<<(const T& v) {
        const cl_uint index = next++;
        const cl_int e = clSetKernelArg(k, index, sizeof(T), &v);
        if (e != CL_SUCCESS) throw_cl_error("clSetKernelArg(" + std::to_string(index) + ")", dev, e);
        return *this;
    }
};

std::size_t round_up(std::size_t v, std::size_t m) { return (v + m - 1) / m * m; }

void ocl_device::gemm_batched(stream& s, const gemm_batched_call& b) {
#ifdef TILESTREAM_HAVE_CLBLAST
    const gemm_call& c = b.call;
    const bool product = c.alpha != 0.0 && c.k > 0 && c.m > 0 && c.n > 0;
    const operand_desc da = c.a_desc(), db = c.b_desc();
    const operand_desc::blas_view va = da.for_blas(c.layout_c), vb = db.for_blas(c.layout_c);
    if (!b.listed() && product && c.kernel == gemm_kernel::vendor && b.count > 1 &&
        va.trans != blas_trans::conj_none && vb.trans != blas_trans::conj_none) {
        ocl_stream& st = own(s, "gemm_batched");
        require_fp64("gemm", c.type);
        const std::size_t es = size_of(c.type);
        const auto locate = [&](const void* p, std::size_t one, index_t stride, const char* name) {
            const std::size_t bytes = one + std::size_t(stride) * std::size_t(b.count - 1) * es;
            const auto w = addresses().find(p, bytes, id(), std::string("gemm_batched operand ") + name);
            if (w.offset % es != 0)
                throw invalid_argument("gemm_batched on " + id() + ": " + name + " is not aligned to its elements");
            return std::make_pair(w.mem, std::size_t(w.offset / es));
        };
        cl_mem a_mem = nullptr, b_mem = nullptr, c_mem = nullptr;
        std::size_t a_off = 0, b_off = 0, c_off = 0;
        std::tie(a_mem, a_off) = locate(c.a, extent_bytes(c.m, c.k, da.row_stride(), da.col_stride(), es), b.stride_a, "A");
        std::tie(b_mem, b_off) = locate(c.b, extent_bytes(c.k, c.n, db.row_stride(), db.col_stride(), es), b.stride_b, "B");
        std::tie(c_mem, c_off) =
            locate(c.c, extent_bytes(c.m, c.n, c.c_row_stride(), c.c_col_stride(), es), b.stride_c, "C");
        if (c.beta == 0.0) {
            // CLBlast reads C even when beta is 0 (NaN * 0 is NaN): zero it first, the whole stack at
            // once when its matrices follow each other without gaps.
            const bool rows = c.layout_c == layout::row_major;
            gemm_call zero = c;
            zero.alpha = 0;
            zero.k = 0;
            if (c.ldc == (rows ? c.n : c.m) && b.stride_c == c.m * c.n) {
                (rows ? zero.m : zero.n) *= b.count;
                gemm(s, zero);
            } else {
                for (index_t i = 0; i < b.count; ++i) {
                    zero.c = b.item(i).c;
                    gemm(s, zero);
                }
            }
        }
        const CLBlastLayout lay = c.layout_c == layout::row_major ? CLBlastLayoutRowMajor : CLBlastLayoutColMajor;
        const auto trans = [](blas_trans t) {
            return t == blas_trans::none ? CLBlastTransposeNo : t == blas_trans::trans ? CLBlastTransposeYes
                                                                                        : CLBlastTransposeConjugate;
        };
        const CLBlastTranspose ta = trans(va.trans), tb = trans(vb.trans);
        const std::size_t ldc = std::size_t(c.c_desc().for_blas(c.layout_c).ld);
        const auto lda = std::size_t(va.ld), ldb = std::size_t(vb.ld);
        const auto sa = std::size_t(b.stride_a), sb = std::size_t(b.stride_b), sc = std::size_t(b.stride_c);
        const auto count = std::size_t(b.count);
        cl_command_queue q = st.queue();
        cl_event ev = nullptr;
        CLBlastStatusCode r = CLBlastSuccess;
        {
            std::lock_guard lock(clblast_mutex());
            const scalar al = c.alpha, be = c.beta;
            switch (c.type) {
                case dtype::f32:
                    r = CLBlastSgemmStridedBatched(lay, ta, tb, c.m, c.n, c.k, float(al.real()), a_mem, a_off, lda, sa, b_mem,
                                                   b_off, ldb, sb, float(be.real()), c_mem, c_off, ldc, sc, count, &q, &ev);
                    break;
                case dtype::f64:
                    r = CLBlastDgemmStridedBatched(lay, ta, tb, c.m, c.n, c.k, al.real(), a_mem, a_off, lda, sa, b_mem, b_off,
                                                   ldb, sb, be.real(), c_mem, c_off, ldc, sc, count, &q, &ev);
                    break;
                case dtype::c32:
                    r = CLBlastCgemmStridedBatched(lay, ta, tb, c.m, c.n, c.k, cl_float2{{float(al.real()), float(al.imag())}},
                                                   a_mem, a_off, lda, sa, b_mem, b_off, ldb, sb,
                                                   cl_float2{{float(be.real()), float(be.imag())}}, c_mem, c_off, ldc, sc,
                                                   count, &q, &ev);
                    break;
                case dtype::c64:
                    r = CLBlastZgemmStridedBatched(lay, ta, tb, c.m, c.n, c.k, cl_double2{{al.real(), al.imag()}}, a_mem, a_off,
                                                   lda, sa, b_mem, b_off, ldb, sb, cl_double2{{be.real(), be.imag()}}, c_mem,
                                                   c_off, ldc, sc, count, &q, &ev);
                    break;
            }
        }
        const std::string name = gemm_span_name(c) + " x" + std::to_string(b.count);
        if (r != CLBlastSuccess) {
            if (ev) clReleaseEvent(ev);
            throw device_error(std::string("CLBlast") + char(std::toupper(dtype_traits(c.type).blas_prefix)) +
                               "gemmStridedBatched failed on " + id() + ": " +
                               (r > -1000 ? error_name(r) : "CLBlast status " + std::to_string(int(r))) + " (" + name + ")");
        }
        if (trace() == nullptr) {
            if (ev) clReleaseEvent(ev);
            ev = nullptr;
        }
        st.submitted(ev, span_kind::kernel, name, 0, c.flops() * double(b.count));
        return;
    }
#endif
    device::gemm_batched(s, b);
}

void ocl_device::gemm_or_scale(stream& s, const gemm_call& c, std::optional<uplo> triangle) {
    ocl_stream& st = own(s, "gemm");
    if (!supports(c.kernel))
        throw invalid_argument("gemm on " + id() + ": the '" + std::string(to_string(c.kernel)) +
                               "' kernel does not run on OpenCL devices (naive, tiled" +
#ifdef TILESTREAM_HAVE_CLBLAST
                               ", vendor" +
#endif
                               " do)");
    const operand_desc da = c.a_desc(), db = c.b_desc();
    const bool reads_ab = c.alpha != 0.0 && c.k > 0;
    if (reads_ab) {
        check_operand(id(), "A", c.a, da.stored_rows(), da.stored_cols(), c.lda, c.layout_a);
        check_operand(id(), "B", c.b, db.stored_rows(), db.stored_cols(), c.ldb, c.layout_b);
    }
    check_operand(id(), "C", c.c, c.m, c.n, c.ldc, c.layout_c);
    if (c.m == 0 || c.n == 0) return;
    require_fp64("gemm", c.type);
    const std::size_t es = size_of(c.type);

    const auto locate = [&](const void* p, std::size_t bytes, const char* name) {
        const auto w = addresses().find(p, bytes, id(), std::string("gemm operand ") + name);
        if (w.offset % es != 0)
            throw invalid_argument("gemm on " + id() + ": " + name + " is not aligned to its " +
                                   std::to_string(es) + "-byte elements");
        return std::make_pair(w.mem, cl_long(w.offset / es));
    };
    // Plain variables, not a structured binding: the lambdas below capture them (clang 14, which
    // builds the fuzz harnesses, cannot capture bindings).
    cl_mem c_mem = nullptr;
    cl_long c_off = 0;
    std::tie(c_mem, c_off) = locate(c.c, extent_bytes(c.m, c.n, c.c_row_stride(), c.c_col_stride(), es), "C");
    cl_mem a_mem = c_mem, b_mem = c_mem;  // unread placeholders when alpha == 0 or k == 0
    cl_long a_off = 0, b_off = 0;
    if (reads_ab) {
        std::tie(a_mem, a_off) = locate(c.a, extent_bytes(c.m, c.k, da.row_stride(), da.col_stride(), es), "A");
        std::tie(b_mem, b_off) = locate(c.b, extent_bytes(c.k, c.n, db.row_stride(), db.col_stride(), es), "B");
    }
    const std::string name = gemm_span_name(c);

    const auto launch = [&](const char* kernel_name, const std::string& options, const std::size_t* global,
                            const std::size_t* local, bool with_ab, scalar beta) {
        cl_program prog = program(index_, "gemm", sources::gemm_cl, options);
        auto lock = st.launch_lock();
        cl_kernel k = st.kernel(prog, kernel_name);
        kernel_args args{k, id()};
        args << cl_long(c.m) << cl_long(c.n);
        if (with_ab) args << cl_long(c.k);
        // A scalar as the kernel's elem: REAL, or REAL2 (real part first) for complex types.
        const auto value = [&](scalar v) {
            switch (c.type) {
                case dtype::f32: args << float(v.real()); break;
                case dtype::f64: args << v.real(); break;
                case dtype::c32: args << cl_float2{{float(v.real()), float(v.imag())}}; break;
                case dtype::c64: args << cl_double2{{v.real(), v.imag()}}; break;
            }
        };
        if (with_ab) value(c.alpha);
        value(beta);
        if (with_ab)
            args << a_mem << a_off << cl_long(da.row_stride()) << cl_long(da.col_stride()) << b_mem << b_off
                 << cl_long(db.row_stride()) << cl_long(db.col_stride());
        args << c_mem << c_off << cl_long(c.c_row_stride()) << cl_long(c.c_col_stride());
        if (with_ab) args << cl_int(da.conjugated()) << cl_int(db.conjugated());
        else args << cl_int(!triangle ? 0 : *triangle == uplo::lower ? 1 : 2);
        cl_event ev = nullptr;
        TS_CL_CHECK(clEnqueueNDRangeKernel(st.queue(), k, 2, nullptr, global, local, 0, nullptr, st.trace_event(ev)),
                    id());
        st.submitted(ev, span_kind::kernel, name, 0, with_ab ? c.flops() : 0.0);
    };
    const std::size_t local8[2] = {8, 8};
    const std::size_t global8[2] = {round_up(std::size_t(c.n), 8), round_up(std::size_t(c.m), 8)};
    const bool small_groups = root_.max_work_group < 64;
    const std::string base = real_options(c.type) + " -DTS=8 -DWPT=1";

    if (c.kernel == gemm_kernel::naive) {
        launch("gemm_naive", base, global8, small_groups ? nullptr : local8, true, c.beta);
        return;
    }
    const auto tiled = [&] {
        const tile_shape t = tile_for(c.type);
        const std::size_t rts = std::size_t(t.ts / t.wpt);
        const std::size_t local[2] = {rts, rts};
        const std::size_t global[2] = {(std::size_t(c.n) + t.ts - 1) / t.ts * rts,
                                       (std::size_t(c.m) + t.ts - 1) / t.ts * rts};
        launch("gemm_tiled",
               real_options(c.type) + " -DTS=" + std::to_string(t.ts) + " -DWPT=" + std::to_string(t.wpt), global,
               local, true, c.beta);
    };
    if (c.kernel == gemm_kernel::tiled) return tiled();
#ifdef TILESTREAM_HAVE_CLBLAST
    // One layout for all three: an operand stored the other way is its transpose in C's layout.
    const operand_desc::blas_view va = da.for_blas(c.layout_c), vb = db.for_blas(c.layout_c);
    // CLBlast has no conjugate-without-transpose (a conjugated operand stored in C's other layout):
    // such a call runs our tiled kernel, which reads any strides and conjugates on load.
    if (reads_ab && (va.trans == blas_trans::conj_none || vb.trans == blas_trans::conj_none)) return tiled();
    // CLBlast reads C even when beta == 0 (NaN * 0 is NaN) and A, B when alpha == 0: those cases
    // are zeroed or scaled by our own kernel first.
    if (!reads_ab || c.beta == 0.0) launch("gemm_scale_c", base, global8, small_groups ? nullptr : local8, false, c.beta);
    if (!reads_ab) return;
    const CLBlastLayout lay = c.layout_c == layout::row_major ? CLBlastLayoutRowMajor : CLBlastLayoutColMajor;
    const auto trans = [](blas_trans t) {
        switch (t) {
            case blas_trans::none: return CLBlastTransposeNo;
            case blas_trans::trans: return CLBlastTransposeYes;
            case blas_trans::conj_trans:
            case blas_trans::conj_none: break;  // conj_none ran the tiled kernel above
        }
        return CLBlastTransposeConjugate;
    };
    const CLBlastTranspose ta = trans(va.trans), tb = trans(vb.trans);
    const std::size_t ldc = std::size_t(c.c_desc().for_blas(c.layout_c).ld);
    const auto lda = std::size_t(va.ld), ldb = std::size_t(vb.ld);
    cl_command_queue q = st.queue();
    cl_event ev = nullptr;
    CLBlastStatusCode r = CLBlastSuccess;
    {
        std::lock_guard lock(clblast_mutex());
        // beta == 0: C was zeroed above, and CLBlast multiplies it by exactly 0.
        const scalar al = c.alpha, be = c.beta;
        switch (c.type) {
            case dtype::f32:
                r = CLBlastSgemm(lay, ta, tb, c.m, c.n, c.k, float(al.real()), a_mem, a_off, lda, b_mem, b_off, ldb,
                                 float(be.real()), c_mem, c_off, ldc, &q, &ev);
                break;
            case dtype::f64:
                r = CLBlastDgemm(lay, ta, tb, c.m, c.n, c.k, al.real(), a_mem, a_off, lda, b_mem, b_off, ldb, be.real(),
                                 c_mem, c_off, ldc, &q, &ev);
                break;
            case dtype::c32:
                r = CLBlastCgemm(lay, ta, tb, c.m, c.n, c.k, cl_float2{{float(al.real()), float(al.imag())}}, a_mem,
                                 a_off, lda, b_mem, b_off, ldb, cl_float2{{float(be.real()), float(be.imag())}}, c_mem,
                                 c_off, ldc, &q, &ev);
                break;
            case dtype::c64:
                r = CLBlastZgemm(lay, ta, tb, c.m, c.n, c.k, cl_double2{{al.real(), al.imag()}}, a_mem, a_off, lda,
                                 b_mem, b_off, ldb, cl_double2{{be.real(), be.imag()}}, c_mem, c_off, ldc, &q, &ev);
                break;
        }
    }
    if (r != CLBlastSuccess) {
        if (ev) clReleaseEvent(ev);
        throw device_error(std::string("CLBlast") + char(std::toupper(dtype_traits(c.type).blas_prefix)) + "gemm failed on " +
                           id() + ": " + (r > -1000 ? error_name(r) : "CLBlast status " + std::to_string(int(r))) +
                           " (" + name + ")");
    }
    if (trace() == nullptr) {
        if (ev) clReleaseEvent(ev);
        ev = nullptr;
    }
    st.submitted(ev, span_kind::kernel, name, 0, c.flops());
#endif
}

bool ocl_device::supports(tile_kind kind, dtype type, gemm_kernel k) const {
    if (kind == tile_kind::gemm) return supports(k);
#ifdef TILESTREAM_HAVE_CLBLAST
    const bool fp64 = dtype_traits(type).real == dtype::f64;
    return k == gemm_kernel::vendor && (!fp64 || info_.fp64) && detail::engine::blas_has(kind, type);
#else
    (void)type;
    return false;
#endif
}

void ocl_device::execute(stream& s, const tile_op& op) {
    if (op.kind == tile_kind::gemm) return gemm(s, detail::engine::as_gemm_call(op));
    if (!supports(op.kind, op.type, op.kernel))
        throw invalid_argument(id() + ": no '" + std::string(to_string(op.kernel)) + "' " + std::string(to_string(op.kind)) +
                               " tile kernel for " + std::string(to_string(op.type)) + " (CLBlast runs the vendor ones)");
#ifdef TILESTREAM_HAVE_CLBLAST
    ocl_stream& st = own(s, "execute");
    const bool herm = op.kind == tile_kind::herk || op.kind == tile_kind::her2k;
    const bool rank_k = op.kind == tile_kind::syrk || op.kind == tile_kind::syr2k || herm;
    const bool solves = op.kind == tile_kind::trmm || op.kind == tile_kind::trsm;
    const index_t rows = rank_k ? op.n : op.m, cols = op.n;
    if (rows == 0 || cols == 0) return;
    // C <- beta C (alpha == 0 or k == 0; trmm/trsm: C <- 0) by our own scaling, A and B never read:
    // CLBlast would read them (and NaN * 0 is NaN). A syrk-family tile's scaling keeps to its
    // triangle: the engine may write the tile back whole (engine::write_regions_whole).
    const auto scale = [&](scalar beta) {
        gemm_call z;
        z.type = op.type;
        z.m = rows;
        z.n = cols;
        z.k = 0;
        z.alpha = 0;
        z.beta = beta;
        z.c = const_cast<void*>(op.c.data);
        z.ldc = op.c.ld;
        z.layout_c = op.c.lay;
        z.kernel = gemm_kernel::vendor;
        gemm_or_scale(s, z, rank_k ? std::optional(op.uplo) : std::nullopt);
    };
    if (!op.reads_ab()) {
        if (!solves && op.beta == scalar(1)) return;
        // (The engine runs a Hermitian tile's scaling, which zeroes its diagonal's imaginary parts,
        // on the reference.)
        if (herm) throw invalid_argument(id() + ": " + std::string(to_string(op.kind)) + " scaling runs on the reference");
        scale(solves ? scalar(0) : op.beta);
        return;
    }
    // CLBlast reads C when beta == 0: overwrite it with zeros first.
    if (!solves && op.beta == scalar(0)) scale(0.0);
    const detail::engine::column_major_tile r = detail::engine::as_column_major(op);
    if (!r.representable) throw invalid_argument(id() + ": " + std::string(to_string(op.kind)) + " tile: " + r.why);
    const std::size_t es = size_of(op.type);
    // The bytes a column-major stored_rows x stored_cols operand spans (the last column ends at its
    // last row, not at ld: an operand may be a block inside a tile, as LU's steps use).
    const auto locate = [&](const void* p, index_t ld, index_t stored_cols, index_t stored_rows, const char* name) {
        const index_t span = ld * (std::max<index_t>(stored_cols, 1) - 1) + std::max<index_t>(stored_rows, 1);
        const auto w = addresses().find(p, std::size_t(span) * es, id(), std::string(to_string(op.kind)) + " operand " + name);
        if (w.offset % es != 0)
            throw invalid_argument(std::string(to_string(op.kind)) + " on " + id() + ": " + name + " is not aligned");
        return std::make_pair(w.mem, std::size_t(w.offset / es));
    };
    const bool tn = r.trans == blas_trans::none;
    const index_t na = r.side_ == side::left ? r.m : r.n;
    const index_t a_cols = rank_k ? (tn ? r.k : r.n) : na;
    cl_mem a_mem = nullptr, b_mem = nullptr, c_mem = nullptr;
    std::size_t a_off = 0, b_off = 0, c_off = 0;
    const index_t a_rows = rank_k ? (tn ? r.n : r.k) : na;
    const index_t c_rows = rank_k ? r.n : r.m;
    std::tie(a_mem, a_off) = locate(r.a, r.lda, a_cols, a_rows, "A");
    if (op.kind == tile_kind::syr2k || op.kind == tile_kind::her2k)
        std::tie(b_mem, b_off) = locate(r.b, r.ldb, a_cols, a_rows, "B");
    if (op.kind == tile_kind::symm || op.kind == tile_kind::hemm) std::tie(b_mem, b_off) = locate(r.b, r.ldb, r.n, r.m, "B");
    std::tie(c_mem, c_off) = locate(r.c, r.ldc, r.n, c_rows, "C");
    const CLBlastLayout lay = CLBlastLayoutColMajor;
    const CLBlastSide sd = r.side_ == side::left ? CLBlastSideLeft : CLBlastSideRight;
    const CLBlastTriangle tri = r.uplo_ == uplo::lower ? CLBlastTriangleLower : CLBlastTriangleUpper;
    const CLBlastTranspose tr = tn ? CLBlastTransposeNo : r.trans == blas_trans::trans ? CLBlastTransposeYes
                                                                                       : CLBlastTransposeConjugate;
    const CLBlastDiagonal dg = r.diag_ == diag::unit ? CLBlastDiagonalUnit : CLBlastDiagonalNonUnit;
    const std::size_t m = std::size_t(r.m), n = std::size_t(r.n), k = std::size_t(r.k);
    const std::size_t lda = std::size_t(r.lda), ldb = std::size_t(r.ldb), ldc = std::size_t(r.ldc);
    cl_command_queue q = st.queue();
    cl_event ev = nullptr;
    CLBlastStatusCode status = CLBlastSuccess;
    // One CLBlast entry per precision (S, D, C, Z); complex scalars as cl_float2/cl_double2, HERK's
    // and HER2K's real ones as float/double.
    const auto call = [&]<class T>() {
        using R = real_type_t<T>;
        using V = std::conditional_t<!is_complex_v<T>, T, std::conditional_t<std::is_same_v<R, float>, cl_float2, cl_double2>>;
        const auto as_v = [](scalar x) {
            if constexpr (is_complex_v<T>) return V{{R(x.real()), R(x.imag())}};
            else return V(x.real());
        };
        const V al = as_v(r.alpha), be = as_v(r.beta);
        const R al_re = R(r.alpha.real()), be_re = R(r.beta.real());
        constexpr dtype t = dtype_of<T>();
        if constexpr (!is_complex_v<T>) {
            switch (op.kind) {
                case tile_kind::trsm:
                    return t == dtype::f32 ? CLBlastStrsm(lay, sd, tri, tr, dg, m, n, float(al), a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev)
                                           : CLBlastDtrsm(lay, sd, tri, tr, dg, m, n, double(al), a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::trmm:
                    return t == dtype::f32 ? CLBlastStrmm(lay, sd, tri, tr, dg, m, n, float(al), a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev)
                                           : CLBlastDtrmm(lay, sd, tri, tr, dg, m, n, double(al), a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::symm:
                    return t == dtype::f32 ? CLBlastSsymm(lay, sd, tri, m, n, float(al), a_mem, a_off, lda, b_mem, b_off, ldb, float(be), c_mem, c_off, ldc, &q, &ev)
                                           : CLBlastDsymm(lay, sd, tri, m, n, double(al), a_mem, a_off, lda, b_mem, b_off, ldb, double(be), c_mem, c_off, ldc, &q, &ev);
                case tile_kind::syrk:
                    return t == dtype::f32 ? CLBlastSsyrk(lay, tri, tr, n, k, float(al), a_mem, a_off, lda, float(be), c_mem, c_off, ldc, &q, &ev)
                                           : CLBlastDsyrk(lay, tri, tr, n, k, double(al), a_mem, a_off, lda, double(be), c_mem, c_off, ldc, &q, &ev);
                case tile_kind::syr2k:
                    return t == dtype::f32 ? CLBlastSsyr2k(lay, tri, tr, n, k, float(al), a_mem, a_off, lda, b_mem, b_off, ldb, float(be), c_mem, c_off, ldc, &q, &ev)
                                           : CLBlastDsyr2k(lay, tri, tr, n, k, double(al), a_mem, a_off, lda, b_mem, b_off, ldb, double(be), c_mem, c_off, ldc, &q, &ev);
                default: return CLBlastNotImplemented;
            }
        } else {
            constexpr bool c32 = t == dtype::c32;
            switch (op.kind) {
                case tile_kind::trsm:
                    if constexpr (c32) return CLBlastCtrsm(lay, sd, tri, tr, dg, m, n, al, a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZtrsm(lay, sd, tri, tr, dg, m, n, al, a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::trmm:
                    if constexpr (c32) return CLBlastCtrmm(lay, sd, tri, tr, dg, m, n, al, a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZtrmm(lay, sd, tri, tr, dg, m, n, al, a_mem, a_off, lda, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::symm:
                    if constexpr (c32) return CLBlastCsymm(lay, sd, tri, m, n, al, a_mem, a_off, lda, b_mem, b_off, ldb, be, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZsymm(lay, sd, tri, m, n, al, a_mem, a_off, lda, b_mem, b_off, ldb, be, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::hemm:
                    if constexpr (c32) return CLBlastChemm(lay, sd, tri, m, n, al, a_mem, a_off, lda, b_mem, b_off, ldb, be, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZhemm(lay, sd, tri, m, n, al, a_mem, a_off, lda, b_mem, b_off, ldb, be, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::syrk:
                    if constexpr (c32) return CLBlastCsyrk(lay, tri, tr, n, k, al, a_mem, a_off, lda, be, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZsyrk(lay, tri, tr, n, k, al, a_mem, a_off, lda, be, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::herk:
                    if constexpr (c32) return CLBlastCherk(lay, tri, tr, n, k, al_re, a_mem, a_off, lda, be_re, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZherk(lay, tri, tr, n, k, al_re, a_mem, a_off, lda, be_re, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::syr2k:
                    if constexpr (c32) return CLBlastCsyr2k(lay, tri, tr, n, k, al, a_mem, a_off, lda, b_mem, b_off, ldb, be, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZsyr2k(lay, tri, tr, n, k, al, a_mem, a_off, lda, b_mem, b_off, ldb, be, c_mem, c_off, ldc, &q, &ev);
                case tile_kind::her2k:
                    if constexpr (c32) return CLBlastCher2k(lay, tri, tr, n, k, al, a_mem, a_off, lda, b_mem, b_off, ldb, be_re, c_mem, c_off, ldc, &q, &ev);
                    else return CLBlastZher2k(lay, tri, tr, n, k, al, a_mem, a_off, lda, b_mem, b_off, ldb, be_re, c_mem, c_off, ldc, &q, &ev);
                default: return CLBlastNotImplemented;
            }
        }
    };
    {
        std::lock_guard lock(clblast_mutex());
        status = visit_dtype(op.type, call);
    }
    const std::string name = std::string(to_string(op.kind)) + " vendor " + std::string(to_string(op.type)) + " " +
                             std::to_string(rows) + "x" + std::to_string(cols);
    if (status != CLBlastSuccess) {
        if (ev) clReleaseEvent(ev);
        throw device_error("CLBlast " + std::string(to_string(op.kind)) + " failed on " + id() + ": " +
                           (status > -1000 ? error_name(status) : "CLBlast status " + std::to_string(int(status))) +
                           " (" + name + ")");
    }
    if (trace() == nullptr) {
        if (ev) clReleaseEvent(ev);
        ev = nullptr;
    }
    st.submitted(ev, span_kind::kernel, name, 0, op.flops());
#else
    (void)s;
#endif
}

void ocl_device::jacobi_sweep(stream& s, const jacobi_call& c) {
    ocl_stream& st = own(s, "jacobi_sweep");
    const index_t rows = c.row_end - c.row_begin, cols = c.col_end - c.col_begin;
    if (rows <= 0 || cols <= 0) return;  // an empty sweep adds nothing to the residual
    if (!info_.fp64)
        throw invalid_argument("jacobi on " + id() + " (" + info_.name +
                               "): the residual is summed in double precision, which the device lacks (cl_khr_fp64)");
    if (c.row_begin < 1 || c.col_begin < 1 || c.ld < c.col_end + 1)
        throw invalid_argument("jacobi on " + id() + ": the swept points need a halo of one point around them");
    const std::size_t es = size_of(c.type);
    const std::size_t span = std::size_t((c.row_end + 1) * c.ld) * es;  // through the halo row below
    const auto in = addresses().find(c.in, span, id(), "jacobi field in");
    const auto out = addresses().find(c.out, span, id(), "jacobi field out");
    if (in.offset % es != 0 || out.offset % es != 0)
        throw invalid_argument("jacobi on " + id() + ": a field is not aligned to its elements");
    address_table::location res;
    if (c.residual != nullptr) res = addresses().find(c.residual, sizeof(double), id(), "jacobi residual");
    cl_program prog = program(index_, "jacobi", sources::jacobi_cl, real_options(c.type));

    auto lock = st.launch_lock();
    cl_mem partial = st.scratch(std::size_t(rows) * sizeof(double));
    cl_kernel k = st.kernel(prog, "jacobi_sweep");
    kernel_args args{k, id()};
    args << in.mem << cl_long(in.offset / es) << out.mem << cl_long(out.offset / es) << cl_long(c.ld)
         << cl_long(c.row_begin) << cl_long(c.col_begin) << cl_long(rows) << cl_long(cols) << partial
         << cl_int(c.residual != nullptr);
    const std::size_t global = std::size_t(rows);
    cl_event ev = nullptr;
    TS_CL_CHECK(clEnqueueNDRangeKernel(st.queue(), k, 1, nullptr, &global, nullptr, 0, nullptr, st.trace_event(ev)),
                id());
    st.submitted(ev, span_kind::kernel, "jacobi " + std::string(to_string(c.type)), 0, 4.0 * double(rows) * double(cols));
    if (c.residual == nullptr) return;
    if (res.offset % sizeof(double) != 0)
        throw invalid_argument("jacobi on " + id() + ": the residual is not aligned to a double");
    cl_kernel sum = st.kernel(prog, "sum_residual");
    kernel_args sargs{sum, id()};
    sargs << partial << cl_long(rows) << res.mem << cl_long(res.offset / sizeof(double));
    const std::size_t one = 1;
    ev = nullptr;
    TS_CL_CHECK(clEnqueueNDRangeKernel(st.queue(), sum, 1, nullptr, &one, nullptr, 0, nullptr, st.trace_event(ev)),
                id());
    st.submitted(ev, span_kind::kernel, "jacobi residual", 0, double(rows));
}

}  // namespace
}  // namespace tilestream::opencl

namespace tilestream::backends {

std::unique_ptr<device> open_opencl_device(int index, int slice, int slices, std::optional<std::size_t> budget) {
    auto& roots = opencl::roots();
    if (index < 0 || index >= static_cast<int>(roots.size()))
        throw invalid_argument("no OpenCL device opencl:" + std::to_string(index) + " (" +
                               std::to_string(roots.size()) + " present: " + opencl::discovery_status() + ")");
    if (slices < 1 || slice < 0 || slice >= slices)
        throw invalid_argument("bad logical slice " + std::to_string(slice) + " of " + std::to_string(slices));
    opencl::root_device& root = *roots[std::size_t(index)];
    device_info info = root.info;
    if (slices > 1) info.id += "." + std::to_string(slice);
    info.slice = slice;
    info.slices = slices;
    info.memory_bytes = root.info.memory_bytes / std::size_t(slices);
    info.memory_free = info.memory_bytes;
    info.budget_bytes = budget ? *budget : opencl::default_budget(info.memory_bytes);
    return std::make_unique<opencl::ocl_device>(std::move(info), root, index);
}

}  // namespace tilestream::backends
