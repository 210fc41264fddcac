// psgemm_/pdgemm_ with ScaLAPACK's Fortran interface over tilestream::distributed::pgemm, so a
// ScaLAPACK program links tilestream_scalapack before ScaLAPACK and multiplies with tilestream.
// The BLACS context of C's descriptor says where each process sits; an error ends every rank.
#include "distributed/mpi_support.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

extern "C" {
void Cblacs_gridinfo(int context, int* rows, int* cols, int* my_row, int* my_col);
void Cblacs_get(int context, int what, int* value);
MPI_Comm Cblacs2sys_handle(int system_context);
}

namespace {

namespace td = tilestream::distributed;

/// One process grid per BLACS context, made on first use (the row and column communicators);
/// BLACS reuses the number of an exited context, so a context whose shape changed gets a new one.
const td::process_grid& grid_of(int context) {
    static std::map<int, std::unique_ptr<td::process_grid>> grids;
    auto& g = grids[context];
    int rows = 0, cols = 0, my_row = -1, my_col = -1, system = 0;
    Cblacs_gridinfo(context, &rows, &cols, &my_row, &my_col);
    if (g && (g->rows() != rows || g->cols() != cols || g->my_row() != my_row || g->my_col() != my_col)) g.reset();
    if (!g) {
        Cblacs_get(context, 10, &system);
        MPI_Comm comm = Cblacs2sys_handle(system);
        int size = 0;
        td::check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
        if (size != rows * cols)
            throw tilestream::invalid_argument("BLACS context " + std::to_string(context) + " is a " + std::to_string(rows) +
                                               "x" + std::to_string(cols) + " grid over " + std::to_string(size) +
                                               " processes; tilestream needs every process of the system context in it");
        g = std::make_unique<td::process_grid>(comm, rows, cols, my_row, my_col);
    }
    return *g;
}

/// This process's devices, opened on the first call: TILESTREAM_DEVICES (default "cpu") with
/// TILESTREAM_CPU_THREADS threads per CPU device (default 1: ScaLAPACK programs run a rank per core).
tilestream::context& rank_context() {
    static tilestream::context ctx = [] {
        const char* spec = std::getenv("TILESTREAM_DEVICES");
        const char* threads = std::getenv("TILESTREAM_CPU_THREADS");
        tilestream::context_options o;
        o.cpu_threads = threads ? std::max(1, std::atoi(threads)) : 1;
        return tilestream::context(spec ? spec : "cpu", o);
    }();
    return ctx;
}

template <class T>
void fortran_pgemm(const char* name, const char* transa, const char* transb, const int* m, const int* n, const int* k,
                   const T* alpha, const T* a, const int* ia, const int* ja, const int* desca, const T* b, const int* ib,
                   const int* jb, const int* descb, const T* beta, T* c, const int* ic, const int* jc, const int* descc) {
    int row = -1, col = -1, rows = 0, cols = 0;
    Cblacs_gridinfo(descc[1], &rows, &cols, &row, &col);
    if (row < 0) return;  // not in the grid: nothing to do, as in ScaLAPACK
    try {
        auto op_of = [](const char* t) {
            const char ch = char(*t | 0x20);
            if (ch == 'n') return tilestream::op::n;
            if (ch == 't' || ch == 'c') return tilestream::op::t;
            throw tilestream::invalid_argument(std::string("TRANS is '") + *t + "' (N, T or C)");
        };
        td::pgemm_options po;
        po.context = &rank_context();
        td::pgemm<T>(grid_of(descc[1]), op_of(transa), op_of(transb), *m, *n, *k, *alpha, a, *ia, *ja, desca, b, *ib, *jb,
                     descb, *beta, c, *ic, *jc, descc, po);
    } catch (const std::exception& e) {
        int rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        std::fprintf(stderr, "%s (tilestream): rank %d: error: %s\n", name, rank, e.what());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

}  // namespace

extern "C" {

void psgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
             const float* a, const int* ia, const int* ja, const int* desca, const float* b, const int* ib, const int* jb,
             const int* descb, const float* beta, float* c, const int* ic, const int* jc, const int* descc) {
    fortran_pgemm<float>("psgemm_", transa, transb, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic, jc,
                         descc);
}

void pdgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
             const double* a, const int* ia, const int* ja, const int* desca, const double* b, const int* ib,
             const int* jb, const int* descb, const double* beta, double* c, const int* ic, const int* jc,
             const int* descc) {
    fortran_pgemm<double>("pdgemm_", transa, transb, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic,
                          jc, descc);
}

}  // extern "C"
