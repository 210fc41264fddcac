// SYMM (and HEMM) as tile tasks: C <- alpha A B + beta C (left) or alpha B A + beta C (right), A
// symmetric with one triangle stored.
//
// One task per tile of C, its steps over the tiles of A's dimension in order (the first applies
// beta): a tile of A off the diagonal is read from the stored triangle, transposed where it lies
// in the other one (A_ip = A_pi^T); a diagonal tile goes to the symm kernel, which reads its
// stored triangle only. The tasks are independent.
#include "core/routines/routines.hpp"

namespace tilestream::detail::routines {

using engine::make_step;
using engine::scalar_role;
using engine::task_graph;
using engine::tile_task;

task_graph build_symm(const blas3_problem& p, const build_settings& s) {
    task_graph g;
    g.type = p.type;
    const bool left = p.flags.side == side::left;
    const bool herm = p.routine == blas3_routine::hemm;
    const index_t order = left ? p.m : p.n;
    const index_t tr = left ? s.tile : s.tile_free, tc = left ? s.tile_free : s.tile;
    g.add_operand(order, order, s.tile, s.tile);
    g.add_operand(p.m, p.n, tr, tc);
    g.add_operand(p.m, p.n, tr, tc);
    if (!p.reads_ab) {
        add_scaling_tasks(g, operand_c, s, p.reads_c, p, false);  // alpha == 0: C <- beta C
        g.finish();
        return g;
    }
    const engine::operand_tiles& c = g.operands[operand_c];
    const index_t nt = (order + s.tile - 1) / s.tile;
    const bool lower = p.flags.uplo == uplo::lower;
    // The symmetric matrix's tile (i, q) through the stored triangle.
    const auto sym = [&](index_t i, index_t q) {
        const bool stored = lower ? i > q : i < q;
        return stored ? tile_ref{g.tile(operand_a, i, q), op::n}
                      : tile_ref{g.tile(operand_a, q, i), herm ? op::c : op::t};  // A_iq = A_qi^T (^H)
    };
    for (index_t j = 0; j < c.tiles_c(); ++j)
        for (index_t i = 0; i < c.tiles_r(); ++i) {
            tile_task t;
            engine::task_output out;
            out.tile = g.tile(operand_c, i, j);
            out.load = p.reads_c;
            t.outputs.push_back(out);
            const index_t diag_block = left ? i : j;
            for (index_t q = 0; q < nt; ++q) {
                const scalar_role beta = q == 0 ? scalar_role::beta : scalar_role::one;
                const int b = left ? g.tile(operand_b, q, j) : g.tile(operand_b, i, q);
                if (q == diag_block) {
                    tile_op op = base_op(herm ? tile_kind::hemm : tile_kind::symm, s);
                    op.side = p.flags.side;
                    op.uplo = p.flags.uplo;
                    t.steps.push_back(make_step(g, op, g.tile(operand_a, q, q), b, out.tile, scalar_role::alpha, beta));
                    continue;
                }
                tile_op op = base_op(tile_kind::gemm, s);
                if (left) {
                    const tile_ref a = sym(i, q);
                    op.trans_a = a.trans;
                    t.steps.push_back(make_step(g, op, a.tile, b, out.tile, scalar_role::alpha, beta));
                } else {
                    const tile_ref a = sym(q, j);
                    op.trans_b = a.trans;
                    t.steps.push_back(make_step(g, op, b, a.tile, out.tile, scalar_role::alpha, beta));
                }
            }
            g.tasks.push_back(std::move(t));
        }
    g.finish();
    return g;
}

}  // namespace tilestream::detail::routines
