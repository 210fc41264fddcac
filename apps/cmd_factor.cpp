// `tilestream potrf|posv|getrf|gesv ...`: the factorizations and their solves (LAPACK's arguments)
// on random or .npy matrices, through a context, on one or more devices, out of core when they do
// not fit. Each command is one row of `factor_commands` below; the rows of one family (Cholesky,
// LU) differ only in whether they solve. A new factorization adds its rows and its family's calls.
#include "cli_args.hpp"
#include "cli_files.hpp"
#include "cli_routines.hpp"
#include "commands.hpp"
#include "core/json_text.hpp"
#include "core/npy_write.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/cholesky.hpp>
#include <tilestream/context.hpp>
#include <tilestream/error.hpp>
#include <tilestream/lu.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/report.hpp>
#include <tilestream/trace.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace tilestream::cli {

namespace {

enum class family { cholesky, lu };

/// One factorization command: its name, what it does, its family, whether it solves (takes B).
struct factor_command {
    const char* name;
    const char* summary;
    family kind;
    bool solves;
};

constexpr factor_command factor_commands[] = {
    {"potrf", "Cholesky factorization A = L L^H (--uplo lower) or U^H U (upper) in place, A Hermitian positive definite",
     family::cholesky, false},
    {"posv", "solves A X = B through the Cholesky factorization of A (Hermitian positive definite); B <- X",
     family::cholesky, true},
    {"getrf", "LU factorization with partial pivoting A = P L U in place (LAPACK's ?getrf), A general m x n", family::lu,
     false},
    {"gesv", "solves A X = B through the LU factorization of A with partial pivoting (LAPACK's ?gesv); B <- X",
     family::lu, true},
};

const factor_command* find_command(const std::string& cmd) {
    for (const factor_command& c : factor_commands)
        if (cmd == c.name) return &c;
    return nullptr;
}

/// The output options a command writes, in the order they are reported.
std::vector<const char*> outputs_of(const factor_command& c) {
    if (c.kind == family::lu && !c.solves) return {"out", "ipiv", "trace", "timeline"};
    return {"out", "trace", "timeline"};
}

void declare(args& a, const factor_command& c) {
    const bool lu = c.kind == family::lu;
    declare_device_options(a);
    a.integer_option("n", lu && !c.solves ? "columns of A (random inputs)" : "order of A (random inputs)");
    if (lu && !c.solves) a.integer_option("m", "rows of A (random inputs; default --n)");
    if (c.solves) a.integer_option("nrhs", "columns of B (random inputs; default 1)");
    a.text("dtype", "f32 (default), f64, c32 or c64; file inputs: the files' dtype", "f32|f64|c32|c64")
        .integer_option("seed", "seed of the random inputs (default 42)")
        .text("layout", "row (default) or col: layout of the random inputs", "row|col")
        .text("a", lu ? "A from a .npy file (C order = row-major, Fortran order = column-major)"
                      : "A from a .npy file (C order = row-major, Fortran order = column-major); only --uplo's "
                        "triangle is read",
              "A.npy");
    if (c.solves) a.text("b", "B from a .npy file", "B.npy");
    a.text("out", c.solves ? "write X to a .npy file, atomically"
                  : lu     ? "write the factors to a .npy file, atomically: L below the diagonal (its unit diagonal "
                             "not stored) and U on and above it, over A as LAPACK stores them"
                           : "write the factor to a .npy file (the other triangle as in A), atomically",
           "OUT.npy");
    if (lu && !c.solves)
        a.text("ipiv", "write the pivots to a .npy file (int64, 1-based as LAPACK's ipiv: row i was interchanged with "
                       "row ipiv[i]; scipy's lu_factor piv is ipiv - 1), atomically with --out",
               "P.npy");
    if (!lu) a.text("uplo", "lower (default) or upper: the triangle of A read and factored", "lower|upper");
    a.text("kernel",
           "auto (default: GEMM tiles on each device's fastest measured GEMM kernel, the other tiles on vendor), "
           "reference, naive, tiled or vendor (GEMM tiles, and the diagonal tiles where the device has that "
           "kernel for them, else vendor)",
           "KERNEL")
        .text("devices", "e.g. cpu, cpu:2, cuda:0, opencl:0, cpu@512MiB (default auto: every GPU present, else the CPU; or TILESTREAM_DEVICES)", "SPEC")
        .integer_option("tile", lu ? "block columns' width instead of the planner's" : "tile size instead of the planner's")
        .text("order", "auto (default: the cost model's), left (left-looking) or right (right-looking)", "auto|left|right")
        .text("reproducible", "on: results bitwise the same for any budget and device count; default off", "on|off")
        .text("rates", "declare rates instead of measuring them, e.g. h2d=12GB/s,d2h=12GB/s,gflops=150", "RATES")
        .flag_option("explain", "print the plan before the run and measured-vs-predicted after (stderr)")
        .text("trace", "write a Chrome trace (Perfetto, chrome://tracing)", "run.json")
        .text("timeline", "draw copies and kernels per device and stream (SVG)", "run.svg")
        .flag_option("check", c.solves ? "verify X by its backward error ||A X - B|| / (||A|| ||X|| n u) in float64, exit 1 "
                                         "above 30"
                              : lu ? "verify the factors by ||P A - L U|| / (||A|| max(m, n) u) in float64, exit 1 above 30"
                                   : "verify the factor by ||A - L L^H|| / (||A|| n u) in float64, exit 1 above 30")
        .flag_option("anchor", lu ? "also time OpenBLAS's LAPACK ?getrf (all cores) on the same matrix and print the "
                                    "ratio of the factorizations"
                                  : "also time OpenBLAS's LAPACK ?potrf (all cores) on the same matrix and print the ratio")
        .flag_option("json", "print one JSON object");
    if (lu)
        a.footer("Inputs: random (--n) or files. A random A has entries uniform in [-1, 1] (both parts; std::mt19937_64 "
                 "from --seed): a general matrix, well conditioned with high probability, whose pivoting moves rows.\n"
                 "LAPACK semantics: info > 0 names the first exactly zero U(i, i) (exit 1: A is singular, nothing is "
                 "written" + std::string(c.solves ? " and B is not solved" : "") + "); the pivots are LAPACK's up to ties.");
    else
        a.footer("Inputs: random (--n) or files. A random A is Hermitian and diagonally dominant (off-diagonal entries "
                 "uniform in [-1, 1], the diagonal n plus one): positive definite and well conditioned.\n"
                 "LAPACK semantics: info > 0 names the first pivot that is not positive (exit 1: the factor is then "
                 "incomplete and nothing is written); only the uplo triangle of A is read and written.");
}

/// A random Hermitian (symmetric) positive definite matrix: off-diagonal entries uniform in
/// [-1, 1] (both parts), the diagonal n + 1 + a uniform part, so it is diagonally dominant.
template <class T>
host_matrix<T> random_spd(index_t n, layout l, std::uint64_t seed) {
    host_matrix<T> m(n, n, l);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    using R = real_type_t<T>;
    for (index_t j = 0; j < n; ++j)
        for (index_t i = j; i < n; ++i) {
            if (i == j) {
                m(i, i) = T(R(double(n) + 1.0 + u(rng)));
                continue;
            }
            T v;
            if constexpr (is_complex_v<T>) v = T(R(u(rng)), R(u(rng)));
            else v = T(u(rng));
            m(i, j) = v;
            if constexpr (is_complex_v<T>) m(j, i) = std::conj(v);
            else m(j, i) = v;
        }
    return m;
}

/// Entries uniform in [-1, 1] (both parts of complex ones), row by row from std::mt19937_64(seed).
template <class T>
host_matrix<T> random_matrix(index_t rows, index_t cols, layout l, std::uint64_t seed) {
    host_matrix<T> m(rows, cols, l);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) {
            if constexpr (is_complex_v<T>) m(i, j) = T(real_type_t<T>(u(rng)), real_type_t<T>(u(rng)));
            else m(i, j) = T(u(rng));
        }
    return m;
}

/// What a run reports, whichever family ran it: the plan's figures and the run's.
struct factor_run {
    std::string describe;
    double flops = 0;
    index_t m = 0, n = 0;
    index_t info = 0;
    double seconds = 0, factor_seconds = 0;
    std::size_t bytes_h2d = 0, bytes_d2h = 0, peak_device_bytes = 0;
    std::vector<device_fault> faults;
    std::vector<std::string> warnings;
    std::string kernel, order, bound;
    std::vector<std::string> gemm_kernels;  ///< each device's GEMM tile kernel
    index_t tile = 0;
    bool in_place = false, reproducible = false;
    std::size_t tasks = 0, steps = 0, dependencies = 0, budget = 0;
    double predicted_seconds = 0;
    std::size_t predicted_h2d = 0, predicted_d2h = 0, predicted_peak = 0;
    detail::json orders;
    /// The solve (potrs, getrs: two TRSMs, planned apart): measured and predicted, beside the
    /// factorization's own figures above (bytes_h2d and bytes_d2h hold the factorization's).
    bool solved = false;
    double solve_seconds = 0, predicted_solve_seconds = 0;
    std::size_t solve_h2d = 0, solve_d2h = 0, predicted_solve_h2d = 0, predicted_solve_d2h = 0;
    std::string solve_plans;  ///< one line per TRSM, for --explain
};

/// The figures of a plan (blas3_plan, getrf_plan) and of its factorization's report.
template <class Problem, class Plan, class Report>
factor_run figures_of(const Problem& problem, const Plan& plan, const Report& rep) {
    factor_run r;
    r.describe = problem.describe();
    r.flops = problem.flops();
    r.info = rep.info;
    r.seconds = r.factor_seconds = rep.seconds;
    r.bytes_h2d = rep.bytes_h2d, r.bytes_d2h = rep.bytes_d2h, r.peak_device_bytes = rep.peak_device_bytes;
    r.faults = rep.faults, r.warnings = rep.warnings;
    r.gemm_kernels = gemm_kernel_names(plan.kernel, plan.gemm_kernels, plan.devices);
    r.kernel = std::string(to_string(plan.kernel)), r.order = std::string(to_string(plan.order)), r.bound = plan.bound;
    r.tile = plan.tile, r.in_place = plan.in_place, r.reproducible = plan.reproducible;
    r.tasks = plan.tasks, r.steps = plan.steps, r.dependencies = plan.dependencies, r.budget = plan.budget;
    r.predicted_seconds = plan.predicted_seconds;
    r.predicted_h2d = plan.bytes_h2d, r.predicted_d2h = plan.bytes_d2h, r.predicted_peak = plan.peak_device_bytes;
    r.orders = orders_json(plan);
    return r;
}

/// A solve's traffic, time, faults and warnings beside the factorization's.
void add_solve(factor_run& r, const blas3_report& s) {
    r.solved = true;
    r.seconds += s.seconds;
    r.solve_seconds += s.seconds;
    r.solve_h2d += s.bytes_h2d;
    r.solve_d2h += s.bytes_d2h;
    for (const auto& f : s.faults) r.faults.push_back(f);
    for (const auto& w : s.warnings) r.warnings.push_back(w);
}

/// The plans of a solve's two TRSMs on the factor `a` (what potrs and getrs run, each planned as
/// they plan it), their predictions added into `r` and described a line each for --explain. Rates
/// are measured for the prediction only when explaining, as for the factorization: a default run
/// pays no probe for figures it does not print.
template <class T>
void predict_solve(context& ctx, factor_run& r, const std::array<blas3_flags, 2>& steps, host_matrix_view<const T> a,
                   host_matrix_view<T> b, bool explain) {
    for (const blas3_flags& f : steps) {
        blas3_call_options call;
        const blas3_problem problem = describe_blas3<T>(blas3_routine::trsm, f, {T(1), T(0), a, {}, b});
        blas3_plan plan = ctx.plan(problem, call);
        explain_with_measured_rates(ctx, dtype_of<T>(), explain, problem.quick_return, plan, call,
                                    [&] { return ctx.plan(problem, call); });
        r.predicted_solve_seconds += plan.predicted_seconds;
        r.predicted_solve_h2d += plan.bytes_h2d;
        r.predicted_solve_d2h += plan.bytes_d2h;
        char line[512];
        std::snprintf(line, sizeof line, "  solve           %s: %s, tile %lld, h2d %zu, d2h %zu, predicted %.4f s\n",
                      problem.describe().c_str(), std::string(to_string(plan.order)).c_str(), (long long)plan.tile,
                      plan.bytes_h2d, plan.bytes_d2h, plan.predicted_seconds);
        r.solve_plans += line;
    }
}

/// The options one run of a family reads, beside its operands.
struct factor_call {
    index_t tile = 0;
    std::string order;
    bool explain = false;
    trace_sink* trace = nullptr;
};

/// Cholesky: potrf through the Level 3 engine's plan (explained), then potrs when it solves.
template <class T>
factor_run run_cholesky(context& ctx, const factor_command& c, uplo u, const factor_call& fc, host_matrix<T>& work,
                        host_matrix<T>& x) {
    blas3_call_options call;
    call.tile = fc.tile;
    call.order = parse_blas3_order(fc.order);
    call.run.trace = fc.trace;
    const blas3_operands<T> ops{T(1), T(0), {}, {}, work.view()};
    const blas3_problem problem = describe_blas3<T>(blas3_routine::potrf, {side::left, u, op::n, diag::non_unit}, ops);
    blas3_plan plan = ctx.plan(problem, call);
    explain_with_measured_rates(ctx, dtype_of<T>(), fc.explain, problem.quick_return, plan, call,
                                [&] { return ctx.plan(problem, call); });
    if (fc.explain) std::fprintf(stderr, "%s", ctx.explain(plan).c_str());
    const blas3_report rep = ctx.execute<T>(plan, ops, call);
    factor_run r = figures_of(problem, plan, rep);
    r.m = r.n = problem.n;
    if (c.solves && rep.info == 0) {
        // potrs: A = L L^H: L Y = B, then L^H X = Y; A = U^H U: U^H Y = B, then U X = Y.
        const op first = u == uplo::lower ? op::n : op::c, second = u == uplo::lower ? op::c : op::n;
        predict_solve<T>(ctx, r, {blas3_flags{side::left, u, first, diag::non_unit}, blas3_flags{side::left, u, second, diag::non_unit}},
                         host_matrix_view<const T>(work.view()), x.view(), fc.explain);
        blas3_call_options solve;
        solve.run.trace = fc.trace;
        add_solve(r, ctx.potrs<T>(u, host_matrix_view<const T>(work.view()), x.view(), solve));
    }
    return r;
}

/// LU: getrf through its planner (explained), then getrs when it solves (LAPACK's gesv).
template <class T>
factor_run run_lu(context& ctx, const factor_command& c, const factor_call& fc, host_matrix<T>& work, host_matrix<T>& x,
                  std::vector<index_t>& ipiv) {
    getrf_call_options call;
    call.tile = fc.tile;
    call.order = parse_lu_order(fc.order);
    call.run.trace = fc.trace;
    const getrf_problem problem = describe_getrf<T>(host_matrix_view<const T>(work.view()));
    getrf_plan plan = ctx.plan(problem, call);
    explain_with_measured_rates(ctx, dtype_of<T>(), fc.explain, problem.quick_return(), plan, call,
                                [&] { return ctx.plan(problem, call); });
    if (fc.explain) std::fprintf(stderr, "%s", ctx.explain(plan).c_str());
    ipiv.assign(std::size_t(std::min(problem.m, problem.n)), 0);
    const getrf_report rep = ctx.execute<T>(plan, work.view(), ipiv, call);
    factor_run r = figures_of(problem, plan, rep);
    r.m = problem.m, r.n = problem.n;
    if (c.solves && rep.info == 0) {
        // getrs: A = P L U: X = U^-1 L^-1 P^T B (the row interchanges on the host).
        predict_solve<T>(ctx, r, {blas3_flags{side::left, uplo::lower, op::n, diag::unit},
                                  blas3_flags{side::left, uplo::upper, op::n, diag::non_unit}},
                         host_matrix_view<const T>(work.view()), x.view(), fc.explain);
        blas3_call_options solve;
        solve.run.trace = fc.trace;
        const getrs_report s = ctx.getrs<T>(op::n, host_matrix_view<const T>(work.view()), ipiv, x.view(), solve);
        add_solve(r, s.first);
        add_solve(r, s.second);
        r.solve_seconds = s.seconds;  // the row interchanges too
        r.seconds = r.factor_seconds + s.seconds;
    }
    return r;
}

/// LU's checks as the Cholesky ones report them: the residual (of the factors, or a solve's
/// backward error) in units of u (the helpers count in eps = 2u), within 30, every element finite.
template <class T>
blas3_check_result check_lu(const factor_command& c, const host_matrix<T>& a0, const host_matrix<T>& b0,
                            const host_matrix<T>& work, const host_matrix<T>& x, const std::vector<index_t>& ipiv) {
    const auto t0 = std::chrono::steady_clock::now();
    blas3_check_result r;
    const host_matrix<T>& result = c.solves ? x : work;
    for (index_t i = 0; i < result.rows(); ++i)
        for (index_t j = 0; j < result.cols(); ++j)
            if (!std::isfinite(std::abs(result(i, j)))) ++r.nonfinite;
    const double in_eps = c.solves ? gesv_backward_error<T>(a0.view(), x.view(), b0.view())
                                   : getrf_residual<T>(a0.view(), work.view(), ipiv);
    r.method = c.solves ? "||A X - B||_F / (||A||_F ||X||_F n u)" : "||P A - L U||_F / (||A||_F max(m, n) u)";
    r.error = std::isfinite(in_eps) ? 2.0 * in_eps : std::numeric_limits<double>::infinity();
    r.tolerance = 30.0;
    r.passed = r.error <= r.tolerance && r.nonfinite == 0;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

template <class T>
int run(const args& a, const factor_command& c, dtype type, run_files& out_files) {
    const std::string name = c.name;
    const bool lu = c.kind == family::lu;
    const uplo u = lu ? uplo::lower : parse_uplo(a.get_or("uplo", "lower"));
    const auto seed = static_cast<std::uint64_t>(a.integer("seed", 42, 0, std::numeric_limits<index_t>::max()));
    const index_t big = std::numeric_limits<index_t>::max();
    factor_call fc;
    fc.tile = a.integer("tile", 0, 1, big);
    fc.order = a.get_or("order", "auto");
    if (lu) (void)parse_lu_order(fc.order);  // bad usage is named before any work
    else (void)parse_blas3_order(fc.order);
    fc.explain = a.flag("explain");

    std::vector<npy_array> files;
    host_matrix<T> a0, b0;  // the inputs, kept for --check and --anchor
    if (a.has("a")) {
        for (const char* o : {"n", "m", "nrhs", "layout", "seed"})
            if (a.has(o)) throw invalid_argument(name + ": --" + std::string(o) + " is for random inputs, not with files");
        if (c.solves && !a.has("b")) throw invalid_argument(name + ": --b is missing (B from a .npy file)");
        files.push_back(read_npy(*a.get("a")));
        a0 = copy_of<T>(files.back().template view<T>());
        if (c.solves) {
            files.push_back(read_npy(*a.get("b")));
            b0 = copy_of<T>(files.back().template view<T>());
        }
    } else {
        if (a.has("b")) throw invalid_argument(name + ": --b needs --a (both from files)");
        if (!a.has("n")) throw invalid_argument(name + ": give --n (random inputs) or --a (files)");
        const layout l = random_layout(a);
        const index_t n = a.integer("n", 0, 1, big);
        const index_t m = a.integer("m", n, 1, big);
        const index_t nrhs = c.solves ? a.integer("nrhs", 1, 1, big) : 0;
        std::size_t bytes = 2 * checked_bytes(m, n, type, name + ": A");
        if (c.solves) bytes += 2 * checked_bytes(n, nrhs, type, name + ": B");
        check_host_memory(bytes, name + ": random " + std::string(to_string(type)) + " operands");
        a0 = lu ? random_matrix<T>(m, n, l, seed) : random_spd<T>(n, l, seed);
        if (c.solves) b0 = random_matrix<T>(n, nrhs, l, seed + 1);
    }
    // getrf factors any m x n matrix; the solves and Cholesky need a square one.
    if (a0.rows() != a0.cols() && (c.solves || !lu))
        throw dimension_mismatch(name + ": A is " + std::to_string(a0.rows()) + "x" + std::to_string(a0.cols()) +
                                 ", it must be square");
    if (c.solves && b0.rows() != a0.rows())
        throw dimension_mismatch(name + ": B has " + std::to_string(b0.rows()) + " rows but A is of order " +
                                 std::to_string(a0.rows()));
    host_matrix<T> work = copy_of<T>(host_matrix_view<const T>(a0.view()));
    host_matrix<T> x;
    if (c.solves) x = copy_of<T>(host_matrix_view<const T>(b0.view()));

    context ctx(cli::devices_of(a), routine_context_options(a));
    trace_recorder recorder;
    if (a.has("trace") || a.has("timeline")) fc.trace = &recorder;
    std::vector<index_t> ipiv;
    const factor_run rep = lu ? run_lu<T>(ctx, c, fc, work, x, ipiv) : run_cholesky<T>(ctx, c, u, fc, work, x);

    print_faults_and_warnings(rep.faults, rep.warnings);
    for (auto& file : files) as_runtime_failure([&] { file.check_unchanged(); });
    const double gflops = rep.flops > 0 && rep.factor_seconds > 0 ? rep.flops / rep.factor_seconds * 1e-9 : 0.0;
    if (fc.explain)
        std::fprintf(stderr,
                     "measured: factorization %.4f s (predicted %.4f s), bytes h2d %zu (predicted %zu), d2h %zu "
                     "(predicted %zu), peak device memory %zu (predicted %zu)\n",
                     rep.factor_seconds, rep.predicted_seconds, rep.bytes_h2d, rep.predicted_h2d, rep.bytes_d2h,
                     rep.predicted_d2h, rep.peak_device_bytes, rep.predicted_peak);
    if (fc.explain && rep.solved)
        std::fprintf(stderr, "%smeasured: solve %.4f s (predicted %.4f s), bytes h2d %zu (predicted %zu), d2h %zu (predicted %zu)\n",
                     rep.solve_plans.c_str(), rep.solve_seconds, rep.predicted_solve_seconds, rep.solve_h2d,
                     rep.predicted_solve_h2d, rep.solve_d2h, rep.predicted_solve_d2h);
    std::optional<blas3_check_result> check;
    if (a.flag("check") && rep.info == 0) {
        if (lu) check = check_lu<T>(c, a0, b0, work, x, ipiv);
        else if (c.solves) check = check_solve_hermitian<T>(u, a0.view(), b0.view(), host_matrix_view<const T>(x.view()));
        else check = check_potrf<T>(u, a0.view(), host_matrix_view<const T>(work.view()));
    }
    std::optional<blas_anchor> anchor;
    if (a.flag("anchor")) anchor = lu ? time_host_getrf<T>(a0.view(), 1) : time_host_potrf<T>(u, a0.view(), 1);
    const bool ok = !check || check->passed;
    // A factorization that stopped or met a zero pivot (info > 0) writes nothing: its factor is
    // incomplete (potrf) or singular (getrf), and no solve was made.
    const bool write = ok && rep.info == 0;
    if (write) {
        if (out_files.has("--out")) {
            const host_matrix_view<const T> result(c.solves ? x.view() : work.view());
            out_files.write("--out", [result](detail::output_file& file) { detail::write_npy_to<T>(file, result); });
        }
        if (out_files.has("--ipiv")) {
            const std::span<const index_t> pivots(ipiv);
            out_files.write("--ipiv", [pivots](detail::output_file& file) { detail::write_npy_indices_to(file, pivots); });
        }
        if (out_files.has("--trace")) out_files.write("--trace", recorder.chrome_json());
        if (out_files.has("--timeline"))
            out_files.write("--timeline", timeline_svg(recorder.spans(), rep.describe + " on " + ctx.device_names()));
    }
    std::FILE* report = out_files.report();
    if (a.flag("json")) {
        using detail::json;
        json o = {{"routine", name}};
        if (lu) o["m"] = rep.m;
        else o["uplo"] = std::string(to_string(u));
        json rest = {{"n", rep.n}, {"nrhs", c.solves ? x.cols() : 0}, {"dtype", std::string(to_string(type))},
                     {"info", rep.info}, {"kernel", rep.kernel}, {"gemm_kernels", rep.gemm_kernels}, {"devices", ctx.device_names()},
                     {"seconds", rep.seconds}, {"factor_seconds", rep.factor_seconds}, {"gflops", gflops},
                     {"order", rep.order}, {"tile", rep.tile}, {"in_place", rep.in_place},
                     {"reproducible", rep.reproducible}, {"tasks", rep.tasks}, {"tile_operations", rep.steps},
                     {"dependencies", rep.dependencies}, {"bytes_h2d", rep.bytes_h2d}, {"bytes_d2h", rep.bytes_d2h},
                     {"peak_device_bytes", rep.peak_device_bytes}, {"budget_bytes", rep.budget},
                     {"predicted_seconds", rep.predicted_seconds}, {"predicted_bound", rep.bound},
                     {"predicted_bytes_h2d", rep.predicted_h2d}, {"predicted_bytes_d2h", rep.predicted_d2h}};
        o.update(rest);
        if (rep.solved) {
            // bytes_* and predicted_bytes_* above are the factorization's; the solve's beside them.
            json solve = {{"solve_seconds", rep.solve_seconds}, {"predicted_solve_seconds", rep.predicted_solve_seconds},
                          {"solve_bytes_h2d", rep.solve_h2d}, {"solve_bytes_d2h", rep.solve_d2h},
                          {"predicted_solve_bytes_h2d", rep.predicted_solve_h2d},
                          {"predicted_solve_bytes_d2h", rep.predicted_solve_d2h}};
            o.update(solve);
        }
        o["orders"] = rep.orders;
        o["faults"] = faults_json(rep.faults);
        if (check) {
            o["check_passed"] = ok, o["check_method"] = check->method, o["check_error"] = check->error;
            o["check_tolerance"] = check->tolerance, o["check_changed_outside"] = check->changed_outside;
            o["check_nonfinite"] = check->nonfinite;
        }
        if (anchor) {
            o["anchor"] = anchor->name, o["anchor_seconds"] = anchor->seconds, o["anchor_gflops"] = anchor->gflops;
            o["ratio_to_anchor"] = anchor->gflops > 0 ? gflops / anchor->gflops : 0.0;
        }
        o["files_written"] = written_json(a, write, outputs_of(c));
        std::fprintf(report, "%s\n", detail::json_line(o).c_str());
    } else {
        std::fprintf(report, "%s on %s: %.4f s, %.1f GFLOP/s, info %lld, %zu tasks (%s, tile %lld, %s)\n",
                     rep.describe.c_str(), ctx.device_names().c_str(), rep.seconds, gflops, (long long)rep.info, rep.tasks,
                     rep.in_place ? "in place" : "staged", (long long)rep.tile, rep.order.c_str());
        if (rep.info > 0 && lu)
            std::fprintf(report, "info %lld: U(%lld, %lld) is exactly zero: A is singular; the factorization was completed "
                                 "but %s\n",
                         (long long)rep.info, (long long)rep.info, (long long)rep.info,
                         c.solves ? "B was not solved" : "nothing is written");
        else if (rep.info > 0)
            std::fprintf(report, "info %lld: the leading minor of order %lld is not positive definite; the factorization "
                                 "could not be completed%s\n",
                         (long long)rep.info, (long long)rep.info, c.solves ? " and B was not solved" : "");
        if (anchor)
            std::fprintf(report, "anchor: %s: %.4f s, %.1f GFLOP/s; this run / anchor = %.2f\n", anchor->name.c_str(),
                         anchor->seconds, anchor->gflops, anchor->gflops > 0 ? gflops / anchor->gflops : 0.0);
        if (check) std::fprintf(report, "check: %s\n", check->summary().c_str());
        print_written(report, a, write, outputs_of(c), rep.info > 0 ? "info " + std::to_string(rep.info) : "the check failed");
    }
    out_files.commit();
    return write ? 0 : 1;
}

}  // namespace

bool is_factor_command(const std::string& cmd) { return find_command(cmd) != nullptr; }

int cmd_factor(const std::string& cmd, int argc, char** argv) {
    const factor_command* c = find_command(cmd);
    if (c == nullptr) throw invalid_argument("unknown factorization '" + cmd + "'");
    args a(cmd, std::string(c->summary) + ", on one or more devices, out of core when A does not fit.");
    declare(a, *c);
    if (!a.parse(argc, argv, 2)) return 0;
    // Every file named before any work: inputs, then outputs (--out may replace the input it
    // holds the result of: --a for the factor, --b for X).
    run_files files;
    for (const char* in : {"a", "b"})
        if (auto p = a.get(in)) files.input(std::string("--") + in, *p);
    if (auto p = a.get("out")) files.output("--out", *p, file_format::npy, c->solves ? "--b" : "--a");
    if (auto p = a.get("ipiv")) files.output("--ipiv", *p, file_format::npy);
    if (auto p = a.get("trace")) files.output("--trace", *p, file_format::json);
    if (auto p = a.get("timeline")) files.output("--timeline", *p, file_format::svg);
    const dtype type = routine_dtype(a, cmd, {"b"});
    return visit_dtype(type, [&]<class T>() { return run<T>(a, *c, type, files); });
}

}  // namespace tilestream::cli
