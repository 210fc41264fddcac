// TRSM as tile tasks: solve op(A) X = alpha B (left) or X op(A) = alpha B (right), B <- X.
//
// Along the triangle the block rows (left; block columns right) are solved in the order op(A)
// allows: forward where op(A) is lower (left) or upper (right), backward otherwise. Block i of X is
//   X_i = op(A)_ii^-1 (alpha B_i - sum over p solved before i of op(A)_ip X_p)
// and the blocks of the other dimension are independent. Left-looking: one task per tile of X,
// its GEMM updates from the solved tiles then the diagonal solve (each tile of B loaded and written
// once). Right-looking: a task per diagonal solve and a task per update B_r -= op(A)_ri X_i (the
// updates of a block row run in parallel; each tile of B goes through the device once per update).
// Both apply the same operations to each tile in the same order, so their results are identical.
#include "core/routines/routines.hpp"

#include <vector>

namespace tilestream::detail::routines {

using engine::make_step;
using engine::scalar_role;
using engine::task_graph;
using engine::tile_task;

namespace {

/// What the TRSM and TRMM builders share: A's and B's tilings and op(A)'s tiles.
struct triangle_layout {
    bool left = true;
    bool lower = true;       ///< op(A) is lower triangular
    index_t order = 0;       ///< A is order x order
    index_t nt = 0, nf = 0;  ///< tiles along the triangle and along the free dimension
};

}  // namespace

tile_op base_op(tile_kind kind, const build_settings& s) {
    tile_op op;
    op.kind = kind;
    op.kernel = s.kernel;
    op.math = s.math;
    return op;
}

void add_scaling_tasks(task_graph& g, int operand, const build_settings& s, bool reads_c, const blas3_problem& p,
                       bool triangle) {
    const engine::operand_tiles& o = g.operands[std::size_t(operand)];
    for (index_t i = 0; i < o.tiles_r(); ++i)
        for (index_t j = 0; j < o.tiles_c(); ++j) {
            if (triangle && (p.flags.uplo == uplo::lower ? j > i : j < i)) continue;
            tile_task t;
            const int c = g.tile(operand, i, j);
            engine::task_output out;
            out.tile = c;
            out.load = reads_c;
            const bool diagonal = triangle && i == j;
            if (diagonal) out.region = p.flags.uplo == uplo::lower ? engine::tile_region::lower : engine::tile_region::upper;
            t.outputs.push_back(out);
            // In place a diagonal tile is scaled by its triangle only (a rank-k op with k = 0);
            // copied tiles are scaled whole and written back by their triangle. HERK's and
            // HER2K's diagonal tiles always go through herk, which zeroes their diagonal's
            // imaginary parts.
            const bool herm = p.routine == blas3_routine::herk || p.routine == blas3_routine::her2k;
            tile_op op = base_op(diagonal && herm ? tile_kind::herk
                                 : diagonal && s.in_place ? tile_kind::syrk
                                                          : tile_kind::gemm, s);
            op.uplo = p.flags.uplo;
            t.steps.push_back(make_step(g, op, -1, -1, c, scalar_role::zero, reads_c ? scalar_role::beta : scalar_role::zero));
            g.tasks.push_back(std::move(t));
        }
}

task_graph build_trsm(const blas3_problem& p, const build_settings& s) {
    task_graph g;
    g.type = p.type;
    triangle_layout tl;
    tl.left = p.flags.side == side::left;
    tl.lower = (p.flags.uplo == uplo::lower) == (p.flags.trans == op::n);
    tl.order = tl.left ? p.m : p.n;
    const index_t free = tl.left ? p.n : p.m;
    g.add_operand(tl.order, tl.order, s.tile, s.tile);
    if (tl.left) g.add_operand(p.m, p.n, s.tile, s.tile_free);
    else g.add_operand(p.m, p.n, s.tile_free, s.tile);
    g.add_operand(0, 0, 1, 1);  // no C: B is solved in place
    if (!p.reads_ab) {
        add_scaling_tasks(g, operand_b, s, false, p, false);  // alpha == 0: B <- 0
        g.finish();
        return g;
    }
    tl.nt = (tl.order + s.tile - 1) / s.tile;
    tl.nf = (free + s.tile_free - 1) / s.tile_free;
    const bool forward = tl.left ? tl.lower : !tl.lower;
    std::vector<index_t> seq(std::size_t(tl.nt));
    for (index_t q = 0; q < tl.nt; ++q) seq[std::size_t(q)] = forward ? q : tl.nt - 1 - q;
    // op(A)'s tile (i, q) through A's stored tiles.
    const auto op_a = [&](index_t i, index_t q) {
        return p.flags.trans == op::n ? tile_ref{g.tile(operand_a, i, q), op::n} : tile_ref{g.tile(operand_a, q, i), p.flags.trans};
    };
    const auto b_tile = [&](index_t tri, index_t f) {
        return tl.left ? g.tile(operand_b, tri, f) : g.tile(operand_b, f, tri);
    };
    // B_i -= op(A)_ir X_r (left) or B_i -= X_r op(A)_ri (right); the first update scales B_i by alpha.
    const auto update = [&](index_t i, index_t r, index_t f, bool first) {
        tile_op op = base_op(tile_kind::gemm, s);
        const int out = b_tile(i, f);
        if (tl.left) {
            const tile_ref a = op_a(i, r);
            op.trans_a = a.trans;
            return make_step(g, op, a.tile, b_tile(r, f), out, scalar_role::minus_one,
                             first ? scalar_role::alpha : scalar_role::one);
        }
        const tile_ref a = op_a(r, i);
        op.trans_b = a.trans;
        return make_step(g, op, b_tile(r, f), a.tile, out, scalar_role::minus_one,
                         first ? scalar_role::alpha : scalar_role::one);
    };
    const auto solve = [&](index_t i, index_t f, bool first) {
        tile_op op = base_op(tile_kind::trsm, s);
        op.side = p.flags.side;
        op.uplo = p.flags.uplo;
        op.trans_a = p.flags.trans;
        op.diag = p.flags.diag;
        return make_step(g, op, g.tile(operand_a, i, i), -1, b_tile(i, f), first ? scalar_role::alpha : scalar_role::one,
                         scalar_role::zero);
    };
    const auto output = [&](int tile) {
        engine::task_output o;
        o.tile = tile;
        o.load = true;
        return o;
    };
    if (s.order != blas3_order::right_looking) {
        for (index_t f = 0; f < tl.nf; ++f)
            for (index_t q = 0; q < tl.nt; ++q) {
                const index_t i = seq[std::size_t(q)];
                tile_task t;
                t.outputs.push_back(output(b_tile(i, f)));
                for (index_t r = 0; r < q; ++r) t.steps.push_back(update(i, seq[std::size_t(r)], f, r == 0));
                t.steps.push_back(solve(i, f, q == 0));
                g.tasks.push_back(std::move(t));
            }
    } else {
        for (index_t q = 0; q < tl.nt; ++q) {
            const index_t i = seq[std::size_t(q)];
            for (index_t f = 0; f < tl.nf; ++f) {
                tile_task t;
                t.outputs.push_back(output(b_tile(i, f)));
                t.steps.push_back(solve(i, f, q == 0));
                g.tasks.push_back(std::move(t));
            }
            for (index_t q2 = q + 1; q2 < tl.nt; ++q2)
                for (index_t f = 0; f < tl.nf; ++f) {
                    const index_t r = seq[std::size_t(q2)];
                    tile_task t;
                    t.outputs.push_back(output(b_tile(r, f)));
                    t.steps.push_back(update(r, i, f, q == 0));
                    g.tasks.push_back(std::move(t));
                }
        }
    }
    g.finish();
    return g;
}

}  // namespace tilestream::detail::routines
