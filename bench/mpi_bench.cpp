// Benchmarks over MPI ranks (run under mpirun): tilestream's SUMMA pgemm against ScaLAPACK's
// PDGEMM/PSGEMM on the same grid (the model's best for the shape), descriptors and data, for
// square, tall-skinny and offset sub-matrix shapes (time: median of the slowest rank; bytes
// received per rank, ScaLAPACK's counted by intercepting its MPI point-to-point calls), or the
// distributed Jacobi solve at this rank count (for strong scaling). JSON by rank 0.
// With --layers c > 1 tilestream runs 2.5D (c layers of the squarest grid of ranks / c, the
// matrices on layer 0), ScaLAPACK still on the squarest 2-D grid of all the ranks.
// usage: mpirun -np 4 mpi_bench gemm --sizes f64:4096,f32:65536x512x512,f64:4096+77 --block 128 --reps 3 [--layers 1]
//          --git-hash H --out FILE   (PZGEMM/PCGEMM rows come with complex pgemm)
//        mpirun -np N mpi_bench jacobi --nx 4096 --ny 4096 --iters 200 --git-hash H --out FILE
#include "bench_common.hpp"

#include <tilestream/pblas.hpp>
#include <tilestream/distributed.hpp>

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <complex>
#include <random>

extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int rows, int cols);
void Cblacs_gridexit(int context);
}

// Bytes this rank receives through MPI point-to-point calls (BLACS, hence ScaLAPACK, communicates
// only so); the executable exports these, so libscalapack's calls land here first.
namespace {
std::atomic<unsigned long long> p2p_bytes_received{0};
bool counting = false;
void count(int n, MPI_Datatype t) {
    if (!counting) return;
    int size = 0;
    PMPI_Type_size(t, &size);
    p2p_bytes_received += static_cast<unsigned long long>(n) * static_cast<unsigned long long>(size);
}
}  // namespace

extern "C" {
int MPI_Recv(void* buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status* st) {
    count(n, t);
    return PMPI_Recv(buf, n, t, src, tag, c, st);
}
int MPI_Irecv(void* buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* r) {
    count(n, t);
    return PMPI_Irecv(buf, n, t, src, tag, c, r);
}
int MPI_Sendrecv(const void* sb, int sn, MPI_Datatype st, int dst, int stag, void* rb, int rn, MPI_Datatype rt, int src,
                 int rtag, MPI_Comm c, MPI_Status* s) {
    count(rn, rt);
    return PMPI_Sendrecv(sb, sn, st, dst, stag, rb, rn, rt, src, rtag, c, s);
}
}

namespace ts = tilestream;
namespace td = tilestream::distributed;
namespace tb = tilestream::bench;

namespace {

double slowest(double s) {
    double out = 0;
    td::check_mpi(MPI_Allreduce(&s, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
}

unsigned long long largest(unsigned long long v) {
    unsigned long long out = 0;
    td::check_mpi(MPI_Allreduce(&v, &out, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
}

/// This rank's part of a rows x cols block-cyclic matrix (blocks of `block` from process (0, 0)),
/// random, and its descriptor.
template <class T>
struct local_matrix {
    std::vector<T> data;
    int desc[9] = {};
    local_matrix(const td::process_grid& g, int ctxt, int rows, int cols, int block, std::mt19937_64& rng) {
        const int lr = int(td::local_count(rows, block, g.my_row(), 0, g.rows()));
        const int lc = int(td::local_count(cols, block, g.my_col(), 0, g.cols()));
        const int d[9] = {1, ctxt, rows, cols, block, block, 0, 0, std::max(1, lr)};
        std::copy(d, d + 9, desc);
        data.resize(std::size_t(std::max(1, lr)) * std::size_t(std::max(1, lc)));
        std::uniform_real_distribution<double> u(-1, 1);
        for (auto& x : data) {
            if constexpr (ts::is_complex_v<T>) {
                const double re = u(rng);
                x = T(ts::real_type_t<T>(re), ts::real_type_t<T>(u(rng)));
            } else {
                x = T(u(rng));
            }
        }
    }
};

/// One shape: C(m x n) = A(ia.., ja..) B(ib.., jb..), A and B sub-matrices from offset `off`
/// (which moves op(A) off C's rows: tilestream redistributes, PBLAS realigns its own way), on the
/// grid the model picks for the shape (both libraries on it), or tilestream over layers.
/// --step-seconds: run tilestream on a context of its own per rank (1 CPU thread) with this
/// context_options::step_seconds (0: one unsplit call per local product). Without it, pgemm opens
/// its default context, as a library call without one does: the same settings as the ScaLAPACK
/// drop-in's rank context (1 thread, no steps without a cancel flag or progress callback).
double step_seconds_option = -1;

template <class T>
ts::detail::json gemm_case(int m, int n, int k, int off, int block, int reps, int layers) {
    int ranks = 1;
    td::check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &ranks), "MPI_Comm_size");
    const auto [p, q] = td::choose_gemm_grid(m, n, k, ranks);
    const td::process_grid grid(MPI_COMM_WORLD, p, q);
    int ctxt = 0;
    Cblacs_get(-1, 0, &ctxt);
    Cblacs_gridinit(&ctxt, "Row", p, q);
    std::mt19937_64 rng(42 + grid.rank());
    local_matrix<T> a(grid, ctxt, m + off, k + off, block, rng), b(grid, ctxt, k + off, n + off, block, rng),
        c(grid, ctxt, m, n, block, rng);
    const int ia = off + 1, one = 1;
    td::pgemm_options po;
    std::optional<ts::context> own;
    if (step_seconds_option >= 0) {
        ts::context_options co;
        co.cpu_threads = 1;
        co.step_seconds = step_seconds_option;
        po.context = &own.emplace("cpu", co);
    }
    // Over layers (square shapes without offsets): tilestream 2.5D on the squarest grid of ranks / c.
    const auto [lp, lq] = td::square_grid(ranks / layers);
    const td::layered_grid lg(MPI_COMM_WORLD, lp, lq, layers);
    const bool layered = layers > 1;
    const td::process_grid& lgrid = layered ? lg.layer() : grid;
    std::optional<local_matrix<T>> la, lb, lcm;
    if (layered && lg.my_layer() == 0) {
        la.emplace(lgrid, 0, m + off, k + off, block, rng);
        lb.emplace(lgrid, 0, k + off, n + off, block, rng);
        lcm.emplace(lgrid, 0, m, n, block, rng);
    }
    const int ldesc[9] = {1, 0, 0, 0, block, block, 0, 0, 1};

    std::vector<double> ours, theirs;
    unsigned long long ours_bytes = 0, theirs_bytes = 0;
    auto run_ours = [&] {
        td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        const auto rep =
            layered ? td::pgemm<T>(lg, ts::op::n, ts::op::n, m, n, k, T(1), la ? la->data.data() : nullptr, ia, ia,
                                   la ? la->desc : ldesc, lb ? lb->data.data() : nullptr, ia, ia, lb ? lb->desc : ldesc, T(0),
                                   lcm ? lcm->data.data() : nullptr, 1, 1, lcm ? lcm->desc : ldesc, po)
                    : td::pgemm<T>(grid, ts::op::n, ts::op::n, m, n, k, T(1), a.data.data(), ia, ia, a.desc, b.data.data(),
                                   ia, ia, b.desc, T(0), c.data.data(), 1, 1, c.desc, po);
        ours_bytes = rep.bytes_received;
        return slowest(rep.seconds);
    };
    auto run_theirs = [&] {
        td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        p2p_bytes_received = 0;
        counting = true;
        const auto t0 = std::chrono::steady_clock::now();
        const T alpha = 1, beta = 0;
        if constexpr (std::is_same_v<T, float>)
            psgemm_("N", "N", &m, &n, &k, &alpha, a.data.data(), &ia, &ia, a.desc, b.data.data(), &ia, &ia, b.desc, &beta,
                    c.data.data(), &one, &one, c.desc);
        else if constexpr (std::is_same_v<T, std::complex<float>>)
            pcgemm_("N", "N", &m, &n, &k, &alpha, a.data.data(), &ia, &ia, a.desc, b.data.data(), &ia, &ia, b.desc, &beta,
                    c.data.data(), &one, &one, c.desc);
        else if constexpr (std::is_same_v<T, std::complex<double>>)
            pzgemm_("N", "N", &m, &n, &k, &alpha, a.data.data(), &ia, &ia, a.desc, b.data.data(), &ia, &ia, b.desc, &beta,
                    c.data.data(), &one, &one, c.desc);
        else
            pdgemm_("N", "N", &m, &n, &k, &alpha, a.data.data(), &ia, &ia, a.desc, b.data.data(), &ia, &ia, b.desc, &beta,
                    c.data.data(), &one, &one, c.desc);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        counting = false;
        theirs_bytes = p2p_bytes_received;
        return slowest(s);
    };
    run_ours();  // warm-up of both
    run_theirs();
    for (int r = 0; r < reps; ++r) {  // alternated
        ours.push_back(run_ours());
        theirs.push_back(run_theirs());
    }
    Cblacs_gridexit(ctxt);
    const double t_ours = tb::median(ours), t_theirs = tb::median(theirs);
    // 8mnk for complex (a complex multiply-add is 4 real ones).
    const double flops = double(ts::dtype_traits(ts::dtype_of<T>()).flops_per_multiply_add) * double(m) * double(n) * double(k);
    const auto model = td::model_pgemm_traffic(ts::op::n, ts::op::n, m, n, k, lgrid.rows(), lgrid.cols(), lg.layers(), block);
    const unsigned long long ours_most = largest(ours_bytes), theirs_most = largest(theirs_bytes);
    const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    const ts::detail::json o = {{"dtype", std::string(ts::to_string(ts::dtype_of<T>()))}, {"m", m}, {"n", n}, {"k", k},
                                {"shape", shape}, {"offset", off}, {"block", block},
                                {"grid", std::to_string(p) + "x" + std::to_string(q)}, {"reps", reps},
                                {"tilestream_grid", std::to_string(lgrid.rows()) + "x" + std::to_string(lgrid.cols())},
                                {"layers", lg.layers()}, {"tilestream_context", own ? "its own, cpu, 1 thread" : "pgemm's default (cpu, 1 thread; calls with no cancel flag or step callback are not cut)"},
                                {"step_seconds", own ? own->options().step_seconds : 0.0},
                                {"tilestream_seconds", t_ours}, {"tilestream_gflops", flops / t_ours * 1e-9},
                                {"scalapack_seconds", t_theirs}, {"scalapack_gflops", flops / t_theirs * 1e-9},
                                {"ratio_scalapack_time_to_tilestream", t_theirs / t_ours},
                                {"tilestream_max_bytes_received_per_rank", ours_most},
                                {"scalapack_max_bytes_received_per_rank", theirs_most},
                                {"model_summa_bytes_per_rank", model.summa_words * sizeof(T)},
                                {"model_bytes_per_rank", model.words * sizeof(T)},
                                {"model_busiest_rank_bytes", model.busiest_words * sizeof(T)}};
    if (grid.rank() == 0)
        std::printf("%s %s offset %d grid %dx%d (tilestream %dx%d x %d layers): tilestream %.3f s (%.1f GFLOP/s), ScaLAPACK "
                    "%.3f s (%.1f GFLOP/s), ratio %.2f; bytes received per rank %llu vs %llu\n",
                    std::string(ts::to_string(ts::dtype_of<T>())).c_str(), shape.c_str(), off, p, q, lgrid.rows(),
                    lgrid.cols(), lg.layers(), t_ours, flops / t_ours * 1e-9, t_theirs, flops / t_theirs * 1e-9,
                    t_theirs / t_ours, ours_most, theirs_most);
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    td::environment env(&argc, &argv);
    if (argc < 2) return 2;
    const std::string mode = argv[1];
    tb::arguments args(argc - 1, argv + 1,
                       "usage: mpi_bench gemm [--sizes f64:4096,f32:8192,c64:2048] [--block 128] [--reps 3] [--layers 1] [--step-seconds S] | jacobi [--nx N] "
                       "[--ny N] [--iters N] [--dtype f32]; both [--git-hash H] [--out FILE]");
    const std::string hash = args.get("git-hash", "unknown"), out = args.get("out", "");
    tb::json_builder top = tb::result_header("mpi_" + mode, hash, "cpu (1 thread) per rank");
    top.add("ranks", env.size());
    if (mode == "gemm") {
        // Shapes: DTYPE:N (square), DTYPE:MxNxK, each with an optional +OFF (A and B sub-matrices
        // from row and column OFF+1, C from 1: op(A) off C's rows).
        const std::string sizes =
            args.get("sizes", "f64:4096,f32:8192,f64:65536x512x512,f32:65536x512x512,f64:4096+77,c64:2048,c32:2048,c64:2048+77");
        const int block = int(args.number("block", 128)), reps = int(args.number("reps", 3));
        const int layers = int(args.number("layers", 1));
        step_seconds_option = args.real("step-seconds", -1);
        if (!args.finish()) return 2;
        if (layers < 1 || env.size() % layers != 0) {
            if (env.rank() == 0) std::fprintf(stderr, "mpi_bench: --layers %d does not divide the %d ranks\n", layers, env.size());
            return 2;
        }
        ts::detail::json rows = ts::detail::json::array();
        for (const auto& s : tb::split(sizes, ',')) {
            const auto colon = s.find(':'), plus = s.find('+');
            const std::string dims = s.substr(colon + 1, plus == std::string::npos ? std::string::npos : plus - colon - 1);
            const int off = plus == std::string::npos ? 0 : std::stoi(s.substr(plus + 1));
            int m = 0, n = 0, k = 0;
            if (std::sscanf(dims.c_str(), "%dx%dx%d", &m, &n, &k) != 3) m = n = k = std::stoi(dims);
            // 2.5D only for plain square shapes; the others on the model's 2-D grid.
            const int c = (m == n && n == k && off == 0) ? layers : 1;
            // f32, f64, c32, c64: ScaLAPACK's PSGEMM, PDGEMM, PCGEMM, PZGEMM beside it.
            rows.push_back(ts::visit_dtype(ts::parse_dtype(s.substr(0, colon)), [&]<class T>() {
                return gemm_case<T>(m, n, k, off, block, reps, c);
            }));
        }
        top.add("results", rows);
    } else if (mode == "jacobi") {
        const ts::index_t nx = args.number("nx", 4096), ny = args.number("ny", 4096);
        td::distributed_jacobi_options jo;
        jo.iters = args.number("iters", 200);
        const std::string type = args.get("dtype", "f32");
        if (!args.finish()) return 2;
        std::vector<double> secs;
        for (int r = 0; r < 3; ++r) {
            const auto rep = type == "f64" ? td::distributed_jacobi<double>(MPI_COMM_WORLD, nx, ny, jo, nullptr)
                                           : td::distributed_jacobi<float>(MPI_COMM_WORLD, nx, ny, jo, nullptr);
            secs.push_back(slowest(rep.seconds));
        }
        const double s = tb::median(secs);
        top.add("nx", nx).add("ny", ny).add("dtype", type).add("iters", jo.iters).add("seconds", s);
        top.add("glups", double(nx - 2) * double(ny - 2) * double(jo.iters) / s * 1e-9);
        if (env.rank() == 0) std::printf("jacobi %lldx%lld %s on %d ranks: %.3f s\n", (long long)nx, (long long)ny, type.c_str(), env.size(), s);
    } else {
        return 2;
    }
    if (env.rank() == 0 && !out.empty()) tb::write_file_atomically(out, top.text());
    return 0;
}
