// `tilestream scale gemm|jacobi`: the same problem on each device set of a list, as a table of
// seconds, rate, speedup and efficiency, with --json and an SVG plot; and `tilestream timeline`.
#include "cli_args.hpp"
#include "cli_files.hpp"
#include "commands.hpp"
#include "core/json_text.hpp"
#include "scale_ranks.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/jacobi.hpp>
#include <tilestream/report.hpp>
#include <tilestream/verify.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>

namespace tilestream::cli {
namespace {

/// "cpu:1,cpu:2,cuda:0+cpu" -> {"cpu:1", "cpu:2", "cuda:0,cpu"}: commas separate device sets,
/// '+' joins the items of one set.
std::vector<std::string> device_sets(const std::string& list) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= list.size()) {
        std::size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        std::string set = list.substr(start, comma - start);
        std::replace(set.begin(), set.end(), '+', ',');
        if (set.empty()) throw invalid_argument("scale: empty device set in '" + list + "'");
        out.push_back(set);
        start = comma + 1;
    }
    return out;
}

/// The options both workloads of `scale` take.
void declare_scale_options(args& a) {
    declare_device_options(a);
    a.text("devices", "comma-separated device sets; '+' joins devices within a set, e.g. cpu:1,cpu:2,cuda:0+cpu "
                      "(with --ranks: each rank's devices, one set, default cpu)", "SETS")
        .text("ranks", "strong scaling over MPI ranks instead: mpirun -np R of this tool for each R, e.g. 1,2,4", "R,R")
        .text("dtype", "f32 (default), f64; gemm also c32 or c64", "DTYPE")
        .integer_option("repeat", "median of R runs (default 3)")
        .text("plot", "draw the scaling plot (SVG)", "scaling.svg")
        .flag_option("json", "print one JSON object");
}

/// The --plot output, checked before any work.
void declare_plot(const args& a, run_files& files) {
    if (auto p = a.get("plot")) files.output("--plot", *p, file_format::svg);
}

/// The scaling table, or its JSON, and the plot: the same for device sets and rank counts.
void print_scaling(const args& a, run_files& files, const std::vector<scaling_row>& rows, const std::string& workload,
                   const std::string& unit, bool weak, const std::string& title) {
    detail::json o = {{"workload", workload}};
    if (workload == "jacobi") o["weak"] = weak;
    if (a.has("ranks")) o["over"] = "ranks";
    o["rows"] = detail::json::parse(scaling_json(rows, unit));
    if (files.has("--plot"))
        files.write("--plot", scaling_svg(rows, title, unit, a.has("ranks") ? "MPI ranks" : "devices"));
    if (a.flag("json"))
        std::fprintf(files.report(), "%s\n", detail::json_line(o).c_str());
    else
        std::fputs(scaling_table(rows, unit).c_str(), files.report());
    files.commit();
}

/// `scale <workload> --ranks`: the rank counts, each rank's devices (one set) and the device
/// options passed on to every run with the problem's `problem_args`; prints the table.
int scale_ranks_command(const args& a, run_files& files, const std::string& workload, char** argv,
                        std::vector<std::string> problem_args, const std::string& problem) {
    const bool gemm = workload == "gemm";
    ranks_study st;
    st.workload = workload;
    st.problem = problem;
    st.rate_key = gemm ? "gflops" : "glups";
    st.bytes_key = gemm ? "max_bytes_sent_per_rank" : "max_halo_bytes_per_rank";
    st.ranks = parse_rank_counts(*a.get("ranks"));
    const auto sets = device_sets(a.get_or("devices", "cpu"));
    if (sets.size() != 1)
        throw invalid_argument("scale " + workload + " --ranks: --devices gives each rank's devices, one set (join "
                               "devices with '+'), got " + std::to_string(sets.size()) + " sets");
    st.devices = sets.front();
    st.repeat = int(a.integer("repeat", 3, 1, 1000));
    st.argv0 = argv[0];
    st.args = {"--devices", st.devices};
    for (const char* o : {"memory-budget", "cpu-threads"})
        if (auto v = a.get(o)) st.args.insert(st.args.end(), {std::string("--") + o, *v});
    st.args.insert(st.args.end(), problem_args.begin(), problem_args.end());
    print_scaling(a, files, scale_over_ranks(st), workload, gemm ? "GFLOP/s" : "GLUP/s", false,
                  (gemm ? "gemm strong scaling over ranks: " : "strong scaling over ranks, jacobi ") + problem);
    return 0;
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

template <class T>
std::vector<scaling_row> scale_gemm(const args& a, const std::vector<std::string>& sets, dtype type) {
    const index_t big = std::numeric_limits<index_t>::max();
    const index_t m = a.integer("m", 0, 1, big), n = a.integer("n", 0, 1, big), k = a.integer("k", 0, 1, big);
    if (!m || !n || !k) throw invalid_argument("scale gemm: give --m, --n and --k");
    checked_bytes(m, k, type, "scale gemm: A");
    checked_bytes(k, n, type, "scale gemm: B");
    checked_bytes(m, n, type, "scale gemm: C");
    const int repeat = int(a.integer("repeat", 3, 1, 1000));
    host_matrix<T> am(m, k), bm(k, n), cm(m, n);
    fill_random(am.view(), 1);
    fill_random(bm.view(), 2);
    plan_options po;
    po.strategy = parse_gemm_strategy(a.get_or("strategy", "auto"));
    po.kernel = parse_gemm_kernel(a.get_or("kernel", "vendor"));
    po.tile_m = po.tile_n = a.integer("tile", 0, 1, big);
    po.cache = parse_cache_mode(a.get_or("cache", "auto"));
    const open_options oo = device_options(a);
    std::vector<scaling_row> rows;
    const std::string problem = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                                std::string(to_string(type));
    for (const auto& set : sets) {
        auto devs = open_devices(set, oo);
        std::vector<device*> ptrs;
        std::size_t budget = std::numeric_limits<std::size_t>::max();
        for (auto& d : devs) {
            ptrs.push_back(d.get());
            budget = std::min(budget, d->budget());
        }
        check_budgets(ptrs);
        po.devices = int(ptrs.size());
        po.in_place = computes_in_place(ptrs);
        const gemm_problem q = describe_gemm<T>(op::n, op::n, T(1), am.view(), bm.view(), T(0), cm.view());
        device_rates rates = a.has("rates") ? parse_rates(*a.get("rates")) : measure_rates(*ptrs.front(), type, po.kernel);
        rates.host_memory = computes_on_host_cores(ptrs);
        const gemm_plan plan = plan_gemm(q, budget, rates, po);
        std::vector<double> secs;
        gemm_report rep;
        execute_gemm<T>(plan, ptrs, T(1), am.view(), bm.view(), T(0), cm.view());  // warm-up
        for (int r = 0; r < repeat; ++r) {
            rep = execute_gemm<T>(plan, ptrs, T(1), am.view(), bm.view(), T(0), cm.view());
            secs.push_back(rep.seconds);
        }
        scaling_row row;
        row.devices = set;
        row.device_count = int(ptrs.size());
        row.seconds = median_of(secs);
        row.rate = q.flops() / row.seconds * 1e-9;
        row.bytes_moved = double(rep.bytes_h2d + rep.bytes_d2h);
        if (plan.cache && rep.cache_hits + rep.cache_misses > 0)
            row.cache_hit_rate = double(rep.cache_hits) / double(rep.cache_hits + rep.cache_misses);
        row.problem = problem + " " + std::string(to_string(plan.strategy));
        rows.push_back(row);
        std::fprintf(stderr, "  %s: %.4f s\n", set.c_str(), row.seconds);
    }
    compute_scaling(rows, false);
    return rows;
}

}  // namespace

int cmd_scale_jacobi(int argc, char** argv) {
    args a("scale jacobi", "The same Jacobi problem on several device sets: speedup and efficiency.");
    declare_scale_options(a);
    a.integer_option("nx", "grid columns")
        .integer_option("ny", "grid rows")
        .integer_option("iters", "iterations (default 100)")
        .text("decomp", "rows | cols | tiles | tiles:PxQ | auto", "D")
        .text("overlap", "on (default) or off", "on|off")
        .integer_option("check-every", "residual every K iterations (default 10)")
        .flag_option("weak", "weak scaling: the problem grows with the device count");
    if (!a.parse(argc, argv, 3)) return 0;
    if (!a.has("devices") && !a.has("ranks"))
        throw invalid_argument("scale jacobi: give --devices, e.g. cpu:1,cpu:2 (or --ranks 1,2,4)");
    run_files files;
    declare_plot(a, files);
    const index_t big = std::numeric_limits<index_t>::max();
    jacobi_problem base;
    base.nx = a.integer("nx", 0, 1, big);
    base.ny = a.integer("ny", 0, 1, big);
    if (!base.nx || !base.ny) throw invalid_argument("scale jacobi: give --nx and --ny");
    base.type = parse_dtype(a.get_or("dtype", "f32"));
    jacobi_options jo;
    jo.iters = a.integer("iters", 100, 1, big);
    jo.check_every = a.integer("check-every", 10, 1, big);
    const std::string overlap = a.get_or("overlap", "on");
    if (overlap != "on" && overlap != "off") throw invalid_argument("--overlap expects on or off, got '" + overlap + "'");
    jo.overlap = overlap == "on";
    const bool weak = a.flag("weak");
    if (a.has("decomp")) jo.decomposition = parse_jacobi_decomposition(*a.get("decomp"));
    if (a.has("ranks")) {
        if (weak) throw invalid_argument("scale jacobi: --ranks measures strong scaling; it does not go with --weak");
        return scale_ranks_command(
            a, files, "jacobi", argv,
            {"--nx", std::to_string(base.nx), "--ny", std::to_string(base.ny), "--dtype", std::string(to_string(base.type)),
             "--iters", std::to_string(jo.iters), "--check-every", std::to_string(jo.check_every), "--overlap", overlap,
             "--decomp", to_string(jo.decomposition)},
            std::to_string(base.ny) + "x" + std::to_string(base.nx) + " " + std::string(to_string(base.type)));
    }
    const auto sets = device_sets(*a.get("devices"));
    const int repeat = int(a.integer("repeat", 3, 1, 1000));
    const open_options oo = device_options(a);
    std::vector<scaling_row> rows;
    for (const auto& set : sets) {
        auto devs = open_devices(set, oo);
        std::vector<device*> ptrs;
        for (auto& d : devs) ptrs.push_back(d.get());
        check_budgets(ptrs);
        jacobi_problem q = weak ? weak_scaling_problem(base, int(ptrs.size())) : base;
        jacobi_options o = jo;
        if (weak && !a.has("decomp")) o.decomposition = parse_jacobi_decomposition("tiles");
        std::vector<double> secs;
        jacobi_measurement last;
        measure_jacobi(q, ptrs, o);  // warm-up
        for (int r = 0; r < repeat; ++r) {
            last = measure_jacobi(q, ptrs, o);
            secs.push_back(last.seconds);
        }
        scaling_row row;
        row.devices = set;
        row.device_count = int(ptrs.size());
        row.seconds = median_of(secs);
        row.rate = double(q.interior_points()) * double(last.iterations) / row.seconds * 1e-9;
        row.bytes_moved = double(last.halo_bytes_per_iteration) * double(last.iterations);
        row.problem = std::to_string(q.ny) + "x" + std::to_string(q.nx) + " " + std::string(to_string(q.type)) + " " +
                      to_string(last.decomposition) + (o.overlap ? " overlap" : "");
        rows.push_back(row);
        std::fprintf(stderr, "  %s: %.4f s\n", set.c_str(), row.seconds);
    }
    compute_scaling(rows, weak);
    print_scaling(a, files, rows, "jacobi", "GLUP/s", weak,
                  std::string(weak ? "weak" : "strong") + " scaling, jacobi " + rows.front().problem);
    return 0;
}

int cmd_scale(int argc, char** argv) {
    if (argc < 3 || std::string(argv[2]) == "--help") {
        std::cout << "usage: tilestream scale gemm --m M --n N --k K --devices SETS [--dtype] [--kernel] [--strategy]\n"
                     "                             [--memory-budget B] [--cpu-threads N] [--cache auto|on|off] [--repeat R]\n"
                     "       tilestream scale jacobi --nx NX --ny NY --iters I --devices SETS [--weak] [...]\n"
                     "       tilestream scale gemm|jacobi ... --ranks 1,2,4 [--devices SET]   (mpirun -np R of this tool)\n"
                     "  SETS: comma-separated device sets; '+' joins devices within a set, e.g. cpu:1,cpu:2,cuda:0+cpu\n"
                     "  [--json] [--plot scaling.svg]\n";
        return argc < 3 ? 2 : 0;
    }
    const std::string what = argv[2];
    if (what == "jacobi") return cmd_scale_jacobi(argc, argv);
    if (what != "gemm")
        throw invalid_argument("scale: unknown workload '" + what + "' (expected gemm or jacobi)" +
                               did_you_mean(what, {"gemm", "jacobi"}));
    args a("scale gemm", "The same GEMM on several device sets: speedup and efficiency.");
    declare_scale_options(a);
    a.integer_option("m", "rows of C")
        .integer_option("n", "columns of C")
        .integer_option("k", "inner dimension")
        .text("kernel", "reference, naive, tiled or vendor (default)", "KERNEL")
        .text("strategy", "auto (default) or a strategy of gemm --strategy", "STRATEGY")
        .integer_option("tile", "tile size instead of the planner's")
        .text("cache", "auto (default), on or off", "auto|on|off")
        .text("rates", "declare rates instead of measuring them, e.g. h2d=12GB/s,d2h=12GB/s,gflops=150", "RATES");
    if (!a.parse(argc, argv, 3)) return 0;
    if (!a.has("devices") && !a.has("ranks"))
        throw invalid_argument("scale gemm: give --devices, e.g. cpu:1,cpu:2 (or --ranks 1,2,4)");
    run_files files;
    declare_plot(a, files);
    const dtype type = parse_dtype(a.get_or("dtype", "f32"));
    if (a.has("ranks")) {
        for (const char* o : {"kernel", "strategy", "tile", "cache", "rates"})
            if (a.has(o))
                throw invalid_argument(std::string("scale gemm --ranks: --") + o +
                                       " is an option of one process; over ranks each rank plans its own multiplies");
        const index_t big = std::numeric_limits<index_t>::max();
        const index_t m = a.integer("m", 0, 1, big), n = a.integer("n", 0, 1, big), k = a.integer("k", 0, 1, big);
        if (!m || !n || !k) throw invalid_argument("scale gemm: give --m, --n and --k");
        return scale_ranks_command(a, files, "gemm", argv,
                                   {"--m", std::to_string(m), "--n", std::to_string(n), "--k", std::to_string(k),
                                    "--dtype", std::string(to_string(type))},
                                   std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                                       std::string(to_string(type)));
    }
    const auto sets = device_sets(*a.get("devices"));
    auto rows = visit_dtype(type, [&]<class T>() { return scale_gemm<T>(a, sets, type); });
    print_scaling(a, files, rows, "gemm", "GFLOP/s", false, "gemm scaling: " + rows.front().problem);
    return 0;
}

int cmd_timeline(int argc, char** argv) {
    args a("timeline", "Draw a Chrome trace written by --trace as an SVG timeline.");
    a.positionals("files", "run.json run.svg: the trace to read and the picture to write");
    if (!a.parse(argc, argv, 2)) return 0;
    if (a.positional().size() != 2) {
        std::cout << "usage: tilestream timeline run.json run.svg   (a Chrome trace written by --trace)\n";
        return 2;
    }
    const std::string& trace = a.positional()[0];
    const std::string& picture = a.positional()[1];
    run_files files;
    files.input("the trace", trace);
    files.output("the timeline", picture, file_format::svg);
    const auto spans = read_chrome_trace(trace);
    files.write("the timeline", timeline_svg(spans, "timeline of " + trace));
    std::fprintf(files.report(), "wrote %s (%zu spans)\n", picture.c_str(), spans.size());
    files.commit();
    return 0;
}

}  // namespace tilestream::cli
