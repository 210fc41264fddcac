// The CPU device: a separate memory arena, streams run in order on their own threads, kernels on
// the device's worker pool. It is the model of an accelerator that CI can run everywhere.
#include "backends/backends.hpp"
#include "backends/cpu/cpu_isa.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "core/process_fork.hpp"
#include "core/engine/tile_kernels.hpp"

#include <tilestream/error.hpp>
#include <tilestream/matrix.hpp>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/mman.h>

namespace tilestream::backends {
namespace {

class cpu_device;

/// One in-order queue served by a dedicated thread (the "copy engine" or "launcher"), started by
/// the first task, or run by the pushing thread itself (stream_priority::calling_thread): a
/// pipeline creates four streams, and in place only the compute stream runs anything. Threads
/// that never start cost nothing, and the ones that do are not crowding the cores while the
/// kernel's threads are placed (three short-lived threads starting beside OpenBLAS's measured 4-7%
/// on a 2048^3 call on 2 cores: the kernel thread shared a core for ~10 ms).
class cpu_stream final : public stream {
public:
    struct task {
        std::function<void()> fn;
        bool always_run = false;  // event records and waits run even after an error, so no waiter hangs
        span_kind kind = span_kind::host;
        std::string name;
        std::size_t bytes = 0;
        double flops = 0;
    };

    /// on_calling_thread: push() runs each task itself, on the pushing thread
    /// (stream_priority::calling_thread).
    cpu_stream(device& owner, int id, bool on_calling_thread)
        : stream(owner, id), on_calling_thread_(on_calling_thread) {}
    ~cpu_stream() override;

    /// Stops and joins this process's thread (a parent's, in a forked child, is left alone).
    void stop() {
        if (lane* l = lane_.current()) l->stop();
    }

    void push(task t) {
        lane& l = live();
        if (on_calling_thread_) {
            // As the queue's thread would run it, now: skipped after an earlier task failed
            // (unless it must always run), its error kept for synchronize(), and counted pending
            // while it runs (a synchronize() from another thread waits for it).
            bool skip = false;
            {
                std::lock_guard lock(l.mutex);
                skip = l.error != nullptr && !t.always_run;
                ++l.pending;
            }
            if (!skip) run(l, t);
            {
                std::lock_guard lock(l.mutex);
                --l.pending;
            }
            l.idle_cv.notify_all();
            return;
        }
        {
            std::lock_guard lock(l.mutex);
            // The first task starts the thread (it waits for this lock, so it sees the task).
            // std::system_error (no thread could start) reaches the caller; nothing was queued.
            if (!l.thread.joinable()) l.thread = std::thread([this, &l] { serve(l); });
            l.queue.push_back(std::move(t));
            ++l.pending;
        }
        l.cv.notify_all();
    }

    void synchronize() override {
        lane& l = live();
        std::unique_lock lock(l.mutex);
        l.idle_cv.wait(lock, [&l] { return l.pending == 0; });
        if (l.error) {
            auto e = l.error;
            l.error = nullptr;
            std::rethrow_exception(e);
        }
    }

private:
    /// The queue, its thread and lock: one per process. In a child made with fork() the parent's
    /// thread is not there; the child starts its own on its first task (process_fork.hpp).
    struct lane {
        std::uint64_t generation = detail::fork_generation();
        std::mutex mutex;
        std::condition_variable cv, idle_cv;
        std::deque<task> queue;
        std::size_t pending = 0;
        bool stopping = false;
        std::exception_ptr error;
        std::thread thread;  // started by the first push(), joined by stop()

        void stop() {
            {
                std::lock_guard lock(mutex);
                stopping = true;
            }
            cv.notify_all();
            if (thread.joinable()) thread.join();
        }
        ~lane() { stop(); }
    };

    lane& live() {
        return lane_.get([] { return std::make_unique<lane>(); });
    }

    void serve(lane& l) {
        for (;;) {
            task t;
            bool skip = false;
            {
                std::unique_lock lock(l.mutex);
                l.cv.wait(lock, [&l] { return l.stopping || !l.queue.empty(); });
                if (l.queue.empty()) return;
                t = std::move(l.queue.front());
                l.queue.pop_front();
                skip = l.error != nullptr && !t.always_run;
            }
            if (!skip) run(l, t);
            {
                std::lock_guard lock(l.mutex);
                --l.pending;
            }
            l.idle_cv.notify_all();
        }
    }

    void run(lane& l, task& t) {
        trace_sink* sink = owner().trace();
        const double t0 = sink ? trace_clock_seconds() : 0;
        try {
            t.fn();
        } catch (...) {
            std::lock_guard lock(l.mutex);
            if (!l.error) l.error = std::current_exception();
        }
        if (sink && !t.always_run)
            sink->record(owner().id(), id(), t.kind, t.name, t.bytes, t.flops, t0,
                         trace_clock_seconds());
    }

    detail::process_local<lane> lane_;
    const bool on_calling_thread_;
};

/// Completion counter: record() bumps `recorded`, the stream bumps `reached` when it gets there.
class cpu_event final : public event {
public:
    void record(stream& s) override {
        auto* csp = dynamic_cast<cpu_stream*>(&s);
        if (csp == nullptr)
            throw invalid_argument("cpu event recorded on a stream of " + s.owner().id() +
                                   " (a cpu event can only mark a cpu stream)");
        auto& cs = *csp;
        std::uint64_t gen;
        {
            std::lock_guard lock(state_->mutex);
            gen = ++state_->recorded;
        }
        auto st = state_;
        cs.push({[st, gen] {
                     {
                         std::lock_guard lock(st->mutex);
                         if (gen > st->reached) st->reached = gen;
                     }
                     st->cv.notify_all();
                 },
                 true});
    }
    bool ready() override {
        std::lock_guard lock(state_->mutex);
        return state_->reached >= state_->recorded;
    }
    /// Blocks until the point recorded last (as of now) is reached; it holds the shared state,
    /// so the event may be destroyed before the task runs.
    std::function<void()> host_waiter() override {
        auto st = state_;
        const std::uint64_t gen = current_target();
        return [st, gen] {
            std::unique_lock lock(st->mutex);
            st->cv.wait(lock, [&] { return st->reached >= gen; });
        };
    }
    void synchronize() override { host_waiter()(); }

private:
    std::uint64_t current_target() {
        std::lock_guard lock(state_->mutex);
        return state_->recorded;
    }
    struct state {
        std::mutex mutex;
        std::condition_variable cv;
        std::uint64_t recorded = 0, reached = 0;
    };
    std::shared_ptr<state> state_ = std::make_shared<state>();
};

class cpu_device final : public device {
public:
    explicit cpu_device(device_info info) : device(std::move(info)), pool_(info_.threads) { ++live_devices(); }

    bool host_addressable() const override { return true; }

    host_staging_buffer allocate_host_staging(std::size_t bytes) override {
        void* p = detail::aligned_host_alloc(bytes);
        return host_staging_buffer(p, bytes, [](void* q) { std::free(q); });
    }
    void register_host(void*, std::size_t) override {}
    void unregister_host(void*) override {}

    std::unique_ptr<stream> create_stream(stream_priority p) override {
        std::lock_guard lock(mutex_);
        auto s = std::make_unique<cpu_stream>(*this, next_stream_id_++, p == stream_priority::calling_thread);
        streams_.push_back(s.get());
        return s;
    }
    std::unique_ptr<event> create_event() override { return std::make_unique<cpu_event>(); }

    void wait(stream& s, event& e) override {
        // Any backend's event: the stream thread blocks on the point recorded last as of this
        // call (a later record must not move it, and the event may be gone by then).
        inner(s).push({e.host_waiter(), true});
    }

    void synchronize() override {
        std::vector<cpu_stream*> streams;
        {
            std::lock_guard lock(mutex_);
            streams = streams_;
        }
        for (auto* s : streams) s->synchronize();
    }

    void enqueue_host(stream& s, std::function<void()> fn, const std::string& name) override {
        inner(s).push({std::move(fn), false, span_kind::host, name});
    }

    void copy_to_device(stream& s, void* dst, const void* src, std::size_t bytes) override {
        push_copy(s, span_kind::copy_h2d, "h2d", dst, src, bytes);
    }
    void copy_to_host(stream& s, void* dst, const void* src, std::size_t bytes) override {
        push_copy(s, span_kind::copy_d2h, "d2h", dst, src, bytes);
    }
    void copy_within(stream& s, void* dst, const void* src, std::size_t bytes) override {
        push_copy(s, span_kind::copy_d2d, "d2d", dst, src, bytes);
    }
    void copy_2d_to_device(stream& s, const copy_2d_desc& c) override {
        push_copy_2d(s, span_kind::copy_h2d, "h2d 2-D", c);
    }
    void copy_2d_to_host(stream& s, const copy_2d_desc& c) override {
        push_copy_2d(s, span_kind::copy_d2h, "d2h 2-D", c);
    }
    void copy_2d_within(stream& s, const copy_2d_desc& c) override {
        push_copy_2d(s, span_kind::copy_d2d, "d2d 2-D", c);
    }
    bool can_copy_peer(const device& other) const override { return other.host_addressable(); }
    void copy_peer(stream& s, device& other, void* dst, const void* src, std::size_t bytes) override {
        check_peer(other);
        push_copy(s, span_kind::copy_peer, "peer to " + other.id(), dst, src, bytes);
    }
    void copy_2d_peer(stream& s, device& other, const copy_2d_desc& c) override {
        check_peer(other);
        push_copy_2d(s, span_kind::copy_peer, "peer 2-D to " + other.id(), c);
    }

    bool supports(gemm_kernel) const override { return true; }

    void gemm(stream& s, const gemm_call& call) override {
        inner(s).push({[this, call] {
                           switch (call.kernel) {
                               case gemm_kernel::reference: reference::gemm(call); break;
                               case gemm_kernel::naive: cpu::gemm_naive(call, pool_); break;
                               case gemm_kernel::tiled: cpu::gemm_tiled(call, pool_); break;
                               case gemm_kernel::vendor: cpu::gemm_vendor(call, pool_, live_devices() == 1); break;
                           }
                       },
                       false, span_kind::kernel, "gemm " + std::string(to_string(call.kernel)), 0,
                       call.flops()});
    }

    void gemm_batched(stream& s, const gemm_batched_call& call) override {
        inner(s).push({[this, call] { cpu::gemm_batched(call, pool_, live_devices() == 1); }, false, span_kind::kernel,
                       "gemm batched " + std::string(to_string(call.call.kernel)) + " x" + std::to_string(call.count), 0,
                       call.call.flops() * double(call.count)});
    }

    bool supports(tile_kind kind, dtype type, gemm_kernel k) const override {
        if (kind == tile_kind::gemm) return true;
        if (cpu::lu_vendor_supports(kind)) return k == gemm_kernel::vendor || k == gemm_kernel::reference;
        if (kind == tile_kind::potrf) return k == gemm_kernel::vendor || k == gemm_kernel::reference;
        const bool hermitian = kind == tile_kind::herk || kind == tile_kind::her2k || kind == tile_kind::hemm;
        if (k == gemm_kernel::reference) return !hermitian || !(type == dtype::f32 || type == dtype::f64);
        return k == gemm_kernel::vendor && cpu::tile_vendor_supports(kind, type);
    }

    void execute(stream& s, const tile_op& op) override {
        if (op.kind == tile_kind::gemm) return gemm(s, detail::engine::as_gemm_call(op));
        if (!supports(op.kind, op.type, op.kernel))
            throw invalid_argument(id() + ": no '" + std::string(to_string(op.kernel)) + "' " +
                                   std::string(to_string(op.kind)) + " tile kernel for " + std::string(to_string(op.type)));
        inner(s).push({[this, op] {
                           if (op.kernel == gemm_kernel::reference) reference::execute(op);
                           else if (cpu::lu_vendor_supports(op.kind)) cpu::lu_vendor(op, pool_, live_devices() == 1);
                           else cpu::tile_vendor(op, pool_, live_devices() == 1);
                       },
                       false, span_kind::kernel,
                       std::string(to_string(op.kind)) + " " + std::string(to_string(op.kernel)), 0, op.flops()});
    }

    void jacobi_sweep(stream& s, const jacobi_call& call) override {
        const double points = double(call.row_end - call.row_begin) * double(call.col_end - call.col_begin);
        inner(s).push({[this, call] { cpu::jacobi_sweep(call, pool_); }, false, span_kind::kernel,
                       "jacobi", 0, 4.0 * points});
    }

protected:
    /// Device memory is kept in a per-device pool of freed blocks (by size) and reused, as GPU
    /// caching allocators do: fresh pages fault on first touch, which costs more than the copies
    /// that fill them. Large blocks are 2 MiB aligned and asked for transparent huge pages.
    void* raw_allocate(std::size_t bytes) override {
        {
            std::lock_guard lock(block_mutex_);
            if (auto it = idle_blocks_.find(bytes); it != idle_blocks_.end()) {
                void* p = it->second;
                idle_blocks_.erase(it);
                idle_bytes_ -= bytes;
                sizes_[p] = bytes;
                return p;
            }
        }
        void* p = nullptr;
        if (bytes >= huge_page) {
            const std::size_t rounded = (bytes + huge_page - 1) / huge_page * huge_page;
            p = std::aligned_alloc(huge_page, rounded);
            if (p == nullptr) throw std::bad_alloc();
            madvise(p, rounded, MADV_HUGEPAGE);
        } else {
            p = detail::aligned_host_alloc(bytes);
        }
        std::lock_guard lock(block_mutex_);
        sizes_[p] = bytes;
        return p;
    }
    void raw_free(void* p) noexcept override {
        std::lock_guard lock(block_mutex_);
        auto it = sizes_.find(p);
        if (it == sizes_.end()) return;
        // Keep at most the device's budget of idle blocks; beyond that, give memory back.
        if (idle_bytes_ + it->second <= info_.budget_bytes) {
            idle_blocks_.emplace(it->second, p);
            idle_bytes_ += it->second;
        } else {
            std::free(p);
        }
        sizes_.erase(it);
    }

public:
    ~cpu_device() override {
        for (auto& [size, p] : idle_blocks_) std::free(p);
        --live_devices();
    }

private:
    static constexpr std::size_t huge_page = std::size_t(2) << 20;
    std::mutex block_mutex_;
    std::multimap<std::size_t, void*> idle_blocks_;
    std::size_t idle_bytes_ = 0;  // sum of the idle blocks' sizes
    std::map<void*, std::size_t> sizes_;

private:
    cpu_stream& inner(stream& s) {
        if (&s.owner() != this)
            throw invalid_argument(id() + ": stream belongs to device " + s.owner().id());
        return static_cast<cpu_stream&>(s);
    }
public:
    void unlist(cpu_stream* s) {
        std::lock_guard lock(mutex_);
        std::erase(streams_, s);
    }
private:
    void check_peer(const device& other) const {
        if (!can_copy_peer(other))
            throw invalid_argument(id() + ": no peer path to " + other.id() + " (copy through the host)");
    }
    void push_copy(stream& s, span_kind kind, std::string name, void* dst, const void* src,
                   std::size_t bytes) {
        inner(s).push({[=] {
                           if (bytes) std::memcpy(dst, src, bytes);
                       },
                       false, kind, std::move(name), bytes});
    }
    void push_copy_2d(stream& s, span_kind kind, std::string name, const copy_2d_desc& c) {
        if (c.height > 1 && (c.dst_pitch < c.width_bytes || c.src_pitch < c.width_bytes))
            throw invalid_argument(id() + ": 2-D copy pitch smaller than its row width");
        inner(s).push({[c] {
                           auto* d = static_cast<char*>(c.dst);
                           const auto* r = static_cast<const char*>(c.src);
                           if (c.width_bytes == 0) return;
                           for (std::size_t row = 0; row < c.height; ++row)
                               std::memcpy(d + row * c.dst_pitch, r + row * c.src_pitch, c.width_bytes);
                       },
                       false, kind, std::move(name), c.width_bytes * c.height});
    }

    /// CPU devices alive in the process: the only one may use OpenBLAS's own threads.
    static std::atomic<int>& live_devices() {
        static std::atomic<int> count{0};
        return count;
    }

    cpu::thread_pool pool_;
    std::mutex mutex_;
    std::vector<cpu_stream*> streams_;
    int next_stream_id_ = 0;
};

cpu_stream::~cpu_stream() {
    stop();
    static_cast<cpu_device&>(owner()).unlist(this);
}

}  // namespace

std::unique_ptr<device> make_cpu_device(const cpu_device_config& cfg) {
    device_info info;
    info.id = "cpu:" + std::to_string(cfg.index);
    info.kind = device_kind::cpu;
    info.name = cfg.name;
    info.memory_bytes = cfg.memory;
    info.memory_free = cfg.memory;
    info.budget_bytes = cfg.budget;
    info.budget_given = cfg.budget_given;
    info.threads = std::max(1, cfg.threads);
    info.isa = to_string(cpu::selected_isa());  // throws when TILESTREAM_CPU_ISA names a missing set
    info.blocking = cpu::describe_blocking(cpu::selected_isa(), cpu::host_cache_sizes());
    return std::make_unique<cpu_device>(std::move(info));
}

}  // namespace tilestream::backends
