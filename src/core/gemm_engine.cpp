// Executes a GEMM plan: per device a pipeline of copy-in, compute and copy-out streams over a
// few device buffers ("slots"), ordered by events so copies overlap compute; work units come
// from a queue shared by all devices.
#include "core/balance.hpp"
#include "core/fault_injection.hpp"

#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>

#include "core/file_mappings.hpp"
#include "core/gemm_direct.hpp"
#include "core/gemm_memory.hpp"
#include "core/routines/gemm_tasks.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace tilestream {
namespace {

using detail::host_rect;
using detail::slot;

template <class V>
host_rect rect_of(const V& v, index_t r0, index_t c0, index_t nr, index_t nc) {
    using T = std::remove_const_t<typename V::value_type>;
    host_rect r;
    r.base = nr && nc ? reinterpret_cast<char*>(const_cast<T*>(&v(r0, c0))) : nullptr;
    r.rows = nr;
    r.cols = nc;
    r.ld = v.ld();
    r.lay = v.layout();
    r.es = sizeof(T);
    return r;
}

/// The host rectangle of a stored block of v (a block of op(X) in X's coordinates:
/// operand_desc::stored_block).
template <class V>
host_rect rect_of(const V& v, const operand_desc::stored_rect& s) {
    return rect_of(v, s.row, s.col, s.rows, s.cols);
}

/// A tile in some device's slot, for devices that may copy it from there (peer tile cache).
struct tile_holder {
    device* dev = nullptr;
    stream* peer_stream = nullptr;  // that device's stream for copies out to other devices
    slot* where = nullptr;
};

/// Counters shared by every device of one run.
struct run_state {
    run_state(std::size_t devices, std::size_t units)
        : claimed(units), seconds_per_unit(devices), estimated_seconds_per_unit(devices, 0.0), in_flight(devices),
          active(devices, true) {
        for (auto& c : claimed) c = false;
        for (auto& s : seconds_per_unit) s = 0.0;
        for (auto& f : in_flight) f = 0;
    }
    /// Units taken so far, and the first index that may still be free.
    std::vector<std::atomic<bool>> claimed;
    std::atomic<std::size_t> taken{0};
    std::atomic<std::size_t> head{0};
    std::atomic<std::size_t> units_done{0};
    std::atomic<std::size_t> steps_done{0};
    /// Every device stops taking units: the run was cancelled or failed for good.
    std::atomic<bool> stop{false};
    /// A lost device's units go back to the queue (several devices, no tiles copied between
    /// devices); otherwise its error ends the run.
    bool recoverable = false;
    /// Units given back by lost devices, taken before the queue; `working`: devices that may still
    /// finish units or give some back (the others wait, or are gone).
    std::mutex queue_mutex;
    std::condition_variable queue_cv;
    std::deque<std::size_t> returned;
    std::size_t working = 0;
    std::vector<device_fault> faults;
    std::vector<std::string> warnings;
    std::atomic<std::size_t> bytes_h2d{0}, bytes_d2h{0}, bytes_packed{0};
    /// Measured seconds per unit of each device (0 until its first unit finishes).
    std::vector<std::atomic<double>> seconds_per_unit;
    /// Until then, the estimate from the device's measured kernel rate (plan.device_flops; 0: none).
    std::vector<double> estimated_seconds_per_unit;
    /// A device's seconds per unit: measured, else estimated, else 0 (unknown).
    double unit_seconds(std::size_t d) const {
        const double measured = seconds_per_unit[d].load();
        return measured > 0 ? measured : estimated_seconds_per_unit[d];
    }
    std::vector<std::atomic<std::size_t>> in_flight;
    /// Devices still taking units; a device leaves only while a faster one stays (under the mutex),
    /// so the fastest never leaves and no unit is left behind.
    std::mutex tail_mutex;
    std::vector<bool> active;
    /// Which device holds which A (0) and B (1) tile, when tiles may come from peers.
    std::mutex directory_mutex;
    std::map<std::tuple<int, index_t, index_t>, std::vector<tile_holder>> directory;
    /// Each device's share of its budget for this run; its buffers are drawn from it.
    std::vector<budget_reservation*> reservations;
    /// Units run last to first (queue position u is unit units-1-u): every other call on kept
    /// operands, so it starts with the tiles the previous call left on the devices.
    bool reversed = false;
};

template <class T>
class device_pipeline {
public:
    device_pipeline(device& dev, std::size_t index, std::size_t count, const gemm_plan& plan, T alpha, T beta,
                    host_matrix_view<const T> a, host_matrix_view<const T> b, host_matrix_view<T> c, run_state& state,
                    const gemm_run_options& run, int shrink, detail::device_kit* kit, const detail::call_keeps& keeps)
        : dev_(dev), index_(index), count_(count), plan_(plan), alpha_(alpha), beta_(beta), a_(a), b_(b), c_(c),
          a_desc_(plan.problem.a_desc()), b_desc_(plan.problem.b_desc()),
          flops_per_multiply_add_(dtype_traits(plan.problem.type).flops_per_multiply_add), state_(state), run_(run),
          keeps_(keeps) {
        slowdown_ = fault_injection::slowdown_seconds(dev);
        const bool pack = plan.transfer == transfer_mode::pack;
        // Slots of a kept kit first (same size; execute_gemm_kept freed the others), tiles they hold
        // still marked by origin; then new ones.
        const auto make = [&](std::vector<slot>& v, std::vector<slot>* kept, int n, std::size_t bytes, bool out) {
            if (n > 0) n = std::max(1, n >> shrink);  // retries after a failed allocation: fewer buffers
            for (int i = 0; i < n; ++i) {
                slot s;
                if (kept != nullptr && !kept->empty() && kept->back().buf.size() == bytes) {
                    s = std::move(kept->back());
                    kept->pop_back();
                    s.key.reset();
                    s.last_use = 0;
                    s.peer_reads.clear();
                } else {
                    s.buf = dev.allocate(bytes, state.reservations[index]);
                    s.ready = dev.create_event();
                    s.released = dev.create_event();
                }
                if (pack && s.stage_in.get() == nullptr) s.stage_in = dev.allocate_host_staging(bytes);
                if (pack && out && s.stage_out.get() == nullptr) s.stage_out = dev.allocate_host_staging(bytes);
                if (out && state.recoverable && !s.inputs) s.inputs = dev.create_event();
                v.push_back(std::move(s));
            }
        };
        make(a_slots_, kit ? &kit->a : nullptr, plan.a_slots, plan.a_slot_bytes, false);
        make(b_slots_, kit ? &kit->b : nullptr, plan.b_slots, plan.b_slot_bytes, false);
        make(c_slots_, kit ? &kit->c : nullptr, plan.c_slots, plan.c_slot_bytes, true);
        if (kit != nullptr) {
            h2d_ = std::move(kit->h2d);
            compute_ = std::move(kit->compute);
            d2h_ = std::move(kit->d2h);
            peer_ = std::move(kit->peer);
        }
        if (!h2d_) h2d_ = dev.create_stream();
        if (!compute_) compute_ = dev.create_stream(stream_priority::high);
        if (!d2h_) d2h_ = dev.create_stream();
        if (!peer_) peer_ = dev.create_stream();
        if (run.trace != nullptr)  // lanes of a timeline are named by role, not stream number
            for (const auto& [st, role] : {std::pair{h2d_.get(), "copy in"}, std::pair{compute_.get(), "compute"},
                                           std::pair{d2h_.get(), "copy out"}, std::pair{peer_.get(), "peer tiles"}})
                run.trace->name_stream(dev.id(), st->id(), role);
        switch (run.peer_tiles) {
            case peer_tile_mode::on: use_peers_ = plan.cache && count > 1; break;
            case peer_tile_mode::off: use_peers_ = false; break;
            case peer_tile_mode::automatic: use_peers_ = plan.cache && count > 1 && !dev.host_addressable(); break;
        }
    }

    ~device_pipeline() {
        // Every stream drains before the members its queued host functions use are destroyed
        // (the streams are declared last), each on its own, whatever the others report.
        for (stream* st : {h2d_.get(), compute_.get(), d2h_.get(), peer_.get()}) {
            if (st == nullptr) continue;
            try {
                st->synchronize();
            } catch (...) {
            }
        }
    }

    void finish() {
        h2d_->synchronize();
        compute_->synchronize();
        d2h_->synchronize();
        peer_->synchronize();
    }

    /// After a run that succeeded (every stream drained): buffers and streams go to the kit for
    /// the next call.
    void give_back(detail::device_kit& kit) {
        kit.a = std::move(a_slots_);
        kit.b = std::move(b_slots_);
        kit.c = std::move(c_slots_);
        kit.h2d = std::move(h2d_);
        kit.compute = std::move(compute_);
        kit.d2h = std::move(d2h_);
        kit.peer = std::move(peer_);
    }

    /// Drains every stream (after a fault: nothing of this device runs on once it returns) and
    /// says what the first failing one reported ("" when none did).
    std::string drain() {
        std::string first;
        for (stream* st : {h2d_.get(), compute_.get(), d2h_.get(), peer_.get()}) {
            if (st == nullptr) continue;
            try {
                st->synchronize();
            } catch (const std::exception& e) {
                if (first.empty()) first = e.what();
            } catch (...) {
                if (first.empty()) first = "unknown error";
            }
        }
        return first;
    }

    /// After drain(): the units this device took or was assigned and did not finish, their C
    /// blocks restored to what they held before this device touched them.
    std::vector<std::size_t> take_back(std::size_t total) {
        std::vector<std::size_t> units;
        std::lock_guard lock(progress_mutex_);
        for (unit_record& r : unfinished_) {
            if (!r.backup.empty()) {
                const gemm_unit u = unit_at(r.index);
                copy_rows(desc(r.backup.data(), rect_of(c_, u.row0, u.col0, u.rows, u.cols), false));
            }
            units.push_back(r.index);
        }
        unfinished_.clear();
        if (plan_.static_assignment)
            for (std::size_t u = index_ + next_static_ * count_; u < total; u += count_) units.push_back(u);
        next_static_ = total;
        return units;
    }

    /// Whether this device should stop taking units (cancelled, or the run failed for good).
    bool stopping() const { return state_.stop.load() || (run_.cancel != nullptr && run_.cancel->load()); }

    void run(std::size_t total) {
        for (;;) {
            wait_for_room();
            if (stopping()) return;
            if (broken_.load())
                throw device_error(dev_.id() + ": a stream failed (a unit's copies or kernels did not complete)");
            std::size_t u = total;
            {
                std::lock_guard lock(state_.queue_mutex);
                if (!state_.returned.empty()) {
                    u = state_.returned.front();
                    state_.returned.pop_front();
                    ++state_.taken;
                }
            }
            if (u < total) {
                // A lost device's unit: taken at once (rare; balance does not matter).
            } else if (plan_.static_assignment) {
                u = index_ + next_static_ * count_;
                if (u >= total) return;
                ++next_static_;
                ++state_.taken;
            } else {
                if (!worth_taking(total)) {
                    // Declined for now: look again shortly (estimates change as units finish).
                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                    continue;
                }
                u = take_unit(total);
                if (u >= total) return;
            }
            start(u);
        }
    }

    /// "a/b/c": the buffers this pipeline holds per operand.
    std::string buffers() const {
        return std::to_string(a_slots_.size()) + "/" + std::to_string(b_slots_.size()) + "/" +
               std::to_string(c_slots_.size());
    }

    device_share share() const {
        device_share s;
        s.id = dev_.id();
        s.units = finished_;
        s.flops = flops_;
        s.bytes_h2d = bytes_h2d_;
        s.cache_hits = hits_;
        s.cache_misses = misses_;
        s.bytes_saved = bytes_saved_;
        s.peer_hits = peer_hits_;
        s.bytes_from_peers = bytes_from_peers_;
        s.kept_hits = kept_hits_;
        s.kept_bytes_saved = kept_bytes_saved_;
        return s;
    }

private:
    /// Blocks while this device already has its limit of unfinished units.
    void wait_for_room() {
        // In place (zero-copy) there is no copy to overlap with compute, so a second queued unit
        // would only be one the other devices can no longer take: one at a time keeps the tail even.
        const int limit = plan_.strategy == gemm_strategy::zero_copy ? 1 : std::max(1, run_.max_units_in_flight);
        const auto room = [&] { return in_flight_ < std::size_t(limit) || stopping() || broken_.load(); };
        // A cancel flag is not notified, nor is a unit whose stream failed: look often.
        const auto poll = std::chrono::milliseconds(run_.cancel != nullptr || state_.recoverable ? 10 : 200);
        auto since = std::chrono::steady_clock::now();
        for (;;) {
            bool stuck = false;
            {
                std::unique_lock lock(progress_mutex_);
                if (progress_cv_.wait_for(lock, poll, room)) return;
                // The event after the oldest unit's "unit done" was reached, yet the unit is not
                // done: its stream failed and skipped it.
                stuck = !unfinished_.empty() && unfinished_.front().done && unfinished_.front().done->ready();
            }
            if (!stuck && std::chrono::steady_clock::now() - since < std::chrono::milliseconds(200)) continue;
            since = std::chrono::steady_clock::now();
            // Nothing finished for a while: an error on the stream that finishes units would keep
            // the count from ever dropping, so drain that stream, which rethrows such an error.
            (plan_.strategy == gemm_strategy::zero_copy ? compute_ : d2h_)->synchronize();
        }
    }

    /// Tail balance: do not start a unit when another device that is taking units would finish
    /// its queued units and all that remain before this device finishes its queued ones and this
    /// one. Decisions are made one at a time under a mutex and a declining device stops counting as
    /// one that takes units, so at least one device always takes the next unit.
    bool worth_taking(std::size_t total) {
        const double mine = state_.unit_seconds(index_);
        if (mine <= 0 || count_ == 1) return true;
        std::lock_guard lock(state_.tail_mutex);
        state_.active[index_] = true;
        const std::size_t taken = state_.taken.load();
        if (taken >= total) return true;  // nothing left: the caller sees that and stops
        const double remaining = double(total - taken);
        const double my_finish = double(state_.in_flight[index_].load() + 1) * mine;
        for (std::size_t d = 0; d < state_.seconds_per_unit.size(); ++d) {
            const double other = state_.unit_seconds(d);
            if (d == index_ || !state_.active[d] || other <= 0) continue;
            // Far slower: by the kernels' measured rates where known (a first unit's time includes
            // warm-up), else by the units' times.
            const double mine_unit = state_.estimated_seconds_per_unit[index_] > 0 ? state_.estimated_seconds_per_unit[index_] : mine;
            const double other_unit = state_.estimated_seconds_per_unit[d] > 0 ? state_.estimated_seconds_per_unit[d] : other;
            const detail::peer_speed speed = detail::compare_peer_by_time(mine_unit, other_unit);
            if (speed == detail::peer_speed::far_faster) {
                state_.active[index_] = false;
                return false;
            }
            if (speed == detail::peer_speed::far_slower) continue;
            if ((double(state_.in_flight[d].load()) + remaining) * other < my_finish) {
                state_.active[index_] = false;
                return false;
            }
        }
        return true;
    }

    /// The next unit from the shared queue. With the tile cache on, the device looks a few units
    /// ahead and takes the one whose tiles it holds most of, so units sharing tiles stay together.
    std::size_t take_unit(std::size_t total) {
        for (;;) {
            std::size_t h = state_.head.load();
            while (h < total && state_.claimed[h].load()) {
                state_.head.compare_exchange_weak(h, h + 1);
                h = state_.head.load();
            }
            if (h >= total) return total;
            std::size_t best = h;
            if (plan_.cache && count_ > 1) {
                int best_score = -1;
                const std::size_t window = std::min(total, h + 2 * count_ + 2);
                for (std::size_t u = h; u < window; ++u) {
                    if (state_.claimed[u].load()) continue;
                    const int score = cached_tiles(unit_at(u));
                    if (score > best_score) {
                        best_score = score;
                        best = u;
                    }
                }
            }
            bool expected = false;
            if (state_.claimed[best].compare_exchange_strong(expected, true)) {
                ++state_.taken;
                return best;
            }
        }
    }

    /// The unit at queue position u (see run_state::reversed).
    gemm_unit unit_at(std::size_t u) const { return plan_unit(plan_, state_.reversed ? plan_.units - 1 - u : u); }

    int cached_tiles(const gemm_unit& u) const {
        int n = 0;
        const auto held = [](const std::vector<slot>& slots, std::pair<index_t, index_t> key) {
            for (const auto& s : slots)
                if (s.key == key) return true;
            return false;
        };
        for (const auto& st : u.steps) {
            n += held(a_slots_, {st.a_tile_row, st.k_block});
            n += held(b_slots_, {st.k_block, st.b_tile_col});
        }
        return n;
    }

    /// Starts unit u: notes it as unfinished (with its C block's values when a redo elsewhere
    /// would need them) and queues its work.
    void start(std::size_t u) {
        const gemm_unit unit = unit_at(u);
        unit_record rec;
        rec.index = u;
        rec.seq = ++seq_;
        if (state_.recoverable) rec.done = std::shared_ptr<event>(dev_.create_event());
        const std::shared_ptr<event> done = rec.done;
        // A unit redone elsewhere after this device wrote part of its C block must start from C's
        // first values when beta != 0 (with beta == 0 the redo overwrites every element).
        if (state_.recoverable && plan_.problem.reads_c) {
            const host_rect r = rect_of(c_, unit.row0, unit.col0, unit.rows, unit.cols);
            rec.backup.resize(r.bytes());
            copy_rows(desc(rec.backup.data(), r, true));
        }
        {
            std::lock_guard lock(progress_mutex_);
            ++in_flight_;
            ++state_.in_flight[index_];
            enqueued_.push_back(std::chrono::steady_clock::now());
            unfinished_.push_back(std::move(rec));
        }
        process(unit, seq_, done.get());
    }

    /// Host function run on the copy-out stream when a unit is back in host memory. In runs that
    /// survive faults, the unit counts only when the markers its copy-in and compute streams ran
    /// after its work show that no operation before them failed (a failed stream skips the rest).
    void unit_finished(std::uint64_t seq) {
        const bool good = !state_.recoverable || plan_.strategy == gemm_strategy::zero_copy ||
                          (h2d_mark_.load() >= seq && compute_mark_.load() >= seq);
        {
            std::lock_guard lock(progress_mutex_);
            --in_flight_;
            --state_.in_flight[index_];
            if (!good) {
                enqueued_.pop_front();
                broken_ = true;
                progress_cv_.notify_all();
                return;
            }
            std::erase_if(unfinished_, [&](const unit_record& r) { return r.seq == seq; });
            ++finished_;
            // Service time: from when the device could start this unit (it was enqueued and the
            // previous one was done) to its end. The fastest seen is the device's speed: a hiccup
            // (a thread start, a busy machine) must not make a fast device decline work for good.
            const auto now = std::chrono::steady_clock::now();
            const auto begin = std::max(enqueued_.front(), last_finish_);
            enqueued_.pop_front();
            last_finish_ = now;
            const double service = std::chrono::duration<double>(now - begin).count();
            const double best = state_.seconds_per_unit[index_].load();
            if (best <= 0 || service < best) state_.seconds_per_unit[index_] = service;
        }
        progress_cv_.notify_all();
        const std::size_t done = ++state_.units_done;
        if (run_.on_unit_done) run_.on_unit_done(done);
    }

    void process(const gemm_unit& u, std::uint64_t seq, event* done) {
        const bool inject = fault_injection::unit_fails(dev_);
        if (plan_.strategy == gemm_strategy::zero_copy) return process_in_place(u, seq, inject, done);
        const gemm_problem& q = plan_.problem;
        const bool ab = q.reads_ab && q.k > 0;
        slot& cs = c_slots_[next_c_++ % c_slots_.size()];
        const host_rect c_rect = rect_of(c_, u.row0, u.col0, u.rows, u.cols);
        // Nothing may write the C slot before its previous contents have been copied out.
        if (q.reads_c) {
            dev_.wait(*h2d_, *cs.released);
            load(cs, c_rect);
            cs.ready->record(*h2d_);
            dev_.wait(*compute_, *cs.ready);
        } else {
            dev_.wait(*compute_, *cs.released);
        }
        for (const gemm_step& st : u.steps) {
            cancel_point();
            gemm_call call = step_call(st);
            if (ab && st.depth > 0) {
                const index_t i0 = st.a_tile_row * plan_.tile_m, p0 = st.k_block * plan_.tile_k,
                              j0 = st.b_tile_col * plan_.tile_n;
                const host_rect ar = rect_of(a_, a_desc_.stored_block(i0, p0, st.rows, st.depth));
                const host_rect br = rect_of(b_, b_desc_.stored_block(p0, j0, st.depth, st.cols));
                slot& as = acquire(0, a_slots_, {st.a_tile_row, st.k_block}, plan_.reuse_a, ar);
                slot& bs = acquire(1, b_slots_, {st.k_block, st.b_tile_col}, plan_.reuse_b, br);
                call.a = as.buf.get();
                call.lda = std::max<index_t>(1, ar.inner());
                call.layout_a = ar.lay;
                call.b = bs.buf.get();
                call.ldb = std::max<index_t>(1, br.inner());
                call.layout_b = br.lay;
                call.c = c_element(cs, c_rect, st.c_row, st.c_col);
                call.ldc = std::max<index_t>(1, c_rect.inner());
                call.layout_c = c_rect.lay;
                gemm_by_k_blocks(call);
                slow_down();
                step_done();
                as.released->record(*compute_);
                bs.released->record(*compute_);
            } else {
                // alpha == 0 or k == 0: C = beta*C, A and B never read.
                call.k = 0;
                call.alpha = 0;
                call.beta = as_scalar(beta_);
                call.c = c_element(cs, c_rect, st.c_row, st.c_col);
                call.ldc = std::max<index_t>(1, c_rect.inner());
                call.layout_c = c_rect.lay;
                dev_.gemm(*compute_, call);
                step_done();
            }
            flops_ += flops_per_multiply_add_ * double(st.rows) * double(st.cols) * double(st.depth);
            if (inject && &st == &u.steps.front()) injected_kernel_failure();
        }
        if (state_.recoverable) {
            dev_.enqueue_host(*h2d_, [this, seq] { h2d_mark_ = seq; }, "unit loaded");
            cs.inputs->record(*h2d_);
            dev_.enqueue_host(*compute_, [this, seq] { compute_mark_ = seq; }, "unit computed");
        }
        cs.ready->record(*compute_);
        dev_.wait(*d2h_, *cs.ready);
        if (state_.recoverable) dev_.wait(*d2h_, *cs.inputs);
        store(cs, c_rect);
        cs.released->record(*d2h_);
        dev_.enqueue_host(*d2h_, [this, seq] { unit_finished(seq); }, "unit done");
        if (done != nullptr) done->record(*d2h_);
    }

    /// Test fault: the compute stream reports an error after the unit's first step.
    void injected_kernel_failure() {
        const std::string what = dev_.id() + ": kernel failed (injected fault)";
        dev_.enqueue_host(*compute_, [what] { throw device_error(what); }, "injected fault");
    }

    /// With a cancel flag, the compute stream looks at it before each step: once set, the step
    /// and everything after it on the stream are skipped (an error stops a stream), so the run
    /// drains in about one kernel's time.
    void cancel_point() {
        if (run_.cancel == nullptr) return;
        dev_.enqueue_host(*compute_, [flag = run_.cancel] {
            if (flag->load()) throw cancelled("gemm: cancelled");
        }, "cancel point");
    }

    /// The kernel call of one step, operands not yet set: the first k-slab applies beta, later
    /// ones accumulate.
    gemm_call step_call(const gemm_step& st) const {
        const gemm_problem& q = plan_.problem;
        gemm_call call;
        call.type = q.type;
        call.op_a = q.op_a;
        call.op_b = q.op_b;
        call.m = st.rows;
        call.n = st.cols;
        call.k = st.depth;
        call.alpha = as_scalar(alpha_);
        call.beta = st.k_block == 0 ? as_scalar(beta_) : scalar(1.0);
        call.kernel = plan_.device_kernels.empty() ? plan_.kernel : plan_.device_kernels.at(index_);
        call.math = plan_.math;
        return call;
    }

    /// Progress after a kernel step, on the stream that ran it.
    void step_done() {
        if (run_.on_step_done)
            dev_.enqueue_host(*compute_, [this] { run_.on_step_done(++state_.steps_done); }, "step done");
    }

    /// Zero-copy: the kernel reads A and B and writes C where they lie in host memory, with the
    /// host strides, on the compute stream; nothing is copied.
    void process_in_place(const gemm_unit& u, std::uint64_t seq, bool inject, event* done) {
        const gemm_problem& q = plan_.problem;
        const bool ab = q.reads_ab && q.k > 0;
        for (const gemm_step& st : u.steps) {
            cancel_point();
            gemm_call call = step_call(st);
            const index_t i0 = u.row0 + st.c_row, j0 = u.col0 + st.c_col;
            call.c = &c_(i0, j0);
            call.ldc = c_.ld();
            call.layout_c = c_.layout();
            if (ab && st.depth > 0) {
                const index_t p0 = st.k_block * plan_.tile_k;
                const operand_desc::stored_rect ar = a_desc_.stored_block(i0, p0, st.rows, st.depth);
                const operand_desc::stored_rect br = b_desc_.stored_block(p0, j0, st.depth, st.cols);
                call.a = &a_(ar.row, ar.col);
                call.lda = a_.ld();
                call.layout_a = a_.layout();
                call.b = &b_(br.row, br.col);
                call.ldb = b_.ld();
                call.layout_b = b_.layout();
            } else {
                call.k = 0;  // alpha == 0 or k == 0: C = beta*C, A and B never read
                call.alpha = 0;
                call.beta = as_scalar(beta_);
            }
            gemm_by_k_blocks(call);
            slow_down();
            step_done();
            flops_ += flops_per_multiply_add_ * double(st.rows) * double(st.cols) * double(st.depth);
            if (inject && &st == &u.steps.front()) injected_kernel_failure();
        }
        dev_.enqueue_host(*compute_, [this, seq] { unit_finished(seq); }, "unit done");
        if (done != nullptr) done->record(*compute_);
    }

    /// One kernel call per k-block of the step, in order, when the plan fixes the k-order (the
    /// step starts on a k-block boundary): every plan then adds the same partial products.
    void gemm_by_k_blocks(const gemm_call& call) {
        detail::for_each_k_block(call, plan_.k_block, [&](const gemm_call& part) { dev_.gemm(*compute_, part); });
    }

    void slow_down() {
        if (slowdown_ <= 0) return;
        const double s = slowdown_;
        dev_.enqueue_host(*compute_, [s] { std::this_thread::sleep_for(std::chrono::duration<double>(s)); },
                          "test slowdown");
    }

    void* c_element(slot& cs, const host_rect& c_rect, index_t r, index_t c) {
        const index_t ld = std::max<index_t>(1, c_rect.inner());
        const index_t off = c_rect.lay == layout::row_major ? r * ld + c : c * ld + r;
        return static_cast<char*>(cs.buf.get()) + std::size_t(off) * c_rect.es;
    }

    /// The slot holding `key` (when reuse is on and it is there), else the least recently used
    /// slot, loaded with the tile after its last reader has finished.
    slot& acquire(int operand, std::vector<slot>& slots, std::pair<index_t, index_t> key, bool reuse,
                  const host_rect& r) {
        ++clock_;
        if (reuse)
            for (auto& s : slots)
                if (s.key == key) {
                    s.last_use = clock_;
                    if (plan_.cache) {
                        ++hits_;
                        bytes_saved_ += r.bytes();
                    }
                    return s;
                }
        // A tile an earlier call read from the same kept operand, unchanged since (slots this
        // call has used are known by their key).
        const detail::operand_keep& kept = operand == 0 ? keeps_.a : keeps_.b;
        if (kept.id != 0)
            for (auto& s : slots)
                if (!s.key && s.keep.id == kept.id && s.keep.generation == kept.generation && s.origin == r) {
                    s.key = key;
                    s.last_use = clock_;
                    ++kept_hits_;
                    kept_bytes_saved_ += r.bytes();
                    if (use_peers_) {
                        std::lock_guard lock(state_.directory_mutex);
                        state_.directory[{operand, key.first, key.second}].push_back({&dev_, peer_.get(), &s});
                    }
                    return s;
                }
        if (plan_.cache) ++misses_;
        // Least recently used; among slots this call has not used, those holding a tile of the
        // kept operand (that a later step may take) go last.
        const auto rank = [&](const slot& s) {
            const bool kept_tile = !s.key && kept.id != 0 && s.keep.id == kept.id && s.keep.generation == kept.generation;
            return std::pair{s.last_use, kept_tile};
        };
        slot* victim = &slots.front();
        for (auto& s : slots)
            if (rank(s) < rank(*victim)) victim = &s;
        std::shared_ptr<event> from_peer;
        std::vector<std::shared_ptr<event>> reads;
        if (use_peers_) {
            std::lock_guard lock(state_.directory_mutex);
            // The victim leaves the directory before it is overwritten; copies other devices
            // are making out of it must end first.
            if (victim->key) std::erase_if(state_.directory[{operand, victim->key->first, victim->key->second}],
                                           [&](const tile_holder& h) { return h.where == victim; });
            reads.swap(victim->peer_reads);
            for (const tile_holder& h : state_.directory[{operand, key.first, key.second}]) {
                if (h.dev == &dev_ || !h.dev->can_copy_peer(dev_)) continue;
                // Made first: once the copy is queued, nothing may fail before we can wait for it.
                std::shared_ptr<event> done(h.dev->create_event());
                // The holder's stream copies once its tile is loaded and our slot is free.
                h.dev->wait(*h.peer_stream, *h.where->ready);
                h.dev->wait(*h.peer_stream, *victim->released);
                for (auto& e : reads) h.dev->wait(*h.peer_stream, *e);
                h.dev->copy_peer(*h.peer_stream, dev_, victim->buf.get(), h.where->buf.get(), r.bytes());
                done->record(*h.peer_stream);
                std::erase_if(h.where->peer_reads, [](const std::shared_ptr<event>& e) { return e->ready(); });
                h.where->peer_reads.push_back(done);
                from_peer = std::move(done);
                break;
            }
        }
        if (from_peer) {
            ++peer_hits_;
            bytes_from_peers_ += r.bytes();
            dev_.wait(*h2d_, *from_peer);
        } else {
            dev_.wait(*h2d_, *victim->released);
            for (auto& e : reads) dev_.wait(*h2d_, *e);
            load(*victim, r);
        }
        victim->ready->record(*h2d_);
        dev_.wait(*compute_, *victim->ready);
        victim->key = key;
        victim->last_use = clock_;
        victim->origin = r;
        victim->keep = kept;
        if (use_peers_) {
            // Listed only now that its ready event marks this tile's arrival.
            std::lock_guard lock(state_.directory_mutex);
            state_.directory[{operand, key.first, key.second}].push_back({&dev_, peer_.get(), victim});
        }
        return *victim;
    }

    void load(slot& s, const host_rect& r) {
        const std::size_t bytes = r.bytes();
        state_.bytes_h2d += bytes;
        bytes_h2d_ += bytes;
        if (bytes == 0) return;
        if (fault_injection::h2d_fails(dev_)) {
            const std::string what = dev_.id() + ": copy to the device failed (injected fault)";
            dev_.enqueue_host(*h2d_, [what] { throw device_error(what); }, "injected fault");
            return;
        }
        if (plan_.transfer == transfer_mode::copy_2d) {
            dev_.copy_2d_to_device(*h2d_, desc(s.buf.get(), r, true));
        } else if (r.contiguous()) {
            dev_.copy_to_device(*h2d_, s.buf.get(), r.base, bytes);
        } else {
            state_.bytes_packed += bytes;
            const copy_2d_desc gather = desc(s.stage_in.get(), r, true);
            dev_.enqueue_host(*h2d_, [gather] { copy_rows(gather); }, "pack");
            dev_.copy_to_device(*h2d_, s.buf.get(), s.stage_in.get(), bytes);
        }
    }

    void store(slot& s, const host_rect& r) {
        const std::size_t bytes = r.bytes();
        state_.bytes_d2h += bytes;
        if (bytes == 0) return;
        if (fault_injection::d2h_fails(dev_)) {
            // Half of the block's rows get garbage, as from a copy that broke off.
            const std::string what = dev_.id() + ": copy to the host failed half way (injected fault)";
            copy_2d_desc d = desc(nullptr, r, false);
            d.height = (d.height + 1) / 2;
            dev_.enqueue_host(*d2h_, [what, d] {
                for (std::size_t row = 0; row < d.height; ++row)
                    std::memset(static_cast<char*>(d.dst) + row * d.dst_pitch, 0x7f, d.width_bytes);
                throw device_error(what);
            }, "injected fault");
            return;
        }
        if (plan_.transfer == transfer_mode::copy_2d) {
            dev_.copy_2d_to_host(*d2h_, desc(s.buf.get(), r, false));
        } else if (r.contiguous()) {
            dev_.copy_to_host(*d2h_, r.base, s.buf.get(), bytes);
        } else {
            state_.bytes_packed += bytes;
            dev_.copy_to_host(*d2h_, s.stage_out.get(), s.buf.get(), bytes);
            const copy_2d_desc scatter = desc(s.stage_out.get(), r, false);
            dev_.enqueue_host(*d2h_, [scatter] { copy_rows(scatter); }, "unpack");
        }
    }

    static copy_2d_desc desc(void* packed, const host_rect& r, bool to_packed) {
        return detail::packed_copy(packed, r, to_packed);
    }

    static void copy_rows(const copy_2d_desc& d) {
        for (std::size_t row = 0; row < d.height; ++row)
            std::memcpy(static_cast<char*>(d.dst) + row * d.dst_pitch,
                        static_cast<const char*>(d.src) + row * d.src_pitch, d.width_bytes);
    }

    device& dev_;
    std::size_t index_, count_;
    const gemm_plan& plan_;
    T alpha_, beta_;
    host_matrix_view<const T> a_, b_;
    host_matrix_view<T> c_;
    /// op(A) and op(B) as stored on the host: where each step's blocks lie.
    operand_desc a_desc_, b_desc_;
    double flops_per_multiply_add_;
    run_state& state_;
    const gemm_run_options& run_;
    detail::call_keeps keeps_;
    std::vector<slot> a_slots_, b_slots_, c_slots_;
    bool use_peers_ = false;
    std::size_t peer_hits_ = 0, bytes_from_peers_ = 0;
    std::size_t next_c_ = 0;
    std::uint64_t clock_ = 0;
    double flops_ = 0;
    /// Units started and not yet known finished, oldest first (with C's values when kept).
    struct unit_record {
        std::size_t index = 0;
        std::uint64_t seq = 0;
        std::vector<char> backup;
        std::shared_ptr<event> done;  ///< recorded after its "unit done" (runs that survive faults)
    };
    std::deque<unit_record> unfinished_;
    std::uint64_t seq_ = 0;
    std::size_t next_static_ = 0;  ///< static assignment: units of this device taken so far
    /// Sequence numbers of the last unit whose loads / kernels ran (see unit_finished).
    std::atomic<std::uint64_t> h2d_mark_{0}, compute_mark_{0};
    std::atomic<bool> broken_{false};
    std::size_t bytes_h2d_ = 0, hits_ = 0, misses_ = 0, bytes_saved_ = 0, kept_hits_ = 0, kept_bytes_saved_ = 0;
    double slowdown_ = 0;
    std::mutex progress_mutex_;
    std::condition_variable progress_cv_;
    std::size_t in_flight_ = 0, finished_ = 0;
    std::deque<std::chrono::steady_clock::time_point> enqueued_;
    std::chrono::steady_clock::time_point last_finish_{};
    // Last, so they are destroyed (and drained) first.
    std::unique_ptr<stream> h2d_, compute_, d2h_, peer_;
};

/// Bytes spanned by a host view (first to last element).
template <class V>
std::size_t span_bytes(const V& v) {
    using T = std::remove_const_t<typename V::value_type>;
    if (v.empty()) return 0;
    const index_t outer = v.layout() == layout::row_major ? v.rows() : v.cols();
    const index_t inner = v.layout() == layout::row_major ? v.cols() : v.rows();
    return std::size_t((outer - 1) * v.ld() + inner) * sizeof(T);
}

}  // namespace

template <class T>
gemm_problem describe_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<T> c) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    return detail::describe_validated_gemm(op_a, op_b, alpha, a, b, beta, c);
}

template <class T>
gemm_report execute_gemm(const gemm_plan& plan, std::span<device* const> devices, T alpha,
                         host_matrix_view<const T> a, host_matrix_view<const T> b, T beta, host_matrix_view<T> c,
                         const gemm_run_options& run) {
    return detail::execute_gemm_kept<T>(plan, devices, alpha, a, b, beta, c, run, nullptr, {});
}

template <class T>
gemm_report detail::execute_gemm_kept(const gemm_plan& plan, std::span<device* const> devices, T alpha,
                                      host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                                      host_matrix_view<T> c, const gemm_run_options& run, gemm_memory* memory,
                                      const call_keeps& keeps) {
    using clock = std::chrono::steady_clock;
    const gemm_problem actual = describe_gemm(plan.problem.op_a, plan.problem.op_b, alpha, a, b, beta, c);
    const gemm_problem& q = plan.problem;
    if (actual.m != q.m || actual.n != q.n || actual.k != q.k || actual.type != q.type || actual.reads_c != q.reads_c ||
        actual.reads_ab != q.reads_ab || actual.layout_a != q.layout_a || actual.layout_b != q.layout_b ||
        actual.layout_c != q.layout_c)
        throw invalid_argument("execute_gemm: the operands do not match the problem the plan was made for");
    if (devices.empty()) throw invalid_argument("execute_gemm: no device");
    // A device listed twice would wait for its own reservation.
    for (std::size_t i = 0; i < devices.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (devices[i] == devices[j])
                throw invalid_argument("execute_gemm: device " + devices[i]->id() + " is listed twice");
    if (!plan.device_kernels.empty() && plan.device_kernels.size() != devices.size())
        throw invalid_argument("execute_gemm: the plan names kernels for " + std::to_string(plan.device_kernels.size()) +
                               " devices, the run has " + std::to_string(devices.size()));
    for (std::size_t i = 0; i < devices.size(); ++i) {
        const gemm_kernel k = plan.device_kernels.empty() ? plan.kernel : plan.device_kernels[i];
        if (plan.strategy != gemm_strategy::direct && !devices[i]->supports(k))
            throw invalid_argument("gemm: device " + devices[i]->id() + " has no '" + std::string(to_string(k)) +
                                   "' kernel (the reference kernel runs on CPU devices only)");
    }

    gemm_report rep;
    rep.plan = plan;
    if (plan.strategy == gemm_strategy::direct) {
        // No device: the host's kernel on this thread (a context's small calls).
        if (run.cancel != nullptr && run.cancel->load()) throw cancelled("gemm: cancelled before it started");
        const auto t0 = clock::now();
        detail::host_gemm(detail::host_gemm_call<T>(q.op_a, q.op_b, alpha, a, b, beta, c, plan.kernel),
                          plan.direct_threads, plan.k_block);
        rep.seconds = std::chrono::duration<double>(clock::now() - t0).count();
        if (run.on_step_done) run.on_step_done(1);
        if (run.on_unit_done) run.on_unit_done(1);
        return rep;
    }
    if (q.m == 0 || q.n == 0) return rep;

    // Pinning is set-up, not work: done before the clock starts (and once for repeated runs, by
    // a caller holding a pinned_operands).
    pinned_operands pinned;
    if (run.register_host && q.reads_ab) pinned = pinned_operands(devices, a, b, c);
    else if (run.register_host)
        pinned = pinned_operands(devices, std::array{std::pair<const void*, std::size_t>{c.data(), span_bytes(c)}});
    for (const auto& w : pinned.refused()) rep.warnings.push_back("host memory not pinned (copies stay pageable): " + w);
    const auto t0 = clock::now();
    // Units are computed from their index when taken (a plan may have millions).
    const std::size_t units = plan.units;
    if (units == 0) return rep;
    if (plan.engine == gemm_engine::tasks) {
        detail::engine::report_run(
            rep, detail::routines::run_gemm_plan<T>(plan, devices, alpha, a, b, beta, c, run, memory, keeps));
        rep.seconds = std::chrono::duration<double>(clock::now() - t0).count();  // the graph's making too
        return rep;
    }

    run_state state(devices.size(), units);
    if (plan.device_flops.size() == devices.size() && q.reads_ab && plan.batch == 0)
        for (std::size_t d = 0; d < devices.size(); ++d)
            if (plan.device_flops[d] > 0) state.estimated_seconds_per_unit[d] = q.flops() / double(units) / plan.device_flops[d];
    if (memory != nullptr && (keeps.a.id != 0 || keeps.b.id != 0)) {
        std::lock_guard lock(memory->mutex);
        state.reversed = memory->reverse_next;
        memory->reverse_next = !memory->reverse_next;
    }
    // Each device's share of its budget, so concurrent runs on a device take turns instead of
    // failing, and this run's peak is its own. Taken in one order (by address): runs sharing
    // devices never wait for each other in a cycle.
    std::vector<std::unique_ptr<budget_reservation>> reservations(devices.size());
    // What the context kept on each device, taken out for this run (given back if it succeeds).
    std::vector<std::unique_ptr<detail::device_kit>> kits(devices.size());
    if (memory != nullptr) {
        std::lock_guard lock(memory->mutex);
        memory->kits.resize(std::max(memory->kits.size(), devices.size()));
        for (std::size_t i = 0; i < devices.size(); ++i) kits[i] = std::move(memory->kits[i]);
    }
    for (std::size_t i = 0; i < devices.size(); ++i) {
        if (!kits[i]) continue;
        detail::device_kit& kit = *kits[i];
        if (kit.reservation && kit.reservation->bytes() >= plan.peak_device_bytes) {
            // Buffers of this plan's sizes are reused (as many as it has slots), the others freed;
            // the reservation stays this run's.
            const auto prune = [](std::vector<slot>& v, int n, std::size_t bytes) {
                std::erase_if(v, [&](const slot& s) { return s.buf.size() != bytes; });
                while (v.size() > std::size_t(std::max(n, 0))) v.pop_back();
            };
            prune(kit.a, plan.a_slots, plan.a_slot_bytes);
            prune(kit.b, plan.b_slots, plan.b_slot_bytes);
            prune(kit.c, plan.c_slots, plan.c_slot_bytes);
            reservations[i] = std::move(kit.reservation);
            reservations[i]->reset_peak();
        } else {
            // The plan needs more than was kept: buffers and reservation go back to the device.
            kit.a.clear();
            kit.b.clear();
            kit.c.clear();
            kit.reservation.reset();
        }
    }
    {
        std::vector<std::size_t> order(devices.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
            return std::less<device*>()(devices[x], devices[y]);
        });
        for (std::size_t i : order)
            if (!reservations[i]) reservations[i] = std::make_unique<budget_reservation>(*devices[i], plan.peak_device_bytes);
        for (const auto& r : reservations) state.reservations.push_back(r.get());
    }
    for (std::size_t i = 0; i < devices.size(); ++i)
        if (run.trace) devices[i]->set_trace_sink(run.trace);
    // Faults are survived with several devices, unless tiles travel between devices (a lost
    // device's tiles could then be in use elsewhere).
    bool peers_possible = false;
    for (device* d : devices)
        if (run.peer_tiles == peer_tile_mode::on || (run.peer_tiles == peer_tile_mode::automatic && !d->host_addressable()))
            peers_possible = plan.cache;
    state.recoverable = devices.size() > 1 && !peers_possible;
    state.working = devices.size();
    const auto cancel_requested = [&] { return run.cancel != nullptr && run.cancel->load(); };
    std::vector<std::unique_ptr<device_pipeline<T>>> pipes(devices.size());
    std::vector<std::exception_ptr> errors(devices.size());
    // A device that failed: drained, its unfinished units (C restored) back to the queue.
    const auto lose = [&](std::size_t i, std::exception_ptr e) {
        std::string message = "unknown error";
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            message = x.what();
        } catch (...) {
        }
        {
            std::lock_guard lock(state.tail_mutex);
            state.active[i] = false;
        }
        std::vector<std::size_t> back;
        if (pipes[i]) {
            // The stream's own error says more than "a stream failed".
            const std::string first = pipes[i]->drain();
            if (!first.empty()) message = first;
            back = pipes[i]->take_back(units);
        } else if (plan.static_assignment) {
            for (std::size_t u = i; u < units; u += devices.size()) back.push_back(u);
        }
        std::lock_guard lock(state.queue_mutex);
        for (std::size_t u : back) state.returned.push_back(u);
        state.taken -= std::min<std::size_t>(state.taken.load(), back.size());
        state.faults.push_back({devices[i]->id(), message, back.size()});
        errors[i] = e;
        --state.working;
        state.queue_cv.notify_all();
    };
    const auto work = [&](std::size_t i) {
        try {
            // Buffers that cannot all be allocated (memory taken by others though the budget has
            // room): retry with half as many of each, down to one; the units stay the same.
            std::string first_failure;
            for (int shrink = 0;; ++shrink) {
                try {
                    pipes[i] = std::make_unique<device_pipeline<T>>(*devices[i], i, devices.size(), plan, alpha, beta,
                                                                    a, b, c, state, run, shrink, kits[i].get(), keeps);
                    break;
                } catch (const std::exception& e) {
                    const int most = std::max({plan.a_slots, plan.b_slots, plan.c_slots});
                    if ((most >> shrink) <= 1 || cancel_requested()) throw;
                    if (first_failure.empty()) first_failure = e.what();
                }
            }
            if (!first_failure.empty()) {
                std::lock_guard lock(state.queue_mutex);
                state.warnings.push_back(devices[i]->id() + ": " + first_failure + "; ran with fewer buffers (" +
                                         pipes[i]->buffers() + " of " + std::to_string(plan.a_slots) + "/" +
                                         std::to_string(plan.b_slots) + "/" + std::to_string(plan.c_slots) +
                                         " for A/B/C)");
            }
            for (;;) {
                pipes[i]->run(units);
                {
                    // A device done with the queue no longer counts as one that could take the rest.
                    std::lock_guard lock(state.tail_mutex);
                    state.active[i] = false;
                }
                pipes[i]->finish();
                // Idle: wait for units a lost device gives back, until no device could.
                std::unique_lock lock(state.queue_mutex);
                --state.working;
                state.queue_cv.notify_all();
                while (state.returned.empty() && state.working > 0 && !state.stop && !cancel_requested())
                    state.queue_cv.wait_for(lock, std::chrono::milliseconds(run.cancel != nullptr ? 10 : 200));
                if (state.returned.empty() || state.stop || cancel_requested()) break;
                ++state.working;
            }
        } catch (...) {
            if (state.recoverable && !cancel_requested() && !state.stop) {
                lose(i, std::current_exception());
            } else {
                errors[i] = std::current_exception();
                state.stop = true;
                std::lock_guard lock(state.queue_mutex);
                --state.working;
                state.queue_cv.notify_all();
            }
        }
    };
    if (devices.size() == 1) {
        work(0);
    } else {
        std::vector<std::thread> threads;
        for (std::size_t i = 0; i < devices.size(); ++i) threads.emplace_back(work, i);
        for (auto& t : threads) t.join();
    }
    // Other devices may have queued peer copies on a device's streams after its own thread
    // finished: drain every pipeline again, so such work is done and its errors are reported.
    for (std::size_t i = 0; i < devices.size(); ++i) {
        if (!pipes[i]) continue;
        try {
            pipes[i]->finish();
        } catch (...) {
            if (!errors[i]) errors[i] = std::current_exception();
        }
    }
    for (std::size_t i = 0; i < devices.size(); ++i) {
        rep.peak_device_bytes = std::max(rep.peak_device_bytes, reservations[i]->peak());
        if (pipes[i]) {
            rep.devices.push_back(pipes[i]->share());
            rep.cache_hits += rep.devices.back().cache_hits;
            rep.cache_misses += rep.devices.back().cache_misses;
            rep.bytes_saved += rep.devices.back().bytes_saved;
            rep.peer_hits += rep.devices.back().peer_hits;
            rep.bytes_from_peers += rep.devices.back().bytes_from_peers;
            rep.kept_hits += rep.devices.back().kept_hits;
            rep.kept_bytes_saved += rep.devices.back().kept_bytes_saved;
        }
    }
    // A run that succeeded on every device leaves its buffers (and the tiles in them), streams
    // and reservations to the next call; after a fault or a cancel they are freed.
    bool clean = memory != nullptr && state.faults.empty() && !cancel_requested() && state.units_done.load() == units;
    for (std::size_t i = 0; i < devices.size(); ++i) clean = clean && !errors[i] && pipes[i];
    if (clean) {
        for (std::size_t i = 0; i < devices.size(); ++i) {
            if (!kits[i]) kits[i] = std::make_unique<detail::device_kit>();
            pipes[i]->give_back(*kits[i]);
            kits[i]->reservation = std::move(reservations[i]);
        }
        std::lock_guard lock(memory->mutex);
        for (std::size_t i = 0; i < devices.size(); ++i) memory->kits[i] = std::move(kits[i]);
    }
    kits.clear();  // what was not given back, before the reservations its buffers came from
    pipes.clear();  // drains streams, frees buffers (back to the device's pool: cheap)
    rep.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    for (device* d : devices)
        if (run.trace) d->set_trace_sink(nullptr);
    const std::size_t done = state.units_done.load();
    if (cancel_requested() && done < units)
        throw cancelled("gemm: cancelled after " + std::to_string(done) + " of " + std::to_string(units) + " units");
    if (state.recoverable) {
        if (done < units) {
            detail::throw_every_device_failed("gemm", done, units, "units", state.faults, errors);
        }
    } else {
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
    }
    rep.faults = std::move(state.faults);
    for (auto& w : state.warnings) rep.warnings.push_back(std::move(w));
    rep.bytes_h2d = state.bytes_h2d;
    rep.bytes_d2h = state.bytes_d2h;
    rep.bytes_packed = state.bytes_packed;
    return rep;
}

pinned_operands::pinned_operands(std::span<device* const> devices,
                                 std::span<const std::pair<const void*, std::size_t>> ranges) {
    for (device* d : devices) {
        if (d->host_addressable()) continue;
        for (auto [p, n] : ranges) {
            // A mapped file larger than a quarter of the memory available stays pageable: pinning
            // would lock all of it in RAM, which operands on disk are meant to avoid.
            if (n == 0 || p == nullptr || (detail::in_file_mapping(p, n) && n > available_host_memory() / 4)) continue;
            try {
                d->register_host(const_cast<void*>(p), n);
                pinned_.emplace_back(d, const_cast<void*>(p));
            } catch (const error& e) {
                refused_.push_back(e.what());
            }
        }
        break;  // registration is per process for CUDA, once is enough
    }
}

pinned_operands::~pinned_operands() {
    for (auto [d, p] : pinned_) {
        try {
            d->unregister_host(p);
        } catch (const error&) {
        }
    }
}

template <class T>
pinned_operands::pinned_operands(std::span<device* const> devices, host_matrix_view<const T> a,
                                 host_matrix_view<const T> b, host_matrix_view<T> c)
    : pinned_operands(devices, std::array{std::pair<const void*, std::size_t>{a.data(), span_bytes(a)},
                                          std::pair<const void*, std::size_t>{b.data(), span_bytes(b)},
                                          std::pair<const void*, std::size_t>{c.data(), span_bytes(c)}}) {}

detail::device_kit::~device_kit() {
    for (stream* st : {h2d.get(), compute.get(), d2h.get(), peer.get()}) {
        if (st == nullptr) continue;
        try {
            st->synchronize();
        } catch (...) {
        }
    }
    a.clear();  // the buffers, then (last member) the reservation they came from
    b.clear();
    c.clear();
}

copy_2d_desc detail::packed_copy(void* packed, const host_rect& r, bool to_packed) {
    copy_2d_desc d;
    const std::size_t width = std::size_t(r.inner()) * r.es, pitch = std::size_t(r.ld) * r.es;
    d.width_bytes = width;
    d.height = std::size_t(r.outer());
    if (to_packed) {
        d.dst = packed;
        d.dst_pitch = width;
        d.src = r.base;
        d.src_pitch = pitch;
    } else {
        d.dst = r.base;
        d.dst_pitch = pitch;
        d.src = packed;
        d.src_pitch = width;
    }
    return d;
}

void detail::throw_every_device_failed(const std::string& what, std::size_t done, std::size_t total,
                                       const std::string& units, const std::vector<device_fault>& faults,
                                       const std::vector<std::exception_ptr>& errors) {
    std::string all;
    bool budget = !faults.empty();
    for (const auto& e : errors) {
        if (!e) continue;
        try {
            std::rethrow_exception(e);
        } catch (const out_of_budget&) {
        } catch (...) {
            budget = false;
        }
    }
    for (const device_fault& f : faults)
        all += "; " + (f.message.rfind(f.id + ": ", 0) == 0 ? f.message : f.id + ": " + f.message);
    const std::string text = what + ": every device failed (" + std::to_string(done) + " of " + std::to_string(total) +
                             " " + units + " done)" + all;
    if (budget) throw out_of_budget(text);
    throw device_error(text);
}

bool detail::gemm_memory::release(std::size_t i) {
    std::vector<std::unique_ptr<device_kit>> gone;
    std::vector<std::shared_ptr<engine::tiles_kit>> gone_tiles;  // the Level 3 engine's
    {
        std::lock_guard lock(mutex);
        for (std::size_t j = 0; j < kits.size(); ++j)
            if ((i == std::size_t(-1) || i == j) && kits[j]) gone.push_back(std::move(kits[j]));
        for (std::size_t j = 0; j < tile_kits.size(); ++j)
            if ((i == std::size_t(-1) || i == j) && tile_kits[j]) gone_tiles.push_back(std::move(tile_kits[j]));
    }
    return !gone.empty() || !gone_tiles.empty();  // freed here, outside the lock
}

bool computes_in_place(std::span<device* const> devices) {
    if (devices.empty()) return false;
    for (const device* d : devices)
        if (!d->host_addressable() || d->info().budget_given) return false;
    return true;
}

bool computes_on_host_cores(std::span<device* const> devices) {
    return !devices.empty() && std::all_of(devices.begin(), devices.end(), [](const device* d) {
        return d->host_addressable() || d->info().emulated;
    });
}

#define TILESTREAM_INSTANTIATE(T)                                                                                  \
    template gemm_problem describe_gemm<T>(op, op, T, host_matrix_view<const T>, host_matrix_view<const T>, T,     \
                                           host_matrix_view<T>);                                                   \
    template gemm_report execute_gemm<T>(const gemm_plan&, std::span<device* const>, T, host_matrix_view<const T>, \
                                         host_matrix_view<const T>, T, host_matrix_view<T>, const gemm_run_options&); \
    template gemm_report detail::execute_gemm_kept<T>(const gemm_plan&, std::span<device* const>, T,             \
                                                      host_matrix_view<const T>, host_matrix_view<const T>, T,    \
                                                      host_matrix_view<T>, const gemm_run_options&,              \
                                                      detail::gemm_memory*, const detail::call_keeps&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE
#define TILESTREAM_INSTANTIATE(T)                                                                            \
    template pinned_operands::pinned_operands(std::span<device* const>, host_matrix_view<const T>,           \
                                              host_matrix_view<const T>, host_matrix_view<T>);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
