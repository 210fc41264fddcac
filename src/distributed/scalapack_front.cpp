// psgemm_/pdgemm_/pcgemm_/pzgemm_ with ScaLAPACK's Fortran interface and PBLAS's conventions over
// tilestream::distributed::pgemm, so a ScaLAPACK program links (or preloads) tilestream_scalapack
// before ScaLAPACK and multiplies with tilestream. Arguments are checked as PBLAS checks them and an
// illegal one is reported with PBLAS's number, then the call returns (no MPI_Abort); DTYPE 1 and 2
// descriptors, any BLACS grid (row- or column-major, a subset of the processes), every offset.
#include "distributed/mpi_support.hpp"
#include <tilestream/pblas.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

extern "C" {
void Cblacs_gridinfo(int context, int* rows, int* cols, int* my_row, int* my_col);
void Cblacs_get(int context, int what, int* value);
MPI_Comm Cblacs2sys_handle(int system_context);
void Cigamx2d(int context, const char* scope, const char* top, int m, int n, int* a, int lda, int* ra, int* ca, int ldia,
              int rdest, int cdest);
/// ScaLAPACK's error handler (TOOLS/pxerbla.f): prints and returns; a program may define its own.
void pxerbla_(int* context, const char* routine, int* info, std::size_t routine_len);
}

namespace {

namespace td = tilestream::distributed;
using tilestream::index_t;

/// One row per precision: the PBLAS name (for messages and the error handler) and the Fortran
/// symbol of ScaLAPACK's own routine (where an operand replicated over the grid is passed on).
/// TRANS 'C' is op::c: the conjugate transpose for pcgemm_/pzgemm_, the transpose for real data.
template <class T>
struct pblas_gemm;
template <>
struct pblas_gemm<float> {
    static constexpr const char* name = "PSGEMM";
    static constexpr const char* symbol = "psgemm_";
};
template <>
struct pblas_gemm<double> {
    static constexpr const char* name = "PDGEMM";
    static constexpr const char* symbol = "pdgemm_";
};
template <>
struct pblas_gemm<std::complex<float>> {
    static constexpr const char* name = "PCGEMM";
    static constexpr const char* symbol = "pcgemm_";
};
template <>
struct pblas_gemm<std::complex<double>> {
    static constexpr const char* name = "PZGEMM";
    static constexpr const char* symbol = "pzgemm_";
};

// PBLAS's descriptor entries (DTYPE 2 layout, 0-based) and the multiplier of its error numbers.
enum : int { dtype_ = 0, ctxt_ = 1, m_ = 2, n_ = 3, imb_ = 4, inb_ = 5, mb_ = 6, nb_ = 7, rsrc_ = 8, csrc_ = 9, lld_ = 10 };
constexpr int descmult = 100, bignum = 10000 * descmult;

/// A descriptor in PBLAS's internal 11-entry form (PB_CargFtoC): DTYPE 1 converted, DTYPE 2 as
/// given, any other DTYPE kept with its context so the check names the DTYPE.
struct desc11 {
    int e[11];
    explicit desc11(const int* d) {
        if (d[0] == 1 || d[0] == 2) {
            td::block_cyclic_desc::read(d, "").write11(e);
        } else {
            const int v[11] = {d[0], d[1], 0, 0, 1, 1, 1, 1, 0, 0, 1};
            std::copy(v, v + 11, e);
        }
    }
};

struct grid_info {
    int rows = -1, cols = -1, row = -1, col = -1;
};

/// PBLAS's check of one matrix operand (PB_Cchkmat): M at position mpos, N at npos, the
/// descriptor at dpos, IA and JA just before it. `info` carries the smallest position found so
/// far (PBLAS's encoding: -(i*100 + j) for entry j of argument i, -i for a scalar); `why` says
/// what was wrong with the smallest one.
void check_matrix(const grid_info& g, int ctxt, const char* name, index_t m, int mpos0, index_t n, int npos0, index_t ia,
                  index_t ja, const desc11& d, int dpos0, int& info, std::string& why) {
    int best = info >= 0 ? bignum : info < -descmult ? -info : -info * descmult;
    auto found = [&](int pos, const std::string& text) {
        if (pos < best) {
            best = pos;
            why = text;
        }
    };
    const int mpos = mpos0 * descmult, npos = npos0 * descmult, iapos = (dpos0 - 2) * descmult,
              japos = (dpos0 - 1) * descmult, dpos = dpos0 * descmult + 1;
    const std::string x(name);
    auto finish = [&] { info = best == bignum ? 0 : best % descmult == 0 ? -(best / descmult) : -best; };
    if (m < 0) found(mpos, "the number of rows of sub(" + x + ") is " + std::to_string(m) + ", it must be at least 0");
    if (n < 0) found(npos, "the number of columns of sub(" + x + ") is " + std::to_string(n) + ", it must be at least 0");
    if (ia < 1) found(iapos, "I" + x + " is " + std::to_string(ia) + ", it must be at least 1");
    if (ja < 1) found(japos, "J" + x + " is " + std::to_string(ja) + ", it must be at least 1");
    const int* e = d.e;
    if (e[dtype_] != 2) {
        found(dpos + dtype_, "DESC" + x + " has DTYPE " + std::to_string(e[dtype_]) + " (PBLAS accepts 1 or 2)");
        return finish();
    }
    if (e[ctxt_] != ctxt) {
        found(dpos + ctxt_, "DESC" + x + "[CTXT_] = " + std::to_string(e[ctxt_]) + " does not match the context " +
                                std::to_string(ctxt) + " of the other operands");
        return finish();
    }
    const char* names[11] = {"DTYPE_", "CTXT_", "M_", "N_", "IMB_", "INB_", "MB_", "NB_", "RSRC_", "CSRC_", "LLD_"};
    auto entry = [&](int j, const std::string& rule) {
        found(dpos + j, "DESC" + x + "[" + names[j] + "] = " + std::to_string(e[j]) + ", it " + rule);
    };
    for (int j : {imb_, inb_, mb_, nb_})
        if (e[j] < 1) entry(j, "must be at least 1");
    if (e[rsrc_] < -1 || e[rsrc_] >= g.rows) entry(rsrc_, "must be -1 or in [0, " + std::to_string(g.rows) + ")");
    if (e[csrc_] < -1 || e[csrc_] >= g.cols) entry(csrc_, "must be -1 or in [0, " + std::to_string(g.cols) + ")");
    if (m == 0 || n == 0) {
        if (e[m_] < 0) entry(m_, "must be at least 0");
        if (e[n_] < 0) entry(n_, "must be at least 0");
        if (e[lld_] < 1) entry(lld_, "must be at least 1");
        return finish();
    }
    if (e[m_] < 1) entry(m_, "must be at least 1");
    if (e[n_] < 1) entry(n_, "must be at least 1");
    if (e[m_] >= 1 && e[n_] >= 1) {
        if (ia - 1 + m > e[m_])
            found(iapos, "sub(" + x + ") is out of bounds: " + std::to_string(m) + " rows from I" + x + " = " +
                             std::to_string(ia) + " but DESC" + x + "[M_] = " + std::to_string(e[m_]));
        if (ja - 1 + n > e[n_])
            found(japos, "sub(" + x + ") is out of bounds: " + std::to_string(n) + " columns from J" + x + " = " +
                             std::to_string(ja) + " but DESC" + x + "[N_] = " + std::to_string(e[n_]));
    }
    if (best == bignum) {
        // Replicated rows (RSRC = -1): every process row holds them all.
        const index_t np = e[rsrc_] < 0 ? e[m_] : td::held_before(e[m_], e[imb_], e[mb_], g.row, e[rsrc_], g.rows);
        const index_t nq = e[csrc_] < 0 ? e[n_] : td::held_before(e[n_], e[inb_], e[nb_], g.col, e[csrc_], g.cols);
        if (e[lld_] < std::max<index_t>(1, np)) {
            if (e[lld_] < 1) entry(lld_, "must be at least 1");
            else if (nq > 0) entry(lld_, "must be at least " + std::to_string(std::max<index_t>(1, np)));
        }
    }
    finish();
}

/// The program's own PB_Cabort (PBLAS's error hook, which PBLAS's testers replace to record the
/// error), or null when the one found is ScaLAPACK's, which would end every process.
using cabort_fn = void (*)(int, const char*, int);
cabort_fn program_cabort() {
    static const cabort_fn hook = [] {
        void* f = dlsym(RTLD_DEFAULT, "PB_Cabort");
        Dl_info fi{}, bi{};
        if (!f || dladdr(f, &fi) == 0 || dladdr(reinterpret_cast<void*>(&Cblacs_gridinfo), &bi) == 0) return cabort_fn{};
        return fi.dli_fbase == bi.dli_fbase ? cabort_fn{} : reinterpret_cast<cabort_fn>(f);
    }();
    return hook;
}

/// Reports an illegal argument as PBLAS does and returns: through the program's PB_Cabort when it
/// has one, else a line naming what is wrong and pxerbla_ (ScaLAPACK's prints "parameter number
/// N had an illegal value"; a program may define its own), with N = -info.
void report_illegal(int ctxt, const grid_info& g, const char* routine, int info, const std::string& why) {
    if (cabort_fn hook = program_cabort()) {
        hook(ctxt, routine, info);
        return;
    }
    const int pos = -info;
    std::fprintf(stderr, "{%d,%d}: %s (tilestream): parameter number %d%s had an illegal value: %s\n", g.row, g.col,
                 routine, pos >= descmult ? pos / descmult : pos,
                 pos >= descmult ? (", entry " + std::to_string(pos % descmult)).c_str() : "",
                 why.empty() ? "found on another process of the grid" : why.c_str());
    std::fflush(stderr);
    int p = pos;
    pxerbla_(&ctxt, routine, &p, std::strlen(routine));
}

/// A process grid with its own communicators for a BLACS context and the system ranks of its
/// members, made on first use; BLACS reuses the number of an exited context, so a context whose
/// members changed gets a new one.
struct context_grid {
    std::vector<int> members;  ///< system rank of each grid position, row-major
    td::communicator comm;
    std::unique_ptr<td::process_grid> grid;
};

const td::process_grid& grid_of(int ctxt, const grid_info& g, const std::vector<int>& members) {
    static std::map<int, context_grid> grids;
    context_grid& cg = grids[ctxt];
    if (cg.grid && cg.members == members && cg.grid->rows() == g.rows && cg.grid->cols() == g.cols) return *cg.grid;
    cg.grid.reset();
    cg.comm = td::communicator();
    int system = 0;
    Cblacs_get(ctxt, 10, &system);
    const MPI_Comm sys = Cblacs2sys_handle(system);
    // The grid's members only (the other processes do not call): a communicator over exactly
    // them, ranked by grid position, however BLACS placed them (row- or column-major, a map).
    MPI_Group all = MPI_GROUP_NULL, mine = MPI_GROUP_NULL;
    td::check_mpi(MPI_Comm_group(sys, &all), "MPI_Comm_group");
    const int rc = MPI_Group_incl(all, int(members.size()), members.data(), &mine);
    MPI_Group_free(&all);
    td::check_mpi(rc, "MPI_Group_incl");
    MPI_Comm c = MPI_COMM_NULL;
    const int rc2 = MPI_Comm_create_group(sys, mine, 0x7473, &c);
    MPI_Group_free(&mine);
    td::check_mpi(rc2, "MPI_Comm_create_group");
    cg.comm = td::communicator(c);
    td::check_mpi(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    cg.members = members;
    cg.grid = std::make_unique<td::process_grid>(c, g.rows, g.cols, g.row, g.col);
    return *cg.grid;
}

/// This process's devices, opened on the first call: TILESTREAM_DEVICES (default "cpu") with
/// TILESTREAM_CPU_THREADS threads per CPU device (default 1: ScaLAPACK programs run a rank per core).
tilestream::context& rank_context() {
    static tilestream::context ctx = [] {
        const char* spec = std::getenv("TILESTREAM_DEVICES");
        const char* threads = std::getenv("TILESTREAM_CPU_THREADS");
        tilestream::context_options o;
        o.cpu_threads = threads ? std::max(1, std::atoi(threads)) : 1;
        // PBLAS has no cancel and no progress: steps of a bounded time would only cost speed.
        o.step_seconds = 0;
        return tilestream::context(spec ? spec : "cpu", o);
    }();
    return ctx;
}

template <class T>
using fortran_gemm = void (*)(const char*, const char*, const int*, const int*, const int*, const T*, const T*,
                              const int*, const int*, const int*, const T*, const int*, const int*, const int*, const T*,
                              T*, const int*, const int*, const int*);

template <class T>
void fortran_pgemm(const char* transa, const char* transb, const int* m, const int* n, const int* k, const T* alpha,
                   const T* a, const int* ia, const int* ja, const int* desca, const T* b, const int* ib, const int* jb,
                   const int* descb, const T* beta, T* c, const int* ic, const int* jc, const int* descc) {
    const char* routine = pblas_gemm<T>::name;
    const char ta = char(*transa & ~0x20), tb = char(*transb & ~0x20);
    const bool na = ta == 'N', nb = tb == 'N';
    const desc11 da(desca), db(descb), dc(descc);
    // PBLAS takes the context from A's descriptor; the others must name the same one.
    const int ctxt = da.e[ctxt_];
    grid_info g;
    Cblacs_gridinfo(ctxt, &g.rows, &g.cols, &g.row, &g.col);
    int info = 0;
    std::string why;
    if (g.rows == -1) {
        info = -(10 * descmult + ctxt_ + 1);
        why = "DESCA[CTXT_] = " + std::to_string(ctxt) + " is not a BLACS context this process belongs to";
        return report_illegal(ctxt, g, routine, info, why);
    }
    if (!na && ta != 'T' && ta != 'C') {
        info = -1;
        why = std::string("TRANSA is '") + *transa + "' (N, T or C)";
    } else if (!nb && tb != 'T' && tb != 'C') {
        info = -2;
        why = std::string("TRANSB is '") + *transb + "' (N, T or C)";
    }
    if (na) check_matrix(g, ctxt, "A", *m, 3, *k, 5, *ia, *ja, da, 10, info, why);
    else check_matrix(g, ctxt, "A", *k, 5, *m, 3, *ia, *ja, da, 10, info, why);
    if (nb) check_matrix(g, ctxt, "B", *k, 5, *n, 4, *ib, *jb, db, 14, info, why);
    else check_matrix(g, ctxt, "B", *n, 4, *k, 5, *ib, *jb, db, 14, info, why);
    check_matrix(g, ctxt, "C", *m, 3, *n, 4, *ic, *jc, dc, 19, info, why);

    // Every process of the grid learns whether any found an error (so none waits in a collective
    // for one that returned) and the system rank of each grid position, in one BLACS combine.
    int system = 0, me = 0;
    Cblacs_get(ctxt, 10, &system);
    td::check_mpi(MPI_Comm_rank(Cblacs2sys_handle(system), &me), "MPI_Comm_rank");
    const int positions = g.rows * g.cols;
    std::vector<int> shared(std::size_t(positions) + 1, 0);
    shared[0] = info != 0 ? INT_MAX / 2 - (-info) : 0;  // the largest value is the smallest position
    shared[1 + std::size_t(g.row) * std::size_t(g.cols) + std::size_t(g.col)] = me + 1;
    Cigamx2d(ctxt, "All", " ", positions + 1, 1, shared.data(), positions + 1, nullptr, nullptr, -1, -1, -1);
    if (shared[0] != 0) {
        // As PBLAS: each process reports what it found; one that found nothing reports the
        // first position another found.
        if (info == 0) info = -(INT_MAX / 2 - shared[0]);
        return report_illegal(ctxt, g, routine, info, why);
    }
    if (*m == 0 || *n == 0 || ((*alpha == T(0) || *k == 0) && *beta == T(1))) return;

    // An operand replicated over process rows or columns (RSRC or CSRC = -1) goes to ScaLAPACK's
    // own routine: SUMMA here deals every operand over the grid.
    for (const desc11* d : {&da, &db, &dc})
        if (d->e[rsrc_] < 0 || d->e[csrc_] < 0) {
            static const auto scalapack = reinterpret_cast<fortran_gemm<T>>(dlsym(RTLD_NEXT, pblas_gemm<T>::symbol));
            if (scalapack) return scalapack(transa, transb, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic, jc, descc);
            break;
        }
    try {
        std::vector<int> members(static_cast<std::size_t>(positions));
        for (int p = 0; p < positions; ++p) members[std::size_t(p)] = shared[1 + std::size_t(p)] - 1;
        td::pgemm_options po;
        po.context = &rank_context();
        auto op_of = [](char t) { return t == 'N' ? tilestream::op::n : t == 'T' ? tilestream::op::t : tilestream::op::c; };
        td::pgemm<T>(grid_of(ctxt, g, members), op_of(ta), op_of(tb), *m, *n, *k, *alpha, a, *ia, *ja, desca, b, *ib, *jb, descb,
                     *beta, c, *ic, *jc, descc, po);
    } catch (const std::exception& e) {
        // Not an argument error (those returned above): a device or MPI failure, which ScaLAPACK
        // has no way to return. Every process of the job ends with the message.
        std::fprintf(stderr, "{%d,%d}: %s (tilestream): error: %s\n", g.row, g.col, routine, e.what());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

}  // namespace

extern "C" {

void psgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
             const float* a, const int* ia, const int* ja, const int* desca, const float* b, const int* ib, const int* jb,
             const int* descb, const float* beta, float* c, const int* ic, const int* jc, const int* descc) {
    fortran_pgemm<float>(transa, transb, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic, jc, descc);
}

void pdgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
             const double* a, const int* ia, const int* ja, const int* desca, const double* b, const int* ib,
             const int* jb, const int* descb, const double* beta, double* c, const int* ic, const int* jc,
             const int* descc) {
    fortran_pgemm<double>(transa, transb, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic, jc, descc);
}

void pcgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
             const std::complex<float>* alpha, const std::complex<float>* a, const int* ia, const int* ja,
             const int* desca, const std::complex<float>* b, const int* ib, const int* jb, const int* descb,
             const std::complex<float>* beta, std::complex<float>* c, const int* ic, const int* jc, const int* descc) {
    fortran_pgemm<std::complex<float>>(transa, transb, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic,
                                       jc, descc);
}

void pzgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
             const std::complex<double>* alpha, const std::complex<double>* a, const int* ia, const int* ja,
             const int* desca, const std::complex<double>* b, const int* ib, const int* jb, const int* descb,
             const std::complex<double>* beta, std::complex<double>* c, const int* ic, const int* jc,
             const int* descc) {
    fortran_pgemm<std::complex<double>>(transa, transb, m, n, k, alpha, a, ia, ja, desca, b, ib, jb, descb, beta, c, ic,
                                        jc, descc);
}

}  // extern "C"
