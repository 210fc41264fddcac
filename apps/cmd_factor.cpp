// `tilestream potrf|posv ...`: the factorizations and their solves (LAPACK's arguments) on random
// or .npy matrices, through a context, on one or more devices, out of core when they do not fit.
// Each command is one row of `factor_commands` below; a new factorization adds its row and its run.
#include "cli_args.hpp"
#include "cli_files.hpp"
#include "commands.hpp"
#include "core/json_text.hpp"
#include "core/npy_write.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/cholesky.hpp>
#include <tilestream/context.hpp>
#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/report.hpp>
#include <tilestream/trace.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace tilestream::cli {

namespace {

/// One factorization command: its name, what it does, whether it solves (takes B).
struct factor_command {
    const char* name;
    const char* summary;
    bool solves;
};

constexpr factor_command factor_commands[] = {
    {"potrf", "Cholesky factorization A = L L^H (--uplo lower) or U^H U (upper) in place, A Hermitian positive definite",
     false},
    {"posv", "solves A X = B through the Cholesky factorization of A (Hermitian positive definite); B <- X", true},
};

const factor_command* find_command(const std::string& cmd) {
    for (const factor_command& c : factor_commands)
        if (cmd == c.name) return &c;
    return nullptr;
}

void declare(args& a, const factor_command& c) {
    declare_device_options(a);
    a.integer_option("n", "order of A (random inputs)");
    if (c.solves) a.integer_option("nrhs", "columns of B (random inputs; default 1)");
    a.text("dtype", "f32 (default), f64, c32 or c64; file inputs: the files' dtype", "f32|f64|c32|c64")
        .integer_option("seed", "seed of the random inputs (default 42)")
        .text("layout", "row (default) or col: layout of the random inputs", "row|col")
        .text("a", "A from a .npy file (C order = row-major, Fortran order = column-major); only --uplo's triangle is read",
              "A.npy");
    if (c.solves) a.text("b", "B from a .npy file", "B.npy");
    a.text("out", c.solves ? "write X to a .npy file, atomically" : "write the factor to a .npy file (the other triangle as "
                                                                    "in A), atomically", "OUT.npy")
        .text("uplo", "lower (default) or upper: the triangle of A read and factored", "lower|upper")
        .text("kernel", "GEMM tiles and diagonal blocks: reference, naive, tiled or vendor (default)", "KERNEL")
        .text("devices", "e.g. cpu, cpu:2, cuda:0, opencl:0, cpu@512MiB (default cpu)", "SPEC")
        .integer_option("tile", "tile size instead of the planner's")
        .text("order", "auto (default: the cost model's), left (left-looking) or right (right-looking)", "auto|left|right")
        .text("reproducible", "on: results bitwise the same for any budget and device count; default off", "on|off")
        .text("rates", "declare rates instead of measuring them, e.g. h2d=12GB/s,d2h=12GB/s,gflops=150", "RATES")
        .flag_option("explain", "print the plan before the run and measured-vs-predicted after (stderr)")
        .text("trace", "write a Chrome trace (Perfetto, chrome://tracing)", "run.json")
        .text("timeline", "draw copies and kernels per device and stream (SVG)", "run.svg")
        .flag_option("check", c.solves ? "verify X by its backward error ||A X - B|| / (||A|| ||X|| n u) in float64, exit 1 "
                                         "above 30"
                                       : "verify the factor by ||A - L L^H|| / (||A|| n u) in float64, exit 1 above 30")
        .flag_option("anchor", "also time OpenBLAS's LAPACK ?potrf (all cores) on the same matrix and print the ratio")
        .flag_option("json", "print one JSON object")
        .footer("Inputs: random (--n) or files. A random A is Hermitian and diagonally dominant (off-diagonal entries "
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

template <class T>
host_matrix<T> copy_of(host_matrix_view<const T> v) {
    host_matrix<T> m(v.rows(), v.cols(), v.layout());
    for (index_t i = 0; i < v.rows(); ++i)
        for (index_t j = 0; j < v.cols(); ++j) m(i, j) = v(i, j);
    return m;
}

template <class T>
int run(const args& a, const factor_command& c, dtype type, run_files& out_files) {
    const std::string name = c.name;
    const uplo u = parse_uplo(a.get_or("uplo", "lower"));
    const auto seed = static_cast<std::uint64_t>(a.integer("seed", 42, 0, std::numeric_limits<index_t>::max()));
    const index_t big = std::numeric_limits<index_t>::max();

    std::vector<npy_array> files;
    host_matrix<T> a0, b0;  // the inputs, kept for --check and --anchor
    if (a.has("a")) {
        for (const char* o : {"n", "nrhs", "layout", "seed"})
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
        const std::string lay = a.get_or("layout", "row");
        if (lay != "row" && lay != "col") throw invalid_argument("--layout expects row or col, got '" + lay + "'");
        const layout l = lay == "row" ? layout::row_major : layout::col_major;
        const index_t n = a.integer("n", 0, 1, big);
        const index_t nrhs = c.solves ? a.integer("nrhs", 1, 1, big) : 0;
        std::size_t bytes = 2 * checked_bytes(n, n, type, name + ": A");
        if (c.solves) bytes += 2 * checked_bytes(n, nrhs, type, name + ": B");
        check_host_memory(bytes, name + ": random " + std::string(to_string(type)) + " operands");
        a0 = random_spd<T>(n, l, seed);
        if (c.solves) b0 = random_matrix<T>(n, nrhs, l, seed + 1);
    }
    if (a0.rows() != a0.cols())
        throw dimension_mismatch(name + ": A is " + std::to_string(a0.rows()) + "x" + std::to_string(a0.cols()) +
                                 ", it must be square");
    if (c.solves && b0.rows() != a0.rows())
        throw dimension_mismatch(name + ": B has " + std::to_string(b0.rows()) + " rows but A is of order " +
                                 std::to_string(a0.rows()));
    host_matrix<T> work = copy_of<T>(host_matrix_view<const T>(a0.view()));
    host_matrix<T> x;
    if (c.solves) x = copy_of<T>(host_matrix_view<const T>(b0.view()));

    context_options co;
    const open_options oo = device_options(a);
    co.memory_budget = oo.memory_budget;
    co.cpu_threads = oo.cpu_threads;
    co.kernel = parse_gemm_kernel(a.get_or("kernel", "vendor"));
    const std::string reproducible = a.get_or("reproducible", "off");
    if (reproducible != "on" && reproducible != "off")
        throw invalid_argument("--reproducible expects on or off, got '" + reproducible + "'");
    co.reproducible = reproducible == "on";
    if (a.has("rates")) co.rates = parse_rates(*a.get("rates"));
    context ctx(a.get_or("devices", "cpu"), co);
    blas3_call_options call;
    call.tile = a.integer("tile", 0, 1, big);
    call.order = parse_blas3_order(a.get_or("order", "auto"));
    const bool explain = a.flag("explain");
    const blas3_problem problem = describe_blas3<T>(blas3_routine::potrf, {side::left, u, op::n, diag::non_unit},
                                                    {T(1), T(0), {}, {}, work.view()});
    if (explain && !co.rates && !problem.quick_return) call.rates = ctx.rates(type, co.kernel);
    const blas3_plan plan = ctx.plan(problem, call);
    if (explain) std::fprintf(stderr, "%s", ctx.explain(plan).c_str());
    trace_recorder recorder;
    if (a.has("trace") || a.has("timeline")) call.run.trace = &recorder;

    blas3_report rep = ctx.execute<T>(plan, {T(1), T(0), {}, {}, work.view()}, call);
    const double factor_seconds = rep.seconds;
    if (c.solves && rep.info == 0) {
        blas3_call_options solve_call;
        solve_call.run.trace = call.run.trace;
        const blas3_report s = ctx.potrs<T>(u, host_matrix_view<const T>(work.view()), x.view(), solve_call);
        rep.seconds += s.seconds;
        rep.bytes_h2d += s.bytes_h2d;
        rep.bytes_d2h += s.bytes_d2h;
        for (const auto& f : s.faults) rep.faults.push_back(f);
        for (const auto& w : s.warnings) rep.warnings.push_back(w);
    }
    for (const auto& fl : rep.faults)
        std::fprintf(stderr, "warning: device %s failed and was dropped (%zu of its tasks rerun by the others): %s\n",
                     fl.id.c_str(), fl.units_redone, fl.message.c_str());
    for (const auto& w : rep.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    for (auto& file : files) as_runtime_failure([&] { file.check_unchanged(); });
    const double flops = problem.flops();
    const double gflops = flops > 0 && factor_seconds > 0 ? flops / factor_seconds * 1e-9 : 0.0;
    if (explain)
        std::fprintf(stderr,
                     "measured: factorization %.4f s (predicted %.4f s), bytes h2d %zu (predicted %zu), d2h %zu "
                     "(predicted %zu), peak device memory %zu (predicted %zu)\n",
                     factor_seconds, plan.predicted_seconds, rep.bytes_h2d, plan.bytes_h2d, rep.bytes_d2h, plan.bytes_d2h,
                     rep.peak_device_bytes, plan.peak_device_bytes);
    std::optional<blas3_check_result> check;
    if (a.flag("check") && rep.info == 0) {
        check = c.solves ? check_solve_hermitian<T>(u, a0.view(), b0.view(), host_matrix_view<const T>(x.view()))
                         : check_potrf<T>(u, a0.view(), host_matrix_view<const T>(work.view()));
    }
    std::optional<blas_anchor> anchor;
    if (a.flag("anchor")) anchor = time_host_potrf<T>(u, a0.view(), 1);
    const bool ok = !check || check->passed;
    // A factorization that stopped (info > 0) writes nothing: its factor is incomplete.
    const bool write = ok && rep.info == 0;
    if (write) {
        if (out_files.has("--out")) {
            const host_matrix_view<const T> result(c.solves ? x.view() : work.view());
            out_files.write("--out", [result](detail::output_file& file) { detail::write_npy_to<T>(file, result); });
        }
        if (out_files.has("--trace")) out_files.write("--trace", recorder.chrome_json());
        if (out_files.has("--timeline"))
            out_files.write("--timeline", timeline_svg(recorder.spans(), problem.describe() + " on " + ctx.device_names()));
    }
    std::FILE* report = out_files.report();
    if (a.flag("json")) {
        using detail::json;
        json o = {{"routine", name}, {"uplo", std::string(to_string(u))}, {"n", problem.n},
                  {"nrhs", c.solves ? x.cols() : 0}, {"dtype", std::string(to_string(type))}, {"info", rep.info},
                  {"kernel", std::string(to_string(plan.kernel))}, {"devices", ctx.device_names()},
                  {"seconds", rep.seconds}, {"factor_seconds", factor_seconds}, {"gflops", gflops},
                  {"order", std::string(to_string(plan.order))}, {"tile", plan.tile}, {"in_place", plan.in_place},
                  {"reproducible", plan.reproducible}, {"tasks", plan.tasks}, {"tile_operations", plan.steps},
                  {"dependencies", plan.dependencies}, {"bytes_h2d", rep.bytes_h2d}, {"bytes_d2h", rep.bytes_d2h},
                  {"peak_device_bytes", rep.peak_device_bytes}, {"budget_bytes", plan.budget},
                  {"predicted_seconds", plan.predicted_seconds}, {"predicted_bound", plan.bound},
                  {"predicted_bytes_h2d", plan.bytes_h2d}, {"predicted_bytes_d2h", plan.bytes_d2h}};
        json alternatives = json::array();
        for (const auto& alt : plan.alternatives)
            alternatives.push_back({{"order", std::string(to_string(alt.order))}, {"bytes_h2d", alt.bytes_h2d},
                                    {"bytes_d2h", alt.bytes_d2h}, {"predicted_seconds", alt.predicted_seconds}});
        o["orders"] = alternatives;
        json lost = json::array();
        for (const auto& fl : rep.faults) lost.push_back({{"device", fl.id}, {"message", fl.message}, {"tasks_rerun", fl.units_redone}});
        o["faults"] = lost;
        if (check) {
            o["check_passed"] = ok, o["check_method"] = check->method, o["check_error"] = check->error;
            o["check_tolerance"] = check->tolerance, o["check_changed_outside"] = check->changed_outside;
        }
        if (anchor) {
            o["anchor"] = anchor->name, o["anchor_seconds"] = anchor->seconds, o["anchor_gflops"] = anchor->gflops;
            o["ratio_to_anchor"] = anchor->gflops > 0 ? gflops / anchor->gflops : 0.0;
        }
        json written = json::array();
        if (write)
            for (const char* o2 : {"out", "trace", "timeline"})
                if (a.has(o2)) written.push_back(*a.get(o2));
        o["files_written"] = written;
        std::fprintf(report, "%s\n", detail::json_line(o).c_str());
    } else {
        std::fprintf(report, "%s on %s: %.4f s, %.1f GFLOP/s, info %lld, %zu tasks (%s, tile %lld, %s)\n",
                     problem.describe().c_str(), ctx.device_names().c_str(), rep.seconds, gflops, (long long)rep.info,
                     plan.tasks, plan.in_place ? "in place" : "staged", (long long)plan.tile,
                     std::string(to_string(plan.order)).c_str());
        if (rep.info > 0)
            std::fprintf(report, "info %lld: the leading minor of order %lld is not positive definite; the factorization "
                                 "could not be completed%s\n",
                         (long long)rep.info, (long long)rep.info, c.solves ? " and B was not solved" : "");
        if (anchor)
            std::fprintf(report, "anchor: %s: %.4f s, %.1f GFLOP/s; this run / anchor = %.2f\n", anchor->name.c_str(),
                         anchor->seconds, anchor->gflops, anchor->gflops > 0 ? gflops / anchor->gflops : 0.0);
        if (check) std::fprintf(report, "check: %s\n", check->summary().c_str());
        for (const char* o2 : {"out", "trace", "timeline"})
            if (a.has(o2)) std::fprintf(report, write ? "wrote %s\n" : "not written: %s\n", a.get(o2)->c_str());
    }
    out_files.commit();
    return ok && rep.info == 0 ? 0 : 1;
}

}  // namespace

bool is_factor_command(const std::string& cmd) { return find_command(cmd) != nullptr; }

int cmd_factor(const std::string& cmd, int argc, char** argv) {
    const factor_command* c = find_command(cmd);
    if (c == nullptr) throw invalid_argument("unknown factorization '" + cmd + "'");
    args a(cmd, std::string(c->summary) + ", on one or more devices, out of core when A does not fit.");
    declare(a, *c);
    if (!a.parse(argc, argv, 2)) return 0;
    run_files files;
    for (const char* in : {"a", "b"})
        if (auto p = a.get(in)) files.input(std::string("--") + in, *p);
    if (auto p = a.get("out")) files.output("--out", *p, file_format::npy, c->solves ? "--b" : "--a");
    if (auto p = a.get("trace")) files.output("--trace", *p, file_format::json);
    if (auto p = a.get("timeline")) files.output("--timeline", *p, file_format::svg);
    dtype type = parse_dtype(a.get_or("dtype", "f32"));
    if (a.has("a")) {
        const npy_array fa = read_npy(*a.get("a"));
        if (a.has("b")) {
            const npy_array fb = read_npy(*a.get("b"));
            if (fb.type() != fa.type())
                throw invalid_argument(cmd + ": dtypes differ: " + fa.path() + " is " + std::string(to_string(fa.type())) +
                                       ", " + fb.path() + " is " + std::string(to_string(fb.type())));
        }
        if (a.has("dtype") && type != fa.type())
            throw invalid_argument(cmd + ": --dtype " + *a.get("dtype") + " but " + fa.path() + " holds " +
                                   std::string(to_string(fa.type())));
        type = fa.type();
    }
    return visit_dtype(type, [&]<class T>() { return run<T>(a, *c, type, files); });
}

}  // namespace tilestream::cli
