// TRMM as tile tasks: B <- alpha op(A) B (left) or alpha B op(A) (right), in place.
//
// Block i of the result (block row left, block column right) is
//   B_i <- alpha (op(A)_ii B_i + sum over the other blocks p of its triangle of op(A)_ip B_p)
// with the old B_p. One task per tile of B: the diagonal product in place, then GEMMs from the
// other tiles. Written in place, a tile may change only once every task reading its old value is
// done, so the tasks of a block column (row) go from the far end of the triangle towards the
// diagonal's start: the blocks a task reads are still unwritten. That order is a chain per column
// of tiles; the columns are independent (the multi-device work comes from them).
#include "core/routines/routines.hpp"

namespace tilestream::detail::routines {

using engine::make_step;
using engine::scalar_role;
using engine::task_graph;
using engine::tile_task;

task_graph build_trmm(const blas3_problem& p, const build_settings& s) {
    task_graph g;
    g.type = p.type;
    const bool left = p.flags.side == side::left;
    const bool lower = (p.flags.uplo == uplo::lower) == (p.flags.trans == op::n);  // op(A) lower
    const index_t order = left ? p.m : p.n, free = left ? p.n : p.m;
    g.add_operand(order, order, s.tile, s.tile);
    if (left) g.add_operand(p.m, p.n, s.tile, s.tile_free);
    else g.add_operand(p.m, p.n, s.tile_free, s.tile);
    g.add_operand(0, 0, 1, 1);
    if (!p.reads_ab) {
        add_scaling_tasks(g, operand_b, s, false, p, false);  // alpha == 0: B <- 0
        g.finish();
        return g;
    }
    const index_t nt = (order + s.tile - 1) / s.tile, nf = (free + s.tile_free - 1) / s.tile_free;
    // The blocks p contributing to block i: p <= i when the triangle multiplying from the left is
    // lower (left: op(A) lower; right: op(A) upper, B_j = sum_p B_p op(A)_pj).
    const bool below = left ? lower : !lower;
    const auto op_a = [&](index_t i, index_t q) {
        return p.flags.trans == op::n ? tile_ref{g.tile(operand_a, i, q), op::n} : tile_ref{g.tile(operand_a, q, i), p.flags.trans};
    };
    const auto b_tile = [&](index_t tri, index_t f) { return left ? g.tile(operand_b, tri, f) : g.tile(operand_b, f, tri); };
    for (index_t f = 0; f < nf; ++f)
        for (index_t step = 0; step < nt; ++step) {
            const index_t i = below ? nt - 1 - step : step;
            tile_task t;
            engine::task_output out;
            out.tile = b_tile(i, f);
            out.load = true;
            t.outputs.push_back(out);
            tile_op diag_op = base_op(tile_kind::trmm, s);
            diag_op.side = p.flags.side;
            diag_op.uplo = p.flags.uplo;
            diag_op.trans_a = p.flags.trans;
            diag_op.diag = p.flags.diag;
            t.steps.push_back(make_step(g, diag_op, g.tile(operand_a, i, i), -1, out.tile, scalar_role::alpha, scalar_role::zero));
            const index_t p0 = below ? 0 : i + 1, p1 = below ? i : nt;
            for (index_t q = p0; q < p1; ++q) {
                tile_op op = base_op(tile_kind::gemm, s);
                if (left) {
                    const tile_ref a = op_a(i, q);
                    op.trans_a = a.trans;
                    t.steps.push_back(make_step(g, op, a.tile, b_tile(q, f), out.tile, scalar_role::alpha, scalar_role::one));
                } else {
                    const tile_ref a = op_a(q, i);
                    op.trans_b = a.trans;
                    t.steps.push_back(make_step(g, op, b_tile(q, f), a.tile, out.tile, scalar_role::alpha, scalar_role::one));
                }
            }
            g.tasks.push_back(std::move(t));
        }
    g.finish();
    return g;
}

}  // namespace tilestream::detail::routines
