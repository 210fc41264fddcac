// The tilestream command-line tool: parses options, calls the library, prints results.
#include "cli_args.hpp"
#include "commands.hpp"

#include <tilestream/anchor.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/json.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/report.hpp>
#include <tilestream/trace.hpp>
#include <tilestream/verify.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ts = tilestream;

namespace {

constexpr int exit_check_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_runtime = 3;

const char* usage_text =
    "usage: tilestream <command> [options]\n"
    "commands:\n"
    "  devices [--json]                 list the devices present\n"
    "  gemm [options]                   C <- alpha*op(A)*op(B) + beta*C on one or more devices\n"
    "  jacobi [options]                 2-D Laplace by Jacobi iteration across devices\n"
    "  scale gemm|jacobi [options]      the same problem on several device sets: speedup, efficiency\n"
    "  timeline run.json run.svg        draw a saved trace\n"
    "run 'tilestream <command> --help' for the options of a command\n";

const char* gemm_help =
    "usage: tilestream gemm [options]\n"
    "  random inputs:  --m M --n N --k K [--dtype f32|f64] [--seed S] [--layout row|col]\n"
    "  file inputs:    --a A.npy --b B.npy [--c C.npy]   (layout from each file's order)\n"
    "  --out C.npy               write C (atomically)\n"
    "  --alpha X --beta Y        scalars (default 1, 0)\n"
    "  --op-a n|t --op-b n|t     transposes\n"
    "  --kernel reference|naive|tiled|vendor   (default vendor)\n"
    "  --math strict|tf32        f32 math mode (tf32: CUDA vendor kernel only)\n"
    "  --devices SPEC            e.g. cpu, cpu:2, cuda:0, cpu@512MiB (default cpu)\n"
    "  --memory-budget BYTES     budget of each device, e.g. 512MiB\n"
    "  --cpu-threads N           threads per CPU device (at most 4 x cores, at least 16)\n"
    "  --strategy S              auto (default), in-core, tiles-3d, a-panel, a-panel-c-panel, b-panel, c-block,\n"
    "                            row-panels, zero-copy (CPU devices without a budget: operands used in place;\n"
    "                            what auto and in-core run there)\n"
    "  --tile T | --tile-m/-n/-k override the planner's tile sizes\n"
    "  --transfer 2d|pack        2-D strided copies (default) or pack tiles on the host first\n"
    "  --rates h2d=12GB/s,d2h=12GB/s,gflops=150   declare rates instead of measuring them\n"
    "  --explain                 print the plan before the run and measured-vs-predicted after (stderr)\n"
    "  --trace run.json          write a Chrome trace (Perfetto, chrome://tracing)\n"
    "  --timeline run.svg        draw copies and kernels per device and stream (SVG)\n"
    "  --cache auto|on|off       reuse A/B tiles in spare device memory (auto: where the cost model predicts a gain)\n"
    "  --peer-tiles auto|on|off  copy missing tiles from another device's cache (auto: GPUs with peer access)\n"
    "  --reproducible on|off     add k in fixed k-blocks, so C is bitwise the same for any plan or device\n"
    "                            count with the same kernel (default: off; tile-k becomes a multiple)\n"
    "  --quiet                   no progress line\n"
    "  --check                   verify C in float64, exit 1 on failure. NaN/Inf must sit where the reference\n"
    "                            has them; the other elements' relative Frobenius error must be within\n"
    "                            max(16, 8 sqrt(k)) u (u = 2^-24 f32, 2^-53 f64, 2^-11 tf32). Method by m*n*k:\n"
    "                            <= 2^22: sequential reference; <= 2^36 (4096^3): OpenBLAS dgemm on upcast\n"
    "                            blocks (a few MiB per thread; about twice an f32 run on the host's cores);\n"
    "                            larger: Freivalds, C x and y^T C for 4+4 random +-1 vectors against the\n"
    "                            operands (tolerance + 8 (sqrt(n) + sqrt(k)) 2^-53 for its own rounding)\n"
    "  --anchor                  also time OpenBLAS (cblas_?gemm, all cores) on the host on the same operands\n"
    "                            and print the ratio of this run's GFLOP/s to it\n"
    "  --repeat R                run R times, report the median\n"
    "  --json                    print one JSON object\n";

ts::open_options device_options(const ts::cli::args& a) {
    ts::open_options o;
    if (auto b = a.get("memory-budget")) o.memory_budget = ts::parse_bytes(*b);
    o.cpu_threads = static_cast<int>(a.integer("cpu-threads", 0, 1, std::numeric_limits<int>::max()));
    return o;
}

int cmd_devices(int argc, char** argv) {
    ts::cli::args a(argc, argv, 2, {}, {"json", "help"});
    if (a.flag("help")) {
        std::cout << "usage: tilestream devices [--json]\n";
        return 0;
    }
    const auto& inv = ts::inventory();
    auto devs = ts::open_devices("all");
    if (a.flag("json")) {
        std::vector<std::string> items;
        for (const auto& d : devs) {
            const auto& i = d->info();
            ts::json_object o;
            o.add("id", i.id).add("kind", std::string(ts::to_string(i.kind))).add("name", i.name);
            o.add("memory_bytes", i.memory_bytes).add("memory_free_bytes", i.memory_free);
            o.add("budget_bytes", i.budget_bytes).add("threads", i.threads);
            if (i.kind == ts::device_kind::cpu) o.add("isa", i.isa).add("blocking", i.blocking);
            if (i.kind == ts::device_kind::cuda) {
                o.add("compute_capability", std::to_string(i.cc_major) + "." + std::to_string(i.cc_minor));
                o.add("sm_count", i.threads);
                std::vector<std::string> peers;
                for (int p : i.peer_access) peers.push_back(std::to_string(p));
                o.raw("peer_access", ts::json_array(peers));
            }
            items.push_back(o.str());
        }
        std::vector<std::string> opencl;  // every OpenCL device, emulated ones included
        for (const auto& i : inv.opencl_devices) {
            ts::json_object o;
            o.add("id", i.id).add("name", i.name).add("platform", i.platform).add("vendor", i.vendor);
            o.add("type", i.device_type).add("driver", i.driver).add("compute_units", i.threads);
            o.add("global_memory_bytes", i.memory_bytes).add("local_memory_bytes", i.local_memory);
            o.add("fp64", i.fp64).add("emulated", i.emulated);
            opencl.push_back(o.str());
        }
        ts::json_object top;
        top.raw("devices", ts::json_array(items));
        top.add("cpu_cores", inv.cpu_cores).add("cuda_status", inv.cuda_status);
        top.raw("opencl_devices", ts::json_array(opencl)).add("opencl_status", inv.opencl_status);
        std::cout << top.str() << "\n";
        return 0;
    }
    std::printf("%-10s %-5s %-40s %12s %12s %8s\n", "id", "kind", "name", "memory", "free", "threads");
    for (const auto& d : devs) {
        const auto& i = d->info();
        std::printf("%-10s %-5s %-40s %12s %12s %8d\n", i.id.c_str(), std::string(ts::to_string(i.kind)).c_str(),
                    i.name.c_str(), ts::format_bytes(i.memory_bytes).c_str(),
                    ts::format_bytes(i.memory_free).c_str(), i.threads);
        if (i.kind == ts::device_kind::cpu)
            std::printf("           isa %s, tiled GEMM blocking %s\n", i.isa.c_str(), i.blocking.c_str());
        if (i.kind == ts::device_kind::cuda) {
            std::string peers;
            for (int p : i.peer_access) peers += (peers.empty() ? "" : ",") + std::to_string(p);
            std::printf("           compute capability %d.%d, %d SMs, peer access: %s\n", i.cc_major,
                        i.cc_minor, i.threads, peers.empty() ? "none" : peers.c_str());
        }
    }
    std::printf("CUDA: %s\n", inv.cuda_status.c_str());
    std::printf("OpenCL: %s\n", inv.opencl_status.c_str());
    for (const auto& i : inv.opencl_devices) {
        std::printf("%-10s %s (%s, %s), %s%s\n", i.id.c_str(), i.name.c_str(), i.vendor.c_str(), i.platform.c_str(),
                    i.device_type.c_str(), i.emulated ? ", emulated: used only when named" : "");
        std::printf("           driver %s, %d compute units, global %s, local %s, fp64 %s\n", i.driver.c_str(),
                    i.threads, ts::format_bytes(i.memory_bytes).c_str(), ts::format_bytes(i.local_memory).c_str(),
                    i.fp64 ? "yes" : "no");
    }
    return 0;
}

/// Operands of one gemm run, owned here (random) or mapped from files.
template <class T>
struct gemm_operands {
    ts::host_matrix<T> a_own, b_own, c_init;
    ts::npy_array a_file, b_file;
    ts::host_matrix_view<const T> a, b;
};

/// A progress line on stderr (units done, GFLOP/s, ETA) for runs longer than a second, only when
/// stderr is a terminal.
class progress_line {
public:
    progress_line(std::size_t total, double flops_per_unit, bool enabled)
        : total_(total), flops_per_unit_(flops_per_unit), enabled_(enabled && isatty(2)) {
        if (enabled_) thread_ = std::thread([this] { loop(); });
    }
    ~progress_line() { finish(); }
    void tick() { ++done_; }
    void finish() {
        if (!thread_.joinable()) return;
        stop_ = true;
        thread_.join();
        if (printed_) std::fprintf(stderr, "\r%*s\r", 70, "");
    }

private:
    void loop() {
        const auto t0 = std::chrono::steady_clock::now();
        while (!stop_) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (el < 1.0 || stop_) continue;
            const std::size_t d = done_.load();
            const double rate = double(d) * flops_per_unit_ / el;
            const double eta = d ? el * double(total_ - std::min(total_, d)) / double(d) : 0.0;
            std::fprintf(stderr, "\r  %zu/%zu tiles, %.1f GFLOP/s, ETA %.1f s   ", d, total_, rate * 1e-9, eta);
            printed_ = true;
        }
    }
    std::size_t total_;
    double flops_per_unit_;
    bool enabled_;
    std::atomic<std::size_t> done_{0};
    std::atomic<bool> stop_{false};
    bool printed_ = false;
    std::thread thread_;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class T>
int run_gemm(const ts::cli::args& a, ts::dtype type) {
    const ts::op op_a = ts::parse_op(a.get_or("op-a", "n"));
    const ts::op op_b = ts::parse_op(a.get_or("op-b", "n"));
    const T alpha = a.scalar<T>("alpha", 1.0);
    const T beta = a.scalar<T>("beta", 0.0);
    const auto seed = static_cast<std::uint64_t>(a.integer("seed", 42, 0, std::numeric_limits<ts::index_t>::max()));
    const int repeat = static_cast<int>(a.integer("repeat", 1, 1, 100000));
    ts::gemm_options opt;
    opt.kernel = ts::parse_gemm_kernel(a.get_or("kernel", "vendor"));
    opt.math = ts::parse_math_mode(a.get_or("math", "strict"));

    gemm_operands<T> ops;
    ts::index_t m, n, k;
    ts::layout c_layout = ts::layout::row_major;
    const bool from_files = a.has("a") || a.has("b");
    if (from_files) {
        if (!a.has("a") || !a.has("b")) throw ts::invalid_argument("gemm: --a and --b go together");
        for (const char* o : {"m", "n", "k", "layout", "seed"})
            if (a.has(o)) throw ts::invalid_argument(std::string("gemm: --") + o + " is for random inputs, not with --a/--b");
        ops.a_file = ts::read_npy(*a.get("a"));
        ops.b_file = ts::read_npy(*a.get("b"));
        ops.a = ops.a_file.template view<T>();
        ops.b = ops.b_file.template view<T>();
        m = op_a == ts::op::n ? ops.a.rows() : ops.a.cols();
        k = op_a == ts::op::n ? ops.a.cols() : ops.a.rows();
        n = op_b == ts::op::n ? ops.b.cols() : ops.b.rows();
        ts::validate_gemm(op_a, op_b, ops.a.rows(), ops.a.cols(), ops.b.rows(), ops.b.cols(), m, n);
        if (a.has("c")) {
            auto cf = ts::read_npy(*a.get("c"));
            auto cv = cf.template view<T>();
            ts::validate_gemm(op_a, op_b, ops.a.rows(), ops.a.cols(), ops.b.rows(), ops.b.cols(), cv.rows(), cv.cols());
            c_layout = cv.layout();
            ops.c_init = ts::host_matrix<T>(m, n, c_layout);
            for (ts::index_t i = 0; i < m; ++i)
                for (ts::index_t j = 0; j < n; ++j) ops.c_init(i, j) = cv(i, j);
            ts::cli::as_runtime_failure([&] { cf.check_unchanged(); });
        } else if (beta != T(0)) {
            throw ts::invalid_argument("gemm: --beta is not 0 but no --c file was given");
        }
    } else {
        if (a.has("c")) throw ts::invalid_argument("gemm: --c needs --a and --b");
        if (!a.has("m") || !a.has("n") || !a.has("k"))
            throw ts::invalid_argument("gemm: give --m, --n and --k (random inputs) or --a and --b (files)");
        const auto big = std::numeric_limits<ts::index_t>::max();
        m = a.integer("m", 0, 1, big);
        n = a.integer("n", 0, 1, big);
        k = a.integer("k", 0, 1, big);
        const std::size_t a_bytes = ts::checked_bytes(m, k, type, "gemm: A");
        const std::size_t b_bytes = ts::checked_bytes(k, n, type, "gemm: B");
        const std::size_t c_bytes = ts::checked_bytes(m, n, type, "gemm: C");
        // A, B, C (and C's start when beta != 0) live in host memory: say so before allocating.
        const std::size_t host_bytes = a_bytes + b_bytes + c_bytes * (beta != T(0) ? 2 : 1);
        ts::check_host_memory(host_bytes, "gemm: random " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                              std::to_string(k) + " " + std::string(ts::to_string(type)) +
                                              " operands");
        const std::string lay = a.get_or("layout", "row");
        if (lay != "row" && lay != "col") throw ts::invalid_argument("--layout expects row or col, got '" + lay + "'");
        c_layout = lay == "row" ? ts::layout::row_major : ts::layout::col_major;
        const bool na = op_a == ts::op::n, nb = op_b == ts::op::n;
        ops.a_own = ts::host_matrix<T>(na ? m : k, na ? k : m, c_layout);
        ops.b_own = ts::host_matrix<T>(nb ? k : n, nb ? n : k, c_layout);
        ts::fill_random(ops.a_own.view(), seed);
        ts::fill_random(ops.b_own.view(), seed + 1);
        ops.a = ops.a_own.view();
        ops.b = ops.b_own.view();
        if (beta != T(0)) {
            ops.c_init = ts::host_matrix<T>(m, n, c_layout);
            ts::fill_random(ops.c_init.view(), seed + 2);
        }
    }

    std::optional<std::string> out_path = a.get("out");
    const std::string spec = a.get_or("devices", "cpu");
    auto devs = ts::open_devices(spec, device_options(a));
    std::vector<ts::device*> dev_ptrs;
    std::size_t budget = std::numeric_limits<std::size_t>::max();
    for (auto& d : devs) {
        dev_ptrs.push_back(d.get());
        budget = std::min(budget, d->budget());
    }
    std::string dev_names;
    for (auto* d : dev_ptrs) dev_names += (dev_names.empty() ? "" : ",") + d->id();

    ts::plan_options po;
    po.strategy = ts::parse_gemm_strategy(a.get_or("strategy", "auto"));
    const ts::index_t big = std::numeric_limits<ts::index_t>::max();
    const ts::index_t tile = a.integer("tile", 0, 1, big);
    po.tile_m = a.integer("tile-m", tile, 1, big);
    po.tile_n = a.integer("tile-n", tile, 1, big);
    po.tile_k = a.integer("tile-k", po.strategy == ts::gemm_strategy::a_panel ||
                                            po.strategy == ts::gemm_strategy::a_panel_c_panel ||
                                            po.strategy == ts::gemm_strategy::b_panel
                                        ? 0
                                        : tile,
                          1, big);
    const std::string transfer = a.get_or("transfer", "2d");
    if (transfer != "2d" && transfer != "pack") throw ts::invalid_argument("--transfer expects 2d or pack, got '" + transfer + "'");
    po.transfer = transfer == "2d" ? ts::transfer_mode::copy_2d : ts::transfer_mode::pack;
    po.kernel = opt.kernel;
    po.math = opt.math;
    po.devices = int(dev_ptrs.size());
    po.cache = ts::parse_cache_mode(a.get_or("cache", "auto"));
    po.in_place = ts::computes_in_place(dev_ptrs);
    const std::string reproducible = a.get_or("reproducible", "off");
    if (reproducible != "on" && reproducible != "off")
        throw ts::invalid_argument("--reproducible expects on or off, got '" + reproducible + "'");
    po.reproducible = reproducible == "on";
    for (auto* d : dev_ptrs)
        if (!d->supports(opt.kernel))
            throw ts::invalid_argument("gemm: device " + d->id() + " has no '" + std::string(ts::to_string(opt.kernel)) +
                                       "' kernel (the reference kernel runs on CPU devices only)");

    ts::host_matrix<T> c(m, n, c_layout);
    const ts::gemm_problem problem = ts::describe_gemm<T>(op_a, op_b, alpha, ops.a, ops.b, beta, c.view());
    const bool explain = a.flag("explain");
    ts::device_rates rates;
    if (a.has("rates")) rates = ts::parse_rates(*a.get("rates"));
    else if ((po.strategy == ts::gemm_strategy::automatic && !po.in_place) || explain)
        // In place nothing is copied and the compute is the same whatever the plan: no probe.
        rates = ts::measure_rates(*dev_ptrs.front(), type, opt.kernel, opt.math);
    ts::gemm_plan plan;
    try {
        plan = ts::plan_gemm(problem, budget, rates, po);
    } catch (const ts::out_of_budget& e) {
        throw ts::out_of_budget(dev_names + ": " + e.what());
    }
    if (explain) {
        std::fprintf(stderr, "%s", ts::explain(plan).c_str());
        if (!a.has("rates") && !rates.measured)
            std::fprintf(stderr, "rates: not measured (the probe does not fit the budget of %s); the plan used "
                                 "default rates (give --rates to declare them)\n",
                         ts::format_bytes(budget).c_str());
    }
    if ((a.has("tile") || a.has("tile-m") || a.has("tile-n") || a.has("tile-k")) &&
        po.strategy == ts::gemm_strategy::automatic && plan.strategy == ts::gemm_strategy::in_core)
        std::fprintf(stderr, "tilestream gemm: warning: the tile sizes given are not used: the planner chose "
                             "in-core (the whole problem fits the budget); add --strategy tiles-3d to tile it\n");

    ts::trace_recorder recorder;
    ts::gemm_run_options run;
    if (a.has("trace") || a.has("timeline")) run.trace = &recorder;
    const std::string peers = a.get_or("peer-tiles", "auto");
    if (peers != "auto" && peers != "on" && peers != "off")
        throw ts::invalid_argument("--peer-tiles expects auto, on or off, got '" + peers + "'");
    run.peer_tiles = peers == "on" ? ts::peer_tile_mode::on : peers == "off" ? ts::peer_tile_mode::off : ts::peer_tile_mode::automatic;
    progress_line progress(plan.units * std::size_t(repeat), plan.problem.flops() / double(plan.units ? plan.units : 1),
                           !a.flag("quiet"));
    run.on_unit_done = [&progress](std::size_t) { progress.tick(); };

    std::vector<double> seconds;
    ts::gemm_report last;
    // Pinned once for all repeats, outside the timed runs.
    const ts::pinned_operands pinned(dev_ptrs, ops.a, ops.b, c.view());
    for (const auto& w : pinned.refused()) std::fprintf(stderr, "warning: host memory not pinned (copies stay pageable): %s\n", w.c_str());
    run.register_host = false;
    for (int r = 0; r < repeat; ++r) {
        if (beta != T(0))
            std::copy(ops.c_init.data(), ops.c_init.data() + m * n, c.data());
        else
            ts::fill_nan(c.view());  // beta = 0 must overwrite whatever C holds
        last = ts::execute_gemm<T>(plan, dev_ptrs, alpha, ops.a, ops.b, beta, c.view(), run);
        seconds.push_back(last.seconds);
        ts::cli::as_runtime_failure([&] {
            ops.a_file.check_unchanged();
            ops.b_file.check_unchanged();
        });
    }
    progress.finish();
    const double secs = median(seconds);
    const double flops = 2.0 * double(m) * double(n) * double(k);
    // An empty problem (m, n or k = 0 from files) does no arithmetic: report 0, not 0/0.
    const double gflops = flops > 0 && secs > 0 ? flops / secs * 1e-9 : 0.0;
    if (explain)
        std::fprintf(stderr,
                     "measured: %.4f s (predicted %.4f s), bytes h2d %zu (predicted %zu), d2h %zu (predicted %zu), "
                     "packed %zu (predicted %zu), peak device memory %zu (predicted %zu)\n",
                     secs, plan.predicted_seconds, last.bytes_h2d, plan.bytes_h2d, last.bytes_d2h, plan.bytes_d2h,
                     last.bytes_packed, plan.bytes_packed, last.peak_device_bytes, plan.peak_device_bytes);
    if (a.has("trace")) ts::cli::as_runtime_failure([&] { recorder.write_chrome(*a.get("trace")); });
    if (a.has("timeline"))
        ts::cli::as_runtime_failure([&] { ts::write_text_file_atomically(*a.get("timeline"),
                                       ts::timeline_svg(recorder.spans(), "gemm " + std::to_string(m) + "x" + std::to_string(n) +
                                                                              "x" + std::to_string(k) + " " +
                                                                              std::string(ts::to_string(plan.strategy)) +
                                                                              " on " + dev_names)); });

    // C0 (the input C) is kept in ops.c_init when beta != 0; with beta == 0 it is not read.
    const ts::host_matrix_view<const T> c0 =
        beta != T(0) ? ops.c_init.view() : ts::host_matrix_view<const T>(c.data(), m, n, c_layout);
    std::optional<ts::gemm_check_result> check;
    if (a.flag("check")) check = ts::check_gemm<T>(op_a, op_b, alpha, ops.a, ops.b, beta, c0, c.view(), opt.math);
    std::optional<ts::blas_anchor> anchor;
    if (a.flag("anchor")) anchor = ts::time_host_blas_gemm<T>(op_a, op_b, alpha, ops.a, ops.b, beta, c0, repeat);
    if (out_path) ts::cli::as_runtime_failure([&] { ts::write_npy<T>(*out_path, c.view()); });

    const bool ok = !check || check->passed();
    if (a.flag("json")) {
        ts::json_object o;
        o.add("m", m).add("n", n).add("k", k).add("dtype", std::string(ts::to_string(type)));
        o.add("kernel", std::string(ts::to_string(opt.kernel))).add("math", std::string(ts::to_string(opt.math)));
        o.add("devices", dev_names).add("op_a", std::string(ts::to_string(op_a))).add("op_b", std::string(ts::to_string(op_b)));
        o.add("alpha", double(alpha)).add("beta", double(beta)).add("repeat", repeat);
        o.add("seconds", secs).add("gflops", gflops);
        o.add("strategy", std::string(ts::to_string(plan.strategy))).add("transfer", std::string(ts::to_string(plan.transfer)));
        o.add("tile_m", plan.tile_m).add("tile_n", plan.tile_n).add("tile_k", plan.tile_k).add("k_block", plan.k_block);
        o.add("bytes_h2d", last.bytes_h2d).add("bytes_d2h", last.bytes_d2h).add("bytes_packed", last.bytes_packed);
        o.add("peak_device_bytes", last.peak_device_bytes).add("budget_bytes", budget);
        o.add("predicted_seconds", plan.predicted_seconds).add("predicted_bound", plan.bound);
        o.add("predicted_bytes_h2d", plan.bytes_h2d).add("predicted_bytes_d2h", plan.bytes_d2h);
        o.add("predicted_bytes_packed", plan.bytes_packed).add("predicted_peak_device_bytes", plan.peak_device_bytes);
        std::vector<std::string> shares;
        for (const auto& d : last.devices)
            shares.push_back(ts::json_object().add("id", d.id).add("units", d.units).add("flops", d.flops)
                                 .add("bytes_h2d", d.bytes_h2d).add("cache_hits", d.cache_hits).str());
        o.raw("device_shares", ts::json_array(shares));
        if (plan.cache)
            o.add("cache_hits", last.cache_hits).add("cache_misses", last.cache_misses).add("bytes_saved", last.bytes_saved)
                .add("peer_hits", last.peer_hits).add("bytes_from_peers", last.bytes_from_peers);
        if (check)
            o.add("rel_error", check->error).add("tolerance", check->tolerance).add("check_passed", ok)
                .add("check_method", std::string(ts::to_string(check->method))).add("check_tolerance", check->tolerance)
                .add("check_seconds", check->seconds)
                .add("check_nonfinite_matched", check->nonfinite_matched)
                .add("check_nonfinite_mismatched", check->nonfinite_mismatched);
        if (anchor)
            o.add("anchor", anchor->name).add("anchor_seconds", anchor->seconds).add("anchor_gflops", anchor->gflops)
                .add("ratio_to_anchor", (anchor->gflops > 0 ? gflops / anchor->gflops : 0.0));
        std::cout << o.str() << "\n";
    } else {
        std::printf("gemm %lldx%lldx%lld %s op(A)=%s op(B)=%s kernel=%s strategy=%s on %s: %.4f s (median of %d), "
                    "%.1f GFLOP/s\n",
                    (long long)m, (long long)n, (long long)k, std::string(ts::to_string(type)).c_str(),
                    std::string(ts::to_string(op_a)).c_str(), std::string(ts::to_string(op_b)).c_str(),
                    std::string(ts::to_string(opt.kernel)).c_str(), std::string(ts::to_string(plan.strategy)).c_str(),
                    dev_names.c_str(), secs, repeat, gflops);
        if (anchor)
            std::printf("anchor: %s: %.4f s (median of %d), %.1f GFLOP/s; this run / anchor = %.2f\n",
                        anchor->name.c_str(), anchor->seconds, anchor->repeat, anchor->gflops,
                        (anchor->gflops > 0 ? gflops / anchor->gflops : 0.0));
        if (check) std::printf("check: %s\n", check->summary().c_str());
        if (out_path) std::printf("wrote %s\n", out_path->c_str());
    }
    return ok ? 0 : exit_check_failed;
}

int cmd_gemm(int argc, char** argv) {
    ts::cli::args a(argc, argv, 2,
                    {"m", "n", "k", "dtype", "seed", "layout", "a", "b", "c", "out", "alpha", "beta", "op-a",
                     "op-b", "kernel", "math", "devices", "memory-budget", "cpu-threads", "repeat", "strategy", "tile",
                     "tile-m", "tile-n", "tile-k", "transfer", "rates", "trace", "timeline", "cache", "peer-tiles",
                     "reproducible"},
                    {"check", "anchor", "json", "help", "explain", "quiet"});
    if (a.flag("help")) {
        std::cout << gemm_help;
        return 0;
    }
    if (!a.positional().empty()) throw ts::invalid_argument("gemm: unexpected argument '" + a.positional().front() + "'");
    a.check_output_paths({"out", "trace", "timeline"});
    ts::dtype type = ts::parse_dtype(a.get_or("dtype", "f32"));
    if (a.has("a")) {
        // The dtype comes from the files and must match across them.
        if (!a.has("b")) throw ts::invalid_argument("gemm: --a and --b go together");
        const auto fa = ts::read_npy(*a.get("a"));
        const auto fb = ts::read_npy(*a.get("b"));
        if (fa.type() != fb.type())
            throw ts::invalid_argument("gemm: dtypes differ: " + fa.path() + " is " + std::string(ts::to_string(fa.type())) +
                                       ", " + fb.path() + " is " + std::string(ts::to_string(fb.type())));
        if (a.has("c")) {
            const auto fc = ts::read_npy(*a.get("c"));
            if (fc.type() != fa.type())
                throw ts::invalid_argument("gemm: dtypes differ: " + fa.path() + " is " + std::string(ts::to_string(fa.type())) +
                                           ", " + fc.path() + " is " + std::string(ts::to_string(fc.type())));
        }
        if (a.has("dtype") && type != fa.type())
            throw ts::invalid_argument("gemm: --dtype " + *a.get("dtype") + " but " + fa.path() + " holds " +
                                       std::string(ts::to_string(fa.type())));
        type = fa.type();
    }
    return ts::visit_dtype(type, [&]<class T>() { return run_gemm<T>(a, type); });
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << usage_text;
        return exit_usage;
    }
    const std::string cmd = argv[1];
    try {
        if ((cmd == "gemm" || cmd == "jacobi") && ts::cli::wants_ranks(argc, argv))
            return ts::cli::cmd_distributed(cmd, argc, argv);
        if (cmd == "devices") return cmd_devices(argc, argv);
        if (cmd == "gemm") return cmd_gemm(argc, argv);
        if (cmd == "scale") return ts::cli::cmd_scale(argc, argv);
        if (cmd == "timeline") return ts::cli::cmd_timeline(argc, argv);
        if (cmd == "jacobi") return ts::cli::cmd_jacobi(argc, argv);
        if (cmd == "--help" || cmd == "help" || cmd == "-h") {
            std::cout << usage_text;
            return 0;
        }
        std::cerr << "tilestream: unknown command '" << cmd << "'\n" << usage_text;
        return exit_usage;
    } catch (const ts::cli::runtime_failure& e) {
        std::cerr << "tilestream " << cmd << ": error: " << e.what() << "\n";
        return exit_runtime;
    } catch (const ts::invalid_argument& e) {
        std::cerr << "tilestream " << cmd << ": error: " << e.what() << "\n";
        return exit_usage;
    } catch (const ts::file_error& e) {
        std::cerr << "tilestream " << cmd << ": error: " << e.what() << "\n";
        return exit_usage;
    } catch (const ts::out_of_budget& e) {
        std::cerr << "tilestream " << cmd << ": error: " << e.what() << "\n";
        return exit_usage;
    } catch (const std::bad_alloc&) {
        std::cerr << "tilestream " << cmd << ": error: out of host memory (std::bad_alloc)\n";
        return exit_runtime;
    } catch (const std::exception& e) {
        std::cerr << "tilestream " << cmd << ": error: " << e.what() << "\n";
        return exit_runtime;
    }
}
