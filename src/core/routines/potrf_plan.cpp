// Cholesky (LAPACK's potrf) as tile tasks: A = L L^H (lower) or U^H U (upper), in place, only the
// named triangle read and written.
//
// Lower, with tiles (i, j), i >= j, over k = 0, 1, ...:
//   A_kk <- chol(A_kk - sum_{j<k} L_kj L_kj^H)                 (syrk/herk updates, then potrf)
//   A_ik <- (A_ik - sum_{j<k} L_ij L_kj^H) L_kk^-H, i > k      (gemm updates, then trsm)
// Upper is its conjugate transpose (U_kj = L_jk^H). Right-looking: a task per potrf, per trsm and
// per update (a tile goes through a device once per update; the most parallel order, for plans
// that fit). Left-looking: one task per tile, its updates then its potrf or trsm (each tile
// loaded and written once: the fewest bytes out of core). Both apply the same operations to each
// tile in the same order (k ascending), so their results are bitwise equal. The executor's
// priorities (the work on the longest path) run the potrf/trsm chain first: the look-ahead.
// Diagonal tiles are written back by their triangle only. A pivot that is not positive makes the
// potrf step write its tile's info; the run goes on (LAPACK leaves the rest unspecified) and the
// report's info is the smallest global index among the tiles that failed.
#include "core/routines/routines.hpp"

namespace tilestream::detail::routines {

using engine::make_step;
using engine::scalar_role;
using engine::task_graph;
using engine::tile_task;

task_graph build_potrf(const blas3_problem& p, const build_settings& s) {
    task_graph g;
    g.type = p.type;
    g.add_operand(0, 0, 1, 1);  // no A or B: the matrix is C, factored in place
    g.add_operand(0, 0, 1, 1);
    g.add_operand(p.n, p.n, s.tile, s.tile);
    const index_t nt = (p.n + s.tile - 1) / s.tile;
    const bool lower = p.flags.uplo == uplo::lower;
    const bool herm = is_complex(p.type);
    const op back = herm ? op::c : op::t;
    // The stored tile holding L_ij (lower; i >= j) or U_ji = L_ij^H (upper).
    const auto stored = [&](index_t i, index_t j) { return lower ? g.tile(operand_c, i, j) : g.tile(operand_c, j, i); };
    const auto output = [&](index_t i, index_t j) {
        engine::task_output o;
        o.tile = stored(i, j);
        o.load = true;
        if (i == j) o.region = lower ? engine::tile_region::lower : engine::tile_region::upper;
        return o;
    };
    // A_ii -= L_ik L_ik^H (lower) or A_ii -= U_ki^H U_ki (upper), the stored triangle only.
    const auto diagonal_update = [&](index_t i, index_t k) {
        tile_op op = base_op(herm ? tile_kind::herk : tile_kind::syrk, s);
        op.uplo = p.flags.uplo;
        op.trans_a = lower ? op::n : back;
        op.trans_b = op.trans_a;
        return make_step(g, op, stored(i, k), -1, stored(i, i), scalar_role::minus_one, scalar_role::one);
    };
    // A_ij -= L_ik L_jk^H (lower, i > j) or A_ji -= U_kj^H U_ki (upper).
    const auto update = [&](index_t i, index_t j, index_t k) {
        tile_op op = base_op(tile_kind::gemm, s);
        if (lower) {
            op.trans_a = op::n;
            op.trans_b = back;
            return make_step(g, op, stored(i, k), stored(j, k), stored(i, j), scalar_role::minus_one, scalar_role::one);
        }
        op.trans_a = back;
        op.trans_b = op::n;
        return make_step(g, op, stored(j, k), stored(i, k), stored(i, j), scalar_role::minus_one, scalar_role::one);
    };
    const auto factor = [&](index_t k) {
        tile_op op = base_op(tile_kind::potrf, s);
        op.uplo = p.flags.uplo;
        return make_step(g, op, -1, -1, stored(k, k), scalar_role::one, scalar_role::zero);
    };
    // L_ik <- A_ik L_kk^-H (lower: right side) or U_ki <- U_kk^-H A_ki (upper: left side).
    const auto solve = [&](index_t i, index_t k) {
        tile_op op = base_op(tile_kind::trsm, s);
        op.side = lower ? side::right : side::left;
        op.uplo = p.flags.uplo;
        op.trans_a = back;
        op.diag = diag::non_unit;
        return make_step(g, op, stored(k, k), -1, stored(i, k), scalar_role::one, scalar_role::zero);
    };
    if (s.order == blas3_order::right_looking) {
        for (index_t k = 0; k < nt; ++k) {
            tile_task d;
            d.outputs.push_back(output(k, k));
            d.steps.push_back(factor(k));
            g.tasks.push_back(std::move(d));
            for (index_t i = k + 1; i < nt; ++i) {
                tile_task t;
                t.outputs.push_back(output(i, k));
                t.steps.push_back(solve(i, k));
                g.tasks.push_back(std::move(t));
            }
            for (index_t j = k + 1; j < nt; ++j)
                for (index_t i = j; i < nt; ++i) {
                    tile_task t;
                    t.outputs.push_back(output(i, j));
                    t.steps.push_back(i == j ? diagonal_update(i, k) : update(i, j, k));
                    g.tasks.push_back(std::move(t));
                }
        }
    } else {
        for (index_t k = 0; k < nt; ++k) {
            tile_task d;
            d.outputs.push_back(output(k, k));
            for (index_t j = 0; j < k; ++j) d.steps.push_back(diagonal_update(k, j));
            d.steps.push_back(factor(k));
            g.tasks.push_back(std::move(d));
            for (index_t i = k + 1; i < nt; ++i) {
                tile_task t;
                t.outputs.push_back(output(i, k));
                for (index_t j = 0; j < k; ++j) t.steps.push_back(update(i, k, j));
                t.steps.push_back(solve(i, k));
                g.tasks.push_back(std::move(t));
            }
        }
    }
    g.finish();
    return g;
}

}  // namespace tilestream::detail::routines
