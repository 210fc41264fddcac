// LU's goals in one run (issue 29: getrf f64 at n = 8192, c64 at n = 4096), runs alternated with
// their anchors: getrf through a context with default options against OpenBLAS's own ?getrf_ (all
// cores), and out of core with a budget of a quarter of A against in core. Each timed run first
// copies the pristine A over the working one (getrf overwrites it), on both sides alike. gesv with
// many right-hand sides (n/4) at the same ratios: against OpenBLAS's ?gesv_, and out of core against
// in core. Writes JSON; exits 1 when a figure is below its goal.
#include "bench_common.hpp"

#include <tilestream/context.hpp>
#include <tilestream/lu.hpp>

#include <cstdio>
#include <cstring>
#include <random>

extern "C" {
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void zgetrf_(const int* m, const int* n, std::complex<double>* a, const int* lda, int* ipiv, int* info);
void dgesv_(const int* n, const int* nrhs, double* a, const int* lda, int* ipiv, double* b, const int* ldb, int* info);
void zgesv_(const int* n, const int* nrhs, std::complex<double>* a, const int* lda, int* ipiv, std::complex<double>* b,
            const int* ldb, int* info);
}

namespace ts = tilestream;

namespace {

template <class T>
void lapack_getrf(int n, T* a, int* ipiv) {
    int info = 0;
    if constexpr (ts::is_complex_v<T>) zgetrf_(&n, &n, a, &n, ipiv, &info);
    else dgetrf_(&n, &n, a, &n, ipiv, &info);
}

template <class T>
void lapack_gesv(int n, int nrhs, T* a, int* ipiv, T* b) {
    int info = 0;
    if constexpr (ts::is_complex_v<T>) zgesv_(&n, &nrhs, a, &n, ipiv, b, &n, &info);
    else dgesv_(&n, &nrhs, a, &n, ipiv, b, &n, &info);
}

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: lu_bench [--out F] [--git-hash H] [--reps R] [--n 8192] [--complex-n 4096] "
                              "[--only incore,row,ooc,gesv] [--margin 1.0]");
    const auto [out, git, reps, n, complex_n, wanted, margin] =
        ts::bench::goal_options(args, 3, 8192, 4096, "incore,row,ooc,gesv");
    if (!args.finish()) return 2;
    const int cores = ts::inventory().cpu_cores;
    ts::bench::goal_table table(margin);
    ts::context one("cpu");
    const auto run = [&]<class T>(ts::index_t size) {
        const std::string type(ts::to_string(ts::dtype_of<T>()));
        // Random entries: well conditioned enough for partial pivoting, the pivots' cost realistic.
        ts::host_matrix<T> pristine(size, size, ts::layout::col_major), a(size, size, ts::layout::col_major);
        std::mt19937_64 rng(7);
        ts::bench::fill_uniform(pristine, rng);
        const std::size_t bytes = std::size_t(size) * std::size_t(size) * sizeof(T);
        std::vector<ts::index_t> ipiv(static_cast<std::size_t>(size));
        std::vector<int> lapack_ipiv(static_cast<std::size_t>(size));
        const auto refresh = [&] { std::memcpy(a.data(), pristine.data(), bytes); };
        const auto ours = [&](ts::context& ctx) {
            refresh();
            ctx.getrf<T>(a.view(), ipiv);
        };
        const std::string label = "getrf " + type + " n=" + std::to_string(size);
        // The anchor: OpenBLAS's LAPACK on all cores, on the column-major matrix.
        const auto openblas = [&] {
            refresh();
            openblas_set_num_threads(cores);
            lapack_getrf<T>(int(size), a.data(), lapack_ipiv.data());
        };
        if (wanted("incore")) {
            ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { ours(one); }, openblas);
            table.report({"in core / OpenBLAS, " + label, std::string(1, ts::dtype_traits(ts::dtype_of<T>()).blas_prefix) +
                                                        "getrf_ (OpenBLAS, all cores)",
                    t.ours, t.anchor, 0, 0.90});
        }
        if (wanted("row")) {
            // The same matrix row-major, the layout of the CLI's random inputs and of numpy's C
            // order, against OpenBLAS on it in LAPACK's own layout.
            ts::host_matrix<T> row(size, size, ts::layout::row_major), pristine_row(size, size, ts::layout::row_major);
            for (ts::index_t i = 0; i < size; ++i)
                for (ts::index_t j = 0; j < size; ++j) pristine_row(i, j) = pristine(i, j);
            ts::bench::pair_timing t = ts::bench::alternate(reps, [&] {
                std::memcpy(row.data(), pristine_row.data(), bytes);
                one.getrf<T>(row.view(), ipiv);
            }, openblas);
            table.report({"in core, row-major / OpenBLAS, " + label, std::string(1, ts::dtype_traits(ts::dtype_of<T>()).blas_prefix) +
                                                        "getrf_ (OpenBLAS, all cores) on the column-major matrix",
                    t.ours, t.anchor, 0, 0.90});
        }
        if (wanted("ooc")) {
            ts::context quarter("cpu", {.memory_budget = bytes / 4});
            ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { ours(quarter); }, [&] { ours(one); });
            table.report({"out of core (25% budget) / in core, " + label, "in core, default", t.ours, t.anchor, 0, 0.80});
        }
        if (wanted("gesv")) {
            // Many right-hand sides: n/4 columns of B, refreshed with A before every run.
            const ts::index_t nrhs = std::max<ts::index_t>(1, size / 4);
            ts::host_matrix<T> b0(size, nrhs, ts::layout::col_major), b(size, nrhs, ts::layout::col_major);
            ts::bench::fill_uniform(b0, rng);
            const std::size_t b_bytes = std::size_t(size) * std::size_t(nrhs) * sizeof(T);
            const auto solve = [&](ts::context& ctx) {
                refresh();
                std::memcpy(b.data(), b0.data(), b_bytes);
                ctx.gesv<T>(a.view(), ipiv, b.view());
            };
            const std::string glabel = "gesv " + type + " n=" + std::to_string(size) + " nrhs=" + std::to_string(nrhs);
            ts::bench::pair_timing t = ts::bench::alternate(reps, [&] { solve(one); }, [&] {
                refresh();
                std::memcpy(b.data(), b0.data(), b_bytes);
                openblas_set_num_threads(cores);
                lapack_gesv<T>(int(size), int(nrhs), a.data(), lapack_ipiv.data(), b.data());
            });
            table.report({"in core / OpenBLAS, " + glabel, std::string(1, ts::dtype_traits(ts::dtype_of<T>()).blas_prefix) +
                                                         "gesv_ (OpenBLAS, all cores)",
                    t.ours, t.anchor, 0, 0.90});
            ts::context quarter("cpu", {.memory_budget = (bytes + b_bytes) / 4});
            t = ts::bench::alternate(reps, [&] { solve(quarter); }, [&] { solve(one); });
            table.report({"out of core (25% budget) / in core, " + glabel, "in core, default", t.ours, t.anchor, 0, 0.80});
        }
    };
    run.template operator()<double>(n);
    run.template operator()<std::complex<double>>(complex_n);
    if (!out.empty()) table.write(out, "lu_bench", git, n, complex_n, reps);
    return table.all_met() ? 0 : 1;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("lu_bench", [&] { return run(argc, argv); });
}
