// A list-scheduling replay of a task graph: bytes and time the executor should take.
#include "core/engine/schedule_model.hpp"
#include "core/engine/tile_kernels.hpp"
#include "core/gemm_memory.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <set>
#include <unordered_map>
#include <utility>

namespace tilestream::detail::engine {

namespace {

/// The order of a blockable step's triangle; 0 when it is not split in diagonal blocks.
index_t split_order(const task_step& s, const device_rates& r) {
    if (r.diagonal_block <= 0 || !blockable(s.op.kind)) return 0;
    const index_t order = s.op.side == side::left ? s.op.m : s.op.n;
    return order > r.diagonal_block ? order : 0;
}

}  // namespace

bool splits_diagonal_tiles(const task_graph& g, const device_rates& r) {
    for (const tile_task& t : g.tasks)
        for (const task_step& s : t.steps)
            if (split_order(s, r) > 0) return true;
    return false;
}

double step_seconds(const task_graph& g, const task_step& s, const device_rates& r) {
    const bool lapack = s.op.kind == tile_kind::potrf || s.op.kind == tile_kind::getrf || s.op.kind == tile_kind::laswp;
    if (r.staged_flops > 0 && lapack) {
        // Staged: the tile goes to host memory, the host's LAPACK works on it, and it comes back.
        const double bytes = double(g.tile_bytes(s.c));
        return s.op.flops() / r.staged_flops + r.op_overhead + bytes / std::max(r.d2h, 1.0) + bytes / std::max(r.h2d, 1.0);
    }
    // The diagonal tiles at their own kernel's rate where the GEMM tiles take another kernel. A
    // step split in diagonal blocks (blocked_diagonal) has only the blocks' share of its flops
    // there, the rest at the GEMM rate, and one call per block and per GEMM between them.
    const index_t order = split_order(s, r);
    const double blocks = order > 0 ? std::ceil(double(order) / double(r.diagonal_block)) : 1;
    const bool symm = s.op.kind == tile_kind::symm || s.op.kind == tile_kind::hemm;
    const double calls = order == 0 ? 1 : symm ? 3 * blocks - 2 : 2 * blocks - 1;
    double t = s.op.flops() / std::max(r.flops, 1.0);
    const tile_rate& kind = r.tile_rates[std::size_t(s.op.kind)];
    if (s.op.kind != tile_kind::gemm && order == 0 && kind.flops > 0) {
        // The kind's own measured rate and fixed cost per call (a GPU's vendor routines).
        t = kind.call_seconds + s.op.flops() / kind.flops;
    } else {
        if (s.op.kind != tile_kind::gemm && r.diagonal_flops > 0) {
            const double share = order > 0 ? blocked_diagonal_share(order, r.diagonal_block) : 1.0;
            t = s.op.flops() * (share / std::max(r.diagonal_flops, 1.0) + (1 - share) / std::max(r.flops, 1.0));
        }
        t += calls * r.op_overhead;
    }
    if (r.host_memory && s.op.flops() > 0) {
        // The kernel packs its operands (a strided gather at about half the copy rate).
        std::size_t bytes = 0;
        for (int x : {s.a, s.b})
            if (x >= 0) bytes += g.tile_bytes(x);
        t += double(bytes) / std::max(r.h2d / 2, 1.0);
    }
    return t;
}

namespace {

/// One device's tile cache as the store keeps it: slots by size class, a tile in the smallest
/// class its operand's tiles fit with a free or unpinned slot, the least recently used one there
/// evicted.
class lru_cache {
public:
    explicit lru_cache(const std::vector<slot_class>& classes) : classes_(classes), order_(classes.size()), used_(classes.size()) {}
    /// Whether (tile, version) is held; touches it.
    bool hit(int tile, std::uint32_t version) {
        auto it = entries_.find(tile);
        if (it == entries_.end() || it->second.version != version) return false;
        touch(tile, it->second);
        return true;
    }
    bool holds(int tile, std::uint32_t version) const {
        auto it = entries_.find(tile);
        return it != entries_.end() && it->second.version == version;
    }
    /// The tile's slot now holds `version` (its recency unchanged).
    void relabel(int tile, std::uint32_t version) {
        auto it = entries_.find(tile);
        if (it != entries_.end()) it->second.version = version;
    }
    /// Holds (tile, version) taking a slot of `bytes` (its operand's largest tile), in the slot of
    /// its older version or else evicting in the smallest class that fits the least recently used
    /// tile that is not pinned (the store's locked slots: the task's outputs and the step's other input).
    void put(int tile, std::uint32_t version, std::size_t bytes, const std::vector<int>& pinned = {}) {
        auto it = entries_.find(tile);
        if (it != entries_.end()) {
            it->second.version = version;
            touch(tile, it->second);
            return;
        }
        const auto is_pinned = [&](int t) { return std::find(pinned.begin(), pinned.end(), t) != pinned.end(); };
        std::size_t c = 0;
        std::set<std::pair<std::uint64_t, int>>::iterator v;
        bool chosen = false;
        for (std::size_t x = 0; x < classes_.size() && !chosen; ++x) {
            if (classes_[x].bytes < bytes) continue;
            if (used_[x] < classes_[x].count) {
                c = x, chosen = true;
                v = order_[x].end();
                break;
            }
            for (v = order_[x].begin(); v != order_[x].end() && is_pinned(v->second); ++v) {
            }
            if (v != order_[x].end()) c = x, chosen = true;
        }
        if (!chosen) {
            // Every fitting slot pinned, or the tile fits none (the store throws; planners size
            // the slots so neither happens): the largest class's oldest, else nothing is kept.
            if (classes_.empty()) return;
            c = classes_.size() - 1;
            v = order_[c].begin();
            if (v == order_[c].end()) return;
        }
        if (v != order_[c].end()) {
            entries_.erase(v->second);
            order_[c].erase(v);
        } else {
            ++used_[c];
        }
        entry e{version, ++clock_, c};
        order_[c].insert({e.last_use, tile});
        entries_[tile] = e;
    }

private:
    struct entry {
        std::uint32_t version = 0;
        std::uint64_t last_use = 0;
        std::size_t cls = 0;
    };
    void touch(int tile, entry& e) {
        order_[e.cls].erase({e.last_use, tile});
        e.last_use = ++clock_;
        order_[e.cls].insert({e.last_use, tile});
    }
    std::vector<slot_class> classes_;
    std::uint64_t clock_ = 0;
    std::unordered_map<int, entry> entries_;
    std::vector<std::set<std::pair<std::uint64_t, int>>> order_;  // by class: (last use, tile)
    std::vector<int> used_;
};

struct model_device_state {
    double h2d = 0, compute = 0, d2h = 0;  // when each stream is free
    double busy_compute = 0, busy_h2d = 0, busy_d2h = 0;
    lru_cache cache;
    explicit model_device_state(const std::vector<slot_class>& classes) : cache(classes) {}
};

}  // namespace

bool better_plan(const model_result& a, std::size_t a_steps, const model_result& b, std::size_t b_steps) {
    if (a.seconds < b.seconds * 0.99) return true;
    if (b.seconds < a.seconds * 0.99) return false;
    const std::size_t ba = a.bytes_h2d + a.bytes_d2h, bb = b.bytes_h2d + b.bytes_d2h;
    if (ba != bb) return ba < bb;
    return a_steps < b_steps;
}

model_result model_run(const task_graph& g, const model_settings& m) {
    model_result res;
    const std::size_t n = g.tasks.size();
    if (n == 0) return res;
    const device_rates& r = m.rates;
    const int devices = std::max(1, m.devices);
    std::vector<model_device_state> dev;
    std::vector<slot_class> classes = sorted_classes(m.slot_classes);
    if (classes.empty()) classes = {{std::numeric_limits<std::size_t>::max(), std::max(m.slots, 1)}};
    for (int d = 0; d < devices; ++d) dev.emplace_back(classes);
    std::vector<int> waiting(n);
    std::vector<double> ready_time(n, 0.0), finish(n, 0.0), path(n, 0.0);
    std::vector<std::uint32_t> version(std::size_t(g.tiles), 0);
    // Tasks whose predecessors are all placed: by ready time, then those ready by priority.
    using timed = std::pair<double, int>;
    std::priority_queue<timed, std::vector<timed>, std::greater<>> pending;
    std::priority_queue<std::pair<double, int>> available;  // (priority, -id): highest first
    for (std::size_t t = 0; t < n; ++t) {
        waiting[t] = g.tasks[t].predecessors;
        if (waiting[t] == 0) pending.push({0.0, int(t)});
    }
    const double h2d_rate = std::max(r.h2d, 1.0), d2h_rate = std::max(r.d2h, 1.0);
    // Pack transfers: the bytes of a tile that go through host staging (as tile_store::load and
    // store decide: every tile not one run of host memory, a whole tile written back).
    const bool pack = m.transfer == transfer_mode::pack && !m.in_place;
    const auto packed_bytes = [&](int tile) -> double {
        const tile_position p = g.where(tile);
        if (!pack || std::size_t(p.operand) >= m.hosts.size()) return 0;
        host_rect r;  // the store's own test of a tile's host rectangle
        r.rows = p.rows;
        r.cols = p.cols;
        r.ld = m.hosts[std::size_t(p.operand)].ld;
        r.lay = m.hosts[std::size_t(p.operand)].lay;
        return r.contiguous() ? 0.0 : double(g.tile_bytes(tile));
    };
    // Tasks pinned to a device (a static split): its tasks wait for it, the others' for theirs.
    bool pinned_graph = false;
    for (const tile_task& task : g.tasks) pinned_graph = pinned_graph || (task.device >= 0 && task.device < devices);
    std::vector<int> frontier;  // pinned graphs: tasks whose predecessors are placed
    if (pinned_graph) {
        while (!pending.empty()) {
            frontier.push_back(pending.top().second);
            pending.pop();
        }
    }
    const auto owner = [&](int t) {
        const int d = g.tasks[std::size_t(t)].device;
        return d >= 0 && d < devices ? d : -1;
    };
    for (std::size_t placed = 0; placed < n; ++placed) {
        int d = 0, t = -1;
        double now = 0;
        if (pinned_graph) {
            // The device that can start one of its tasks first, and among those ready by then the
            // task the executor's pick() takes (most urgent, then the tiles held, then program order).
            double start = 0;
            bool found = false;
            for (int e = 0; e < devices; ++e) {
                double earliest = -1;
                for (int x : frontier)
                    if (owner(x) < 0 || owner(x) == e)
                        earliest = earliest < 0 ? ready_time[std::size_t(x)] : std::min(earliest, ready_time[std::size_t(x)]);
                if (earliest < 0) continue;
                const double when = std::max(dev[std::size_t(e)].compute, earliest);
                if (!found || when < start) start = when, d = e, found = true;
            }
            if (!found) break;  // (not reached: an acyclic graph always has a task to place)
            now = start;
            model_device_state& s = dev[std::size_t(d)];
            std::vector<std::pair<double, int>> ready_now;  // (-priority, task)
            for (int x : frontier)
                if ((owner(x) < 0 || owner(x) == d) && ready_time[std::size_t(x)] <= now)
                    ready_now.push_back({-g.tasks[std::size_t(x)].priority, x});
            std::sort(ready_now.begin(), ready_now.end());
            t = ready_now.front().second;
            if (!m.in_place) {
                const double top = -ready_now.front().first;
                int best_score = -1;
                for (std::size_t w = 0; w < ready_now.size() && w < 8 && -ready_now[w].first >= 0.9 * top; ++w) {
                    const tile_task& cand = g.tasks[std::size_t(ready_now[w].second)];
                    int score = 0;
                    for (const task_output& o : cand.outputs)
                        if (o.load && s.cache.holds(o.tile, version[std::size_t(o.tile)])) score += 2;
                    for (int x : cand.inputs)
                        if (s.cache.holds(x, version[std::size_t(x)])) ++score;
                    if (score > best_score) best_score = score, t = ready_now[w].second;
                }
            }
            frontier.erase(std::find(frontier.begin(), frontier.end(), t));
        } else {
            // The device whose compute stream is free first.
            for (int e = 1; e < devices; ++e)
                if (dev[std::size_t(e)].compute < dev[std::size_t(d)].compute) d = e;
            model_device_state& s = dev[std::size_t(d)];
            now = s.compute;
            while (!pending.empty() && pending.top().first <= now) {
                available.push({g.tasks[std::size_t(pending.top().second)].priority, -pending.top().second});
                pending.pop();
            }
            if (available.empty()) {
                now = std::max(now, pending.top().first);
                while (!pending.empty() && pending.top().first <= now) {
                    available.push({g.tasks[std::size_t(pending.top().second)].priority, -pending.top().second});
                    pending.pop();
                }
            }
            // As the executor picks: among the most urgent (within 10% of the top priority, at most 8)
            // the one whose tiles the device holds most of (outputs count twice).
            t = -available.top().second;
            if (!m.in_place && available.size() > 1) {
                std::vector<std::pair<double, int>> window;
                const double top = available.top().first;
                while (!available.empty() && window.size() < 8 && available.top().first >= 0.9 * top) {
                    window.push_back(available.top());
                    available.pop();
                }
                int best = -1, best_score = -1;
                for (std::size_t w = 0; w < window.size(); ++w) {
                    const tile_task& cand = g.tasks[std::size_t(-window[w].second)];
                    int score = 0;
                    for (const task_output& o : cand.outputs)
                        if (o.load && s.cache.holds(o.tile, version[std::size_t(o.tile)])) score += 2;
                    for (int x : cand.inputs)
                        if (s.cache.holds(x, version[std::size_t(x)])) ++score;
                    if (score > best_score) best_score = score, best = int(w);
                }
                t = -window[std::size_t(best)].second;
                for (std::size_t w = 0; w < window.size(); ++w)
                    if (int(w) != best) available.push(window[w]);
            } else {
                available.pop();
            }
        }
        model_device_state& s = dev[std::size_t(d)];
        const tile_task& task = g.tasks[std::size_t(t)];
        double compute = 0, load_bytes = 0, store_bytes = 0, merge_s = 0, gather_bytes = 0, scatter_bytes = 0;
        double chain = 0;
        for (const task_step& st : task.steps) compute += step_seconds(g, st, r);
        if (!m.in_place) {
            // As the store does: outputs take their slots first (found, or the least recently
            // used one, loaded when their value is read), then each step's inputs.
            std::vector<int> pinned;
            for (const task_output& o : task.outputs) {
                const bool found = s.cache.hit(o.tile, version[std::size_t(o.tile)]);
                if (!found) s.cache.put(o.tile, version[std::size_t(o.tile)], g.slot_bytes(o.tile), pinned);
                pinned.push_back(o.tile);
                if (o.load) {
                    if (found) ++res.cache_hits;
                    else load_bytes += double(g.tile_bytes(o.tile)), gather_bytes += packed_bytes(o.tile), ++res.loads;
                }
            }
            const std::size_t outputs = pinned.size();
            for (const task_step& st : task.steps) {
                pinned.resize(outputs);
                for (int x : {st.a, st.b}) {
                    if (x < 0) continue;
                    bool own = false;
                    for (const task_output& o : task.outputs) own = own || o.tile == x;
                    if (own) continue;
                    if (s.cache.hit(x, version[std::size_t(x)])) {
                        ++res.cache_hits;
                    } else {
                        load_bytes += double(g.tile_bytes(x));
                        gather_bytes += packed_bytes(x);
                        ++res.loads;
                        s.cache.put(x, version[std::size_t(x)], g.slot_bytes(x), pinned);
                    }
                    pinned.push_back(x);
                }
            }
            for (const task_output& o : task.outputs) {
                store_bytes += double(g.tile_bytes(o.tile));
                if (o.region == tile_region::full) scatter_bytes += packed_bytes(o.tile);
                // A triangle from a device without host access: the whole tile to staging, then
                // the host's merge on the copy-out stream.
                if (o.region != tile_region::full && r.host_merge > 0) merge_s += double(g.tile_bytes(o.tile)) / r.host_merge;
            }
        }
        res.bytes_h2d += std::size_t(load_bytes);
        res.bytes_d2h += std::size_t(store_bytes);
        res.bytes_packed += std::size_t(gather_bytes + scatter_bytes);
        const double load_s = (load_bytes + gather_bytes) / h2d_rate + (load_bytes > 0 ? r.op_overhead : 0.0);
        const double store_s =
            (store_bytes + scatter_bytes) / d2h_rate + (store_bytes > 0 ? r.op_overhead : 0.0) + merge_s;
        const double start = std::max(now, ready_time[std::size_t(t)]);
        double end = 0;
        if (m.in_place) {
            end = start + compute;
            s.compute = end;
        } else if (r.host_memory) {
            // Copies are memcpy on the cores that compute: they add up.
            end = start + load_s + compute + store_s;
            s.compute = s.h2d = s.d2h = end;
        } else {
            const double loaded = std::max(s.h2d, ready_time[std::size_t(t)]) + load_s;
            s.h2d = loaded;
            const double computed = std::max({s.compute, loaded, ready_time[std::size_t(t)]}) + compute;
            s.compute = computed;
            end = std::max(s.d2h, computed) + store_s;
            s.d2h = end;
        }
        s.busy_compute += compute;
        s.busy_h2d += load_s;
        s.busy_d2h += store_s;
        finish[std::size_t(t)] = end;
        for (const task_output& o : task.outputs) {
            ++version[std::size_t(o.tile)];
            if (!m.in_place) s.cache.relabel(o.tile, version[std::size_t(o.tile)]);
        }
        chain = path[std::size_t(t)] + compute;
        res.critical_path_seconds = std::max(res.critical_path_seconds, chain);
        res.seconds = std::max(res.seconds, end);
        for (int succ : task.successors) {
            ready_time[std::size_t(succ)] = std::max(ready_time[std::size_t(succ)], end);
            path[std::size_t(succ)] = std::max(path[std::size_t(succ)], chain);
            if (--waiting[std::size_t(succ)] != 0) continue;
            if (pinned_graph) frontier.push_back(succ);
            else pending.push({ready_time[std::size_t(succ)], succ});
        }
    }
    for (const auto& s : dev) {
        res.compute_seconds = std::max(res.compute_seconds, s.busy_compute);
        res.h2d_seconds = std::max(res.h2d_seconds, s.busy_h2d);
        res.d2h_seconds = std::max(res.d2h_seconds, s.busy_d2h);
    }
    const double most = std::max({res.compute_seconds, res.h2d_seconds, res.d2h_seconds});
    if (res.critical_path_seconds >= 0.9 * res.seconds && res.critical_path_seconds > most) res.bound = "dependencies";
    else if (most == res.compute_seconds) res.bound = "compute";
    else if (most == res.h2d_seconds) res.bound = "copy h2d";
    else res.bound = "copy d2h";
    return res;
}

}  // namespace tilestream::detail::engine
