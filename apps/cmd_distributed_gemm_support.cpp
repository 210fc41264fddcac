// Random block-cyclic operands, the distributed Freivalds check, the ScaLAPACK anchor and the
// merged trace for `tilestream gemm` over MPI ranks.
#include "cmd_distributed_gemm_support.hpp"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <complex>
#include <limits>
#include <climits>
#include <cstdio>
#include <stdexcept>

#include <dlfcn.h>

namespace tilestream::cli::ranks {

namespace {

std::uint64_t mix(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// +-1 for entry i of check vector `v` (the same on every rank).
double sign(std::uint64_t seed, int v, index_t i) { return (mix(seed ^ mix(std::uint64_t(v) * 7919 + std::uint64_t(i))) >> 63) ? 1.0 : -1.0; }

/// Calls f(global row, global column, value in double precision) for each local element of m,
/// the value conjugated when `conj` (op c of a complex operand).
template <class T, class F>
void each_local(const td::process_grid& g, const td::block_cyclic_matrix<T>& m, F&& f, bool conj = false) {
    if (m.local.empty()) return;
    for (index_t lj = 0; lj < m.local_cols; ++lj) {
        const index_t gj = global_index(lj, m.block, g.my_col(), g.cols());
        for (index_t li = 0; li < m.local_rows; ++li) {
            wide_type_t<T> v(m.local[std::size_t(li + lj * m.ld())]);
            if constexpr (is_complex_v<T>)
                if (conj) v = std::conj(v);
            f(global_index(li, m.block, g.my_row(), g.rows()), gj, v);
        }
    }
}

/// Sums over the ranks (vectors of m, n or k elements: int extents).
template <class W>
void sum_over(MPI_Comm comm, std::vector<W>& v) {
    const MPI_Datatype t = std::is_same_v<W, double> ? MPI_DOUBLE : MPI_C_DOUBLE_COMPLEX;
    td::check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data(), int(v.size()), t, MPI_SUM, comm), "MPI_Allreduce (check)");
}

template <class W>
std::vector<W> zeros(index_t len) {
    return std::vector<W>(static_cast<std::size_t>(len), W(0));
}

template <class W>
double norm2(const std::vector<W>& v) {
    double s = 0;
    for (const W& x : v) s += std::norm(x);
    return std::sqrt(s);
}

template <class W>
bool finite(const W& v) {
    if constexpr (std::is_same_v<W, double>) return std::isfinite(v);
    else return std::isfinite(v.real()) && std::isfinite(v.imag());
}

}  // namespace

double random_element(std::uint64_t seed, int id, index_t i, index_t j) {
    const std::uint64_t x = mix(mix(seed * 31 + std::uint64_t(id)) ^ mix(std::uint64_t(i) * 0x100000001B3ull + std::uint64_t(j)));
    double v = double(x >> 11) * 0x1.0p-52 - 1.0;
    if (std::abs(v) < 1e-3) v = v < 0 ? -0.5 : 0.5;
    return v;
}

template <class T>
void fill_random_blocks(const td::process_grid& g, td::block_cyclic_matrix<T>& m, std::uint64_t seed, int id) {
    if (m.local.empty()) return;
    for (index_t lj = 0; lj < m.local_cols; ++lj) {
        const index_t gj = global_index(lj, m.block, g.my_col(), g.cols());
        for (index_t li = 0; li < m.local_rows; ++li)
        {
            const index_t gi = global_index(li, m.block, g.my_row(), g.rows());
            // Complex: both parts non-zero, the imaginary part from a stream of its own.
            if constexpr (is_complex_v<T>)
                m.local[std::size_t(li + lj * m.ld())] = T(real_type_t<T>(random_element(seed, id, gi, gj)),
                                                           real_type_t<T>(random_element(seed, id + 1000, gi, gj)));
            else
                m.local[std::size_t(li + lj * m.ld())] = T(random_element(seed, id, gi, gj));
        }
    }
}

template <class T>
rank_check check_over_ranks(MPI_Comm comm, const td::process_grid& g, op op_a, op op_b, T alpha,
                            const td::block_cyclic_matrix<T>& a, const td::block_cyclic_matrix<T>& b, T beta,
                            const td::block_cyclic_matrix<T>* c0, const td::block_cyclic_matrix<T>& c, index_t m,
                            index_t n, index_t k, std::uint64_t seed) {
    using W = wide_type_t<T>;
    const auto t0 = std::chrono::steady_clock::now();
    rank_check r;
    const bool na = op_a == op::n, nb = op_b == op::n, with_c0 = beta != T(0) && c0;
    // op c conjugates A's or B's elements as they are read (complex only; on real data c is t).
    const bool ca = op_a == op::c, cb = op_b == op::c;
    // ||C||_F and whether everything is finite.
    std::vector<double> totals(2, 0.0);
    auto finite_scan = [&](const td::block_cyclic_matrix<T>& x) {
        each_local(g, x, [&](index_t, index_t, const W& v) {
            if (!finite(v)) totals[1] += 1;
        });
    };
    finite_scan(a);
    finite_scan(b);
    if (with_c0) finite_scan(*c0);
    each_local(g, c, [&](index_t, index_t, const W& v) {
        if (!finite(v)) totals[1] += 1;
        totals[0] += std::norm(v);
    });
    sum_over(comm, totals);
    const double unit = std::is_same_v<real_type_t<T>, float> ? 0x1.0p-24 : 0x1.0p-53;
    // A complex multiply-add adds two real products to each part: 2k terms.
    const double terms = is_complex_v<T> ? 2.0 * double(k) : double(k);
    r.tolerance = std::max(16.0, 8 * std::sqrt(terms)) * unit + 8 * (std::sqrt(double(n)) + std::sqrt(double(k))) * 0x1.0p-53;
    if (totals[1] > 0) {
        r.finite = false;
        r.error = std::numeric_limits<double>::infinity();
        return r;
    }
    const double c_norm = std::sqrt(totals[0]);
    double worst = 0;
    const W al(alpha), be(beta);
    for (int v = 0; v < 4; ++v) {
        // Right: C x against alpha op(A) (op(B) x) + beta C0 x.
        std::vector<W> x = zeros<W>(n), t = zeros<W>(k), u = zeros<W>(m), w = zeros<W>(m), w0 = zeros<W>(m);
        for (index_t j = 0; j < n; ++j) x[std::size_t(j)] = W(sign(seed, v, j));
        each_local(g, b, [&](index_t i, index_t j, const W& e) {
            if (nb) t[std::size_t(i)] += e * x[std::size_t(j)];
            else t[std::size_t(j)] += e * x[std::size_t(i)];
        }, cb);
        sum_over(comm, t);
        each_local(g, a, [&](index_t i, index_t j, const W& e) {
            if (na) u[std::size_t(i)] += e * t[std::size_t(j)];
            else u[std::size_t(j)] += e * t[std::size_t(i)];
        }, ca);
        each_local(g, c, [&](index_t i, index_t j, const W& e) { w[std::size_t(i)] += e * x[std::size_t(j)]; });
        if (with_c0) each_local(g, *c0, [&](index_t i, index_t j, const W& e) { w0[std::size_t(i)] += e * x[std::size_t(j)]; });
        sum_over(comm, u);
        sum_over(comm, w);
        if (with_c0) sum_over(comm, w0);
        for (index_t i = 0; i < m; ++i) w[std::size_t(i)] -= al * u[std::size_t(i)] + be * w0[std::size_t(i)];
        worst = std::max(worst, norm2(w));
        // Left: y^T C against alpha (y^T op(A)) op(B) + beta y^T C0.
        std::vector<W> y = zeros<W>(m), s = zeros<W>(k), z = zeros<W>(n), q = zeros<W>(n), q0 = zeros<W>(n);
        for (index_t i = 0; i < m; ++i) y[std::size_t(i)] = W(sign(seed + 1, v, i));
        each_local(g, a, [&](index_t i, index_t j, const W& e) {
            if (na) s[std::size_t(j)] += y[std::size_t(i)] * e;
            else s[std::size_t(i)] += y[std::size_t(j)] * e;
        }, ca);
        sum_over(comm, s);
        each_local(g, b, [&](index_t i, index_t j, const W& e) {
            if (nb) z[std::size_t(j)] += s[std::size_t(i)] * e;
            else z[std::size_t(i)] += s[std::size_t(j)] * e;
        }, cb);
        each_local(g, c, [&](index_t i, index_t j, const W& e) { q[std::size_t(j)] += y[std::size_t(i)] * e; });
        if (with_c0) each_local(g, *c0, [&](index_t i, index_t j, const W& e) { q0[std::size_t(j)] += y[std::size_t(i)] * e; });
        sum_over(comm, z);
        sum_over(comm, q);
        if (with_c0) sum_over(comm, q0);
        for (index_t j = 0; j < n; ++j) q[std::size_t(j)] -= al * z[std::size_t(j)] + be * q0[std::size_t(j)];
        worst = std::max(worst, norm2(q));
    }
    r.error = c_norm > 0 ? worst / c_norm : worst;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

namespace {

/// ScaLAPACK, loaded on the first --anchor only (TILESTREAM_SCALAPACK_PATH, set at configure time),
/// so a run without it maps no ScaLAPACK.
struct scalapack_library {
    void (*blacs_get)(int, int, int*) = nullptr;
    void (*gridinit)(int*, const char*, int, int) = nullptr;
    void (*gridexit)(int) = nullptr;
    void* gemm[4] = {};  ///< psgemm_, pdgemm_, pcgemm_, pzgemm_ (indexed by dtype)
    std::string error;
};

const scalapack_library& scalapack() {
    static const scalapack_library lib = [] {
        scalapack_library l;
#ifdef TILESTREAM_SCALAPACK_PATH
        void* h = dlopen(TILESTREAM_SCALAPACK_PATH, RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            l.error = std::string("cannot load ScaLAPACK: ") + dlerror();
            return l;
        }
        l.blacs_get = reinterpret_cast<void (*)(int, int, int*)>(dlsym(h, "Cblacs_get"));
        l.gridinit = reinterpret_cast<void (*)(int*, const char*, int, int)>(dlsym(h, "Cblacs_gridinit"));
        l.gridexit = reinterpret_cast<void (*)(int)>(dlsym(h, "Cblacs_gridexit"));
        bool all = true;
        for (dtype t : all_dtypes) {
            const std::string symbol = std::string("p") + dtype_traits(t).blas_prefix + "gemm_";
            l.gemm[std::size_t(t)] = dlsym(h, symbol.c_str());
            all = all && l.gemm[std::size_t(t)];
        }
        if (!l.blacs_get || !l.gridinit || !l.gridexit || !all)
            l.error = std::string("ScaLAPACK at ") + TILESTREAM_SCALAPACK_PATH + " lacks BLACS or PxGEMM";
#else
        l.error = "--anchor over ranks needs ScaLAPACK (libscalapack-openmpi-dev), not found when this tool was built";
#endif
        return l;
    }();
    return lib;
}

template <class T>
using pxgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const T*, const T*, const int*,
                        const int*, const int*, const T*, const int*, const int*, const int*, const T*, T*, const int*,
                        const int*, const int*);

}  // namespace

template <class T>
rank_anchor scalapack_anchor(const td::process_grid& g, bool holds, op op_a, op op_b, T alpha,
                             const td::block_cyclic_matrix<T>& a, const td::block_cyclic_matrix<T>& b, T beta,
                             const td::block_cyclic_matrix<T>& c0, index_t m, index_t n, index_t k, int repeat) {
    rank_anchor r;
    r.name = std::string("ScaLAPACK P") + char(std::toupper(dtype_traits(dtype_of<T>()).blas_prefix)) + "GEMM";
    const scalapack_library& lib = scalapack();
    // Every rank reached here; all agree that the library is there before BLACS is called.
    td::agree_on_errors(MPI_COMM_WORLD, lib.error, true);
    const auto gemm = reinterpret_cast<pxgemm<T>>(lib.gemm[std::size_t(dtype_of<T>())]);
    int ctxt = 0;
    lib.blacs_get(-1, 0, &ctxt);
    lib.gridinit(&ctxt, "Row", g.rows(), g.cols());  // the first P*Q ranks: layer 0, as process_grid places them
    std::vector<double> times;
    for (int rep = 0; rep < repeat; ++rep) {
        td::block_cyclic_matrix<T> c = c0;
        int da[9], db[9], dc[9];
        std::copy(a.desc, a.desc + 9, da);
        std::copy(b.desc, b.desc + 9, db);
        std::copy(c.desc, c.desc + 9, dc);
        da[1] = db[1] = dc[1] = ctxt;
        auto trans = [](op o) { return o == op::n ? 'N' : o == op::t ? 'T' : 'C'; };
        const char ta = trans(op_a), tb = trans(op_b);
        const int im = int(m), in = int(n), ik = int(k), one = 1;
        td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        const auto t0 = std::chrono::steady_clock::now();
        if (holds)
            gemm(&ta, &tb, &im, &in, &ik, &alpha, a.data(), &one, &one, da, b.data(), &one, &one, db, &beta, c.data(), &one,
                 &one, dc);
        double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), most = 0;
        td::check_mpi(MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
        times.push_back(most);
    }
    if (holds) lib.gridexit(ctxt);
    std::sort(times.begin(), times.end());
    const std::size_t h = times.size();
    r.seconds = h % 2 ? times[h / 2] : 0.5 * (times[h / 2 - 1] + times[h / 2]);
    r.gflops = r.seconds > 0 ? double(dtype_traits(dtype_of<T>()).flops_per_multiply_add) * double(m) * double(n) *
                                   double(k) / r.seconds * 1e-9
                             : 0.0;
    return r;
}

std::vector<trace_span> gather_spans(MPI_Comm comm, const std::vector<trace_span>& mine, double origin) {
    // Each span as text: kind, stream, bytes, flops, t0, t1, device, name (tab-separated lines).
    std::string text;
    for (const auto& s : mine) {
        char nums[160];
        std::snprintf(nums, sizeof nums, "%d\t%d\t%zu\t%.17g\t%.17g\t%.17g\t", int(s.kind), s.stream, s.bytes, s.flops,
                      s.t0 - origin, s.t1 - origin);
        text += nums + s.device + "\t" + s.name + "\n";
    }
    int rank = 0, size = 1;
    td::check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    td::check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    int len = int(text.size());
    std::vector<int> lens(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
    td::check_mpi(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm), "MPI_Gather (trace sizes)");
    std::string all;
    if (rank == 0) {
        long long total = 0;
        for (int r = 0; r < size; ++r) {
            displs[std::size_t(r)] = int(total);
            total += lens[std::size_t(r)];
        }
        if (total > INT_MAX) throw td::collective_failure("the ranks' traces exceed 2 GiB");
        all.resize(std::size_t(total));
    }
    td::check_mpi(MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, comm),
                  "MPI_Gatherv (traces)");
    std::vector<trace_span> out;
    if (rank != 0) return out;
    for (int r = 0; r < size; ++r) {
        std::size_t at = std::size_t(displs[std::size_t(r)]);
        const std::size_t end = at + std::size_t(lens[std::size_t(r)]);
        while (at < end) {
            const std::size_t nl = all.find('\n', at);
            const std::string line = all.substr(at, nl - at);
            at = nl + 1;
            trace_span s;
            int kind = 0;
            std::size_t pos = 0;
            auto field = [&]() {
                const std::size_t tab = line.find('\t', pos);
                std::string f = line.substr(pos, tab - pos);
                pos = tab == std::string::npos ? line.size() : tab + 1;
                return f;
            };
            kind = std::stoi(field());
            s.kind = span_kind(kind);
            s.stream = std::stoi(field());
            s.bytes = std::stoull(field());
            s.flops = std::stod(field());
            s.t0 = std::stod(field());
            s.t1 = std::stod(field());
            s.device = "rank " + std::to_string(r) + ": " + field();
            s.name = line.substr(pos);
            out.push_back(std::move(s));
        }
    }
    return out;
}

#define TILESTREAM_RANKS_SUPPORT(T)                                                                             \
    template void fill_random_blocks<T>(const td::process_grid&, td::block_cyclic_matrix<T>&, std::uint64_t, int);    \
    template rank_check check_over_ranks<T>(MPI_Comm, const td::process_grid&, op, op, T,                            \
                                            const td::block_cyclic_matrix<T>&, const td::block_cyclic_matrix<T>&, T,  \
                                            const td::block_cyclic_matrix<T>*, const td::block_cyclic_matrix<T>&,     \
                                            index_t, index_t, index_t, std::uint64_t);                                \
    template rank_anchor scalapack_anchor<T>(const td::process_grid&, bool, op, op, T,                               \
                                             const td::block_cyclic_matrix<T>&, const td::block_cyclic_matrix<T>&, T, \
                                             const td::block_cyclic_matrix<T>&, index_t, index_t, index_t, int);
TILESTREAM_RANKS_SUPPORT(float)
TILESTREAM_RANKS_SUPPORT(double)
TILESTREAM_RANKS_SUPPORT(std::complex<float>)
TILESTREAM_RANKS_SUPPORT(std::complex<double>)
#undef TILESTREAM_RANKS_SUPPORT

}  // namespace tilestream::cli::ranks
