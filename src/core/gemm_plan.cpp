// The GEMM planner: for each strategy and tile size, the bytes a run copies and packs, the device
// memory it needs and the time it should take with copies overlapped; `automatic` picks the
// fastest plan that fits the budget.
#include "core/routines/gemm_tasks.hpp"

#include <tilestream/error.hpp>
#include <tilestream/plan.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

namespace tilestream {

std::string_view to_string(gemm_strategy s) noexcept {
    switch (s) {
        case gemm_strategy::automatic: return "auto";
        case gemm_strategy::in_core: return "in-core";
        case gemm_strategy::tiles_3d: return "tiles-3d";
        case gemm_strategy::a_panel: return "a-panel";
        case gemm_strategy::a_panel_c_panel: return "a-panel-c-panel";
        case gemm_strategy::b_panel: return "b-panel";
        case gemm_strategy::c_block: return "c-block";
        case gemm_strategy::row_panels: return "row-panels";
        case gemm_strategy::zero_copy: return "zero-copy";
        case gemm_strategy::direct: return "direct";
    }
    return "?";
}

gemm_strategy parse_gemm_strategy(std::string_view s) {
    for (auto v : {gemm_strategy::automatic, gemm_strategy::in_core, gemm_strategy::tiles_3d, gemm_strategy::a_panel,
                   gemm_strategy::a_panel_c_panel, gemm_strategy::b_panel, gemm_strategy::c_block,
                   gemm_strategy::row_panels, gemm_strategy::zero_copy, gemm_strategy::direct})
        if (s == to_string(v)) return v;
    throw invalid_argument("unknown strategy '" + std::string(s) +
                           "' (expected auto, in-core, tiles-3d, a-panel, a-panel-c-panel, b-panel, c-block, row-panels, "
                           "zero-copy or direct)");
}

std::string_view to_string(cache_mode c) noexcept {
    switch (c) {
        case cache_mode::automatic: return "auto";
        case cache_mode::on: return "on";
        case cache_mode::off: return "off";
    }
    return "?";
}

cache_mode parse_cache_mode(std::string_view s) {
    for (auto v : {cache_mode::automatic, cache_mode::on, cache_mode::off})
        if (s == to_string(v)) return v;
    throw invalid_argument("--cache expects auto, on or off, got '" + std::string(s) + "'");
}

peer_tile_mode parse_peer_tile_mode(std::string_view s) {
    if (s == "auto") return peer_tile_mode::automatic;
    if (s == "on") return peer_tile_mode::on;
    if (s == "off") return peer_tile_mode::off;
    throw invalid_argument("--peer-tiles expects auto, on or off, got '" + std::string(s) + "'");
}

std::string_view to_string(gemm_engine e) noexcept { return e == gemm_engine::tasks ? "tasks" : "pipeline"; }

gemm_engine parse_gemm_engine(std::string_view s) {
    for (auto v : {gemm_engine::tasks, gemm_engine::pipeline})
        if (s == to_string(v)) return v;
    throw invalid_argument("--engine expects tasks or pipeline, got '" + std::string(s) + "'");
}

std::string_view to_string(transfer_mode t) noexcept { return t == transfer_mode::copy_2d ? "2d-copy" : "pack"; }

namespace {

index_t ceil_div(index_t a, index_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/// Extents of the blocks that split `total` into pieces of `tile`: (count, size) classes.
struct split {
    index_t full_count = 0, full = 0, last = 0;  // full_count blocks of `full`, then one of `last` (0: none)
};
split split_of(index_t total, index_t tile) {
    split s;
    if (total <= 0 || tile <= 0) return s;
    s.full = tile;
    s.full_count = total / tile;
    s.last = total % tile;
    return s;
}

/// Whether the stored rectangle r of operand x is one contiguous run of memory (then no packing is
/// needed even without 2-D copies).
bool contiguous(const operand_desc::stored_rect& r, const operand_desc& x) {
    const bool row = x.stored == layout::row_major;
    const index_t outer = row ? r.rows : r.cols, inner = row ? r.cols : r.rows;
    const index_t stored_inner = row ? x.stored_cols() : x.stored_rows();
    return outer <= 1 || (inner == stored_inner && x.ld == stored_inner);
}

/// Bytes of the non-contiguous tiles when op(X) is cut into tr x tc tiles.
std::size_t noncontiguous_bytes(const operand_desc& x, index_t tr, index_t tc, std::size_t es) {
    const split sr = split_of(x.rows, tr), sc = split_of(x.cols, tc);
    std::size_t total = 0;
    for (auto [rc, r] : {std::pair{sr.full_count, sr.full}, std::pair{index_t(sr.last ? 1 : 0), sr.last}})
        for (auto [cc, c] : {std::pair{sc.full_count, sc.full}, std::pair{index_t(sc.last ? 1 : 0), sc.last}}) {
            if (rc == 0 || cc == 0 || r == 0 || c == 0) continue;
            if (!contiguous(x.stored_block(0, 0, r, c), x))
                total += std::size_t(rc) * std::size_t(cc) * std::size_t(r) * std::size_t(c) * es;
        }
    return total;
}

/// Rows of C's block row i and columns of block column j (the last ones may be ragged).
index_t block_rows(const gemm_plan& p, index_t i) { return std::min(p.tile_m, p.problem.m - i * p.tile_m); }
index_t block_cols(const gemm_plan& p, index_t j) { return std::min(p.tile_n, p.problem.n - j * p.tile_n); }

/// Seconds a host-memory device spends packing: each kernel call copies its rows of A and columns
/// of B into the kernel's panels (OpenBLAS and the tiled kernel both do), so many small calls cost
/// more than a few large ones (256 x 256 blocks of a 4096^3 product pack ~8x the elements of one
/// call). Packing gathers strided lines into panel order, at about half the contiguous copy rate
/// the probe measures (perf on the 2-core VM: OpenBLAS's packing ran at ~7 GB/s where memcpy ran
/// at 12.7-16.9). Accelerator BLAS stream from device memory: nothing counted.
double packing_seconds(const gemm_plan& p) {
    const gemm_problem& q = p.problem;
    if (!p.rates.host_memory || !q.reads_ab || q.k <= 0) return 0.0;
    const double packed_elements = double(p.tiles_n) * double(q.m) * double(q.k) + double(p.tiles_m) * double(q.k) * double(q.n);
    return packed_elements * double(size_of(q.type)) / (p.rates.h2d / 2);
}

/// Relative spread of one kernel call's time between runs and between devices (start skew,
/// frequency, a neighbour's cache traffic): identical runs on the 2-core VM spread by 2-3%.
constexpr double unit_time_spread = 0.03;

/// Share of the work the busiest of `devices` equal devices does when each takes the next unit
/// as it becomes free (the engine's dynamic order), units timed by their area: whole rounds,
/// and ragged last tiles, both count (three devices on 768-row units of 2048 rows do 0.375, not 1/3).
double busiest_share(const gemm_plan& p, std::size_t devices) {
    const gemm_problem& q = p.problem;
    const std::size_t units = p.units;
    if (devices <= 1 || units <= 1 || q.m <= 0 || q.n <= 0) return 1.0;
    // Many rounds: the rounds even out; list scheduling is only worth it for a few.
    if (units > 64 * devices) return double((units + devices - 1) / devices) / double(units);
    // Units in the engine's order (row of blocks by row of blocks; zero-copy has no cache).
    const double area = double(q.m) * double(q.n);
    std::vector<double> finish(devices, 0.0);
    for (std::size_t u = 0; u < units; ++u) {
        const index_t i = index_t(u) / p.tiles_n, j = index_t(u) % p.tiles_n;
        *std::min_element(finish.begin(), finish.end()) += double(block_rows(p, i)) * double(block_cols(p, j)) / area;
    }
    return *std::max_element(finish.begin(), finish.end());
}

/// Zero-copy: no device buffers and no copies to the device, only the kernels' packing. Devices
/// that compute in place are CPU slices of equal speed taking one unit at a time: the busiest does
/// `busiest_share` of the work, and the spread of unit times adds a tail. Each device's time is a
/// sum of its R units' times, spread by unit_time_spread each: the devices drift apart by about
/// spread x (work per device) / sqrt(R), and taking units as they free up caps that at half a
/// unit. (cpu:2 at 2048^3, one thread each: one unit per device measured 0.984 efficiency, two
/// per device 0.965, 12 units 0.960, medians of 8 alternated runs.)
void cost_zero_copy(gemm_plan& p) {
    const gemm_problem& q = p.problem;
    const bool ab = q.reads_ab && q.k > 0;
    p.a_slots = p.b_slots = p.c_slots = 0;
    p.a_slot_bytes = p.b_slot_bytes = p.c_slot_bytes = 0;
    p.peak_device_bytes = 0;
    p.bytes_h2d = p.bytes_d2h = p.bytes_packed = 0;
    p.units = std::size_t(p.tiles_m) * std::size_t(p.tiles_n);
    p.steps = p.units * std::size_t(ab ? p.tiles_k : 1);
    const device_rates& r = p.rates;
    const std::size_t devs = std::size_t(std::max(1, p.devices)), units = std::max<std::size_t>(p.units, 1);
    const double share = busiest_share(p, devs);
    const double work = q.flops() / r.flops + packing_seconds(p) + double(p.steps) * r.op_overhead;
    const double rounds = std::max(1.0, double(units) / double(devs));
    const double tail = devs > 1 ? std::min(unit_time_spread * work / double(devs) / std::sqrt(rounds), 0.5 * work / double(units)) : 0.0;
    p.predicted_compute_seconds = work * share;
    p.predicted_copy_seconds = 0;
    p.predicted_seconds = work * share + tail;
    p.bound = "compute (zero-copy: operands used in place)";
}

/// Direct: the whole product on the calling thread with the host's kernel, where the operands lie:
/// no device, buffer, copy or queue; the rates are the host kernel's (op_overhead: its fixed cost).
void cost_direct(gemm_plan& p) {
    const gemm_problem& q = p.problem;
    const bool ab = q.reads_ab && q.k > 0;
    p.a_slots = p.b_slots = p.c_slots = 0;
    p.a_slot_bytes = p.b_slot_bytes = p.c_slot_bytes = 0;
    p.peak_device_bytes = 0;
    p.bytes_h2d = p.bytes_d2h = p.bytes_packed = 0;
    p.units = 1;
    p.steps = 1;
    p.predicted_compute_seconds = (ab ? q.flops() / p.rates.flops : 0.0) + p.rates.op_overhead;
    p.predicted_copy_seconds = 0;
    p.predicted_seconds = p.predicted_compute_seconds;
    p.bound = "compute on the calling thread (direct: no devices, queue or copies)";
}

/// Fills slots, bytes and time of plan `p` (strategy and tiles set).
void cost(gemm_plan& p) {
    const gemm_problem& q = p.problem;
    const std::size_t es = size_of(q.type);
    const index_t m = q.m, n = q.n, k = q.k;
    p.tiles_m = ceil_div(m, p.tile_m);
    p.tiles_n = ceil_div(n, p.tile_n);
    p.tiles_k = ceil_div(std::max<index_t>(k, 1), p.tile_k);
    const bool ab = q.reads_ab && k > 0;
    const auto sz = [&](index_t r, index_t c) { return std::size_t(r) * std::size_t(c) * es; };
    const index_t tm = std::min(p.tile_m, m), tn = std::min(p.tile_n, n), tk = std::min(p.tile_k, std::max<index_t>(k, 1));

    // Loads per tile of A and B, the C block a unit holds, and the device buffers.
    std::size_t a_loads = 1, b_loads = 1;
    index_t c_block_rows = tm, c_block_cols = tn;
    int depth = 2;
    p.reuse_a = p.reuse_b = false;
    switch (p.strategy) {
        case gemm_strategy::in_core: depth = 1; break;
        case gemm_strategy::tiles_3d: a_loads = std::size_t(p.tiles_n); b_loads = std::size_t(p.tiles_m); break;
        case gemm_strategy::c_block:
            a_loads = std::size_t(p.tiles_n);
            b_loads = std::size_t(p.tiles_m);
            depth = 3;
            break;
        case gemm_strategy::a_panel: b_loads = std::size_t(p.tiles_m); p.reuse_a = true; break;
        case gemm_strategy::a_panel_c_panel:
        case gemm_strategy::row_panels:
            b_loads = std::size_t(p.tiles_m);
            p.reuse_a = true;
            c_block_cols = n;
            break;
        case gemm_strategy::b_panel: a_loads = std::size_t(p.tiles_n); p.reuse_b = true; break;
        case gemm_strategy::zero_copy: return cost_zero_copy(p);
        case gemm_strategy::direct: return cost_direct(p);
        case gemm_strategy::automatic: break;
    }
    p.a_slots = ab ? (p.strategy == gemm_strategy::in_core ? 1 : depth) : 0;
    p.b_slots = p.a_slots;
    p.c_slots = p.strategy == gemm_strategy::in_core ? 1 : 2;
    p.a_slot_bytes = ab ? sz(tm, tk) : 0;
    p.b_slot_bytes = ab ? sz(tk, tn) : 0;
    p.c_slot_bytes = sz(c_block_rows, c_block_cols);
    p.peak_device_bytes = std::size_t(p.a_slots) * p.a_slot_bytes + std::size_t(p.b_slots) * p.b_slot_bytes +
                          std::size_t(p.c_slots) * p.c_slot_bytes;

    const std::size_t c_bytes = sz(m, n);
    p.bytes_h2d = (ab ? a_loads * sz(m, k) + b_loads * sz(k, n) : 0) + (q.reads_c ? c_bytes : 0);
    p.bytes_d2h = c_bytes;
    p.bytes_packed = 0;
    if (p.transfer == transfer_mode::pack) {
        if (ab) {
            p.bytes_packed += a_loads * noncontiguous_bytes(q.a_desc(), tm, tk, es);
            p.bytes_packed += b_loads * noncontiguous_bytes(q.b_desc(), tk, tn, es);
        }
        const std::size_t c_nc = noncontiguous_bytes(q.c_desc(), c_block_rows, c_block_cols, es);
        p.bytes_packed += c_nc * (q.reads_c ? 2 : 1);  // gathered in, scattered out
    }

    // Work counts and predicted time.
    const bool panel_units = p.strategy == gemm_strategy::a_panel_c_panel || p.strategy == gemm_strategy::row_panels;
    const std::size_t units = panel_units ? std::size_t(p.tiles_m) : std::size_t(p.tiles_m * p.tiles_n);
    const std::size_t steps = std::size_t(p.tiles_m) * std::size_t(p.tiles_n) * std::size_t(ab ? p.tiles_k : 1);
    p.units = units;
    p.steps = steps;
    const device_rates& r = p.rates;
    const std::size_t loads = ab ? steps * 2 : 0;
    const double pack_seconds = double(p.bytes_packed) / r.h2d;
    const double h2d = double(p.bytes_h2d) / r.h2d + double(loads + (q.reads_c ? units : 0)) * r.op_overhead +
                       pack_seconds * (q.reads_c ? 2.0 / 3.0 : 1.0);
    const double d2h = double(p.bytes_d2h) / r.d2h + double(units) * r.op_overhead +
                       (p.transfer == transfer_mode::pack ? pack_seconds / 3.0 : 0.0);
    // Several devices share the units (each with this plan's rates and its own copy streams); the
    // busiest does ceil(units / devices) of them.
    const std::size_t devs = std::size_t(std::max(1, p.devices));
    const double share = double((units + devs - 1) / devs) / double(std::max<std::size_t>(units, 1));
    const double compute = (q.flops() / r.flops + packing_seconds(p) + double(steps) * r.op_overhead) * share;
    const double h2d_share = h2d * share, d2h_share = d2h * share;
    p.predicted_compute_seconds = compute;
    p.predicted_copy_seconds = h2d_share + d2h_share;
    p.predicted_h2d_seconds = h2d_share;
    p.predicted_d2h_seconds = d2h_share;
    if (p.strategy == gemm_strategy::in_core) {
        p.predicted_seconds = h2d_share + compute + d2h_share;
        p.bound = "nothing overlaps (in-core)";
        return;
    }
    if (r.host_memory) {
        // A CPU device's copy streams run on the cores and memory its kernels use: they add up.
        p.predicted_seconds = h2d_share + compute + d2h_share;
        p.bound = "compute and copies (a CPU device's copies use its own cores)";
        return;
    }
    // Pipeline: the slowest stream sets the pace; the first loads and the last store do not overlap.
    const double fill = (double(p.a_slot_bytes + p.b_slot_bytes) + (q.reads_c ? double(p.c_slot_bytes) : 0)) / r.h2d;
    const double drain = double(p.c_slot_bytes) / r.d2h;
    const double pace = std::max({compute, h2d_share, d2h_share});
    p.predicted_seconds = pace + fill + drain;
    p.bound = pace == compute ? "compute" : (pace == h2d_share ? "copy h2d" : "copy d2h");
}

/// Turns spare budget into spare A and B slots (LRU tile cache), never more than the distinct
/// tiles a run could reuse. Unless forced, only when the tiles it keeps would make the predicted
/// time at least 3% shorter (on a device computing with the host's cores, a run bound by compute
/// gains nothing from skipped copies), or, on a device with memory of its own, save a quarter of
/// the bytes copied in.
void add_tile_cache(gemm_plan& p, std::size_t budget, bool forced) {
    const std::size_t spare = budget - p.peak_device_bytes;
    const std::size_t pair = p.a_slot_bytes + p.b_slot_bytes;
    const std::size_t fit = pair ? spare / pair : 0;
    const std::size_t tiles_a = std::size_t(p.tiles_m) * std::size_t(p.tiles_k);
    const std::size_t tiles_b = std::size_t(p.tiles_k) * std::size_t(p.tiles_n);
    const auto useful = [](std::size_t tiles, int slots) { return tiles > std::size_t(slots) ? tiles - slots : 0; };
    const std::size_t extra_a = std::min(fit, useful(tiles_a, p.a_slots));
    const std::size_t extra_b = std::min(fit, useful(tiles_b, p.b_slots));
    if (extra_a + extra_b == 0 && !forced) return;  // forced: LRU reuse over the base slots alone
    // Serpentine order: a row's A tiles stay while its units run if a row's k-tiles fit; all of B
    // is loaded once only if every B tile fits. Other reuse is not counted (a lower estimate).
    const gemm_problem& q = p.problem;
    const std::size_t es = size_of(q.type);
    const std::size_t bytes_a = std::size_t(q.m) * std::size_t(q.k) * es, bytes_b = std::size_t(q.k) * std::size_t(q.n) * es;
    std::size_t saved = 0;
    if (!p.reuse_a && extra_a + std::size_t(p.a_slots) >= std::size_t(p.tiles_k)) saved += (std::size_t(p.tiles_n) - 1) * bytes_a;
    if (!p.reuse_b && extra_b + std::size_t(p.b_slots) >= tiles_b) saved += (std::size_t(p.tiles_m) - 1) * bytes_b;
    const double h2d = p.bytes_h2d ? p.predicted_h2d_seconds * double(p.bytes_h2d - std::min(saved, p.bytes_h2d)) /
                                         double(p.bytes_h2d)
                                   : 0.0;
    const double pace = std::max({p.predicted_compute_seconds, p.predicted_h2d_seconds, p.predicted_d2h_seconds});
    const double pace_cached = std::max({p.predicted_compute_seconds, h2d, p.predicted_d2h_seconds});
    // On a CPU device copies add to the time rather than set a pace: the saved copy time counts whole.
    const double predicted = p.rates.host_memory ? p.predicted_seconds - (p.predicted_h2d_seconds - h2d)
                                                 : p.predicted_seconds - pace + pace_cached;
    // A device with memory of its own (a GPU) also keeps them when that saves a quarter of the bytes
    // or more, even where the model sees the copies hidden behind compute: its copy rate is the
    // probe's contiguous one, and a tile's strided rows copy slower. On an H200 (f64 16384^3), a plan
    // without the cache took 0.317 s, re-reading 8.6 GB; one with it 0.197 s, 4.3 GB (the model
    // had both at 0.17 s).
    const bool saves_bytes = !p.rates.host_memory && p.bytes_h2d > 0 && saved * 4 >= p.bytes_h2d;
    if (!forced && !(predicted < 0.97 * p.predicted_seconds) && !saves_bytes) return;
    p.cache = true;
    p.cache_slots_a = int(extra_a);
    p.cache_slots_b = int(extra_b);
    p.a_slots += int(extra_a);
    p.b_slots += int(extra_b);
    p.reuse_a = p.reuse_b = true;
    p.peak_device_bytes += extra_a * p.a_slot_bytes + extra_b * p.b_slot_bytes;
    if (predicted < p.predicted_seconds) {
        p.predicted_seconds = predicted;
        p.predicted_h2d_seconds = h2d;
        p.predicted_copy_seconds = h2d + p.predicted_d2h_seconds;
        if (!p.rates.host_memory)
            p.bound = pace_cached == p.predicted_compute_seconds ? "compute" : (pace_cached == h2d ? "copy h2d" : "copy d2h");
    }
}

std::vector<index_t> tile_candidates(index_t dim) {
    std::vector<index_t> c;
    for (index_t t : {16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288,
                      16384, 24576, 32768, 49152, 65536})
        if (t < dim) c.push_back(t);
    c.push_back(std::max<index_t>(dim, 1));
    return c;
}

/// Kernel calls a plan makes: one per step, or one per k-block of a step when the k-order is fixed.
std::size_t kernel_calls(const gemm_plan& p) {
    const index_t depth = std::min(p.tile_k, std::max<index_t>(p.problem.k, 1));
    return p.steps * std::size_t(p.k_block > 0 ? ceil_div(depth, p.k_block) : 1);
}

bool better(const gemm_plan& a, const gemm_plan& b) {
    if (a.predicted_seconds != b.predicted_seconds) return a.predicted_seconds < b.predicted_seconds;
    return a.bytes_h2d + a.bytes_d2h < b.bytes_h2d + b.bytes_d2h;
}

/// Cuts the steps of an in-place plan to at most `bound` seconds each (at the plan's rates): k
/// first, in whole k-blocks (a BLAS adds k in such blocks and passes over C once per block anyway,
/// and each element's operand panels are packed once whatever the cut), then, when one k-block of
/// a unit still takes longer, the unit's C block along its longer side.
void bound_steps(gemm_plan& p, double bound) {
    const gemm_problem& q = p.problem;
    if (bound <= 0 || !q.reads_ab || q.k <= 0 || p.rates.flops <= 0) return;
    const double per_step = [&] {
        return double(dtype_traits(q.type).flops_per_multiply_add) * double(p.tile_m) * double(p.tile_n) *
               double(std::min(p.tile_k, q.k)) / p.rates.flops;
    }();
    if (per_step <= bound) return;
    const index_t kb = p.k_block > 0 ? p.k_block : reproducible_k_block(q.type);
    const index_t k = std::min(p.tile_k, q.k);
    // As many whole k-blocks a step as the bound allows (one at least), then evened out over the steps.
    const index_t blocks = ceil_div(k, kb);
    const index_t fit = std::max<index_t>(1, index_t(bound / (per_step * double(kb) / double(k))));
    const index_t steps = ceil_div(blocks, fit);
    const index_t tk = std::min(k, ceil_div(blocks, steps) * kb);
    p.tile_k = tk;
    double per_kstep = per_step * double(tk) / double(k);
    while (per_kstep > bound && (p.tile_m > 16 || p.tile_n > 16)) {
        const index_t f = index_t(std::ceil(per_kstep / bound));
        index_t& longer = p.tile_m >= p.tile_n ? p.tile_m : p.tile_n;
        const index_t was = longer;
        longer = std::max<index_t>(16, ceil_div(ceil_div(longer, f), 16) * 16);
        per_kstep *= double(longer) / double(was);
    }
    cost(p);
}

}  // namespace

gemm_plan plan_gemm(const gemm_problem& q, std::size_t budget, const device_rates& rates, const plan_options& opt) {
    if (q.m < 0 || q.n < 0 || q.k < 0) throw size_overflow("plan_gemm: negative extent");
    for (index_t t : {opt.tile_m, opt.tile_n, opt.tile_k})
        if (t < 0) throw invalid_argument("plan_gemm: tile sizes must be positive, got " + std::to_string(t));
    const index_t m = std::max<index_t>(q.m, 1), n = std::max<index_t>(q.n, 1), k = std::max<index_t>(q.k, 1);
    // Validates all sizes in 64 bits up front.
    checked_bytes(m, k, q.type, "plan_gemm: A");
    checked_bytes(k, n, q.type, "plan_gemm: B");
    checked_bytes(m, n, q.type, "plan_gemm: C");

    if (opt.strategy == gemm_strategy::zero_copy && !opt.in_place)
        throw invalid_argument("zero-copy needs devices that compute on host memory in place (CPU devices "
                               "without a memory budget)");
    std::vector<gemm_strategy> strategies;
    // On devices that compute in place, zero-copy copies nothing and needs no device memory: nothing
    // beats it, and in-core there means the whole product in place.
    const bool whole_in_place = opt.strategy == gemm_strategy::in_core && opt.in_place;
    if ((opt.strategy == gemm_strategy::automatic && opt.in_place) || whole_in_place)
        strategies = {gemm_strategy::zero_copy};
    else if (opt.strategy == gemm_strategy::direct)
        strategies = {gemm_strategy::direct};
    else if (opt.strategy == gemm_strategy::automatic)
        strategies = {gemm_strategy::in_core, gemm_strategy::a_panel, gemm_strategy::b_panel,
                      gemm_strategy::a_panel_c_panel, gemm_strategy::c_block, gemm_strategy::tiles_3d};
    else
        strategies = {opt.strategy};

    const bool panel_k = [&] {
        for (auto s : strategies)
            if (s == gemm_strategy::a_panel || s == gemm_strategy::a_panel_c_panel || s == gemm_strategy::b_panel ||
                s == gemm_strategy::row_panels)
                return true;
        return false;
    }();
    if (opt.strategy != gemm_strategy::automatic && panel_k && opt.tile_k != 0)
        throw invalid_argument(std::string(to_string(opt.strategy)) + " keeps all of k resident; --tile-k does not apply");
    if (opt.strategy == gemm_strategy::in_core && (opt.tile_m || opt.tile_n || opt.tile_k))
        throw invalid_argument("in-core uses no tiles; --tile does not apply");
    // tiles-3d has one tile size: it can honour tile sizes given only when all three are given and
    // equal (--tile T); taking one given size for the others would change them silently.
    const int tiles_given = (opt.tile_m != 0) + (opt.tile_n != 0) + (opt.tile_k != 0);
    const bool one_tile_size = tiles_given == 0 || (tiles_given == 3 && opt.tile_m == opt.tile_n && opt.tile_m == opt.tile_k);
    if (opt.strategy == gemm_strategy::tiles_3d && !one_tile_size)
        throw invalid_argument("tiles-3d uses one tile size for m, n and k: give it for all three (--tile T); "
                               "different or partial sizes (--tile-m alone) need c-block or a panel strategy");

    const auto fixed_or = [](index_t fixed, index_t dim) {
        return fixed ? std::vector<index_t>{std::min(fixed, std::max<index_t>(dim, 1))} : tile_candidates(dim);
    };
    // Reproducible plans cut k only at multiples of the k-block, so every plan adds the same
    // k-blocks in the same order.
    const index_t kb = opt.reproducible ? reproducible_k_block(q.type) : 0;
    const auto k_tile = [&](index_t t) { return kb && t < k ? std::min(k, ceil_div(t, kb) * kb) : std::min(t, k); };
    const auto k_candidates = [&](index_t fixed) {
        if (fixed) return std::vector<index_t>{k_tile(fixed)};
        if (!kb) return tile_candidates(k);
        std::vector<index_t> c;
        for (index_t t = kb; t < k; t *= 2) c.push_back(t);
        c.push_back(k);
        return c;
    };

    // A CPU BLAS adds k in passes of its KC (the k-block: 384 f32, 256 f64, 192 c32, 128 c64) and sweeps its C block
    // once per pass: a k-tile below one KC adds passes, so CPU devices take k-tiles of at least one.
    const index_t min_cpu_k = rates.host_memory && !opt.tile_k ? std::min(k, reproducible_k_block(q.type)) : 0;
    std::optional<gemm_plan> best, smallest, too_many_calls;
    const auto consider = [&](gemm_strategy s, index_t tm, index_t tn, index_t tk) {
        gemm_plan p;
        p.problem = q;
        p.strategy = s;
        p.transfer = opt.transfer;
        // Vendor BLAS (OpenBLAS, cuBLAS, CLBlast) choose their blocking and thread split by the call's
        // shape, so an element's bits change with the tile: a reproducible plan runs the tiled kernel,
        // whose per-element order depends on k alone.
        p.kernel = opt.reproducible && opt.kernel == gemm_kernel::vendor ? gemm_kernel::tiled : opt.kernel;
        p.math = opt.math;
        p.tile_m = tm;
        p.tile_n = tn;
        p.tile_k = tk;
        p.rates = rates;
        p.budget = budget;
        p.devices = std::max(1, opt.devices);
        p.static_assignment = s == gemm_strategy::row_panels;
        p.k_block = kb;
        const index_t requested_k = s == gemm_strategy::c_block ? opt.tile_k
                                    : s == gemm_strategy::tiles_3d ? (opt.tile_m ? opt.tile_m : (opt.tile_n ? opt.tile_n : opt.tile_k))
                                                                   : 0;
        p.tile_k_rounded = requested_k && tk != std::min(requested_k, k);
        p.direct_threads = std::max(1, opt.direct_threads);
        cost(p);
        if (kernel_calls(p) > max_plan_kernel_calls) {
            if (!too_many_calls) too_many_calls = p;
            return;
        }
        if (!smallest || p.peak_device_bytes < smallest->peak_device_bytes) smallest = p;
        if (p.peak_device_bytes <= budget && (!best || better(p, *best))) best = p;
    };

    // First with k-tiles of at least one KC on CPU devices; when no such plan fits the budget, any k-tile.
    const auto search = [&](index_t min_k) {
        for (auto s : strategies) {
            switch (s) {
                case gemm_strategy::in_core:
                case gemm_strategy::direct: consider(s, m, n, k); break;
                case gemm_strategy::tiles_3d: {
                    if (!one_tile_size) break;  // automatic: only strategies that keep the sizes given
                    const index_t fixed = opt.tile_m;
                    for (index_t t : fixed ? std::vector<index_t>{fixed} : tile_candidates(std::max({m, n, k})))
                        if (k_tile(t) >= min_k) consider(s, std::min(t, m), std::min(t, n), k_tile(t));
                    break;
                }
                case gemm_strategy::a_panel:
                case gemm_strategy::a_panel_c_panel:
                case gemm_strategy::row_panels:
                case gemm_strategy::b_panel:
                    for (index_t tm : fixed_or(opt.tile_m, m))
                        for (index_t tn : fixed_or(opt.tile_n, n)) consider(s, tm, tn, k);
                    break;
                case gemm_strategy::c_block:
                    for (index_t tm : fixed_or(opt.tile_m, m))
                        for (index_t tn : fixed_or(opt.tile_n ? opt.tile_n : 0, n)) {
                            // Square blocks, or twice as wide or tall (the search stays small).
                            if (!opt.tile_n && !opt.tile_m && tn != tm && tn != 2 * tm && tm != 2 * tn && tn != n && tm != m)
                                continue;
                            for (index_t tk : k_candidates(opt.tile_k))
                                if (tk >= min_k) consider(s, tm, tn, tk);
                        }
                    break;
                case gemm_strategy::zero_copy: {
                    if (whole_in_place) {
                        consider(s, m, n, k);
                        break;
                    }
                    // Blocks of C with all of k; blocks below 256 lose kernel efficiency for little
                    // balance. Besides the usual sizes, even splits into a few blocks per device
                    // (multiples of 16), so three devices on 2048 rows get 688 + 688 + 672, not 768 + 768 + 512.
                    const auto in_place_candidates = [&](index_t fixed, index_t dim) {
                        std::vector<index_t> c = fixed_or(fixed, dim);
                        if (fixed) return c;
                        for (index_t parts = 2; parts <= 4 * std::max(1, opt.devices); ++parts)
                            c.push_back(std::min(dim, ceil_div(ceil_div(dim, parts), 16) * 16));
                        std::sort(c.begin(), c.end());
                        c.erase(std::unique(c.begin(), c.end()), c.end());
                        return c;
                    };
                    for (index_t tm : in_place_candidates(opt.tile_m, m))
                        for (index_t tn : in_place_candidates(opt.tile_n, n)) {
                            if ((tm < 256 && tm < m && !opt.tile_m) || (tn < 256 && tn < n && !opt.tile_n)) continue;
                            consider(s, tm, tn, opt.tile_k ? k_tile(opt.tile_k) : k);
                        }
                    break;
                }
                case gemm_strategy::automatic: break;
            }
        }
    };
    search(min_cpu_k);
    if (!best && min_cpu_k > 0) search(0);
    if (!best && !smallest && too_many_calls) {
        const gemm_plan& p = *too_many_calls;
        throw invalid_argument("gemm: " + std::string(to_string(p.strategy)) + " with tiles " + std::to_string(p.tile_m) + "x" +
                               std::to_string(p.tile_n) + "x" + std::to_string(p.tile_k) + " makes " +
                               std::to_string(kernel_calls(p)) + " kernel calls (" + std::to_string(p.tiles_m) + " x " +
                               std::to_string(p.tiles_n) + " x " + std::to_string(p.tiles_k) + " tiles), more than the " +
                               std::to_string(max_plan_kernel_calls) + " a plan may make; use larger tiles");
    }
    if (!best) {
        std::ostringstream msg;
        msg << "gemm: no " << (opt.strategy == gemm_strategy::automatic ? std::string("") : std::string(to_string(opt.strategy)) + " ")
            << "plan fits the device budget of " << format_bytes(budget) << " (" << budget << " bytes); the smallest budget that would is "
            << format_bytes(smallest->peak_device_bytes) << " (" << smallest->peak_device_bytes << " bytes, "
            << to_string(smallest->strategy) << " with tiles " << smallest->tile_m << "x" << smallest->tile_n << "x"
            << smallest->tile_k << ")";
        throw out_of_budget(msg.str());
    }
    if (opt.cache != cache_mode::off && best->a_slots > 0 && best->strategy != gemm_strategy::in_core)
        add_tile_cache(*best, budget, opt.cache == cache_mode::on);
    if (best->strategy == gemm_strategy::zero_copy && !opt.tile_m && !opt.tile_n && !opt.tile_k)
        bound_steps(*best, opt.max_step_seconds);
    if (detail::routines::runs_on_tasks(*best, opt))
        detail::routines::adopt_tasks(*best, opt.devices, opt.cache == cache_mode::on,
                                      opt.strategy == gemm_strategy::automatic && !opt.tile_m && !opt.tile_n && !opt.tile_k);
    return *best;
}

gemm_unit plan_unit(const gemm_plan& p, std::size_t index) {
    const gemm_problem& q = p.problem;
    if (index >= p.units)
        throw invalid_argument("plan_unit: unit " + std::to_string(index) + " of a plan with " + std::to_string(p.units));
    const bool ab = q.reads_ab && q.k > 0;
    const index_t kt = ab ? p.tiles_k : 1;
    const auto rows_of = [&](index_t i) { return block_rows(p, i); };
    const auto cols_of = [&](index_t j) { return block_cols(p, j); };
    const auto depth_of = [&](index_t kb) { return ab ? std::min(p.tile_k, q.k - kb * p.tile_k) : 0; };
    const auto block_unit = [&](index_t i, index_t j) {
        gemm_unit u{i * p.tile_m, j * p.tile_n, rows_of(i), cols_of(j), {}};
        u.steps.reserve(std::size_t(kt));
        for (index_t kb = 0; kb < kt; ++kb) u.steps.push_back({i, kb, j, 0, 0, u.rows, u.cols, depth_of(kb)});
        return u;
    };
    const index_t x = index_t(index);
    switch (p.strategy) {
        case gemm_strategy::b_panel: return block_unit(x % p.tiles_m, x / p.tiles_m);
        case gemm_strategy::a_panel_c_panel:
        case gemm_strategy::row_panels: {
            gemm_unit u{x * p.tile_m, 0, rows_of(x), q.n, {}};
            for (index_t j = 0; j < p.tiles_n; ++j)
                u.steps.push_back({x, 0, j, 0, j * p.tile_n, u.rows, cols_of(j), depth_of(0)});
            return u;
        }
        default: {
            // With a cache, a serpentine order keeps the A row (and B column at each turn) in use.
            const index_t i = x / p.tiles_n, jj = x % p.tiles_n;
            return block_unit(i, p.cache && (i % 2) ? p.tiles_n - 1 - jj : jj);
        }
    }
}

std::vector<gemm_unit> plan_units(const gemm_plan& p) {
    std::vector<gemm_unit> units;
    if (p.problem.m == 0 || p.problem.n == 0) return units;
    units.reserve(p.units);
    for (std::size_t u = 0; u < p.units; ++u) units.push_back(plan_unit(p, u));
    return units;
}

std::string explain(const gemm_plan& p) {
    const gemm_problem& q = p.problem;
    char buf[512];
    std::ostringstream s;
    s << "plan: C(" << q.m << "x" << q.n << ") = op(A)(" << q.m << "x" << q.k << ") * op(B)(" << q.k << "x" << q.n << "), "
      << to_string(q.type) << ", kernel " << to_string(p.kernel) << "\n";
    const bool direct = p.strategy == gemm_strategy::direct;
    const bool in_place = p.strategy == gemm_strategy::zero_copy || direct;
    s << "  strategy        " << to_string(p.strategy)
      << (direct ? " (the host's kernel on the calling thread: no devices, queue, copies or thread hand-off"
                 + std::string(p.kernel == gemm_kernel::vendor ? ", OpenBLAS with " + std::to_string(p.direct_threads) +
                                                                     " thread(s))"
                                                               : ")")
                 : in_place ? std::string(" (no transfers)") : " (" + std::string(to_string(p.transfer)) + " transfers)")
      << "\n";
    s << "  tiles           " << p.tile_m << " x " << p.tile_n << " x " << p.tile_k << "  -> " << p.tiles_m << " x "
      << p.tiles_n << " x " << p.tiles_k << " tiles, " << p.units << " work units, " << p.steps << " kernel calls\n";
    if (!p.tile_choice.empty()) s << "  tile choice     " << p.tile_choice << "\n";
    if (p.batch > 0)
        s << "  batch           " << p.batch << " products in " << p.units << " groups of up to " << p.batch_group
          << " (one batched kernel call each)\n";
    if (in_place)
        s << "  device buffers  none: the kernels read A and B and write C where they lie in host memory\n";
    else
        s << "  device buffers  A " << p.a_slots << " x " << format_bytes(p.a_slot_bytes) << ", B " << p.b_slots << " x "
      << format_bytes(p.b_slot_bytes) << ", C " << p.c_slots << " x " << format_bytes(p.c_slot_bytes)
      << (p.cache ? "  (tile cache: " + std::to_string(p.cache_slots_a) + " spare A and " + std::to_string(p.cache_slots_b) + " spare B slots, LRU)"
                  : std::string(p.reuse_a ? "  (A panel reused)" : "") + (p.reuse_b ? "  (B panel reused)" : ""))
      << "\n";
    if (!direct)
        s << "  engine          "
          << (p.engine == gemm_engine::tasks
                  ? (in_place ? "tasks (one per C tile, its k-steps in order, on the host operands where they lie)"
                              : "tasks (one per C tile, its k-steps in order, in the strategy's order; an LRU tile store of "
                                "A, B and C slots filled to the budget: tiles the next tasks read stay)")
                  : (in_place ? "pipeline (work units on the host operands where they lie)"
                              : "pipeline (work units through A, B and C buffers)"))
          << "\n";
    if (p.devices > 1 && !direct)
        s << "  devices         " << p.devices << (p.static_assignment ? " (row panels dealt round-robin)" : " (shared queue)") << "\n";
    if (!p.device_kernels.empty()) {
        s << "  device kernels ";
        for (std::size_t i = 0; i < p.device_kernels.size(); ++i) s << " " << i << ": " << to_string(p.device_kernels[i]);
        s << "\n";
    }
    if (!p.choice.empty()) s << p.choice;
    if (p.k_block)
        s << "  k-order         k-blocks of " << p.k_block << " added in order (bitwise reproducible)"
          << (p.tile_k_rounded ? "; the requested tile-k was rounded up to a multiple" : "")
          << (p.kernel == gemm_kernel::tiled ? "; the tiled kernel, whose element order does not depend on the tile"
                                             : "")
          << "\n";
    if (p.cache && p.engine == gemm_engine::pipeline)
        s << "  note            with the cache, bytes h2d are an upper bound (hits are not predicted)\n";
    if (p.engine == gemm_engine::tasks && p.devices > 1 && !in_place && !direct)
        s << "  note            bytes h2d are the model's replay on identical devices: which device reads a tile "
             "again depends on which takes which task\n";
    s << "  peak memory     " << format_bytes(p.peak_device_bytes) << " of a " << format_bytes(p.budget) << " budget\n";
    s << "  bytes h2d       " << format_bytes(p.bytes_h2d) << " (" << p.bytes_h2d << ")\n";
    s << "  bytes d2h       " << format_bytes(p.bytes_d2h) << " (" << p.bytes_d2h << ")\n";
    s << "  bytes packed    " << format_bytes(p.bytes_packed) << " (" << p.bytes_packed << ")\n";
    if (direct)
        std::snprintf(buf, sizeof buf,
                      "  rates           %.1f GFLOP/s on the host, %.2f us fixed per call (%s)\n"
                      "  predicted       %.6f s; bound by %s\n",
                      p.rates.flops * 1e-9, p.rates.op_overhead * 1e6, p.rates.measured ? "measured" : "declared",
                      p.predicted_seconds, p.bound.c_str());
    else
        std::snprintf(buf, sizeof buf,
                      "  rates           h2d %.2f GB/s, d2h %.2f GB/s, %.1f GFLOP/s (%s)\n"
                      "  predicted       %.4f s: compute %.4f s, copies %.4f s; bound by %s\n",
                      p.rates.h2d * 1e-9, p.rates.d2h * 1e-9, p.rates.flops * 1e-9, p.rates.measured ? "measured" : "declared",
                      p.predicted_seconds, p.predicted_compute_seconds, p.predicted_copy_seconds, p.bound.c_str());
    s << buf;
    return s.str();
}

device_rates parse_rates(std::string_view text, device_rates base) {
    std::string t(text);
    std::size_t start = 0;
    while (start < t.size()) {
        std::size_t comma = t.find(',', start);
        if (comma == std::string::npos) comma = t.size();
        const std::string item = t.substr(start, comma - start);
        start = comma + 1;
        const auto eq = item.find('=');
        if (eq == std::string::npos) throw invalid_argument("bad rate '" + item + "' (expected name=value)");
        const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        const std::string unit = end ? std::string(end) : "";
        if (end == value.c_str() || !(v > 0) || !std::isfinite(v))
            throw invalid_argument("bad rate '" + item + "': not a positive finite number");
        if (name == "h2d" || name == "d2h") {
            double scale = 1;
            if (unit == "GB/s") scale = 1e9;
            else if (unit == "MB/s") scale = 1e6;
            else if (!unit.empty() && unit != "B/s") throw invalid_argument("bad rate '" + item + "': unit must be GB/s, MB/s or B/s");
            (name == "h2d" ? base.h2d : base.d2h) = v * scale;
        } else if (name == "gflops") {
            if (!unit.empty()) throw invalid_argument("bad rate '" + item + "': gflops takes a plain number");
            base.flops = v * 1e9;
        } else if (name == "overhead") {
            double scale = 1;
            if (unit == "us") scale = 1e-6;
            else if (unit == "ms") scale = 1e-3;
            else if (!unit.empty() && unit != "s") throw invalid_argument("bad rate '" + item + "': unit must be s, ms or us");
            base.op_overhead = v * scale;
        } else {
            throw invalid_argument("bad rate '" + item + "': unknown name '" + name + "' (h2d, d2h, gflops, overhead)");
        }
    }
    base.measured = false;
    return base;
}

}  // namespace tilestream
