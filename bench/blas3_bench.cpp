// The Level 3 routines' goals in one run (f64 at n = 4096, c64 at n = 2048), runs alternated with their anchors: each routine in
// core through a context with default options against the same OpenBLAS routine called directly
// (all cores), out of core with a budget of a quarter of its operands against in core, and cpu:2
// against cpu:1 (one thread each; efficiency), beside the machine's ceiling for it (OpenBLAS, one
// thread on each half at once). Writes JSON; exits 1 when a figure is below its goal.
#include "bench_common.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <cblas.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

namespace ts = tilestream;

namespace {

/// Operands of one call, A well conditioned for the triangular routines (diagonal 1, off-diagonal
/// entries of 1/n): repeated TRSM and TRMM runs keep B's magnitude.
template <class T>
struct operands {
    ts::blas3_routine routine;
    ts::blas3_flags flags;
    ts::index_t n;
    ts::host_matrix<T> a, b, c;
};

template <class T>
void fill(ts::host_matrix<T>& m, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    ts::bench::fill_uniform(m, rng);
}

template <class T>
operands<T> make(ts::blas3_routine r, ts::blas3_flags f, ts::index_t n) {
    operands<T> o{r, f, n, {}, {}, {}};
    o.a = ts::host_matrix<T>(n, n, ts::layout::col_major);
    fill(o.a, 1);
    if (r == ts::blas3_routine::trsm || r == ts::blas3_routine::trmm)
        for (ts::index_t j = 0; j < n; ++j)
            for (ts::index_t i = 0; i < n; ++i) o.a(i, j) = i == j ? T(1) : T(o.a(i, j) / T(double(n)));
    if (r == ts::blas3_routine::symm || r == ts::blas3_routine::hemm || r == ts::blas3_routine::syr2k ||
        r == ts::blas3_routine::her2k) {
        o.b = ts::host_matrix<T>(n, n, ts::layout::col_major);
        fill(o.b, 2);
    }
    o.c = ts::host_matrix<T>(n, n, ts::layout::col_major);
    fill(o.c, 3);
    return o;
}

bool updates_c(ts::blas3_routine r) { return r != ts::blas3_routine::trsm && r != ts::blas3_routine::trmm; }
bool rank_k(ts::blas3_routine r) {
    return r == ts::blas3_routine::syrk || r == ts::blas3_routine::syr2k || r == ts::blas3_routine::herk ||
           r == ts::blas3_routine::her2k;
}

template <class T>
ts::blas3_operands<T> ops_of(operands<T>& o) {
    ts::blas3_operands<T> x;
    x.alpha = T(1);
    x.beta = updates_c(o.routine) ? T(0.5) : T(0);
    x.a = o.a.view();
    if (o.b.size() > 0) x.b = o.b.view();
    x.c = o.c.view();
    return x;
}

/// The same call straight to OpenBLAS (column-major), on rows x cols of C (or B) at c: the whole of
/// it, or one half of its independent columns (left) or rows (right).
template <class T>
void openblas(operands<T>& o, ts::index_t rows, ts::index_t cols, T* c) {
    const auto s = o.flags.side == ts::side::left ? CblasLeft : CblasRight;
    const auto u = o.flags.uplo == ts::uplo::lower ? CblasLower : CblasUpper;
    const auto t = o.flags.trans == ts::op::n ? CblasNoTrans : o.flags.trans == ts::op::t ? CblasTrans : CblasConjTrans;
    const int m = int(rows), n = int(cols), k = int(o.n), ld = int(o.n);
    const T alpha = T(1), beta = T(0.5);
    const double alpha_re = 1.0, beta_re = 0.5;
    const auto sc = [](const T& v) {
        if constexpr (ts::is_complex_v<T>) return static_cast<const void*>(&v);
        else return v;
    };
    const T* a = o.a.data();
    const T* b = o.b.size() > 0 ? o.b.data() : nullptr;
    constexpr bool z = ts::is_complex_v<T>;
    switch (o.routine) {
        case ts::blas3_routine::trsm:
            if constexpr (z) cblas_ztrsm(CblasColMajor, s, u, t, CblasNonUnit, m, n, sc(alpha), a, ld, c, ld);
            else cblas_dtrsm(CblasColMajor, s, u, t, CblasNonUnit, m, n, alpha, a, ld, c, ld);
            break;
        case ts::blas3_routine::trmm:
            if constexpr (z) cblas_ztrmm(CblasColMajor, s, u, t, CblasNonUnit, m, n, sc(alpha), a, ld, c, ld);
            else cblas_dtrmm(CblasColMajor, s, u, t, CblasNonUnit, m, n, alpha, a, ld, c, ld);
            break;
        case ts::blas3_routine::symm:
            if constexpr (z) cblas_zsymm(CblasColMajor, s, u, m, n, sc(alpha), a, ld, b, ld, sc(beta), c, ld);
            else cblas_dsymm(CblasColMajor, s, u, m, n, alpha, a, ld, b, ld, beta, c, ld);
            break;
        case ts::blas3_routine::syrk:
            if constexpr (z) cblas_zsyrk(CblasColMajor, u, t, n, k, sc(alpha), a, ld, sc(beta), c, ld);
            else cblas_dsyrk(CblasColMajor, u, t, n, k, alpha, a, ld, beta, c, ld);
            break;
        case ts::blas3_routine::syr2k:
            if constexpr (z) cblas_zsyr2k(CblasColMajor, u, t, n, k, sc(alpha), a, ld, b, ld, sc(beta), c, ld);
            else cblas_dsyr2k(CblasColMajor, u, t, n, k, alpha, a, ld, b, ld, beta, c, ld);
            break;
        case ts::blas3_routine::hemm:
            if constexpr (z) cblas_zhemm(CblasColMajor, s, u, m, n, &alpha, a, ld, b, ld, &beta, c, ld);
            break;
        case ts::blas3_routine::herk:
            if constexpr (z) cblas_zherk(CblasColMajor, u, t, n, k, alpha_re, a, ld, beta_re, c, ld);
            break;
        case ts::blas3_routine::her2k:
            if constexpr (z) cblas_zher2k(CblasColMajor, u, t, n, k, &alpha, a, ld, b, ld, beta_re, c, ld);
            break;
        case ts::blas3_routine::potrf: break;  // potrf_bench.cpp
    }
}

/// OpenBLAS's thread count for the anchor's call (the library sets its own before each of its calls).
template <class F>
void with_openblas_threads(int threads, F&& f) {
    openblas_set_num_threads(threads);
    f();
}

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: blas3_bench [--out F] [--git-hash H] [--reps R] [--n 4096] [--complex-n 2048] "
                              "[--routines trsm,trmm,symm,syrk,syr2k] [--complex-routines trsm,...,her2k] "
                              "[--only incore,ooc,scaling] [--case side=right|side=left|uplo=lower|uplo=upper] [--margin 1.0] "
                              "[--explain on] [--ooc-tiles 1024/2048,1024/1024]\n"
                              "  a routine list may be 'none'; --ooc-tiles: beside each out-of-core row, the same budget at these "
                              "tilings (along A's order / the other dimension) against the planner's choice (no goal)");
    const auto [out, git, reps, n, complex_n, wanted, margin] =
        ts::bench::goal_options(args, 5, 4096, 2048, "incore,ooc,scaling");
    const auto routine_list = [&](const char* key, const char* all) {
        const std::string v = args.get(key, all);
        return v == "none" ? std::vector<std::string>{} : ts::bench::split(v, ',');
    };
    const auto routines = routine_list("routines", "trsm,trmm,symm,syrk,syr2k");
    const auto complex_routines = routine_list("complex-routines", "trsm,trmm,symm,hemm,syrk,herk,syr2k,her2k");
    // Tilings to compare with the planner's out of core: "tile/tile_free" pairs.
    std::vector<std::pair<ts::index_t, ts::index_t>> ooc_tiles;
    for (const std::string& t : ts::bench::split(args.get("ooc-tiles", ""), ',')) {
        if (t.empty()) continue;
        const auto slash = t.find('/');
        const auto number = [&](const std::string& x) {
            std::size_t used = 0;
            long long v = -1;
            try {
                v = std::stoll(x, &used);
            } catch (const std::exception&) {
            }
            if (used != x.size() || v <= 0)
                throw ts::invalid_argument("--ooc-tiles: '" + t + "' is not TILE/TILE_FREE (two positive integers)");
            return ts::index_t(v);
        };
        if (slash == std::string::npos)
            throw ts::invalid_argument("--ooc-tiles: '" + t + "' is not TILE/TILE_FREE (two positive integers)");
        ooc_tiles.push_back({number(t.substr(0, slash)), number(t.substr(slash + 1))});
    }
    const std::string only_case = args.get("case", "");  // e.g. side=right: that case of each routine alone
    const bool explain_plans = args.get("explain", "off") == "on";  // each plan, to stderr
    if (!args.finish()) return 2;
    const int cores = ts::inventory().cpu_cores;
    ts::bench::goal_table table(margin);
    ts::context one("cpu");
    const auto run_routine = [&]<class T>(const std::string& name, ts::index_t n) {
        const ts::blas3_routine r = ts::parse_blas3_routine(name);
        const bool rk = rank_k(r);
        const std::string type(ts::to_string(ts::dtype_of<T>()));
        const char prefix = ts::dtype_traits(ts::dtype_of<T>()).blas_prefix;
        // Both sides (uplo lower) for the side routines, both triangles for the syrk family.
        std::vector<ts::blas3_flags> cases;
        if (rk) cases = {{ts::side::left, ts::uplo::lower, ts::op::n, ts::diag::non_unit},
                         {ts::side::left, ts::uplo::upper, ts::op::n, ts::diag::non_unit}};
        else cases = {{ts::side::left, ts::uplo::lower, ts::op::n, ts::diag::non_unit},
                      {ts::side::right, ts::uplo::upper, ts::op::n, ts::diag::non_unit}};
        for (const ts::blas3_flags& f : cases) {
            const std::string label = name + (rk ? " uplo=" + std::string(ts::to_string(f.uplo))
                                                 : " side=" + std::string(ts::to_string(f.side))) +
                                      ", " + type + " n=" + std::to_string(n);
            if (!only_case.empty() && label.find(only_case) == std::string::npos) continue;
            operands<T> o = make<T>(r, f, n);
            const ts::blas3_operands<T> x = ops_of(o);
            if (wanted("incore")) {
                if (explain_plans) std::fputs(ts::explain(one.plan(ts::describe_blas3<T>(r, f, x))).c_str(), stderr);
                ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { one.blas3<T>(r, f, x); }, [&] {
                    with_openblas_threads(cores, [&] { openblas(o, n, n, o.c.data()); });
                });
                table.report({"in core / OpenBLAS, " + label, "cblas_" + std::string(1, prefix) + name + " (all cores)", t.ours,
                        t.anchor, 0, 0.90});
            }
            if (wanted("ooc")) {
                const std::size_t operand_bytes = std::size_t(n) * std::size_t(n) * sizeof(T) * (2 + (o.b.size() > 0));
                ts::context quarter("cpu", {.memory_budget = operand_bytes / 4});
                // Planned at each call, as in core: a plan made once before the first run would
                // keep the vendor kernel of a context that had not yet done enough work to
                // measure the others (blas3_context.cpp, level3_probe_flops). Planning takes about
                // 1 ms either way (trsm f64 4096, in place and at a quarter budget).
                ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { quarter.blas3<T>(r, f, x); },
                                                                [&] { one.blas3<T>(r, f, x); });
                if (explain_plans) std::fputs(ts::explain(quarter.plan(ts::describe_blas3<T>(r, f, x))).c_str(), stderr);
                table.report({"out of core (25% budget) / in core, " + label, "in core, default", t.ours, t.anchor, 0, 0.85});
                const ts::blas3_plan chosen = quarter.plan(ts::describe_blas3<T>(r, f, x));
                for (const auto& [tile, tile_free] : ooc_tiles) {
                    ts::blas3_call_options forced;
                    forced.tile = tile;
                    forced.tile_free = tile_free;
                    const ts::bench::pair_timing ft = ts::bench::alternate(reps, [&] { quarter.blas3<T>(r, f, x, forced); },
                                                                           [&] { quarter.blas3<T>(r, f, x); });
                    table.report({"out of core (25% budget), tiles " + std::to_string(tile) + "/" + std::to_string(tile_free) +
                                      " / the planner's, " + label,
                                  "the planner's tiles " + std::to_string(chosen.tile) + "/" + std::to_string(chosen.tile_free),
                                  ft.ours, ft.anchor, 0, 0});
                }
            }
            if (wanted("scaling")) {
                ts::context c1("cpu:1", {.cpu_threads = 1}), c2("cpu:2", {.cpu_threads = 1});
                ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { c2.blas3<T>(r, f, x); },
                                                                [&] { c1.blas3<T>(r, f, x); });
                table.report({"cpu:2 / cpu:1 efficiency (1 thread each), " + label, "cpu:1 (time halved)", t.ours, t.anchor / 2,
                        0, 0.90});
                // The ceiling: OpenBLAS alone, one thread on each half of B's independent columns
                // (left) or rows (right) at once.
                if (!rk) {
                    const ts::index_t half = n / 2;
                    const bool left = f.side == ts::side::left;
                    ts::bench::pair_timing c = ts::bench::alternate(
                        reps,
                        [&] {
                            with_openblas_threads(1, [&] {
                                std::thread other([&] { openblas(o, left ? n : half, left ? half : n, o.c.data()); });
                                openblas(o, left ? n : n - half, left ? n - half : n,
                                         o.c.data() + (left ? half * n : half));
                                other.join();
                            });
                        },
                        [&] { with_openblas_threads(1, [&] { openblas(o, n, n, o.c.data()); }); });
                    table.report({"ceiling: OpenBLAS, 1 thread per half at once, " + label, "1 thread (time halved)", c.ours,
                            c.anchor / 2, 0, 0});
                }
            }
        }
    };
    for (const std::string& name : routines) run_routine.template operator()<double>(name, n);
    for (const std::string& name : complex_routines) run_routine.template operator()<std::complex<double>>(name, complex_n);
    if (!out.empty()) table.write(out, "blas3_bench", git, n, complex_n, reps);
    return table.all_met() ? 0 : 1;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("blas3_bench", [&] { return run(argc, argv); });
}
