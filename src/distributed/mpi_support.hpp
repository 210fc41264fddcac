// Inside the distributed layer: block-cyclic index maps, owned MPI requests, element types, and
// the redistribution of a block-cyclic matrix onto another distribution.
#pragma once

#include <tilestream/distributed.hpp>

#include <climits>
#include <exception>
#include <string>

namespace tilestream::distributed {

/// One dimension of a block-cyclic sub-matrix: sub index g is global index g + offset, dealt in
/// blocks of nb from process src over nprocs processes.
struct dim_map {
    index_t nb = 1;
    int src = 0;
    int nprocs = 1;
    index_t offset = 0;

    int owner(index_t g) const { return int(((g + offset) / nb + src) % nprocs); }
    /// Index in the owner's local array (which holds the whole matrix's local part).
    index_t local(index_t g) const { return ((g + offset) / (nb * nprocs)) * nb + (g + offset) % nb; }
    /// Sub indices [0, len) that process p holds: local indices [first_local(p), +owned(len, p)).
    index_t first_local(int p) const { return local_count(offset, nb, p, src, nprocs); }
    index_t owned(index_t len, int p) const { return local_count(offset + len, nb, p, src, nprocs) - first_local(p); }
    /// The sub index where g's block ends.
    index_t block_end(index_t g) const { return g + nb - (g + offset) % nb; }
    bool same_as(const dim_map& o) const {
        return nb == o.nb && src == o.src && nprocs == o.nprocs && offset == o.offset;
    }
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
    ~datatype() {
        if (t_ != MPI_DATATYPE_NULL) MPI_Type_free(&t_);
    }
    MPI_Datatype get() const { return t_; }

private:
    MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

/// Copies the R x C matrix X = op(S) (S the sub-matrix with maps src_rows/src_cols over the grid
/// rows/columns, transposed when `transposed`) onto target maps dst_rows (over grid rows) and
/// dst_cols (over grid columns): `out` receives this rank's part, column-major, leading dimension
/// max(1, local rows). One MPI_Alltoallv over the grid; bytes counted in rep.
template <class T>
void redistribute(const process_grid& grid, const T* src, index_t ld, const dim_map& src_rows, const dim_map& src_cols,
                  bool transposed, const dim_map& dst_rows, const dim_map& dst_cols, index_t rows, index_t cols, T* out,
                  pgemm_report& rep);

}  // namespace tilestream::distributed
