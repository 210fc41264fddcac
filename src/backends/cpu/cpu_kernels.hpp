// GEMM and Jacobi kernels of the CPU backend; each runs on the device's thread pool.
#pragma once

#include "thread_pool.hpp"

#include <tilestream/kernels.hpp>
#include <tilestream/tile_ops.hpp>

#include <cstddef>
#include <functional>

namespace tilestream::cpu {

namespace detail {
/// Test hook: asked before a tiled-GEMM packing buffer grows to `bytes`; returning false makes
/// that allocation fail as when memory is exhausted (std::bad_alloc). Empty in normal runs.
extern std::function<bool(std::size_t bytes)> packing_allocation_hook;
}  // namespace detail

/// One output element per work item, the parallel loop over C's elements.
void gemm_naive(const gemm_call& call, thread_pool& pool);
/// Cache-blocked GEMM with packed A and B panels and a register-blocked micro-kernel (BLIS style).
void gemm_tiled(const gemm_call& call, thread_pool& pool);
/// OpenBLAS through CBLAS, one single-threaded call per worker on its block of C, so concurrent
/// devices never share OpenBLAS's own thread pool.
/// OpenBLAS: one single-threaded call per worker on its block of C, or (openblas_threads, for the
/// process's only CPU device) one call with OpenBLAS's own threads, as many as the pool has.
void gemm_vendor(const gemm_call& call, thread_pool& pool, bool openblas_threads);
void gemm_vendor(const gemm_call& call, thread_pool& pool);  ///< split over the pool's workers

/// The same kernels on the calling thread, for the context's direct path and the items of a batch:
/// `call.kernel` as the device runs it, vendor with `openblas_threads` of OpenBLAS's own threads
/// (1: single-threaded), the others sequentially. Nothing is allocated but the tiled kernel's
/// per-thread packing buffers, once.
void gemm_on_calling_thread(const gemm_call& call, int openblas_threads);
void gemm_tiled_serial(const gemm_call& call);
/// Products [begin, end) of a batch with the tiled kernel on the calling thread (blocking chosen once).
void gemm_tiled_serial_items(const gemm_batched_call& batch, index_t begin, index_t end);
/// Products [begin, end) of a batch on the calling thread, one after the other, single-threaded.
void gemm_items_on_calling_thread(const gemm_batched_call& batch, index_t begin, index_t end);
/// A batch on the pool: small products split over the workers, one thread each; large ones (or
/// fewer products than workers) one after the other on the whole pool.
void gemm_batched(const gemm_batched_call& batch, thread_pool& pool, bool openblas_threads);
void gemm_naive_serial(const gemm_call& call);
/// Sets OpenBLAS's (process-wide) thread count, under one lock for every caller.
void set_openblas_threads(int n);

/// The Level 3 tile operations (kinds other than gemm) through OpenBLAS, as gemm_vendor: one call
/// with OpenBLAS's threads, or the tile split over the pool's workers (blas3_vendor.cpp).
void tile_vendor(const tile_op& op, thread_pool& pool, bool openblas_threads);
/// Whether tile_vendor has a routine for this kind and type.
bool tile_vendor_supports(tile_kind kind, dtype type);

/// One tile operation on host memory through OpenBLAS/LAPACK from the calling thread, with
/// OpenBLAS's threads over every host core: for the staged tiles of a device without the kind (a
/// GPU's or OpenCL device's potrf or getrf panel, on its factorization's critical path), instead of
/// the reference loops. False when OpenBLAS has no routine for it.
bool tile_vendor_on_calling_thread(const tile_op& op);

/// LU's panel (getrf: LAPACK's ?getrf_ from OpenBLAS, with its threads when `openblas_threads`)
/// and row interchanges (laswp) on one tile (lu_vendor.cpp).
void lu_vendor(const tile_op& op, thread_pool& pool, bool openblas_threads);
/// The same with `threads` OpenBLAS threads (1: single-threaded on the calling thread).
void lu_vendor_with(const tile_op& op, int threads);
bool lu_vendor_supports(tile_kind kind);

/// Jacobi sweep: rows split over the workers, inner loop vectorised.
void jacobi_sweep(const jacobi_call& call, thread_pool& pool);

}  // namespace tilestream::cpu
