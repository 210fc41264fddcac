// `tilestream symm|syrk|syr2k|trmm|trsm ...` (and hemm|herk|her2k with the complex types): one
// Level 3 routine with BLAS's arguments on random or .npy operands, through a context.
#include "cli_args.hpp"
#include "cli_files.hpp"
#include "cli_routines.hpp"
#include "commands.hpp"
#include "core/json_text.hpp"
#include "core/npy_write.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/context.hpp>
#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/report.hpp>
#include <tilestream/trace.hpp>
#include <tilestream/verify.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace tilestream::cli {

namespace {

bool rank_k(blas3_routine r) {
    return r == blas3_routine::syrk || r == blas3_routine::herk || r == blas3_routine::syr2k || r == blas3_routine::her2k;
}
bool solves(blas3_routine r) { return r == blas3_routine::trsm || r == blas3_routine::trmm; }
bool has_side(blas3_routine r) { return !rank_k(r); }
bool has_b_input(blas3_routine r) {
    return r == blas3_routine::symm || r == blas3_routine::hemm || r == blas3_routine::syr2k || r == blas3_routine::her2k;
}

std::string formula(blas3_routine r) {
    switch (r) {
        case blas3_routine::symm: return "C <- alpha A B + beta C (left) or alpha B A + beta C (right), A symmetric";
        case blas3_routine::hemm: return "C <- alpha A B + beta C (left) or alpha B A + beta C (right), A Hermitian";
        case blas3_routine::syrk: return "C <- alpha op(A) op(A)^T + beta C on the uplo triangle of C";
        case blas3_routine::herk: return "C <- alpha op(A) op(A)^H + beta C on the uplo triangle of C";
        case blas3_routine::syr2k: return "C <- alpha op(A) op(B)^T + alpha op(B) op(A)^T + beta C on the uplo triangle";
        case blas3_routine::her2k: return "C <- alpha op(A) op(B)^H + conj(alpha) op(B) op(A)^H + beta C on the triangle";
        case blas3_routine::trmm: return "B <- alpha op(A) B (left) or alpha B op(A) (right), A triangular";
        case blas3_routine::trsm: return "solves op(A) X = alpha B (left) or X op(A) = alpha B (right); B <- X";
        case blas3_routine::potrf: return "Cholesky factorization (tilestream potrf)";
    }
    return "";
}

void declare(args& a, blas3_routine r) {
    declare_device_options(a);
    const bool rk = rank_k(r);
    if (rk) {
        a.integer_option("n", "order of C (random inputs)").integer_option("k", "inner dimension: op(A) is n x k (random inputs)");
    } else {
        a.integer_option("m", std::string("rows of ") + (solves(r) ? "B" : "C") + " (random inputs)")
            .integer_option("n", std::string("columns of ") + (solves(r) ? "B" : "C") + " (random inputs)");
    }
    a.text("dtype", "f32 (default), f64, c32 or c64; file inputs: the files' dtype", "f32|f64|c32|c64")
        .integer_option("seed", "seed of the random inputs (default 42)")
        .text("layout", "row (default) or col: layout of the random inputs", "row|col")
        .text("a", "A from a .npy file (C order = row-major, Fortran order = column-major)", "A.npy")
        .text("b", solves(r) ? "B from a .npy file (overwritten by the result in memory; write it with --out)"
                             : "B from a .npy file", "B.npy");
    if (!solves(r)) a.text("c", "C's input from a .npy file (read when --beta is not 0)", "C.npy");
    a.text("out", std::string("write the result (") + (solves(r) ? "B" : "C") + ") to a .npy file, atomically", "OUT.npy")
        .scalar_option("alpha", std::string("scalar alpha (default 1") +
                                    (r == blas3_routine::herk ? ", real" : "; complex types: e.g. 1.5-2j, 2j, (1+2j)") + ")");
    if (!solves(r))
        a.scalar_option("beta", std::string("scalar beta (default 0: C is not read") +
                                    (r == blas3_routine::herk || r == blas3_routine::her2k ? ", real" : "") + ")");
    if (has_side(r)) a.text("side", "left (default) or right", "left|right");
    a.text("uplo", "lower (default) or upper: the triangle of A (syrk family: of C) stored and used", "lower|upper");
    if (r != blas3_routine::symm && r != blas3_routine::hemm)
        a.text("trans", r == blas3_routine::herk || r == blas3_routine::her2k ? "op(A): n (default) or c"
                        : rank_k(r) ? "op(A): n (default) or t" : "op(A): n (default), t or c", "n|t|c");
    if (solves(r)) a.text("diag", "non-unit (default) or unit", "non-unit|unit");
    a.text("kernel",
           "auto (default: GEMM tiles on each device's fastest measured GEMM kernel, the other tiles on vendor), "
           "reference, naive, tiled or vendor (GEMM tiles, and the diagonal tiles where the device has that "
           "kernel for them, else vendor)",
           "KERNEL")
        .text("devices", "e.g. cpu, cpu:2, cuda:0, opencl:0, cpu@512MiB (default auto: every GPU present, else the CPU; or TILESTREAM_DEVICES)", "SPEC")
        .integer_option("tile", "tile size along A's order (syrk family: C's tiles) instead of the planner's")
        .integer_option("tile-free", "tile size along the other dimension of B or C");
    if (rk) a.integer_option("tile-k", "tile size along k");
    if (r == blas3_routine::trsm)
        a.text("order", "auto (default: the cost model's), left (left-looking) or right (right-looking)", "auto|left|right");
    a.text("reproducible", "on: results bitwise the same for any budget and device count (fixed tiles, deterministic "
                           "diagonal kernels); default off", "on|off")
        .text("rates", "declare rates instead of measuring them, e.g. h2d=12GB/s,d2h=12GB/s,gflops=150", "RATES")
        .flag_option("explain", "print the plan before the run and measured-vs-predicted after (stderr)")
        .text("trace", "write a Chrome trace (Perfetto, chrome://tracing)", "run.json")
        .text("timeline", "draw copies and kernels per device and stream (SVG)", "run.svg")
        .text("peer-tiles", "copy missing tiles from another device's store: auto (devices that do not address host "
                            "memory), on, off", "auto|on|off")
        .flag_option("check", solves(r) && r == blas3_routine::trsm
                                  ? "verify X by its residual ||op(A)X - alpha B|| / (||A|| ||X||) in float64, exit 1 on failure"
                                  : "verify the result against float64 OpenBLAS on upcast operands, exit 1 on failure")
        .flag_option("anchor", "also time the same OpenBLAS routine (all cores) on the same operands and print the ratio")
        .integer_option("repeat", "run R times, report the median (default 1)")
        .flag_option("json", "print one JSON object")
        .footer("Inputs: random (" + std::string(rk ? "--n --k" : "--m --n") +
                ") or files. Random triangular matrices are well conditioned (diagonal near 2, other entries / order).\n"
                "BLAS semantics: beta = 0 never reads C, alpha = 0 never reads A or B" +
                std::string(rk ? ", only the uplo triangle of C is written." : solves(r) ? ", B is overwritten." : "."));
}

/// Uniform in [-1, 1] (both parts of complex elements).
template <class T>
host_matrix<T> random_matrix(index_t rows, index_t cols, layout l, std::uint64_t seed) {
    host_matrix<T> m(rows, cols, l);
    if constexpr (is_complex_v<T>) {
        // (fill_random's complex instantiation comes with the complex types' next milestone.)
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<double> u(-1.0, 1.0);
        for (index_t i = 0; i < rows; ++i)
            for (index_t j = 0; j < cols; ++j) m(i, j) = T(real_type_t<T>(u(rng)), real_type_t<T>(u(rng)));
    } else {
        fill_random(m.view(), seed);
    }
    return m;
}

template <class T>
void poison(host_matrix_view<T> m) {
    for (index_t i = 0; i < m.rows(); ++i)
        for (index_t j = 0; j < m.cols(); ++j) {
            const real_type_t<T> nan = std::numeric_limits<real_type_t<T>>::quiet_NaN();
            if constexpr (is_complex_v<T>) m(i, j) = T(nan, nan);
            else m(i, j) = nan;
        }
}

/// A file's elements as T.
template <class T>
host_matrix_view<const T> file_view(const npy_array& f) {
    return f.template view<T>();
}

/// A scalar in JSON: a number for real types, numpy's text ("1.5-2j") for complex ones.
template <class T>
detail::json scalar_json(T v) {
    if constexpr (is_complex_v<T>) return format_scalar(as_scalar(v));
    else return double(v);
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class T>
int run(const args& a, blas3_routine r, dtype type, run_files& out_files) {
    const std::string name(to_string(r));
    blas3_flags f;
    if (a.has("side")) f.side = parse_side(*a.get("side"));
    if (a.has("uplo")) f.uplo = parse_uplo(*a.get("uplo"));
    if (a.has("trans")) f.trans = parse_op(*a.get("trans"));
    if (a.has("diag")) f.diag = parse_diag(*a.get("diag"));
    const T alpha = a.scalar<T>("alpha", 1.0);
    const T beta = solves(r) ? T(0) : a.scalar<T>("beta", 0.0);
    const auto seed = static_cast<std::uint64_t>(a.integer("seed", 42, 0, std::numeric_limits<index_t>::max()));
    const int repeat = static_cast<int>(a.integer("repeat", 1, 1, 100000));
    const bool rk = rank_k(r);

    // The operands: A and B read-only, `start` the written operand's input, `out` the one written.
    std::vector<npy_array> files;
    host_matrix<T> a_own, b_own, start_own, out;
    host_matrix_view<const T> av, bv, start;
    const bool from_files = a.has("a") || a.has("b") || a.has("c");
    if (from_files) {
        for (const char* o : {"m", "n", "k", "layout", "seed"})
            if (a.has(o)) throw invalid_argument(name + ": --" + std::string(o) + " is for random inputs, not with files");
        if (!a.has("a")) throw invalid_argument(name + ": --a is missing (A from a .npy file)");
        if ((solves(r) || has_b_input(r)) && !a.has("b")) throw invalid_argument(name + ": --b is missing (B from a .npy file)");
        files.push_back(read_npy(*a.get("a")));
        av = file_view<T>(files.back());
        if (a.has("b")) {
            files.push_back(read_npy(*a.get("b")));
            bv = file_view<T>(files.back());
        }
        if (solves(r)) {
            start = bv;
            bv = {};
        } else if (a.has("c")) {
            files.push_back(read_npy(*a.get("c")));
            start = file_view<T>(files.back());
        } else if (beta != T(0)) {
            throw invalid_argument(name + ": --beta is not 0 but no --c file was given");
        }
    } else {
        const auto big = std::numeric_limits<index_t>::max();
        const layout l = random_layout(a);
        index_t m = 0, n = 0, k = 0;
        if (rk) {
            if (!a.has("n") || !a.has("k")) throw invalid_argument(name + ": give --n and --k (random inputs) or --a (files)");
            n = a.integer("n", 0, 1, big);
            k = a.integer("k", 0, 1, big);
            m = n;
        } else {
            if (!a.has("m") || !a.has("n")) throw invalid_argument(name + ": give --m and --n (random inputs) or --a (files)");
            m = a.integer("m", 0, 1, big);
            n = a.integer("n", 0, 1, big);
        }
        const index_t order = rk ? n : (f.side == side::left ? m : n);
        const index_t ar = rk ? (f.trans == op::n ? n : k) : order, ac = rk ? (f.trans == op::n ? k : n) : order;
        std::size_t bytes = checked_bytes(ar, ac, type, name + ": A") + 2 * checked_bytes(m, rk ? n : n, type, name + ": C");
        if (has_b_input(r)) bytes += checked_bytes(rk ? ar : m, rk ? ac : n, type, name + ": B");
        check_host_memory(bytes, name + ": random " + std::string(to_string(type)) + " operands");
        a_own = random_matrix<T>(ar, ac, l, seed);
        if (solves(r)) {
            // Well conditioned: a dominant diagonal, the other entries divided by the order.
            for (index_t i = 0; i < order; ++i)
                for (index_t j = 0; j < order; ++j)
                    a_own(i, j) = i == j ? T(2) + T(0.5) * a_own(i, j) : T(a_own(i, j) / T(real_type_t<T>(order)));
        }
        av = a_own.view();
        if (has_b_input(r)) {
            b_own = rk ? random_matrix<T>(ar, ac, l, seed + 1) : random_matrix<T>(m, n, l, seed + 1);
            bv = b_own.view();
        }
        if (solves(r) || beta != T(0)) {
            start_own = random_matrix<T>(m, n, l, seed + 2);
            start = start_own.view();
        }
        if (!start.data()) {
            start_own = host_matrix<T>(m, n, l);
            poison(start_own.view());  // beta = 0: C is not read, so NaN must not survive
            start = start_own.view();
        }
    }
    if (!start.data() && !rk && !solves(r)) {
        // File inputs with beta = 0: C has B's shape (symm).
        start_own = host_matrix<T>(bv.rows(), bv.cols(), bv.layout());
        poison(start_own.view());
        start = start_own.view();
    } else if (!start.data() && rk) {
        const index_t n = f.trans == op::n ? av.rows() : av.cols();
        start_own = host_matrix<T>(n, n, av.layout());
        poison(start_own.view());
        start = start_own.view();
    }
    out = copy_of<T>(start);
    blas3_operands<T> ops;
    ops.alpha = alpha;
    ops.beta = beta;
    ops.a = av;
    ops.b = bv;
    ops.c = out.view();
    const blas3_problem problem = describe_blas3<T>(r, f, ops);

    const context_options co = routine_context_options(a);
    context ctx(cli::devices_of(a), co);
    blas3_call_options call;
    const index_t big = std::numeric_limits<index_t>::max();
    call.tile = a.integer("tile", 0, 1, big);
    call.tile_free = a.integer("tile-free", 0, 1, big);
    call.tile_k = a.integer("tile-k", 0, 1, big);
    call.order = parse_blas3_order(a.get_or("order", "auto"));
    call.run.peer_tiles = parse_peer_tile_mode(a.get_or("peer-tiles", "auto"));
    const bool explain = a.flag("explain");
    // Measured rates for the explanation of one device in place (which probes nothing itself);
    // never with several: declared call rates leave out the balance's rate per device.
    blas3_plan plan = ctx.plan(problem, call);
    explain_with_measured_rates(ctx, type, explain, problem.quick_return, plan, call, [&] { return ctx.plan(problem, call); });
    if (explain) std::fprintf(stderr, "%s", ctx.explain(plan).c_str());
    trace_recorder recorder;
    if (a.has("trace") || a.has("timeline")) call.run.trace = &recorder;

    std::vector<double> seconds;
    blas3_report last;
    std::vector<device_fault> faults;
    for (int rep = 0; rep < repeat; ++rep) {
        if (rep > 0) std::memcpy(out.data(), copy_of<T>(start).data(), sizeof(T) * std::size_t(out.size()));
        last = ctx.execute<T>(plan, ops, call);
        seconds.push_back(last.seconds);
        print_faults_and_warnings(last.faults, last.warnings);
        faults.insert(faults.end(), last.faults.begin(), last.faults.end());
        for (auto& file : files) as_runtime_failure([&] { file.check_unchanged(); });
    }
    const double secs = median_of(seconds);
    const double flops = problem.flops();
    const double gflops = flops > 0 && secs > 0 ? flops / secs * 1e-9 : 0.0;
    if (explain) {
        std::fprintf(stderr,
                     "measured: %.4f s (predicted %.4f s), bytes h2d %zu (predicted %zu), d2h %zu (predicted %zu), "
                     "peak device memory %zu (predicted %zu), tile cache hits %zu, misses %zu\n",
                     secs, plan.predicted_seconds, last.bytes_h2d, plan.bytes_h2d, last.bytes_d2h, plan.bytes_d2h,
                     last.peak_device_bytes, plan.peak_device_bytes, last.cache_hits, last.cache_misses);
        if (last.peer_hits > 0)
            std::fprintf(stderr, "peer tiles: %zu (%zu bytes copied from other devices instead of the host)\n",
                         last.peer_hits, last.bytes_from_peers);
        for (const auto& d : last.devices)
            std::fprintf(stderr, "  %s: %zu tasks, %.3g GFLOP\n", d.id.c_str(), d.units, d.flops * 1e-9);
        if (faults.empty()) std::fprintf(stderr, "faults: none (no device lost)\n");
    }
    std::optional<blas3_check_result> check;
    blas3_operands<T> inputs = ops;
    host_matrix<T> start_copy = copy_of<T>(start);
    inputs.c = start_copy.view();
    if (a.flag("check")) check = check_blas3<T>(r, f, inputs, host_matrix_view<const T>(out.view()));
    std::optional<blas_anchor> anchor;
    if (a.flag("anchor")) anchor = time_host_blas3<T>(r, f, inputs, repeat);
    const bool ok = !check || check->passed;
    // The outputs: written to their temporaries now (devices and FIFOs at the commit), renamed into
    // place together after the report. A failed check writes none of them.
    if (ok) {
        if (out_files.has("--out")) {
            const host_matrix_view<const T> result(out.view());
            out_files.write("--out", [result](detail::output_file& file) { detail::write_npy_to<T>(file, result); });
        }
        if (out_files.has("--trace")) out_files.write("--trace", recorder.chrome_json());
        if (out_files.has("--timeline"))
            out_files.write("--timeline", timeline_svg(recorder.spans(), problem.describe() + " on " + ctx.device_names()));
    }
    std::FILE* report = out_files.report();
    if (a.flag("json")) {
        using detail::json;
        json o = {{"routine", name}, {"side", std::string(to_string(f.side))}, {"uplo", std::string(to_string(f.uplo))},
                  {"trans", std::string(to_string(f.trans))}, {"diag", std::string(to_string(f.diag))},
                  {"m", problem.m}, {"n", problem.n}, {"k", problem.k}, {"dtype", std::string(to_string(type))},
                  {"alpha", scalar_json(alpha)}, {"beta", scalar_json(beta)},
                  {"kernel", std::string(to_string(plan.kernel))},
                  {"gemm_kernels", gemm_kernel_names(plan.kernel, plan.gemm_kernels, plan.devices)},
                  {"devices", ctx.device_names()}, {"repeat", repeat}, {"seconds", secs}, {"gflops", gflops},
                  {"order", std::string(to_string(plan.order))}, {"tile", plan.tile}, {"tile_free", plan.tile_free},
                  {"tile_k", plan.tile_k}, {"in_place", plan.in_place}, {"reproducible", plan.reproducible},
                  {"tasks", plan.tasks}, {"tile_operations", plan.steps}, {"dependencies", plan.dependencies},
                  {"bytes_h2d", last.bytes_h2d}, {"bytes_d2h", last.bytes_d2h},
                  {"peak_device_bytes", last.peak_device_bytes}, {"budget_bytes", plan.budget},
                  {"cache_hits", last.cache_hits}, {"cache_misses", last.cache_misses},
                  {"peer_hits", last.peer_hits}, {"bytes_from_peers", last.bytes_from_peers},
                  {"predicted_seconds", plan.predicted_seconds}, {"predicted_bound", plan.bound},
                  {"predicted_bytes_h2d", plan.bytes_h2d}, {"predicted_bytes_d2h", plan.bytes_d2h},
                  {"predicted_peak_device_bytes", plan.peak_device_bytes}};
        json shares = json::array();
        for (const auto& d : last.devices)
            shares.push_back({{"id", d.id}, {"tasks", d.units}, {"flops", d.flops}, {"bytes_h2d", d.bytes_h2d},
                              {"cache_hits", d.cache_hits}, {"peer_hits", d.peer_hits}});
        o["device_shares"] = shares;
        o["orders"] = orders_json(plan);
        o["faults"] = faults_json(faults);
        if (check) {
            o["check_passed"] = ok, o["check_method"] = check->method, o["rel_error"] = check->error;
            o["check_tolerance"] = check->tolerance, o["check_seconds"] = check->seconds;
            o["check_changed_outside"] = check->changed_outside, o["check_nonfinite"] = check->nonfinite;
        }
        if (anchor) {
            o["anchor"] = anchor->name, o["anchor_seconds"] = anchor->seconds, o["anchor_gflops"] = anchor->gflops;
            o["ratio_to_anchor"] = anchor->gflops > 0 ? gflops / anchor->gflops : 0.0;
        }
        o["files_written"] = written_json(a, ok, {"out", "trace", "timeline"});
        std::fprintf(report, "%s\n", detail::json_line(o).c_str());
    } else {
        std::fprintf(report, "%s on %s: %.4f s (median of %d), %.1f GFLOP/s, %zu tasks (%s, tiles %lld/%lld%s)\n",
                    problem.describe().c_str(), ctx.device_names().c_str(), secs, repeat, gflops, plan.tasks,
                    plan.in_place ? "in place" : "staged", (long long)plan.tile, (long long)(rk ? plan.tile_k : plan.tile_free),
                    r == blas3_routine::trsm ? (", " + std::string(to_string(plan.order))).c_str() : "");
        if (anchor)
            std::fprintf(report, "anchor: %s: %.4f s (median of %d), %.1f GFLOP/s; this run / anchor = %.2f\n", anchor->name.c_str(),
                        anchor->seconds, anchor->repeat, anchor->gflops, anchor->gflops > 0 ? gflops / anchor->gflops : 0.0);
        if (check) std::fprintf(report, "check: %s\n", check->summary().c_str());
        print_written(report, a, ok, {"out", "trace", "timeline"}, "the check failed");
    }
    out_files.commit();
    return ok ? 0 : 1;
}

}  // namespace

bool is_blas3_command(const std::string& cmd) {
    for (const char* c : {"symm", "hemm", "syrk", "herk", "syr2k", "her2k", "trmm", "trsm"})
        if (cmd == c) return true;
    return false;
}

int cmd_blas3(const std::string& cmd, int argc, char** argv) {
    const blas3_routine r = parse_blas3_routine(cmd);
    args a(cmd, formula(r) + ", on one or more devices, out of core when the operands do not fit.");
    declare(a, r);
    if (!a.parse(argc, argv, 2)) return 0;
    // Every file named, before any work: inputs, then outputs (resolved, and none naming an input
    // or another output; --out may update the written operand's input in place: --b of trmm and
    // trsm, --c of the others).
    run_files files;
    for (const char* in : {"a", "b", "c"})
        if (auto p = a.get(in)) files.input(std::string("--") + in, *p);
    if (auto p = a.get("out")) files.output("--out", *p, file_format::npy, solves(r) ? "--b" : "--c");
    if (auto p = a.get("trace")) files.output("--trace", *p, file_format::json);
    if (auto p = a.get("timeline")) files.output("--timeline", *p, file_format::svg);
    const dtype type = routine_dtype(a, cmd, {"b", "c"});
    return visit_dtype(type, [&]<class T>() { return run<T>(a, r, type, files); });
}

}  // namespace tilestream::cli
