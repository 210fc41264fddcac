// GEMM as tile tasks without dependencies (see gemm_tasks.hpp).
#include "core/routines/gemm_tasks.hpp"

#include "core/routines/routines.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

namespace tilestream::detail::routines {

using engine::make_step;
using engine::scalar_role;
using engine::task_graph;
using engine::tile_task;

task_graph build_gemm(const gemm_problem& p, const gemm_tiling& t, int devices) {
    task_graph g;
    g.type = p.type;
    const index_t tm = std::max<index_t>(1, t.tile_m), tn = std::max<index_t>(1, t.tile_n);
    // Steps of one k-block in reproducible plans, so the order of k is the plan-independent one.
    const index_t tk = std::max<index_t>(1, t.k_block > 0 ? t.k_block : t.tile_k);
    const bool ta = is_transposed(p.op_a), tb = is_transposed(p.op_b);
    g.add_operand(ta ? p.k : p.m, ta ? p.m : p.k, ta ? tk : tm, ta ? tm : tk);
    g.add_operand(tb ? p.n : p.k, tb ? p.k : p.n, tb ? tn : tk, tb ? tk : tn);
    g.add_operand(p.m, p.n, tm, t.c_panel ? std::max<index_t>(p.n, 1) : tn);
    build_settings s;
    s.kernel = t.kernel;
    s.math = t.math;
    const engine::operand_tiles& c = g.operands[operand_c];
    const index_t kt = p.k > 0 ? (p.k + tk - 1) / tk : 0;
    const engine::operand_tiles& bt_tiles = g.operands[operand_b];
    const index_t n_blocks = tb ? bt_tiles.tiles_r() : bt_tiles.tiles_c();  // B's tiles along op(B)'s columns
    const bool by_columns = t.by_columns && !t.c_panel;
    const index_t outer = by_columns ? c.tiles_c() : c.tiles_r(), inner = by_columns ? c.tiles_r() : c.tiles_c();
    for (index_t xx = 0; xx < outer; ++xx)
        for (index_t yy = 0; yy < inner; ++yy) {
            const index_t x = t.reversed ? outer - 1 - xx : xx, y = t.reversed ? inner - 1 - yy : yy;
            const index_t i = by_columns ? y : x, j = by_columns ? x : y;
            tile_task task;
            if (t.row_panels && devices > 1) task.device = int(i % devices);
            engine::task_output out;
            out.tile = g.tile(operand_c, i, j);
            out.load = p.reads_c;
            task.outputs.push_back(out);
            tile_op op = base_op(tile_kind::gemm, s);
            op.trans_a = p.op_a;
            op.trans_b = p.op_b;
            if (!p.reads_ab || kt == 0) {
                task.steps.push_back(make_step(g, op, -1, -1, out.tile, scalar_role::zero,
                                               p.reads_c ? scalar_role::beta : scalar_role::zero));
            } else if (t.c_panel) {
                // k-steps outer (A's tile loaded once each), B's column tiles inner, each into its part of the panel.
                for (index_t q = 0; q < kt; ++q) {
                    const int at = ta ? g.tile(operand_a, q, i) : g.tile(operand_a, i, q);
                    for (index_t jb = 0; jb < n_blocks; ++jb) {
                        const int bt = tb ? g.tile(operand_b, jb, q) : g.tile(operand_b, q, jb);
                        engine::task_step st = make_step(g, op, at, bt, out.tile, scalar_role::alpha,
                                                         q == 0 ? scalar_role::beta : scalar_role::one);
                        st.op.n = tb ? bt_tiles.extent_r(jb) : bt_tiles.extent_c(jb);
                        st.c_at = {0, jb * tn};
                        task.steps.push_back(st);
                    }
                }
            } else {
                for (index_t q = 0; q < kt; ++q) {
                    const int at = ta ? g.tile(operand_a, q, i) : g.tile(operand_a, i, q);
                    const int bt = tb ? g.tile(operand_b, j, q) : g.tile(operand_b, q, j);
                    task.steps.push_back(make_step(g, op, at, bt, out.tile, scalar_role::alpha,
                                                   q == 0 ? scalar_role::beta : scalar_role::one));
                }
            }
            g.tasks.push_back(std::move(task));
        }
    g.finish();
    // No task waits for another: one priority for all, so devices take them in the order above
    // (a ragged last tile's fewer flops would otherwise send it to the end, away from its panel).
    for (tile_task& task : g.tasks) task.priority = 1;
    return g;
}

gemm_tiling tiling_of(const gemm_plan& plan) {
    const gemm_problem& p = plan.problem;
    gemm_tiling t;
    t.tile_m = plan.tile_m > 0 ? plan.tile_m : std::max<index_t>(p.m, 1);
    t.tile_n = plan.tile_n > 0 ? plan.tile_n : std::max<index_t>(p.n, 1);
    t.tile_k = plan.tile_k > 0 ? plan.tile_k : std::max<index_t>(p.k, 1);
    t.k_block = plan.k_block;
    t.kernel = plan.kernel;
    t.math = plan.math;
    t.transfer = plan.transfer;
    switch (plan.strategy) {
        case gemm_strategy::in_core:
            t.tile_m = std::max<index_t>(p.m, 1);
            t.tile_n = std::max<index_t>(p.n, 1);
            t.tile_k = std::max<index_t>(p.k, 1);
            break;
        case gemm_strategy::b_panel: t.by_columns = true; break;
        case gemm_strategy::a_panel_c_panel: t.c_panel = true; break;
        case gemm_strategy::row_panels:
            t.c_panel = true;
            t.row_panels = true;
            break;
        case gemm_strategy::automatic:
        case gemm_strategy::tiles_3d:
        case gemm_strategy::a_panel:
        case gemm_strategy::c_block:
        case gemm_strategy::zero_copy:
        case gemm_strategy::direct: break;
    }
    return t;
}

gemm_task_plan plan_gemm_tasks(const gemm_problem& p, const gemm_tiling& t, std::size_t budget, bool in_place,
                               const device_rates& rates, int devices) {
    gemm_task_plan plan;
    plan.graph = build_gemm(p, t, devices);
    const task_graph& g = plan.graph;
    engine::model_settings m;
    m.rates = rates;
    m.devices = std::max(devices, 1);
    m.in_place = in_place;
    m.transfer = t.transfer;
    for (const operand_desc& x : {p.a_desc(), p.b_desc(), p.c_desc()}) m.hosts.push_back({x.stored, x.ld});
    if (!in_place && !g.tasks.empty()) {
        const std::size_t a = p.reads_ab ? g.max_tile_bytes(operand_a) : 0;
        const std::size_t b = p.reads_ab ? g.max_tile_bytes(operand_b) : 0;
        const std::size_t c = g.max_tile_bytes(operand_c);
        // k-steps of a task: the tiles of a panel the order reuses.
        const engine::operand_tiles& ka = g.operands[operand_a];
        const index_t steps = is_transposed(p.op_a) ? ka.tiles_r() : ka.tiles_c();
        // A task holds its C tile and one tile each of A and B.
        int n_a = a > 0 ? 1 : 0, n_b = b > 0 ? 1 : 0, n_c = 1;
        const std::size_t least = a + b + c;
        if (budget < least)
            throw out_of_budget("gemm on tasks: a tile each of A (" + format_bytes(a) + "), B (" + format_bytes(b) +
                                ") and C (" + format_bytes(c) + ") need " + format_bytes(least) +
                                ", more than the budget of " + format_bytes(budget));
        std::size_t left = budget - least;
        const auto grow = [&](int& n, std::size_t bytes, index_t up_to) {
            if (bytes == 0) return;
            const std::size_t more = std::min<std::size_t>(left / bytes, std::size_t(std::max<index_t>(up_to - n, 0)));
            n += int(more);
            left -= more * bytes;
        };
        int& reused = t.by_columns ? n_b : n_a;
        int& other = t.by_columns ? n_a : n_b;
        const std::size_t reused_bytes = t.by_columns ? b : a, other_bytes = t.by_columns ? a : b;
        // Never more slots than an operand has tiles (in core: one each).
        const auto tiles = [&](int o) { return g.operands[std::size_t(o)].tiles_r() * g.operands[std::size_t(o)].tiles_c(); };
        const index_t c_tiles = tiles(operand_c), reused_tiles = tiles(t.by_columns ? operand_b : operand_a),
                      other_tiles = tiles(t.by_columns ? operand_a : operand_b);
        // Two of each (one in use, the next loading or writing back), then the reused operand's
        // panel (and one more, for the next panel's first tile), then as many of the other.
        grow(n_c, c, std::min<index_t>(2, c_tiles));
        grow(reused, reused_bytes, std::min<index_t>(2, reused_tiles));
        grow(other, other_bytes, std::min<index_t>(2, other_tiles));
        grow(reused, reused_bytes, std::min<index_t>(steps + 1, reused_tiles));
        grow(other, other_bytes, std::min<index_t>(steps + 1, other_tiles));
        if (t.fill_budget) {
            grow(other, other_bytes, other_tiles);
            grow(reused, reused_bytes, reused_tiles);
        }
        plan.a_slots = {a, n_a};
        plan.b_slots = {b, n_b};
        plan.c_slots = {c, n_c};
        plan.slots = engine::sorted_classes({{a, n_a}, {b, n_b}, {c, n_c}});
        m.slot_classes = plan.slots;
    }
    plan.model = engine::model_run(g, m);
    return plan;
}

gemm_task_plan choose_gemm_tasks(const gemm_problem& p, std::size_t budget, bool in_place, const device_rates& rates,
                                 int devices, const plan_options& base, gemm_tiling* chosen, gemm_strategy* from_strategy) {
    std::optional<gemm_task_plan> best;
    std::string why_not;
    std::vector<gemm_strategy> strategies{gemm_strategy::in_core,  gemm_strategy::tiles_3d, gemm_strategy::a_panel,
                                          gemm_strategy::a_panel_c_panel, gemm_strategy::b_panel, gemm_strategy::c_block};
    if (devices > 1) strategies.push_back(gemm_strategy::row_panels);
    for (gemm_strategy s : strategies) {
        plan_options po = base;
        po.strategy = s;
        po.engine = gemm_engine::pipeline;  // its tiles, ranked here by the task model
        po.devices = devices;
        po.in_place = false;
        gemm_plan plan;
        try {
            plan = plan_gemm(p, budget, rates, po);
        } catch (const out_of_budget& e) {
            why_not = e.what();
            continue;
        }
        gemm_tiling t = tiling_of(plan);
        for (int order = 0; order < (t.c_panel || s == gemm_strategy::in_core ? 1 : 2); ++order) {
            if (order == 1) t.by_columns = !t.by_columns;
            gemm_task_plan c;
            try {
                c = plan_gemm_tasks(p, t, budget, in_place, rates, devices);
            } catch (const out_of_budget& e) {
                why_not = e.what();
                continue;
            }
            if (!best || engine::better_plan(c.model, c.graph.steps, best->model, best->graph.steps)) {
                best = std::move(c);
                if (chosen != nullptr) *chosen = t;
                if (from_strategy != nullptr) *from_strategy = s;
            }
        }
    }
    if (!best) throw out_of_budget("gemm on tasks: no tiling fits a budget of " + format_bytes(budget) + ": " + why_not);
    return std::move(*best);
}

bool runs_on_tasks(const gemm_plan& plan, const plan_options& opt) {
    return opt.engine == gemm_engine::tasks && plan.strategy != gemm_strategy::direct &&
           plan.batch == 0;
}

namespace {

index_t ceil_div(index_t a, index_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/// Tile extents the search tries along a dimension of `extent`: the planned one and 2, 4 and 8
/// times it, capped at the extent (which is tried too).
std::vector<index_t> coarser_tiles(index_t planned, index_t extent) {
    std::vector<index_t> out;
    for (index_t f : {1, 2, 4, 8}) {
        const index_t t = std::min(planned * f, std::max<index_t>(extent, 1));
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
    return out;
}

/// Depths the search tries: the planned one, the usual k-blocks from `least` up to k, and k.
std::vector<index_t> k_tiles(index_t planned, index_t k, index_t least) {
    std::vector<index_t> out{planned};
    for (index_t t : std::initializer_list<index_t>{128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, k}) {
        t = std::min(t, std::max<index_t>(k, 1));
        if (t < least) continue;
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
    return out;
}

/// Whether copies can overlap compute: two slots of A and of B where they have two tiles or more
/// (a k-step's load then runs beside the one before), and of C too where `c_too`.
bool double_buffered(const gemm_task_plan& tp, bool c_too) {
    const auto ok = [&](const engine::slot_class& s, int operand) {
        const engine::operand_tiles& o = tp.graph.operands[std::size_t(operand)];
        return s.count == 0 || s.count >= std::min<index_t>(2, o.tiles_r() * o.tiles_c());
    };
    return ok(tp.a_slots, operand_a) && ok(tp.b_slots, operand_b) && (!c_too || ok(tp.c_slots, operand_c));
}

}  // namespace

void adopt_tasks(gemm_plan& plan, int devices, bool cache, bool search) {
    devices = std::max(devices, 1);
    gemm_task_plan tp, base;
    try {
        gemm_tiling t = tiling_of(plan);
        const bool in_place = plan.strategy == gemm_strategy::zero_copy;
        base = plan_gemm_tasks(plan.problem, t, plan.budget, in_place, plan.rates, devices);
        if (search && !in_place && plan.strategy != gemm_strategy::in_core && !cache) {
            const gemm_problem& q = plan.problem;
            const gemm_tiling planned = t;
            const engine::model_result first = base.model;
            // On the host's cores a k-step covers a kernel's KC at least, as the pipeline plans them
            // (a shorter one adds a pass over the C tile per call); elsewhere the planned depth's half.
            const index_t least_k = plan.rates.host_memory ? std::min(q.k, reproducible_k_block(q.type))
                                                           : std::min(planned.tile_k, std::max<index_t>(planned.tile_k / 2, 256));
            int ranked = 1;
            // Coarsest first (fewest kernel steps), at most four times the planned steps each, and
            // no more than 2^16 steps modelled in all (the model replays every step: a 100000^3
            // f32 product in 256 MiB plans 37,000 of them, and ranking 15 such tilings took 1.4 s).
            struct candidate {
                double steps;
                index_t tm, tn, tk;
            };
            std::vector<candidate> candidates;
            for (index_t tm : coarser_tiles(planned.tile_m, q.m))
                for (index_t tn : t.c_panel ? std::vector<index_t>{planned.tile_n} : coarser_tiles(planned.tile_n, q.n))
                    for (index_t tk : plan.k_block > 0 ? std::vector<index_t>{planned.tile_k}
                                                       : k_tiles(planned.tile_k, q.k, least_k)) {
                        if (tm == planned.tile_m && tn == planned.tile_n && tk == planned.tile_k) continue;
                        // Reproducible plans step through k one k-block at a time whatever tile_k is
                        // (build_gemm): only m and n are searched there.
                        const index_t step_k = plan.k_block > 0 ? plan.k_block : tk;
                        const double steps = double(ceil_div(q.m, tm)) * double(ceil_div(q.n, tn)) * double(ceil_div(q.k, step_k));
                        if (steps <= 4.0 * double(std::max<std::size_t>(base.graph.steps, 1))) candidates.push_back({steps, tm, tn, tk});
                    }
            std::stable_sort(candidates.begin(), candidates.end(),
                             [](const candidate& x, const candidate& y) { return x.steps < y.steps; });
            double modelled = double(base.graph.steps);
            bool cut = false;
            for (const candidate& cd : candidates) {
                if (modelled + cd.steps > 65536.0) {
                    cut = true;
                    break;
                }
                gemm_tiling c = planned;
                c.tile_m = cd.tm, c.tile_n = cd.tn, c.tile_k = cd.tk;
                gemm_task_plan cand;
                try {
                    cand = plan_gemm_tasks(q, c, plan.budget, false, plan.rates, devices);
                } catch (const out_of_budget&) {
                    continue;  // refused before the model ran
                }
                modelled += cd.steps;
                if (!double_buffered(cand, !plan.rates.host_memory)) continue;
                ++ranked;
                if (engine::better_plan(cand.model, cand.graph.steps, base.model, base.graph.steps)) {
                    base = std::move(cand);
                    t = c;
                }
            }
            if (t.tile_m != planned.tile_m || t.tile_n != planned.tile_n || t.tile_k != planned.tile_k) {
                char text[256];
                std::snprintf(text, sizeof text,
                              "the task model's pick of %d tilings in the budget (the pipeline's formulas chose %lld x %lld x %lld, "
                              "predicted %.4g s on the task engine)",
                              ranked, (long long)planned.tile_m, (long long)planned.tile_n, (long long)planned.tile_k,
                              first.seconds);
                plan.tile_choice = text;
                plan.tile_m = t.tile_m;
                plan.tile_n = t.tile_n;
                plan.tile_k = t.tile_k;
                plan.tiles_m = ceil_div(q.m, t.tile_m);
                plan.tiles_n = ceil_div(q.n, t.tile_n);
                plan.tiles_k = ceil_div(q.k, t.tile_k);
            } else {
                plan.tile_choice = "the pipeline's formulas, the best of " + std::to_string(ranked) +
                                   " tilings the task model ranked in the budget" +
                                   (cut ? " (it models 2^16 kernel steps at most: coarser ones first)" : "");
            }
        }
        if (cache && !in_place) {
            t.fill_budget = true;
            tp = plan_gemm_tasks(plan.problem, t, plan.budget, false, plan.rates, devices);
        } else {
            tp = std::move(base);
        }
    } catch (const out_of_budget&) {
        return;  // not one tile of each in the budget (the pipeline's plan fits it): the pipeline runs it
    }
    const engine::model_result& m = tp.model;
    plan.engine = gemm_engine::tasks;
    plan.a_slots = tp.a_slots.count;
    plan.a_slot_bytes = tp.a_slots.bytes;
    plan.b_slots = tp.b_slots.count;
    plan.b_slot_bytes = tp.b_slots.bytes;
    plan.c_slots = tp.c_slots.count;
    plan.c_slot_bytes = tp.c_slots.bytes;
    // The automatic cache is what the store's spare slots do anyway (least recently used first).
    const bool filled = cache && plan.strategy != gemm_strategy::zero_copy && plan.strategy != gemm_strategy::in_core;
    plan.cache = filled;
    plan.cache_slots_a = filled ? std::max(0, tp.a_slots.count - base.a_slots.count) : 0;
    plan.cache_slots_b = filled ? std::max(0, tp.b_slots.count - base.b_slots.count) : 0;
    plan.peak_device_bytes = engine::total_bytes(tp.slots);
    plan.bytes_h2d = m.bytes_h2d;
    plan.bytes_d2h = m.bytes_d2h;
    plan.bytes_packed = m.bytes_packed;
    plan.predicted_seconds = m.seconds;
    plan.predicted_compute_seconds = m.compute_seconds;
    plan.predicted_h2d_seconds = m.h2d_seconds;
    plan.predicted_d2h_seconds = m.d2h_seconds;
    plan.predicted_copy_seconds = m.h2d_seconds + m.d2h_seconds;
    plan.bound = m.bound;
    plan.units = tp.graph.tasks.size();
    plan.steps = tp.graph.steps;
}

namespace {
template <class V>
engine::host_operand host_operand_of(V v) {
    using E = std::remove_const_t<typename V::value_type>;
    engine::host_operand o;
    o.base = reinterpret_cast<char*>(const_cast<E*>(v.data()));
    o.ld = v.ld();
    o.lay = v.layout();
    return o;
}
}  // namespace

template <class T>
engine::run_result run_gemm_plan(const gemm_plan& plan, std::span<device* const> devices, T alpha,
                                 host_matrix_view<const T> a, host_matrix_view<const T> b, T beta, host_matrix_view<T> c,
                                 const gemm_run_options& run, gemm_memory* memory, const call_keeps& keeps) {
    gemm_tiling t = tiling_of(plan);
    if (memory != nullptr && (keeps.a.id != 0 || keeps.b.id != 0)) {
        std::lock_guard lock(memory->mutex);
        t.reversed = memory->reverse_next;
        memory->reverse_next = !memory->reverse_next;
    }
    const task_graph g = build_gemm(plan.problem, t, int(devices.size()));
    engine::run_request rq;
    rq.graph = &g;
    rq.what = "gemm";
    rq.operands = {host_operand_of(a), host_operand_of(b), host_operand_of(host_matrix_view<const T>(c))};
    rq.alpha = as_scalar(alpha);
    rq.beta = as_scalar(beta);
    rq.in_place = plan.strategy == gemm_strategy::zero_copy;
    if (!rq.in_place)
        rq.slot_classes = engine::sorted_classes({{plan.a_slot_bytes, plan.a_slots},
                                              {plan.b_slot_bytes, plan.b_slots},
                                              {plan.c_slot_bytes, plan.c_slots}});
    rq.transfer = plan.transfer;
    rq.device_flops = plan.device_flops;
    rq.gemm_kernels = plan.device_kernels;
    rq.run.trace = run.trace;
    rq.run.register_host = false;  // pinned by the caller, before its clock
    rq.run.max_tasks_in_flight = std::max(1, run.max_units_in_flight);
    rq.run.cancel = run.cancel;
    rq.run.peer_tiles = run.peer_tiles;
    // Progress as the pipeline reports it: each kernel step from the compute stream (the steps
    // done so far), each finished task (a unit: one tile of C, written back).
    std::atomic<std::size_t> steps_done{0};
    if (run.on_step_done) rq.on_step_done = [&run, &steps_done] { run.on_step_done(++steps_done); };
    if (run.on_unit_done) rq.run.on_task_done = [&run](std::size_t done, std::size_t) { run.on_unit_done(done); };
    rq.memory = memory;
    rq.keeps = {keeps.a, keeps.b, operand_keep{}};
    return engine::run_tasks(rq, devices);
}

template <class T>
engine::run_result gemm_on_tasks(std::span<device* const> devices, op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                                 host_matrix_view<const T> b, T beta, host_matrix_view<T> c, const gemm_tiling& t,
                                 const blas3_run_options& run, engine::model_result* model) {
    const gemm_problem p = describe_gemm<T>(op_a, op_b, alpha, a, b, beta, c);
    const bool in_place = computes_in_place(devices);
    std::size_t budget = std::numeric_limits<std::size_t>::max();
    for (device* d : devices) budget = std::min(budget, d->budget_for_runs());
    const gemm_task_plan plan = plan_gemm_tasks(p, t, budget, in_place, device_rates{}, int(devices.size()));
    const task_graph& g = plan.graph;
    if (model != nullptr) *model = plan.model;
    engine::run_request rq;
    rq.graph = &g;
    rq.operands = {host_operand_of(a), host_operand_of(b), host_operand_of(host_matrix_view<const T>(c))};
    rq.alpha = as_scalar(alpha);
    rq.beta = as_scalar(beta);
    rq.in_place = in_place;
    rq.slot_classes = plan.slots;
    rq.transfer = t.transfer;
    rq.run = run;
    return engine::run_tasks(rq, devices);
}

#define TILESTREAM_INSTANTIATE(T)                                                                                   \
    template engine::run_result run_gemm_plan<T>(const gemm_plan&, std::span<device* const>, T,                      \
                                                 host_matrix_view<const T>, host_matrix_view<const T>, T,              \
                                                 host_matrix_view<T>, const gemm_run_options&, gemm_memory*,           \
                                                 const call_keeps&);                                                   \
    template engine::run_result gemm_on_tasks<T>(std::span<device* const>, op, op, T, host_matrix_view<const T>,   \
                                                 host_matrix_view<const T>, T, host_matrix_view<T>, const gemm_tiling&, \
                                                 const blas3_run_options&, engine::model_result*);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream::detail::routines
