// Cholesky's goals in one run (issue 29): potrf in core through a context with default options
// against OpenBLAS's LAPACK ?potrf called directly (all cores), at n = 8192 f64 and 4096 c64, and
// out of core with a budget of a quarter of the matrix against in core (with the measured bytes
// beside the model's). Runs alternate; the matrix is refreshed outside the clock before each run.
// Writes JSON; exits 1 when a figure is below its goal.
#include "bench_common.hpp"
#include "core/lapack_calls.hpp"

#include <tilestream/cholesky.hpp>
#include <tilestream/context.hpp>

#include <algorithm>
#include <chrono>
#include <complex>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace ts = tilestream;

namespace {

/// Hermitian, diagonally dominant (the CLI's generator): positive definite, column-major.
template <class T>
std::vector<T> random_spd(ts::index_t n, std::uint64_t seed) {
    std::vector<T> a(std::size_t(n * n));
    std::mt19937_64 rng(seed);
    for (ts::index_t j = 0; j < n; ++j)
        for (ts::index_t i = j; i < n; ++i) {
            const T v = i == j ? T(double(n) + 1.0) : ts::bench::random_entry<T>(rng);
            a[std::size_t(i + j * n)] = v;
            if constexpr (ts::is_complex_v<T>) a[std::size_t(j + i * n)] = std::conj(v);
            else a[std::size_t(j + i * n)] = v;
        }
    return a;
}

template <class T>
void lapack_potrf(ts::index_t n, T* a) {
    const int info = ts::detail::lapack_potrf<T>('L', int(n), a, int(n));
    if (info != 0) throw std::runtime_error("potrf_bench: LAPACK info " + std::to_string(info));
}

}  // namespace

static int run(int argc, char** argv) {
    ts::bench::arguments args(argc, argv,
                              "usage: potrf_bench [--out F] [--git-hash H] [--reps R] [--n 8192] [--complex-n 4096] "
                              "[--only incore,ooc] [--margin 1.0]");
    const auto [out, git, reps, n, complex_n, wanted, margin] =
        ts::bench::goal_options(args, 3, 8192, 4096, "incore,ooc");
    if (!args.finish()) return 2;
    const int cores = ts::inventory().cpu_cores;
    ts::bench::goal_table table(margin, 58, /*with_bytes=*/true);
    ts::context one("cpu");
    const auto run_type = [&]<class T>(ts::index_t order) {
        const std::vector<T> a0 = random_spd<T>(order, 29);
        std::vector<T> work(a0.size());
        const ts::host_matrix_view<T> view(work.data(), order, order, ts::layout::col_major);
        const std::string label = std::string(ts::to_string(ts::dtype_of<T>())) + " n=" + std::to_string(order);
        const char prefix = ts::dtype_traits(ts::dtype_of<T>()).blas_prefix;
        // Each run on a fresh copy; the copy is outside the clock.
        const auto alternate = [&](auto&& ours, auto&& anchor) {
            return ts::bench::alternate(reps, ours, anchor,
                                        [&] { std::memcpy(work.data(), a0.data(), a0.size() * sizeof(T)); });
        };
        if (wanted("incore")) {
            const auto t = alternate([&] { one.potrf<T>(ts::uplo::lower, view); },
                                     [&] {
                                         openblas_set_num_threads(cores);
                                         lapack_potrf<T>(order, work.data());
                                     });
            table.report({"potrf in core / OpenBLAS, lower, " + label, std::string(1, prefix) + "potrf (all cores)", t.ours, t.anchor,
                    0, 0.90});
        }
        if (wanted("ooc")) {
            ts::context quarter("cpu", {.memory_budget = a0.size() * sizeof(T) / 4});
            const ts::blas3_plan p = quarter.plan(ts::describe_blas3<T>(
                ts::blas3_routine::potrf, {ts::side::left, ts::uplo::lower, ts::op::n, ts::diag::non_unit}, {T(1), T(0), {}, {}, view}));
            std::size_t bytes = 0;
            const auto t = alternate([&] { bytes = quarter.execute<T>(p, {T(1), T(0), {}, {}, view}).bytes_h2d; },
                                     [&] { one.potrf<T>(ts::uplo::lower, view); });
            ts::bench::goal_row r{"potrf out of core (25% budget) / in core, lower, " + label + " (" + std::string(ts::to_string(p.order)) + ")",
                  "in core, default", t.ours, t.anchor, 0, 0.80};
            r.bytes = bytes;
            r.predicted_bytes = p.bytes_h2d;
            table.report(r);
        }
    };
    run_type.template operator()<double>(n);
    run_type.template operator()<std::complex<double>>(complex_n);
    if (!out.empty()) table.write(out, "potrf_bench", git, n, complex_n, reps);
    return table.all_met() ? 0 : 1;
}

int main(int argc, char** argv) {
    return tilestream::bench::guarded_main("potrf_bench", [&] { return run(argc, argv); });
}
