// The Level 3 routines' goals in one run, runs alternated with their anchors: each routine in
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
struct operands {
    ts::blas3_routine routine;
    ts::blas3_flags flags;
    ts::index_t m, n, k;
    ts::host_matrix<double> a, b, c;
};

operands make(ts::blas3_routine r, ts::blas3_flags f, ts::index_t n) {
    operands o{r, f, n, n, n, {}, {}, {}};
    const bool rank_k = r == ts::blas3_routine::syrk || r == ts::blas3_routine::syr2k;
    o.a = ts::host_matrix<double>(n, n, ts::layout::col_major);
    ts::fill_random(o.a.view(), 1);
    if (r == ts::blas3_routine::trsm || r == ts::blas3_routine::trmm)
        for (ts::index_t j = 0; j < n; ++j)
            for (ts::index_t i = 0; i < n; ++i) o.a(i, j) = i == j ? 1.0 : o.a(i, j) / double(n);
    if (r == ts::blas3_routine::symm || r == ts::blas3_routine::syr2k) {
        o.b = ts::host_matrix<double>(n, n, ts::layout::col_major);
        ts::fill_random(o.b.view(), 2);
    }
    o.c = ts::host_matrix<double>(n, n, ts::layout::col_major);
    ts::fill_random(o.c.view(), 3);
    (void)rank_k;
    return o;
}

ts::blas3_operands<double> ops_of(operands& o) {
    ts::blas3_operands<double> x;
    x.alpha = 1.0;
    x.beta = o.routine == ts::blas3_routine::symm || o.routine == ts::blas3_routine::syrk ||
                     o.routine == ts::blas3_routine::syr2k
                 ? 0.5
                 : 0.0;
    x.a = o.a.view();
    if (o.b.size() > 0) x.b = o.b.view();
    x.c = o.c.view();
    return x;
}

/// The same call straight to OpenBLAS (column-major), on rows [0, part) x all (or all of it).
void openblas(operands& o, ts::index_t n_cols, double* c_base) {
    const auto s = o.flags.side == ts::side::left ? CblasLeft : CblasRight;
    const auto u = o.flags.uplo == ts::uplo::lower ? CblasLower : CblasUpper;
    const auto t = o.flags.trans == ts::op::n ? CblasNoTrans : CblasTrans;
    const int n = int(o.n), ld = int(o.n), cols = int(n_cols);
    switch (o.routine) {
        case ts::blas3_routine::trsm: cblas_dtrsm(CblasColMajor, s, u, t, CblasNonUnit, n, cols, 1.0, o.a.data(), ld, c_base, ld); break;
        case ts::blas3_routine::trmm: cblas_dtrmm(CblasColMajor, s, u, t, CblasNonUnit, n, cols, 1.0, o.a.data(), ld, c_base, ld); break;
        case ts::blas3_routine::symm: cblas_dsymm(CblasColMajor, s, u, n, cols, 1.0, o.a.data(), ld, o.b.data(), ld, 0.5, c_base, ld); break;
        case ts::blas3_routine::syrk: cblas_dsyrk(CblasColMajor, u, t, n, n, 1.0, o.a.data(), ld, 0.5, c_base, ld); break;
        case ts::blas3_routine::syr2k: cblas_dsyr2k(CblasColMajor, u, t, n, n, 1.0, o.a.data(), ld, o.b.data(), ld, 0.5, c_base, ld); break;
        default: break;
    }
}

/// OpenBLAS's thread count for the anchor's call (the library sets its own before each of its calls).
template <class F>
void with_openblas_threads(int threads, F&& f) {
    openblas_set_num_threads(threads);
    f();
}

struct row {
    std::string name, anchor;
    double ours = 0, anchor_seconds = 0, ratio = 0, goal = 0;
    bool ok = true;
};

}  // namespace

int main(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: blas3_bench [--out F] [--git-hash H] [--reps R] [--n 4096] "
                              "[--routines trsm,trmm,symm,syrk,syr2k] [--only incore,ooc,scaling] [--margin 1.0]");
    const std::string out = args.get("out", ""), git = args.get("git-hash", "unknown");
    const int reps = int(args.number("reps", 5));
    const ts::index_t n = args.number("n", 4096);
    const auto routines = ts::bench::split(args.get("routines", "trsm,trmm,symm,syrk,syr2k"), ',');
    const auto only = ts::bench::split(args.get("only", "incore,ooc,scaling"), ',');
    const double margin = args.real("margin", 1.0);
    if (!args.finish()) return 2;
    const auto wanted = [&](const char* part) { return std::find(only.begin(), only.end(), part) != only.end(); };
    const int cores = ts::inventory().cpu_cores;
    std::vector<row> rows;
    const auto report = [&](row r) {
        r.ratio = r.anchor_seconds / r.ours;
        r.ok = r.goal <= 0 || r.ratio >= r.goal * margin;
        std::printf("%-52s %9.4f s  anchor %9.4f s  ratio %6.3f", r.name.c_str(), r.ours, r.anchor_seconds, r.ratio);
        if (r.goal > 0) std::printf("  goal >= %.2f  %s\n", r.goal, r.ok ? "ok" : "BELOW GOAL");
        else std::printf("  (no goal)\n");
        std::fflush(stdout);
        rows.push_back(std::move(r));
    };
    ts::context one("cpu");
    for (const std::string& name : routines) {
        const ts::blas3_routine r = ts::parse_blas3_routine(name);
        const bool rank_k = r == ts::blas3_routine::syrk || r == ts::blas3_routine::syr2k;
        // Both sides (uplo lower) for the side routines, both triangles for the syrk family.
        std::vector<ts::blas3_flags> cases;
        if (rank_k) cases = {{ts::side::left, ts::uplo::lower, ts::op::n, ts::diag::non_unit},
                             {ts::side::left, ts::uplo::upper, ts::op::n, ts::diag::non_unit}};
        else cases = {{ts::side::left, ts::uplo::lower, ts::op::n, ts::diag::non_unit},
                      {ts::side::right, ts::uplo::upper, ts::op::n, ts::diag::non_unit}};
        for (const ts::blas3_flags& f : cases) {
            operands o = make(r, f, n);
            const std::string label = name + (rank_k ? " uplo=" + std::string(ts::to_string(f.uplo))
                                                     : " side=" + std::string(ts::to_string(f.side))) +
                                      ", f64 n=" + std::to_string(n);
            const ts::blas3_operands<double> x = ops_of(o);
            if (wanted("incore")) {
                ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { one.blas3<double>(r, f, x); }, [&] {
                    with_openblas_threads(cores, [&] { openblas(o, n, o.c.data()); });
                });
                report({"in core / OpenBLAS, " + label, "cblas_d" + name + " (all cores)", t.ours, t.anchor, 0, 0.90});
            }
            if (wanted("ooc")) {
                const std::size_t operand_bytes =
                    std::size_t(n) * std::size_t(n) * sizeof(double) * (1 + (o.b.size() > 0) + 1);
                ts::context quarter("cpu", {.memory_budget = operand_bytes / 4});
                const ts::blas3_plan p = quarter.plan(ts::describe_blas3<double>(r, f, x));
                ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { quarter.execute<double>(p, x); },
                                                                [&] { one.blas3<double>(r, f, x); });
                report({"out of core (25% budget) / in core, " + label, "in core, default", t.ours, t.anchor, 0, 0.85});
            }
            if (wanted("scaling")) {
                ts::context c1("cpu:1", {.cpu_threads = 1}), c2("cpu:2", {.cpu_threads = 1});
                ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { c2.blas3<double>(r, f, x); },
                                                                [&] { c1.blas3<double>(r, f, x); });
                report({"cpu:2 / cpu:1 efficiency (1 thread each), " + label, "cpu:1 (time halved)", t.ours, t.anchor / 2, 0, 0.90});
                // The ceiling: OpenBLAS alone, one thread on each half of B's columns at once.
                if (!rank_k) {
                    const ts::index_t half = n / 2;
                    ts::bench::pair_timing c = ts::bench::alternate(
                        reps,
                        [&] {
                            with_openblas_threads(1, [&] {
                                std::thread other([&] { openblas(o, half, o.c.data()); });
                                openblas(o, n - half, o.c.data() + half * n);
                                other.join();
                            });
                        },
                        [&] { with_openblas_threads(1, [&] { openblas(o, n, o.c.data()); }); });
                    report({"ceiling: OpenBLAS, 1 thread per half at once, " + label, "1 thread (time halved)", c.ours,
                            c.anchor / 2, 0, 0});
                }
            }
        }
    }
    bool ok = true;
    for (const row& r : rows) ok = ok && r.ok;
    if (!out.empty()) {
        ts::bench::json_builder j = ts::bench::result_header("blas3_bench", git, "cpu");
        ts::detail::json items = ts::detail::json::array();
        for (const row& r : rows)
            items.push_back({{"name", r.name}, {"anchor", r.anchor}, {"seconds", r.ours}, {"anchor_seconds", r.anchor_seconds},
                             {"ratio", r.ratio}, {"goal", r.goal}, {"met", r.ok}});
        j.add("n", n).add("reps", reps).add("margin", margin).add("rows", items).add("all_goals_met", ok);
        ts::bench::write_file_atomically(out, j.text());
    }
    return ok ? 0 : 1;
}
