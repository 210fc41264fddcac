// Planning a Level 3 call: tile sizes (and TRSM's order) chosen by the cost model among
// candidates, the routine's tasks built for them, and the plan explained.
#include "core/engine/schedule_model.hpp"
#include "core/routines/routines.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

namespace tilestream {

namespace detail::routines {

std::string staged_tiles_line(const device_rates& r, std::string_view tiles) {
    if (r.staged_flops <= 0) return {};
    char line[256];
    std::snprintf(line, sizeof line,
                  "  staged tiles    %.*s through host memory to the host's LAPACK at %.1f GFLOP/s (half the "
                  "host's measured GEMM rate)\n",
                  int(tiles.size()), tiles.data(), r.staged_flops * 1e-9);
    return line;
}

std::string kernels_text(gemm_kernel kernel, const std::vector<gemm_kernel>& gemm_kernels) {
    if (gemm_kernels.empty()) return "kernel " + std::string(to_string(kernel));
    std::vector<std::string_view> names;
    for (gemm_kernel k : gemm_kernels)
        if (std::find(names.begin(), names.end(), to_string(k)) == names.end()) names.push_back(to_string(k));
    std::ostringstream o;
    o << "kernel auto: GEMM tiles ";
    for (std::size_t i = 0; i < names.size(); ++i) o << (i ? "/" : "") << names[i];
    o << (names.size() > 1 ? " (by device)" : "") << ", the other tiles " << to_string(kernel);
    return o.str();
}

std::string rates_line(const device_rates& r, bool blocked) {
    char line[256];
    std::snprintf(line, sizeof line, "  rates           h2d %.2f GB/s, d2h %.2f GB/s, %.1f GFLOP/s", r.h2d * 1e-9, r.d2h * 1e-9,
                  r.flops * 1e-9);
    std::string out = line;
    if (r.diagonal_flops > 0) {
        std::snprintf(line, sizeof line, " (GEMM tiles), %.1f GFLOP/s (the other tiles: the vendor kernel)", r.diagonal_flops * 1e-9);
        out += line;
    }
    out += r.measured ? " (measured)\n" : " (default)\n";
    std::string kinds;
    for (std::size_t k = 0; k < r.tile_rates.size(); ++k) {
        const tile_rate& t = r.tile_rates[k];
        if (t.flops <= 0) continue;
        std::snprintf(line, sizeof line, "%s%s %.1f GFLOP/s + %.3f ms a call", kinds.empty() ? "" : ", ",
                      std::string(to_string(tile_kind(k))).c_str(), t.flops * 1e-9, t.call_seconds * 1e3);
        kinds += line;
    }
    if (!kinds.empty()) {
        out += "  tile kinds      ";
        out += kinds;
        out += r.measured ? " (measured)\n" : " (declared)\n";
    }
    if (blocked && r.diagonal_block > 0) {
        std::snprintf(line, sizeof line,
                      "  diagonal tiles  trsm, trmm, symm and hemm tiles wider than %lld in diagonal blocks of %lld on vendor, "
                      "GEMMs on the GEMM tiles' kernel between them\n",
                      static_cast<long long>(r.diagonal_block), static_cast<long long>(r.diagonal_block));
        out += line;
    }
    return out;
}

namespace {

engine::task_graph build_routine(const blas3_problem& p, const build_settings& s) {
    switch (p.routine) {
        case blas3_routine::trsm: return build_trsm(p, s);
        case blas3_routine::trmm: return build_trmm(p, s);
        case blas3_routine::syrk:
        case blas3_routine::herk: return build_syrk(p, s);
        case blas3_routine::syr2k:
        case blas3_routine::her2k: return build_syr2k(p, s);
        case blas3_routine::symm:
        case blas3_routine::hemm: return build_symm(p, s);
        case blas3_routine::potrf: return build_potrf(p, s);
    }
    throw invalid_argument("blas3: unknown routine");
}

}  // namespace

engine::task_graph build_tasks(const blas3_problem& p, const build_settings& s) {
    engine::task_graph g = build_routine(p, s);
    if (s.whole_diagonal_tiles && !s.in_place) engine::write_regions_whole(g, s.devices == 1);
    return g;
}

}  // namespace detail::routines

namespace {

using detail::engine::model_result;
using detail::engine::model_run;
using detail::engine::model_settings;
using detail::engine::task_graph;
using detail::routines::build_settings;

/// Steps a plan may have: more (tiny tiles on a large problem) is refused, naming the tiles.
constexpr std::size_t max_plan_steps = std::size_t(1) << 20;

bool rank_k(blas3_routine r) {
    return r == blas3_routine::syrk || r == blas3_routine::herk || r == blas3_routine::syr2k || r == blas3_routine::her2k;
}

/// The triangular/symmetric dimension and the other one of B or C (syrk family: n and k).
std::pair<index_t, index_t> dims(const blas3_problem& p) {
    if (rank_k(p.routine) || p.routine == blas3_routine::potrf) return {p.n, p.k};
    const bool left = p.flags.side == side::left;
    return {left ? p.m : p.n, left ? p.n : p.m};
}

struct candidate {
    build_settings settings;
    std::shared_ptr<const task_graph> graph;
    model_result model;
    int slots = 0;
    std::size_t slot_bytes = 0;
};

index_t round_up(index_t v, index_t m) { return (v + m - 1) / m * m; }

/// Evaluates one tiling and order; nullopt when it does not fit the budget or makes too many steps.
std::optional<candidate> evaluate(const blas3_problem& p, const build_settings& s, std::size_t budget,
                                  const device_rates& rates, const blas3_options& opt) {
    candidate c;
    c.settings = s;
    // Cheap size checks before building anything.
    const auto [tri, other] = dims(p);
    const double nt = std::ceil(double(tri) / double(s.tile)), nf = std::ceil(double(std::max<index_t>(other, 1)) / double(rank_k(p.routine) ? s.tile_k : s.tile_free));
    const double steps_estimate = p.routine == blas3_routine::syr2k || p.routine == blas3_routine::her2k
                                      ? nt * nt * nf
                                      : p.routine == blas3_routine::potrf ? nt * nt * nt / 6 + nt * nt
                                      : (rank_k(p.routine) ? nt * nt * nf / 2 : nt * nt * nf);
    if (steps_estimate > double(max_plan_steps)) return std::nullopt;
    if (!opt.in_place) {
        // The largest tile must fit three times (the output and a step's two inputs).
        const index_t t = std::min(s.tile, std::max<index_t>(tri, 1));
        const index_t second = rank_k(p.routine) ? std::min(s.tile_k, std::max<index_t>(other, 1))
                                                 : std::min(s.tile_free, std::max<index_t>(other, 1));
        const std::size_t largest = std::size_t(t) * std::size_t(std::max(t, second)) * size_of(p.type);
        if (budget / std::max<std::size_t>(largest, 1) < 3) return std::nullopt;
    }
    auto g = std::make_shared<task_graph>(detail::routines::build_tasks(p, s));
    if (g->steps > max_plan_steps) return std::nullopt;
    model_settings m;
    m.rates = rates;
    m.devices = std::max(1, opt.working_devices > 0 ? std::min(opt.working_devices, opt.devices) : opt.devices);
    m.in_place = opt.in_place;
    if (!opt.in_place) {
        c.slot_bytes = std::max<std::size_t>(g->max_tile_bytes(), 1);
        const std::size_t fit = budget / c.slot_bytes;
        // Each task holds its output and the two inputs of a step.
        if (fit < 3) return std::nullopt;
        c.slots = int(std::min<std::size_t>({fit, std::size_t(std::max(g->tiles, 3)), 4096}));
        m.slots = c.slots;
    }
    c.model = model_run(*g, m);
    c.graph = std::move(g);
    return c;
}

bool better(const candidate& a, const candidate& b) {
    return detail::engine::better_plan(a.model, a.graph->steps, b.model, b.graph->steps);
}

}  // namespace

blas3_plan plan_blas3(const blas3_problem& p, std::size_t budget, const device_rates& rates, const blas3_options& opt) {
    blas3_plan plan;
    plan.problem = p;
    plan.kernel = opt.reproducible && opt.kernel == gemm_kernel::vendor ? gemm_kernel::tiled : opt.kernel;
    if (!opt.reproducible) plan.gemm_kernels = opt.gemm_kernels;
    plan.math = opt.math;
    plan.in_place = opt.in_place;
    plan.reproducible = opt.reproducible;
    plan.devices = std::max(1, opt.devices);
    plan.budget = budget;
    plan.rates = rates;
    if (opt.tile < 0 || opt.tile_free < 0 || opt.tile_k < 0)
        throw invalid_argument("blas3: tile sizes must not be negative");
    if (p.quick_return) {
        plan.graph = std::make_shared<task_graph>();
        plan.bound = "nothing to do";
        return plan;
    }
    // Named copies, not a structured binding: the lambda below captures them (clang 14, which the
    // fuzz build uses, cannot capture structured bindings).
    const auto dims_p = dims(p);
    const index_t tri = dims_p.first, other = dims_p.second;
    const bool rk = rank_k(p.routine);
    const index_t kb = reproducible_k_block(p.type);
    build_settings base;
    base.kernel = plan.kernel;
    base.math = opt.math;
    base.in_place = opt.in_place;
    base.whole_diagonal_tiles = opt.whole_diagonal_tiles;
    base.devices = std::max(1, opt.devices);
    // Reproducible: the summed dimension goes in k-blocks, whatever the budget or devices; the
    // SYRK family's C tiles too (a diagonal tile's elements are computed by its rank-k kernel,
    // the others by GEMM tiles: the tiling must not move an element from one to the other).
    const bool fixed_tile = opt.reproducible;
    const bool fixed_k = opt.reproducible && rk;

    std::vector<build_settings> tilings;
    const auto add = [&](index_t tile, index_t tile_free, index_t tile_k) {
        build_settings s = base;
        s.tile = std::max<index_t>(1, std::min(fixed_tile ? kb : (opt.tile ? opt.tile : tile), std::max<index_t>(tri, 1)));
        s.tile_free = std::max<index_t>(1, std::min(opt.tile_free ? opt.tile_free : tile_free, std::max<index_t>(rk ? tri : other, 1)));
        s.tile_k = std::max<index_t>(1, std::min(fixed_k ? kb : (opt.tile_k ? opt.tile_k : tile_k), std::max<index_t>(rk ? other : 1, 1)));
        if (rk) s.tile_free = s.tile;
        if (p.routine == blas3_routine::potrf) s.tile_free = s.tile_k = s.tile;  // square tiles of A
        for (const build_settings& t : tilings)
            if (t.tile == s.tile && t.tile_free == s.tile_free && t.tile_k == s.tile_k) return;
        tilings.push_back(s);
    };
    // Diagonal blocks far slower than the GEMM tiles (those on another kernel: gemm_kernels): in
    // place, tiles move most of the work into GEMM at the price of more calls, which the model
    // weighs (OpenBLAS on its Prescott kernels beside the tiled kernel's AVX-512, Emerald Rapids VM,
    // 2 cores: dpotrf 4096 in one call took 0.80 s, in 384 tiles with GEMM on tiled 0.43 s).
    const bool split_for_gemm =
        opt.in_place && !opt.reproducible && rates.diagonal_flops > 0 && rates.diagonal_flops < 0.8 * rates.flops;
    if (opt.in_place) {
        if (plan.devices == 1) {
            // One call on everything (or the k-blocks of a reproducible plan), and with slow
            // diagonal blocks the tilings that move work to GEMM: all modelled (the time is not
            // monotone in the tile there: large tiles are mostly diagonal work).
            // (At most 32 tiles along the order: potrf's tasks grow with its cube.)
            if (split_for_gemm)
                for (index_t t : {128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096})
                    if (t < tri && t * 32 >= tri) add(t, other, other);
            add(tri, other, other);
        } else {
            // Independent blocks of the free dimension (or tiles of C's triangle) to balance the devices.
            for (int per = 1; per <= 4; ++per) {
                const index_t parts = index_t(plan.devices) * per;
                if (p.routine == blas3_routine::potrf) {
                    // Tiles along the order: the updates of a panel run on the devices in parallel.
                    for (index_t s : {index_t(2), index_t(3), index_t(4), index_t(6), index_t(8), index_t(12), index_t(16)})
                        add(round_up(std::max<index_t>(1, (tri + s - 1) / s), 16), 0, 0);
                    break;
                }
                if (rk) {
                    for (index_t s : {index_t(2), index_t(3), index_t(4), index_t(6), index_t(8)})
                        add(round_up(std::max<index_t>(1, (tri + s - 1) / s), 16), 0, other);
                    break;
                }
                add(tri, round_up(std::max<index_t>(1, (other + parts - 1) / parts), 16), other);
                // Few columns to share: split the triangle too (right-looking updates in parallel).
                if (other < 256 * plan.devices) add(round_up(std::max<index_t>(1, (tri + parts - 1) / parts), 16), other, other);
            }
        }
    } else {
        // Square tiles, and for TRSM, TRMM and SYMM/HEMM tiles twice as long along B's (C's) free
        // dimension: half the GEMM calls, each packing less per flop and reading each A tile for
        // twice the columns (on host cores, where packing and copies cost compute time, 1024 x 2048
        // models 2-3% faster than 1024 x 1024 at n = 4096 with a quarter of the operands).
        const bool long_free = !rk && p.routine != blas3_routine::potrf;
        for (index_t t : {16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288,
                          16384, 24576, 32768}) {
            add(t, t, t);
            if (long_free) add(t, 2 * t, t);
        }
    }
    std::vector<blas3_order> orders;
    const bool ordered = p.routine == blas3_routine::trsm || p.routine == blas3_routine::potrf;
    if (ordered && opt.order == blas3_order::automatic)
        orders = {blas3_order::left_looking, blas3_order::right_looking};
    else if (ordered)
        orders = {opt.order};
    else
        orders = {blas3_order::left_looking};

    std::optional<candidate> best;
    std::map<blas3_order, candidate> best_by_order;
    std::size_t smallest_need = 0;
    // Out of core, each order's tilings are tried from the largest tile down, and the descent stops
    // once two smaller tiles in a row model no better than the best so far: smaller tiles only add
    // tasks from there, and every candidate costs a task graph and its simulation (all 21 sizes of
    // both orders took 0.8 s per trsm call at n = 2048 c64, four times the solve itself).
    const bool descend = !opt.in_place;
    plan.tilings_possible = int(tilings.size() * orders.size());
    for (blas3_order o : orders) {
        int worse_in_a_row = 0;
        // A tile size counts as no better when it fits and none of its shapes beat the best so far.
        bool size_improved = false, size_modelled = false;
        for (std::size_t i = 0; i < tilings.size(); ++i) {
            build_settings s = tilings[descend ? tilings.size() - 1 - i : i];
            const std::size_t next = descend ? tilings.size() - 2 - i : i + 1;
            const bool last_of_size = i + 1 == tilings.size() || tilings[next].tile != s.tile;
            s.order = o;
            std::optional<candidate> c = evaluate(p, s, budget, rates, opt);
            if (c) {
                ++plan.tilings_modelled;
                auto it = best_by_order.find(o);
                const bool improved = it == best_by_order.end() || better(*c, it->second);
                if (improved) best_by_order[o] = *c;
                if (!best || better(*c, *best)) best = std::move(c);
                size_improved = size_improved || improved;
                size_modelled = true;
            } else if (!opt.in_place) {
                // What three tiles of this size would need (for the error message).
                const std::size_t es = size_of(p.type);
                const std::size_t need = 3 * std::size_t(s.tile) * std::size_t(std::max(s.tile, rk ? s.tile_k : s.tile_free)) * es;
                if (smallest_need == 0 || need < smallest_need) smallest_need = need;
            }
            if (!last_of_size) continue;
            if (size_improved) worse_in_a_row = 0;
            else if (descend && size_modelled && ++worse_in_a_row == 2) break;
            size_improved = size_modelled = false;
        }
    }
    if (!best) {
        if (opt.in_place)
            throw invalid_argument(p.describe() + ": every tiling makes more than " + std::to_string(max_plan_steps) +
                                   " tile operations (tiles too small for the problem)");
        throw out_of_budget(p.describe() + ": does not fit a budget of " + format_bytes(budget) +
                            (smallest_need ? " (three tiles need at least " + format_bytes(smallest_need) + ")" : "") +
                            (opt.tile || opt.tile_free || opt.tile_k ? ", or the tiles given make too many operations" : ""));
    }
    const candidate& c = *best;
    const task_graph& g = *c.graph;
    plan.graph = c.graph;
    plan.order = c.settings.order;
    plan.tile = c.settings.tile;
    plan.tile_free = c.settings.tile_free;
    plan.tile_k = c.settings.tile_k;
    plan.tasks = g.tasks.size();
    plan.steps = g.steps;
    plan.dependencies = g.edges;
    std::map<tile_kind, std::size_t> counts;
    for (const auto& t : g.tasks)
        for (const auto& s : t.steps) ++counts[s.op.kind];
    for (const auto& [k, n] : counts) plan.kernel_counts.emplace_back(k, n);
    // A plan without GEMM tiles names no GEMM kernels, unless its steps run in blocks with GEMMs
    // between them (device_rates::diagonal_block).
    plan.blocked_diagonal = detail::engine::splits_diagonal_tiles(g, rates);
    if (!counts.count(tile_kind::gemm) && !plan.blocked_diagonal) plan.gemm_kernels.clear();
    plan.slots = c.slots;
    plan.slot_bytes = c.slot_bytes;
    plan.peak_device_bytes = std::size_t(c.slots) * c.slot_bytes;
    plan.bytes_h2d = c.model.bytes_h2d;
    plan.bytes_d2h = c.model.bytes_d2h;
    plan.predicted_seconds = c.model.seconds;
    plan.predicted_compute_seconds = c.model.compute_seconds;
    plan.predicted_h2d_seconds = c.model.h2d_seconds;
    plan.predicted_d2h_seconds = c.model.d2h_seconds;
    plan.predicted_critical_path_seconds = c.model.critical_path_seconds;
    plan.bound = c.model.bound;
    if ((p.routine == blas3_routine::trsm || p.routine == blas3_routine::potrf) && p.reads_ab) {
        // The other order at the chosen tiles, so explain can compare their traffic.
        for (blas3_order o : {blas3_order::left_looking, blas3_order::right_looking}) {
            build_settings s = c.settings;
            s.order = o;
            std::optional<candidate> alt = o == c.settings.order ? std::optional<candidate>(c) : evaluate(p, s, budget, rates, opt);
            if (!alt) continue;
            plan.alternatives.push_back({o, alt->settings.tile, alt->model.bytes_h2d, alt->model.bytes_d2h, alt->model.seconds});
        }
    }
    return plan;
}

std::string explain(const blas3_plan& p) {
    std::ostringstream o;
    const blas3_problem& q = p.problem;
    o << "plan: " << q.describe() << ", " << detail::routines::kernels_text(p.kernel, p.gemm_kernels) << "\n";
    if (q.quick_return) {
        o << "  nothing to do (BLAS's quick return: no element is read or written)\n";
        return o.str();
    }
    const bool rk = rank_k(q.routine);
    char line[256];
    if (q.routine == blas3_routine::trsm)
        o << "  order           " << to_string(p.order) << "\n";
    else if (q.routine == blas3_routine::potrf)
        o << "  order           " << to_string(p.order)
          << " (potrf and trsm tiles on the critical path first: the look-ahead)\n";
    else if (q.routine == blas3_routine::trmm)
        o << "  order           one task per tile of B, a chain per block " << (q.flags.side == side::left ? "column" : "row")
          << " (each tile written after the tasks reading its old value)\n";
    else
        o << "  order           one task per tile of C, independent\n";
    if (rk)
        o << "  tiles           C " << p.tile << " x " << p.tile << ", k " << p.tile_k << "\n";
    else
        o << "  tiles           " << p.tile << " along A's order, " << p.tile_free << " along the other dimension\n";
    if (!p.in_place && p.tilings_possible > 0)
        o << "  tilings         " << p.tilings_modelled << " of " << p.tilings_possible
          << " modelled (tile sizes tried from the largest down, both orders where they differ)\n";
    o << "  tasks           " << p.tasks << " tasks, " << p.steps << " tile operations (";
    for (std::size_t i = 0; i < p.kernel_counts.size(); ++i)
        o << (i ? ", " : "") << to_string(p.kernel_counts[i].first) << " " << p.kernel_counts[i].second;
    o << "), " << p.dependencies << " dependencies\n";
    if (p.reproducible)
        o << "  reproducible    summed dimension in k-blocks of " << reproducible_k_block(q.type)
          << "; diagonal blocks on the reference kernel, GEMM tiles on '" << to_string(p.kernel) << "'\n";
    if (p.in_place) {
        o << "  memory          in place: the devices compute on the operands where they lie (no copies)\n";
    } else {
        o << "  device buffers  " << p.slots << " tile slots of " << format_bytes(p.slot_bytes) << " per device (LRU tile cache)\n";
        o << "  peak memory     " << format_bytes(p.peak_device_bytes) << " of a " << format_bytes(p.budget) << " budget\n";
    }
    o << "  bytes h2d       " << format_bytes(p.bytes_h2d) << " (" << p.bytes_h2d << ")\n";
    o << "  bytes d2h       " << format_bytes(p.bytes_d2h) << " (" << p.bytes_d2h << ")\n";
    for (const blas3_alternative& a : p.alternatives) {
        std::snprintf(line, sizeof line, "  %-15s h2d %s, d2h %s, predicted %.4f s%s\n", std::string(to_string(a.order)).c_str(),
                      format_bytes(a.bytes_h2d).c_str(), format_bytes(a.bytes_d2h).c_str(), a.predicted_seconds,
                      a.order == p.order ? " (chosen)" : "");
        o << line;
    }
    o << detail::routines::rates_line(p.rates, p.blocked_diagonal);
    if (q.routine == blas3_routine::potrf) o << detail::routines::staged_tiles_line(p.rates, "potrf tiles");
    const auto merges = [&] {
        if (p.rates.host_merge <= 0 || !p.graph) return false;
        for (const detail::engine::tile_task& t : p.graph->tasks)
            for (const detail::engine::task_output& out : t.outputs)
                if (out.region != detail::engine::tile_region::full) return true;
        return false;
    };
    if (merges()) {
        char line[200];
        std::snprintf(line, sizeof line,
                      "  triangle merges diagonal tiles not read go back by their triangle, merged on the host at %.1f GB/s "
                      "(measured)\n",
                      p.rates.host_merge * 1e-9);
        o << line;
    }
    std::snprintf(line, sizeof line,
                  "  predicted       %.4f s on %d device(s): compute %.4f s, copies h2d %.4f s d2h %.4f s, "
                  "critical path %.4f s; bound by %s\n",
                  p.predicted_seconds, p.devices, p.predicted_compute_seconds, p.predicted_h2d_seconds, p.predicted_d2h_seconds,
                  p.predicted_critical_path_seconds, p.bound.c_str());
    o << line;
    return o.str();
}

}  // namespace tilestream
