// Inside the distributed layer: block-cyclic index maps, owned MPI requests, element types, and
// the redistribution of a block-cyclic matrix onto another distribution.
#pragma once

#include <tilestream/distributed.hpp>

#include <climits>
#include <exception>
#include <limits>
#include <string>
#include <utility>

namespace tilestream::distributed {

/// How many of the global indices [0, n) of a dimension dealt in a first block of `first` and
/// then blocks of `nb`, from process `src` cyclically over `nprocs`, process `p` holds (PBLAS's
/// PB_Cnumroc with IA = 0; first = nb is ScaLAPACK's NUMROC). Also the local index of global
/// index n on its owner.
inline index_t held_before(index_t n, index_t first, index_t nb, int p, int src, int nprocs) {
    if (n <= 0) return 0;
    const int d = (p - src + nprocs) % nprocs;
    if (n <= first) return d == 0 ? n : 0;
    const index_t rest = n - first, blocks = rest / nb, rem = rest % nb;
    // Blocks after the first are numbered 1, 2, ...; block j is held at distance j % nprocs.
    const index_t whole = d == 0 ? blocks / nprocs : (blocks >= d ? (blocks - d) / nprocs + 1 : 0);
    return (d == 0 ? first : 0) + whole * nb + ((blocks + 1) % nprocs == d ? rem : 0);
}

/// One dimension of a block-cyclic sub-matrix: sub index g is global index g + offset, dealt in a
/// first block of `first` indices (PBLAS's IMB/INB; 0: nb) and then blocks of nb, from process
/// src over nprocs processes.
struct dim_map {
    index_t nb = 1;
    int src = 0;
    int nprocs = 1;
    index_t offset = 0;
    index_t first = 0;

    index_t first_block() const { return first > 0 ? first : nb; }
    /// The block of global index G (0: the first block).
    index_t block_of(index_t G) const { return G < first_block() ? 0 : 1 + (G - first_block()) / nb; }
    int owner(index_t g) const { return int((block_of(g + offset) + src) % nprocs); }
    /// Index in the owner's local array (which holds the whole matrix's local part).
    index_t local(index_t g) const {
        return held_before(g + offset, first_block(), nb, owner(g), src, nprocs);
    }
    /// Sub indices [0, len) that process p holds: local indices [first_local(p), +owned(len, p)).
    index_t first_local(int p) const { return held_before(offset, first_block(), nb, p, src, nprocs); }
    index_t owned(index_t len, int p) const {
        return held_before(offset + len, first_block(), nb, p, src, nprocs) - first_local(p);
    }
    /// The sub index where g's block ends.
    index_t block_end(index_t g) const {
        const index_t G = g + offset, b = block_of(G);
        return first_block() + b * nb - offset;
    }
    bool same_as(const dim_map& o) const {
        return nb == o.nb && src == o.src && nprocs == o.nprocs && offset == o.offset && first_block() == o.first_block();
    }
};

/// A ScaLAPACK array descriptor read from either layout PBLAS accepts: DTYPE 1 (9 entries:
/// DTYPE, CTXT, M, N, MB, NB, RSRC, CSRC, LLD) or DTYPE 2, BLOCK_CYCLIC_INB_2D (11 entries:
/// DTYPE, CTXT, M, N, IMB, INB, MB, NB, RSRC, CSRC, LLD; the first block IMB x INB).
struct block_cyclic_desc {
    int dtype = 1, ctxt = 0;
    index_t m = 0, n = 0, imb = 1, inb = 1, mb = 1, nb = 1;
    int rsrc = 0, csrc = 0;
    index_t lld = 1;
    /// Throws invalid_argument naming `name` when DTYPE is neither 1 nor 2.
    static block_cyclic_desc read(const int* d, const std::string& name);
    /// The 11 entries of the DTYPE 2 form (what PBLAS converts every descriptor to).
    void write11(int* out) const;
};

/// An operand as pgemm sees it: a sub-matrix of a block-cyclic matrix with its descriptor.
struct operand_desc {
    const char* name;
    dim_map rows, cols;
    index_t ld = 1;
};
/// Checks descriptor `desc` of operand `name` and the rows x cols sub-matrix from 1-based (i, j)
/// against grid g; throws invalid_argument naming what is wrong.
operand_desc describe_operand(const char* name, const int* desc, index_t i, index_t j, index_t rows, index_t cols,
                              const process_grid& g);

/// MPI's datatype of T, from the dtype table's tag.
template <class T>
MPI_Datatype mpi_type() {
    switch (dtype_traits(dtype_of<T>()).mpi) {
        case mpi_data_type::float_: return MPI_FLOAT;
        case mpi_data_type::double_: return MPI_DOUBLE;
        case mpi_data_type::c_float_complex: return MPI_C_FLOAT_COMPLEX;
        case mpi_data_type::c_double_complex: return MPI_C_DOUBLE_COMPLEX;
    }
    return MPI_DATATYPE_NULL;
}

/// A quiet NaN of T (in both parts of a complex T): what unwritten local elements hold.
template <class T>
T poison() {
    if constexpr (is_complex_v<T>) {
        const auto nan = std::numeric_limits<real_type_t<T>>::quiet_NaN();
        return T(nan, nan);
    } else {
        return std::numeric_limits<T>::quiet_NaN();
    }
}

/// Throws invalid_argument when a message of `count` elements does not fit MPI's int counts.
inline void check_count(index_t count, const std::string& what) {
    if (count > INT_MAX)
        throw invalid_argument(what + " has " + std::to_string(count) +
                               " elements, more than one MPI message carries (2^31 - 1); use a finer grid");
}

/// An owned non-blocking operation: waited for on destruction (left alone while an exception
/// unwinds: the error path ends the ranks).
class request {
public:
    request() = default;
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    request(request&& o) noexcept : r_(o.r_), call_(o.call_) { o.r_ = MPI_REQUEST_NULL; }
    ~request() {
        if (r_ != MPI_REQUEST_NULL && std::uncaught_exceptions() == 0) MPI_Wait(&r_, MPI_STATUS_IGNORE);
    }
    MPI_Request* slot(const char* call) {
        wait();
        call_ = call;
        return &r_;
    }
    void start_ibcast(void* buf, int count, MPI_Datatype t, int root, MPI_Comm comm) {
        check_mpi(MPI_Ibcast(buf, count, t, root, comm, slot("MPI_Ibcast")), "MPI_Ibcast");
    }
    void wait() {
        if (r_ != MPI_REQUEST_NULL) check_mpi(MPI_Wait(&r_, MPI_STATUS_IGNORE), call_);
    }
    /// Lets MPI progress the operation; true when it is complete.
    bool test() {
        if (r_ == MPI_REQUEST_NULL) return true;
        int done = 0;
        check_mpi(MPI_Test(&r_, &done, MPI_STATUS_IGNORE), call_);
        return done != 0;
    }
    bool active() const { return r_ != MPI_REQUEST_NULL; }

private:
    MPI_Request r_ = MPI_REQUEST_NULL;
    const char* call_ = "MPI request";
};

/// An owned derived datatype (committed, freed on destruction).
class datatype {
public:
    datatype() = default;
    explicit datatype(MPI_Datatype t) : t_(t) { check_mpi(MPI_Type_commit(&t_), "MPI_Type_commit"); }
    datatype(const datatype&) = delete;
    datatype& operator=(const datatype&) = delete;
    datatype(datatype&& o) noexcept : t_(o.t_) { o.t_ = MPI_DATATYPE_NULL; }
    datatype& operator=(datatype&& o) noexcept {
        std::swap(t_, o.t_);
        return *this;
    }
    ~datatype() {
        if (t_ != MPI_DATATYPE_NULL) MPI_Type_free(&t_);
    }
    MPI_Datatype get() const { return t_; }

private:
    MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

/// Copies the R x C matrix X = op(S) (S the sub-matrix with maps src_rows/src_cols over the grid
/// rows/columns; `how` n: as stored, t: transposed, c: conjugate-transposed) onto target maps dst_rows (over grid rows) and
/// dst_cols (over grid columns): `out` receives this rank's part, column-major, leading dimension
/// max(1, local rows). One MPI_Alltoallv over the grid; bytes counted in rep.
template <class T>
void redistribute(const process_grid& grid, const T* src, index_t ld, const dim_map& src_rows, const dim_map& src_cols,
                  op how, const dim_map& dst_rows, const dim_map& dst_cols, index_t rows, index_t cols, T* out,
                  pgemm_report& rep);

}  // namespace tilestream::distributed
