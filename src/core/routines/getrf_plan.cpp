// LU with partial pivoting as tile tasks: A cut into block columns (tiles as tall as A, `tile`
// wide), so a panel's pivot search sees its whole column; the pivots are a second operand (one row
// of A's type, a tile per panel) that the row swaps of the other columns read.
//
// Panel k (rows r0 = k*nb on, kk = its pivot count) is LAPACK's ?getrf on the block column's rows
// below r0 (the getrf tile kind: vendor LAPACK, or the reference loop). Block column j right of
// it is updated by three steps: its rows from r0 interchanged by panel k's pivots (laswp), its
// block U_kj = L_kk^-1 A_kj (trsm, unit lower), and A_j(r0+kk:) -= L_k(r0+kk:) U_kj (gemm).
// Right-looking: a task per panel and per (panel, column) update, so columns update in parallel and
// the executor's critical-path priority takes the next panel's column first (look-ahead).
// Left-looking: one task per block column, its updates from every panel left of it in order, then
// its own panel (each column loaded and written once). Last, the L part of each panel column gets
// the later panels' interchanges (one task per column). Every column sees the same steps in the
// same order in both, so their results are bitwise equal.
#include "core/engine/schedule_model.hpp"
#include "core/routines/routines.hpp"

#include <tilestream/error.hpp>
#include <tilestream/lu.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

namespace tilestream {

namespace detail::routines {

inline constexpr int operand_pivots = 1;

engine::task_graph build_getrf(const getrf_problem& p, index_t nb, lu_order order, gemm_kernel kernel, math_mode math) {
    using engine::make_step;
    using engine::scalar_role;
    engine::task_graph g;
    g.type = p.type;
    const index_t mn = std::min(p.m, p.n);
    g.add_operand(p.m, p.n, std::max<index_t>(p.m, 1), nb);
    g.add_operand(1, mn, 1, nb);
    const index_t nt = (p.n + nb - 1) / nb, kt = (mn + nb - 1) / nb;
    const auto col = [&](index_t j) { return g.tile(operand_a, 0, j); };
    const auto piv = [&](index_t k) { return g.tile(operand_pivots, 0, k); };
    const auto width = [&](index_t j) { return std::min(nb, p.n - j * nb); };
    const auto pivots = [&](index_t k) { return std::min(p.m - k * nb, width(k)); };
    build_settings s;
    s.kernel = kernel;
    s.math = math;
    const auto sized = [](engine::task_step st, index_t m, index_t n, index_t k) {
        st.op.m = m;
        st.op.n = n;
        st.op.k = k;
        return st;
    };
    const auto panel = [&](index_t k) {
        const index_t r0 = k * nb;
        engine::task_step st = make_step(g, base_op(tile_kind::getrf, s), -1, piv(k), col(k), scalar_role::one, scalar_role::one);
        st.c_at = {r0, 0};
        return sized(st, p.m - r0, width(k), 0);
    };
    const auto swap = [&](index_t k, index_t j) {
        const index_t r0 = k * nb;
        engine::task_step st = make_step(g, base_op(tile_kind::laswp, s), piv(k), -1, col(j), scalar_role::one, scalar_role::one);
        st.c_at = {r0, 0};
        return sized(st, p.m - r0, width(j), pivots(k));
    };
    // Column j's update by panel k: interchanges, U_kj, the rows below.
    const auto update = [&](index_t k, index_t j, std::vector<engine::task_step>& steps) {
        const index_t r0 = k * nb, kk = pivots(k);
        steps.push_back(swap(k, j));
        tile_op t = base_op(tile_kind::trsm, s);
        t.side = side::left;
        t.uplo = uplo::lower;
        t.diag = diag::unit;
        engine::task_step st = make_step(g, t, col(k), -1, col(j), scalar_role::one, scalar_role::zero);
        st.a_at = {r0, 0};
        st.c_at = {r0, 0};
        steps.push_back(sized(st, kk, width(j), 0));
        const index_t below = p.m - r0 - kk;
        if (below > 0) {
            engine::task_step u = make_step(g, base_op(tile_kind::gemm, s), col(k), col(j), col(j), scalar_role::minus_one,
                                            scalar_role::one);
            u.a_at = {r0 + kk, 0};
            u.b_at = {r0, 0};
            u.c_at = {r0 + kk, 0};
            steps.push_back(sized(u, below, width(j), kk));
        }
    };
    const auto output = [](int tile, bool load) {
        engine::task_output o;
        o.tile = tile;
        o.load = load;
        return o;
    };
    if (order == lu_order::left_looking) {
        for (index_t j = 0; j < nt; ++j) {
            engine::tile_task t;
            t.outputs.push_back(output(col(j), true));
            for (index_t k = 0; k < std::min(j, kt); ++k) update(k, j, t.steps);
            if (j < kt) {
                t.outputs.push_back(output(piv(j), false));
                t.steps.push_back(panel(j));
            }
            g.tasks.push_back(std::move(t));
        }
    } else {
        for (index_t k = 0; k < kt; ++k) {
            engine::tile_task t;
            t.outputs.push_back(output(col(k), true));
            t.outputs.push_back(output(piv(k), false));
            t.steps.push_back(panel(k));
            g.tasks.push_back(std::move(t));
            for (index_t j = k + 1; j < nt; ++j) {
                engine::tile_task u;
                u.outputs.push_back(output(col(j), true));
                update(k, j, u.steps);
                g.tasks.push_back(std::move(u));
            }
        }
    }
    // The L part of panel column j gets the interchanges of the panels after it (LAPACK applies
    // them as it goes; nothing reads these rows of L in between, so once at the end).
    for (index_t j = 0; j + 1 < kt; ++j) {
        engine::tile_task t;
        t.outputs.push_back(output(col(j), true));
        for (index_t k = j + 1; k < kt; ++k) t.steps.push_back(swap(k, j));
        g.tasks.push_back(std::move(t));
    }
    g.finish();
    return g;
}

}  // namespace detail::routines

std::string_view to_string(lu_order o) noexcept {
    switch (o) {
        case lu_order::automatic: return "auto";
        case lu_order::left_looking: return "left-looking";
        case lu_order::right_looking: return "right-looking";
    }
    return "?";
}

lu_order parse_lu_order(std::string_view s) {
    std::string v(s);
    for (char& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (v == "auto" || v == "automatic") return lu_order::automatic;
    if (v == "left" || v == "left-looking") return lu_order::left_looking;
    if (v == "right" || v == "right-looking") return lu_order::right_looking;
    throw invalid_argument("order must be auto, left or right, got '" + std::string(s) + "'");
}

double getrf_problem::flops() const {
    const double big = double(std::max(m, n)), small = double(std::min(m, n));
    const double f = big * small * small - small * small * small / 3.0;
    return is_complex(type) ? 4.0 * f : f;
}

std::string getrf_problem::describe() const {
    std::ostringstream o;
    o << "getrf: A " << m << "x" << n << " " << (lay == layout::row_major ? "row-major" : "col-major") << ", "
      << to_string(type);
    return o.str();
}

namespace {

using detail::engine::model_result;
using detail::engine::model_run;
using detail::engine::model_settings;
using detail::engine::task_graph;

constexpr std::size_t max_plan_steps = std::size_t(1) << 20;

struct candidate {
    index_t tile = 0;
    lu_order order = lu_order::right_looking;
    std::shared_ptr<const task_graph> graph;
    model_result model;
    int slots = 0;
    std::size_t slot_bytes = 0;
};

std::optional<candidate> evaluate(const getrf_problem& p, index_t nb, lu_order order, gemm_kernel kernel, std::size_t budget,
                                  const device_rates& rates, const getrf_options& opt) {
    const double nt = std::ceil(double(p.n) / double(nb)), kt = std::ceil(double(std::min(p.m, p.n)) / double(nb));
    if (3.0 * nt * kt > double(max_plan_steps)) return std::nullopt;
    const std::size_t column = std::size_t(p.m) * std::size_t(std::min(nb, p.n)) * size_of(p.type);
    // A task holds its block column and the pivots it writes, and a step's input: three slots.
    if (!opt.in_place && budget / std::max<std::size_t>(column, 1) < 3) return std::nullopt;
    candidate c;
    c.tile = nb;
    c.order = order;
    auto g = std::make_shared<task_graph>(detail::routines::build_getrf(p, nb, order, kernel, opt.math));
    if (g->steps > max_plan_steps) return std::nullopt;
    model_settings m;
    m.rates = rates;
    m.devices = std::max(1, opt.working_devices > 0 ? std::min(opt.working_devices, opt.devices) : opt.devices);
    m.in_place = opt.in_place;
    if (!opt.in_place) {
        c.slot_bytes = std::max<std::size_t>(g->max_tile_bytes(), 1);
        const std::size_t fit = budget / c.slot_bytes;
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

getrf_plan plan_getrf(const getrf_problem& p, std::size_t budget, const device_rates& rates, const getrf_options& opt) {
    getrf_plan plan;
    plan.problem = p;
    plan.kernel = opt.reproducible && opt.kernel == gemm_kernel::vendor ? gemm_kernel::tiled : opt.kernel;
    if (!opt.reproducible) plan.gemm_kernels = opt.gemm_kernels;
    plan.math = opt.math;
    plan.in_place = opt.in_place;
    plan.reproducible = opt.reproducible;
    plan.devices = std::max(1, opt.devices);
    plan.budget = budget;
    plan.rates = rates;
    if (opt.tile < 0) throw invalid_argument("getrf: the tile width must not be negative");
    if (p.quick_return()) {
        plan.graph = std::make_shared<task_graph>();
        plan.bound = "nothing to do";
        return plan;
    }
    // Pivots travel as values of A's type: exact below 2^24 rows in single precision.
    if (p.m > (index_t(1) << 24))
        throw invalid_argument(p.describe() + ": more than 2^24 rows (the pivots are carried as " +
                               std::string(to_string(p.type)) + " values)");
    std::vector<index_t> tiles;
    const auto add = [&](index_t t) {
        t = std::max<index_t>(1, std::min(t, p.n));
        if (std::find(tiles.begin(), tiles.end(), t) == tiles.end()) tiles.push_back(t);
    };
    if (opt.reproducible) {
        add(reproducible_k_block(p.type));  // a column's updates add k-blocks in one order everywhere
    } else if (opt.tile > 0) {
        add(opt.tile);
    } else if (opt.in_place && plan.devices == 1) {
        add(p.n);  // one task: LAPACK's own getrf on all of A
        // Unless the panels' kernel is far slower than the GEMM updates' (gemm_kernels): block
        // columns then move most of the work into GEMM, and the model weighs the calls they add.
        if (rates.diagonal_flops > 0 && rates.diagonal_flops < 0.8 * rates.flops)
            for (index_t t : {64, 96, 128, 192, 256, 384, 512}) add(t);
    } else if (opt.in_place) {
        for (index_t t : {32, 64, 96, 128, 192, 256, 384, 512}) add(t);
    } else {
        for (index_t t : {16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096}) add(t);
    }
    // Narrow columns of a wide matrix make tens of thousands of tasks that take long to build and
    // replay; they are tried only when no width of at most 256 block columns fits the budget.
    const auto fits = [&](index_t t) {
        return opt.in_place || budget / std::max<std::size_t>(std::size_t(p.m) * std::size_t(t) * size_of(p.type), 1) >= 3;
    };
    const auto columns = [&](index_t t) { return (p.n + t - 1) / t; };
    // A tall panel: when not even a 16-wide block column fits three times, narrower ones are tried,
    // down to a single column. A panel's pivot search still sees its whole column; the updates
    // run with a thinner inner dimension and each narrower panel reads the columns right of it
    // again, so this is the slow way through, taken only when nothing wider fits. Not for a width
    // the caller fixed (--tile) nor reproducible mode (its width is the k-block).
    const std::size_t one_column = std::max<std::size_t>(std::size_t(p.m) * size_of(p.type), 1);
    const index_t widest_fitting = index_t(std::min<std::size_t>(budget / (3 * one_column), std::size_t(p.n)));
    if (!opt.in_place && !opt.reproducible && opt.tile == 0 && std::none_of(tiles.begin(), tiles.end(), fits))
        for (index_t t = std::min<index_t>(widest_fitting, 15); t >= 1; t /= 2) add(t);
    if (std::any_of(tiles.begin(), tiles.end(), [&](index_t t) { return fits(t) && columns(t) <= 256; }))
        std::erase_if(tiles, [&](index_t t) { return columns(t) > 256; });
    std::vector<lu_order> orders;
    if (opt.order == lu_order::automatic) orders = {lu_order::right_looking, lu_order::left_looking};
    else orders = {opt.order};
    std::optional<candidate> best;
    for (index_t t : tiles)
        for (lu_order o : orders) {
            std::optional<candidate> c = evaluate(p, t, o, plan.kernel, budget, rates, opt);
            if (c && (!best || better(*c, *best))) best = std::move(c);
        }
    if (!best) {
        if (opt.in_place)
            throw invalid_argument(p.describe() + ": every tiling makes more than " + std::to_string(max_plan_steps) +
                                   " tile operations (tiles too small for the problem)");
        const index_t narrowest = opt.reproducible ? reproducible_k_block(p.type) : opt.tile > 0 ? opt.tile : 1;
        const std::size_t need = 3 * std::size_t(p.m) * std::size_t(std::min(narrowest, p.n)) * size_of(p.type);
        const bool narrower_fits = opt.tile > 0 && !opt.reproducible && widest_fitting >= 1;
        throw out_of_budget(p.describe() + ": does not fit a budget of " + format_bytes(budget) +
                            " (three block columns of width " + std::to_string(std::min(narrowest, p.n)) + " need " +
                            format_bytes(need) + ")" +
                            (narrower_fits ? "; block columns of at most " + std::to_string(widest_fitting) +
                                                 " fit (without a tile width the planner narrows them)"
                                           : std::string()));
    }
    const candidate& c = *best;
    const task_graph& g = *c.graph;
    plan.graph = c.graph;
    plan.order = c.order;
    plan.tile = c.tile;
    plan.tasks = g.tasks.size();
    plan.steps = g.steps;
    plan.dependencies = g.edges;
    std::map<tile_kind, std::size_t> counts;
    for (const auto& t : g.tasks)
        for (const auto& s : t.steps) ++counts[s.op.kind];
    for (const auto& [k, n] : counts) plan.kernel_counts.emplace_back(k, n);
    // A plan without GEMM updates names no GEMM kernels, unless its trsm steps run in blocks with
    // GEMMs between them (device_rates::diagonal_block).
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
    for (lu_order o : {lu_order::left_looking, lu_order::right_looking}) {
        std::optional<candidate> alt = o == c.order ? std::optional<candidate>(c) : evaluate(p, c.tile, o, plan.kernel, budget, rates, opt);
        if (alt) plan.alternatives.push_back({o, alt->model.bytes_h2d, alt->model.bytes_d2h, alt->model.seconds});
    }
    return plan;
}

std::string explain(const getrf_plan& p) {
    std::ostringstream o;
    o << "plan: " << p.problem.describe() << ", " << detail::routines::kernels_text(p.kernel, p.gemm_kernels) << "\n";
    if (p.problem.quick_return()) {
        o << "  nothing to do (an empty matrix: info 0, no pivot)\n";
        return o.str();
    }
    char line[256];
    o << "  order           " << to_string(p.order) << "\n";
    o << "  tiles           block columns of " << p.tile << " (as tall as A: each panel's pivot search sees its whole column)\n";
    const std::size_t sixteen_wide = 3 * std::size_t(p.problem.m) * 16 * size_of(p.problem.type);
    if (!p.in_place && p.tile < std::min<index_t>(16, p.problem.n) && sixteen_wide > p.budget)
        o << "                  narrower than 16: three 16-wide block columns need " << format_bytes(sixteen_wide)
          << ", more than the budget (a tall panel)\n";
    o << "  tasks           " << p.tasks << " tasks, " << p.steps << " tile operations (";
    for (std::size_t i = 0; i < p.kernel_counts.size(); ++i)
        o << (i ? ", " : "") << to_string(p.kernel_counts[i].first) << " " << p.kernel_counts[i].second;
    o << "), " << p.dependencies << " dependencies\n";
    if (p.reproducible)
        o << "  reproducible    block columns of the k-block " << reproducible_k_block(p.problem.type)
          << "; panels, swaps and triangular solves on the reference kernel, updates on '" << to_string(p.kernel) << "'\n";
    if (p.in_place) {
        o << "  memory          in place: the devices compute on A where it lies (no copies)\n";
    } else {
        o << "  device buffers  " << p.slots << " tile slots of " << format_bytes(p.slot_bytes) << " per device (LRU tile cache)\n";
        o << "  peak memory     " << format_bytes(p.peak_device_bytes) << " of a " << format_bytes(p.budget) << " budget\n";
    }
    o << "  bytes h2d       " << format_bytes(p.bytes_h2d) << " (" << p.bytes_h2d << ")\n";
    o << "  bytes d2h       " << format_bytes(p.bytes_d2h) << " (" << p.bytes_d2h << ")\n";
    for (const getrf_alternative& a : p.alternatives) {
        std::snprintf(line, sizeof line, "  %-15s h2d %s, d2h %s, predicted %.4f s%s\n", std::string(to_string(a.order)).c_str(),
                      format_bytes(a.bytes_h2d).c_str(), format_bytes(a.bytes_d2h).c_str(), a.predicted_seconds,
                      a.order == p.order ? " (chosen)" : "");
        o << line;
    }
    o << detail::routines::rates_line(p.rates, p.blocked_diagonal);
    o << detail::routines::staged_tiles_line(p.rates, "getrf panels and row interchanges");
    std::snprintf(line, sizeof line,
                  "  predicted       %.4f s on %d device(s): compute %.4f s, copies h2d %.4f s d2h %.4f s, "
                  "critical path %.4f s; bound by %s\n",
                  p.predicted_seconds, p.devices, p.predicted_compute_seconds, p.predicted_h2d_seconds, p.predicted_d2h_seconds,
                  p.predicted_critical_path_seconds, p.bound.c_str());
    o << line;
    return o.str();
}

}  // namespace tilestream
