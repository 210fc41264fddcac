// GEMM as tile tasks without dependencies (see gemm_tasks.hpp).
#include "core/routines/gemm_tasks.hpp"

#include "core/routines/routines.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <limits>

namespace tilestream::detail::routines {

using engine::make_step;
using engine::scalar_role;
using engine::task_graph;
using engine::tile_task;

task_graph build_gemm(const gemm_problem& p, const gemm_tiling& t) {
    task_graph g;
    g.type = p.type;
    const index_t tm = std::max<index_t>(1, t.tile_m), tn = std::max<index_t>(1, t.tile_n);
    // Steps of one k-block in reproducible plans, so the order of k is the plan-independent one.
    const index_t tk = std::max<index_t>(1, t.k_block > 0 ? t.k_block : t.tile_k);
    const bool ta = is_transposed(p.op_a), tb = is_transposed(p.op_b);
    g.add_operand(ta ? p.k : p.m, ta ? p.m : p.k, ta ? tk : tm, ta ? tm : tk);
    g.add_operand(tb ? p.n : p.k, tb ? p.k : p.n, tb ? tn : tk, tb ? tk : tn);
    g.add_operand(p.m, p.n, tm, tn);
    build_settings s;
    s.kernel = t.kernel;
    s.math = t.math;
    const engine::operand_tiles& c = g.operands[operand_c];
    const index_t kt = p.k > 0 ? (p.k + tk - 1) / tk : 0;
    for (index_t i = 0; i < c.tiles_r(); ++i)
        for (index_t j = 0; j < c.tiles_c(); ++j) {
            tile_task task;
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
    return g;
}

template <class T>
engine::run_result gemm_on_tasks(std::span<device* const> devices, op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                                 host_matrix_view<const T> b, T beta, host_matrix_view<T> c, const gemm_tiling& t,
                                 const blas3_run_options& run) {
    const gemm_problem p = describe_gemm<T>(op_a, op_b, alpha, a, b, beta, c);
    const task_graph g = build_gemm(p, t);
    engine::run_request rq;
    rq.graph = &g;
    const auto host = [](auto v) {
        using V = std::remove_const_t<typename decltype(v)::value_type>;
        engine::host_operand o;
        o.base = reinterpret_cast<char*>(const_cast<V*>(v.data()));
        o.ld = v.ld();
        o.lay = v.layout();
        return o;
    };
    rq.operands = {host(a), host(b), host(host_matrix_view<const T>(c))};
    rq.alpha = as_scalar(alpha);
    rq.beta = as_scalar(beta);
    rq.in_place = computes_in_place(devices);
    if (!rq.in_place) {
        std::size_t budget = std::numeric_limits<std::size_t>::max();
        for (device* d : devices) budget = std::min(budget, d->budget_for_runs());
        rq.slot_bytes = std::max<std::size_t>(g.max_tile_bytes(), 1);
        rq.slots = int(std::min<std::size_t>(budget / rq.slot_bytes, std::size_t(std::max(g.tiles, 3))));
        if (rq.slots < 3)
            throw out_of_budget("gemm on tasks: three " + format_bytes(rq.slot_bytes) + " tiles do not fit a budget of " +
                                format_bytes(budget));
    }
    rq.run = run;
    return engine::run_tasks(rq, devices);
}

#define TILESTREAM_INSTANTIATE(T)                                                                                   \
    template engine::run_result gemm_on_tasks<T>(std::span<device* const>, op, op, T, host_matrix_view<const T>,   \
                                                 host_matrix_view<const T>, T, host_matrix_view<T>, const gemm_tiling&, \
                                                 const blas3_run_options&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream::detail::routines
