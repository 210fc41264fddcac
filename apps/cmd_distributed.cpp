// `tilestream gemm` and `tilestream jacobi` over MPI ranks (mpirun -np N tilestream gemm ... --grid PxQ):
// the one-process options, parsed alike on every rank with the same messages ("did you mean");
// what every rank finds alike (usage, inputs, memory, an output that cannot be written) is agreed
// on and printed once by rank 0 (exit 2 for bad usage or input, 3 for a failure while running);
// only an error on one rank that the others cannot learn of ends every rank (MPI_Abort).
#include "cli_args.hpp"
#include "cmd_distributed_gemm_support.hpp"
#include "core/npy_write.hpp"
#include "distributed/npy_blocks.hpp"
#include "commands.hpp"
#include "core/json_text.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/distributed.hpp>
#include <tilestream/image.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/report.hpp>
#include <tilestream/trace.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

namespace tilestream::cli {
namespace {

namespace td = tilestream::distributed;
namespace tr = tilestream::cli::ranks;

constexpr int exit_check_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_runtime = 3;

/// Ranks sharing this node (OpenMPI says how many), for the cores and memory each may take.
int local_ranks() {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return local ? std::max(1, std::atoi(local)) : 1;
}

/// Threads per CPU device on a rank when --cpu-threads is not given: the node's cores over its ranks.
int default_cpu_threads() { return std::max(1, int(std::thread::hardware_concurrency()) / local_ranks()); }

/// "1 rank", "4 ranks".
std::string ranks_text(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

/// The device spec with `cuda:local` read as the GPU of this rank's index on its node.
std::string rank_device_spec(std::string spec) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    for (auto at = spec.find("cuda:local"); at != std::string::npos; at = spec.find("cuda:local"))
        spec.replace(at, 10, "cuda:" + std::string(local ? local : "0"));
    return spec;
}

void declare_rank_options(args& a) {
    declare_device_options(a);
    a.text("grid", "process grid PxQ (P*Q = ranks, or ranks / --layers; gemm default: the fewest words on the "
                   "busiest rank, jacobi: the most square)", "PxQ")
        .text("devices", "each rank's devices, e.g. cpu, cpu:2, cuda:0, cuda:local (the GPU of the rank's index on "
                         "its node)", "SPEC")
        .flag_option("json", "one JSON object (rank 0), with per-rank figures")
        .flag_option("explain", "the grid and plan, bytes sent per rank measured and modelled (stderr)")
        .flag_option("quiet", "no progress lines (ranks print none anyway)");
}

/// Test-only: TILESTREAM_TEST_FAIL_RANK=R makes rank R fail alone in the middle of a run, to
/// show that every rank then ends with its message; TILESTREAM_TEST_KILL_RANK=R kills rank R.
void test_failure_point(int rank) {
    if (const char* r = std::getenv("TILESTREAM_TEST_KILL_RANK"); r && std::atoi(r) == rank) ::raise(SIGKILL);
    if (const char* r = std::getenv("TILESTREAM_TEST_FAIL_RANK"); r && std::atoi(r) == rank)
        throw error("rank " + std::to_string(rank) + " failed on purpose (TILESTREAM_TEST_FAIL_RANK)");
}

/// Parses a command's options on every rank (every rank sees the same command line, so an error
/// is collective). False when --help was asked (rank 0 printed it).
bool parse_on_ranks(args& a, int argc, char** argv, const td::environment& env) {
    if (env.rank() != 0)
        for (int i = 2; i < argc; ++i)
            if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return false;
    try {
        return a.parse(argc, argv, 2);
    } catch (const tilestream::error& e) {
        throw td::collective_error(e.what());
    }
}

/// Runs `f` where every rank sees the same inputs: its invalid_argument, file_error and
/// out_of_budget become the collective_error every rank throws alike.
template <class F>
auto alike(F&& f) {
    try {
        return f();
    } catch (const td::collective_error&) {
        throw;
    } catch (const invalid_argument& e) {
        throw td::collective_error(e.what());
    } catch (const file_error& e) {
        throw td::collective_error(e.what());
    } catch (const out_of_budget& e) {
        throw td::collective_error(e.what());
    }
}

/// Runs `f` on each rank on its own (device specs, memory), then the ranks agree: the first
/// failing rank's message on all, as collective_error.
template <class F>
void each_then_agree(F&& f) {
    std::string problem;
    try {
        f();
    } catch (const std::exception& e) {
        problem = e.what();
    }
    td::agree_on_errors(MPI_COMM_WORLD, problem, true);
}

std::size_t peak_rss() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return std::size_t(u.ru_maxrss) * 1024;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void declare_gemm_options(args& a) {
    declare_rank_options(a);
    a.integer_option("m", "rows of C (random inputs, uniform in [-1, 1], the same global matrices on any grid)")
        .integer_option("n", "columns of C (random inputs)")
        .integer_option("k", "inner dimension (random inputs)")
        .text("dtype", "f32 (default), f64, c32 or c64 (numpy's float32, float64, complex64, complex128 too); "
                       "file inputs: the files' dtype", "DTYPE")
        .integer_option("seed", "seed of the random inputs (default 42)")
        .text("a", "A from a .npy file (every rank reads only its blocks, MPI-IO)", "A.npy")
        .text("b", "B from a .npy file (goes with --a)", "B.npy")
        .text("c", "C's input from a .npy file (read when --beta is not 0)", "C.npy")
        .text("out", "write C as .npy (blocks by every rank, MPI-IO, atomically)", "C.npy")
        .scalar_option("alpha", "scalar alpha (default 1; complex types: e.g. 1.5-2j, 2j, (1+2j))")
        .scalar_option("beta", "scalar beta (default 0: C is not read)")
        .text("op-a", "op(A): n (default), t, or c (conjugate transpose; on real data the same as t)", "n|t|c")
        .text("op-b", "op(B): n (default), t or c", "n|t|c")
        .text("kernel", "each rank's local kernel: reference, naive, tiled or vendor (default)", "KERNEL")
        .text("strategy", "each rank's local plan: auto (default), in-core, tiles-3d, a-panel, a-panel-c-panel, "
                          "b-panel, c-block, row-panels, zero-copy", "STRATEGY")
        .integer_option("tile", "local tile size (m, n and k) instead of the planner's")
        .integer_option("tile-m", "local tile rows")
        .integer_option("tile-n", "local tile columns")
        .integer_option("tile-k", "local tile depth")
        .text("reproducible", "on: k added in fixed k-blocks (384 f32, 256 f64, 192 c32, 128 c64) in order on every grid, so C is "
                              "bitwise the same for any grid and rank count (tiled kernel, 2-D grids); default off",
              "on|off")
        .flag_option("check", "verify C in float64 (Freivalds over the ranks, 4+4 random vectors), exit 1 on failure")
        .flag_option("anchor", "also time ScaLAPACK's P?GEMM (PSGEMM, PDGEMM, PCGEMM, PZGEMM) on the same grid and operands and print the ratio")
        .integer_option("repeat", "run R times, report the median (default 1)")
        .text("trace", "write a Chrome trace of every rank (one group of tracks per rank)", "run.json")
        .text("timeline", "draw every rank's copies, kernels and panel waits (SVG, a lane group per rank)", "run.svg")
        .integer_option("block", "block-cyclic block size (default 128)")
        .integer_option("layers", "2.5D: c layers of a P x Q grid, ranks = P*Q*c (default: the model's choice)")
        .text("rank-memory", "memory each rank may hold for 2.5D layers (default: half the node's memory over its ranks)",
              "BYTES")
        .footer("Over ranks the random inputs are defined element by element, so every grid and rank count sees the\n"
                "same matrices (not the one-process ones). --check: Freivalds in float64 with 4+4 random +-1 vectors,\n"
                "partial products summed over the ranks; tolerance max(16, 8 sqrt(k)) u + 8 (sqrt(n) + sqrt(k)) 2^-53.");
}

struct gemm_setup {
    op op_a = op::n, op_b = op::n;
    index_t m = 0, n = 0, k = 0, block = 128;
    dtype type = dtype::f32;
    bool files = false, reproducible = false;
    int repeat = 1, layers = 0;
    std::uint64_t seed = 42;
    std::size_t rank_bytes = 0;
    std::pair<int, int> grid{0, 0};
};

template <class T>
int run_gemm_typed(const args& a, const gemm_setup& s, const td::environment& env) {
    const T alpha = alike([&] { return a.scalar<T>("alpha", 1.0); });
    const T beta = alike([&] { return a.scalar<T>("beta", 0.0); });
    const index_t m = s.m, n = s.n, k = s.k;
    const bool na = s.op_a == op::n, nb = s.op_b == op::n;
    const td::pgemm_rank_plan plan = alike([&] {
        return td::plan_pgemm(s.op_a, s.op_b, m, n, k, env.size(), sizeof(T), s.block, s.rank_bytes, s.layers,
                              s.grid.first, s.grid.second);
    });
    const int p = plan.grid_rows, q = plan.grid_cols, c_layers = plan.layers;
    if (s.reproducible && c_layers > 1)
        throw td::collective_error("--reproducible on needs one layer (2.5D sums the layers' partial C in MPI_Reduce, "
                                   "whose order is not k's): give --layers 1");
    const td::layered_grid lgrid(MPI_COMM_WORLD, p, q, c_layers);
    const td::process_grid& grid = lgrid.layer();
    const bool holds = lgrid.my_layer() == 0;

    // The memory each rank needs, checked before anything is allocated: its blocks of A, B and C
    // (C twice when beta != 0 and C's input must be kept), three panels per operand, and what
    // 2.5D adds (the model's figure for a layer-0 rank).
    const index_t kb = s.reproducible ? reproducible_k_block(dtype_of<T>()) : 0;
    each_then_agree([&] {
        const index_t lr = td::local_count(m, s.block, grid.my_row(), 0, p), lc = td::local_count(n, s.block, grid.my_col(), 0, q);
        const index_t lka = td::local_count(k, s.block, na ? grid.my_col() : grid.my_row(), 0, na ? q : p);
        const index_t lkb = td::local_count(k, s.block, nb ? grid.my_row() : grid.my_col(), 0, nb ? p : q);
        const index_t w = std::max({s.block, kb, index_t(256)});
        const bool keep_c0 = beta != T(0) && (s.repeat > 1 || a.flag("check") || a.flag("anchor"));
        const double words = double(lr) * double(lka) + double(lkb) * double(lc) + double(lr) * double(lc) * (keep_c0 ? 2 : 1) +
                             3.0 * double(w) * double(lr + lc) + double(std::max({lr * lka, lkb * lc, lr * lc}));
        const double need = std::max(words, plan.traffic.memory_words) * double(sizeof(T));
        const std::size_t available = available_host_memory();
        if (available != 0 && need > double(available) / local_ranks())
            throw out_of_budget("gemm: rank " + std::to_string(env.rank()) + " needs " + format_bytes(std::size_t(need)) +
                                " of host memory (its blocks of A, B and C and SUMMA's panels) but only " +
                                format_bytes(available / std::size_t(local_ranks())) + " is available to each of the " +
                                ranks_text(local_ranks()) + " on this node (MemAvailable / ranks)");
    });

    // The operands: layer 0 holds them (files read block by block; random ones element by element).
    std::optional<td::block_cyclic_matrix<T>> am, bm, cm;
    alike([&] {
        am = td::block_cyclic_matrix<T>::on(grid, na ? m : k, na ? k : m, s.block, holds);
        bm = td::block_cyclic_matrix<T>::on(grid, nb ? k : n, nb ? n : k, s.block, holds);
        cm = td::block_cyclic_matrix<T>::on(grid, m, n, s.block, holds);
        return 0;
    });
    if (s.files) {
        std::vector<std::string> inputs{*a.get("a"), *a.get("b")};
        if (a.has("c") && beta != T(0)) inputs.push_back(*a.get("c"));
        td::check_inputs_readable(MPI_COMM_WORLD, holds ? inputs : std::vector<std::string>{});
        if (holds) {
            td::read_npy_blocks<T>(grid, inputs[0], *am);
            td::read_npy_blocks<T>(grid, inputs[1], *bm);
            if (inputs.size() > 2) td::read_npy_blocks<T>(grid, inputs[2], *cm);
        }
    } else {
        tr::fill_random_blocks<T>(grid, *am, s.seed, 1);
        tr::fill_random_blocks<T>(grid, *bm, s.seed, 2);
        if (beta != T(0)) tr::fill_random_blocks<T>(grid, *cm, s.seed, 3);
    }
    std::optional<td::block_cyclic_matrix<T>> c0;
    if (beta != T(0) && (s.repeat > 1 || a.flag("check") || a.flag("anchor"))) c0 = *cm;

    // Each rank's devices; the local plans take the one-process options.
    std::optional<tilestream::context> ctx;
    gemm_call_options call;
    each_then_agree([&] {
        context_options oo;
        const open_options dev = device_options(a);
        oo.memory_budget = dev.memory_budget;
        oo.cpu_threads = dev.cpu_threads > 0 ? dev.cpu_threads : default_cpu_threads();
        oo.kernel = parse_kernel_setting(a.get_or("kernel", "auto"));
        oo.reproducible = s.reproducible;
        // The local calls have no cancel and no progress callback (a signal ends the ranks): steps
        // of a bounded time would only cost speed.
        oo.step_seconds = 0;
        ctx.emplace(rank_device_spec(a.get_or("devices", "cpu")), oo);
        call.strategy = parse_gemm_strategy(a.get_or("strategy", "auto"));
        const index_t big = std::numeric_limits<index_t>::max();
        const index_t tile = a.integer("tile", 0, 1, big);
        call.tile_m = a.integer("tile-m", tile, 1, big);
        call.tile_n = a.integer("tile-n", tile, 1, big);
        call.tile_k = a.integer("tile-k", tile, 1, big);
    });
    trace_recorder recorder;
    const bool tracing = a.has("trace") || a.has("timeline");
    td::pgemm_options po;
    po.context = &*ctx;
    po.call = call;
    po.k_block = kb;
    if (s.reproducible) po.panel = kb;
    if (tracing) po.call.run.trace = &recorder;

    // The runs: C's input restored before each; the slowest rank's seconds count.
    std::vector<double> seconds;
    td::pgemm_report rep;
    td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const double origin = trace_clock_seconds();
    test_failure_point(env.rank());
    for (int r = 0; r < s.repeat; ++r) {
        if (r > 0 && c0) cm->local = c0->local;
        td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        rep = td::pgemm<T>(lgrid, s.op_a, s.op_b, m, n, k, alpha, am->data(), 1, 1, am->desc, bm->data(), 1, 1, bm->desc, beta,
                           cm->data(), 1, 1, cm->desc, po);
        double most = 0;
        td::check_mpi(MPI_Allreduce(&rep.seconds, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
        seconds.push_back(most);
    }
    const double secs = median(seconds);

    std::optional<tr::rank_check> check;
    if (a.flag("check"))
        check = tr::check_over_ranks<T>(MPI_COMM_WORLD, grid, s.op_a, s.op_b, alpha, *am, *bm, beta, c0 ? &*c0 : nullptr, *cm,
                                        m, n, k, s.seed ^ 0x5eed);
    std::optional<tr::rank_anchor> anchor;
    if (a.flag("anchor"))
        anchor = tr::scalapack_anchor<T>(grid, holds, s.op_a, s.op_b, alpha, *am, *bm, beta, c0 ? *c0 : *cm, m, n, k,
                                         s.repeat);

    // The outputs: rank 0 opens each (a temporary beside a regular file, or the device or FIFO
    // itself), writes the trace and the timeline, then every rank writes its blocks of C; rank 0
    // then commits them together, so the run ends with all of them new or none.
    std::vector<trace_span> spans;
    if (tracing) spans = tr::gather_spans(MPI_COMM_WORLD, recorder.spans(), origin);
    std::optional<detail::output_file> out_c, out_trace, out_timeline;
    std::string problem;
    if (env.rank() == 0) {
        try {
            if (a.has("out")) out_c.emplace(*a.get("out"));
            if (a.has("trace")) {
                trace_recorder all;
                for (const auto& sp : spans) all.record(sp.device, sp.stream, sp.kind, sp.name, sp.bytes, sp.flops, sp.t0, sp.t1);
                const std::string text = all.chrome_json();
                out_trace.emplace(*a.get("trace"));
                out_trace->write(text.data(), text.size());
            }
            if (a.has("timeline")) {
                const std::string text = timeline_svg(spans, "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                                                  std::to_string(k) + " on " + ranks_text(env.size()) +
                                                                  " (grid " + std::to_string(p) + "x" + std::to_string(q) + ")");
                out_timeline.emplace(*a.get("timeline"));
                out_timeline->write(text.data(), text.size());
            }
        } catch (const std::exception& e) {
            problem = e.what();
        }
    }
    td::agree_on_errors(MPI_COMM_WORLD, problem, false);
    if (a.has("out")) {
        if (holds) {
            if ((grid.rank() == 0) != (env.rank() == 0))
                throw td::collective_error("internal: rank 0 is not the first rank of the grid that holds C");
            std::string message;
            try {
                td::write_npy_blocks_to<T>(grid, out_c ? &*out_c : nullptr, cm->rows, cm->cols, cm->block, cm->data(),
                                           cm->desc[8]);
            } catch (const td::collective_failure& e) {
                if (c_layers == 1) throw;
                message = e.what();
            }
            if (c_layers > 1) td::agree_on_errors(MPI_COMM_WORLD, message, false);
        } else {
            td::agree_on_errors(MPI_COMM_WORLD, "", false);
        }
    }
    if (env.rank() == 0) {
        try {
            std::vector<detail::output_file*> all;
            for (auto* o : {&out_c, &out_trace, &out_timeline})
                if (*o) all.push_back(&**o);
            detail::commit_together(all);
        } catch (const std::exception& e) {
            problem = e.what();
        }
    }
    td::agree_on_errors(MPI_COMM_WORLD, problem, false);

    // Per-rank figures on rank 0.
    struct figures {
        double seconds, sent, received, rss, rows, cols, layer;
    };
    const figures mine{rep.seconds,
                       double(rep.bytes_sent),
                       double(rep.bytes_received),
                       double(peak_rss()),
                       double(holds ? cm->local_rows : 0),
                       double(holds ? cm->local_cols : 0),
                       double(lgrid.my_layer())};
    std::vector<figures> all(std::size_t(env.size()));
    td::check_mpi(MPI_Gather(&mine, 7, MPI_DOUBLE, all.data(), 7, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Gather (figures)");
    if (env.rank() != 0) return check && !check->passed() ? exit_check_failed : 0;

    double most_sent = 0, most_received = 0, sum_sent = 0, sum_received = 0, most_rss = 0;
    for (const auto& f : all) {
        most_sent = std::max(most_sent, f.sent);
        most_received = std::max(most_received, f.received);
        sum_sent += f.sent;
        sum_received += f.received;
        most_rss = std::max(most_rss, f.rss);
    }
    const double word = double(sizeof(T));
    const td::pgemm_traffic& model = plan.traffic;
    const td::pgemm_rank_plan flat = td::plan_pgemm(s.op_a, s.op_b, m, n, k, env.size(), sizeof(T), s.block, 0, 1);
    // A complex multiply-add is 4 real ones: 8mnk flops for c32/c64 (the dtype table's count).
    const double flops_per_mac = double(dtype_traits(dtype_of<T>()).flops_per_multiply_add);
    const double gflops = secs > 0 ? flops_per_mac * double(m) * double(n) * double(k) / secs * 1e-9 : 0.0;
    const double mean_sent = sum_sent / word / env.size();
    const std::string kernel = std::string(to_string(s.reproducible ? gemm_kernel::tiled : parse_gemm_kernel(a.get_or("kernel", "vendor"))));
    const std::string devices = a.get_or("devices", "cpu");
    if (a.flag("explain")) {
        std::string considered;
        for (const auto& cand : plan.candidates)
            considered += (considered.empty() ? "" : "; ") + std::string("c = ") + std::to_string(cand.layers) + " on " +
                          std::to_string(cand.grid_rows) + "x" + std::to_string(cand.grid_cols) + ": " +
                          std::to_string((long long)std::llround(cand.words)) + " words (busiest rank " +
                          std::to_string((long long)std::llround(cand.busiest_words)) + "), " +
                          format_bytes(std::size_t(cand.memory_bytes)) + (cand.fits ? "" : " (over the memory limit)");
        std::fprintf(stderr,
                     "grid %dx%d over %s, c = %d layer%s (%s), block %lld, SUMMA panels %lld of width up to %lld "
                     "per layer (two broadcasts in flight)%s, op(A) %s, op(B) %s\n"
                     "layers considered (words per rank, memory per rank; limit %s): %s\n"
                     "words sent per rank (mean; equals the mean received): measured %.0f; model %.0f (SUMMA %.0f, "
                     "replication %.0f, reduction %.0f, transposes %.0f); busiest rank sent %.0f, received %.0f "
                     "(model %.0f)\n"
                     "bytes per rank: sent %.0f mean, %.0f busiest (model %.0f mean, %.0f busiest)\n"
                     "SUMMA with c = 1 on %dx%d: %.0f; PDGEMM on %dx%d: %.0f; lower bound: memory-independent %.0f, order "
                     "2mnk/(p sqrt(M)) %.0f with M = %.0f words per rank\n",
                     p, q, ranks_text(env.size()).c_str(), c_layers, c_layers == 1 ? "" : "s",
                     c_layers == 1 ? "2-D SUMMA" : "2.5D: k cut over the layers, C reduced onto layer 0", (long long)s.block,
                     (long long)rep.panels, (long long)rep.panel_width,
                     kb > 0 ? (", k in k-blocks of " + std::to_string(kb) + " (reproducible)").c_str() : "",
                     rep.redistributed_a ? "redistributed to C's rows" : "aligned with C",
                     rep.redistributed_b ? "redistributed to C's columns" : "aligned with C",
                     s.rank_bytes ? format_bytes(s.rank_bytes).c_str() : "none", considered.c_str(), mean_sent, model.words,
                     model.summa_words, model.replicate_words, model.reduce_words, model.redistribute_words,
                     most_sent / word, most_received / word, model.busiest_words, sum_sent / env.size(), most_sent,
                     model.words * word, model.busiest_words * word, flat.grid_rows, flat.grid_cols, flat.traffic.words,
                     flat.grid_rows, flat.grid_cols, flat.traffic.pdgemm_words, model.memory_independent_words,
                     model.lower_bound_words, (double(m) * double(k) + double(k) * double(n) + double(m) * double(n)) / (p * q));
        for (int r = 0; r < env.size(); ++r) {
            const figures& f = all[std::size_t(r)];
            std::fprintf(stderr, "  rank %d (layer %d): C block %.0fx%.0f, %.4f s, sent %.0f bytes, received %.0f bytes\n", r,
                         int(f.layer), f.rows, f.cols, f.seconds, f.sent, f.received);
        }
    }
    const bool ok = !check || check->passed();
    if (a.flag("json")) {
        using detail::json;
        json o = {{"m", m}, {"n", n}, {"k", k}, {"dtype", std::string(to_string(dtype_of<T>()))},
                  {"kernel", kernel}, {"devices", devices}, {"op_a", std::string(to_string(s.op_a))},
                  {"op_b", std::string(to_string(s.op_b))}, {"alpha", as_scalar(alpha).real()}, {"beta", as_scalar(beta).real()},
                  {"repeat", s.repeat}, {"seconds", secs}, {"gflops", gflops},
                  {"strategy", a.get_or("strategy", "auto")}, {"tile_m", call.tile_m}, {"tile_n", call.tile_n},
                  {"tile_k", call.tile_k}, {"k_block", kb}, {"reproducible", s.reproducible},
                  {"peak_rss_bytes", most_rss}, {"faults", json::array()},
                  {"ranks", env.size()}, {"grid", std::to_string(p) + "x" + std::to_string(q)},
                  {"layers", c_layers}, {"rank_memory_bytes", s.rank_bytes},
                  {"block", s.block}, {"panels", rep.panels},
                  {"panel_width", rep.panel_width}, {"max_bytes_sent_per_rank", most_sent},
                  {"max_bytes_received_per_rank", most_received},
                  {"mean_bytes_sent_per_rank", sum_sent / env.size()},
                  {"mean_bytes_received_per_rank", sum_received / env.size()},
                  {"model_words", model.words},
                  {"model_busiest_words", model.busiest_words},
                  {"model_summa_words", model.summa_words},
                  {"model_replicate_words", model.replicate_words},
                  {"model_reduce_words", model.reduce_words},
                  {"model_redistribute_words", model.redistribute_words},
                  {"model_memory_bytes_per_rank", model.memory_words * word},
                  {"model_flat_grid", std::to_string(flat.grid_rows) + "x" + std::to_string(flat.grid_cols)},
                  {"model_flat_summa_words", flat.traffic.words},
                  {"model_lower_bound_words", model.lower_bound_words},
                  {"model_pdgemm_words", flat.traffic.pdgemm_words},
                  {"model_memory_independent_bound_words", model.memory_independent_words},
                  {"out", a.get_or("out", "")}};
        json per = json::array();
        for (int r = 0; r < env.size(); ++r) {
            const figures& f = all[std::size_t(r)];
            per.push_back({{"rank", r}, {"layer", int(f.layer)}, {"seconds", f.seconds}, {"bytes_sent", f.sent},
                           {"bytes_received", f.received}, {"c_rows", f.rows}, {"c_cols", f.cols},
                           {"peak_rss_bytes", f.rss}});
        }
        o["per_rank"] = per;
        if constexpr (is_complex_v<T>) o["alpha_imag"] = alpha.imag(), o["beta_imag"] = beta.imag();
        if (check) {
            o["rel_error"] = check->error, o["tolerance"] = check->tolerance, o["check_passed"] = ok;
            o["check_method"] = "freivalds", o["check_tolerance"] = check->tolerance, o["check_seconds"] = check->seconds;
        }
        if (anchor) {
            o["anchor"] = anchor->name, o["anchor_seconds"] = anchor->seconds, o["anchor_gflops"] = anchor->gflops;
            o["ratio_to_anchor"] = anchor->gflops > 0 ? gflops / anchor->gflops : 0.0;
        }
        std::cout << detail::json_line(o) << "\n";
    } else {
        std::printf("gemm %lldx%lldx%lld %s op(A)=%s op(B)=%s kernel=%s on %s (grid %dx%d, %d layer%s, block %lld, devices "
                    "%s per rank): %.4f s (median of %d), %.1f GFLOP/s, %.1f MiB sent per rank (largest), %.3f MiB on "
                    "average (model %.3f)\n",
                    (long long)m, (long long)n, (long long)k, std::string(to_string(dtype_of<T>())).c_str(),
                    std::string(to_string(s.op_a)).c_str(), std::string(to_string(s.op_b)).c_str(), kernel.c_str(),
                    ranks_text(env.size()).c_str(), p, q, c_layers, c_layers == 1 ? "" : "s", (long long)s.block,
                    devices.c_str(), secs, s.repeat, gflops, most_sent / (1 << 20), mean_sent * word / (1 << 20),
                    model.words * word / (1 << 20));
        if (anchor)
            std::printf("anchor: %s: %.4f s (median of %d), %.1f GFLOP/s; this run / anchor = %.2f\n", anchor->name.c_str(),
                        anchor->seconds, s.repeat, anchor->gflops, anchor->gflops > 0 ? gflops / anchor->gflops : 0.0);
        if (check)
            std::printf("check: %s: relative error %.3e (Freivalds over the ranks, tolerance %.3e, %.3f s)\n",
                        ok ? "passed" : check->finite ? "FAILED" : "FAILED (NaN or Inf in the operands or C)", check->error,
                        check->tolerance, check->seconds);
        if (a.has("out")) std::printf("wrote %s\n", a.get("out")->c_str());
    }
    return ok ? 0 : exit_check_failed;
}

int run_gemm(int argc, char** argv, const td::environment& env) {
    args a("gemm", "C <- alpha*op(A)*op(B) + beta*C over MPI ranks, on 2-D block-cyclic matrices (SUMMA, 2.5D).");
    declare_gemm_options(a);
    if (!parse_on_ranks(a, argc, argv, env)) return 0;
    gemm_setup s;
    alike([&] {
        a.check_output_paths({"out", "trace", "timeline"}, {"a", "b", "c"}, "c");
        s.files = a.has("a") || a.has("b");
        if (s.files && (!a.has("a") || !a.has("b"))) throw invalid_argument("gemm: --a and --b go together");
        if (!s.files && a.has("c")) throw invalid_argument("gemm: --c needs --a and --b");
        if (s.files)
            for (const char* o : {"m", "n", "k", "seed"})
                if (a.has(o)) throw invalid_argument(std::string("gemm: --") + o + " is for random inputs, not with --a/--b");
        if (!s.files && (!a.has("m") || !a.has("n") || !a.has("k")))
            throw invalid_argument("gemm: give --m, --n and --k (random inputs) or --a and --b (files)");
        s.op_a = parse_op(a.get_or("op-a", "n"));
        s.op_b = parse_op(a.get_or("op-b", "n"));
        s.repeat = int(a.integer("repeat", 1, 1, 100000));
        s.block = a.integer("block", 128, 1, std::numeric_limits<int>::max());
        s.seed = std::uint64_t(a.integer("seed", 42, 0, std::numeric_limits<index_t>::max()));
        s.layers = int(a.integer("layers", 0, 1, 1 << 20));
        const std::string rep = a.get_or("reproducible", "off");
        if (rep != "on" && rep != "off") throw invalid_argument("--reproducible expects on or off, got '" + rep + "'");
        s.reproducible = rep == "on";
        parse_gemm_kernel(a.get_or("kernel", "vendor"));
        parse_gemm_strategy(a.get_or("strategy", "auto"));
        if (a.has("grid")) s.grid = td::parse_grid(*a.get("grid"));
        if (auto rm = a.get("rank-memory")) {
            s.rank_bytes = parse_bytes(*rm);
        } else {
            const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
            if (pages > 0 && page > 0) s.rank_bytes = std::size_t(pages) * std::size_t(page) / 2 / std::size_t(local_ranks());
        }
        s.type = parse_dtype(a.get_or("dtype", "f32"));
        if (!s.files) {
            const index_t big = std::numeric_limits<int>::max();
            s.m = a.integer("m", 0, 1, big);
            s.n = a.integer("n", 0, 1, big);
            s.k = a.integer("k", 0, 1, big);
        }
        return 0;
    });
    if (s.files) {
        // Rank 0 reads the headers; every rank learns them (or the error).
        const auto sa = td::npy_shape(MPI_COMM_WORLD, *a.get("a")), sb = td::npy_shape(MPI_COMM_WORLD, *a.get("b"));
        const dtype ta = td::npy_dtype(MPI_COMM_WORLD, *a.get("a")), tb = td::npy_dtype(MPI_COMM_WORLD, *a.get("b"));
        alike([&] {
            if (ta != tb)
                throw invalid_argument("gemm: dtypes differ: " + *a.get("a") + " is " + std::string(to_string(ta)) + ", " +
                                       *a.get("b") + " is " + std::string(to_string(tb)));
            if (a.has("dtype") && s.type != ta)
                throw invalid_argument("gemm: --dtype " + *a.get("dtype") + " but " + *a.get("a") + " holds " +
                                       std::string(to_string(ta)));
            s.type = ta;
            s.m = s.op_a == op::n ? sa.first : sa.second;
            s.k = s.op_a == op::n ? sa.second : sa.first;
            s.n = s.op_b == op::n ? sb.second : sb.first;
            const index_t kb_rows = s.op_b == op::n ? sb.first : sb.second;
            validate_gemm(s.op_a, s.op_b, sa.first, sa.second, sb.first, sb.second, s.m, s.n);
            if (kb_rows != s.k) throw invalid_argument("gemm: inner dimensions differ");
            return 0;
        });
        const std::complex<double> beta = a.scalar<std::complex<double>>("beta", 0.0);
        if (a.has("c")) {
            const auto sc = td::npy_shape(MPI_COMM_WORLD, *a.get("c"));
            const dtype tc = td::npy_dtype(MPI_COMM_WORLD, *a.get("c"));
            alike([&] {
                if (tc != s.type)
                    throw invalid_argument("gemm: dtypes differ: " + *a.get("a") + " is " + std::string(to_string(s.type)) +
                                           ", " + *a.get("c") + " is " + std::string(to_string(tc)));
                if (sc.first != s.m || sc.second != s.n)
                    throw invalid_argument("gemm: " + *a.get("c") + " is " + std::to_string(sc.first) + "x" +
                                           std::to_string(sc.second) + " but C is " + std::to_string(s.m) + "x" +
                                           std::to_string(s.n));
                return 0;
            });
        } else if (beta != 0.0) {
            throw td::collective_error("gemm: --beta is not 0 but no --c file was given");
        }
    }
    return visit_dtype(s.type, [&]<class T>() { return run_gemm_typed<T>(a, s, env); });
}

void declare_jacobi_options(args& a) {
    declare_rank_options(a);
    a.integer_option("nx", "grid columns, boundary included (default 1024)")
        .integer_option("ny", "grid rows, boundary included (default 1024)")
        .text("dtype", "f32 (default) or f64", "f32|f64")
        .integer_option("iters", "most iterations (default 1000)")
        .number_option("tol", "stop when the residual is below X (default 0: never)")
        .integer_option("check-every", "residual every K iterations (default 10)")
        .text("image", "gather the field to rank 0 and write it as a PNG", "field.png")
        .text("out", "gather the field to rank 0 and write it as .npy", "field.npy")
        .text("decomp", "each rank's part over its devices: rows | cols | tiles | tiles:PxQ | auto", "D")
        .text("overlap", "edge strips first, halos sent while the interior is swept: on (default) or off", "on|off");
}

int run_jacobi(int argc, char** argv, const td::environment& env) {
    args a("jacobi", "The 2-D Laplace equation by Jacobi iterations on a grid of MPI ranks.");
    declare_jacobi_options(a);
    if (!parse_on_ranks(a, argc, argv, env)) return 0;
    index_t nx = 1024, ny = 1024;
    dtype type = dtype::f32;
    td::distributed_jacobi_options jo;
    alike([&] {
        a.check_output_paths({"image", "out"});
        const index_t big = std::numeric_limits<int>::max();
        nx = a.integer("nx", 1024, 3, big);
        ny = a.integer("ny", 1024, 3, big);
        jo.iters = a.integer("iters", 1000, 0, big);
        jo.check_every = a.integer("check-every", 10, 1, big);
        jo.tol = a.real("tol", 0.0);
        if (a.has("grid")) std::tie(jo.grid_rows, jo.grid_cols) = td::parse_grid(*a.get("grid"));
        type = parse_dtype(a.get_or("dtype", "f32"));
        jo.decomposition = parse_jacobi_decomposition(a.get_or("decomp", "auto"));
        jo.overlap = parse_on_off("overlap", a.get_or("overlap", "on"));
        return 0;
    });
    std::optional<tilestream::context> ctx;
    each_then_agree([&] {
        context_options oo;
        const open_options dev = device_options(a);
        oo.memory_budget = dev.memory_budget;
        oo.cpu_threads = dev.cpu_threads > 0 ? dev.cpu_threads : default_cpu_threads();
        ctx.emplace(rank_device_spec(a.get_or("devices", "cpu")), oo);
    });
    jo.devices = ctx->devices();
    test_failure_point(env.rank());
    const std::string image = a.get_or("image", ""), out = a.get_or("out", "");
    const std::string devices = a.get_or("devices", "cpu");
    return visit_real_dtype(type, "jacobi", [&]<class T>() {
        std::vector<T> field;
        const bool gather = !image.empty() || !out.empty();
        const auto rep = td::distributed_jacobi<T>(MPI_COMM_WORLD, nx, ny, jo, gather ? &field : nullptr);
        double secs = 0;
        unsigned long long halo = rep.halo_bytes, halo_max = 0;
        td::check_mpi(MPI_Reduce(&rep.seconds, &secs, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
        td::check_mpi(MPI_Reduce(&halo, &halo_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
        std::string problem;
        if (env.rank() == 0 && gather) {
            try {
                // Both outputs new or neither (as the one-process CLI writes them).
                const host_matrix_view<const T> view(field.data(), ny, nx);
                std::optional<detail::output_file> png, npy;
                if (!image.empty()) {
                    const std::string bytes = encode_png(render_field<T>(view), image);
                    png.emplace(image);
                    png->write(bytes.data(), bytes.size());
                }
                if (!out.empty()) {
                    npy.emplace(out);
                    detail::write_npy_to<T>(*npy, view);
                }
                std::vector<detail::output_file*> all;
                for (auto* o : {&png, &npy})
                    if (*o) all.push_back(&**o);
                detail::commit_together(all);
            } catch (const std::exception& e) {
                problem = e.what();
            }
        }
        td::agree_on_errors(MPI_COMM_WORLD, problem, false);
        if (env.rank() != 0) return 0;
        const double glups = secs > 0 ? double(nx - 2) * double(ny - 2) * double(rep.iterations) / secs * 1e-9 : 0.0;
        if (a.flag("explain"))
            std::fprintf(stderr, "jacobi over %s: MPI_Cart grid %dx%d (rows x columns of the interior), each rank's "
                                 "part over its devices (%s) as %s; halos MPI_Isend/Irecv after the edge strips, "
                                 "residual MPI_Iallgather examined one check late\n",
                         ranks_text(env.size()).c_str(), rep.grid_rows, rep.grid_cols, devices.c_str(),
                         to_string(rep.decomposition).c_str());
        if (a.flag("json")) {
            const detail::json o = {{"nx", nx}, {"ny", ny}, {"dtype", std::string(to_string(type))},
                                    {"ranks", env.size()},
                                    {"grid", std::to_string(rep.grid_rows) + "x" + std::to_string(rep.grid_cols)},
                                    {"devices_per_rank", devices}, {"decomp", to_string(rep.decomposition)},
                                    {"iterations", rep.iterations}, {"seconds", secs}, {"glups", glups},
                                    {"residual", rep.residual}, {"converged", rep.converged},
                                    {"max_halo_bytes_per_rank", halo_max}};
            std::cout << detail::json_line(o) << "\n";
        } else {
            std::printf("jacobi %lldx%lld %s on %s (grid %dx%d, devices %s per rank): %lld iterations, %.4f s, "
                        "%.3f GLUP/s, residual %.6e%s\n",
                        (long long)nx, (long long)ny, std::string(to_string(type)).c_str(), ranks_text(env.size()).c_str(),
                        rep.grid_rows, rep.grid_cols, devices.c_str(), (long long)rep.iterations, secs, glups, rep.residual,
                        rep.converged ? " (converged)" : "");
            if (!out.empty()) std::printf("wrote %s\n", out.c_str());
            if (!image.empty()) std::printf("wrote %s\n", image.c_str());
        }
        return 0;
    });
}

}  // namespace

bool wants_ranks(int argc, char** argv) {
    if (td::launched_with_ranks()) return true;
    for (int i = 2; i < argc; ++i)
        if (std::string(argv[i]).rfind("--grid", 0) == 0 || std::string(argv[i]).rfind("--layers", 0) == 0) return true;
    return false;
}

int cmd_distributed(const std::string& cmd, int argc, char** argv) {
    const td::environment env(&argc, &argv);
    try {
        return cmd == "gemm" ? run_gemm(argc, argv, env) : run_jacobi(argc, argv, env);
    } catch (const td::collective_error& e) {
        // Every rank found the same: one message, one exit code, MPI finalized normally.
        if (env.rank() == 0) std::fprintf(stderr, "tilestream %s: error: %s\n", cmd.c_str(), e.what());
        return exit_usage;
    } catch (const td::collective_failure& e) {
        if (env.rank() == 0) std::fprintf(stderr, "tilestream %s: error: %s\n", cmd.c_str(), e.what());
        return exit_runtime;
    } catch (const std::exception& e) {
        // This rank alone may have failed: the others may wait for it in a collective.
        std::fprintf(stderr, "tilestream %s: rank %d: error: %s\n", cmd.c_str(), env.rank(), e.what());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, exit_runtime);
        return exit_runtime;
    }
}

}  // namespace tilestream::cli
