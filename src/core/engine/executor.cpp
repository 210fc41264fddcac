// The task executor (see executor.hpp): a shared ready queue, one host thread per device issuing
// tasks to its streams through its tile store, commits, faults and cancellation.
#include "core/balance.hpp"
#include "core/engine/executor.hpp"

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "core/engine/tile_kernels.hpp"
#include "core/engine/tile_store.hpp"
#include "core/fault_injection.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace tilestream::detail::engine {

namespace {

using clock_type = std::chrono::steady_clock;

/// What every device of a run shares: the queue, the tiles' committed versions, the counters.
struct shared_state {
    shared_state(const task_graph& graph, std::size_t devices)
        : g(graph), waiting(graph.tasks.size()), taken(graph.tasks.size(), 0), version(std::size_t(graph.tiles)),
          tile_info(std::size_t(graph.tiles), 0), rate(devices, 0.0), queued_flops(devices, 0.0), estimated(devices, false), kernel_rate(devices, 0.0), active(devices, true) {
        owner.resize(g.tasks.size());
        for (std::size_t t = 0; t < g.tasks.size(); ++t) {
            owner[t] = g.tasks[t].device >= 0 && std::size_t(g.tasks[t].device) < devices ? g.tasks[t].device : -1;
            waiting[t] = g.tasks[t].predecessors;
            if (waiting[t] == 0) ready.insert({-g.tasks[t].priority, int(t)});
            remaining_flops += g.tasks[t].flops;
        }
        for (auto& v : version) v = 0;
    }
    const task_graph& g;
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<int> waiting;                ///< predecessors not yet committed, per task
    std::vector<char> taken;                 ///< 1: issued to a device (until given back), 2: committed
    std::vector<int> owner;                  ///< the device a task is pinned to (-1: any); lost devices' go to any
    std::set<std::pair<double, int>> ready;  ///< (-priority, task): most urgent first
    std::vector<std::atomic<std::uint32_t>> version;  ///< committed version per tile
    /// potrf steps' info per output tile (written by the kernel on its stream, read after the run).
    std::vector<int> tile_info;
    std::size_t done = 0;
    double remaining_flops = 0;              ///< of tasks not taken
    bool stop = false;
    bool recoverable = false;
    int working = 0;                         ///< devices not lost
    std::vector<device_fault> faults;
    std::vector<std::string> warnings;
    // Balance: each device's best rate (flops/s of a task), the flops it has queued, whether it takes tasks.
    std::vector<double> rate, queued_flops;
    /// rate[d] is still the estimate from run_request::device_flops: the first task replaces it.
    std::vector<bool> estimated;
    /// run_request::device_flops (0: none): whether a device is far slower than another is judged
    /// by these kernel rates where both have one (a first task's time includes warm-up).
    std::vector<double> kernel_rate;
    std::vector<bool> active;
    /// Which device's store holds which tile (peer tiles).
    peer_directory peers;
};

/// Per-step operand sizes (bytes) for the host fallback's staging.
struct bound_step {
    tile_op op;  ///< operands at their tiles' first elements
    std::size_t a_bytes = 0, b_bytes = 0, c_bytes = 0;
    tile_offset a_at, b_at, c_at;  ///< where the step's operands start in those tiles
};

/// The step's operation on its operands' parts (tile_offset) of the tiles op points at.
tile_op at_offsets(const bound_step& b) {
    tile_op op = b.op;
    const std::size_t es = size_of(op.type);
    if (op.a.data != nullptr) op.a = shifted(op.a, b.a_at.i, b.a_at.j, es);
    if (op.b.data != nullptr) op.b = shifted(op.b, b.b_at.i, b.b_at.j, es);
    if (op.c.data != nullptr) op.c = shifted(op.c, b.c_at.i, b.c_at.j, es);
    return op;
}

class device_worker {
public:
    device_worker(device& dev, std::size_t index, const run_request& rq, shared_state& st, budget_reservation* from,
                  std::vector<std::string>& warnings, tiles_kit* kit)
        : dev_(dev), index_(index), rq_(rq), st_(st), g_(*rq.graph) {
        slowdown_ = fault_injection::slowdown_seconds(dev);
        // In place on one device the compute stream is the only one with work, and this thread
        // (the caller's) waits for each task before it takes the next: on a device computing with
        // the host's cores its steps run here, without a hand-off to a queue's thread and back for
        // every step (a small LAPACK call through the BLAS drop-in spent most of its 100-170 us in
        // those wake-ups). Several devices keep their queues' threads: a worker computing its task
        // itself takes the next ready one before an idle worker wakes, and took every GEMM task of
        // a 28-task trsm on cpu:2 (Blas3Kernels.LuAndSeveralDevicesTakeTheMeasuredGemmKernel).
        // Copying runs keep a queue's thread, so copies and kernels overlap.
        compute_priority_ = rq.in_place && !st.recoverable ? stream_priority::calling_thread : stream_priority::high;
        if (kit != nullptr) {  // an earlier call's streams; its compute stream only if of the same kind
            h2d_ = std::move(kit->h2d);
            if (kit->compute_priority == compute_priority_) compute_ = std::move(kit->compute);
            d2h_ = std::move(kit->d2h);
            peer_ = std::move(kit->peer);
        }
        if (!h2d_) h2d_ = dev.create_stream();
        if (!compute_) compute_ = dev.create_stream(compute_priority_);
        if (!d2h_) d2h_ = dev.create_stream();
        loaded_ = dev.create_event();
        if (rq.run.trace != nullptr) {
            rq.run.trace->name_stream(dev.id(), h2d_->id(), "copy in");
            rq.run.trace->name_stream(dev.id(), compute_->id(), "compute");
            rq.run.trace->name_stream(dev.id(), d2h_->id(), "copy out");
            if (st.recoverable) rq.run.trace->name_stream(dev.id(), backup_lane, "backups (host)");
        }
        if (!rq.in_place) {
            const std::vector<slot_class> classes = slot_classes_of(rq);
            int wanted = 0;
            for (const slot_class& c : classes) wanted += c.count;
            // Slots that cannot all be allocated (memory taken by others though the budget has
            // room): again with half as many of each class, down to one of each and never fewer
            // than a task may hold at once (3, or all there were); the tasks stay the same. A
            // failed try frees the slots an earlier call left (and the tiles of kept operands in them).
            const int least = std::min(wanted, 3);
            std::string first_failure;
            std::exception_ptr failure;
            std::vector<int> last;
            for (int shrink = 0;; ++shrink) {
                std::vector<slot_class> tried = classes;
                int total = 0;
                for (slot_class& c : tried) total += c.count = std::max(std::min(c.count, 1), c.count >> shrink);
                for (std::size_t i = 0; total < least && i < tried.size(); ++i) {  // back up to `least`
                    const int more = std::min(classes[i].count - tried[i].count, least - total);
                    tried[i].count += more;
                    total += more;
                }
                std::vector<int> counts;
                for (const slot_class& c : tried) counts.push_back(c.count);
                if (counts == last) std::rethrow_exception(failure);  // as few as a task may hold: refused again
                last = std::move(counts);
                try {
                    store_ = std::make_unique<tile_store>(dev, *h2d_, *compute_, *d2h_, tried, least, from,
                                                          kit ? &kit->slots : nullptr, rq.transfer == transfer_mode::pack);
                    break;
                } catch (const error& e) {
                    if (first_failure.empty()) first_failure = e.what();
                    failure = std::current_exception();
                }
            }
            const std::size_t devices = st.rate.size();
            const peer_tile_mode mode = rq.run.peer_tiles;
            const bool peers = devices > 1 && (mode == peer_tile_mode::on ||
                                               (mode == peer_tile_mode::automatic && !dev.host_addressable()));
            if (peers) {
                if (!peer_) peer_ = dev.create_stream();
                if (rq.run.trace != nullptr) rq.run.trace->name_stream(dev.id(), peer_->id(), "peer tiles");
                store_->share_peers(&st.peers, peer_.get());
            }
            if (!first_failure.empty())
                warnings.push_back(dev.id() + ": " + first_failure + "; ran with fewer buffers (" +
                                   std::to_string(store_->slots()) + " of " + std::to_string(wanted) + " tile slots)");
            else if (store_->slots() < wanted)
                warnings.push_back(dev.id() + ": ran with " + std::to_string(store_->slots()) + " of " +
                                   std::to_string(wanted) + " tile slots (the device refused the others)");
        }
    }

    ~device_worker() {
        for (stream* s : {h2d_.get(), compute_.get(), d2h_.get(), peer_.get()}) {
            if (s == nullptr) continue;
            try {
                s->synchronize();
            } catch (...) {
            }
        }
    }

    /// Waits for every stream (all of them, also after one failed: another device's peer copy
    /// may still write into a slot), then throws the first error.
    void finish() {
        std::exception_ptr first;
        for (stream* s : {h2d_.get(), compute_.get(), d2h_.get(), peer_.get()}) {
            if (s == nullptr) continue;
            try {
                s->synchronize();
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        }
        if (first) std::rethrow_exception(first);
    }

    /// After a run that succeeded (streams drained): slots and streams for the next call.
    void give_back(tiles_kit& kit) {
        if (store_) kit.slots = store_->take_slots();
        kit.h2d = std::move(h2d_);
        kit.compute = std::move(compute_);
        kit.compute_priority = compute_priority_;
        kit.d2h = std::move(d2h_);
        kit.peer = std::move(peer_);
    }

    std::string drain() {
        std::string first;
        for (stream* s : {h2d_.get(), compute_.get(), d2h_.get(), peer_.get()}) {
            if (s == nullptr) continue;
            try {
                s->synchronize();
            } catch (const std::exception& e) {
                if (first.empty()) first = e.what();
            } catch (...) {
                if (first.empty()) first = "unknown error";
            }
        }
        return first;
    }

    /// After drain(): the tasks this device issued and did not commit, their outputs restored.
    std::vector<int> take_back() {
        std::vector<int> back;
        std::lock_guard lock(progress_mutex_);
        for (record& r : unfinished_) {
            for (const backup& b : r.backups) copy_region(packed_copy(b.data.get(), b.rect, false),
                                                          b.rect, b.region, false);
            back.push_back(r.task);
        }
        unfinished_.clear();
        in_flight_ = 0;
        return back;
    }

    bool stopping() const { return st_.stop || (rq_.run.cancel != nullptr && rq_.run.cancel->load()); }

    /// Takes ready tasks and issues them until every task is committed, the run stops, or this
    /// device fails (an exception).
    void run() {
        const int limit = rq_.in_place ? 1 : std::max(1, rq_.run.max_tasks_in_flight);
        const auto poll = std::chrono::milliseconds(rq_.run.cancel != nullptr || st_.recoverable ? 10 : 100);
        auto last_progress = clock_type::now();
        std::size_t seen_done = 0;
        for (;;) {
            if (broken_.load()) throw device_error(dev_.id() + ": a stream failed (a task's copies or kernels did not complete)");
            int task = -1;
            {
                std::unique_lock lock(st_.mutex);
                if (stopping() || st_.done == g_.tasks.size()) return;
                if (st_.done != seen_done) {
                    seen_done = st_.done;
                    last_progress = clock_type::now();
                }
                if (in_flight_.load() < std::size_t(limit) && !st_.ready.empty()) task = pick();
                if (task < 0) st_.cv.wait_for(lock, poll);
            }
            if (task >= 0) {
                issue(task);
                continue;
            }
            check_stuck(last_progress);
        }
    }

    device_share share() const {
        device_share s;
        s.id = dev_.id();
        s.units = finished_;
        s.flops = flops_;
        if (store_) {
            const store_counters& c = store_->counters();
            s.bytes_h2d = c.bytes_h2d;
            s.cache_hits = c.hits;
            s.cache_misses = c.misses;
            s.bytes_saved = c.bytes_saved;
            s.kept_hits = c.kept_hits;
            s.kept_bytes_saved = c.kept_bytes_saved;
            s.peer_hits = c.peer_hits;
            s.bytes_from_peers = c.bytes_from_peers;
        }
        return s;
    }
    store_counters counters() const { return store_ ? store_->counters() : store_counters{}; }

private:
    struct backup {
        host_rect rect;
        tile_region region = tile_region::full;
        std::unique_ptr<char[]> data;  ///< packed, rect.bytes()
    };
    /// The trace lane of the backups (not a stream: the issuing thread).
    static constexpr int backup_lane = -1;
    struct record {
        int task = -1;
        std::uint64_t seq = 0;
        std::vector<backup> backups;
        std::shared_ptr<event> done;  ///< recorded after its commit (runs that survive faults)
        clock_type::time_point issued;
        double flops = 0;
    };

    /// Under st_.mutex: the most urgent ready task, preferring among those about as urgent the one
    /// whose tiles this device holds; -1 when declining (a faster device would finish first).
    int pick() {
        const auto mine = [&](int t) {
            const int o = st_.owner[std::size_t(t)];
            return o < 0 || o == int(index_);
        };
        auto best = st_.ready.begin();
        while (best != st_.ready.end() && !mine(best->second)) ++best;
        if (best == st_.ready.end()) return -1;  // every ready task is another device's
        if (store_ && st_.ready.size() > 1) {
            const double top = -best->first;
            int best_score = -1;
            int looked = 0;
            for (auto it = best; it != st_.ready.end() && looked < 8; ++it) {
                if (-it->first < 0.9 * top) break;
                if (!mine(it->second)) continue;
                ++looked;
                const int score = held_tiles(it->second);
                if (score > best_score) {
                    best_score = score;
                    best = it;
                }
            }
        }
        // A task pinned here is taken whatever the balance says: no other device may. Declining
        // one that any device may take, this device still takes its own pinned ones.
        if (st_.owner[std::size_t(best->second)] < 0 && !worth_taking(best->second)) {
            best = st_.ready.begin();
            while (best != st_.ready.end() && st_.owner[std::size_t(best->second)] != int(index_)) ++best;
            if (best == st_.ready.end()) return -1;
        }
        const int t = best->second;
        st_.ready.erase(best);
        st_.taken[std::size_t(t)] = 1;
        st_.remaining_flops -= g_.tasks[std::size_t(t)].flops;
        st_.queued_flops[index_] += g_.tasks[std::size_t(t)].flops;
        return t;
    }

    /// How many of the task's tiles this device holds at their committed version (outputs count
    /// twice: they would also be written back from here).
    int held_tiles(int t) const {
        int n = 0;
        const tile_task& task = g_.tasks[std::size_t(t)];
        for (const task_output& o : task.outputs)
            if (o.load && store_->holds(o.tile, committed(o.tile))) n += 2;
        for (int x : task.inputs)
            if (store_->holds(x, committed(x))) ++n;
        return n;
    }

    /// Tail balance: decline a task when another device taking tasks would finish its queue and
    /// everything left before this one finishes its queue and this task. A declining device stops
    /// counting as one that takes tasks, so some device always takes the next.
    bool worth_taking(int t) {
        const std::size_t d = index_;
        const double mine = st_.rate[d];
        if (mine <= 0 || st_.rate.size() == 1) return true;
        st_.active[d] = true;
        const double flops = g_.tasks[std::size_t(t)].flops;
        const double my_finish = (st_.queued_flops[d] + flops) / mine;
        for (std::size_t e = 0; e < st_.rate.size(); ++e) {
            if (e == d || !st_.active[e] || st_.rate[e] <= 0) continue;
            // By the kernels' measured rates where both are known, else by the tasks' rates.
            const bool kernels = st_.kernel_rate[d] > 0 && st_.kernel_rate[e] > 0;
            const detail::peer_speed speed = kernels ? detail::compare_peer(st_.kernel_rate[d], st_.kernel_rate[e])
                                                     : detail::compare_peer(mine, st_.rate[e]);
            if (speed == detail::peer_speed::far_faster) {
                st_.active[d] = false;
                return false;
            }
            if (speed == detail::peer_speed::far_slower) continue;
            if ((st_.queued_flops[e] + st_.remaining_flops) / st_.rate[e] < my_finish) {
                st_.active[d] = false;
                return false;
            }
        }
        return true;
    }

    /// Nothing committed for a while with tasks of ours in flight: a failed stream skips what
    /// follows, so look for a task whose commit marker was passed without committing, and drain
    /// the last stream (which rethrows a stream's error).
    void check_stuck(clock_type::time_point last_progress) {
        bool stuck = false;
        {
            std::lock_guard lock(progress_mutex_);
            stuck = !unfinished_.empty() && unfinished_.front().done && unfinished_.front().done->ready();
        }
        if (stuck) {
            // The marker after the commit ran, yet the commit did not count: look once more (the
            // host function may be finishing), then give up on the device.
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            std::lock_guard lock(progress_mutex_);
            if (!unfinished_.empty() && unfinished_.front().done && unfinished_.front().done->ready()) broken_ = true;
            return;
        }
        if (in_flight_.load() > 0 && clock_type::now() - last_progress > std::chrono::milliseconds(200))
            (rq_.in_place ? compute_ : d2h_)->synchronize();
    }

    host_rect rect_of(int tile) const {
        const tile_position p = g_.where(tile);
        const host_operand& o = rq_.operands[std::size_t(p.operand)];
        host_rect r;
        r.es = size_of(g_.type);
        const index_t off = o.lay == layout::row_major ? p.row0 * o.ld + p.col0 : p.row0 + p.col0 * o.ld;
        r.base = p.rows && p.cols ? o.base + std::size_t(off) * r.es : nullptr;
        r.rows = p.rows;
        r.cols = p.cols;
        r.ld = o.ld;
        r.lay = o.lay;
        return r;
    }

    /// The tile in host memory as a kernel operand (in place).
    tile_matrix host_tile(int tile) const {
        const host_rect r = rect_of(tile);
        tile_matrix m;
        m.data = r.base;
        m.ld = r.ld;
        m.lay = r.lay;
        return m;
    }

    /// A slot's contents as a kernel operand.
    tile_matrix slot_tile(const tile_slot& s, int tile) const {
        const tile_position p = g_.where(tile);
        const host_operand& o = rq_.operands[std::size_t(p.operand)];
        tile_matrix m;
        m.data = s.buf.get();
        m.lay = o.lay;
        m.ld = std::max<index_t>(1, o.lay == layout::row_major ? p.cols : p.rows);
        return m;
    }

    void issue(int t) {
        const tile_task& task = g_.tasks[std::size_t(t)];
        record rec;
        bool inject = false;
        try {
            inject = prepare(t, rec);
        } catch (...) {
            // Nothing of it reached the device: back to the queue, for any device (this one is
            // about to be lost).
            {
                std::lock_guard lock(st_.mutex);
                st_.taken[std::size_t(t)] = 0;
                st_.ready.insert({-task.priority, t});
                st_.remaining_flops += task.flops;
                st_.queued_flops[index_] = std::max(0.0, st_.queued_flops[index_] - task.flops);
            }
            st_.cv.notify_all();
            throw;
        }
        const std::shared_ptr<event> done = rec.done;
        const std::uint64_t seq = rec.seq;
        {
            std::lock_guard lock(progress_mutex_);
            ++in_flight_;
            unfinished_.push_back(std::move(rec));
        }
        if (rq_.in_place) issue_in_place(task, seq, inject, done.get());
        else issue_staged(task, seq, inject, done.get());
    }

    /// The task's record before it is issued (its commit marker, backups of its outputs); whether
    /// an injected fault fails it.
    bool prepare(int t, record& rec) {
        const tile_task& task = g_.tasks[std::size_t(t)];
        const bool inject = fault_injection::unit_fails(dev_);
        rec.task = t;
        rec.seq = ++seq_;
        rec.issued = clock_type::now();
        rec.flops = task.flops;
        if (st_.recoverable) rec.done = std::shared_ptr<event>(dev_.create_event());
        // Outputs whose old value a rerun elsewhere would need: kept aside on the host first (on
        // this thread, before the task is issued; a span on the trace's "backups" lane).
        if (st_.recoverable) {
            const double t0 = rq_.run.trace != nullptr ? trace_clock_seconds() : 0.0;
            std::size_t bytes = 0;
            for (const task_output& o : task.outputs) {
                if (!o.load) continue;
                backup b;
                b.rect = rect_of(o.tile);
                b.region = o.region;
                b.data = std::make_unique_for_overwrite<char[]>(b.rect.bytes());
                copy_region(packed_copy(b.data.get(), b.rect, true), b.rect, tile_region::full, true);
                bytes += b.rect.bytes();
                rec.backups.push_back(std::move(b));
            }
            if (rq_.run.trace != nullptr && bytes > 0)
                rq_.run.trace->record(dev_.id(), backup_lane, span_kind::host, "backup of task outputs", bytes, 0.0, t0,
                                      trace_clock_seconds());
        }
        return inject;
    }

    std::uint32_t committed(int tile) const { return st_.version[std::size_t(tile)].load(); }

    void issue_staged(const tile_task& task, std::uint64_t seq, bool inject, event* done) {
        std::vector<tile_slot*> outs;
        for (const task_output& o : task.outputs)
            outs.push_back(&store_->output(o.tile, committed(o.tile), o.load, rect_of(o.tile), g_.slot_bytes(o.tile)));
        const auto operand = [&](int tile, tile_slot*& used) -> tile_matrix {
            used = nullptr;
            if (tile < 0) return {};
            for (std::size_t i = 0; i < task.outputs.size(); ++i)
                if (task.outputs[i].tile == tile) return slot_tile(*outs[i], tile);
            const std::size_t operand = std::size_t(g_.where(tile).operand);
            used = &store_->input(tile, committed(tile), rect_of(tile),
                                  operand < rq_.keeps.size() ? rq_.keeps[operand] : operand_keep{}, g_.slot_bytes(tile));
            return slot_tile(*used, tile);
        };
        for (const task_step& s : task.steps) {
            cancel_point();
            bound_step b;
            b.op = s.op;
            b.op.alpha = scalar_value(s.alpha, rq_.alpha, rq_.beta);
            b.op.beta = scalar_value(s.beta, rq_.alpha, rq_.beta);
            tile_slot *sa = nullptr, *sb = nullptr, *unused = nullptr;
            b.op.a = operand(s.a, sa);
            b.op.b = operand(s.b, sb);
            b.op.c = operand(s.c, unused);
            if (b.op.kind == tile_kind::potrf) b.op.info = &st_.tile_info[std::size_t(s.c)];
            if (s.a >= 0) b.a_bytes = g_.tile_bytes(s.a);
            if (s.b >= 0) b.b_bytes = g_.tile_bytes(s.b);
            b.c_bytes = g_.tile_bytes(s.c);
            b.a_at = s.a_at;
            b.b_at = s.b_at;
            b.c_at = s.c_at;
            run_step(b);
            for (tile_slot* x : {sa, sb})
                if (x != nullptr) {
                    x->released->record(*compute_);
                    x->locked = false;
                }
            if (inject && &s == &task.steps.front()) injected_kernel_failure();
        }
        if (st_.recoverable) {
            // The commit (on the copy-out stream) comes after both markers, so it sees whether the
            // loads and kernels before them ran.
            dev_.enqueue_host(*h2d_, [this, seq] { h2d_mark_ = seq; }, "task loaded");
            loaded_->record(*h2d_);
            dev_.wait(*d2h_, *loaded_);
            dev_.enqueue_host(*compute_, [this, seq] { compute_mark_ = seq; }, "task computed");
        }
        for (std::size_t i = 0; i < task.outputs.size(); ++i) {
            outs[i]->ready->record(*compute_);
            store_->store(*outs[i], rect_of(task.outputs[i].tile), task.outputs[i].region);
        }
        store_->unlock_all();
        dev_.enqueue_host(*d2h_, [this, seq] { committed_task(seq); }, "task done");
        if (done != nullptr) done->record(*d2h_);
    }

    void issue_in_place(const tile_task& task, std::uint64_t seq, bool inject, event* done) {
        for (const task_step& s : task.steps) {
            cancel_point();
            bound_step b;
            b.op = s.op;
            b.op.alpha = scalar_value(s.alpha, rq_.alpha, rq_.beta);
            b.op.beta = scalar_value(s.beta, rq_.alpha, rq_.beta);
            if (s.a >= 0) b.op.a = host_tile(s.a);
            if (s.b >= 0) b.op.b = host_tile(s.b);
            b.op.c = host_tile(s.c);
            b.a_at = s.a_at;
            b.b_at = s.b_at;
            b.c_at = s.c_at;
            if (b.op.kind == tile_kind::potrf) b.op.info = &st_.tile_info[std::size_t(s.c)];
            run_step(b);
            if (inject && &s == &task.steps.front()) injected_kernel_failure();
        }
        dev_.enqueue_host(*compute_, [this, seq] { committed_task(seq); }, "task done");
        if (done != nullptr) done->record(*compute_);
    }

    /// One tile operation on the compute stream, by the route the device offers.
    void run_step(bound_step& b) {
        run_step_kernels(b);
        if (rq_.on_step_done) dev_.enqueue_host(*compute_, [f = &rq_.on_step_done] { (*f)(); }, "step done");
    }

    void run_step_kernels(bound_step& b) {
        flops_ += b.op.flops();
        // GEMM steps on the device's own GEMM kernel (the plan's measured choice); reproducible
        // runs keep theirs (the tiled kernel: the same bits on every device).
        const bool chosen = index_ < rq_.gemm_kernels.size() && !rq_.deterministic;
        if (b.op.kind == tile_kind::gemm && chosen) b.op.kernel = rq_.gemm_kernels[index_];
        // A diagonal tile on the vendor routine beside GEMM tiles on a faster kernel (the plan's
        // measured choice, or the one asked for where the device has no diagonal kernel of its
        // own), on memory the host addresses: its diagonal blocks on vendor, the rest GEMMs on
        // the GEMM tiles' kernel.
        const tile_route route = route_of(dev_, b.op, rq_.deterministic);
        const gemm_kernel gemm_tiles = chosen ? rq_.gemm_kernels[index_] : b.op.kernel;
        const bool on_vendor = route == tile_route::device_vendor ||
                               (route == tile_route::device_kernel && b.op.kernel == gemm_kernel::vendor);
        if (rq_.diagonal_block > 0 && !rq_.deterministic && blockable(b.op.kind) && dev_.host_addressable() && on_vendor &&
            gemm_tiles != gemm_kernel::vendor && gemm_tiles != gemm_kernel::reference) {
            const std::vector<tile_op> pieces = blocked_diagonal(at_offsets(b), rq_.diagonal_block);
            if (pieces.size() > 1) {
                for (tile_op piece : pieces) {
                    if (piece.kind == tile_kind::gemm) piece.kernel = gemm_tiles;
                    else piece.kernel = gemm_kernel::vendor;
                    dev_.execute(*compute_, piece);
                }
                return finish_step();
            }
        }
        switch (route) {
            case tile_route::device_kernel: dev_.execute(*compute_, at_offsets(b)); break;
            case tile_route::device_vendor:
                b.op.kernel = gemm_kernel::vendor;
                dev_.execute(*compute_, at_offsets(b));
                break;
            case tile_route::host_reference: reference_on_host(b); break;
        }
        finish_step();
    }

    void finish_step() {
        if (slowdown_ > 0) {
            const double s = slowdown_;
            dev_.enqueue_host(*compute_, [s] { std::this_thread::sleep_for(std::chrono::duration<double>(s)); },
                              "test slowdown");
        }
    }

    /// The reference kernel: on host-addressable memory directly, else on staged copies (the
    /// operands to host staging, the kernel, the output back), all in compute-stream order.
    void reference_on_host(const bound_step& b) {
        if (dev_.host_addressable() || rq_.in_place) {
            const tile_op op = at_offsets(b);
            dev_.enqueue_host(*compute_, [op] { reference::execute(op); }, std::string(to_string(op.kind)) + " reference");
            return;
        }
        // Sized once for any step (three slots' worth): a buffer replaced here could still be in
        // use by steps queued before on the stream.
        std::size_t largest = 0;
        for (const slot_class& c : slot_classes_of(rq_)) largest = std::max(largest, c.bytes);
        const std::size_t total = std::max(b.a_bytes + b.b_bytes + b.c_bytes, 3 * largest);
        if (fallback_stage_.size() < total) fallback_stage_ = dev_.allocate_host_staging(total);
        char* base = static_cast<char*>(fallback_stage_.get());
        tile_op op = b.op;
        if (b.a_bytes > 0 && op.a.data != nullptr) {
            dev_.copy_to_host(*compute_, base, op.a.data, b.a_bytes);
            op.a.data = base;
        }
        if (b.b_bytes > 0 && op.b.data != nullptr) {
            dev_.copy_to_host(*compute_, base + b.a_bytes, op.b.data, b.b_bytes);
            op.b.data = base + b.a_bytes;
        }
        void* c_device = const_cast<void*>(op.c.data);
        char* c_host = base + b.a_bytes + b.b_bytes;
        // C to staging even when the step does not read it: a step writing only its triangle
        // leaves the other one, which goes back with the tile (write_regions_whole).
        dev_.copy_to_host(*compute_, c_host, c_device, b.c_bytes);
        op.c.data = c_host;
        // Whole tiles went to staging; the step's parts of them are found there.
        bound_step staged = b;
        staged.op = op;
        const tile_op at = at_offsets(staged);
        // Outside reproducible mode, and unless the reference kernel was asked for, the staged tile
        // goes through OpenBLAS/LAPACK on the host (a 1024 potrf tile: milliseconds, where the
        // reference loop took about a second; seen as GPU potrf/trsm runs that did not finish).
        const bool vendor = !rq_.deterministic && at.kernel != gemm_kernel::reference;
        dev_.enqueue_host(*compute_, [at, vendor] {
            if (!vendor || !cpu::tile_vendor_on_calling_thread(at)) reference::execute(at);
        }, std::string(to_string(at.kind)) + (vendor ? " on the host" : " reference"));
        dev_.copy_to_device(*compute_, c_device, c_host, b.c_bytes);
        // LU's panel also writes its pivots into B (one of the task's outputs).
        if (op.kind == tile_kind::getrf && b.b_bytes > 0 && b.op.b.data != nullptr)
            dev_.copy_to_device(*compute_, const_cast<void*>(b.op.b.data), base + b.a_bytes, b.b_bytes);
    }

    void cancel_point() {
        if (rq_.run.cancel == nullptr) return;
        dev_.enqueue_host(*compute_, [flag = rq_.run.cancel, what = rq_.what] {
            if (flag->load()) throw cancelled(what + ": cancelled");
        }, "cancel point");
    }

    void injected_kernel_failure() {
        const std::string what = dev_.id() + ": kernel failed (injected fault)";
        dev_.enqueue_host(*compute_, [what] { throw device_error(what); }, "injected fault");
    }

    /// Host function after a task's write-back (or, in place, its kernels): it commits when no
    /// earlier operation of its streams failed (a failed stream skips later work, but its host
    /// functions of other streams still run).
    void committed_task(std::uint64_t seq) {
        const bool good = !st_.recoverable || rq_.in_place || (h2d_mark_.load() >= seq && compute_mark_.load() >= seq);
        int t = -1;
        double service = 0, flops = 0;
        {
            std::lock_guard lock(progress_mutex_);
            auto it = std::find_if(unfinished_.begin(), unfinished_.end(), [&](const record& r) { return r.seq == seq; });
            if (it == unfinished_.end()) return;
            if (!good) {
                broken_ = true;
                return;
            }
            t = it->task;
            flops = it->flops;
            // Service time: from when the device could start the task (issued, previous one done).
            const auto now = clock_type::now();
            service = std::chrono::duration<double>(now - std::max(it->issued, last_finish_)).count();
            last_finish_ = now;
            unfinished_.erase(it);
            --in_flight_;
            ++finished_;
        }
        std::size_t done = 0;
        {
            std::lock_guard lock(st_.mutex);
            const tile_task& task = g_.tasks[std::size_t(t)];
            for (const task_output& o : task.outputs) ++st_.version[std::size_t(o.tile)];
            for (int s : task.successors)
                if (--st_.waiting[std::size_t(s)] == 0) st_.ready.insert({-g_.tasks[std::size_t(s)].priority, s});
            st_.taken[std::size_t(t)] = 2;
            st_.queued_flops[index_] = std::max(0.0, st_.queued_flops[index_] - flops);
            if (flops > 0 && service > 0) {
                st_.rate[index_] = st_.estimated[index_] ? flops / service : std::max(st_.rate[index_], flops / service);
                st_.estimated[index_] = false;
            }
            done = ++st_.done;
        }
        st_.cv.notify_all();
        if (rq_.run.on_task_done) rq_.run.on_task_done(done, g_.tasks.size());
    }

    device& dev_;
    std::size_t index_;
    const run_request& rq_;
    shared_state& st_;
    const task_graph& g_;
    std::unique_ptr<tile_store> store_;
    std::unique_ptr<event> loaded_;  ///< after a task's copy-in marker (runs that survive faults)
    host_staging_buffer fallback_stage_;
    double slowdown_ = 0;
    double flops_ = 0;
    std::size_t finished_ = 0;
    std::uint64_t seq_ = 0;
    std::mutex progress_mutex_;
    std::deque<record> unfinished_;
    std::atomic<std::size_t> in_flight_{0};
    clock_type::time_point last_finish_{};
    std::atomic<std::uint64_t> h2d_mark_{0}, compute_mark_{0};
    std::atomic<bool> broken_{false};
    // Last, so they are destroyed (and drained) first.
    std::unique_ptr<stream> h2d_, compute_, d2h_;
    stream_priority compute_priority_ = stream_priority::high;
    std::unique_ptr<stream> peer_;  ///< copies out of this device's slots to others (peer tiles)
};

}  // namespace

std::vector<slot_class> slot_classes_of(const run_request& rq) {
    if (!rq.slot_classes.empty()) return sorted_classes(rq.slot_classes);
    return {{rq.slot_bytes, rq.slots}};
}

run_result run_tasks(const run_request& rq, std::span<device* const> devices) {
    run_result res;
    const task_graph& g = *rq.graph;
    if (devices.empty()) throw invalid_argument(rq.what + ": no device");
    for (std::size_t i = 0; i < devices.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (devices[i] == devices[j]) throw invalid_argument(rq.what + ": device " + devices[i]->id() + " is listed twice");
    const auto t0 = clock_type::now();
    if (g.tasks.empty()) return res;
    shared_state st(g, devices.size());
    if (rq.device_flops.size() == devices.size())
        for (std::size_t d = 0; d < devices.size(); ++d)
            if (rq.device_flops[d] > 0) st.rate[d] = st.kernel_rate[d] = rq.device_flops[d], st.estimated[d] = true;
    st.recoverable = devices.size() > 1;
    st.working = int(devices.size());
    // Each device's share of its budget (taken in one order, by address, so concurrent runs never
    // wait for each other in a cycle).
    std::vector<std::unique_ptr<budget_reservation>> reservations(devices.size());
    // What a context kept on each device from an earlier call (given back if this one succeeds).
    std::vector<std::shared_ptr<tiles_kit>> kits(devices.size());
    if (rq.memory != nullptr) {
        std::lock_guard lock(rq.memory->mutex);
        rq.memory->tile_kits.resize(std::max(rq.memory->tile_kits.size(), devices.size()));
        for (std::size_t i = 0; i < devices.size(); ++i) kits[i] = std::move(rq.memory->tile_kits[i]);
    }
    if (!rq.in_place) {
        const std::vector<slot_class> classes = slot_classes_of(rq);
        const std::size_t bytes = total_bytes(classes);
        for (std::size_t i = 0; i < devices.size(); ++i)
            if (kits[i] && kits[i]->reservation && kits[i]->reservation->bytes() >= bytes) {
                // Slots of this run's sizes are reused (as many as it has of each), the others
                // freed first: they hold memory of the reservation the new ones come from.
                std::vector<int> left(classes.size());
                for (std::size_t c = 0; c < classes.size(); ++c) left[c] = classes[c].count;
                std::erase_if(kits[i]->slots, [&](const tile_slot& x) {
                    for (std::size_t c = 0; c < classes.size(); ++c)
                        if (x.buf.size() == classes[c].bytes && left[c] > 0) {
                            --left[c];
                            return false;  // kept
                        }
                    return true;
                });
                reservations[i] = std::move(kits[i]->reservation);
                reservations[i]->reset_peak();
            } else if (kits[i]) {
                kits[i]->slots.clear();  // its buffers go back before a larger reservation is made
                kits[i]->reservation.reset();
            }
        std::vector<std::size_t> order(devices.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return std::less<device*>()(devices[x], devices[y]); });
        for (std::size_t i : order)
            if (!reservations[i]) reservations[i] = std::make_unique<budget_reservation>(*devices[i], bytes);
    }
    if (rq.run.trace)
        for (device* d : devices) d->set_trace_sink(rq.run.trace);
    const auto cancel_requested = [&] { return rq.run.cancel != nullptr && rq.run.cancel->load(); };
    std::vector<std::unique_ptr<device_worker>> workers(devices.size());
    std::vector<std::exception_ptr> errors(devices.size());
    const auto lose = [&](std::size_t i, std::exception_ptr e) {
        std::string message = "unknown error";
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            message = x.what();
        } catch (...) {
        }
        st.peers.forget(*devices[i]);  // no more copies out of its slots
        std::vector<int> back;
        if (workers[i]) {
            const std::string first = workers[i]->drain();
            if (!first.empty()) message = first;
            back = workers[i]->take_back();
        }
        {
            std::lock_guard lock(st.mutex);
            // Its pinned tasks (taken or not) go to any device; those not taken are redone
            // elsewhere too.
            std::size_t assigned = 0;
            for (std::size_t t = 0; t < st.owner.size(); ++t)
                if (st.owner[t] == int(i)) {
                    st.owner[t] = -1;
                    if (st.taken[t] == 0) ++assigned;
                }
            for (int t : back) {
                st.taken[std::size_t(t)] = 0;
                st.ready.insert({-g.tasks[std::size_t(t)].priority, t});
                st.remaining_flops += g.tasks[std::size_t(t)].flops;
            }
            st.queued_flops[i] = 0;
            st.active[i] = false;
            st.rate[i] = 0;
            st.faults.push_back({devices[i]->id(), message, back.size() + assigned});
            errors[i] = e;
            --st.working;
        }
        st.cv.notify_all();
    };
    const auto work = [&](std::size_t i) {
        try {
            std::vector<std::string> warnings;
            workers[i] = std::make_unique<device_worker>(*devices[i], i, rq, st,
                                                         reservations[i] ? reservations[i].get() : nullptr, warnings,
                                                         kits[i].get());
            if (!warnings.empty()) {
                std::lock_guard lock(st.mutex);
                for (auto& w : warnings) st.warnings.push_back(std::move(w));
            }
            workers[i]->run();
            workers[i]->finish();
        } catch (...) {
            if (st.recoverable && !cancel_requested() && !st.stop) {
                lose(i, std::current_exception());
                // With every device lost the others stop waiting.
                std::lock_guard lock(st.mutex);
                if (st.working == 0) st.stop = true;
            } else {
                errors[i] = std::current_exception();
                std::lock_guard lock(st.mutex);
                st.stop = true;
            }
            st.cv.notify_all();
        }
    };
    if (devices.size() == 1) {
        work(0);
    } else {
        std::vector<std::thread> threads;
        for (std::size_t i = 0; i < devices.size(); ++i) threads.emplace_back(work, i);
        for (auto& t : threads) t.join();
    }
    for (std::size_t i = 0; i < devices.size(); ++i) {
        if (!workers[i]) continue;
        try {
            workers[i]->finish();
        } catch (...) {
            if (!errors[i]) errors[i] = std::current_exception();
        }
    }
    for (std::size_t i = 0; i < devices.size(); ++i) {
        if (reservations[i]) res.peak_device_bytes = std::max(res.peak_device_bytes, reservations[i]->peak());
        if (!workers[i]) continue;
        res.devices.push_back(workers[i]->share());
        const store_counters c = workers[i]->counters();
        res.bytes_h2d += c.bytes_h2d;
        res.bytes_d2h += c.bytes_d2h;
        res.bytes_packed += c.bytes_packed;
        res.cache_hits += c.hits;
        res.cache_misses += c.misses;
        res.bytes_saved += c.bytes_saved;
        res.kept_hits += c.kept_hits;
        res.kept_bytes_saved += c.kept_bytes_saved;
        res.peer_hits += c.peer_hits;
        res.bytes_from_peers += c.bytes_from_peers;
    }
    // A run that succeeded on every device leaves its slots (and the tiles in them), streams and
    // reservations to the next call; after a fault or a cancel they are freed.
    bool clean = rq.memory != nullptr && st.faults.empty() && st.done == g.tasks.size() && !cancel_requested();
    for (std::size_t i = 0; i < devices.size(); ++i) clean = clean && !errors[i] && workers[i];
    if (clean) {
        for (std::size_t i = 0; i < devices.size(); ++i) {
            if (!kits[i]) kits[i] = std::make_shared<tiles_kit>();
            workers[i]->give_back(*kits[i]);
            // In place nothing was reserved: the kit keeps the reservation its slots came from.
            if (reservations[i]) kits[i]->reservation = std::move(reservations[i]);
        }
        std::lock_guard lock(rq.memory->mutex);
        for (std::size_t i = 0; i < devices.size(); ++i) rq.memory->tile_kits[i] = std::move(kits[i]);
    }
    kits.clear();   // what was not given back, before the reservations its buffers came from
    workers.clear();  // drains streams, frees slots
    reservations.clear();
    res.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (rq.run.trace)
        for (device* d : devices) d->set_trace_sink(nullptr);
    const std::size_t done = st.done;
    if (cancel_requested() && done < g.tasks.size())
        throw cancelled(rq.what + ": cancelled after " + std::to_string(done) + " of " + std::to_string(g.tasks.size()) + " tasks");
    if (st.recoverable) {
        if (done < g.tasks.size()) {
            throw_every_device_failed(rq.what, done, g.tasks.size(), "tasks", st.faults, errors);
        }
    } else {
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
        if (done < g.tasks.size())
            throw device_error(rq.what + ": the run stopped after " + std::to_string(done) + " of " +
                               std::to_string(g.tasks.size()) + " tasks");
    }
    res.faults = std::move(st.faults);
    res.warnings = std::move(st.warnings);
    // LAPACK's info: the first failing pivot in the order of the matrix (a tile after a failed
    // one computes on an incomplete factor and may fail too; the smallest index is the first).
    for (int t = 0; t < g.tiles; ++t)
        if (st.tile_info[std::size_t(t)] > 0) {
            const std::int64_t at = std::int64_t(g.where(t).row0) + st.tile_info[std::size_t(t)];
            if (res.info == 0 || at < res.info) res.info = at;
        }
    return res;
}

}  // namespace tilestream::detail::engine
