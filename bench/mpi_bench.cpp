// Benchmarks over MPI ranks (run under mpirun): tilestream's SUMMA pgemm against ScaLAPACK's
// PDGEMM/PSGEMM on the same grid, descriptors and data (time: median of the slowest rank; bytes
// received per rank, ScaLAPACK's counted by intercepting its MPI point-to-point calls), or the
// distributed Jacobi solve at this rank count (for strong scaling). JSON by rank 0.
// With --layers c > 1 tilestream runs 2.5D (c layers of the squarest grid of ranks / c, the
// matrices on layer 0), ScaLAPACK still on the squarest 2-D grid of all the ranks.
// usage: mpirun -np 4 mpi_bench gemm --sizes f64:4096,f32:8192 --block 128 --reps 3 [--layers 1] --git-hash H --out FILE
//        mpirun -np N mpi_bench jacobi --nx 4096 --ny 4096 --iters 200 --git-hash H --out FILE
#include "bench_common.hpp"

#include <tilestream/distributed.hpp>

#include <mpi.h>

#include <atomic>
#include <random>

extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int rows, int cols);
void Cblacs_gridexit(int context);
void psgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
             const int*, const int*, const float*, const int*, const int*, const int*, const float*, float*, const int*,
             const int*, const int*);
void pdgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*, const int*,
             const int*, const int*, const double*, const int*, const int*, const int*, const double*, double*,
             const int*, const int*, const int*);
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

template <class T>
void scalapack_gemm(int m, int n, int k, T alpha, const T* a, const int* da, const T* b, const int* db, T beta, T* c,
                    const int* dc) {
    const int one = 1;
    if constexpr (std::is_same_v<T, float>)
        psgemm_("N", "N", &m, &n, &k, &alpha, a, &one, &one, da, b, &one, &one, db, &beta, c, &one, &one, dc);
    else
        pdgemm_("N", "N", &m, &n, &k, &alpha, a, &one, &one, da, b, &one, &one, db, &beta, c, &one, &one, dc);
}

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

template <class T>
ts::detail::json gemm_case(const td::process_grid& grid, int ctxt, const td::layered_grid& lg, int n, int block, int reps) {
    const int lr = int(td::local_count(n, block, grid.my_row(), 0, grid.rows()));
    const int lc = int(td::local_count(n, block, grid.my_col(), 0, grid.cols()));
    const int desc[9] = {1, ctxt, n, n, block, block, 0, 0, std::max(1, lr)};
    const std::size_t local = std::size_t(std::max(1, lr)) * std::size_t(std::max(1, lc));
    std::vector<T> a(local), b(local), c(local);
    std::mt19937_64 rng(42 + grid.rank());
    std::uniform_real_distribution<double> u(-1, 1);
    for (auto* v : {&a, &b}) for (auto& x : *v) x = T(u(rng));
    ts::context ctx("cpu", {.cpu_threads = 1});
    td::pgemm_options po;
    po.context = &ctx;
    // tilestream's operands: the same on one layer; over layers, on layer 0's grid (nothing elsewhere).
    const td::process_grid& lgrid = lg.layer();
    const bool layered = lg.layers() > 1;
    const int llr = int(td::local_count(n, block, lgrid.my_row(), 0, lgrid.rows()));
    const int llc = int(td::local_count(n, block, lgrid.my_col(), 0, lgrid.cols()));
    const int ldesc[9] = {1, 0, n, n, block, block, 0, 0, std::max(1, llr)};
    const std::size_t llocal = layered && lg.my_layer() == 0 ? std::size_t(std::max(1, llr)) * std::size_t(std::max(1, llc)) : 0;
    std::vector<T> la(llocal), lb(llocal), lcm(llocal);
    for (auto* v : {&la, &lb}) for (auto& x : *v) x = T(u(rng));

    std::vector<double> ours, theirs;
    unsigned long long ours_bytes = 0, theirs_bytes = 0;
    auto run_ours = [&] {
        td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        const auto rep = layered ? td::pgemm<T>(lg, ts::op::n, ts::op::n, n, n, n, T(1), la.data(), 1, 1, ldesc, lb.data(),
                                                1, 1, ldesc, T(0), lcm.data(), 1, 1, ldesc, po)
                                 : td::pgemm<T>(grid, ts::op::n, ts::op::n, n, n, n, T(1), a.data(), 1, 1, desc, b.data(), 1,
                                                1, desc, T(0), c.data(), 1, 1, desc, po);
        ours_bytes = rep.bytes_received;
        return slowest(rep.seconds);
    };
    auto run_theirs = [&] {
        td::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        p2p_bytes_received = 0;
        counting = true;
        const auto t0 = std::chrono::steady_clock::now();
        scalapack_gemm<T>(n, n, n, T(1), a.data(), desc, b.data(), desc, T(0), c.data(), desc);
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
    const double t_ours = tb::median(ours), t_theirs = tb::median(theirs);
    const double flops = 2.0 * double(n) * double(n) * double(n);
    const auto model = td::model_pgemm_traffic(ts::op::n, ts::op::n, n, n, n, lgrid.rows(), lgrid.cols(), lg.layers(), block);
    const unsigned long long ours_most = largest(ours_bytes), theirs_most = largest(theirs_bytes);
    const ts::detail::json o = {{"dtype", std::string(ts::to_string(ts::dtype_of<T>()))}, {"n", n}, {"block", block},
                                {"grid", std::to_string(grid.rows()) + "x" + std::to_string(grid.cols())}, {"reps", reps},
                                {"tilestream_grid", std::to_string(lgrid.rows()) + "x" + std::to_string(lgrid.cols())},
                                {"layers", lg.layers()},
                                {"tilestream_seconds", t_ours}, {"tilestream_gflops", flops / t_ours * 1e-9},
                                {"scalapack_seconds", t_theirs}, {"scalapack_gflops", flops / t_theirs * 1e-9},
                                {"ratio_scalapack_time_to_tilestream", t_theirs / t_ours},
                                {"tilestream_max_bytes_received_per_rank", ours_most},
                                {"scalapack_max_bytes_received_per_rank", theirs_most},
                                {"model_summa_bytes_per_rank", model.summa_words * sizeof(T)},
                                {"model_bytes_per_rank", model.words * sizeof(T)},
                                {"model_busiest_rank_bytes", model.busiest_words * sizeof(T)}};
    if (grid.rank() == 0)
        std::printf("%s n=%d grid %dx%d (tilestream %dx%d x %d layers): tilestream %.3f s (%.1f GFLOP/s), ScaLAPACK %.3f s (%.1f GFLOP/s); bytes received "
                    "per rank %llu vs %llu\n",
                    std::string(ts::to_string(ts::dtype_of<T>())).c_str(), n, grid.rows(), grid.cols(), lgrid.rows(),
                    lgrid.cols(), lg.layers(), t_ours,
                    flops / t_ours * 1e-9, t_theirs, flops / t_theirs * 1e-9, ours_most, theirs_most);
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    td::environment env(&argc, &argv);
    if (argc < 2) return 2;
    const std::string mode = argv[1];
    tb::arguments args(argc - 1, argv + 1,
                       "usage: mpi_bench gemm [--sizes f64:4096,f32:8192] [--block 128] [--reps 3] [--layers 1] | jacobi [--nx N] "
                       "[--ny N] [--iters N] [--dtype f32]; both [--git-hash H] [--out FILE]");
    const std::string hash = args.get("git-hash", "unknown"), out = args.get("out", "");
    tb::json_builder top = tb::result_header("mpi_" + mode, hash, "cpu (1 thread) per rank");
    top.add("ranks", env.size());
    if (mode == "gemm") {
        const std::string sizes = args.get("sizes", "f64:4096,f32:8192");
        const int block = int(args.number("block", 128)), reps = int(args.number("reps", 3));
        const int layers = int(args.number("layers", 1));
        if (!args.finish()) return 2;
        if (layers < 1 || env.size() % layers != 0) {
            if (env.rank() == 0) std::fprintf(stderr, "mpi_bench: --layers %d does not divide the %d ranks\n", layers, env.size());
            return 2;
        }
        const auto [p, q] = td::square_grid(env.size());
        const td::process_grid grid(MPI_COMM_WORLD, p, q);
        const auto [lp, lq] = td::square_grid(env.size() / layers);
        const td::layered_grid lg(MPI_COMM_WORLD, lp, lq, layers);
        int ctxt = 0;
        Cblacs_get(-1, 0, &ctxt);
        Cblacs_gridinit(&ctxt, "Row", p, q);
        ts::detail::json rows = ts::detail::json::array();
        for (const auto& s : tb::split(sizes, ',')) {
            const auto colon = s.find(':');
            const int n = std::stoi(s.substr(colon + 1));
            rows.push_back(s.substr(0, colon) == "f32" ? gemm_case<float>(grid, ctxt, lg, n, block, reps)
                                                       : gemm_case<double>(grid, ctxt, lg, n, block, reps));
        }
        Cblacs_gridexit(ctxt);
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
