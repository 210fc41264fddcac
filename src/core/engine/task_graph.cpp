// Tile tasks: operands' tilings, dependencies of a sequential task flow, critical-path priorities.
#include "core/engine/task_graph.hpp"

#include <tilestream/error.hpp>

#include <algorithm>

namespace tilestream::detail::engine {

int task_graph::add_operand(index_t rows, index_t cols, index_t tile_rows, index_t tile_cols) {
    operand_tiles o;
    o.rows = rows;
    o.cols = cols;
    o.tile_rows = std::max<index_t>(1, tile_rows);
    o.tile_cols = std::max<index_t>(1, tile_cols);
    o.first = tiles;
    const index_t count = checked_mul(o.tiles_r(), o.tiles_c(), "task graph: tiles");
    if (count > index_t(1) << 28) throw invalid_argument("task graph: more than 2^28 tiles (tiles too small)");
    tiles += int(count);
    operands.push_back(o);
    return int(operands.size()) - 1;
}

tile_position task_graph::where(int tile) const {
    // Operands are few: the last whose first id is not past the tile.
    std::size_t k = 0;
    for (std::size_t o = 0; o < operands.size(); ++o)
        if (operands[o].first <= tile && operands[o].tiles_r() * operands[o].tiles_c() > 0) k = o;
    const operand_tiles& o = operands[k];
    const index_t local = tile - o.first;
    tile_position p;
    p.operand = int(k);
    p.i = local / o.tiles_c();
    p.j = local % o.tiles_c();
    p.row0 = p.i * o.tile_rows;
    p.col0 = p.j * o.tile_cols;
    p.rows = o.extent_r(p.i);
    p.cols = o.extent_c(p.j);
    return p;
}

std::size_t task_graph::tile_bytes(int tile) const {
    const tile_position p = where(tile);
    return std::size_t(p.rows) * std::size_t(p.cols) * size_of(type);
}

std::vector<slot_class> sorted_classes(std::vector<slot_class> classes) {
    std::sort(classes.begin(), classes.end(), [](const slot_class& x, const slot_class& y) { return x.bytes < y.bytes; });
    std::vector<slot_class> out;
    for (const slot_class& c : classes) {
        if (c.count <= 0) continue;
        if (!out.empty() && out.back().bytes == c.bytes) out.back().count += c.count;
        else out.push_back(c);
    }
    return out;
}

std::size_t total_bytes(const std::vector<slot_class>& classes) {
    std::size_t t = 0;
    for (const slot_class& c : classes) t += c.bytes * std::size_t(std::max(c.count, 0));
    return t;
}

std::size_t task_graph::max_tile_bytes(int operand) const {
    const operand_tiles& o = operands[std::size_t(operand)];
    if (o.rows <= 0 || o.cols <= 0) return 0;
    return std::size_t(std::min(o.tile_rows, o.rows)) * std::size_t(std::min(o.tile_cols, o.cols)) * size_of(type);
}

std::size_t task_graph::max_tile_bytes() const {
    std::size_t most = 0;
    for (std::size_t o = 0; o < operands.size(); ++o) most = std::max(most, max_tile_bytes(int(o)));
    return most;
}

task_step make_step(const task_graph& g, tile_op op, int a, int b, int c, scalar_role alpha, scalar_role beta) {
    task_step s;
    s.alpha = alpha;
    s.beta = beta;
    // The flops a step counts (its scalars are bound later): zero only where alpha is.
    op.alpha = alpha == scalar_role::zero ? 0.0 : 1.0;
    op.beta = beta == scalar_role::zero ? 0.0 : 1.0;
    s.a = a;
    s.b = b;
    s.c = c;
    op.type = g.type;
    const tile_position pc = g.where(c);
    switch (op.kind) {
        case tile_kind::gemm: {
            op.m = pc.rows;
            op.n = pc.cols;
            if (a >= 0) {
                const tile_position pa = g.where(a);
                op.k = op.trans_a == op::n ? pa.cols : pa.rows;
            } else {
                op.k = 0;
            }
            break;
        }
        case tile_kind::syrk:
        case tile_kind::herk:
        case tile_kind::syr2k:
        case tile_kind::her2k: {
            op.m = op.n = pc.rows;
            if (a >= 0) {
                const tile_position pa = g.where(a);
                op.k = op.trans_a == op::n ? pa.cols : pa.rows;
            } else {
                op.k = 0;
            }
            break;
        }
        default:
            op.m = pc.rows;
            op.n = pc.cols;
            op.k = 0;
            break;
    }
    s.op = op;
    return s;
}

void task_graph::finish() {
    std::vector<int> last_writer(static_cast<std::size_t>(tiles), -1);
    std::vector<std::vector<int>> readers{std::size_t(tiles)};
    std::vector<int> deps;
    total_flops = 0;
    steps = 0;
    edges = 0;
    for (std::size_t t = 0; t < tasks.size(); ++t) {
        tile_task& task = tasks[t];
        task.inputs.clear();
        task.successors.clear();
        task.predecessors = 0;
        const auto is_output = [&](int tile) {
            return std::any_of(task.outputs.begin(), task.outputs.end(), [&](const task_output& o) { return o.tile == tile; });
        };
        task.flops = 0;
        for (const task_step& s : task.steps) {
            for (int x : {s.a, s.b})
                if (x >= 0 && !is_output(x) && std::find(task.inputs.begin(), task.inputs.end(), x) == task.inputs.end())
                    task.inputs.push_back(x);
            task.flops += s.op.flops();
        }
        steps += task.steps.size();
        total_flops += task.flops;
        deps.clear();
        for (int x : task.inputs) {
            if (last_writer[std::size_t(x)] >= 0) deps.push_back(last_writer[std::size_t(x)]);
            readers[std::size_t(x)].push_back(int(t));
        }
        for (const task_output& o : task.outputs) {
            const std::size_t y = std::size_t(o.tile);
            if (last_writer[y] >= 0) deps.push_back(last_writer[y]);
            for (int r : readers[y])
                if (r != int(t)) deps.push_back(r);
            readers[y].clear();
            last_writer[y] = int(t);
        }
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        for (int d : deps) {
            tasks[std::size_t(d)].successors.push_back(int(t));
            ++task.predecessors;
        }
        edges += deps.size();
    }
    critical_path_flops = 0;
    for (std::size_t t = tasks.size(); t-- > 0;) {
        double longest = 0;
        for (int s : tasks[t].successors) longest = std::max(longest, tasks[std::size_t(s)].priority);
        // A task with no arithmetic (a scaling) still takes a step on the path.
        tasks[t].priority = tasks[t].flops + 1.0 + longest;
        critical_path_flops = std::max(critical_path_flops, tasks[t].priority);
    }
}

void write_regions_whole(task_graph& g, bool unread_too) {
    // A rank-k step that only scales (alpha zero, k empty) is left out: plans scale such tiles with
    // gemm-kind steps, which take the whole tile, and a device's scaling path is not BLAS's routine.
    const auto triangle_only = [](const task_step& s, tile_region region) {
        const tile_op& op = s.op;
        const bool same = (op.uplo == uplo::lower) == (region == tile_region::lower);
        switch (op.kind) {
            case tile_kind::syrk:
            case tile_kind::herk:
            case tile_kind::syr2k:
            case tile_kind::her2k: return same && s.alpha != scalar_role::zero && op.k > 0;
            case tile_kind::potrf: return same;
            case tile_kind::gemm:
            case tile_kind::symm:
            case tile_kind::hemm:
            case tile_kind::trmm:
            case tile_kind::trsm:
            case tile_kind::getrf:
            case tile_kind::laswp: return false;
        }
        return false;
    };
    for (tile_task& t : g.tasks)
        for (task_output& o : t.outputs) {
            if (o.region == tile_region::full || (!o.load && !unread_too)) continue;
            const bool whole = std::all_of(t.steps.begin(), t.steps.end(), [&](const task_step& s) {
                return s.c != o.tile || triangle_only(s, o.region);
            });
            if (!whole) continue;
            o.load = true;
            o.region = tile_region::full;
        }
}

}  // namespace tilestream::detail::engine
