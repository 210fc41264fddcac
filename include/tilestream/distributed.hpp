// The distributed layer over MPI: process grids, SUMMA GEMM on 2-D block-cyclic matrices with
// ScaLAPACK descriptors, .npy files read and written in blocks with MPI-IO, and Jacobi over ranks.
// The only public header that includes <mpi.h>; link tilestream::distributed to use it.
#pragma once

#include <tilestream/context.hpp>
#include <tilestream/device.hpp>
#include <tilestream/error.hpp>
#include <tilestream/jacobi.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/types.hpp>

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tilestream::distributed {

/// An MPI call that failed: the message names the call, the rank and MPI's error string.
class mpi_error : public error {
public:
    using error::error;
};

/// An error every rank detected alike (a bad --grid, a malformed input file read by rank 0 and
/// broadcast): rank 0 alone prints it and every rank exits with the same code, no MPI_Abort.
class collective_error : public invalid_argument {
public:
    using invalid_argument::invalid_argument;
};

/// A failure while running that every rank learned of (an output that could not be written, an
/// input that could not be read by some rank): rank 0 prints it once and every rank exits 3.
class collective_failure : public error {
public:
    using error::error;
};

/// Every rank of `comm` passes what it found (empty: nothing). When any rank found something,
/// every rank throws the same exception with the first failing rank's message ("rank R: ..."
/// when R is not 0): collective_error for bad input (`input` true), collective_failure otherwise.
/// Lets ranks agree before a collective call that one of them could not make.
void agree_on_errors(MPI_Comm comm, const std::string& mine, bool input);

/// Throws mpi_error("<call> failed on rank R: <MPI's text>") when rc is not MPI_SUCCESS.
void check_mpi(int rc, const char* call);

/// MPI_Init_thread (funneled: only the calling thread talks to MPI) and MPI_Finalize, once per
/// process; MPI_COMM_WORLD returns errors instead of aborting, so every call can be checked.
class environment {
public:
    environment(int* argc, char*** argv);
    ~environment();
    environment(const environment&) = delete;
    environment& operator=(const environment&) = delete;
    int rank() const { return rank_; }
    int size() const { return size_; }

private:
    int rank_ = 0, size_ = 1;
    bool initialized_here_ = false;
};

/// Whether this process was started by mpirun with more than one rank (OMPI_COMM_WORLD_SIZE,
/// PMI_SIZE), read before MPI_Init so a plain run never initializes MPI.
bool launched_with_ranks();

/// An owned communicator (MPI_Comm_free on destruction; the world communicator is never freed).
class communicator {
public:
    communicator() = default;
    /// Takes ownership of `c` when `owned`.
    explicit communicator(MPI_Comm c, bool owned = true);
    communicator(communicator&& o) noexcept : comm_(o.comm_), owned_(o.owned_) { o.comm_ = MPI_COMM_NULL; o.owned_ = false; }
    communicator& operator=(communicator&& o) noexcept;
    communicator(const communicator&) = delete;
    communicator& operator=(const communicator&) = delete;
    ~communicator();
    MPI_Comm get() const { return comm_; }
    int rank() const;
    int size() const;

private:
    MPI_Comm comm_ = MPI_COMM_NULL;
    bool owned_ = false;
};

/// P x Q processes, rank r of `comm` at (r / Q, r % Q) (row-major, BLACS's default and
/// MPI_Type_create_darray's), with a communicator per process row and per process column.
class process_grid {
public:
    /// Throws collective_error when rows * cols differs from comm's size (every rank agrees).
    process_grid(MPI_Comm comm, int rows, int cols);
    /// A grid whose coordinates come from elsewhere (a BLACS context): (my_row, my_col) in a
    /// rows x cols grid over `comm`, which may order its ranks any way.
    process_grid(MPI_Comm comm, int rows, int cols, int my_row, int my_col);
    MPI_Comm comm() const { return comm_; }
    MPI_Comm row_comm() const { return row_.get(); }  ///< my process row, ranked by column
    MPI_Comm col_comm() const { return col_.get(); }  ///< my process column, ranked by row
    int rows() const { return rows_; }
    int cols() const { return cols_; }
    int my_row() const { return my_row_; }
    int my_col() const { return my_col_; }
    int rank() const { return rank_; }
    /// The rank in comm() of the process at (row, col).
    int rank_at(int row, int col) const { return ranks_[std::size_t(row) * std::size_t(cols_) + std::size_t(col)]; }

private:
    void split();
    std::vector<int> ranks_;  ///< rank_at, row-major
    MPI_Comm comm_ = MPI_COMM_NULL;
    communicator row_, col_;
    int rows_ = 1, cols_ = 1, my_row_ = 0, my_col_ = 0, rank_ = 0;
};

/// c layers of P x Q grids over the P*Q*c ranks of `comm` (2.5D GEMM): rank r on layer r / (P*Q),
/// at position r % (P*Q) of its layer's grid (row-major), with a communicator per fiber (the c
/// ranks at one grid position, ranked by layer). One layer is a process_grid over `comm` itself.
class layered_grid {
public:
    /// Throws collective_error when rows * cols * layers differs from comm's size.
    layered_grid(MPI_Comm comm, int rows, int cols, int layers);
    MPI_Comm comm() const { return comm_; }
    const process_grid& layer() const { return *layer_; }  ///< my layer's P x Q grid
    MPI_Comm fiber_comm() const { return fiber_.get(); }   ///< my position on every layer, ranked by layer
    int layers() const { return layers_; }
    int my_layer() const { return my_layer_; }

private:
    MPI_Comm comm_ = MPI_COMM_NULL;
    communicator layer_comm_, fiber_;  // declared before layer_: the grid's communicator outlives it
    std::unique_ptr<process_grid> layer_;
    int layers_ = 1, my_layer_ = 0;
};

/// Parses "PxQ" (e.g. "2x2", "1x3"); throws invalid_argument naming the text.
std::pair<int, int> parse_grid(std::string_view text);
/// The most square P x Q = ranks with P <= Q.
std::pair<int, int> square_grid(int ranks);

/// The P x Q = ranks whose SUMMA receives the fewest words per rank for an m x n x k product
/// (model_pgemm_traffic; ties to the squarer grid).
std::pair<int, int> choose_gemm_grid(index_t m, index_t n, index_t k, int ranks);

/// The rows and columns of a .npy file as rank 0 reads them, on every rank of comm (an
/// unreadable file is a collective_error everywhere).
std::pair<index_t, index_t> npy_shape(MPI_Comm comm, const std::string& path);
/// The element type of a .npy file as rank 0 reads it, on every rank of comm.
dtype npy_dtype(MPI_Comm comm, const std::string& path);

/// ScaLAPACK's NUMROC: how many of n elements in blocks of nb, dealt cyclically from process
/// `src` over `nprocs`, process `iproc` holds.
index_t local_count(index_t n, index_t nb, int iproc, int src, int nprocs);

/// Options of a distributed GEMM; each rank multiplies its part on its own devices.
struct pgemm_options {
    /// This rank's devices, opened once: each local multiply is one call of it (null: a context
    /// on one CPU thread is opened for the call).
    tilestream::context* context = nullptr;
    /// SUMMA panel width over k when A or B has to be redistributed (0: 256); an operand that
    /// is already aligned with C keeps its own block width.
    index_t panel = 0;
    /// Each local multiply's plan and run options (strategy, tiles, kernel; run.trace receives
    /// the devices' spans and a span per wait for a panel broadcast, device "mpi").
    gemm_call_options call;
    /// When > 0, k is added in k-blocks of this width from the start of op(A)'s columns, one local
    /// multiply per k-block in order of k, whatever the grid and the operands' blocks (the pieces
    /// of a k-block held by different processes are broadcast into one panel first). With a
    /// context whose reproducible option is set and k_block its plans' k-block, every element of
    /// C then gets the same operations in the same order on any grid and rank count.
    index_t k_block = 0;
};

/// What one rank did in a distributed GEMM.
struct pgemm_report {
    int grid_rows = 1, grid_cols = 1;
    index_t panels = 0;          ///< SUMMA steps
    index_t panel_width = 0;     ///< the widest
    bool redistributed_a = false, redistributed_b = false;  ///< op(A)/op(B) moved to C's alignment first
    int layers = 1;              ///< c of a 2.5D run (pgemm on a layered_grid)
    index_t layer_k = 0;         ///< the k this rank's layer multiplied
    std::size_t bytes_sent = 0;      ///< by this rank: panels it broadcast (once per receiver) and redistribution
    std::size_t bytes_received = 0;  ///< by this rank
    double seconds = 0;
};

/// C(ic:, jc:) <- alpha*op(A(ia:, ja:))*op(B(ib:, jb:)) + beta*C(ic:, jc:), every matrix 2-D
/// block-cyclic as ScaLAPACK describes it: desc = {1, ctxt, M, N, MB, NB, RSRC, CSRC, LLD} or
/// PBLAS's DTYPE 2 {2, ctxt, M, N, IMB, INB, MB, NB, RSRC, CSRC, LLD} (a first block IMB x INB of
/// its own); ctxt is not read (`grid` says where each process sits), local arrays column-major
/// with leading dimension LLD, ia..jc 1-based. SUMMA with two panel broadcasts in flight while the
/// local GEMM runs; an operand not aligned with C (transposed, other block rows) is first
/// redistributed. Collective over the grid. Throws invalid_argument naming a bad descriptor.
/// T is float, double, std::complex<float> or std::complex<double>; op c is the conjugate
/// transpose (applied while the operand is redistributed; on real data the same as t).
template <class T>
pgemm_report pgemm(const process_grid& grid, op op_a, op op_b, index_t m, index_t n, index_t k, T alpha,
                   const T* a, index_t ia, index_t ja, const int* desca, const T* b, index_t ib, index_t jb,
                   const int* descb, T beta, T* c, index_t ic, index_t jc, const int* descc,
                   const pgemm_options& options = {});

/// 2.5D: C(ic:, jc:) <- alpha*op(A)*op(B) + beta*C with A, B and C block-cyclic over layer 0's
/// grid exactly as pgemm takes them (every rank passes the same descriptors; ranks on other layers
/// pass null arrays: their data is not read). k is cut into c slices; layer 0 scatters slice l of
/// op(A) and op(B) to layer l along each fiber (MPI_Scatterv: a layer receives only what it
/// multiplies), every layer runs SUMMA on its slice (layer 0 with beta, the others into a zeroed
/// copy of their part of C), and the partial sums are reduced onto layer 0's C (MPI_Reduce). One
/// layer is pgemm on layer().
template <class T>
pgemm_report pgemm(const layered_grid& grid, op op_a, op op_b, index_t m, index_t n, index_t k, T alpha,
                   const T* a, index_t ia, index_t ja, const int* desca, const T* b, index_t ib, index_t jb,
                   const int* descb, T beta, T* c, index_t ic, index_t jc, const int* descc,
                   const pgemm_options& options = {});

/// The first sub index of k that layer `layer` of `layers` multiplies (k * layer / layers).
inline index_t layer_k_begin(index_t k, int layer, int layers) { return k * layer / layers; }

/// The communication model of a SUMMA on this grid (words = elements, per rank, received):
/// SUMMA's; the lower bound's order 2mnk/(p sqrt(M)) with M the words each rank holds (no
/// constant: an order, not a bound); the memory-independent bound 3(mnk/p)^(2/3) - (mk+kn+mn)/p
/// (Ballard et al.); and PDGEMM's (the same panels, plus a transpose of a transposed operand).
/// With c layers (2.5D on P x Q x c ranks): SUMMA's words over k/c per layer, plus the slices
/// of A and B scattered from layer 0 and the partial C sums reduced onto it; the sums are exact
/// for operands aligned with C (the mean over the ranks of words sent, which equals the mean of
/// words received), transposes add an estimate. M in the lower bound is the words a rank holds
/// under this plan, (mk + kn + mn) / (P*Q). pdgemm_words is for a 2-D P x Q grid (layers = 1;
/// 0 otherwise).
struct pgemm_traffic {
    double summa_words = 0, lower_bound_words = 0, memory_independent_words = 0, pdgemm_words = 0;
    double replicate_words = 0;     ///< the k-slices of A and B sent to layers 1..c-1
    double reduce_words = 0;        ///< partial sums of C sent to layer 0
    double redistribute_words = 0;  ///< transposed operands moved onto C's rows or columns (an estimate)
    double words = 0;               ///< the plan's total: summa + replicate + reduce + redistribute
    /// The busiest rank's sent or received words (SUMMA's panels taken as even): with layers a
    /// layer-0 rank, which sends the other layers' slices and receives the partial sums.
    double busiest_words = 0;
    double memory_words = 0;        ///< the most a rank holds (a layer-0 rank): its A, B, C, panels, buffers
};
pgemm_traffic model_pgemm_traffic(op op_a, op op_b, index_t m, index_t n, index_t k, int grid_rows, int grid_cols,
                                  int layers = 1, index_t panel = 256);

/// How pgemm runs over `ranks` ranks: a P x Q grid, c layers, and the models of the candidates.
struct pgemm_rank_plan {
    int grid_rows = 1, grid_cols = 1, layers = 1;
    pgemm_traffic traffic;
    bool fits = true;  ///< the modelled memory per rank is within the limit
    struct candidate {
        int grid_rows, grid_cols, layers;
        double words, busiest_words, memory_bytes;
        bool fits;
    };
    std::vector<candidate> candidates;  ///< the best grid for each c considered
};
/// Picks P x Q x c = ranks for an m x n x k product with `word_bytes` elements: among the layer
/// counts c that divide `ranks` (c <= k) and the P x Q grids of ranks / c, the fewest words per
/// rank (model_pgemm_traffic) whose modelled memory per rank fits `rank_memory_bytes` (0: no limit);
/// ties go to fewer layers, then to the squarer grid; when no c > 1 fits, c = 1. `layers` > 0
/// forces c; `grid_rows` and `grid_cols` > 0 force the layer grid (c = ranks / (P*Q) unless
/// forced). Throws collective_error naming a forced grid or layer count that does not fit `ranks`.
pgemm_rank_plan plan_pgemm(op op_a, op op_b, index_t m, index_t n, index_t k, int ranks, std::size_t word_bytes,
                           index_t panel, std::size_t rank_memory_bytes, int layers = 0, int grid_rows = 0,
                           int grid_cols = 0);

/// This rank's blocks of a rows x cols matrix dealt in block x block blocks from process (0, 0)
/// (ScaLAPACK's descriptor {1, 0, rows, cols, block, block, 0, 0, LLD}), column-major; ranks that
/// hold no matrix (other layers of a 2.5D grid) keep `local` empty.
template <class T>
struct block_cyclic_matrix {
    index_t rows = 0, cols = 0, block = 1, local_rows = 0, local_cols = 0;
    int desc[9] = {};
    std::vector<T> local;  ///< LLD x local_cols, NaN until written
    T* data() { return local.empty() ? nullptr : local.data(); }
    const T* data() const { return local.empty() ? nullptr : local.data(); }
    index_t ld() const { return desc[8]; }
    /// Throws collective_error for a block below 1 or extents beyond int.
    static block_cyclic_matrix on(const process_grid& g, index_t rows, index_t cols, index_t block, bool holds = true);
};
/// Every rank checks that it can open each path for reading, then the ranks agree: a file one
/// rank cannot read is a collective_error naming that rank on all (before any collective open).
void check_inputs_readable(MPI_Comm comm, const std::vector<std::string>& paths);
/// Reads this rank's blocks of a .npy file (its shape and dtype must be m's) with MPI-IO.
template <class T>
void read_npy_blocks(const process_grid& grid, const std::string& path, block_cyclic_matrix<T>& m);
/// Writes m to `path` as .npy (C order) with MPI-IO, atomically (see npy_gemm below).
template <class T>
void write_npy_blocks(const process_grid& grid, const std::string& path, const block_cyclic_matrix<T>& m);

/// GEMM on .npy files: every rank reads only its blocks of A, B (and C when beta != 0) with
/// MPI-IO, runs pgemm and writes its blocks of C into `out` (header by rank 0, data by all, a
/// temporary file renamed into place when every rank wrote). Matrices are block-cyclic with
/// `block` x `block` blocks over `grid`.
struct npy_gemm_request {
    std::string a, b, c, out;  ///< c empty: beta must be 0
    op op_a = op::n, op_b = op::n;
    scalar alpha = 1, beta = 0;  ///< complex for c32/c64 files (the imaginary part is ignored for real ones)
    index_t block = 64;
};
struct npy_gemm_result {
    dtype type = dtype::f32;
    index_t m = 0, n = 0, k = 0;
    pgemm_report report;
};
/// Over c layers only layer 0 reads and writes the files (its P x Q grid's blocks); every rank
/// learns the headers and any error. Before any collective I/O the ranks agree that each can
/// read its inputs (an input missing on one rank is an error on all, not a hang) and that each
/// has the memory its blocks and panels need. The output is a temporary beside `out` (rank 0
/// reserves its bytes first, so a full file system fails before the run writes), registered for
/// removal on terminating signals; every MPI-IO write, sync and close status is checked on
/// every rank, and the ranks agree before rank 0 renames it into place: on any failure it is
/// removed and `out` keeps what it held (collective_failure).
npy_gemm_result npy_gemm(const layered_grid& grid, const npy_gemm_request& request, const pgemm_options& options = {});

/// Jacobi over ranks, three levels: the interior of an ny x nx field cut over a P x Q MPI_Cart
/// grid of ranks, each rank's part cut over its devices by the one-process engine (rows, cols,
/// tiles), each device sweeping its part. Each iteration the engine sweeps its edge strips first;
/// they leave with MPI_Isend/Irecv while the devices sweep the interior. The residual is combined
/// over the ranks (MPI_Iallgather) and examined one check late. Each point gets
/// 0.25*((N+S)+(W+E)) in T, so the field is bitwise the one-process one whatever the grid of
/// ranks, the devices per rank and their decomposition.
struct distributed_jacobi_options {
    int grid_rows = 0, grid_cols = 0;  ///< 0, 0: the most square grid with more rows
    index_t iters = 1000;
    index_t check_every = 10;
    double tol = 0;
    /// This rank's devices (they outlive the call; empty: one CPU device on one thread).
    std::vector<device*> devices;
    jacobi_decomposition decomposition;  ///< of the rank's part over its devices
    bool overlap = true;                 ///< edge strips first, their halos sent during the interior
};
struct distributed_jacobi_report {
    int grid_rows = 1, grid_cols = 1;
    jacobi_decomposition decomposition;  ///< of this rank's part over its devices (resolved)
    index_t iterations = 0;
    double residual = 0;  ///< sqrt of the sum over ranks of sum((u_new - u)^2) at the last check
    bool converged = false;
    double seconds = 0;
    std::size_t halo_bytes = 0;         ///< sent by this rank to other ranks
    std::size_t device_halo_bytes = 0;  ///< sent between this rank's devices
};
/// Runs on the default starting field (fill_jacobi_start); when `gather` is set, rank 0 receives
/// the whole ny x nx field in it (row-major) and the other ranks leave it empty.
template <class T>
distributed_jacobi_report distributed_jacobi(MPI_Comm comm, index_t nx, index_t ny,
                                             const distributed_jacobi_options& options, std::vector<T>* gather);

}  // namespace tilestream::distributed
