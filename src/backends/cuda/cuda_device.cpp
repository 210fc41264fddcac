// The CUDA device: budgeted device memory, pinned staging, streams with priorities, events,
// asynchronous 1-D/2-D/peer copies, the GEMM kernels (cuBLAS, naive, tiled), Jacobi, and traces.
#include "backends/cuda/cuda_device.hpp"

#include "backends/backend_module.hpp"
#include "backends/cuda/cuda_blas3_logic.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "core/blas_mapping.hpp"
#include "core/engine/tile_kernels.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace tilestream::cuda {

// ------------------------------------------------------------------ device_guard

device_guard::device_guard(int ordinal, std::string_view device_id) {
    TS_CUDA_CHECK(cudaGetDevice(&previous_), device_id);
    if (previous_ != ordinal) {
        TS_CUDA_CHECK(cudaSetDevice(ordinal), device_id);
        switched_ = true;
    }
}

device_guard::device_guard(int ordinal, std::nothrow_t) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
        (void)cudaGetLastError();
        previous_ = -1;
    }
    if (previous_ != ordinal) {
        if (cudaSetDevice(ordinal) == cudaSuccess)
            switched_ = previous_ >= 0;
        else
            (void)cudaGetLastError();
    }
}

device_guard::~device_guard() {
    if (switched_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

// ------------------------------------------------------------------ callback threads
//
// CUDA forbids CUDA calls in a host function (cudaLaunchHostFunc): they fail with
// cudaErrorNotPermitted (compute-sanitizer reports each one) and may deadlock. A host function's
// captures can hold the last owner of a CUDA event (an engine task's completion event, a waiter's
// handle), so its destructor may run there. Such handles are parked and destroyed by the next
// ordinary thread that enters the backend (recording an event, enqueueing a host function,
// synchronizing a stream) or at exit.

namespace {
thread_local bool on_cuda_callback_thread = false;

struct parked_events {
    std::mutex mutex;
    std::vector<std::pair<int, cudaEvent_t>> events;  // (ordinal, handle)
    std::atomic<bool> any{false};
};
parked_events& parked() {
    static auto* p = new parked_events;  // never destroyed: callbacks may run during exit
    return *p;
}

void destroy_event_now(int ordinal, cudaEvent_t event) noexcept {
    device_guard guard(ordinal, std::nothrow);
    if (cudaEventDestroy(event) != cudaSuccess) (void)cudaGetLastError();
}

/// Marks the running thread as a CUDA callback thread for its lifetime (declared before anything
/// the callback destroys, so it outlives them).
struct callback_thread_scope {
    callback_thread_scope() noexcept { on_cuda_callback_thread = true; }
    ~callback_thread_scope() { on_cuda_callback_thread = false; }
    callback_thread_scope(const callback_thread_scope&) = delete;
    callback_thread_scope& operator=(const callback_thread_scope&) = delete;
};
}  // namespace

void destroy_event(int ordinal, cudaEvent_t event) noexcept {
    if (event == nullptr) return;
    if (!on_cuda_callback_thread) {
        destroy_event_now(ordinal, event);
        return;
    }
    parked_events& p = parked();
    try {
        std::lock_guard lock(p.mutex);
        p.events.emplace_back(ordinal, event);
        p.any.store(true, std::memory_order_release);
    } catch (...) {
        // Out of memory while parking: the handle leaks rather than breaking the callback.
    }
}

void destroy_parked_events() noexcept {
    parked_events& p = parked();
    if (on_cuda_callback_thread || !p.any.load(std::memory_order_acquire)) return;
    std::vector<std::pair<int, cudaEvent_t>> events;
    {
        std::lock_guard lock(p.mutex);
        events.swap(p.events);
        p.any.store(false, std::memory_order_release);
    }
    for (auto [ordinal, event] : events) destroy_event_now(ordinal, event);
}

// ------------------------------------------------------------------ helpers

namespace {

static_assert(host_register_portable == cudaHostRegisterPortable &&
                  host_register_read_only == cudaHostRegisterReadOnly,
              "cuda_logic.hpp's registration flags carry CUDA's values");
static_assert(int(cuda_data_type::r_32f) == CUDA_R_32F && int(cuda_data_type::r_64f) == CUDA_R_64F &&
                  int(cuda_data_type::c_32f) == CUDA_C_32F && int(cuda_data_type::c_64f) == CUDA_C_64F,
              "dtype_traits.hpp's cuda_data_type carries CUDA's values");

/// cuBLAS's data type of an element, from the dtype table.
cudaDataType_t cuda_type(dtype t) { return static_cast<cudaDataType_t>(dtype_traits(t).cuda); }

std::string pointer_text(const void* p) {
    std::ostringstream o;
    o << p;
    return o.str();
}

// Pinned user memory is process-wide (cudaHostRegisterPortable), while register_host may be
// called by several devices for the same buffer: registrations are counted, and memory that was
// pinned before tilestream saw it is never unpinned by tilestream.
struct host_registration {
    int count = 0;
    bool external = false;
};
std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
}
std::map<void*, host_registration>& registry() {
    static std::map<void*, host_registration> r;
    return r;
}

// Peer access is a property of the GPUs' (primary) contexts, shared by all devices of the process.
std::mutex& peer_mutex() {
    static std::mutex m;
    return m;
}
std::map<std::pair<int, int>, bool>& peer_cache() {
    static std::map<std::pair<int, int>, bool> c;
    return c;
}

// Enables access from GPU `from` to GPU `to` once; true when possible.
bool enable_peer_access(int from, int to, std::string_view device_id) {
    std::lock_guard lock(peer_mutex());
    auto& cache = peer_cache();
    if (auto it = cache.find({from, to}); it != cache.end()) return it->second;
    int can = 0;
    TS_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to), device_id);
    peer_enable_status status = peer_enable_status::refused;
    if (can) {
        device_guard guard(from, device_id);
        const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
        status = e == cudaSuccess                          ? peer_enable_status::enabled
                 : e == cudaErrorPeerAccessAlreadyEnabled ? peer_enable_status::already_enabled
                 : is_sticky(e)                           ? peer_enable_status::context_lost
                                                          : peer_enable_status::refused;
        if (status == peer_enable_status::context_lost) TS_CUDA_CHECK(e, device_id);
        // Enabled before (by us or the application), or refused (e.g. too many peers): either
        // way the error is cleared, and a refusal means copies go through host staging.
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
    const bool usable = use_peer_path(can != 0, status);
    cache[{from, to}] = usable;
    return usable;
}

std::string gemm_span_name(const gemm_call& c) {
    std::ostringstream name;
    name << "gemm " << to_string(c.kernel) << " " << to_string(c.type);
    if (dtype_traits(c.type).real == dtype::f32 && c.math == math_mode::tf32 && c.kernel == gemm_kernel::vendor)
        name << "/tf32";
    name << " " << to_string(c.op_a) << to_string(c.op_b) << " " << c.m << "x" << c.n << "x" << c.k;
    return name.str();
}

}  // namespace

// ------------------------------------------------------------------ clock_anchor

clock_anchor::~clock_anchor() { destroy_event(ordinal, event); }

// ------------------------------------------------------------------ cuda_stream

cuda_stream::cuda_stream(cuda_device& dev, int id, stream_priority priority)
    : stream(dev, id), dev_(dev) {
    device_guard guard(dev.ordinal(), dev.id());
    int least = 0, greatest = 0;
    TS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), dev.id());
    // CUDA's greatest priority is its numerically lowest value.
    const int value = priority != stream_priority::normal ? greatest : least;
    // Non-blocking: never implicitly ordered after the legacy default stream of other code.
    TS_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, value), dev.id());
    dev_.add_stream(this);
}

cuda_stream::~cuda_stream() {
    // First out of the registry, so that the device's synchronize() never reaches a stream
    // being torn down (it holds the registry while it synchronizes).
    dev_.remove_stream(this);
    device_guard guard(dev_.ordinal(), std::nothrow);
    // Host functions still queued point at this object: let them run before it goes away.
    if (cudaStreamSynchronize(stream_) != cudaSuccess) (void)cudaGetLastError();
    report_finished_spans();
    {
        std::lock_guard lock(spans_mutex_);
        for (auto& s : spans_) {  // left over only after a failed operation
            dev_.return_timing_event(s.begin);
            dev_.return_timing_event(s.end);
        }
        spans_.clear();
    }
    if (blas_ != nullptr) (void)cublasDestroy(blas_);
    if (solver_ != nullptr) destroy_cusolver_handle(solver_);
    if (solver_workspace_ != nullptr && cudaFree(solver_workspace_) != cudaSuccess) (void)cudaGetLastError();
    if (solver_info_device_ != nullptr && cudaFree(solver_info_device_) != cudaSuccess) (void)cudaGetLastError();
    if (solver_info_host_ != nullptr && cudaFreeHost(solver_info_host_) != cudaSuccess) (void)cudaGetLastError();
    if (cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
}

void cuda_stream::synchronize() {
    destroy_parked_events();
    device_guard guard(dev_.ordinal(), dev_.id());
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess)
        throw_cuda_error("cudaStreamSynchronize",
                         dev_.id() + " (stream " + std::to_string(id()) + ")", e);
    report_finished_spans();
    rethrow_stored_error();
}

cublasHandle_t cuda_stream::blas() {
    if (blas_ == nullptr) {
        cublasHandle_t h = nullptr;
        TS_CUDA_CHECK(cublasCreate(&h), dev_.id());
        const cublasStatus_t bound = cublasSetStream(h, stream_);
        // Default math: fp32 stays IEEE fp32 (no TF32, no emulation) unless a call asks for TF32
        // through its compute type.
        const cublasStatus_t mode =
            bound == CUBLAS_STATUS_SUCCESS ? cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) : bound;
        if (mode != CUBLAS_STATUS_SUCCESS) {
            (void)cublasDestroy(h);
            throw_cublas_error(bound != CUBLAS_STATUS_SUCCESS ? "cublasSetStream" : "cublasSetMathMode",
                               dev_.id(), mode);
        }
        blas_ = h;
    }
    return blas_;
}

void* cuda_stream::solver_workspace(std::size_t bytes) {
    if (bytes > solver_workspace_bytes_) {
        // The old workspace may still be in use by work queued on this stream.
        TS_CUDA_CHECK(cudaStreamSynchronize(stream_), dev_.id());
        if (solver_workspace_ != nullptr) TS_CUDA_CHECK(cudaFree(solver_workspace_), dev_.id());
        solver_workspace_ = nullptr;
        solver_workspace_bytes_ = 0;
        TS_CUDA_CHECK(cudaMalloc(&solver_workspace_, bytes), dev_.id());
        solver_workspace_bytes_ = bytes;
    }
    return solver_workspace_;
}

int* cuda_stream::solver_info_device() {
    if (solver_info_device_ == nullptr) TS_CUDA_CHECK(cudaMalloc(&solver_info_device_, sizeof(int)), dev_.id());
    return solver_info_device_;
}

int* cuda_stream::solver_info_host() {
    if (solver_info_host_ == nullptr) {
        void* p = nullptr;
        TS_CUDA_CHECK(cudaHostAlloc(&p, sizeof(int), cudaHostAllocDefault), dev_.id());
        solver_info_host_ = static_cast<int*>(p);
    }
    return solver_info_host_;
}

void cuda_stream::store_error(std::exception_ptr e) noexcept {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::move(e);
}

bool cuda_stream::has_error() {
    std::lock_guard lock(error_mutex_);
    return error_ != nullptr;
}

void cuda_stream::rethrow_stored_error() {
    std::exception_ptr e;
    {
        std::lock_guard lock(error_mutex_);
        std::swap(e, error_);
    }
    if (e) std::rethrow_exception(e);
}

void cuda_stream::add_span(pending_span&& span) {
    std::lock_guard lock(spans_mutex_);
    spans_.push_back(std::move(span));
}

void cuda_stream::report_finished_spans() noexcept {
    struct finished {
        span_kind kind;
        std::string name;
        std::size_t bytes;
        double flops, t0, t1;
    };
    std::vector<finished> done;
    {
        device_guard guard(dev_.ordinal(), std::nothrow);
        std::lock_guard lock(spans_mutex_);
        while (!spans_.empty()) {
            pending_span& s = spans_.front();
            const cudaError_t q = cudaEventQuery(s.end);
            if (q != cudaSuccess) {
                // Not finished yet, or the operation failed (the stream's synchronize says so).
                if (q != cudaErrorNotReady) (void)cudaGetLastError();
                break;
            }
            float ms0 = 0, ms1 = 0;
            if (cudaEventElapsedTime(&ms0, s.anchor->event, s.begin) == cudaSuccess &&
                cudaEventElapsedTime(&ms1, s.anchor->event, s.end) == cudaSuccess) {
                done.push_back({s.kind, std::move(s.name), s.bytes, s.flops,
                                s.anchor->host_seconds + 1e-3 * ms0,
                                s.anchor->host_seconds + 1e-3 * ms1});
            } else {
                (void)cudaGetLastError();
            }
            dev_.return_timing_event(s.begin);
            dev_.return_timing_event(s.end);
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

// ------------------------------------------------------------------ cuda_event

native_event::~native_event() { destroy_event(ordinal, event); }

cuda_event::cuda_event(cuda_device& dev) : device_id_(dev.id()) {}

void cuda_event::record(stream& s) {
    auto* cs = dynamic_cast<cuda_stream*>(&s);
    if (cs == nullptr)
        throw invalid_argument("event of " + device_id_ + " cannot be recorded on a stream of " +
                               s.owner().id() + ", which is not a CUDA device");
    const int gpu = cs->gpu().ordinal();
    destroy_parked_events();
    device_guard guard(gpu, cs->gpu().id());
    std::lock_guard lock(mutex_);
    // A CUDA event is recorded on a stream of its own GPU, and a handle a waiter holds keeps
    // the point it marked: otherwise a fresh handle (no timing: lighter for synchronisation).
    if (!current_ || current_.use_count() > 1 || current_->ordinal != gpu) {
        auto fresh = std::make_shared<native_event>();
        fresh->ordinal = gpu;
        TS_CUDA_CHECK(cudaEventCreateWithFlags(&fresh->event, cudaEventDisableTiming),
                      cs->gpu().id());
        current_ = std::move(fresh);
    }
    current_->device_id = cs->gpu().id();
    TS_CUDA_CHECK(cudaEventRecord(current_->event, cs->native()), current_->device_id);
}

std::shared_ptr<const native_event> cuda_event::current() const {
    std::lock_guard lock(mutex_);
    return current_;
}

std::function<void()> cuda_event::host_waiter() {
    return [h = current()] {
        if (!h) return;  // never recorded: nothing to wait for
        device_guard guard(h->ordinal, h->device_id);
        TS_CUDA_CHECK(cudaEventSynchronize(h->event), h->device_id);
    };
}

void cuda_event::synchronize() { host_waiter()(); }

bool cuda_event::ready() {
    const auto h = current();
    if (!h) return true;
    device_guard guard(h->ordinal, h->device_id);
    const cudaError_t e = cudaEventQuery(h->event);
    if (e == cudaErrorNotReady) return false;
    TS_CUDA_CHECK(e, h->device_id);
    return true;
}

// ------------------------------------------------------------------ cuda_device

cuda_device::cuda_device(device_info info, int ordinal)
    : device(std::move(info)), ordinal_(ordinal), trsm_block_(trsm_block_from(std::getenv("TILESTREAM_CUDA_TRSM_BLOCK"))) {
    device_guard guard(ordinal_, id());
    int pitch = 0;
    TS_CUDA_CHECK(cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, ordinal_), id());
    max_pitch_ = static_cast<std::size_t>(pitch);
}

cuda_device::~cuda_device() {
    destroy_parked_events();
    device_guard guard(ordinal_, std::nothrow);
    anchor_.reset();
    if (anchor_stream_ != nullptr && cudaStreamDestroy(anchor_stream_) != cudaSuccess)
        (void)cudaGetLastError();
    std::lock_guard lock(events_mutex_);
    for (cudaEvent_t e : free_timing_events_)
        if (cudaEventDestroy(e) != cudaSuccess) (void)cudaGetLastError();
}

void cuda_device::add_stream(cuda_stream* s) {
    std::lock_guard lock(streams_mutex_);
    streams_.push_back(s);
}

void cuda_device::remove_stream(cuda_stream* s) noexcept {
    std::lock_guard lock(streams_mutex_);
    streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
}

cudaEvent_t cuda_device::take_timing_event() {
    {
        std::lock_guard lock(events_mutex_);
        if (!free_timing_events_.empty()) {
            cudaEvent_t e = free_timing_events_.back();
            free_timing_events_.pop_back();
            return e;
        }
    }
    cudaEvent_t e = nullptr;
    TS_CUDA_CHECK(cudaEventCreate(&e), id());  // with timing, for trace spans
    return e;
}

void cuda_device::return_timing_event(cudaEvent_t e) noexcept {
    if (e == nullptr) return;
    std::lock_guard lock(events_mutex_);
    free_timing_events_.push_back(e);
}

cuda_stream& cuda_device::own_stream(stream& s, const char* operation) {
    auto* cs = dynamic_cast<cuda_stream*>(&s);
    if (cs == nullptr || &cs->gpu() != this)
        throw invalid_argument(std::string(operation) + " on " + id() +
                               ": the stream belongs to " + s.owner().id());
    return *cs;
}

// ---- memory

void* cuda_device::raw_allocate(std::size_t bytes) {
    device_guard guard(ordinal_, id());
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        std::size_t free = 0, total = 0;
        if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
        throw out_of_budget("cudaMalloc failed on " + id() + ": out of memory allocating " +
                            format_bytes(bytes) + " (" + format_bytes(free) + " free on GPU " +
                            std::to_string(ordinal_) + ", budget " + format_bytes(budget()) +
                            ", " + format_bytes(bytes_in_use()) + " in use)");
    }
    TS_CUDA_CHECK(e, id());
    return p;
}

void cuda_device::raw_free(void* p) noexcept {
    device_guard guard(ordinal_, std::nothrow);
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        std::fprintf(stderr, "tilestream: cudaFree failed on %s: %s\n", id().c_str(),
                     cudaGetErrorString(e));
    }
}

host_staging_buffer cuda_device::allocate_host_staging(std::size_t bytes) {
    if (bytes == 0) return {};
    device_guard guard(ordinal_, id());
    void* p = nullptr;
    // Portable: pinned for every GPU of the process, so any device may copy from it.
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) throw_cuda_error("cudaHostAlloc of " + format_bytes(bytes), id(), e);
    const int gpu = ordinal_;  // the buffer may outlive this device
    return host_staging_buffer(p, bytes, [gpu](void* q) {
        device_guard g(gpu, std::nothrow);
        if (cudaFreeHost(q) != cudaSuccess) (void)cudaGetLastError();
    });
}

void cuda_device::register_host(void* p, std::size_t bytes) {
    if (p == nullptr || bytes == 0) return;
    std::lock_guard lock(registry_mutex());
    auto& reg = registry();
    if (auto it = reg.find(p); it != reg.end()) {
        ++it->second.count;
        return;
    }
    device_guard guard(ordinal_, id());
    int read_only_supported = 0;
    TS_CUDA_CHECK(cudaDeviceGetAttribute(&read_only_supported,
                                         cudaDevAttrHostRegisterReadOnlySupported, ordinal_),
                  id());
    // A read-only mapped input (a .npy opened PROT_READ) is refused without the read-only flag.
    const bool read_only = host_range_read_only(p, bytes);
    const host_registration_choice how =
        choose_host_registration(read_only, read_only_supported != 0);
    const std::string what = "cudaHostRegister of " + format_bytes(bytes) +
                             (read_only ? " of read-only memory" : "") + " at " + pointer_text(p);
    if (!how.pin) refuse_pinning(what, how.reason);
    const cudaError_t e = cudaHostRegister(p, bytes, how.flags);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        (void)cudaGetLastError();
        reg[p] = {1, true};
        return;
    }
    if (e != cudaSuccess) {
        if (is_sticky(e)) throw_cuda_error(what, id(), e);
        (void)cudaGetLastError();
        refuse_pinning(what, cudaGetErrorString(e));
    }
    reg[p] = {1, false};
}

void cuda_device::refuse_pinning(const std::string& what, const std::string& reason) {
    const std::string message = what + " failed on " + id() + ": " + reason +
                                "; copies from this memory stay pageable (slower)";
    // Callers may carry on without pinning; the warning makes that visible once per kind of
    // refusal (a run pins the same operands again on every repeat). The registry lock is held.
    static std::set<std::string> warned;
    if (warned.insert(id() + ": " + reason).second)
        std::fprintf(stderr, "tilestream: warning: %s\n", message.c_str());
    throw device_error(message);
}

void cuda_device::unregister_host(void* p) {
    if (p == nullptr) return;
    std::lock_guard lock(registry_mutex());
    auto& reg = registry();
    auto it = reg.find(p);
    if (it == reg.end())
        throw invalid_argument("unregister_host on " + id() + ": " + pointer_text(p) +
                               " was not registered with register_host");
    if (--it->second.count > 0) return;
    const bool external = it->second.external;
    reg.erase(it);
    if (external) return;
    device_guard guard(ordinal_, id());
    TS_CUDA_CHECK(cudaHostUnregister(p), id());
}

// ---- streams and events

std::unique_ptr<stream> cuda_device::create_stream(stream_priority p) {
    return std::make_unique<cuda_stream>(*this, next_stream_id_++, p);
}

std::unique_ptr<event> cuda_device::create_event() { return std::make_unique<cuda_event>(*this); }

void cuda_device::wait(stream& s, event& e) {
    cuda_stream& cs = own_stream(s, "wait");
    if (auto* ce = dynamic_cast<cuda_event*>(&e)) {
        const auto h = ce->current();
        if (!h) return;  // waiting for an event never recorded waits for nothing
        device_guard guard(ordinal_, id());
        // The event may live on another GPU: CUDA orders across GPUs without the host, and
        // takes the record current now.
        TS_CUDA_CHECK(cudaStreamWaitEvent(cs.native(), h->event, 0), id());
        return;
    }
    // An event of another backend (a CPU device) cannot be waited for by the GPU: the host
    // waits now for its record current now, so everything enqueued on s after this call starts
    // after it. (Blocking inside a host function on s instead would hold CUDA's callback thread,
    // which host functions of other streams may need first.)
    e.host_waiter()();
}

void cuda_device::synchronize() {
    std::exception_ptr first;
    std::lock_guard lock(streams_mutex_);
    for (cuda_stream* s : streams_) {
        try {
            s->synchronize();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

namespace {
struct host_call {
    std::function<void()> fn;
    cuda_stream* stream;
    std::string name;
};

// Runs on a CUDA runtime thread: must not call CUDA (CUDA events its captures release are parked,
// see destroy_event), must not throw.
void CUDART_CB run_host_call(void* data) {
    const callback_thread_scope scope;  // outlives `call` and what it owns
    std::unique_ptr<host_call> call(static_cast<host_call*>(data));
    device& dev = call->stream->owner();
    trace_sink* sink = dev.trace();
    const double t0 = sink != nullptr ? trace_clock_seconds() : 0.0;
    // After a failed host function the stream's later ones are skipped (the backends' rule: a
    // failed stream skips what follows), so a marker after a failed load never reports it done.
    if (call->stream->has_error()) return;
    try {
        call->fn();
    } catch (const tilestream::error&) {
        call->stream->store_error(std::current_exception());  // already names its operation
    } catch (const std::exception& ex) {
        call->stream->store_error(std::make_exception_ptr(device_error(
            "host function '" + call->name + "' on " + dev.id() + " failed: " + ex.what())));
    } catch (...) {
        call->stream->store_error(std::make_exception_ptr(device_error(
            "host function '" + call->name + "' on " + dev.id() + " failed: unknown exception")));
    }
    if (sink != nullptr) {
        try {
            sink->record(dev.id(), call->stream->id(), span_kind::host, call->name, 0, 0, t0,
                         trace_clock_seconds());
        } catch (...) {
        }
    }
}
}  // namespace

void cuda_device::enqueue_host(stream& s, std::function<void()> fn, const std::string& name) {
    cuda_stream& cs = own_stream(s, "enqueue_host");
    destroy_parked_events();
    auto call = std::make_unique<host_call>(host_call{std::move(fn), &cs, name});
    device_guard guard(ordinal_, id());
    TS_CUDA_CHECK(cudaLaunchHostFunc(cs.native(), run_host_call, call.get()), id());
    call.release();  // owned by the callback now
}

// ---- tracing
//
// A span per copy or kernel comes from two timing events recorded around the operation on its
// stream, converted to the host trace clock through an anchor: an event recorded on an idle
// stream and waited for, whose host time is the midpoint of the record and the wait (a few
// microseconds of uncertainty). Anchors are renewed every second so that the float milliseconds
// of cudaEventElapsedTime stay precise. This does not stall the stream, unlike timestamps taken
// in host functions around the operation, which would serialise it with the host. Spans are
// read back when their events have completed: at the next traced operation of the stream, or at
// its synchronize() at the latest.

std::shared_ptr<const clock_anchor> cuda_device::current_anchor() {
    std::lock_guard lock(anchor_mutex_);
    const double now = trace_clock_seconds();
    if (anchor_ && now - anchor_->host_seconds < 1.0) return anchor_;
    device_guard guard(ordinal_, id());
    if (anchor_stream_ == nullptr)
        TS_CUDA_CHECK(cudaStreamCreateWithFlags(&anchor_stream_, cudaStreamNonBlocking), id());
    auto a = std::make_shared<clock_anchor>();
    a->ordinal = ordinal_;
    TS_CUDA_CHECK(cudaEventCreate(&a->event), id());
    const double before = trace_clock_seconds();
    TS_CUDA_CHECK(cudaEventRecord(a->event, anchor_stream_), id());
    TS_CUDA_CHECK(cudaEventSynchronize(a->event), id());
    const double after = trace_clock_seconds();
    a->host_seconds = 0.5 * (before + after);
    anchor_ = std::move(a);
    return anchor_;
}

template <class Name, class Op>
void cuda_device::traced(cuda_stream& cs, span_kind kind, Name&& name, std::size_t bytes,
                         double flops, Op&& op) {
    if (trace() == nullptr) {
        op();
        return;
    }
    pending_span span;
    span.anchor = current_anchor();
    span.kind = kind;
    span.name = name();
    span.bytes = bytes;
    span.flops = flops;
    span.begin = take_timing_event();
    try {
        span.end = take_timing_event();
        TS_CUDA_CHECK(cudaEventRecord(span.begin, cs.native()), id());
        op();
        TS_CUDA_CHECK(cudaEventRecord(span.end, cs.native()), id());
    } catch (...) {
        return_timing_event(span.begin);
        return_timing_event(span.end);
        throw;
    }
    cs.add_span(std::move(span));
    cs.report_finished_spans();
}

// ---- copies

void cuda_device::copy_1d(cuda_stream& cs, void* dst, const void* src, std::size_t bytes,
                          cudaMemcpyKind kind, span_kind span, const char* name) {
    if (bytes == 0) return;
    device_guard guard(ordinal_, id());
    traced(cs, span, [&] { return std::string(name); }, bytes, 0.0, [&] {
        TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cs.native()), id());
    });
}

void cuda_device::copy_2d(cuda_stream& cs, const copy_2d_desc& c, cudaMemcpyKind kind,
                          span_kind span, const char* name) {
    const copy_2d_route route = plan_copy_2d(c, max_pitch_, std::string(name) + " on " + id());
    if (route == copy_2d_route::nothing) return;
    if (route == copy_2d_route::one_copy) {
        copy_1d(cs, c.dst, c.src, c.width_bytes * c.height, kind, span, name);
        return;
    }
    device_guard guard(ordinal_, id());
    traced(cs, span, [&] { return std::string(name); }, c.width_bytes * c.height, 0.0, [&] {
        if (route == copy_2d_route::pitched) {
            TS_CUDA_CHECK(cudaMemcpy2DAsync(c.dst, c.dst_pitch, c.src, c.src_pitch, c.width_bytes,
                                            c.height, kind, cs.native()),
                          id());
            return;
        }
        // Pitches beyond what cudaMemcpy2D accepts: one copy per row.
        for (std::size_t r = 0; r < c.height; ++r)
            TS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(c.dst) + r * c.dst_pitch,
                                          static_cast<const char*>(c.src) + r * c.src_pitch,
                                          c.width_bytes, kind, cs.native()),
                          id());
    });
}

void cuda_device::copy_to_device(stream& s, void* dst, const void* host_src, std::size_t bytes) {
    copy_1d(own_stream(s, "copy_to_device"), dst, host_src, bytes, cudaMemcpyHostToDevice,
            span_kind::copy_h2d, "copy_to_device");
}

void cuda_device::copy_to_host(stream& s, void* host_dst, const void* src, std::size_t bytes) {
    copy_1d(own_stream(s, "copy_to_host"), host_dst, src, bytes, cudaMemcpyDeviceToHost,
            span_kind::copy_d2h, "copy_to_host");
}

void cuda_device::copy_within(stream& s, void* dst, const void* src, std::size_t bytes) {
    copy_1d(own_stream(s, "copy_within"), dst, src, bytes, cudaMemcpyDeviceToDevice,
            span_kind::copy_d2d, "copy_within");
}

void cuda_device::copy_2d_to_device(stream& s, const copy_2d_desc& c) {
    copy_2d(own_stream(s, "copy_2d_to_device"), c, cudaMemcpyHostToDevice, span_kind::copy_h2d,
            "copy_2d_to_device");
}

void cuda_device::copy_2d_to_host(stream& s, const copy_2d_desc& c) {
    copy_2d(own_stream(s, "copy_2d_to_host"), c, cudaMemcpyDeviceToHost, span_kind::copy_d2h,
            "copy_2d_to_host");
}

void cuda_device::copy_2d_within(stream& s, const copy_2d_desc& c) {
    copy_2d(own_stream(s, "copy_2d_within"), c, cudaMemcpyDeviceToDevice, span_kind::copy_d2d,
            "copy_2d_within");
}

bool cuda_device::can_copy_peer(const device& other) const {
    const auto* o = dynamic_cast<const cuda_device*>(&other);
    if (o == nullptr) return false;
    if (o->ordinal_ == ordinal_) return true;  // slices of one GPU share its memory
    // Copies are driven from this GPU; access both ways lets the copy engines of either side
    // read and write directly over NVLink/PCIe.
    if (!enable_peer_access(ordinal_, o->ordinal_, id())) return false;
    enable_peer_access(o->ordinal_, ordinal_, o->id());
    return true;
}

void cuda_device::copy_peer(stream& s, device& other, void* dst, const void* src,
                            std::size_t bytes) {
    cuda_stream& cs = own_stream(s, "copy_peer");
    if (bytes == 0) return;
    if (!can_copy_peer(other))
        throw invalid_argument("copy_peer from " + id() + " to " + other.id() +
                               ": no direct access between them (copy through the host instead)");
    const int to = static_cast<const cuda_device&>(other).ordinal_;
    if (to == ordinal_) {
        copy_1d(cs, dst, src, bytes, cudaMemcpyDeviceToDevice, span_kind::copy_peer, "copy_peer");
        return;
    }
    device_guard guard(ordinal_, id());
    traced(cs, span_kind::copy_peer, [&] { return "copy_peer to " + other.id(); }, bytes, 0.0, [&] {
        TS_CUDA_CHECK(cudaMemcpyPeerAsync(dst, to, src, ordinal_, bytes, cs.native()), id());
    });
}

void cuda_device::copy_2d_peer(stream& s, device& other, const copy_2d_desc& c) {
    cuda_stream& cs = own_stream(s, "copy_2d_peer");
    // cudaMemcpy3DPeerAsync takes any pitch: never row by row.
    const copy_2d_route route =
        plan_copy_2d(c, SIZE_MAX, "copy_2d_peer from " + id() + " to " + other.id());
    if (route == copy_2d_route::nothing) return;
    if (!can_copy_peer(other))
        throw invalid_argument("copy_2d_peer from " + id() + " to " + other.id() +
                               ": no direct access between them (copy through the host instead)");
    const int to = static_cast<const cuda_device&>(other).ordinal_;
    if (to == ordinal_) {
        copy_2d(cs, c, cudaMemcpyDeviceToDevice, span_kind::copy_peer, "copy_2d_peer");
        return;
    }
    if (route == copy_2d_route::one_copy) {
        copy_peer(s, other, c.dst, c.src, c.width_bytes * c.height);
        return;
    }
    device_guard guard(ordinal_, id());
    traced(cs, span_kind::copy_peer, [&] { return "copy_2d_peer to " + other.id(); },
           c.width_bytes * c.height, 0.0, [&] {
               cudaMemcpy3DPeerParms p{};
               p.srcPtr = make_cudaPitchedPtr(const_cast<void*>(c.src), c.src_pitch, c.width_bytes,
                                              c.height);
               p.srcDevice = ordinal_;
               p.dstPtr = make_cudaPitchedPtr(c.dst, c.dst_pitch, c.width_bytes, c.height);
               p.dstDevice = to;
               p.extent = make_cudaExtent(c.width_bytes, c.height, 1);
               TS_CUDA_CHECK(cudaMemcpy3DPeerAsync(&p, cs.native()), id());
           });
}

// ---- kernels

void cuda_device::gemm(stream& s, const gemm_call& call) {
    cuda_stream& cs = own_stream(s, "gemm");
    const gemm_work work = check_gemm_call(call, id());
    if (work == gemm_work::none) return;
    const bool reads_ab = work == gemm_work::product;
    // cuBLAS cannot conjugate without transposing: such a call runs the tiled kernel.
    const gemm_kernel kernel = reads_ab ? kernel_for_call(call) : call.kernel;
    // Launch shapes and library arguments are settled on the host first, so a call CUDA would
    // refuse is an error naming the device rather than a launch or cuBLAS status.
    tiled_launch tiled;
    if (reads_ab && kernel == gemm_kernel::tiled) {
        tiled = plan_tiled_launch(call);
        if (!tiled.error.empty()) throw invalid_argument("gemm on " + id() + ": " + tiled.error);
    }
    device_guard guard(ordinal_, id());
    traced(cs, span_kind::kernel, [&] { return gemm_span_name(call); }, 0,
           reads_ab ? call.flops() : 0.0, [&] {
               if (!reads_ab) {
                   // alpha == 0 or k == 0: C <- beta*C, A and B never read.
                   TS_CUDA_CHECK(launch_gemm_scale_c(call, cs.native()), id());
                   return;
               }
               switch (kernel) {
                   case gemm_kernel::naive:
                       TS_CUDA_CHECK(launch_gemm_naive(call, cs.native()), id());
                       break;
                   case gemm_kernel::tiled:
                       TS_CUDA_CHECK(launch_gemm_tiled(call, tiled, cs.native()), id());
                       break;
                   case gemm_kernel::vendor:
                   case gemm_kernel::reference:
                       gemm_vendor(cs, call);
                       break;
               }
           });
}

namespace {

/// alpha and beta of a call as cuBLAS reads them for its data type (float, double, cuComplex or
/// cuDoubleComplex: parts as std::complex lays them out), computed in the parts' precision, and
/// the compute type.
struct cublas_scalars {
    std::complex<float> alpha32, beta32;
    std::complex<double> alpha64, beta64;
    bool single;
    explicit cublas_scalars(const gemm_call& call)
        : alpha32(call.alpha), beta32(call.beta), alpha64(call.alpha), beta64(call.beta),
          single(dtype_traits(call.type).real == dtype::f32) {}
    const void* alpha() const { return single ? static_cast<const void*>(&alpha32) : &alpha64; }
    const void* beta() const { return single ? static_cast<const void*>(&beta32) : &beta64; }
    cublasComputeType_t compute(math_mode math) const {
        return !single ? CUBLAS_COMPUTE_64F : (math == math_mode::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
    }
};

/// cuBLAS's op of a mapped operand (column_major_gemm::expressible: no conjugate without a transpose).
cublasOperation_t cublas_op(bool trans, bool conj) { return conj ? CUBLAS_OP_C : trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

void cuda_device::gemm_vendor(cuda_stream& cs, const gemm_call& call) {
    // cuBLAS is column-major: a row-major C is computed as C^T = op(B)^T op(A)^T (no copies).
    const column_major_gemm p = as_column_major(call);
    if (const std::string bad = column_major_gemm_violation(p); !bad.empty())
        throw invalid_argument("gemm (vendor) on " + id() + ": cuBLAS would refuse the mapped call: " +
                               bad);
    // kernel_for_call sent conjugates without a transpose to the tiled kernel.
    const cublasOperation_t op1 = cublas_op(p.trans_x, p.conj_x), op2 = cublas_op(p.trans_y, p.conj_y);
    const cublas_scalars scalars(call);
    const void* alpha = scalars.alpha();
    const void* beta = scalars.beta();
    const cudaDataType_t data = cuda_type(call.type);
    const cublasComputeType_t compute = scalars.compute(call.math);

    std::lock_guard lock(cs.blas_mutex());
    cublasHandle_t h = cs.blas();
    if (std::max({p.rows, p.cols, p.k, p.ldx, p.ldy, p.ldz}) <= INT_MAX) {
        TS_CUDA_CHECK(cublasGemmEx(h, op1, op2, int(p.rows), int(p.cols), int(p.k), alpha, p.x,
                                   data, int(p.ldx), p.y, data, int(p.ldy), beta, call.c, data,
                                   int(p.ldz), compute, CUBLAS_GEMM_DEFAULT),
                      id());
    } else {
        TS_CUDA_CHECK(cublasGemmEx_64(h, op1, op2, p.rows, p.cols, p.k, alpha, p.x, data, p.ldx,
                                      p.y, data, p.ldy, beta, call.c, data, p.ldz, compute,
                                      CUBLAS_GEMM_DEFAULT),
                      id());
    }
}

void cuda_device::gemm_batched(stream& s, const gemm_batched_call& b) {
    const gemm_call& call = b.call;
    const bool product = call.alpha != 0.0 && call.k > 0 && call.m > 0 && call.n > 0;
    if (b.listed() || !product || call.kernel != gemm_kernel::vendor || b.count <= 1) {
        device::gemm_batched(s, b);  // one call per product (pointer lists are refused there)
        return;
    }
    cuda_stream& cs = own_stream(s, "gemm_batched");
    (void)check_gemm_call(call, id());
    // cuBLAS is column-major: a row-major C is C^T = op(B)^T op(A)^T; each operand keeps its stride.
    const column_major_gemm p = as_column_major(call);
    if (const std::string bad = column_major_gemm_violation(p); !bad.empty())
        throw invalid_argument("gemm_batched (vendor) on " + id() + ": cuBLAS would refuse the mapped call: " + bad);
    const long long stride_x = p.x == call.a ? b.stride_a : b.stride_b, stride_y = p.x == call.a ? b.stride_b : b.stride_a;
    // cuBLAS has no conjugate without a transpose: such stacks go one product at a time (below).
    const cublasOperation_t op1 = cublas_op(p.trans_x, p.conj_x), op2 = cublas_op(p.trans_y, p.conj_y);
    const cublas_scalars scalars(call);
    const void* alpha = scalars.alpha();
    const void* beta = scalars.beta();
    const cudaDataType_t data = cuda_type(call.type);
    const cublasComputeType_t compute = scalars.compute(call.math);
    if (!p.expressible() ||
        std::max({p.rows, p.cols, p.k, p.ldx, p.ldy, p.ldz, b.count}) > INT_MAX) {
        device::gemm_batched(s, b);
        return;
    }
    device_guard guard(ordinal_, id());
    traced(cs, span_kind::kernel, [&] { return gemm_span_name(call) + " x" + std::to_string(b.count); }, 0,
           call.flops() * double(b.count), [&] {
               std::lock_guard lock(cs.blas_mutex());
               TS_CUDA_CHECK(cublasGemmStridedBatchedEx(cs.blas(), op1, op2, int(p.rows), int(p.cols), int(p.k), alpha, p.x,
                                                        data, int(p.ldx), stride_x, p.y, data, int(p.ldy), stride_y, beta,
                                                        call.c, data, int(p.ldz), b.stride_c, int(b.count), compute,
                                                        CUBLAS_GEMM_DEFAULT),
                             id());
           });
}

void cuda_device::execute(stream& s, const tile_op& op) {
    if (op.kind == tile_kind::gemm) return gemm(s, detail::engine::as_gemm_call(op));
    cuda_stream& cs = own_stream(s, "execute");
    if (!supports(op.kind, op.type, op.kernel))
        throw invalid_argument(id() + ": no '" + std::string(to_string(op.kernel)) + "' " + std::string(to_string(op.kind)) +
                               " tile kernel for " + std::string(to_string(op.type)) + " (cuBLAS runs the vendor ones)");
    if (op.kind == tile_kind::trsm) {
        // cuBLAS solves a whole tile far below its GEMM rate (H200, f64, 1024 x 1024: 365 us
        // against 47 us for a GEMM of the same size): blocks of trsm_block_ rows, GEMMs between.
        // Measured on an H200: c64 2048 10-15% faster, f32/f64 within noise (its solves stay
        // slow at every block width: 256 x 512 in 85 us); inverted diagonal blocks would be next.
        const std::vector<tile_op> steps = detail::engine::blocked_trsm(op, trsm_block_);
        if (steps.size() > 1) {
            for (const tile_op& step : steps) execute(s, step);  // each block solve is whole
            return;
        }
    }
    if (op.kind == tile_kind::potrf) return potrf(cs, op);
    const cublas_tile_work work = plan_cublas_tile(op, id());
    if (work.nothing) return;
    if (work.scale_only) return gemm(s, work.scale);  // C <- beta C (or 0), A and B never read
    device_guard guard(ordinal_, id());
    traced(cs, span_kind::kernel, [&] { return std::string(to_string(op.kind)) + " vendor " + std::string(to_string(op.type)); },
           0, op.flops(), [&] {
               std::lock_guard lock(cs.blas_mutex());
               run_cublas_tile(cs.blas(), work.call, op.type, id());
           });
}

void cuda_device::potrf(cuda_stream& cs, const tile_op& op) {
    if (op.n == 0) {
        if (op.info != nullptr) enqueue_host(cs, [info = op.info] { *info = 0; }, "potrf info");
        return;
    }
    const detail::engine::column_major_tile call = detail::engine::as_column_major(op);
    if (!call.representable) throw invalid_argument("potrf on " + id() + ": " + call.why);
    if (std::max(call.n, call.ldc) > INT_MAX) throw invalid_argument("potrf on " + id() + ": a tile beyond 32-bit sizes");
    device_guard guard(ordinal_, id());
    traced(cs, span_kind::kernel, [&] { return "potrf vendor " + std::string(to_string(op.type)); }, 0, op.flops(), [&] {
        std::lock_guard lock(cs.blas_mutex());
        run_cusolver_potrf(cs, call, op.type, id());
    });
    if (op.info == nullptr) return;
    // LAPACK's info, as cuSOLVER reports it (the order of the leading minor that is not positive
    // definite, 0 when none), to the caller's int in stream order: through one pinned int per
    // stream, which the next potrf on the stream overwrites only after this host function ran.
    int* pinned = cs.solver_info_host();
    {
        std::lock_guard lock(cs.blas_mutex());
        TS_CUDA_CHECK(cudaMemcpyAsync(pinned, cs.solver_info_device(), sizeof(int), cudaMemcpyDeviceToHost, cs.native()), id());
    }
    enqueue_host(cs, [pinned, info = op.info] { *info = *pinned; }, "potrf info");
}

void cuda_device::jacobi_sweep(stream& s, const jacobi_call& call) {
    cuda_stream& cs = own_stream(s, "jacobi_sweep");
    if (!check_jacobi_call(call, id())) return;
    const jacobi_launch launch = plan_jacobi_launch(call);
    if (!launch.error.empty()) throw invalid_argument("jacobi_sweep on " + id() + ": " + launch.error);
    const double points =
        double(call.row_end - call.row_begin) * double(call.col_end - call.col_begin);
    device_guard guard(ordinal_, id());
    traced(
        cs, span_kind::kernel,
        [&] {
            return "jacobi " + std::string(to_string(call.type)) + " " +
                   std::to_string(call.row_end - call.row_begin) + "x" +
                   std::to_string(call.col_end - call.col_begin);
        },
        static_cast<std::size_t>(2 * points * double(size_of(call.type))), 4 * points,
        [&] { TS_CUDA_CHECK(launch_jacobi_sweep(call, launch, cs.native()), id()); });
}

cudaStream_t native_stream(stream& s) {
    auto* cs = dynamic_cast<cuda_stream*>(&s);
    if (cs == nullptr)
        throw invalid_argument("native_stream: a stream of " + s.owner().id() +
                               " is not a CUDA stream");
    return cs->native();
}

}  // namespace tilestream::cuda

// ------------------------------------------------------------------ factory

namespace tilestream::backends {

std::unique_ptr<device> open_cuda_device(int ordinal, int slice, int slices,
                                         std::optional<std::size_t> budget) {
    cuda::check_slice_request(ordinal, slice, slices);
    const std::string gpu = "cuda:" + std::to_string(ordinal);
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        throw invalid_argument(gpu + " does not exist: " + cuda::describe_cuda_failure(e));
    }
    if (const std::string missing = cuda::missing_gpu_reason(ordinal, count); !missing.empty())
        throw invalid_argument(gpu + " does not exist: " + missing);

    device_info info = cuda::describe_gpu(ordinal, count);
    const cuda::slice_memory memory =
        cuda::split_gpu_memory(ordinal, slice, slices, info.memory_bytes, info.memory_free, budget);
    info.id = cuda::logical_device_id(ordinal, slice, slices);
    info.slice = slice;
    info.slices = slices;
    info.memory_bytes = memory.memory_bytes;
    info.memory_free = memory.memory_free;
    info.budget_bytes = memory.budget_bytes;
    info.budget_given = budget.has_value();
    return std::make_unique<cuda::cuda_device>(std::move(info), ordinal);
}

}  // namespace tilestream::backends
