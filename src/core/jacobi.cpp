// Running a Jacobi plan: parts resident on their devices, the per-iteration schedule of strip
// sweeps, halo messages and interior sweeps ordered by events, and the delayed residual; with an
// outer boundary (a rank's part over MPI), the edge strips leave and the neighbours' arrive each iteration.
#include "core/fault_injection.hpp"
#include "core/jacobi_layout.hpp"
#include "core/jacobi_outer.hpp"

#include <tilestream/error.hpp>
#include <tilestream/jacobi.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numbers>
#include <optional>

namespace tilestream {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Half-open rectangle of a part's buffer in local coordinates: the part's points are rows
/// 1..rows() and columns 1..cols(); row and column 0 and rows()+1, cols()+1 are the halo ring.
struct rect {
    index_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
    bool empty() const { return r0 >= r1 || c0 >= c1; }
};

/// What a part sweeps first (the strips its neighbours need, each point once) and what it
/// sweeps after. Without overlap the whole part is "first" and nothing comes after.
struct sweep_split {
    std::vector<rect> first;
    rect rest;
};

/// Sides of a part whose halo comes from a neighbour: another part, or (outer) beyond the field.
using side_flags = std::array<bool, 4>;

sweep_split split_sweeps(const jacobi_part& p, bool overlap, const side_flags& outer) {
    const index_t rows = p.rows(), cols = p.cols();
    sweep_split s;
    if (!overlap) {
        s.first.push_back({1, rows + 1, 1, cols + 1});
        return s;
    }
    index_t r0 = 1, r1 = rows + 1, c0 = 1, c1 = cols + 1;
    using namespace detail;
    if (p.up >= 0 || outer[side_up]) s.first.push_back({r0, r0 + 1, 1, cols + 1}), ++r0;
    if ((p.down >= 0 || outer[side_down]) && r1 > r0) s.first.push_back({r1 - 1, r1, 1, cols + 1}), --r1;
    if (r0 < r1) {
        if (p.left >= 0 || outer[side_left]) s.first.push_back({r0, r1, c0, c0 + 1}), ++c0;
        if ((p.right >= 0 || outer[side_right]) && c1 > c0) s.first.push_back({r0, r1, c1 - 1, c1}), --c1;
    }
    s.rest = {r0, r1, c0, c1};
    return s;
}

/// One directed halo message per iteration: a row or column of part `from` into the halo of
/// part `to`. Rows are contiguous; columns are packed into contiguous buffers by 2-D copies.
struct halo_link {
    int from = 0, to = 0;
    bool column = false;
    bool peer = false;          ///< device to device; otherwise through host staging memory
    index_t count = 0;          ///< elements
    index_t src_offset = 0;     ///< first element in the sender's buffers
    index_t dst_offset = 0;     ///< first element in the receiver's buffers
    // Buffers between the two steps of a message come in pairs by iteration parity: the
    // receiver's second step of t-1 may still read one while the message of t fills the other
    // (the message of t waits for the receiver's strips of t-1, which only follow step two of t-2).
    device_buffer pack;                         ///< sender side, packed column (peer columns)
    std::array<device_buffer, 2> landing;       ///< receiver side, packed column (peer columns)
    std::array<host_staging_buffer, 2> staging; ///< host path
    std::unique_ptr<event> shipped;  ///< left the sender (two-step messages)
    std::unique_ptr<event> arrived;  ///< written into the receiver's halo
};

/// A part while it runs: its buffers, streams and the events that order it.
struct part_run {
    const jacobi_part* part = nullptr;
    device* dev = nullptr;
    std::array<device_buffer, 2> field;  ///< iteration t reads field[(t-1)%2], writes field[t%2]
    device_buffer residual;              ///< see jacobi_residual_doubles
    host_staging_buffer residual_host;   ///< slot s at [2s], [2s+1]
    std::vector<std::unique_ptr<stream>> owned;
    stream* boundary = nullptr;  ///< strips (high priority)
    stream* interior = nullptr;  ///< the rest, residual read-back
    stream* transfer = nullptr;  ///< outgoing halo messages
    stream* receive = nullptr;   ///< second steps of incoming messages (unpack, host to device)
    std::array<std::unique_ptr<event>, 2> boundary_done, sent, residual_ready;
    std::unique_ptr<event> interior_done;
    side_flags outer{};                   ///< sides facing beyond the field (an outer boundary)
    std::unique_ptr<event> edges_out;     ///< its outer edge strips of this iteration are in host memory
    std::unique_ptr<event> outer_in;      ///< the strips from beyond are in its halo ring
    std::array<std::unique_ptr<event>, 4> milestone;
    /// The last check iteration the interior stream reached (a failed stream skips the marker).
    std::unique_ptr<std::atomic<index_t>> reached = std::make_unique<std::atomic<index_t>>(0);
    sweep_split sweeps;
    std::vector<halo_link*> in, out;

    double* residual_slot(int slot, int which) const {
        return residual.as<double>() + 1 + 2 * slot + which;
    }
};

/// Host-side lookahead bound: every `milestone_every` iterations each part records a milestone,
/// and the host waits for the one recorded milestones.size() milestones earlier, so a run with
/// rare checks never queues an unbounded number of operations (the devices keep 48+ queued).
constexpr index_t milestone_every = 16;

class jacobi_engine {
public:
    jacobi_engine(const jacobi_plan& plan, detail::jacobi_outer_boundary* outer)
        : plan_(plan), elem_(size_of(plan.problem().type)), outer_(outer) {}
    jacobi_engine(const jacobi_engine&) = delete;
    jacobi_engine& operator=(const jacobi_engine&) = delete;
    ~jacobi_engine() {
        // After an error, let every queued operation finish before buffers and events go away.
        for (auto& p : parts_)
            for (auto& s : p.owned) try {
                    s->synchronize();
                } catch (...) {
                }
    }

    void setup();
    void copy_in(const void* host, std::size_t pitch);
    void copy_out(void* host, std::size_t pitch, int buffer);
    void enqueue_iteration(index_t t, bool check, int slot);
    void throttle(index_t t);
    double local_residual(int slot, index_t iteration);
    void exchange_outer(index_t t);
    void synchronize();

private:
    void send(halo_link& l, int cur);
    /// Where part p's strip on side s starts in its buffers (edge: its first/last interior row or
    /// column; ring: the halo beyond it), how many elements, and where in the field's strip.
    struct strip {
        index_t edge = 0, ring = 0, count = 0, at = 0;
        bool column = false;
    };
    strip strip_of(const part_run& p, int s) const;
    copy_2d_desc column_copy(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                             index_t count) const;
    jacobi_call sweep_call(const part_run& p, const rect& r, int in, int out, double* residual) const;
    char* at(const part_run& p, int buffer, index_t offset) const {
        return p.field[buffer].as<char>() + std::size_t(offset) * elem_;
    }

    const jacobi_plan& plan_;
    std::size_t elem_;
    std::vector<part_run> parts_;  // reserved up front: links point into it
    std::vector<std::unique_ptr<halo_link>> links_;
    detail::jacobi_outer_boundary* outer_ = nullptr;
    std::array<std::vector<char>, 4> outer_send_, outer_recv_;  ///< the field's edge strips, per side
};

void jacobi_engine::setup() {
    const auto& parts = plan_.parts();
    const bool overlap = plan_.options().overlap;
    parts_.resize(parts.size());
    for (std::size_t k = 0; k < parts.size(); ++k) {
        part_run& p = parts_[k];
        p.part = &parts[k];
        p.dev = plan_.devices()[parts[k].device];
        const jacobi_part& a = parts[k];
        if (outer_) {
            using namespace detail;
            p.outer = {a.up < 0 && outer_->has_neighbour(side_up), a.down < 0 && outer_->has_neighbour(side_down),
                       a.left < 0 && outer_->has_neighbour(side_left), a.right < 0 && outer_->has_neighbour(side_right)};
        }
        p.sweeps = split_sweeps(a, overlap, p.outer);
    }
    if (outer_) {
        const index_t ny_in = plan_.problem().ny - 2, nx_in = plan_.problem().nx - 2;
        for (int s = 0; s < 4; ++s) {
            const bool column = s >= detail::side_left;
            const std::size_t bytes = std::size_t(column ? ny_in : nx_in) * elem_;
            outer_send_[s].assign(outer_->has_neighbour(s) ? bytes : 0, 0);
            outer_recv_[s].assign(outer_->has_neighbour(s) ? bytes : 0, 0);
        }
    }
    // Links: to each neighbour, the row or column it needs.
    for (std::size_t k = 0; k < parts.size(); ++k) {
        const jacobi_part& a = parts[k];
        const auto add = [&](int to, bool column, index_t src, index_t dst) {
            if (to < 0) return;
            auto l = std::make_unique<halo_link>();
            l->from = int(k);
            l->to = to;
            l->column = column;
            l->count = column ? a.rows() : a.cols();
            l->src_offset = src;
            l->dst_offset = dst;
            l->peer = parts_[k].dev->can_copy_peer(*parts_[to].dev);
            parts_[k].out.push_back(l.get());
            parts_[to].in.push_back(l.get());
            links_.push_back(std::move(l));
        };
        const index_t rows = a.rows(), cols = a.cols(), ld = a.ld;
        if (a.up >= 0) add(a.up, false, ld + 1, (parts[a.up].rows() + 1) * parts[a.up].ld + 1);
        if (a.down >= 0) add(a.down, false, rows * ld + 1, 1);
        if (a.left >= 0) add(a.left, true, ld + 1, parts[a.left].ld + parts[a.left].cols() + 1);
        if (a.right >= 0) add(a.right, true, ld + cols, parts[a.right].ld);
    }
    for (part_run& p : parts_) {
        device& d = *p.dev;
        const std::size_t bytes = checked_bytes(p.part->rows() + 2, p.part->ld, plan_.problem().type, "jacobi: part");
        for (auto& f : p.field) f = d.allocate(bytes);
        p.residual = d.allocate(detail::jacobi_residual_doubles * sizeof(double));
        p.residual_host = d.allocate_host_staging(4 * sizeof(double));
        const auto make = [&](stream_priority pr) {
            p.owned.push_back(d.create_stream(pr));
            return p.owned.back().get();
        };
        const bool outer = p.outer[0] || p.outer[1] || p.outer[2] || p.outer[3];
        if (overlap) {
            p.interior = make(stream_priority::normal);
            p.boundary = p.sweeps.first.empty() ? p.interior : make(stream_priority::high);
            p.transfer = p.out.empty() && !outer ? p.interior : make(stream_priority::normal);
            bool two_step = outer;
            for (const halo_link* l : p.in) two_step |= l->column || !l->peer;
            p.receive = two_step ? make(stream_priority::normal) : p.interior;
        } else {
            p.interior = p.boundary = p.transfer = p.receive = make(stream_priority::normal);
        }
        if (trace_sink* trace = plan_.options().trace) {  // timeline lanes named by role
            const auto name = [&](stream* st, const char* role) { trace->name_stream(d.id(), st->id(), role); };
            name(p.interior, overlap ? "compute (interior)" : "compute and halos");
            if (p.boundary != p.interior) name(p.boundary, "compute (boundary strips)");
            if (p.transfer != p.interior) name(p.transfer, "halo out");
            if (p.receive != p.interior) name(p.receive, "halo in");
        }
        for (auto& e : p.boundary_done) e = d.create_event();
        for (auto& e : p.sent) e = d.create_event();
        for (auto& e : p.residual_ready) e = d.create_event();
        for (auto& e : p.milestone) e = d.create_event();
        p.interior_done = d.create_event();
        if (outer) {
            p.edges_out = d.create_event();
            p.outer_in = d.create_event();
        }
    }
    for (auto& l : links_) {
        part_run& a = parts_[l->from];
        part_run& b = parts_[l->to];
        const std::size_t bytes = std::size_t(l->count) * elem_;
        if (l->peer && l->column) {
            l->pack = a.dev->allocate(bytes);
            for (auto& d : l->landing) d = b.dev->allocate(bytes);
        } else if (!l->peer) {
            // Pinned memory of whichever side is not host-addressable (a GPU) copies fastest.
            device& owner = a.dev->host_addressable() ? *b.dev : *a.dev;
            for (auto& h : l->staging) h = owner.allocate_host_staging(bytes);
        }
        l->shipped = a.dev->create_event();
        l->arrived = (l->peer && !l->column ? a.dev : b.dev)->create_event();
    }
}

jacobi_call jacobi_engine::sweep_call(const part_run& p, const rect& r, int in, int out,
                                      double* residual) const {
    jacobi_call c;
    c.type = plan_.problem().type;
    c.in = p.field[in].get();
    c.out = p.field[out].get();
    c.ld = p.part->ld;
    c.row_begin = r.r0;
    c.row_end = r.r1;
    c.col_begin = r.c0;
    c.col_end = r.c1;
    c.residual = residual;
    return c;
}

void jacobi_engine::copy_in(const void* host, std::size_t pitch) {
    static const std::array<double, detail::jacobi_residual_doubles> zeros{};
    for (part_run& p : parts_) {
        const jacobi_part& a = *p.part;
        copy_2d_desc c;
        c.src = static_cast<const char*>(host) + (std::size_t(a.row_begin - 1) * pitch) +
                std::size_t(a.col_begin - 1) * elem_;
        c.src_pitch = pitch;
        c.dst_pitch = std::size_t(a.ld) * elem_;
        c.width_bytes = std::size_t(a.cols() + 2) * elem_;
        c.height = std::size_t(a.rows() + 2);
        // Both buffers get the ring: the global boundary is read from either, never written.
        for (auto& f : p.field) {
            c.dst = f.get();
            p.dev->copy_2d_to_device(*p.interior, c);
        }
        p.dev->copy_to_device(*p.interior, p.residual.get(), zeros.data(), sizeof zeros);
    }
    synchronize();
}

void jacobi_engine::copy_out(void* host, std::size_t pitch, int buffer) {
    for (part_run& p : parts_) {
        const jacobi_part& a = *p.part;
        copy_2d_desc c;
        c.dst = static_cast<char*>(host) + std::size_t(a.row_begin) * pitch + std::size_t(a.col_begin) * elem_;
        c.dst_pitch = pitch;
        c.src = at(p, buffer, a.ld + 1);
        c.src_pitch = std::size_t(a.ld) * elem_;
        c.width_bytes = std::size_t(a.cols()) * elem_;
        c.height = std::size_t(a.rows());
        p.dev->copy_2d_to_host(*p.interior, c);
    }
    synchronize();
}

void jacobi_engine::synchronize() {
    std::exception_ptr first;
    std::string failed;
    for (std::size_t k = 0; k < parts_.size(); ++k)
        for (auto& s : parts_[k].owned) try {
                s->synchronize();
            } catch (...) {
                if (first) continue;
                first = std::current_exception();
                failed = "jacobi: device " + parts_[k].dev->id() + " (part " + std::to_string(k) + " of " +
                         std::to_string(parts_.size()) + ") failed: ";
            }
    if (!first) return;
    try {
        std::rethrow_exception(first);
    } catch (const cancelled&) {
        throw;
    } catch (const std::exception& e) {
        throw device_error(failed + e.what());
    }
}

// Iteration t reads field[prev] and writes field[cur]. Every wait names an event recorded
// earlier in host order (this iteration's earlier phase or an earlier iteration), so the
// schedule cannot deadlock; the comments name the hazard each wait prevents.
void jacobi_engine::enqueue_iteration(index_t t, bool check, int slot) {
    const int cur = int(t % 2), prev = 1 - cur;
    // Phase 1: the strips the neighbours need, first, on the high-priority stream.
    for (part_run& p : parts_) {
        if (p.sweeps.first.empty()) continue;
        stream& b = *p.boundary;
        if (t > 1) {
            for (const halo_link* l : p.in) p.dev->wait(b, *l->arrived);  // halos of t-1 are in
            if (p.outer_in) p.dev->wait(b, *p.outer_in);                      // and those from beyond
            p.dev->wait(b, *p.interior_done);  // the interior of t-1 read field[cur]
        }
        if (t > 2 && !p.out.empty()) p.dev->wait(b, *p.sent[cur]);  // messages of t-2 read field[cur]
        double* res = nullptr;
        if (check) {
            res = p.residual_slot(slot, 0);
            p.dev->copy_within(b, res, p.residual.get(), sizeof(double));
        }
        for (const rect& r : p.sweeps.first) p.dev->jacobi_sweep(b, sweep_call(p, r, prev, cur, res));
        p.boundary_done[cur]->record(b);
    }
    // Phase 2: halo messages, on the transfer stream, while the interior runs; the strips that
    // leave the field go to host memory (exchange_outer sends them on).
    for (part_run& p : parts_) {
        if (p.out.empty() && !p.edges_out) continue;
        stream& x = *p.transfer;
        p.dev->wait(x, *p.boundary_done[cur]);  // the strips of t are computed
        for (halo_link* l : p.out) {
            // The receiver's strips of t-1 read the halo this message overwrites.
            if (t > 1) p.dev->wait(x, *parts_[l->to].boundary_done[prev]);
            send(*l, cur);
        }
        if (!p.out.empty()) p.sent[cur]->record(x);
        if (!p.edges_out) continue;
        // The host sent the strips of t-1 on before it queued these copies.
        const std::size_t pitch = std::size_t(p.part->ld) * elem_;
        for (int s = 0; s < 4; ++s) {
            if (!p.outer[s]) continue;
            const strip e = strip_of(p, s);
            char* host = outer_send_[s].data() + std::size_t(e.at) * elem_;
            if (e.column)
                p.dev->copy_2d_to_host(x, column_copy(host, elem_, at(p, cur, e.edge), pitch, e.count));
            else
                p.dev->copy_to_host(x, host, at(p, cur, e.edge), std::size_t(e.count) * elem_);
        }
        p.edges_out->record(x);
    }
    // Phase 3: the rest of each part, then the residual read-back when a check is due.
    for (part_run& p : parts_) {
        stream& s = *p.interior;
        // It reads the strips of t-1 and overwrites what the strips of t-1 read; it also lets the
        // strips of t go first where a stream priority cannot (CPU devices share one pool).
        if (!p.sweeps.first.empty()) p.dev->wait(s, *p.boundary_done[cur]);
        double* res = nullptr;
        if (check) {
            res = p.residual_slot(slot, 1);
            p.dev->copy_within(s, res, p.residual.get(), sizeof(double));
        }
        if (!p.sweeps.rest.empty()) p.dev->jacobi_sweep(s, sweep_call(p, p.sweeps.rest, prev, cur, res));
        if (fault_injection::unit_fails(*p.dev)) {
            const std::string what = p.dev->id() + ": kernel failed (injected fault) at iteration " + std::to_string(t);
            p.dev->enqueue_host(s, [what] { throw device_error(what); }, "injected fault");
        }
        p.interior_done->record(s);
        if (check) {
            p.dev->copy_to_host(s, static_cast<double*>(p.residual_host.get()) + 2 * slot, p.residual_slot(slot, 0),
                                2 * sizeof(double));
            p.dev->enqueue_host(s, [m = p.reached.get(), t] { *m = t; }, "check reached");
            p.residual_ready[slot]->record(s);
        }
    }
}

void jacobi_engine::send(halo_link& l, int cur) {
    part_run& a = parts_[l.from];
    part_run& b = parts_[l.to];
    stream& x = *a.transfer;
    char* src = at(a, cur, l.src_offset);
    char* dst = at(b, cur, l.dst_offset);
    const std::size_t bytes = std::size_t(l.count) * elem_;
    const auto column = [&](void* d, std::size_t dp, const void* s, std::size_t sp) {
        return column_copy(d, dp, s, sp, l.count);
    };
    const std::size_t a_pitch = std::size_t(a.part->ld) * elem_, b_pitch = std::size_t(b.part->ld) * elem_;
    if (l.peer && !l.column) {
        a.dev->copy_peer(x, *b.dev, dst, src, bytes);
        l.arrived->record(x);
        return;
    }
    if (l.peer) {
        a.dev->copy_2d_within(x, column(l.pack.get(), elem_, src, a_pitch));
        a.dev->copy_peer(x, *b.dev, l.landing[cur].get(), l.pack.get(), bytes);
    } else if (l.column) {
        a.dev->copy_2d_to_host(x, column(l.staging[cur].get(), elem_, src, a_pitch));
    } else {
        a.dev->copy_to_host(x, l.staging[cur].get(), src, bytes);
    }
    l.shipped->record(x);
    stream& r = *b.receive;
    b.dev->wait(r, *l.shipped);
    if (l.peer)
        b.dev->copy_2d_within(r, column(dst, b_pitch, l.landing[cur].get(), elem_));
    else if (l.column)
        b.dev->copy_2d_to_device(r, column(dst, b_pitch, l.staging[cur].get(), elem_));
    else
        b.dev->copy_to_device(r, dst, l.staging[cur].get(), bytes);
    l.arrived->record(r);
}

// A column: count rows of one element, their pitches apart.
copy_2d_desc jacobi_engine::column_copy(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                                        index_t count) const {
    copy_2d_desc c;
    c.dst = dst;
    c.dst_pitch = dst_pitch;
    c.src = src;
    c.src_pitch = src_pitch;
    c.width_bytes = elem_;
    c.height = std::size_t(count);
    return c;
}

jacobi_engine::strip jacobi_engine::strip_of(const part_run& p, int s) const {
    const jacobi_part& a = *p.part;
    const index_t ld = a.ld, rows = a.rows(), cols = a.cols();
    switch (s) {
        case detail::side_up: return {ld + 1, 1, cols, a.col_begin - 1, false};
        case detail::side_down: return {rows * ld + 1, (rows + 1) * ld + 1, cols, a.col_begin - 1, false};
        case detail::side_left: return {ld + 1, ld, rows, a.row_begin - 1, true};
        default: return {ld + cols, ld + cols + 1, rows, a.row_begin - 1, true};
    }
}

// After enqueue_iteration(t): the field's edge strips of t leave through the outer boundary
// while the devices sweep the interior, and the strips from beyond go into the halo rings of
// field[t % 2], which iteration t+1 reads (its strips wait for outer_in).
void jacobi_engine::exchange_outer(index_t t) {
    const int cur = int(t % 2);
    for (part_run& p : parts_)
        if (p.edges_out) {
            if (t > 1) p.outer_in->synchronize();  // the strips of t-1 left the receive buffers
            p.edges_out->synchronize();
        }
    std::array<const void*, 4> send{};
    std::array<void*, 4> recv{};
    for (int s = 0; s < 4; ++s) {
        send[s] = outer_send_[s].data();
        recv[s] = outer_recv_[s].data();
    }
    outer_->start_exchange(t, send, recv);
    outer_->finish_exchange();
    for (part_run& p : parts_) {
        if (!p.outer_in) continue;
        stream& r = *p.receive;
        const std::size_t pitch = std::size_t(p.part->ld) * elem_;
        for (int s = 0; s < 4; ++s) {
            if (!p.outer[s]) continue;
            const strip e = strip_of(p, s);
            const char* host = outer_recv_[s].data() + std::size_t(e.at) * elem_;
            if (e.column)
                p.dev->copy_2d_to_device(r, column_copy(at(p, cur, e.ring), pitch, host, elem_, e.count));
            else
                p.dev->copy_to_device(r, at(p, cur, e.ring), host, std::size_t(e.count) * elem_);
        }
        p.outer_in->record(r);
    }
}

void jacobi_engine::throttle(index_t t) {
    if (t % milestone_every != 0) return;
    const std::size_t m = std::size_t(t / milestone_every) % 4;
    for (part_run& p : parts_) {
        p.milestone[m]->synchronize();  // recorded 4 milestones ago, or never
        p.milestone[m]->record(*p.interior);
    }
}

double jacobi_engine::local_residual(int slot, index_t iteration) {
    double sum = 0;
    for (part_run& p : parts_) {
        p.residual_ready[slot]->synchronize();
        // Its marker did not run: an operation before it failed; synchronize() names it.
        if (p.reached->load() < iteration) synchronize();
        const double* h = static_cast<const double*>(p.residual_host.get()) + 2 * slot;
        sum += h[0] + h[1];
    }
    return sum;
}

}  // namespace

template <class T>
jacobi_report detail::run_jacobi_part(const jacobi_plan& plan, host_matrix_view<T> field,
                                      detail::jacobi_outer_boundary* outer) {
    const auto t_start = clock_type::now();
    const jacobi_problem& pb = plan.problem();
    const jacobi_options& opt = plan.options();
    if (dtype_of<T>() != pb.type)
        throw invalid_argument("jacobi: the plan is for " + std::string(to_string(pb.type)) +
                               " but the field holds " + std::string(to_string(dtype_of<T>())));
    if (field.rows() != pb.ny || field.cols() != pb.nx)
        throw dimension_mismatch("jacobi: the field is " + std::to_string(field.rows()) + " rows x " +
                                 std::to_string(field.cols()) + " columns but the plan is for ny x nx = " +
                                 std::to_string(pb.ny) + " x " + std::to_string(pb.nx));
    if (field.layout() != layout::row_major) throw invalid_argument("jacobi: the field must be row-major");

    jacobi_report rep;
    if (opt.iters == 0) {
        rep.total_seconds = seconds_since(t_start);
        return rep;
    }
    // Spans of every stream operation go to opt.trace while the solve runs.
    struct trace_attachment {
        const std::vector<device*>& devices;
        trace_sink* sink;
        trace_attachment(const std::vector<device*>& d, trace_sink* t) : devices(d), sink(t) {
            if (sink)
                for (device* dev : devices) dev->set_trace_sink(sink);
        }
        ~trace_attachment() {
            if (sink)
                for (device* dev : devices) dev->set_trace_sink(nullptr);
        }
    } attach(plan.devices(), opt.trace);
    jacobi_engine engine(plan, outer);
    const std::size_t pitch = std::size_t(field.ld()) * sizeof(T);
    const index_t n = opt.iters, k = opt.check_every;
    struct pending_check {
        index_t iteration;
        int slot;
    };
    std::optional<pending_check> pending;
    bool combining = false;  // the pending check's residual is being combined through `outer`
    int checks = 0;
    index_t done = 0;
    bool stop = false;
    // Until the copy out, a failing device stops the solve with the field untouched.
    try {
        engine.setup();
        engine.copy_in(field.data(), pitch);
        const auto t0 = clock_type::now();
        const auto start_combining = [&](const pending_check& c) {
            outer->start_residual(engine.local_residual(c.slot, c.iteration));
            combining = true;
        };
        const auto examine = [&](const pending_check& c) {
            double sum = 0;
            if (outer) {
                if (!combining) start_combining(c);
                sum = outer->finish_residual();
                combining = false;
            } else {
                sum = engine.local_residual(c.slot, c.iteration);
            }
            const double r = std::sqrt(sum);
            if (opt.progress) opt.progress({c.iteration, n, r, seconds_since(t0)});
            return r;
        };
        // The residual of a check is examined after the next check is queued: the devices always
        // have the iterations in between to work on while it travels to the host.
        for (index_t t = 1; t <= n && !stop; ++t) {
            if (opt.cancel != nullptr && opt.cancel->load())
                throw cancelled("jacobi: cancelled at iteration " + std::to_string(t) + " of " + std::to_string(n) +
                                "; the field holds its starting values");
            const bool check = t % k == 0 || t == n;
            const int slot = checks % 2;
            engine.enqueue_iteration(t, check, slot);
            if (outer) {
                engine.exchange_outer(t);
                // The last check's sum is ready (the strips of t followed its interior): it is
                // combined with the other parts' while the iterations up to the next check run.
                if (pending && !combining) start_combining(*pending);
            }
            engine.throttle(t);
            done = t;
            if (!check) continue;
            if (pending) {
                const double r = examine(*pending);
                if (opt.tol > 0 && r < opt.tol) {
                    rep.converged = true;
                    rep.converged_at = pending->iteration;
                    stop = true;
                }
            }
            pending = pending_check{t, slot};
            ++checks;
        }
        engine.synchronize();
        rep.seconds = seconds_since(t0);
        rep.residual = examine(*pending);
    } catch (const device_error& e) {
        throw device_error(std::string(e.what()) + "; the solve stopped, the field holds its starting values");
    }
    if (!rep.converged && opt.tol > 0 && rep.residual < opt.tol) {
        rep.converged = true;
        rep.converged_at = done;
    }
    try {
        engine.copy_out(field.data(), pitch, int(done % 2));
    } catch (const device_error& e) {
        throw device_error(std::string(e.what()) +
                           "; the field is partly written: parts copied out before the failure hold the final values");
    }

    rep.iterations = done;
    rep.halo_bytes = std::size_t(done) * plan.halo_bytes_per_iteration();
    const double updates = double(pb.interior_points()) * double(done);
    rep.glups = rep.seconds > 0 ? updates / rep.seconds * 1e-9 : 0.0;
    rep.gbps = rep.glups * double(pb.bytes_per_point());
    rep.total_seconds = seconds_since(t_start);
    return rep;
}

template <class T>
jacobi_report run_jacobi(const jacobi_plan& plan, host_matrix_view<T> field) {
    return detail::run_jacobi_part<T>(plan, field, nullptr);
}

template <class T>
jacobi_solution<T> solve_jacobi(const jacobi_plan& plan) {
    jacobi_solution<T> s;
    s.field = host_matrix<T>(plan.problem().ny, plan.problem().nx);
    fill_jacobi_start<T>(s.field.view());
    s.report = run_jacobi<T>(plan, s.field.view());
    return s;
}

template <class T>
void fill_jacobi_start(host_matrix_view<T> f) {
    const index_t ny = f.rows(), nx = f.cols();
    for (index_t i = 0; i < ny; ++i)
        for (index_t j = 0; j < nx; ++j) f(i, j) = T(0);
    if (ny < 2 || nx < 1) return;
    for (index_t i = 0; i < ny; ++i) {
        const T v = static_cast<T>(std::sin(2.0 * std::numbers::pi * double(i) / double(ny - 1)));
        f(i, 0) = v;
        f(i, nx - 1) = v;
    }
}

jacobi_measurement measure_jacobi(const jacobi_problem& problem, const std::vector<device*>& devices,
                                  const jacobi_options& options) {
    const jacobi_plan plan = plan_jacobi(problem, devices, options);
    const jacobi_report rep = visit_real_dtype(problem.type, "jacobi", [&]<class T>() { return solve_jacobi<T>(plan).report; });
    jacobi_measurement m;
    m.problem = problem;
    m.decomposition = plan.decomposition();
    m.devices = static_cast<int>(devices.size());
    m.overlap = options.overlap;
    m.iterations = rep.iterations;
    m.seconds = rep.seconds;
    m.glups = rep.glups;
    m.gbps = rep.gbps;
    m.residual = rep.residual;
    m.halo_bytes_per_iteration = plan.halo_bytes_per_iteration();
    return m;
}

#define TILESTREAM_INSTANTIATE(T)                                                        \
    template jacobi_report run_jacobi<T>(const jacobi_plan&, host_matrix_view<T>);       \
    template jacobi_report detail::run_jacobi_part<T>(const jacobi_plan&, host_matrix_view<T>,  \
                                                      detail::jacobi_outer_boundary*);           \
    template jacobi_solution<T> solve_jacobi<T>(const jacobi_plan&);                     \
    template void fill_jacobi_start<T>(host_matrix_view<T>);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
