// Tile tasks as the routines' planners emit them: operands cut into tiles, tasks that declare the
// tiles they read and write and the tile operations that compute them, in program order. finish()
// derives the dependencies as a sequential task flow does (a read waits for the tile's last
// writer; a write waits for the last writer and every reader since) and each task's priority
// (the work on the longest path from it to the end: the critical path first).
#pragma once

#include <tilestream/tile_ops.hpp>
#include <tilestream/types.hpp>

#include <algorithm>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tilestream::detail::engine {

/// A host operand (as stored: rows x cols) cut into tiles of tile_rows x tile_cols, the last ones
/// ragged. Tile (i, j) has the id first + i * tiles_c() + j.
struct operand_tiles {
    index_t rows = 0, cols = 0;
    index_t tile_rows = 1, tile_cols = 1;
    int first = 0;
    index_t tiles_r() const { return rows > 0 ? (rows + tile_rows - 1) / tile_rows : 0; }
    index_t tiles_c() const { return cols > 0 ? (cols + tile_cols - 1) / tile_cols : 0; }
    index_t extent_r(index_t i) const { return std::min(tile_rows, rows - i * tile_rows); }
    index_t extent_c(index_t j) const { return std::min(tile_cols, cols - j * tile_cols); }
};

/// What of a tile a task writes back to the host: all of it, or one triangle (diagonal included)
/// of a diagonal tile of C in the SYRK family, whose other triangle the routine must not touch.
enum class tile_region : std::uint8_t { full, lower, upper };

/// A step's alpha or beta in terms of the call's: plans do not hold the scalars (a plan serves
/// any alpha and beta with the same zero pattern), tasks are bound to them when they run.
enum class scalar_role : std::uint8_t { zero, one, minus_one, alpha, beta, conj_alpha };

/// One tile operation of a task. op holds the kind, flags, sizes and kernel; its scalars and its
/// operands' data are bound when the task runs, to tiles a (and b) read and the output tile c.
/// Where a step's operand starts inside its tile (element row i, column j): steps on part of a
/// tile (LU's block columns: the diagonal block, the rows below it).
struct tile_offset {
    index_t i = 0, j = 0;
};

struct task_step {
    tile_op op;
    int a = -1, b = -1;  ///< tiles read (-1: unused); may be one of the task's outputs
    int c = -1;          ///< the output tile written
    scalar_role alpha = scalar_role::one, beta = scalar_role::one;
    tile_offset a_at, b_at, c_at;  ///< the operands' first elements in their tiles (op's sizes say how far)
};

struct task_output {
    int tile = -1;
    bool load = true;  ///< its current value is read (false: every element is overwritten)
    tile_region region = tile_region::full;
};

struct tile_task {
    std::vector<task_output> outputs;  ///< resident on the device for the whole task
    std::vector<task_step> steps;      ///< run in order
    double flops = 0;
    /// The device (its index in the run's list) that runs it; -1: any, from the shared queue.
    /// A static split (GEMM's row panels); when that device is lost its tasks go to any other.
    int device = -1;
    // ---- set by task_graph::finish() ----
    std::vector<int> inputs;      ///< distinct tiles read that are not outputs
    std::vector<int> successors;  ///< tasks that wait for this one
    int predecessors = 0;
    double priority = 0;  ///< flops on the longest path from this task to the end, its own included
};

struct tile_position {
    int operand = 0;
    index_t i = 0, j = 0;          ///< tile coordinates
    index_t row0 = 0, col0 = 0;    ///< first element
    index_t rows = 0, cols = 0;    ///< extent
};

struct task_graph {
    dtype type = dtype::f32;
    std::vector<operand_tiles> operands;
    std::vector<tile_task> tasks;
    int tiles = 0;                 ///< tile ids in use: [0, tiles)
    double total_flops = 0;
    double critical_path_flops = 0;
    std::size_t steps = 0;
    std::size_t edges = 0;

    /// Adds an operand and returns its number.
    int add_operand(index_t rows, index_t cols, index_t tile_rows, index_t tile_cols);
    int tile(int operand, index_t i, index_t j) const {
        const operand_tiles& o = operands[std::size_t(operand)];
        return o.first + int(i * o.tiles_c() + j);
    }
    tile_position where(int tile) const;
    std::size_t tile_bytes(int tile) const;
    std::size_t max_tile_bytes() const;
    /// The bytes of the operand's largest tile (its first; 0 for an empty operand).
    std::size_t max_tile_bytes(int operand) const;
    /// The size of slot a tile takes: its operand's largest tile, so that a ragged tile stays among
    /// its operand's tiles (it once fitted the smaller slots of another operand's panel and, one
    /// more tile than they held, evicted that panel in turn: GEMM f32 4096 at 48 MiB read A twice).
    std::size_t slot_bytes(int tile) const { return max_tile_bytes(where(tile).operand); }
    /// Dependencies, priorities and totals; call once all tasks are added.
    void finish();
};

/// A device's tile slots of one size: a store holds `count` slots of `bytes` each. A tile takes a
/// slot of the smallest class its operand's tiles fit (task_graph::slot_bytes) that has one free
/// or unlocked (the least recently used of them), so operands of different tile sizes (GEMM's A
/// and B panels beside C's tiles) need not each take a slot of the largest tile.
struct slot_class {
    std::size_t bytes = 0;
    int count = 0;
};

/// The slot classes by size (ascending), classes of equal size merged.
std::vector<slot_class> sorted_classes(std::vector<slot_class> classes);
std::size_t total_bytes(const std::vector<slot_class>& classes);

/// Copying plans for devices that cannot address host memory (GPUs, OpenCL devices): a diagonal
/// tile written back by its triangle (`task_output::region`) goes back whole instead, loaded
/// first, where every step of its task that writes it touches only that triangle (syrk, herk,
/// syr2k, her2k, potrf of the same uplo). Its other triangle then holds the caller's values,
/// which the kernels leave as they are, so one copy each way replaces the copy to host staging
/// and the host-side merge of the triangle (on an H200 host, 0.9 ms for a 1024-tile in f64 on
/// the copy-out stream: about 40% of a 4096 SYRK). Other region outputs keep their region.
/// `unread_too`: also outputs whose value is not read (beta = 0), which are then loaded only for
/// their other triangle. Not where several devices share the call: there a task's loaded outputs
/// are kept aside on the host first, for a rerun elsewhere, which costs what the merge saves (an
/// H200 host: syrk f64 8192 on cuda:0,cpu went from 0.038 to 0.046 s).
void write_regions_whole(task_graph& g, bool unread_too);

/// A step running `op` (kind, flags, scalars, kernel as given) on tiles a, b and c: its type and
/// sizes (m, n, k) come from the graph and the tiles' extents, as tile_op documents them.
task_step make_step(const task_graph& g, tile_op op, int a, int b, int c, scalar_role alpha, scalar_role beta);

/// The value of a role for a call's alpha and beta.
inline std::complex<double> scalar_value(scalar_role r, std::complex<double> alpha, std::complex<double> beta) {
    switch (r) {
        case scalar_role::zero: return 0.0;
        case scalar_role::one: return 1.0;
        case scalar_role::minus_one: return -1.0;
        case scalar_role::alpha: return alpha;
        case scalar_role::beta: return beta;
        case scalar_role::conj_alpha: return std::conj(alpha);
    }
    return 0.0;
}

}  // namespace tilestream::detail::engine
