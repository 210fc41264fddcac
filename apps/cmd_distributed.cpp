// `tilestream gemm` and `tilestream jacobi` over MPI ranks (mpirun -np N tilestream gemm ... --grid PxQ):
// options parsed alike on every rank, errors every rank agrees on printed once by rank 0, an
// error on one rank printed with its rank and every rank ended (MPI_Abort).
#include "commands.hpp"
#include "core/json_text.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/distributed.hpp>
#include <tilestream/image.hpp>
#include <tilestream/npy.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace tilestream::cli {
namespace {

namespace td = tilestream::distributed;

constexpr int exit_usage = 2;
constexpr int exit_runtime = 3;

/// Threads per CPU device on a rank when --cpu-threads is not given: the cores shared by the
/// ranks on this node (OpenMPI says how many there are).
int default_cpu_threads() {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks = local ? std::max(1, std::atoi(local)) : 1;
    return std::max(1, int(std::thread::hardware_concurrency()) / ranks);
}

struct common_options {
    std::string grid, devices = "cpu", memory_budget;
    int cpu_threads = 0;
    bool json = false, explain = false, quiet = false;
};

/// The device spec with `cuda:local` read as the GPU of this rank's index on its node.
std::string rank_device_spec(std::string spec) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    for (auto at = spec.find("cuda:local"); at != std::string::npos; at = spec.find("cuda:local"))
        spec.replace(at, 10, "cuda:" + std::string(local ? local : "0"));
    return spec;
}

void add_common(CLI::App& app, common_options& o) {
    app.add_option("--grid", o.grid, "process grid PxQ (P*Q = ranks; gemm default: the fewest words per rank, jacobi: the most square)");
    app.add_option("--devices", o.devices, "each rank's devices, e.g. cpu, cpu:2, cuda:0, cuda:local (the GPU of the rank's index on its node)");
    app.add_option("--memory-budget", o.memory_budget, "budget of each device");
    app.add_option("--cpu-threads", o.cpu_threads, "threads per CPU device (default: cores / ranks on the node)");
    app.add_flag("--json", o.json, "one JSON object (rank 0)");
    app.add_flag("--explain", o.explain, "the grid, panels and words sent per rank beside the bounds");
    app.add_flag("--quiet", o.quiet, "accepted for the one-process commands' sake (ranks print no progress lines)");
}

/// Test-only: TILESTREAM_TEST_FAIL_RANK=R makes rank R fail alone in the middle of a run, to
/// show that every rank then ends with its message.
void test_failure_point(int rank) {
    if (const char* r = std::getenv("TILESTREAM_TEST_FAIL_RANK"); r && std::atoi(r) == rank)
        throw error("rank " + std::to_string(rank) + " failed on purpose (TILESTREAM_TEST_FAIL_RANK)");
}

/// Parses a command's options on every rank: false when --help was asked (rank 0 printed it); a
/// parse error is collective (every rank sees the same command line).
bool parse_or_help(CLI::App& app, int argc, char** argv, const td::environment& env) {
    try {
        app.parse(argc - 1, argv + 1);
    } catch (const CLI::CallForHelp&) {
        if (env.rank() == 0) std::cout << app.help();
        return false;
    } catch (const CLI::ParseError& e) {
        throw td::collective_error(e.what());
    }
    return true;
}

int run_gemm(int argc, char** argv, const td::environment& env) {
    CLI::App app{"tilestream gemm over MPI ranks: C <- alpha*op(A)*op(B) + beta*C on block-cyclic matrices", "gemm"};
    common_options co;
    std::string a, b, c, out, op_a = "n", op_b = "n", dtype_name = "f32";
    double alpha = 1, beta = 0;
    index_t m = 0, n = 0, k = 0, block = 128;
    int layers = 0;
    std::string rank_memory;
    app.add_option("--a", a, "A as .npy (every rank reads only its blocks)");
    app.add_option("--b", b, "B as .npy");
    app.add_option("--c", c, "C as .npy (needed when beta != 0)");
    app.add_option("--out", out, "write C as .npy (header by rank 0, blocks by every rank)");
    app.add_option("--m", m, "random inputs: rows of C")->check(CLI::PositiveNumber);
    app.add_option("--n", n, "random inputs: columns of C")->check(CLI::PositiveNumber);
    app.add_option("--k", k, "random inputs: inner dimension")->check(CLI::PositiveNumber);
    app.add_option("--dtype", dtype_name, "random inputs: f32 or f64 (default f32, as for one process)");
    app.add_option("--op-a", op_a, "n or t");
    app.add_option("--op-b", op_b, "n or t");
    app.add_option("--alpha", alpha);
    app.add_option("--beta", beta);
    app.add_option("--block", block, "block-cyclic block size (default 128)")->check(CLI::PositiveNumber);
    app.add_option("--layers", layers, "2.5D: replicate over c layers of a P x Q grid, ranks = P*Q*c (default: the model's choice)");
    app.add_option("--rank-memory", rank_memory, "memory each rank may hold for 2.5D layers (default: half the node's memory over its ranks)");
    add_common(app, co);
    if (!parse_or_help(app, argc, argv, env)) return 0;
    const bool files = !a.empty() || !b.empty();
    if (files && (a.empty() || b.empty() || out.empty()))
        throw td::collective_error("gemm: --a, --b and --out go together (over ranks the result is written to a file)");
    if (!files && (m == 0 || n == 0 || k == 0))
        throw td::collective_error("gemm: give --a, --b and --out (files) or --m, --n and --k (random inputs)");
    if (!files && !c.empty()) throw td::collective_error("gemm: --c needs --a and --b");
    if (!out.empty()) {
        try {
            check_output_path(out);
        } catch (const file_error& e) {
            throw td::collective_error(e.what());
        }
    }
    op opa, opb;
    try {
        opa = parse_op(op_a);
        opb = parse_op(op_b);
    } catch (const invalid_argument& e) {
        throw td::collective_error(e.what());
    }
    dtype type = dtype::f64;
    if (files) {  // the shape decides the grid
        const auto sa = td::npy_shape(MPI_COMM_WORLD, a), sb = td::npy_shape(MPI_COMM_WORLD, b);
        m = opa == op::n ? sa.first : sa.second;
        k = opa == op::n ? sa.second : sa.first;
        n = opb == op::n ? sb.second : sb.first;
        type = td::npy_dtype(MPI_COMM_WORLD, a);
    } else {
        try {
            type = parse_dtype(dtype_name);
        } catch (const invalid_argument& e) {
            throw td::collective_error(e.what());
        }
    }
    // The grid and layers: the model's fewest words per rank within the memory a rank may hold.
    if (layers < 0 || (layers == 0 && app.count("--layers") > 0))
        throw td::collective_error("--layers must be at least 1, got " + std::to_string(layers));
    std::size_t rank_bytes = 0;
    if (!rank_memory.empty()) {
        try {
            rank_bytes = parse_bytes(rank_memory);
        } catch (const invalid_argument& e) {
            throw td::collective_error(std::string("--rank-memory: ") + e.what());
        }
    } else {
        const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0)
            rank_bytes = std::size_t(pages) * std::size_t(page) / 2 / std::size_t(local ? std::max(1, std::atoi(local)) : 1);
    }
    std::pair<int, int> given{0, 0};
    if (!co.grid.empty()) given = td::parse_grid(co.grid);
    const td::pgemm_rank_plan plan =
        td::plan_pgemm(opa, opb, m, n, k, env.size(), size_of(type), block, rank_bytes, layers, given.first, given.second);
    const int p = plan.grid_rows, q = plan.grid_cols, c_layers = plan.layers;
    const td::layered_grid lgrid(MPI_COMM_WORLD, p, q, c_layers);
    const td::process_grid& grid = lgrid.layer();

    context_options oo;
    if (!co.memory_budget.empty()) oo.memory_budget = parse_bytes(co.memory_budget);
    oo.cpu_threads = co.cpu_threads > 0 ? co.cpu_threads : default_cpu_threads();
    tilestream::context ctx(rank_device_spec(co.devices), oo);
    td::pgemm_options po;
    po.context = &ctx;

    td::pgemm_report rep;
    if (files) {
        td::npy_gemm_request r{a, b, c, out, opa, opb, alpha, beta, block};
        test_failure_point(env.rank());
        const auto res = td::npy_gemm(lgrid, r, po);
        rep = res.report;
        type = res.type;
        m = res.m;
        n = res.n;
        k = res.k;
    } else {
        rep = visit_real_dtype(type, "gemm over MPI ranks", [&]<class T>() {
            // Random blocks, each layer-0 rank its own (a timing run: the result is not written);
            // the other layers hold no matrices.
            auto local = [&](index_t rows, index_t cols, int* desc, unsigned seed) {
                const index_t lr = td::local_count(rows, block, grid.my_row(), 0, p);
                const index_t lc = td::local_count(cols, block, grid.my_col(), 0, q);
                const int d[9] = {1, 0, int(rows), int(cols), int(block), int(block), 0, 0, int(std::max<index_t>(1, lr))};
                std::copy(d, d + 9, desc);
                std::vector<T> v(lgrid.my_layer() == 0 ? std::size_t(std::max<index_t>(1, lr) * std::max<index_t>(1, lc)) : 0);
                std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + std::uint64_t(env.rank()) + 1;
                for (auto& x : v) {
                    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                    x = T(double(s >> 11) * 0x1.0p-53 - 0.5);
                }
                return v;
            };
            int da[9], db[9], dc[9];
            const bool na = opa == op::n, nb = opb == op::n;
            auto av = local(na ? m : k, na ? k : m, da, 1), bv = local(nb ? k : n, nb ? n : k, db, 2), cv = local(m, n, dc, 3);
            test_failure_point(env.rank());
            td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
            return td::pgemm<T>(lgrid, opa, opb, m, n, k, T(alpha), av.data(), 1, 1, da, bv.data(), 1, 1, db, T(beta),
                                cv.data(), 1, 1, dc, po);
        });
    }
    // Per-rank figures: the largest over the ranks.
    unsigned long long mine[2] = {rep.bytes_sent, rep.bytes_received}, most[2] = {0, 0}, sum[2] = {0, 0};
    td::check_mpi(MPI_Reduce(mine, most, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
    td::check_mpi(MPI_Reduce(mine, sum, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    double secs = 0;
    td::check_mpi(MPI_Reduce(&rep.seconds, &secs, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
    if (env.rank() != 0) return 0;
    const double word = double(size_of(type));
    const td::pgemm_traffic& model = plan.traffic;
    // The comparisons: SUMMA with one layer on its best grid, and PDGEMM there.
    const td::pgemm_rank_plan flat = td::plan_pgemm(opa, opb, m, n, k, env.size(), size_of(type), block, 0, 1);
    const double gflops = secs > 0 ? 2.0 * double(m) * double(n) * double(k) / secs * 1e-9 : 0.0;
    const double mean_sent = double(sum[0]) / word / env.size();
    if (co.explain) {
        std::string considered;
        for (const auto& cand : plan.candidates)
            considered += (considered.empty() ? "" : "; ") + std::string("c = ") + std::to_string(cand.layers) + " on " +
                          std::to_string(cand.grid_rows) + "x" + std::to_string(cand.grid_cols) + ": " +
                          std::to_string((long long)std::llround(cand.words)) + " words (busiest rank " +
                          std::to_string((long long)std::llround(cand.busiest_words)) + "), " +
                          format_bytes(std::size_t(cand.memory_bytes)) + (cand.fits ? "" : " (over the memory limit)");
        std::fprintf(stderr,
                     "grid %dx%d over %d ranks, c = %d layer%s (%s), block %lld, SUMMA panels %lld of width up to %lld "
                     "per layer (two broadcasts in flight), op(A) %s, op(B) %s\n"
                     "layers considered (words per rank, memory per rank; limit %s): %s\n"
                     "words sent per rank (mean; equals the mean received): measured %.0f; model %.0f (SUMMA %.0f, "
                     "replication %.0f, reduction %.0f, transposes %.0f); busiest rank sent %.0f, received %.0f "
                     "(model %.0f)\n"
                     "SUMMA with c = 1 on %dx%d: %.0f; PDGEMM on %dx%d: %.0f; lower bound: memory-independent %.0f, order "
                     "2mnk/(p sqrt(M)) %.0f with M = %.0f words per rank\n",
                     p, q, env.size(), c_layers, c_layers == 1 ? "" : "s",
                     c_layers == 1 ? "2-D SUMMA" : "2.5D: k cut over the layers, C reduced onto layer 0", (long long)block,
                     (long long)rep.panels, (long long)rep.panel_width,
                     rep.redistributed_a ? "redistributed to C's rows" : "aligned with C",
                     rep.redistributed_b ? "redistributed to C's columns" : "aligned with C",
                     rank_bytes ? format_bytes(rank_bytes).c_str() : "none", considered.c_str(), mean_sent, model.words,
                     model.summa_words, model.replicate_words, model.reduce_words, model.redistribute_words,
                     double(most[0]) / word, double(most[1]) / word, model.busiest_words, flat.grid_rows, flat.grid_cols, flat.traffic.words,
                     flat.grid_rows, flat.grid_cols, flat.traffic.pdgemm_words, model.memory_independent_words,
                     model.lower_bound_words,
                     (double(m) * double(k) + double(k) * double(n) + double(m) * double(n)) / (p * q));
    }
    if (co.json) {
        const detail::json o = {{"m", m}, {"n", n}, {"k", k}, {"dtype", std::string(to_string(type))},
                                {"ranks", env.size()}, {"grid", std::to_string(p) + "x" + std::to_string(q)},
                                {"layers", c_layers}, {"rank_memory_bytes", rank_bytes},
                                {"block", block}, {"seconds", secs}, {"gflops", gflops}, {"panels", rep.panels},
                                {"panel_width", rep.panel_width}, {"max_bytes_sent_per_rank", most[0]},
                                {"max_bytes_received_per_rank", most[1]},
                                {"mean_bytes_sent_per_rank", double(sum[0]) / env.size()},
                                {"mean_bytes_received_per_rank", double(sum[1]) / env.size()},
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
                                {"out", out}};
        std::cout << detail::json_line(o) << "\n";
    } else {
        std::printf("gemm %lldx%lldx%lld %s on %d ranks (grid %dx%d, %d layer%s, block %lld, devices %s per rank): %.4f s, "
                    "%.1f GFLOP/s, %.1f MiB sent per rank (largest), %.3f MiB on average (model %.3f)\n",
                    (long long)m, (long long)n, (long long)k, std::string(to_string(type)).c_str(), env.size(), p, q,
                    c_layers, c_layers == 1 ? "" : "s", (long long)block, co.devices.c_str(), secs, gflops,
                    double(most[0]) / (1 << 20), mean_sent * word / (1 << 20), model.words * word / (1 << 20));
        if (!out.empty()) std::printf("wrote %s\n", out.c_str());
    }
    return 0;
}

int run_jacobi(int argc, char** argv, const td::environment& env) {
    CLI::App app{"tilestream jacobi over MPI ranks: the 2-D Laplace equation on a grid of ranks", "jacobi"};
    common_options co;
    index_t nx = 1024, ny = 1024;
    std::string dtype_name = "f32", image, out, decomp = "auto", overlap = "on";
    td::distributed_jacobi_options jo;
    app.add_option("--nx", nx, "grid columns, boundary included");
    app.add_option("--ny", ny, "grid rows, boundary included");
    app.add_option("--dtype", dtype_name, "f32 or f64");
    app.add_option("--iters", jo.iters, "most iterations (default 1000)");
    app.add_option("--tol", jo.tol, "stop when the residual is below (default 0: never)");
    app.add_option("--check-every", jo.check_every, "residual every K iterations (default 10)");
    app.add_option("--image", image, "gather the field to rank 0 and write it as a PNG");
    app.add_option("--out", out, "gather the field to rank 0 and write it as .npy");
    app.add_option("--decomp", decomp, "each rank's part over its devices: rows | cols | tiles | tiles:PxQ | auto");
    app.add_option("--overlap", overlap, "edge strips first, halos sent while the interior is swept (default on)");
    add_common(app, co);
    if (!parse_or_help(app, argc, argv, env)) return 0;
    for (const auto* path : {&image, &out})
        if (!path->empty()) {
            try {
                check_output_path(*path);
            } catch (const file_error& e) {
                throw td::collective_error(e.what());
            }
        }
    if (!co.grid.empty()) std::tie(jo.grid_rows, jo.grid_cols) = td::parse_grid(co.grid);
    dtype type;
    try {
        type = parse_dtype(dtype_name);
        jo.decomposition = parse_jacobi_decomposition(decomp);
        jo.overlap = parse_on_off("overlap", overlap);
    } catch (const invalid_argument& e) {
        throw td::collective_error(e.what());
    }
    context_options oo;
    if (!co.memory_budget.empty()) oo.memory_budget = parse_bytes(co.memory_budget);
    oo.cpu_threads = co.cpu_threads > 0 ? co.cpu_threads : default_cpu_threads();
    tilestream::context ctx(rank_device_spec(co.devices), oo);
    jo.devices = ctx.devices();
    test_failure_point(env.rank());
    return visit_real_dtype(type, "jacobi", [&]<class T>() {
        std::vector<T> field;
        const bool gather = !image.empty() || !out.empty();
        const auto rep = td::distributed_jacobi<T>(MPI_COMM_WORLD, nx, ny, jo, gather ? &field : nullptr);
        double secs = 0;
        unsigned long long halo = rep.halo_bytes, halo_max = 0;
        td::check_mpi(MPI_Reduce(&rep.seconds, &secs, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
        td::check_mpi(MPI_Reduce(&halo, &halo_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
        if (env.rank() != 0) return 0;
        if (gather) {
            const host_matrix_view<const T> view(field.data(), ny, nx);
            if (!out.empty()) write_npy<T>(out, view);
            if (!image.empty()) write_field_png<T>(image, view);
        }
        const double glups = secs > 0 ? double(nx - 2) * double(ny - 2) * double(rep.iterations) / secs * 1e-9 : 0.0;
        if (co.explain)
            std::fprintf(stderr, "jacobi over %d ranks: MPI_Cart grid %dx%d (rows x columns of the interior), each rank's "
                                 "part over its devices (%s) as %s; halos MPI_Isend/Irecv after the edge strips, "
                                 "residual MPI_Iallgather examined one check late\n",
                         env.size(), rep.grid_rows, rep.grid_cols, co.devices.c_str(), to_string(rep.decomposition).c_str());
        if (co.json) {
            const detail::json o = {{"nx", nx}, {"ny", ny}, {"dtype", std::string(to_string(type))},
                                    {"ranks", env.size()},
                                    {"grid", std::to_string(rep.grid_rows) + "x" + std::to_string(rep.grid_cols)},
                                    {"devices_per_rank", co.devices}, {"decomp", to_string(rep.decomposition)},
                                    {"iterations", rep.iterations}, {"seconds", secs}, {"glups", glups},
                                    {"residual", rep.residual}, {"converged", rep.converged},
                                    {"max_halo_bytes_per_rank", halo_max}};
            std::cout << detail::json_line(o) << "\n";
        } else {
            std::printf("jacobi %lldx%lld %s on %d ranks (grid %dx%d, devices %s per rank): %lld iterations, %.4f s, "
                        "%.3f GLUP/s, residual %.6e%s\n",
                        (long long)nx, (long long)ny, std::string(to_string(type)).c_str(), env.size(), rep.grid_rows,
                        rep.grid_cols, co.devices.c_str(), (long long)rep.iterations, secs, glups, rep.residual,
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
    } catch (const std::exception& e) {
        // This rank alone may have failed: the others may wait for it in a collective.
        std::fprintf(stderr, "tilestream %s: rank %d: error: %s\n", cmd.c_str(), env.rank(), e.what());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, exit_runtime);
        return exit_runtime;
    }
}

}  // namespace tilestream::cli
