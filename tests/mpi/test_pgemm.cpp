// Distributed GEMM under mpirun: tilestream::distributed::pgemm on random block-cyclic
// descriptors (odd shapes, sub-matrices, every grid of the rank count, op, alpha, beta, f32, f64,
// c32 and c64 with ops n, t and c and complex alpha and beta) against the reference GEMM and
// against ScaLAPACK's p?gemm_ on the same descriptors. Built a
// second time as the test of the psgemm_/pdgemm_/pcgemm_/pzgemm_ front (TILESTREAM_TEST_FRONT):
// they then resolve to tilestream_scalapack, which the test checks with dladdr. With the argument `layers`:
// 2.5D pgemm on every P x Q x c layering (c > 1) of the rank count against the reference, ranks
// off layer 0 passing no arrays, and the bytes sent over all ranks equal to model_pgemm_traffic's
// words where the operands are aligned with C.
#include <tilestream/pblas.hpp>
#include <tilestream/distributed.hpp>
#include <tilestream/gemm.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int rows, int cols);
void Cblacs_gridexit(int context);
void Cblacs_gridinfo(int context, int* rows, int* cols, int* my_row, int* my_col);
}

namespace ts = tilestream;
namespace td = tilestream::distributed;

namespace {

int failures = 0;
int rank = 0;
int model_checks = 0;  ///< layered cases whose bytes were compared with the model

void fail(const std::string& what) {
    if (failures++ < 10) std::fprintf(stderr, "rank %d: FAIL: %s\n", rank, what.c_str());
}

template <class T>
void scalapack_gemm(char ta, char tb, int m, int n, int k, T alpha, const T* a, int ia, int ja, const int* da, const T* b,
                    int ib, int jb, const int* db, T beta, T* c, int ic, int jc, const int* dc) {
    if constexpr (std::is_same_v<T, float>)
        psgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &ia, &ja, da, b, &ib, &jb, db, &beta, c, &ic, &jc, dc);
    else if constexpr (std::is_same_v<T, double>)
        pdgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &ia, &ja, da, b, &ib, &jb, db, &beta, c, &ic, &jc, dc);
    else if constexpr (std::is_same_v<T, std::complex<float>>)
        pcgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &ia, &ja, da, b, &ib, &jb, db, &beta, c, &ic, &jc, dc);
    else
        pzgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &ia, &ja, da, b, &ib, &jb, db, &beta, c, &ic, &jc, dc);
}

/// A quiet NaN of T (both parts of a complex T).
template <class T>
T poison() {
    if constexpr (ts::is_complex_v<T>) {
        const auto nan = std::numeric_limits<ts::real_type_t<T>>::quiet_NaN();
        return T(nan, nan);
    } else {
        return std::numeric_limits<T>::quiet_NaN();
    }
}
template <class T>
bool is_nan(T v) {
    if constexpr (ts::is_complex_v<T>) return std::isnan(v.real()) || std::isnan(v.imag());
    else return std::isnan(v);
}
/// A random value in [-1, 1) (both parts of a complex T).
template <class T, class Rng>
T random_value(Rng& rng) {
    std::uniform_real_distribution<double> val(-1, 1);
    if constexpr (ts::is_complex_v<T>) {
        const double re = val(rng);
        return T(ts::real_type_t<T>(re), ts::real_type_t<T>(val(rng)));
    } else {
        return T(val(rng));
    }
}
std::string text(double v) { return std::to_string(v); }
template <class R>
std::string text(std::complex<R> v) { return "(" + std::to_string(v.real()) + "," + std::to_string(v.imag()) + ")"; }

/// Where global index g (0-based) of a dimension dealt in a first block of `first`, then blocks of
/// nb, from src over np processes lies: its process and its index there (counted, not computed
/// by the library's formula).
struct dim_layout {
    std::vector<int> owner, local;
    void make(int len, int first, int nb, int src, int np) {
        owner.assign(std::size_t(len), 0);
        local.assign(std::size_t(len), 0);
        std::vector<int> seen(std::size_t(np), 0);
        for (int g = 0; g < len; ++g) {
            const int blk = g < first ? 0 : 1 + (g - first) / nb;
            const int o = (src + blk) % np;
            owner[std::size_t(g)] = o;
            local[std::size_t(g)] = seen[std::size_t(o)]++;
        }
    }
    int count(int p) const { return int(std::count(owner.begin(), owner.end(), p)); }
};

/// A global column-major matrix and this rank's block-cyclic part of it: a DTYPE 1 descriptor, or
/// DTYPE 2 with a first block imb x inb of its own.
template <class T>
struct block_cyclic {
    int m = 0, n = 0, mb = 1, nb = 1, imb = 0, inb = 0, rsrc = 0, csrc = 0;
    int desc[11] = {};
    std::vector<T> global, local;
    dim_layout rows, cols;

    bool dtype2() const { return imb > 0; }
    void make(int ctxt, int p, int q, int my_row, int my_col) {
        rows.make(m, dtype2() ? imb : mb, mb, rsrc, p);
        cols.make(n, dtype2() ? inb : nb, nb, csrc, q);
        const int lrows = rows.count(my_row), lcols = cols.count(my_col);
        const int lld = std::max(1, lrows) + (m % 3 == 0 ? 2 : 0);  // sometimes padded
        if (dtype2()) {
            const int d[11] = {2, ctxt, m, n, imb, inb, mb, nb, rsrc, csrc, lld};
            std::memcpy(desc, d, sizeof d);
        } else {
            const int d[9] = {1, ctxt, m, n, mb, nb, rsrc, csrc, lld};
            std::memcpy(desc, d, sizeof d);
        }
        local.assign(std::size_t(lld) * std::size_t(std::max(1, lcols)), poison<T>());
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < m; ++i)
                if (mine(i, j, my_row, my_col)) local[std::size_t(at(i, j))] = global[std::size_t(i + j * m)];
    }
    int ld() const { return desc[0] == 2 ? desc[10] : desc[8]; }
    bool mine(int i, int j, int my_row, int my_col) const {
        return rows.owner[std::size_t(i)] == my_row && cols.owner[std::size_t(j)] == my_col;
    }
    int at(int i, int j) const { return rows.local[std::size_t(i)] + cols.local[std::size_t(j)] * ld(); }
    /// Compares this rank's elements with `expected` (global column-major).
    void check(const std::vector<T>& expected, const std::vector<T>& got_local, int my_row, int my_col, double tol,
               const std::string& what) const {
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < m; ++i) {
                if (!mine(i, j, my_row, my_col)) continue;
                const ts::wide_type_t<T> got(got_local[std::size_t(at(i, j))]);
                const ts::wide_type_t<T> want(expected[std::size_t(i + j * m)]);
                if (!(std::abs(got - want) <= tol * (1 + std::abs(want))))
                    return fail(what + ": C(" + std::to_string(i) + "," + std::to_string(j) + ") is " + text(got) +
                                ", expected " + text(want));
            }
    }
};

/// The grid a case runs on: its shape, this rank's place, and the layered grid of the library
/// call (null for the psgemm_/pdgemm_ front, which takes the grid from the BLACS context).
struct case_grid {
    int p = 1, q = 1, my_row = 0, my_col = 0;
    const td::layered_grid* lg = nullptr;
};

template <class T>
void one_case(std::mt19937& rng, int ctxt, const case_grid& cg, int case_no) {
    const bool layered = cg.lg && cg.lg->layers() > 1, holder = !cg.lg || cg.lg->my_layer() == 0;
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int p = cg.p, q = cg.q;
    // Over layers every third case is op n and aligned with C, where the model's bytes are exact.
    const bool plain = layered && case_no % 3 == 2;
    // Complex: n, t and c (conjugate transpose); real: n and t.
    constexpr int ops = ts::is_complex_v<T> ? 2 : 1;
    const ts::op op_a = plain ? ts::op::n : ts::op(uni(0, ops)), op_b = plain ? ts::op::n : ts::op(uni(0, ops));
    // Over layers now and then k below the layer count: some layers get no slice.
    const int m = uni(1, 45), n = uni(1, 45), k = layered && case_no % 6 == 1 ? uni(1, 3) : uni(case_no % 7 == 0 ? 0 : 1, 45);
    const int ia = uni(1, 4), ja = uni(1, 4), ib = uni(1, 4), jb = uni(1, 4), ic = uni(1, 4), jc = uni(1, 4);
    // Often aligned with C (SUMMA's fast path), sometimes not (redistribution).
    const bool aligned = uni(0, 1) || plain;
    const int cmb = uni(1, 9), cnb = uni(1, 9);
    block_cyclic<T> a, b, c;
    a.m = (op_a == ts::op::n ? m : k) + ia - 1 + uni(0, 3);
    a.n = (op_a == ts::op::n ? k : m) + ja - 1 + uni(0, 3);
    b.m = (op_b == ts::op::n ? k : n) + ib - 1 + uni(0, 3);
    b.n = (op_b == ts::op::n ? n : k) + jb - 1 + uni(0, 3);
    c.m = m + ic - 1 + uni(0, 3);
    c.n = n + jc - 1 + uni(0, 3);
    // Every third case DTYPE 2 descriptors, whose first block has a size of its own.
    const bool dtype2 = case_no % 3 == 1;
    for (auto* x : {&a, &b, &c}) {
        x->mb = uni(1, 9);
        x->nb = uni(1, 9);
        x->rsrc = uni(0, p - 1);
        x->csrc = uni(0, q - 1);
        if (dtype2) {
            x->imb = uni(1, 11);
            x->inb = uni(1, 11);
        }
    }
    if (aligned) {
        c.mb = cmb;
        c.nb = cnb;
        a.mb = cmb;
        a.imb = c.imb;
        a.rsrc = c.rsrc;
        b.nb = cnb;
        b.inb = c.inb;
        b.csrc = c.csrc;
    }
    const int ia2 = aligned && op_a == ts::op::n ? ic : ia;
    const int jb2 = aligned && op_b == ts::op::n ? jc : jb;
    a.m = std::max(a.m, (op_a == ts::op::n ? m : k) + ia2 - 1);
    b.n = std::max(b.n, (op_b == ts::op::n ? n : k) + jb2 - 1);
    for (auto* x : {&a, &b, &c}) {
        x->global.resize(std::size_t(x->m) * std::size_t(x->n));
        for (auto& v : x->global) v = random_value<T>(rng);
    }
    const int pick = uni(0, 3);
    // alpha = 0 now and then: A and B are not read, C is only scaled.
    const T alpha = pick == 0 ? T(1) : case_no % 11 == 5 ? T(0) : random_value<T>(rng);
    const T beta = pick == 1 ? T(0) : pick == 2 ? T(1) : random_value<T>(rng);
    for (auto* x : {&a, &b, &c}) x->make(ctxt, p, q, cg.my_row, cg.my_col);
    const std::vector<T> c_clean = c.local;
    if (beta == T(0))  // beta = 0: C(ic:, jc:) is not read, so NaN there must not show
        for (int j = jc - 1; j < jc - 1 + n; ++j)
            for (int i = ic - 1; i < ic - 1 + m; ++i)
                if (c.mine(i, j, cg.my_row, cg.my_col)) c.local[std::size_t(c.at(i, j))] = poison<T>();

    // The expected global C: outside the sub-matrix unchanged.
    std::vector<T> expected = c.global;
    {
        const ts::host_matrix_view<const T> av(a.global.data() + (ia2 - 1) + std::size_t(ja - 1) * a.m,
                                               op_a == ts::op::n ? m : k, op_a == ts::op::n ? k : m, ts::layout::col_major, a.m);
        const ts::host_matrix_view<const T> bv(b.global.data() + (ib - 1) + std::size_t(jb2 - 1) * b.m,
                                               op_b == ts::op::n ? k : n, op_b == ts::op::n ? n : k, ts::layout::col_major, b.m);
        const ts::host_matrix_view<T> cv(expected.data() + (ic - 1) + std::size_t(jc - 1) * c.m, m, n, ts::layout::col_major, c.m);
        if (beta == T(0))
            for (int j = 0; j < n; ++j)
                for (int i = 0; i < m; ++i) cv(i, j) = T(0);
        ts::reference_gemm<T>(op_a, op_b, alpha, av, bv, beta, cv);
    }
    auto trans = [](ts::op o) { return o == ts::op::n ? 'N' : o == ts::op::t ? 'T' : 'C'; };
    const char ta = trans(op_a), tb = trans(op_b);
    const std::string what = std::string(ts::to_string(ts::dtype_of<T>())) + " case " + std::to_string(case_no) + " grid " +
                             std::to_string(p) + "x" + std::to_string(q) + " " + ta + tb + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                             " k=" + std::to_string(k) + (dtype2 ? " DTYPE 2" : "") + (case_no % 4 == 3 ? " k-blocks" : "") +
                             (layered ? " layers " + std::to_string(cg.lg->layers()) : "");
    const double tol = std::is_same_v<ts::real_type_t<T>, float> ? (ts::is_complex_v<T> ? 4e-5 : 2e-5) : 1e-12;

    std::vector<T> ours = c.local;
#ifdef TILESTREAM_TEST_FRONT
    scalapack_gemm<T>(ta, tb, m, n, k, alpha, a.local.data(), ia2, ja, a.desc, b.local.data(), ib, jb2, b.desc, beta,
                      ours.data(), ic, jc, c.desc);
#else
    static ts::context ctx("cpu", {.cpu_threads = 1});  // this rank's devices, opened once
    td::pgemm_options po;
    po.context = &ctx;
    // Now and then k added in k-blocks of a width of their own (pieces of several blocks
    // broadcast into one panel, B's as strided blocks).
    if (case_no % 4 == 3) po.k_block = uni(2, 7);
    // Off layer 0 no arrays: a layer receives what it multiplies.
    const td::pgemm_report rep =
        td::pgemm<T>(*cg.lg, op_a, op_b, m, n, k, alpha, holder ? a.local.data() : nullptr, ia2, ja, a.desc,
                     holder ? b.local.data() : nullptr, ib, jb2, b.desc, beta, holder ? ours.data() : nullptr, ic, jc, c.desc, po);
    if (layered) {
        // (A layer with an empty slice of k redistributes nothing: the flags are summed over the ranks.)
        unsigned long long mine[3] = {rep.bytes_sent, rep.bytes_received, rep.redistributed_a || rep.redistributed_b};
        unsigned long long total[3] = {0, 0, 0};
        td::check_mpi(MPI_Allreduce(mine, total, 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, cg.lg->comm()), "MPI_Allreduce");
        if (total[0] != total[1])
            fail(what + ": " + std::to_string(total[0]) + " bytes sent but " + std::to_string(total[1]) + " received");
        // Aligned with C (no redistribution): the model's words are exact.
        if (total[2] == 0 && alpha != T(0) && k > 0) {
            ++model_checks;
            const auto model = td::model_pgemm_traffic(op_a, op_b, m, n, k, p, q, cg.lg->layers());
            const double predicted = model.words * cg.lg->layers() * p * q * sizeof(T);
            if (std::fabs(predicted - double(total[0])) > 1e-9 * predicted + 0.5)
                fail(what + ": " + std::to_string(total[0]) + " bytes sent, the model says " + std::to_string(predicted));
        }
    }
#endif
    if (holder) c.check(expected, ours, cg.my_row, cg.my_col, tol, what + " (tilestream vs reference)");
    if (layered) return;
#ifndef TILESTREAM_TEST_FRONT
    std::vector<T> theirs = c_clean;  // ScaLAPACK is the comparison, not under test: no poison
    scalapack_gemm<T>(ta, tb, m, n, k, alpha, a.local.data(), ia2, ja, a.desc, b.local.data(), ib, jb2, b.desc, beta,
                      theirs.data(), ic, jc, c.desc);
    c.check(expected, theirs, cg.my_row, cg.my_col, tol, what + " (ScaLAPACK vs reference)");
    // Both on the same descriptors, every local element (outside the sub-matrix bitwise).
    for (std::size_t i = 0; i < ours.size(); ++i)
        if (!(std::abs(ts::wide_type_t<T>(ours[i]) - ts::wide_type_t<T>(theirs[i])) <=
              tol * (1 + std::abs(ts::wide_type_t<T>(theirs[i])))) &&
            !(is_nan(ours[i]) && is_nan(theirs[i]))) {
            fail(what + ": tilestream and ScaLAPACK differ at local element " + std::to_string(i) + ": " +
                 text(ts::wide_type_t<T>(ours[i])) + " vs " + text(ts::wide_type_t<T>(theirs[i])));
            break;
        }
#endif
}

}  // namespace

int main(int argc, char** argv) {
    td::environment env(&argc, &argv);
    rank = env.rank();
#ifdef TILESTREAM_TEST_FRONT
    Dl_info info{};
    const std::pair<const char*, void*> fronts[] = {{"psgemm_", reinterpret_cast<void*>(&psgemm_)},
                                                    {"pdgemm_", reinterpret_cast<void*>(&pdgemm_)},
                                                    {"pcgemm_", reinterpret_cast<void*>(&pcgemm_)},
                                                    {"pzgemm_", reinterpret_cast<void*>(&pzgemm_)}};
    for (const auto& [name, fn] : fronts)
        if (dladdr(fn, &info) == 0 || !info.dli_fname || !std::strstr(info.dli_fname, "tilestream_scalapack"))
            fail(std::string(name) + " resolves to " + (info.dli_fname ? info.dli_fname : "?") + ", not tilestream_scalapack");
#endif
    const int cases = argc > 1 ? std::atoi(argv[1]) : 40;
    int total = 0;
    if (argc > 2 && std::string(argv[2]) == "layers") {
        for (int c = 2; c <= env.size(); ++c)
            for (int p = 1; env.size() % c == 0 && p <= env.size() / c; ++p) {
                if ((env.size() / c) % p) continue;
                const td::layered_grid lg(MPI_COMM_WORLD, p, env.size() / c / p, c);
                const case_grid cg{lg.layer().rows(), lg.layer().cols(), lg.layer().my_row(), lg.layer().my_col(), &lg};
                std::mt19937 rng(4321 + 17 * p + c);  // the same on every rank
                for (int i = 0; i < cases; ++i) {
                    one_case<double>(rng, 0, cg, i);
                    one_case<float>(rng, 0, cg, i);
                    total += 2;
                    if (i % 2 == 0) {  // complex: every other case (test time)
                        one_case<std::complex<double>>(rng, 0, cg, i);
                        one_case<std::complex<float>>(rng, 0, cg, i);
                        total += 2;
                    }
                }
            }
        int all = 0;
        td::check_mpi(MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        if (rank == 0)
            std::printf("%d ranks: %d cases over layers (%d with bytes against the model), %d failures\n", env.size(),
                        total, model_checks, all);
        return all == 0 && model_checks > 0 ? 0 : 1;
    }
#ifdef TILESTREAM_TEST_FRONT
    // The front takes the grid from the BLACS context: every P x Q up to the rank count (a grid
    // of fewer processes leaves the others idle), BLACS's row- and column-major orders.
    int grids = 0;
    for (int p = 1; p <= env.size(); ++p)
        for (int q = 1; p * q <= env.size(); ++q) {
            const char* order = (p + q) % 2 ? "Col" : "Row";
            int ctxt = 0;
            Cblacs_get(-1, 0, &ctxt);
            Cblacs_gridinit(&ctxt, order, p, q);
            case_grid cg{p, q};
            int rows = 0, cols = 0;
            Cblacs_gridinfo(ctxt, &rows, &cols, &cg.my_row, &cg.my_col);
            ++grids;
            if (cg.my_row < 0 || cg.my_row >= p) continue;  // not in this grid
            std::mt19937 rng(1234 + 17 * p + 5 * q);  // the same on every rank
            const int n_cases = p * q == env.size() ? cases : std::max(2, cases / 3);
            for (int i = 0; i < n_cases; ++i) {
                one_case<double>(rng, ctxt, cg, i);
                one_case<float>(rng, ctxt, cg, i);
                total += 2;
                if (i % 2 == 0) {  // complex: every other case (test time)
                    one_case<std::complex<double>>(rng, ctxt, cg, i);
                    one_case<std::complex<float>>(rng, ctxt, cg, i);
                    total += 2;
                }
            }
            Cblacs_gridexit(ctxt);
        }
#else
    for (int p = 1; p <= env.size(); ++p) {
        if (env.size() % p) continue;
        const int q = env.size() / p;
        td::layered_grid grid(MPI_COMM_WORLD, p, q, 1);
        const case_grid cg{p, q, grid.layer().my_row(), grid.layer().my_col(), &grid};
        int ctxt = 0;
        Cblacs_get(-1, 0, &ctxt);
        Cblacs_gridinit(&ctxt, "Row", p, q);
        std::mt19937 rng(1234 + 17 * p);  // the same on every rank
        for (int i = 0; i < cases; ++i) {
            one_case<double>(rng, ctxt, cg, i);
            one_case<float>(rng, ctxt, cg, i);
            total += 2;
            if (i % 2 == 0) {  // complex: every other case (test time)
                one_case<std::complex<double>>(rng, ctxt, cg, i);
                one_case<std::complex<float>>(rng, ctxt, cg, i);
                total += 2;
            }
        }
        Cblacs_gridexit(ctxt);
    }
#endif
    int all = 0;
    td::check_mpi(MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    if (rank == 0)
        std::printf("%d ranks: %d cases on every grid, %d failures\n", env.size(), total, all);
    return all == 0 ? 0 : 1;
}
