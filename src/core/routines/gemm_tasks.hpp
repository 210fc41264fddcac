// GEMM as tile tasks on the Level 3 engine: the case without dependencies (one task per tile of C,
// its k-steps in order, the first applying beta). The public gemm still runs on its own pipeline
// (core/gemm_engine.cpp); this builder runs GEMM through the task engine for the tests that pin
// both engines to the same results (docs/architecture.md, "What is left").
#pragma once

#include "core/engine/executor.hpp"
#include "core/engine/task_graph.hpp"

#include <tilestream/gemm.hpp>

#include <span>

namespace tilestream::detail::routines {

struct gemm_tiling {
    index_t tile_m = 0, tile_n = 0, tile_k = 0;
    /// Reproducible plans: every step covers one k-block (tile_k is then a multiple of it).
    index_t k_block = 0;
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
};

/// The tasks of C <- alpha op(A) op(B) + beta C: operands A = 0, B = 1, C = 2 as stored.
engine::task_graph build_gemm(const gemm_problem& p, const gemm_tiling& t);

/// Builds and runs GEMM on the task engine (slots: what the devices' smallest budget holds, or in
/// place when they compute on host memory).
template <class T>
engine::run_result gemm_on_tasks(std::span<device* const> devices, op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                                 host_matrix_view<const T> b, T beta, host_matrix_view<T> c, const gemm_tiling& t,
                                 const blas3_run_options& run = {});

}  // namespace tilestream::detail::routines
