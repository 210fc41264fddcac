// The tilestream command-line tool: parses options, calls the library, prints results.
#include "cli_args.hpp"
#include "cli_files.hpp"
#include "commands.hpp"
#include "core/json_text.hpp"
#include "core/message_text.hpp"
#include "core/npy_write.hpp"

#include <tilestream/anchor.hpp>
#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/report.hpp>
#include <tilestream/trace.hpp>
#include <tilestream/verify.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
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
    "  symm|hemm|syrk|herk|syr2k|her2k|trmm|trsm [options]\n"
    "                                   the rest of Level 3 BLAS on one or more devices, out of core\n"
    "  potrf|posv [options]             Cholesky factorization and solve, on one or more devices, out of core\n"
    "  getrf|gesv [options]             LU factorization (partial pivoting) and solve, on one or more devices, out of core\n"
    "  scale gemm|jacobi [options]      the same problem on several device sets: speedup, efficiency\n"
    "  timeline run.json run.svg        draw a saved trace\n"
    "  --version                        the version and the git commit built\n"
    "run 'tilestream <command> --help' for the options of a command\n";

/// The gemm command's options, with their help.
void declare_gemm_options(ts::cli::args& a) {
    ts::cli::declare_device_options(a);
    a.integer_option("m", "rows of C (random inputs, uniform in [-1, 1])")
        .integer_option("n", "columns of C (random inputs)")
        .integer_option("k", "inner dimension (random inputs)")
        .text("dtype", "f32 (default), f64, c32 or c64 (numpy's float32, float64, complex64, complex128 too); "
                       "file inputs: the files' dtype", "DTYPE")
        .integer_option("seed", "seed of the random inputs (default 42)")
        .text("layout", "row (default) or col: layout of the random inputs", "row|col")
        .text("a", "A from a .npy file (layout from its order; memory-mapped, may exceed memory)", "A.npy")
        .text("b", "B from a .npy file (goes with --a)", "B.npy")
        .text("c", "C's input from a .npy file (read when --beta is not 0)", "C.npy")
        .text("out", "write C (atomically; with file inputs C is written in place through a mapped temporary)",
              "C.npy")
        .scalar_option("alpha", "scalar alpha (default 1; complex types: e.g. 1.5-2j, 2j, (1+2j))")
        .scalar_option("beta", "scalar beta (default 0: C is not read)")
        .text("op-a", "op(A): n (default), t, or c (conjugate transpose; on real data the same as t)", "n|t|c")
        .text("op-b", "op(B): n (default), t or c", "n|t|c")
        .text("kernel", "auto (default: the fastest measured per device, precision and shape), reference, naive, "
                        "tiled or vendor", "KERNEL")
        .text("math", "strict (default) or tf32 (f32 on tensor cores, CUDA vendor kernel only)", "strict|tf32")
        .text("devices", "e.g. cpu, cpu:2, cuda:0, cpu@512MiB (default auto: every GPU present, else the CPU; or TILESTREAM_DEVICES)", "SPEC")
        .text("strategy",
              "auto (default), in-core, tiles-3d, a-panel, a-panel-c-panel, b-panel, c-block, row-panels, "
              "zero-copy (CPU devices without a budget: operands used in place; what auto and in-core run there)",
              "STRATEGY")
        .integer_option("tile", "tile size (m, n and k) instead of the planner's")
        .integer_option("tile-m", "tile rows instead of the planner's")
        .integer_option("tile-n", "tile columns instead of the planner's")
        .integer_option("tile-k", "tile depth instead of the planner's")
        .text("transfer", "2d: 2-D strided copies (default), pack: pack tiles on the host first", "2d|pack")
        .text("engine",
              "tasks (default: the tile-task engine, on one device or several, copying or in place), "
              "pipeline (GEMM's own pipeline of work units)",
              "tasks|pipeline")
        .text("rates", "declare rates instead of measuring them, e.g. h2d=12GB/s,d2h=12GB/s,gflops=150", "RATES")
        .flag_option("explain", "print the plan before the run and measured-vs-predicted after (stderr)")
        .text("trace", "write a Chrome trace (Perfetto, chrome://tracing)", "run.json")
        .text("timeline", "draw copies and kernels per device and stream (SVG)", "run.svg")
        .text("cache", "reuse A/B tiles in spare device memory: auto (where the cost model predicts a gain), on, off",
              "auto|on|off")
        .text("peer-tiles", "copy missing tiles from another device's cache: auto (GPUs with peer access), on, off",
              "auto|on|off")
        .text("reproducible",
              "on: add k in fixed k-blocks, so C is bitwise the same for any plan or device count with the same "
              "kernel (tile-k becomes a multiple); default off",
              "on|off")
        .flag_option("quiet", "no progress line")
        .flag_option("check", "verify C in float64, exit 1 on failure (see below)")
        .flag_option("anchor", "also time OpenBLAS (cblas_?gemm, all cores) on the host on the same operands and "
                               "print the ratio of this run's GFLOP/s to it")
        .integer_option("repeat", "run R times, report the median (default 1)")
        .flag_option("json", "print one JSON object (with peak_rss_bytes, the process's peak resident memory)")
        .footer("Inputs: random (--m --n --k) or files (--a --b [--c]).\n"
                "--check: NaN/Inf must sit where the reference has them; the other elements' relative Frobenius\n"
                "error must be within max(16, 8 sqrt(k)) u (u = 2^-24 f32, 2^-53 f64, 2^-11 tf32). Method by m*n*k:\n"
                "<= 2^22: sequential reference; <= 2^36 (4096^3): OpenBLAS dgemm on upcast blocks (a few MiB per\n"
                "thread; about twice an f32 run on the host's cores); larger: Freivalds, C x and y^T C for 4+4\n"
                "random +-1 vectors against the operands (tolerance + 8 (sqrt(n) + sqrt(k)) 2^-53 for its own\n"
                "rounding).");
}

int cmd_devices(int argc, char** argv) {
    ts::cli::args a("devices", "List the devices present.");
    a.flag_option("json", "print one JSON object");
    a.flag_option("kernels", "also measure each device's GEMM kernels (vendor, tiled) per precision and shape class "
                             "and show the default each gets (the fastest measured; a few seconds)");
    if (!a.parse(argc, argv, 2)) return 0;
    const auto& inv = ts::inventory();
    auto devs = ts::open_devices("all");
    // The automatic kernel choice (choose_kernel), as a context measures it on first need.
    const bool kernels = a.flag("kernels");
    const auto choices = [](ts::device& d) {
        std::vector<std::tuple<ts::dtype, ts::shape_class, ts::kernel_choice>> out;
        for (ts::dtype t : ts::all_dtypes)
            for (ts::shape_class c : ts::all_shape_classes) out.emplace_back(t, c, ts::choose_kernel(d, t, c));
        return out;
    };
    if (a.flag("json")) {
        using ts::detail::json;
        json items = json::array();
        for (const auto& d : devs) {
            const auto& i = d->info();
            json o = {{"id", i.id}, {"kind", std::string(ts::to_string(i.kind))}, {"name", i.name},
                      {"memory_bytes", i.memory_bytes}, {"memory_free_bytes", i.memory_free},
                      {"budget_bytes", i.budget_bytes}, {"threads", i.threads}};
            if (i.kind == ts::device_kind::cpu) o["isa"] = i.isa, o["blocking"] = i.blocking;
            if (kernels) {
                json measured = json::array();
                for (const auto& [t, c, k] : choices(*d)) {
                    json rates = json::object();
                    for (const auto& r : k.rates)
                        rates[std::string(ts::to_string(r.kernel))] = r.measured ? json(r.flops * 1e-9) : json(r.note);
                    measured.push_back({{"dtype", std::string(ts::to_string(t))},
                                        {"shape_class", std::string(ts::to_string(c))},
                                        {"probe", std::to_string(k.m) + "x" + std::to_string(k.n) + "x" + std::to_string(k.k)},
                                        {"gflops", rates}, {"default", std::string(ts::to_string(k.kernel))},
                                        {"measured", k.measured}});
                }
                o["kernel_choice"] = measured;
            }
            if (i.kind == ts::device_kind::cuda) {
                o["compute_capability"] = std::to_string(i.cc_major) + "." + std::to_string(i.cc_minor);
                o["sm_count"] = i.threads;
                json peers = json::array();
                for (int p : i.peer_access) peers.push_back(std::to_string(p));
                o["peer_access"] = peers;
            }
            items.push_back(std::move(o));
        }
        json opencl = json::array();  // every OpenCL device, emulated ones included
        for (const auto& i : inv.opencl_devices)
            opencl.push_back({{"id", i.id}, {"name", i.name}, {"platform", i.platform}, {"vendor", i.vendor},
                              {"type", i.device_type}, {"driver", i.driver}, {"compute_units", i.threads},
                              {"global_memory_bytes", i.memory_bytes}, {"local_memory_bytes", i.local_memory},
                              {"fp64", i.fp64}, {"emulated", i.emulated}});
        const json top = {{"devices", items}, {"cpu_cores", inv.cpu_cores}, {"cuda_status", inv.cuda_status},
                          {"opencl_devices", opencl}, {"opencl_status", inv.opencl_status},
                          {"opencl_under_all", inv.opencl_under_all},
                          {"opencl_under_all_decision", inv.opencl_under_all_decision}};
        std::cout << ts::detail::json_line(top) << "\n";
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
        const auto gflops = [](double flops) {
            char text[32];
            std::snprintf(text, sizeof text, "%.1f GFLOP/s", flops * 1e-9);
            return std::string(text);
        };
        if (kernels)
            for (const auto& [t, c, k] : choices(*d)) {
                std::string line;
                for (const auto& r : k.rates)
                    line += (line.empty() ? "" : ", ") + std::string(ts::to_string(r.kernel)) + " " +
                            (r.measured ? gflops(r.flops) : "(" + r.note + ")");
                std::printf("           %s %-7s (%lldx%lldx%lld): %s -> default %s\n", std::string(ts::to_string(t)).c_str(),
                            std::string(ts::to_string(c)).c_str(), (long long)k.m, (long long)k.n, (long long)k.k,
                            line.c_str(), std::string(ts::to_string(k.kernel)).c_str());
            }
        if (i.kind == ts::device_kind::cuda) {
            std::string peers;
            for (int p : i.peer_access) peers += (peers.empty() ? "" : ",") + std::to_string(p);
            std::printf("           compute capability %d.%d, %d SMs, peer access: %s\n", i.cc_major,
                        i.cc_minor, i.threads, peers.empty() ? "none" : peers.c_str());
        }
    }
    std::printf("CUDA: %s\n", inv.cuda_status.c_str());
    std::printf("OpenCL: %s\n", inv.opencl_status.c_str());
    if (!inv.opencl_under_all.empty()) std::printf("OpenCL: %s\n", inv.opencl_under_all.c_str());
    for (const auto& i : inv.opencl_devices) {
        std::printf("%-10s %s (%s, %s), %s%s\n", i.id.c_str(), i.name.c_str(), i.vendor.c_str(), i.platform.c_str(),
                    i.device_type.c_str(), i.emulated ? ", emulated: used only when named" : "");
        std::printf("           driver %s, %d compute units, global %s, local %s, fp64 %s\n", i.driver.c_str(),
                    i.threads, ts::format_bytes(i.memory_bytes).c_str(), ts::format_bytes(i.local_memory).c_str(),
                    i.fp64 ? "yes" : "no");
    }
    return 0;
}

/// Operands of one gemm run, owned here (random) or mapped from files. c_start is C's input
/// (read when beta != 0): random in c_init, or the --c file's mapping.
template <class T>
struct gemm_operands {
    ts::host_matrix<T> a_own, b_own, c_init;
    ts::npy_array a_file, b_file, c_file;
    ts::host_matrix_view<const T> a, b, c_start;
};

/// Keeps the resident memory of runs on mapped files near the device budgets: drops the pages of
/// the mappings from the process (the page cache keeps them) at most every 20 ms, from the
/// engine's unit-done callback, which several device threads call.
class resident_trimmer {
public:
    void add(std::function<void()> release) { releases_.push_back(std::move(release)); }
    bool empty() const { return releases_.empty(); }
    void maybe() {
        std::unique_lock lock(mutex_, std::try_to_lock);
        if (!lock) return;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_ < std::chrono::milliseconds(20)) return;
        for (const auto& r : releases_) r();
        last_ = now;
    }
    void now() {
        std::lock_guard lock(mutex_);
        for (const auto& r : releases_) r();
        last_ = std::chrono::steady_clock::now();
    }

private:
    std::vector<std::function<void()>> releases_;
    std::mutex mutex_;
    std::chrono::steady_clock::time_point last_{};
};

/// f(section) over blocks of whole rows (row-major) or columns (column-major) of about 32 MiB,
/// trimming resident memory after each: C's reset before a run touches all of C once.
template <class T, class F>
void by_blocks(ts::host_matrix_view<T> c, resident_trimmer& trim, F&& f) {
    const bool rows = c.layout() == ts::layout::row_major;
    const ts::index_t lines = rows ? c.rows() : c.cols(), line = rows ? c.cols() : c.rows();
    const ts::index_t per = std::max<ts::index_t>(1, (ts::index_t{32} << 20) / std::max<ts::index_t>(1, line * ts::index_t(sizeof(T))));
    for (ts::index_t l0 = 0; l0 < lines; l0 += per) {
        const ts::index_t nl = std::min(per, lines - l0);
        f(rows ? c.section(l0, 0, nl, c.cols()) : c.section(0, l0, c.rows(), nl), l0);
        if (!trim.empty()) trim.now();
    }
}

/// Peak resident memory of this process so far (VmHWM), in bytes.
std::size_t peak_rss_bytes() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return std::size_t(u.ru_maxrss) * 1024;  // kilobytes on Linux
}

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
            std::fprintf(stderr, "\r  %zu/%zu steps, %.1f GFLOP/s, ETA %.1f s   ", d, total_, rate * 1e-9, eta);
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

/// A 1-D .npy operand is refused: numpy's matmul would take it as a row or a column depending on
/// its side and drop that dimension from the result, which a 2-D C cannot show.
void refuse_vector(const ts::npy_array& f, const std::string& option) {
    if (f.ndim() != 1) return;
    throw ts::invalid_argument("gemm: " + option + " " + f.path() + " is a 1-D array (shape (" + std::to_string(f.rows()) +
                               ",)); gemm takes 2-D arrays: save it with the shape you mean, (1, " +
                               std::to_string(f.rows()) + ") for a row or (" + std::to_string(f.rows()) +
                               ", 1) for a column (numpy: a.reshape(1, -1) or a.reshape(-1, 1))");
}

/// --math tf32 runs f32 on tensor cores: only the vendor kernel of CUDA GPUs of compute capability
/// 8.0 or later has it. Anything else is refused, naming the devices that have it.
void check_math_mode(ts::math_mode math, ts::dtype type, ts::gemm_kernel kernel, const ts::context& ctx) {
    if (math != ts::math_mode::tf32) return;
    if (type != ts::dtype::f32)
        throw ts::invalid_argument("--math tf32 rounds f32 operands to TF32; this run is " +
                                   std::string(ts::to_string(type)));
    std::string with;
    for (const auto& g : ts::inventory().gpus)
        if (g.cc_major >= 8) with += (with.empty() ? "" : ", ") + g.id;
    const std::string have = "; devices here with TF32: " + (with.empty() ? std::string("none") : with);
    if (kernel != ts::gemm_kernel::vendor)
        throw ts::invalid_argument("--math tf32 needs the vendor kernel (cuBLAS on tensor cores), not --kernel " +
                                   std::string(ts::to_string(kernel)) + have);
    std::string without;
    for (const ts::device* d : ctx.devices())
        if (d->info().kind != ts::device_kind::cuda || d->info().cc_major < 8)
            without += (without.empty() ? "" : ", ") + d->id();
    if (!without.empty())
        throw ts::invalid_argument("--math tf32 runs on tensor cores with TF32 (CUDA GPUs of compute capability 8.0 or "
                                   "later); " + without + " ha" + (without.find(',') == std::string::npos ? "s" : "ve") +
                                   " none" + have);
}

/// The tile options given, as the user wrote them ("--tile 64", "--tile-m 32 --tile-k 16").
std::string tile_options(const ts::cli::args& a) {
    std::string t;
    for (const char* o : {"tile", "tile-m", "tile-n", "tile-k"})
        if (a.has(o)) t += std::string(t.empty() ? "" : " ") + "--" + o + " " + *a.get(o);
    return t;
}

template <class T>
int run_gemm(const ts::cli::args& a, ts::dtype type, ts::cli::run_files& files) {
    const ts::op op_a = ts::parse_op(a.get_or("op-a", "n"));
    const ts::op op_b = ts::parse_op(a.get_or("op-b", "n"));
    const T alpha = a.scalar<T>("alpha", 1.0);
    const T beta = a.scalar<T>("beta", 0.0);
    const auto seed = static_cast<std::uint64_t>(a.integer("seed", 42, 0, std::numeric_limits<ts::index_t>::max()));
    const int repeat = static_cast<int>(a.integer("repeat", 1, 1, 100000));
    ts::gemm_options opt;
    const std::optional<ts::gemm_kernel> kernel = ts::parse_kernel_setting(a.get_or("kernel", "auto"));
    opt.kernel = kernel.value_or(ts::gemm_kernel::vendor);
    opt.math = ts::parse_math_mode(a.get_or("math", "strict"));
    if (a.has("c") && beta == T(0))
        throw ts::invalid_argument("gemm: --c " + *a.get("c") + " is given but --beta is 0 (the default), so C's input "
                                   "would not be read: give --beta (--beta 1 adds it), or leave out --c");

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
        refuse_vector(ops.a_file, "--a");
        refuse_vector(ops.b_file, "--b");
        ops.a = ops.a_file.template view<T>();
        ops.b = ops.b_file.template view<T>();
        m = op_a == ts::op::n ? ops.a.rows() : ops.a.cols();
        k = op_a == ts::op::n ? ops.a.cols() : ops.a.rows();
        n = op_b == ts::op::n ? ops.b.cols() : ops.b.rows();
        ts::validate_gemm(op_a, op_b, ops.a.rows(), ops.a.cols(), ops.b.rows(), ops.b.cols(), m, n);
        if (a.has("c")) {
            // C's input stays in its mapping: it is copied into C (in blocks) before each run.
            ops.c_file = ts::read_npy(*a.get("c"));
            refuse_vector(ops.c_file, "--c");
            ops.c_start = ops.c_file.template view<T>();
            ts::validate_gemm(op_a, op_b, ops.a.rows(), ops.a.cols(), ops.b.rows(), ops.b.cols(), ops.c_start.rows(),
                              ops.c_start.cols());
            c_layout = ops.c_start.layout();
        } else if (beta != T(0)) {
            throw ts::invalid_argument("gemm: --beta is not 0 but no --c file was given (with --a and --b, C's input "
                                       "comes from --c)");
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
        ops.a = ops.a_own.view();
        ops.b = ops.b_own.view();
        if (beta != T(0)) {
            ops.c_init = ts::host_matrix<T>(m, n, c_layout);
            ops.c_start = ops.c_init.view();
        }
    }
    // Random inputs are filled once the devices and options below are known to be good: an
    // unknown device must not wait for gigabytes of random numbers (21 s at 16384^2 f64 here).
    const auto fill_random_inputs = [&] {
        if (ops.a_own.size() == 0 && ops.b_own.size() == 0) return;
        ts::fill_random(ops.a_own.view(), seed);
        ts::fill_random(ops.b_own.view(), seed + 1);
        if (ops.c_init.size() != 0) ts::fill_random(ops.c_init.view(), seed + 2);
    };

    const bool to_out = files.has("--out");
    // The devices, their rates and the planner come from a context, as for every caller of the library.
    ts::context_options co;
    const ts::open_options oo = ts::cli::device_options(a);
    co.memory_budget = oo.memory_budget;
    co.cpu_threads = oo.cpu_threads;
    co.kernel = kernel;
    co.math = opt.math;
    co.cache = ts::parse_cache_mode(a.get_or("cache", "auto"));
    const std::string reproducible = a.get_or("reproducible", "off");
    if (reproducible != "on" && reproducible != "off")
        throw ts::invalid_argument("--reproducible expects on or off, got '" + reproducible + "'");
    co.reproducible = reproducible == "on";
    if (a.has("rates")) co.rates = ts::parse_rates(*a.get("rates"));
    ts::context ctx(ts::cli::devices_of(a), co);
    ts::cli::check_budgets(ctx.devices());
    check_math_mode(opt.math, type, opt.kernel, ctx);
    const std::size_t budget = ctx.budget();
    const std::string& dev_names = ctx.device_names();

    ts::gemm_call_options call;
    call.strategy = ts::parse_gemm_strategy(a.get_or("strategy", "auto"));
    const ts::index_t big = std::numeric_limits<ts::index_t>::max();
    const ts::index_t tile = a.integer("tile", 0, 1, big);
    call.tile_m = a.integer("tile-m", tile, 1, big);
    call.tile_n = a.integer("tile-n", tile, 1, big);
    call.tile_k = a.integer("tile-k", call.strategy == ts::gemm_strategy::a_panel ||
                                              call.strategy == ts::gemm_strategy::a_panel_c_panel ||
                                              call.strategy == ts::gemm_strategy::b_panel
                                          ? 0
                                          : tile,
                            1, big);
    const std::string transfer = a.get_or("transfer", "2d");
    if (transfer != "2d" && transfer != "pack") throw ts::invalid_argument("--transfer expects 2d or pack, got '" + transfer + "'");
    call.transfer = transfer == "2d" ? ts::transfer_mode::copy_2d : ts::transfer_mode::pack;
    if (a.has("engine")) call.engine = ts::parse_gemm_engine(a.get_or("engine", "tasks"));
    const ts::peer_tile_mode peers = ts::parse_peer_tile_mode(a.get_or("peer-tiles", "auto"));

    // C: in memory, or, for file inputs written to a file --out, the output file itself (mapped),
    // so that operands larger than memory pass through the devices' budgets without a copy in RAM.
    // A device or FIFO cannot be mapped: C is then computed in memory and written at the end.
    std::optional<ts::npy_output> c_file_out;
    ts::host_matrix<T> c_mem;
    ts::host_matrix_view<T> c;
    resident_trimmer trim;
    if (from_files) {
        for (const ts::npy_array* f : {&ops.a_file, &ops.b_file, &ops.c_file})
            trim.add([f] { f->release_resident(); });
    }
    if (from_files && to_out && !files.in_place("--out")) {
        ts::cli::as_runtime_failure([&] { c_file_out.emplace(*a.get("out"), type, m, n, c_layout); });
        c = c_file_out->template view<T>();
        trim.add([&c_file_out] { c_file_out->release_resident(); });
    } else {
        if (from_files)
            ts::check_host_memory(ts::checked_bytes(m, n, type, "gemm: C"),
                                  "gemm: C (" + std::to_string(m) + "x" + std::to_string(n) + ", in memory: " +
                                      (to_out ? "--out " + *a.get("out") + " is a device or FIFO, which cannot be mapped"
                                              : std::string("give --out to write it through a mapped file")) +
                                      ")");
        c_mem = ts::host_matrix<T>(m, n, c_layout);
        c = c_mem.view();
        // The whole file is reserved on disk now: a full disk is an error before the work.
        if (to_out && !files.in_place("--out"))
            ts::cli::as_runtime_failure([&] { files.open("--out").reserve(ts::detail::npy_file_bytes(type, m, n, c_layout)); });
    }
    const ts::gemm_problem problem = ts::describe_gemm<T>(op_a, op_b, alpha, ops.a, ops.b, beta, c);
    // The progress line (stderr a terminal, no --quiet) counts kernel steps: only a run that shows
    // it is planned in steps of ~0.2 s, which cost speed (SIGINT ends the process either way).
    const bool shows_progress = !a.flag("quiet") && isatty(2);
    std::function<void(std::size_t)> on_step;
    if (shows_progress)
        call.run.on_step_done = [&on_step](std::size_t s) {
            if (on_step) on_step(s);
        };
    const bool explain = a.flag("explain");
    // --explain predicts with measured rates whatever the strategy (the automatic choice measures
    // them anyway; in place nothing is copied, so it needs none).
    if (explain && !co.rates && call.strategy != ts::gemm_strategy::automatic) call.rates = ctx.rates(type, opt.kernel);
    const std::string tiles_given = tile_options(a);
    const ts::gemm_plan plan = [&] {
        try {
            return ctx.plan(problem, call);
        } catch (const ts::out_of_budget& e) {
            if (tiles_given.empty()) throw;
            // Say that the tiles given are the reason, and whether the planner's own choice fits.
            ts::gemm_call_options free = call;
            free.tile_m = free.tile_n = free.tile_k = 0;
            std::string advice = "; the tiles given (" + tiles_given + ", cut to the matrices where larger) decide "
                                 "that: give smaller tiles";
            try {
                const ts::gemm_plan p = ctx.plan(problem, free);
                advice += " or leave them to the planner, whose choice fits (" + std::string(ts::to_string(p.strategy)) +
                          " with tiles " + std::to_string(p.tile_m) + "x" + std::to_string(p.tile_n) + "x" +
                          std::to_string(p.tile_k) + ")";
            } catch (const ts::out_of_budget&) {
                advice += " (without them no plan fits either)";
            }
            throw ts::out_of_budget(e.what() + advice);
        }
    }();
    const ts::device_rates& rates = plan.rates;
    if (explain) {
        std::fprintf(stderr, "%s", ctx.explain(plan).c_str());
        if (!a.has("rates") && !rates.measured)
            std::fprintf(stderr, "rates: not measured (the probe does not fit the budget of %s); the plan used "
                                 "default rates (give --rates to declare them)\n",
                         ts::format_bytes(budget).c_str());
    }
    if (!tiles_given.empty() && call.strategy == ts::gemm_strategy::automatic &&
        plan.strategy == ts::gemm_strategy::in_core)
        std::fprintf(stderr, "tilestream gemm: warning: the tile sizes given are not used: the planner chose "
                             "in-core (the whole problem fits the budget); add --strategy tiles-3d to tile it\n");
    fill_random_inputs();

    ts::trace_recorder recorder;
    ts::gemm_run_options& run = call.run;
    if (files.has("--trace") || files.has("--timeline")) run.trace = &recorder;
    run.peer_tiles = peers;
    // Progress by kernel steps: in place a run is one unit of steps bounded in time.
    progress_line progress(plan.steps * std::size_t(repeat), plan.problem.flops() / double(plan.steps ? plan.steps : 1),
                           shows_progress);
    if (shows_progress) on_step = [&progress](std::size_t) { progress.tick(); };
    run.on_unit_done = [&trim](std::size_t) {
        if (!trim.empty()) trim.maybe();
    };

    std::vector<double> seconds;
    ts::gemm_report last;
    std::vector<ts::device_fault> faults;  // devices lost in any repeat (the others redid their units)
    for (int r = 0; r < repeat; ++r) {
        by_blocks(c, trim, [&](ts::host_matrix_view<T> part, ts::index_t first) {
            if (beta == T(0)) return ts::fill_nan(part);  // beta = 0 must overwrite whatever C holds
            const bool rows = c_layout == ts::layout::row_major;
            const auto from = rows ? ops.c_start.section(first, 0, part.rows(), n) : ops.c_start.section(0, first, m, part.cols());
            for (ts::index_t i = 0; i < part.rows(); ++i)
                for (ts::index_t j = 0; j < part.cols(); ++j) part(i, j) = from(i, j);
        });
        // The context pins the operands before each run's clock (large mapped files stay
        // pageable: pinning would lock them in memory; their tiles go through the staging).
        last = ctx.execute<T>(plan, alpha, ops.a, ops.b, beta, c, call);
        if (r == 0)
            for (const auto& w : last.warnings)
                if (w.rfind("host memory not pinned", 0) == 0) std::fprintf(stderr, "warning: %s\n", w.c_str());
        seconds.push_back(last.seconds);
        for (const auto& f : last.faults) {
            std::fprintf(stderr, "warning: device %s failed and was dropped (%zu of its units redone by the others): %s\n",
                         f.id.c_str(), f.units_redone, f.message.c_str());
            faults.push_back(f);
        }
        for (const auto& w : last.warnings)
            if (w.rfind("host memory not pinned", 0) != 0) std::fprintf(stderr, "warning: %s\n", w.c_str());
        if (!trim.empty()) trim.now();
        ts::cli::as_runtime_failure([&] {
            ops.a_file.check_unchanged();
            ops.b_file.check_unchanged();
            ops.c_file.check_unchanged();
            if (c_file_out) c_file_out->check_intact();
        });
    }
    progress.finish();
    const double secs = median(seconds);
    const double flops = double(ts::dtype_traits(type).flops_per_multiply_add) * double(m) * double(n) * double(k);
    // An empty problem (m, n or k = 0 from files) does no arithmetic: report 0, not 0/0.
    const double gflops = flops > 0 && secs > 0 ? flops / secs * 1e-9 : 0.0;
    if (explain)
        std::fprintf(stderr,
                     "measured: %.4f s (predicted %.4f s), bytes h2d %zu (predicted %zu), d2h %zu (predicted %zu), "
                     "packed %zu (predicted %zu), peak device memory %zu (predicted %zu)\n",
                     secs, plan.predicted_seconds, last.bytes_h2d, plan.bytes_h2d, last.bytes_d2h, plan.bytes_d2h,
                     last.bytes_packed, plan.bytes_packed, last.peak_device_bytes, plan.peak_device_bytes);
    if (explain) {
        if (last.peer_hits > 0)
            std::fprintf(stderr, "peer tiles: %zu (%zu bytes copied from other devices instead of the host)\n",
                         last.peer_hits, last.bytes_from_peers);
        if (faults.empty()) std::fprintf(stderr, "faults: none (no device lost)\n");
        for (const auto& f : faults)
            std::fprintf(stderr, "fault: device %s lost, %zu units redone by the other devices: %s\n", f.id.c_str(),
                         f.units_redone, f.message.c_str());
    }

    // C0 (the input C) is c_start when beta != 0; with beta == 0 it is not read.
    const ts::host_matrix_view<const T> c0 = beta != T(0) ? ops.c_start : ts::host_matrix_view<const T>(c);
    std::optional<ts::gemm_check_result> check;
    if (a.flag("check")) check = ts::check_gemm<T>(op_a, op_b, alpha, ops.a, ops.b, beta, c0, c, opt.math);
    std::optional<ts::blas_anchor> anchor;
    if (a.flag("anchor")) anchor = ts::time_host_blas_gemm<T>(op_a, op_b, alpha, ops.a, ops.b, beta, c0, repeat);
    const bool ok = !check || check->passed();

    // The outputs: written to their temporaries now (devices and FIFOs at the commit), renamed into
    // place together after the report. A failed check writes none of them.
    if (ok) {
        if (to_out) {
            if (c_file_out) {
                ts::cli::as_runtime_failure([&] {
                    ops.c_file.check_unchanged();
                    files.adopt(c_file_out->finish());
                });
            } else {
                files.write("--out", [c](ts::detail::output_file& f) { ts::detail::write_npy_to<T>(f, c); });
            }
        }
        if (files.has("--trace")) files.write("--trace", recorder.chrome_json());
        if (files.has("--timeline"))
            files.write("--timeline", ts::timeline_svg(recorder.spans(), "gemm " + std::to_string(m) + "x" + std::to_string(n) +
                                                                             "x" + std::to_string(k) + " " +
                                                                             std::string(ts::to_string(plan.strategy)) +
                                                                             " on " + dev_names));
    }

    std::FILE* out = files.report();
    if (a.flag("json")) {
        using ts::detail::json;
        json o = {{"m", m}, {"n", n}, {"k", k}, {"dtype", std::string(ts::to_string(type))},
                  {"kernel", std::string(ts::to_string(plan.kernel))}, {"math", std::string(ts::to_string(opt.math))},
                  {"devices", dev_names}, {"op_a", std::string(ts::to_string(op_a))},
                  {"op_b", std::string(ts::to_string(op_b))}, {"alpha", ts::as_scalar(alpha).real()},
                  {"beta", ts::as_scalar(beta).real()},
                  {"repeat", repeat}, {"seconds", secs}, {"gflops", gflops},
                  {"strategy", std::string(ts::to_string(plan.strategy))},
                  {"transfer", std::string(ts::to_string(plan.transfer))},
                  {"engine", std::string(ts::to_string(plan.engine))}, {"tile_m", plan.tile_m},
                  {"tile_n", plan.tile_n}, {"tile_k", plan.tile_k}, {"k_block", plan.k_block},
                  {"bytes_h2d", last.bytes_h2d}, {"bytes_d2h", last.bytes_d2h}, {"bytes_packed", last.bytes_packed},
                  {"peak_device_bytes", last.peak_device_bytes}, {"budget_bytes", budget},
                  {"peak_rss_bytes", peak_rss_bytes()}, {"predicted_seconds", plan.predicted_seconds},
                  {"predicted_bound", plan.bound}, {"predicted_bytes_h2d", plan.bytes_h2d},
                  {"predicted_bytes_d2h", plan.bytes_d2h}, {"predicted_bytes_packed", plan.bytes_packed},
                  {"predicted_peak_device_bytes", plan.peak_device_bytes}};
        if constexpr (ts::is_complex_v<T>)
            o["alpha_imag"] = alpha.imag(), o["beta_imag"] = beta.imag();
        json shares = json::array();
        for (const auto& d : last.devices)
            shares.push_back({{"id", d.id}, {"units", d.units}, {"flops", d.flops}, {"bytes_h2d", d.bytes_h2d},
                              {"cache_hits", d.cache_hits}});
        o["device_shares"] = shares;
        json lost = json::array();
        for (const auto& f : faults)
            lost.push_back({{"device", f.id}, {"message", f.message}, {"units_redone", f.units_redone}});
        o["faults"] = lost;
        if (plan.cache) {
            o["cache_hits"] = last.cache_hits, o["cache_misses"] = last.cache_misses;
            o["bytes_saved"] = last.bytes_saved;
        }
        // Tiles copied from another device instead of the host (several devices; --peer-tiles).
        o["peer_hits"] = last.peer_hits, o["bytes_from_peers"] = last.bytes_from_peers;
        if (check) {
            o["rel_error"] = check->error, o["tolerance"] = check->tolerance, o["check_passed"] = ok;
            o["check_method"] = std::string(ts::to_string(check->method)), o["check_tolerance"] = check->tolerance;
            o["check_seconds"] = check->seconds, o["check_nonfinite_matched"] = check->nonfinite_matched;
            o["check_nonfinite_mismatched"] = check->nonfinite_mismatched;
        }
        if (anchor) {
            o["anchor"] = anchor->name, o["anchor_seconds"] = anchor->seconds, o["anchor_gflops"] = anchor->gflops;
            o["ratio_to_anchor"] = anchor->gflops > 0 ? gflops / anchor->gflops : 0.0;
        }
        json written = json::array();
        if (ok)
            for (const char* o2 : {"out", "trace", "timeline"})
                if (a.has(o2)) written.push_back(*a.get(o2));
        o["files_written"] = written;
        std::fprintf(out, "%s\n", ts::detail::json_line(o).c_str());
    } else {
        std::fprintf(out, "gemm %lldx%lldx%lld %s op(A)=%s op(B)=%s kernel=%s strategy=%s on %s: %.4f s (median of %d), "
                          "%.1f GFLOP/s\n",
                     (long long)m, (long long)n, (long long)k, std::string(ts::to_string(type)).c_str(),
                     std::string(ts::to_string(op_a)).c_str(), std::string(ts::to_string(op_b)).c_str(),
                     std::string(ts::to_string(plan.kernel)).c_str(), std::string(ts::to_string(plan.strategy)).c_str(),
                     dev_names.c_str(), secs, repeat, gflops);
        if (anchor)
            std::fprintf(out, "anchor: %s: %.4f s (median of %d), %.1f GFLOP/s; this run / anchor = %.2f\n",
                         anchor->name.c_str(), anchor->seconds, anchor->repeat, anchor->gflops,
                         (anchor->gflops > 0 ? gflops / anchor->gflops : 0.0));
        if (check) std::fprintf(out, "check: %s\n", check->summary().c_str());
        for (const char* o2 : {"out", "trace", "timeline"})
            if (a.has(o2)) std::fprintf(out, ok ? "wrote %s\n" : "not written (the check failed): %s\n", a.get(o2)->c_str());
    }
    files.commit();
    return ok ? 0 : exit_check_failed;
}

// ---- stacks of matrices: .npy inputs of 3 or more dimensions ----

/// "(2, 3)", as numpy prints a shape ("()" for none).
std::string shape_text(const std::vector<ts::index_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

/// The leading shape of the result from A's and B's, by numpy's matmul broadcasting (aligned to the
/// right; each dimension equal, or 1 on one side); an error naming both files otherwise.
std::vector<ts::index_t> broadcast_leading(const ts::npy_array& x, const ts::npy_array& y) {
    const auto& lx = x.leading_shape();
    const auto& ly = y.leading_shape();
    const std::size_t n = std::max(lx.size(), ly.size());
    std::vector<ts::index_t> out(n);
    for (std::size_t d = 0; d < n; ++d) {
        const std::size_t dx = d + lx.size(), dy = d + ly.size();  // d - (n - size), kept unsigned
        const ts::index_t vx = dx >= n ? lx[dx - n] : 1, vy = dy >= n ? ly[dy - n] : 1;
        if (vx != vy && vx != 1 && vy != 1)
            throw ts::invalid_argument("gemm: the stacks do not broadcast: --a " + x.path() + " has leading shape " +
                                       shape_text(lx) + " and --b " + y.path() + " " + shape_text(ly) +
                                       " (numpy's matmul rules: aligned to the right, each leading dimension equal "
                                       "or 1 on one side)");
        out[d] = vx == 1 ? vy : vx;
    }
    return out;
}

/// The matrices of file f for each matrix of a result of leading shape `lead` (C order): f's
/// leading dimensions aligned to the right, a dimension of 1 repeated.
template <class T>
std::vector<const T*> stack_pointers(const ts::npy_array& f, const std::vector<ts::index_t>& lead) {
    const auto& lf = f.leading_shape();
    const std::size_t n = lead.size(), off = n - lf.size();
    const ts::host_batch_view<const T> s = f.template stack_view<T>();
    // Matrices between consecutive entries of each of f's leading dimensions.
    std::vector<ts::index_t> step(lf.size(), 1);
    for (std::size_t d = lf.size(); d-- > 1;) step[d - 1] = step[d] * lf[d];
    ts::index_t count = 1;
    for (ts::index_t v : lead) count *= v;
    std::vector<const T*> out;
    out.reserve(std::size_t(count));
    std::vector<ts::index_t> idx(n, 0);
    for (ts::index_t i = 0; i < count; ++i) {
        ts::index_t which = 0;
        for (std::size_t d = off; d < n; ++d)
            if (lf[d - off] != 1) which += idx[d] * step[d - off];
        out.push_back(s.data(which));
        for (std::size_t d = n; d-- > 0;) {
            if (++idx[d] < lead[d]) break;
            idx[d] = 0;
        }
    }
    return out;
}

/// gemm on stacks of matrices (--a/--b/--c files of 3 or more dimensions): numpy's matmul
/// broadcasting of the leading dimensions, op(A) and op(B) on each matrix, one batched call
/// (context::gemm_batched), the result a C-ordered .npy of the leading shape + (m, n).
template <class T>
int run_gemm_stack(const ts::cli::args& a, ts::dtype type, ts::cli::run_files& files) {
    for (const char* o : {"m", "n", "k", "layout", "seed"})
        if (a.has(o)) throw ts::invalid_argument(std::string("gemm: --") + o + " is for random inputs, not with --a/--b");
    for (const char* o : {"strategy", "tile", "tile-m", "tile-n", "tile-k", "transfer", "engine", "peer-tiles", "trace",
                          "timeline"})
        if (a.has(o))
            throw ts::invalid_argument(std::string("gemm: --") + o + " does not apply to stacks of matrices (inputs of 3 "
                                       "or more dimensions run as one batch, planned per group of matrices)");
    if (a.flag("anchor"))
        throw ts::invalid_argument("gemm: --anchor times one product; stacks of matrices (inputs of 3 or more "
                                   "dimensions) have no anchor");
    const ts::op op_a = ts::parse_op(a.get_or("op-a", "n"));
    const ts::op op_b = ts::parse_op(a.get_or("op-b", "n"));
    const T alpha = a.scalar<T>("alpha", 1.0);
    const T beta = a.scalar<T>("beta", 0.0);
    const int repeat = static_cast<int>(a.integer("repeat", 1, 1, 100000));
    const std::optional<ts::gemm_kernel> kernel = ts::parse_kernel_setting(a.get_or("kernel", "auto"));
    const ts::math_mode math = ts::parse_math_mode(a.get_or("math", "strict"));
    if (!a.has("a") || !a.has("b")) throw ts::invalid_argument("gemm: --a and --b go together");
    if (a.has("c") && beta == T(0))
        throw ts::invalid_argument("gemm: --c " + *a.get("c") + " is given but --beta is 0 (the default), so C's input "
                                   "would not be read: give --beta (--beta 1 adds it), or leave out --c");
    if (!a.has("c") && beta != T(0))
        throw ts::invalid_argument("gemm: --beta is not 0 but no --c file was given (with --a and --b, C's input "
                                   "comes from --c)");
    const ts::npy_array fa = ts::read_npy_stack(*a.get("a")), fb = ts::read_npy_stack(*a.get("b"));
    refuse_vector(fa, "--a");
    refuse_vector(fb, "--b");
    const ts::host_matrix_view<const T> a0 = fa.template view<T>(), b0 = fb.template view<T>();
    const ts::index_t m = op_a == ts::op::n ? a0.rows() : a0.cols();
    const ts::index_t k = op_a == ts::op::n ? a0.cols() : a0.rows();
    const ts::index_t n = op_b == ts::op::n ? b0.cols() : b0.rows();
    ts::validate_gemm(op_a, op_b, a0.rows(), a0.cols(), b0.rows(), b0.cols(), m, n);
    const std::vector<ts::index_t> lead = broadcast_leading(fa, fb);
    ts::index_t count = 1;
    for (ts::index_t v : lead) count = ts::checked_mul(count, v, "gemm: the stack");
    std::vector<ts::index_t> out_shape = lead;
    out_shape.push_back(m);
    out_shape.push_back(n);

    ts::npy_array fc;
    std::vector<const T*> c_in;
    if (a.has("c")) {
        fc = ts::read_npy_stack(*a.get("c"));
        refuse_vector(fc, "--c");
        const auto& lc = fc.leading_shape();
        bool fits = fc.rows() == m && fc.cols() == n && lc.size() <= lead.size();
        for (std::size_t d = 0; fits && d < lc.size(); ++d) {
            const ts::index_t want = lead[d + lead.size() - lc.size()];
            fits = lc[d] == want || lc[d] == 1;
        }
        if (!fits) {
            std::vector<ts::index_t> c_shape = lc;
            c_shape.push_back(fc.rows());
            c_shape.push_back(fc.cols());
            throw ts::invalid_argument("gemm: --c " + fc.path() + " has shape " + shape_text(c_shape) +
                                       ", which does not broadcast to the result's " + shape_text(out_shape) +
                                       " (its matrices must be " + std::to_string(m) + "x" + std::to_string(n) +
                                       ", its leading dimensions those of the result or 1)");
        }
    }

    const std::size_t c_bytes = ts::checked_bytes(ts::checked_mul(count, m, "gemm: C"), n, type, "gemm: C");
    ts::check_host_memory(c_bytes, "gemm: the result stack " + shape_text(out_shape) + " (in memory)");
    std::vector<T> c_store(std::size_t(std::max<ts::index_t>(1, count * m * n)));  // never null
    const auto c_view = ts::host_batch_view<T>::strided(
        ts::host_matrix_view<T>(c_store.data(), m, n, ts::layout::row_major, std::max<ts::index_t>(1, n)), m * n, count);
    const std::vector<const T*> a_list = stack_pointers<T>(fa, lead), b_list = stack_pointers<T>(fb, lead);
    if (a.has("c")) c_in = stack_pointers<T>(fc, lead);
    const auto av = ts::host_batch_view<const T>::pointers(a0, std::span<const T* const>(a_list));
    const auto bv = ts::host_batch_view<const T>::pointers(b0, std::span<const T* const>(b_list));
    const ts::host_matrix_view<const T> c_shape = a.has("c") ? fc.template view<T>() : ts::host_matrix_view<const T>();
    const auto c0_of = [&](ts::index_t i) {
        return ts::host_matrix_view<const T>(c_in[std::size_t(i)], m, n, c_shape.layout(), c_shape.ld());
    };

    ts::context_options co;
    const ts::open_options oo = ts::cli::device_options(a);
    co.memory_budget = oo.memory_budget;
    co.cpu_threads = oo.cpu_threads;
    co.kernel = kernel;
    co.math = math;
    co.cache = ts::parse_cache_mode(a.get_or("cache", "auto"));
    co.reproducible = ts::cli::parse_on_off("reproducible", a.get_or("reproducible", "off"));
    if (a.has("rates")) co.rates = ts::parse_rates(*a.get("rates"));
    ts::context ctx(ts::cli::devices_of(a), co);
    ts::cli::check_budgets(ctx.devices());
    check_math_mode(math, type, kernel.value_or(ts::gemm_kernel::vendor), ctx);

    std::vector<double> seconds;
    ts::gemm_report last;
    for (int r = 0; r < repeat; ++r) {
        for (ts::index_t i = 0; i < count; ++i) {
            if (beta == T(0)) {
                ts::fill_nan(c_view[i]);  // beta = 0 must overwrite whatever C holds
            } else {
                const auto from = c0_of(i);
                const auto to = c_view[i];
                for (ts::index_t x = 0; x < m; ++x)
                    for (ts::index_t y = 0; y < n; ++y) to(x, y) = from(x, y);
            }
        }
        last = ctx.gemm_batched<T>(op_a, op_b, alpha, av, bv, beta, c_view);
        seconds.push_back(last.seconds);
        ts::cli::as_runtime_failure([&] {
            fa.check_unchanged();
            fb.check_unchanged();
            fc.check_unchanged();
        });
    }
    const double secs = median(seconds);
    const double flops = double(ts::dtype_traits(type).flops_per_multiply_add) * double(count) * double(m) *
                         double(n) * double(k);
    const double gflops = flops > 0 && secs > 0 ? flops / secs * 1e-9 : 0.0;
    if (a.flag("explain")) std::fprintf(stderr, "%s", ctx.explain(last.plan).c_str());

    // --check: every product against the reference; the worst one is reported.
    std::optional<ts::gemm_check_result> check;
    bool ok = true;
    if (a.flag("check"))
        for (ts::index_t i = 0; i < count; ++i) {
            const ts::host_matrix_view<const T> ci = c_view[i];
            const auto r = ts::check_gemm<T>(op_a, op_b, alpha, av[i], bv[i], beta, beta != T(0) ? c0_of(i) : ci, ci,
                                             math);
            if (!check || (ok && (!r.passed() || r.error > check->error))) check = r;
            ok = ok && r.passed();
        }
    if (ok && files.has("--out")) {
        const ts::host_batch_view<const T> result = c_view;
        files.write("--out", [&lead, result](ts::detail::output_file& f) { ts::detail::write_npy_stack_to<T>(f, lead, result); });
    }

    std::FILE* out = files.report();
    const std::string devs = ctx.device_names();
    if (a.flag("json")) {
        using ts::detail::json;
        json o = {{"batch", count}, {"leading_shape", lead}, {"m", m}, {"n", n}, {"k", k},
                  {"dtype", std::string(ts::to_string(type))}, {"kernel", std::string(ts::to_string(last.plan.kernel))},
                  {"math", std::string(ts::to_string(math))}, {"devices", devs},
                  {"op_a", std::string(ts::to_string(op_a))}, {"op_b", std::string(ts::to_string(op_b))},
                  {"alpha", ts::as_scalar(alpha).real()}, {"beta", ts::as_scalar(beta).real()}, {"repeat", repeat},
                  {"seconds", secs}, {"gflops", gflops}, {"strategy", std::string(ts::to_string(last.plan.strategy))},
                  {"batch_group", last.plan.batch_group}, {"bytes_h2d", last.bytes_h2d}, {"bytes_d2h", last.bytes_d2h},
                  {"peak_device_bytes", last.peak_device_bytes}, {"peak_rss_bytes", peak_rss_bytes()}};
        if constexpr (ts::is_complex_v<T>)
            o["alpha_imag"] = alpha.imag(), o["beta_imag"] = beta.imag();
        if (check) {
            o["rel_error"] = check->error, o["tolerance"] = check->tolerance, o["check_passed"] = ok;
            o["check_method"] = std::string(ts::to_string(check->method));
        }
        json written = json::array();
        if (ok && a.has("out")) written.push_back(*a.get("out"));
        o["files_written"] = written;
        std::fprintf(out, "%s\n", ts::detail::json_line(o).c_str());
    } else {
        std::fprintf(out, "gemm batch %s of %lldx%lldx%lld %s op(A)=%s op(B)=%s kernel=%s strategy=%s on %s: %.4f s "
                          "(median of %d), %.1f GFLOP/s\n",
                     shape_text(lead).c_str(), (long long)m, (long long)n, (long long)k,
                     std::string(ts::to_string(type)).c_str(), std::string(ts::to_string(op_a)).c_str(),
                     std::string(ts::to_string(op_b)).c_str(), std::string(ts::to_string(last.plan.kernel)).c_str(),
                     std::string(ts::to_string(last.plan.strategy)).c_str(), devs.c_str(), secs, repeat, gflops);
        if (check) std::fprintf(out, "check: %s (the %s product of %lld)\n", check->summary().c_str(),
                                ok ? "worst" : "first failing", (long long)count);
        if (a.has("out")) std::fprintf(out, ok ? "wrote %s\n" : "not written (the check failed): %s\n", a.get("out")->c_str());
    }
    files.commit();
    return ok ? 0 : exit_check_failed;
}

int cmd_gemm(int argc, char** argv) {
    ts::cli::args a("gemm", "C <- alpha op(A) op(B) + beta C on one or more devices.");
    declare_gemm_options(a);
    if (!a.parse(argc, argv, 2)) return 0;
    // Every file named, before any work: inputs, then outputs (resolved, and none naming an input
    // or another output; --out may update --c in place).
    ts::cli::run_files files;
    for (const char* in : {"a", "b", "c"})
        if (auto p = a.get(in)) files.input(std::string("--") + in, *p);
    if (auto p = a.get("out")) files.output("--out", *p, ts::cli::file_format::npy, "--c");
    if (auto p = a.get("trace")) files.output("--trace", *p, ts::cli::file_format::json);
    if (auto p = a.get("timeline")) files.output("--timeline", *p, ts::cli::file_format::svg);
    ts::dtype type = ts::parse_dtype(a.get_or("dtype", "f32"));
    bool stacked = false;  // an input of 3 or more dimensions: a stack of matrices
    if (a.has("a")) {
        // The dtype comes from the files and must match across them.
        if (!a.has("b")) throw ts::invalid_argument("gemm: --a and --b go together");
        const auto fa = ts::read_npy_stack(*a.get("a"));
        const auto fb = ts::read_npy_stack(*a.get("b"));
        stacked = fa.ndim() > 2 || fb.ndim() > 2;
        if (fa.type() != fb.type())
            throw ts::invalid_argument("gemm: dtypes differ: " + fa.path() + " is " + std::string(ts::to_string(fa.type())) +
                                       ", " + fb.path() + " is " + std::string(ts::to_string(fb.type())));
        if (a.has("c")) {
            const auto fc = ts::read_npy_stack(*a.get("c"));
            stacked = stacked || fc.ndim() > 2;
            if (fc.type() != fa.type())
                throw ts::invalid_argument("gemm: dtypes differ: " + fa.path() + " is " + std::string(ts::to_string(fa.type())) +
                                           ", " + fc.path() + " is " + std::string(ts::to_string(fc.type())));
        }
        if (a.has("dtype") && type != fa.type())
            throw ts::invalid_argument("gemm: --dtype " + *a.get("dtype") + " but " + fa.path() + " holds " +
                                       std::string(ts::to_string(fa.type())));
        type = fa.type();
    }
    return ts::visit_dtype(type, [&]<class T>() { return stacked ? run_gemm_stack<T>(a, type, files) : run_gemm<T>(a, type, files); });
}

/// Prints an error message with the bytes that would steer a terminal (escape sequences from a
/// file name or a device spec) shown as \xNN.
void print_error(const std::string& cmd, const std::string& what) {
    std::cerr << "tilestream " << ts::detail::terminal_safe(cmd) << ": error: " << ts::detail::terminal_safe(what) << "\n";
}

int run_command(int argc, char** argv) {
    const std::string cmd = argv[1];
    if ((cmd == "gemm" || cmd == "jacobi") && ts::cli::wants_ranks(argc, argv))
        return ts::cli::cmd_distributed(cmd, argc, argv);
    if (cmd == "devices") return cmd_devices(argc, argv);
    if (cmd == "gemm") return cmd_gemm(argc, argv);
    if (cmd == "scale") return ts::cli::cmd_scale(argc, argv);
    if (cmd == "timeline") return ts::cli::cmd_timeline(argc, argv);
    if (cmd == "jacobi") return ts::cli::cmd_jacobi(argc, argv);
    if (ts::cli::is_blas3_command(cmd)) return ts::cli::cmd_blas3(cmd, argc, argv);
    if (ts::cli::is_factor_command(cmd)) return ts::cli::cmd_factor(cmd, argc, argv);
    if (cmd == "--help" || cmd == "help" || cmd == "-h") {
        std::cout << usage_text;
        return 0;
    }
    if (cmd == "--version" || cmd == "version" || cmd == "-V") {
        std::cout << ts::cli::version_text() << "\n";
        return 0;
    }
    std::cerr << "tilestream: unknown command '" << ts::detail::terminal_safe(cmd) << "'"
              << ts::cli::did_you_mean(cmd, {"devices", "gemm", "jacobi", "scale", "timeline", "help", "--version",
                                                                          "symm", "hemm", "syrk", "herk", "syr2k", "her2k",
                                                                          "trmm", "trsm", "potrf", "posv", "getrf", "gesv"})
              << "\n"
              << usage_text;
    return exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
    ts::cli::restore_openblas_environment();
    if (argc < 2) {
        std::cerr << usage_text;
        return exit_usage;
    }
    const std::string cmd = argv[1];
    try {
        const int code = run_command(argc, argv);
        // What a command printed is its result: a full device or a closed pipe fails the run.
        ts::cli::flush_standard_output();
        return code;
    } catch (const ts::cli::quiet_exit& e) {
        return e.code();
    } catch (const ts::cli::runtime_failure& e) {
        print_error(cmd, e.what());
        return exit_runtime;
    } catch (const ts::invalid_argument& e) {
        print_error(cmd, e.what());
        return exit_usage;
    } catch (const ts::file_error& e) {
        print_error(cmd, e.what());
        return exit_usage;
    } catch (const ts::out_of_budget& e) {
        print_error(cmd, e.what());
        return exit_usage;
    } catch (const std::bad_alloc&) {
        print_error(cmd, "out of host memory (std::bad_alloc)");
        return exit_runtime;
    } catch (const std::exception& e) {
        print_error(cmd, e.what());
        return exit_runtime;
    }
}
