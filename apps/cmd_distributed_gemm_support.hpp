// Pieces of `tilestream gemm` over MPI ranks kept apart from the command (cmd_distributed.cpp):
// random block-cyclic operands defined element by element, the distributed Freivalds check, the
// ScaLAPACK anchor, and the merged trace of every rank.
#pragma once

#include <tilestream/distributed.hpp>
#include <tilestream/trace.hpp>
#include <tilestream/verify.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tilestream::cli::ranks {

namespace td = tilestream::distributed;

/// Global index of local index l on process p of a dimension dealt in blocks of b from process 0
/// over np processes.
inline index_t global_index(index_t l, index_t b, int p, int np) { return (l / b) * b * np + index_t(p) * b + l % b; }

/// Element (i, j) of random matrix `id` for `seed`, uniform in [-1, 1) and never near 0: a
/// counter-based generator, so every grid and rank count sees the same global matrices.
double random_element(std::uint64_t seed, int id, index_t i, index_t j);

/// Fills this rank's blocks of m with random_element(seed, id, ...).
template <class T>
void fill_random_blocks(const td::process_grid& g, td::block_cyclic_matrix<T>& m, std::uint64_t seed, int id);

/// Freivalds over the ranks: C x against alpha op(A) (op(B) x) + beta C0 x and y^T C likewise, for
/// 4 + 4 random +-1 vectors, partial sums combined with MPI_Allreduce over `comm` (ranks without
/// matrices pass empty ones). The result's error is the largest residual over ||C||_F (float64),
/// its tolerance max(16, 8 sqrt(k)) u + 8 (sqrt(n) + sqrt(k)) 2^-53.
struct rank_check {
    double error = 0, tolerance = 0, seconds = 0;
    bool finite = true;  ///< false: NaN or Inf in the operands or C (not checked; the check fails)
    bool passed() const { return finite && error <= tolerance; }
};
template <class T>
rank_check check_over_ranks(MPI_Comm comm, const td::process_grid& g, op op_a, op op_b, T alpha,
                            const td::block_cyclic_matrix<T>& a, const td::block_cyclic_matrix<T>& b, T beta,
                            const td::block_cyclic_matrix<T>* c0, const td::block_cyclic_matrix<T>& c, index_t m,
                            index_t n, index_t k, std::uint64_t seed);

/// ScaLAPACK's PxGEMM on the same grid (a BLACS context made over the first P*Q ranks, row-major,
/// as process_grid places them) and the same operands, `repeat` times; seconds is the median of
/// the slowest rank's. Every rank of MPI_COMM_WORLD calls it. Throws when built without ScaLAPACK.
struct rank_anchor {
    std::string name;
    double seconds = 0, gflops = 0;
};
template <class T>
rank_anchor scalapack_anchor(const td::process_grid& g, bool holds, op op_a, op op_b, T alpha,
                             const td::block_cyclic_matrix<T>& a, const td::block_cyclic_matrix<T>& b, T beta,
                             const td::block_cyclic_matrix<T>& c0, index_t m, index_t n, index_t k, int repeat);

/// Every rank's spans (seconds since `origin`, a time all ranks took after one barrier) on rank 0,
/// each device named "rank R: <device>", so a timeline shows one lane group per rank.
std::vector<trace_span> gather_spans(MPI_Comm comm, const std::vector<trace_span>& mine, double origin);

}  // namespace tilestream::cli::ranks
