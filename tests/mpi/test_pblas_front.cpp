// PBLAS's conventions in tilestream's psgemm_/pdgemm_ (tilestream_scalapack linked before
// ScaLAPACK): an illegal argument is reported with PBLAS's argument number on every process of the
// grid and the call returns (no MPI_Abort), C untouched; descriptors of another BLACS context are
// refused so; DTYPE 2 descriptors with first blocks of their own are multiplied.
//
// Built twice. Without TILESTREAM_TEST_CABORT the program replaces pxerbla_ (as a ScaLAPACK program
// may) and checks the numbers PBLAS's rules give. With it, the program replaces PB_Cabort (as
// ScaLAPACK's PBLAS tester does) and calls ScaLAPACK's own routine (dlsym RTLD_NEXT) on the same
// arguments: both must report the same number.
#include <tilestream/pblas.hpp>
#include <tilestream/distributed.hpp>

#include <dlfcn.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int rows, int cols);
void Cblacs_gridinfo(int context, int* rows, int* cols, int* my_row, int* my_col);
void Cblacs_gridexit(int context);
}

namespace {
int calls = 0, last_info = 0;
std::string last_routine;
}  // namespace

#ifdef TILESTREAM_TEST_CABORT
// PBLAS's error hook, replaced as the PBLAS tester replaces it: record and return.
extern "C" void PB_Cabort(int, const char* routine, int info) {
    ++calls;
    last_info = info;
    last_routine = routine;
}
#else
// ScaLAPACK's error handler, replaced as a program may: record and return.
extern "C" void pxerbla_(int*, const char* routine, int* info, std::size_t len) {
    ++calls;
    last_info = -*info;
    last_routine.assign(routine, len);
}
#endif

namespace td = tilestream::distributed;

namespace {

int failures = 0, rank = 0;
void fail(const std::string& what) {
    if (failures++ < 20) std::fprintf(stderr, "rank %d: FAIL: %s\n", rank, what.c_str());
}

using pdgemm_fn = decltype(&pdgemm_);

/// The arguments of one call: 4x4 matrices in 2x2 blocks on the grid, sub-matrices 2x2x2.
struct call_args {
    char ta = 'N', tb = 'N';
    int m = 2, n = 2, k = 2, ia = 1, ja = 1, ib = 1, jb = 1, ic = 1, jc = 1;
    double alpha = 1, beta = 0;
    int da[11], db[11], dc[11];
    call_args(int ctxt, int lld) {
        const int d[9] = {1, ctxt, 4, 4, 2, 2, 0, 0, lld};
        std::memcpy(da, d, sizeof d);
        std::memcpy(db, d, sizeof d);
        std::memcpy(dc, d, sizeof d);
    }
};

/// Calls `fn` on every process of the grid; returns the info it reported (0: none) and checks
/// that C was left alone when one was reported.
int call(pdgemm_fn fn, call_args& x, std::vector<double>& a, std::vector<double>& b, std::vector<double>& c) {
    calls = 0;
    last_info = 0;
    const std::vector<double> before = c;
    fn(&x.ta, &x.tb, &x.m, &x.n, &x.k, &x.alpha, a.data(), &x.ia, &x.ja, x.da, b.data(), &x.ib, &x.jb, x.db, &x.beta,
       c.data(), &x.ic, &x.jc, x.dc);
    if (calls > 1) fail("the error was reported " + std::to_string(calls) + " times");
    if (calls == 1 && c != before) fail("C was changed by a call with an illegal argument");
    return calls ? last_info : 0;
}

/// A complex front: TRANSA 'Z' is argument 1 and DESCB of another context 1402 (with PB_Cabort
/// also what ScaLAPACK's own routine reports), C untouched, the routine named; then a legal call
/// with TRANSA 'C' conjugates: C(1:2, 1:2) <- alpha A^H B + beta C on a 4x4 matrix in 2x2 blocks.
template <class Z>
void complex_front(void (*fn)(const char*, const char*, const int*, const int*, const int*, const Z*, const Z*, const int*,
                              const int*, const int*, const Z*, const int*, const int*, const int*, const Z*, Z*,
                              const int*, const int*, const int*),
                   const char* symbol, const char* routine, int ctxt, int other, int lld, int row, int col) {
    using zfn = decltype(fn);
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(fn), &info) == 0 || !info.dli_fname ||
        !std::strstr(info.dli_fname, "tilestream_scalapack"))
        fail(std::string(symbol) + " resolves to " + (info.dli_fname ? info.dli_fname : "?"));
    const int mm = 2, one = 1;
    const Z al(1, 2), be(0, 1);
    std::vector<Z> za(4, Z(1, 2)), zb(4, Z(2, -1)), zc(4, Z(3, 3));
    const int d[9] = {1, ctxt, 4, 4, 2, 2, 0, 0, lld};
    const int d_other[9] = {1, other, 4, 4, 2, 2, 0, 0, lld};
    const char c = 'C', bad = 'Z';
    struct zcase {
        const char* what;
        const char* ta;
        const int* db;
        int want;
    };
    const zcase cases[] = {{"TRANSA 'Z'", &bad, d, -1}, {"DESCB of another context", &c, d_other, -1402}};
    std::vector<zfn> fns{fn};
#ifdef TILESTREAM_TEST_CABORT
    if (const auto theirs = reinterpret_cast<zfn>(dlsym(RTLD_NEXT, symbol))) fns.push_back(theirs);
    else fail(std::string("ScaLAPACK's ") + symbol + " not found behind tilestream's");
#endif
    for (const zcase& x : cases)
        for (std::size_t f = 0; f < fns.size(); ++f) {
            calls = 0;
            last_info = 0;
            last_routine.clear();
            const std::vector<Z> before = zc;
            fns[f](x.ta, &c, &mm, &mm, &mm, &al, za.data(), &one, &one, d, zb.data(), &one, &one, x.db, &be, zc.data(), &one,
                   &one, d);
            const std::string who = std::string(f == 0 ? "tilestream's " : "ScaLAPACK's ") + symbol + " " + x.what;
            if (calls != 1 || last_info != x.want || zc != before || last_routine.rfind(routine, 0) != 0)
                fail(who + ": " + std::to_string(calls) + " reports, info " + std::to_string(last_info) + " (expected " +
                     std::to_string(x.want) + ") from '" + last_routine + "'" + (zc != before ? ", C changed" : ""));
        }
    // Legal: every element of A is 1+2i, of B 2-i; conj(1+2i)(2-i) = -5i, times k = 2: -10i; alpha
    // (1+2i) * -10i = 20-10i; plus beta i * (3+3i) = -3+3i: 17-7i in C(1:2, 1:2) (process (0, 0)).
    calls = 0;
    fn(&c, "N", &mm, &mm, &mm, &al, za.data(), &one, &one, d, zb.data(), &one, &one, d, &be, zc.data(), &one, &one, d);
    if (calls != 0) fail(std::string(symbol) + ": a legal call reported an error");
    const Z want = row == 0 && col == 0 ? Z(17, -7) : Z(3, 3);
    for (const Z& v : zc)
        if (v != want)
            fail(std::string(symbol) + " 'C' 'N': local C element (" + std::to_string(v.real()) + ", " +
                 std::to_string(v.imag()) + ") on process (" + std::to_string(row) + ", " + std::to_string(col) +
                 "), expected (" + std::to_string(want.real()) + ", " + std::to_string(want.imag()) + ")");
    // A replicated over the process rows (RSRC = -1, 4 local rows) goes to ScaLAPACK's own routine
    // (the complex symbol behind tilestream's): the same result.
    std::vector<Z> ar(8, Z(1, 2)), zc2(4, Z(3, 3));
    const int d_rep[9] = {1, ctxt, 4, 4, 2, 2, -1, 0, 4};
    calls = 0;
    fn(&c, "N", &mm, &mm, &mm, &al, ar.data(), &one, &one, d_rep, zb.data(), &one, &one, d, &be, zc2.data(), &one, &one, d);
    if (calls != 0 || zc2 != zc) fail(std::string(symbol) + " 'C' 'N' with A replicated (RSRC = -1): another result");
}

}  // namespace

int main(int argc, char** argv) {
    td::environment env(&argc, &argv);
    rank = env.rank();
    if (env.size() != 4) {
        if (rank == 0) std::fprintf(stderr, "run on 4 ranks\n");
        return 2;
    }
    int ctxt = 0, other = 0;
    Cblacs_get(-1, 0, &ctxt);
    Cblacs_gridinit(&ctxt, "Row", 2, 2);
    Cblacs_get(-1, 0, &other);
    Cblacs_gridinit(&other, "Col", 2, 2);  // the same processes in another context
    int p = 0, q = 0, row = 0, col = 0;
    Cblacs_gridinfo(ctxt, &p, &q, &row, &col);
    const int lld = 2;  // each process holds 2x2 of a 4x4 matrix in 2x2 blocks
    std::vector<double> a(4, 1.0), b(4, 2.0), c(4, 3.0);
#ifdef TILESTREAM_TEST_CABORT
    const pdgemm_fn theirs = reinterpret_cast<pdgemm_fn>(dlsym(RTLD_NEXT, "pdgemm_"));
    if (!theirs) fail("ScaLAPACK's pdgemm_ not found behind tilestream's");
#endif
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&pdgemm_), &info) == 0 || !info.dli_fname ||
        !std::strstr(info.dli_fname, "tilestream_scalapack"))
        fail(std::string("pdgemm_ resolves to ") + (info.dli_fname ? info.dli_fname : "?"));

    struct bad {
        const char* what;
        int expected;  ///< PBLAS's number: argument i, or i*100 + entry j of a descriptor (11-entry layout)
        void (*set)(call_args&, int other, int row, int col);
    };
    const bad cases[] = {
        {"TRANSA 'X'", 1, [](call_args& x, int, int, int) { x.ta = 'X'; }},
        {"TRANSB 'q'", 2, [](call_args& x, int, int, int) { x.tb = 'q'; }},
        {"M = -1", 3, [](call_args& x, int, int, int) { x.m = -1; }},
        {"N = -1", 4, [](call_args& x, int, int, int) { x.n = -1; }},
        {"K = -1", 5, [](call_args& x, int, int, int) { x.k = -1; }},
        {"IA = 0", 8, [](call_args& x, int, int, int) { x.ia = 0; }},
        {"JA = -3", 9, [](call_args& x, int, int, int) { x.ja = -3; }},
        {"DESCA DTYPE 7", 1001, [](call_args& x, int, int, int) { x.da[0] = 7; }},
        {"DESCA CTXT -2 (no context)", 1002, [](call_args& x, int, int, int) { x.da[1] = -2; }},
        {"DESCA M_ 0", 1003, [](call_args& x, int, int, int) { x.da[2] = 0; }},
        {"DESCA MB 0 (DTYPE 1: PBLAS reads it as IMB too, entry 5 of its 11)", 1005, [](call_args& x, int, int, int) { x.da[4] = 0; }},
        {"DESCA RSRC 2 on a 2x2 grid", 1009, [](call_args& x, int, int, int) { x.da[6] = 2; }},
        {"DESCA LLD 1 (2 local rows)", 1011, [](call_args& x, int, int, int) { x.da[8] = 1; }},
        {"IA + M beyond M_A", 8, [](call_args& x, int, int, int) { x.ia = 4; }},
        {"IB = 0", 12, [](call_args& x, int, int, int) { x.ib = 0; }},
        {"DESCB of another context", 1402, [](call_args& x, int o, int, int) { x.db[1] = o; }},
        {"DESCB NB 0 (read as INB too: entry 6)", 1406, [](call_args& x, int, int, int) { x.db[5] = 0; }},
        {"JC + N beyond N_C", 18, [](call_args& x, int, int, int) { x.jc = 4; }},
        {"DESCC of another context", 1902, [](call_args& x, int o, int, int) { x.dc[1] = o; }},
        {"DESCC CSRC -2", 1910, [](call_args& x, int, int, int) { x.dc[7] = -2; }},
        {"DESCC LLD 0 on one process only (every process of the grid must learn it)", 1911,
         [](call_args& x, int, int r, int c) {
             if (r == 1 && c == 1) x.dc[8] = 0;
         }},
        {"DTYPE 2 DESCA IMB 0", 1005,
         [](call_args& x, int, int, int) {
             const int d[11] = {2, x.da[1], 4, 4, 0, 2, 2, 2, 0, 0, 2};
             std::memcpy(x.da, d, sizeof d);
         }},
        {"two errors: the first position wins (N = -1, DESCB NB 0)", 4,
         [](call_args& x, int, int, int) {
             x.n = -1;
             x.db[5] = 0;
         }},
    };
    int checked = 0;
    for (const bad& bc : cases) {
        call_args x(ctxt, lld);
        bc.set(x, other, row, col);
        const int got = call(&pdgemm_, x, a, b, c);
        // PBLAS reports on every process of the grid, even where the argument was legal.
        const int want = -bc.expected;
        if (got != want) fail(std::string(bc.what) + ": tilestream reported " + std::to_string(got) + ", expected " + std::to_string(want));
#ifdef TILESTREAM_TEST_CABORT
        // ScaLAPACK's own PDGEMM (its error hook replaced here) on the same arguments; the case
        // of one process alone (the agreement) is tilestream's addition, which PBLAS would not see.
        if (theirs && !std::strstr(bc.what, "one process only")) {
            call_args y(ctxt, lld);
            bc.set(y, other, row, col);
            const int ref = call(theirs, y, a, b, c);
            if (ref != got) fail(std::string(bc.what) + ": ScaLAPACK's PDGEMM reports " + std::to_string(ref) +
                                 ", tilestream " + std::to_string(got));
        }
#endif
        if (got == want && last_routine.rfind("PDGEMM", 0) != 0) fail(std::string(bc.what) + ": reported as " + last_routine);
        ++checked;
    }
    // psgemm_ names itself.
    {
        const char t = 'N', bad_t = 'Z';
        const int mm = 2, one = 1;
        const float al = 1, be = 0;
        std::vector<float> fa(4, 1), fb(4, 1), fc(4, 1);
        const int d[9] = {1, ctxt, 4, 4, 2, 2, 0, 0, lld};
        calls = 0;
        psgemm_(&bad_t, &t, &mm, &mm, &mm, &al, fa.data(), &one, &one, d, fb.data(), &one, &one, d, &be, fc.data(), &one,
                &one, d);
        if (calls != 1 || last_info != -1 || last_routine.rfind("PSGEMM", 0) != 0)
            fail("psgemm_ TRANSA 'Z': " + std::to_string(calls) + " reports, info " + std::to_string(last_info) + " from " +
                 last_routine);
    }
    // pcgemm_ and pzgemm_ follow the same conventions and name themselves.
    complex_front<std::complex<float>>(&pcgemm_, "pcgemm_", "PCGEMM", ctxt, other, lld, row, col);
    complex_front<std::complex<double>>(&pzgemm_, "pzgemm_", "PZGEMM", ctxt, other, lld, row, col);
    // After all that, a legal call still multiplies: C(1:2, 1:2) <- A(1:2, 1:2) * B(1:2, 1:2) with
    // DTYPE 2 descriptors whose first block is 1x1 (A: 1, B: 2 everywhere, k = 2: 4).
    {
        call_args x(ctxt, lld);
        const int d[11] = {2, ctxt, 4, 4, 1, 1, 2, 2, 0, 0, lld};
        for (int* t : {x.da, x.db, x.dc}) std::memcpy(t, d, sizeof d);
        std::vector<double> cc(4, std::nan(""));
        if (call(&pdgemm_, x, a, b, cc) != 0) fail("a legal DTYPE 2 call reported an error");
        // Global rows 0 (first block, process row 0) and 1..2 (the next block, process row 1):
        // process (0, 0) holds C(0, 0) and C(3, 3)... only C(0:1, 0:1) is written.
        const auto local_rows = [&](int r) { return r == 0 ? std::vector<int>{0, 3} : std::vector<int>{1, 2}; };
        const auto rows = local_rows(row), cols = local_rows(col);
        for (int j = 0; j < 2; ++j)
            for (int i = 0; i < 2; ++i) {
                const bool inside = rows[std::size_t(i)] < 2 && cols[std::size_t(j)] < 2;
                const double v = cc[std::size_t(i + 2 * j)];
                if (inside ? v != 4.0 : !std::isnan(v))
                    fail("DTYPE 2 first blocks: local C(" + std::to_string(i) + "," + std::to_string(j) + ") = " +
                         std::to_string(v));
            }
    }
    // A replicated over the process rows (RSRC = -1: every process row holds all 4 rows) is legal
    // in PBLAS; tilestream passes such a call on to ScaLAPACK's own PDGEMM.
    {
        call_args x(ctxt, lld);
        x.da[6] = -1;
        x.da[8] = 4;
        std::vector<double> ar(8, 1.0), cc(4, std::nan(""));
        if (call(&pdgemm_, x, ar, b, cc) != 0) fail("a legal call with A replicated (RSRC = -1) reported an error");
        const double want = row == 0 && col == 0 ? 4.0 : std::nan("");  // C(0:1, 0:1) lies on process (0, 0)
        for (double v : cc)
            if (std::isnan(want) ? !std::isnan(v) : v != want)
                fail("A replicated: local C element " + std::to_string(v) + " on process (" + std::to_string(row) + ", " +
                     std::to_string(col) + ")");
    }
    Cblacs_gridexit(other);
    Cblacs_gridexit(ctxt);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) std::printf("%d illegal-argument cases on 4 ranks, %d failures\n", checked, all);
    return all == 0 ? 0 : 1;
}
