// SYRK (and HERK) as tile tasks: C <- alpha op(A) op(A)^T + beta C on the `uplo` triangle of C.
//
// One task per tile of C in the triangle, its k-steps in order (the first applies beta): GEMMs off
// the diagonal, the rank-k kernel on diagonal tiles, which are written back by their triangle only
// (the other one is the caller's). The tasks are independent. SYR2K shares this builder.
#include "core/routines/routines.hpp"

namespace tilestream::detail::routines {

using engine::make_step;
using engine::scalar_role;
using engine::task_graph;
using engine::tile_task;

task_graph build_rank_k(const blas3_problem& p, const build_settings& s, bool two) {
    task_graph g;
    g.type = p.type;
    const bool n_op = p.flags.trans == op::n;
    // A (and B) are n x k (trans n) or k x n, tiled tile x tile_k along (n, k).
    const index_t rows = n_op ? p.n : p.k, cols = n_op ? p.k : p.n;
    const index_t tr = n_op ? s.tile : s.tile_k, tc = n_op ? s.tile_k : s.tile;
    g.add_operand(rows, cols, tr, tc);
    if (two) g.add_operand(rows, cols, tr, tc);
    else g.add_operand(0, 0, 1, 1);
    g.add_operand(p.n, p.n, s.tile, s.tile);
    if (!p.reads_ab) {
        add_scaling_tasks(g, operand_c, s, p.reads_c, p, true);  // alpha == 0 or k == 0: C <- beta C
        g.finish();
        return g;
    }
    const bool herm = p.routine == blas3_routine::herk || p.routine == blas3_routine::her2k;
    const index_t nt = (p.n + s.tile - 1) / s.tile, kt = (p.k + s.tile_k - 1) / s.tile_k;
    // op(X)'s tile (i, q), and its transpose as the second factor.
    const auto tile_of = [&](int operand, index_t i, index_t q) {
        return n_op ? g.tile(operand, i, q) : g.tile(operand, q, i);
    };
    // op(A)_iq op(A)_jq^T (^H for herk/her2k): the second factor is the first's tile transposed
    // (conjugated too for the Hermitian kinds).
    const op back = herm ? op::c : op::t;
    const op first_op = n_op ? op::n : back, second_op = n_op ? back : op::n;
    const bool lower = p.flags.uplo == uplo::lower;
    for (index_t j = 0; j < nt; ++j)
        for (index_t i = lower ? j : 0; i < (lower ? nt : j + 1); ++i) {
            tile_task t;
            engine::task_output out;
            out.tile = g.tile(operand_c, i, j);
            out.load = p.reads_c;
            if (i == j) out.region = lower ? engine::tile_region::lower : engine::tile_region::upper;
            t.outputs.push_back(out);
            for (index_t q = 0; q < kt; ++q) {
                const scalar_role beta = q == 0 ? scalar_role::beta : scalar_role::one;
                if (i == j) {
                    tile_op op = base_op(two ? (herm ? tile_kind::her2k : tile_kind::syr2k)
                                             : (herm ? tile_kind::herk : tile_kind::syrk), s);
                    op.uplo = p.flags.uplo;
                    op.trans_a = p.flags.trans;
                    op.trans_b = p.flags.trans;
                    t.steps.push_back(make_step(g, op, tile_of(operand_a, i, q), two ? tile_of(operand_b, i, q) : -1,
                                                out.tile, scalar_role::alpha, beta));
                    continue;
                }
                tile_op op = base_op(tile_kind::gemm, s);
                op.trans_a = first_op;
                op.trans_b = second_op;
                t.steps.push_back(make_step(g, op, tile_of(operand_a, i, q), tile_of(two ? operand_b : operand_a, j, q),
                                            out.tile, scalar_role::alpha, beta));
                if (two)  // her2k: + conj(alpha) op(B) op(A)^H
                    t.steps.push_back(make_step(g, op, tile_of(operand_b, i, q), tile_of(operand_a, j, q), out.tile,
                                                herm ? scalar_role::conj_alpha : scalar_role::alpha, scalar_role::one));
            }
            g.tasks.push_back(std::move(t));
        }
    g.finish();
    return g;
}

task_graph build_syrk(const blas3_problem& p, const build_settings& s) { return build_rank_k(p, s, false); }

}  // namespace tilestream::detail::routines
