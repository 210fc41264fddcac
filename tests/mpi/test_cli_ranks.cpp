// The tilestream tool under mpirun: gemm on .npy files over 1 to 4 ranks and every grid against the
// reference, jacobi over ranks bitwise against one process (also with several devices per rank,
// each decomposition), a rank failing alone ending every rank with its message, a bad --grid
// refused once by rank 0, `scale --ranks`. Runs mpirun through run_mpi_test.sh.
// usage: tilestream_mpi_cli_test RUN_SCRIPT TILESTREAM gemm|jacobi|jacobi_devices|failure|grid|scale
#include <tilestream/gemm.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/verify.hpp>

#include <chrono>
#include <complex>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include <csignal>
#include <cstring>
#include <set>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ts = tilestream;

namespace {

std::string run_script, tool, dir;
int failures = 0;

void fail(const std::string& what) {
    ++failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

struct outcome {
    int status = -1;
    std::string out, err;
    double seconds = 0;
};

/// Runs `ranks` ranks of the tool (0: the tool alone, no mpirun) with `args`.
outcome run(int ranks, const std::string& args, const std::string& env = "") {
    const std::string o = dir + "/stdout.txt", e = dir + "/stderr.txt";
    const std::string cmd = env + " " + (ranks > 0 ? run_script + " " + std::to_string(ranks) + " " : std::string()) +
                            tool + " " + args + " > " + o + " 2> " + e;
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = std::system(cmd.c_str());
    outcome r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    r.out = slurp(o);
    r.err = slurp(e);
    if (r.status != 0 && r.err.find("failed on purpose") == std::string::npos && r.err.find("--grid") == std::string::npos &&
        r.err.find("--layers") == std::string::npos)
        std::fprintf(stderr, "%s\n%s%s", cmd.c_str(), r.out.c_str(), r.err.c_str());
    return r;
}

template <class T>
ts::host_matrix<T> random_matrix(ts::index_t rows, ts::index_t cols, ts::layout l, std::uint64_t seed) {
    ts::host_matrix<T> m(rows, cols, l);
    ts::fill_random(m.view(), seed);
    return m;
}

/// Runs the tool's gemm on .npy files of random matrices and compares out.npy with the reference;
/// returns the run (its JSON line when `extra` asks for one).
template <class T>
outcome gemm_case(int ranks, const std::string& grid, ts::op op_a, ts::op op_b, ts::index_t m, ts::index_t n, ts::index_t k,
               ts::scalar alpha, ts::scalar beta, int block, ts::layout l, std::uint64_t seed, const std::string& extra = "") {
    const bool na = op_a == ts::op::n, nb = op_b == ts::op::n;
    auto a = random_matrix<T>(na ? m : k, na ? k : m, l, seed);
    auto b = random_matrix<T>(nb ? k : n, nb ? n : k, l, seed + 1);
    auto c = random_matrix<T>(m, n, ts::layout::row_major, seed + 2);
    ts::write_npy<T>(dir + "/a.npy", a.view());
    ts::write_npy<T>(dir + "/b.npy", b.view());
    ts::write_npy<T>(dir + "/c.npy", c.view());
    std::remove((dir + "/out.npy").c_str());
    std::string args = "gemm --a " + dir + "/a.npy --b " + dir + "/b.npy --out " + dir + "/out.npy --block " +
                       std::to_string(block) + " --op-a " + std::string(ts::to_string(op_a)) + " --op-b " +
                       std::string(ts::to_string(op_b)) + " --alpha " + ts::format_scalar(alpha) + " --beta " +
                       ts::format_scalar(beta);
    if (beta != ts::scalar(0)) args += " --c " + dir + "/c.npy";
    if (!grid.empty()) args += " --grid " + grid;
    args += extra;
    const std::string what = std::to_string(ranks) + " ranks " + args;
    const outcome r = run(ranks, args);
    if (r.status != 0) {
        fail(what + ": exit " + std::to_string(r.status));
        return r;
    }
    const auto out = ts::read_npy(dir + "/out.npy");
    if (out.type() != ts::dtype_of<T>() || out.rows() != m || out.cols() != n) {
        fail(what + ": out.npy is " + std::to_string(out.rows()) + "x" + std::to_string(out.cols()));
        return r;
    }
    ts::host_matrix<T> expected(m, n);
    for (ts::index_t i = 0; i < m; ++i)
        for (ts::index_t j = 0; j < n; ++j) expected(i, j) = c(i, j);
    ts::reference_gemm<T>(op_a, op_b, ts::scalar_as<T>(alpha), a.view(), b.view(), ts::scalar_as<T>(beta), expected.view());
    const auto got = out.view<T>();
    const double tol = std::is_same_v<ts::real_type_t<T>, float> ? 1e-4 : 1e-11;
    for (ts::index_t i = 0; i < m; ++i)
        for (ts::index_t j = 0; j < n; ++j) {
            const ts::wide_type_t<T> g(got(i, j)), e(expected(i, j));
            if (!(std::abs(g - e) <= tol * (1 + std::abs(e)))) {
                fail(what + ": C(" + std::to_string(i) + "," + std::to_string(j) + ") = " + ts::format_scalar(ts::as_scalar(g)) +
                     ", expected " + ts::format_scalar(ts::as_scalar(e)));
                return r;
            }
        }
    return r;
}

void test_gemm() {
    std::mt19937 rng(7);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const char* grids[5][4] = {{""}, {"1x1"}, {"1x2", "2x1"}, {"1x3", "3x1"}, {"2x2", "1x4", "4x1"}};
    int case_no = 0;
    for (int ranks = 1; ranks <= 4; ++ranks)
        for (const char* g : grids[ranks]) {
            if (!g) break;
            const auto op_a = uni(0, 1) ? ts::op::t : ts::op::n, op_b = uni(0, 1) ? ts::op::t : ts::op::n;
            const double beta = case_no % 2 ? 0.0 : 0.75;
            const auto l = case_no % 3 ? ts::layout::row_major : ts::layout::col_major;
            const ts::index_t m = uni(1, 61), n = uni(1, 61), k = uni(1, 61);
            if (case_no % 2)
                gemm_case<double>(ranks, g, op_a, op_b, m, n, k, 1.5, beta, uni(1, 12), l, 100 + case_no);
            else
                gemm_case<float>(ranks, g, op_a, op_b, m, n, k, -0.5, beta, uni(1, 12), l, 100 + case_no);
            ++case_no;
        }
    // --explain names the grid the model chose (a tall C: all ranks down the rows) and the words.
    const outcome r = run(4, "gemm --m 2000 --n 100 --k 100 --explain");
    if (r.status != 0 || r.err.find("grid 4x1 over 4 ranks, c = 1 layer") == std::string::npos ||
        r.err.find("words sent per rank (mean; equals the mean received): measured 7500; model 7500") == std::string::npos ||
        r.err.find("PDGEMM on 4x1: 7500") == std::string::npos)
        fail("gemm --explain:\n" + r.err);
}

void test_jacobi() {
    const std::string base = "jacobi --nx 41 --ny 33 --iters 37 --check-every 5 --out ";
    for (const char* type : {"f32", "f64"}) {
        const std::string ref = dir + "/ref.npy";
        if (run(0, base + ref + " --quiet --dtype " + type).status != 0) return fail("one-process jacobi failed");
        const std::string ref_bytes = slurp(ref);
        // Every grid of 2 to 4 ranks in f32; in f64 one of rows, columns and tiles. Under the
        // sanitizers, where each run of the tool costs seconds, f32 takes rows, columns and tiles
        // on 2 to 4 ranks (4 of the 7 grids).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        const std::vector<std::string> f32_grids{"2x1", "1x3", "2x2", "1x4"};
#else
        const std::vector<std::string> f32_grids{"2x1", "1x2", "3x1", "1x3", "2x2", "4x1", "1x4"};
#endif
        const std::vector<std::string> grids = std::string(type) == "f32" ? f32_grids
                                                                          : std::vector<std::string>{"3x1", "1x2", "2x2"};
        for (const std::string& gs : grids) {
            const char* g = gs.c_str();
            const int ranks = (g[0] - '0') * (g[2] - '0');
            const std::string out = dir + "/ranks.npy";
            std::remove(out.c_str());
            const outcome r = run(ranks, base + out + " --dtype " + type + " --grid " + g);
            if (r.status != 0) {
                fail(std::string("jacobi --grid ") + g + " exit " + std::to_string(r.status));
                continue;
            }
            if (slurp(out) != ref_bytes) fail(std::string("jacobi ") + type + " --grid " + g + ": field differs from one process");
        }
    }
    // Several threads per rank (rows of each interior block split over them): the same field.
    const std::string wide = "jacobi --nx 150 --ny 300 --iters 21 --out ";
    run(0, wide + dir + "/ref.npy --quiet");
    const outcome t = run(2, wide + dir + "/ranks.npy --cpu-threads 3");
    if (t.status != 0 || slurp(dir + "/ref.npy") != slurp(dir + "/ranks.npy"))
        fail("jacobi with 3 threads per rank on 2 ranks differs from one process");
    // Converging runs stop after the same iteration (the residual examined one check late).
    const std::string conv = "jacobi --nx 30 --ny 30 --iters 400 --check-every 3 --tol 2e-2 --dtype f64 --out ";
    run(0, conv + dir + "/ref.npy --quiet");
    const outcome r = run(4, conv + dir + "/ranks.npy --image " + dir + "/field.png");
    if (r.status != 0 || slurp(dir + "/ref.npy") != slurp(dir + "/ranks.npy"))
        fail("jacobi with --tol on 4 ranks differs from one process");
    if (slurp(dir + "/field.png").compare(0, 4, "\x89PNG") != 0) fail("jacobi --image wrote no PNG");
}

/// OpenCL per rank (PoCL on the CPU here): two processes on the same OpenCL device, and a rank
/// with an OpenCL and a CPU device; skipped with the reason where no OpenCL device opens.
void test_jacobi_opencl(const std::string& base, const std::string& ref_bytes) {
    const outcome probe = run(0, "jacobi --nx 8 --ny 8 --iters 1 --quiet --devices opencl:0");
    if (probe.status != 0) {
        std::printf("SKIP opencl:0 per rank: no OpenCL device here (%s)\n", probe.err.c_str());
        return;
    }
    const std::string out = dir + "/ranks.npy";
    for (const char* devices : {"opencl:0 --grid 2x1", "opencl:0,cpu --grid 1x2 --decomp rows"}) {
        std::remove(out.c_str());
        const outcome cl = run(2, base + out + " --dtype f32 --devices " + devices);
        if (cl.status != 0 || slurp(out) != ref_bytes)
            fail(std::string("jacobi with --devices ") + devices + " on 2 ranks differs from one process");
    }
}

/// Each rank's part cut over its devices (cpu:2, and opencl:0 where the build and PoCL give one):
/// every decomposition of ranks and of devices gives the one-process field, byte for byte.
void test_jacobi_devices() {
    const std::string base = "jacobi --nx 37 --ny 29 --iters 23 --check-every 4 --out ";
    const std::string ref = dir + "/ref.npy", out = dir + "/ranks.npy";
    struct variant {
        int ranks;
        const char* args;
    };
    // f32: ranks in rows, columns and tiles, each with the rank's part in rows, cols and tiles.
    const variant f32[] = {{2, "--grid 2x1 --devices cpu:2 --decomp rows"}, {2, "--grid 1x2 --devices cpu:2 --decomp cols"},
                           {2, "--grid 2x1 --devices cpu:2 --decomp cols --overlap off"},
                           {3, "--grid 3x1 --devices cpu:2 --decomp cols"}, {3, "--grid 1x3 --devices cpu:2 --decomp rows"},
                           {4, "--grid 2x2 --devices cpu:4 --decomp tiles:2x2"}};
    const variant f64[] = {{3, "--grid 1x3 --devices cpu:2 --decomp tiles"}};
    for (const char* type : {"f32", "f64"}) {
        if (run(0, base + ref + " --quiet --dtype " + type).status != 0) return fail("one-process jacobi failed");
        const std::string ref_bytes = slurp(ref);
        const bool single = std::string(type) == "f32";
        if (single) test_jacobi_opencl(base, ref_bytes);
        for (const variant& v : single ? std::vector<variant>(std::begin(f32), std::end(f32))
                                       : std::vector<variant>(std::begin(f64), std::end(f64))) {
            std::remove(out.c_str());
            const std::string what = std::string("jacobi ") + type + " on " + std::to_string(v.ranks) + " ranks " + v.args;
            const outcome r = run(v.ranks, base + out + " --dtype " + type + " " + v.args);
            if (r.status != 0) {
                fail(what + ": exit " + std::to_string(r.status));
                continue;
            }
            if (slurp(out) != ref_bytes) fail(what + ": field differs from one process");
        }
    }
    // Converging with several devices per rank: the same stopping iteration as one process.
    const std::string conv = "jacobi --nx 30 --ny 26 --iters 400 --check-every 3 --tol 2e-2 --dtype f64 --out ";
    run(0, conv + ref + " --quiet");
    std::remove(out.c_str());
    const outcome c = run(2, conv + out + " --grid 1x2 --devices cpu:2 --decomp rows");
    if (c.status != 0 || slurp(ref) != slurp(out)) fail("jacobi with --tol, cpu:2 on 2 ranks differs from one process");
    // A rank whose part cannot be cut over its devices: one message naming that rank, exit 2.
    const outcome bad = run(2, "jacobi --nx 10 --ny 9 --iters 3 --grid 2x1 --devices cpu:4 --decomp rows");
    const std::string expected = "rank 0: its part (rows 1..3, columns 1..8) over its 4 devices";
    const auto first = bad.err.find(expected);
    if (bad.status != 2 || first == std::string::npos || bad.err.find(expected, first + 1) != std::string::npos)
        fail("a part too small for its devices: exit " + std::to_string(bad.status) + ", expected 2 and once '" +
             expected + "':\n" + bad.err);
}

/// The sanitizer variables run_mpi_test.sh sets, for a run that starts mpirun itself: OpenMPI's
/// suppressions added to any given, and the full unwinder (see run_mpi_test.sh).
std::string mpi_sanitizer_env() {
    std::string supp = slurp(run_script.substr(0, run_script.rfind('/') + 1) + "mpi_lsan.supp");
    const std::string lsan = std::getenv("LSAN_OPTIONS") ? std::getenv("LSAN_OPTIONS") : "";
    if (const auto at = lsan.find("suppressions="); at != std::string::npos)
        supp += "\n" + slurp(lsan.substr(at + 13, lsan.find(':', at) - (at + 13)));
    std::ofstream(dir + "/lsan.supp") << supp;
    const char* asan = std::getenv("ASAN_OPTIONS");
    return "LSAN_OPTIONS='suppressions=" + dir + "/lsan.supp' ASAN_OPTIONS='" + (asan ? std::string(asan) + ":" : "") +
           "fast_unwind_on_malloc=0'";
}

/// `scale jacobi --ranks 1,2`: one row per rank count with positive seconds and rates, the first
/// row's speedup 1; a clear error when mpirun is not on PATH. No figure is checked.
void test_scale() {
    const std::string env = mpi_sanitizer_env();
    const outcome r = run(0, "scale jacobi --nx 66 --ny 50 --iters 12 --devices cpu:2 --ranks 1,2 --repeat 1 --json --plot " +
                                 dir + "/ranks.svg", env);
    if (r.status != 0) return fail("scale jacobi --ranks 1,2: exit " + std::to_string(r.status));
    for (const char* key : {"\"over\": \"ranks\"", "\"devices\": \"1 rank x cpu:2\"", "\"devices\": \"2 ranks x cpu:2\"",
                            "\"device_count\": 2", "\"problem\": \"50x66 f32 grid 2x1\""})
        if (r.out.find(key) == std::string::npos) fail(std::string("scale --ranks JSON lacks ") + key + ":\n" + r.out);
    std::size_t at = 0;
    int rows = 0;
    while ((at = r.out.find("\"seconds\": ", at)) != std::string::npos) {
        at += 11;
        const double s = std::atof(r.out.c_str() + at);
        const auto g = r.out.find("\"glups\": ", at), e = r.out.find("\"efficiency\": ", at);
        const double rate = g == std::string::npos ? 0 : std::atof(r.out.c_str() + g + 9);
        const double eff = e == std::string::npos ? 0 : std::atof(r.out.c_str() + e + 14);
        if (!(s > 0 && s < 60 && rate > 0 && std::isfinite(rate) && eff > 0 && std::isfinite(eff)))
            fail("scale --ranks row " + std::to_string(rows) + ": seconds " + std::to_string(s) + ", GLUP/s " +
                 std::to_string(rate) + ", efficiency " + std::to_string(eff));
        ++rows;
    }
    if (rows != 2) fail("scale --ranks 1,2 printed " + std::to_string(rows) + " rows:\n" + r.out);
    if (slurp(dir + "/ranks.svg").find("<svg") == std::string::npos) fail("scale --ranks wrote no plot");
    const outcome table = run(0, "scale gemm --m 40 --n 30 --k 20 --ranks 1,2 --repeat 1", env);
    if (table.status != 0 || table.out.find("1 rank x cpu ") == std::string::npos ||
        table.out.find("2 ranks x cpu ") == std::string::npos)
        fail("scale gemm --ranks 1,2 table:\n" + table.out);
    // ... with the per-rank figures of each run (fastest and slowest rank, most bytes sent).
    if (table.err.find("2 ranks x cpu: ") == std::string::npos || table.err.find("; per rank ") == std::string::npos)
        fail("scale gemm --ranks 1,2 without per-rank figures:\n" + table.err);
    const outcome none = run(0, "scale jacobi --nx 66 --ny 50 --ranks 1,2", "PATH=/nonexistent");
    if (none.status != 2 || none.err.find("mpirun was not found on PATH") == std::string::npos)
        fail("scale --ranks without mpirun: exit " + std::to_string(none.status) + ":\n" + none.err);
}

void test_failure() {
    const std::string out = dir + "/fail.npy";
    auto a = random_matrix<double>(50, 40, ts::layout::row_major, 1);
    ts::write_npy<double>(dir + "/a.npy", a.view());
    for (const char* cmd : {"gemm", "jacobi"}) {
        std::remove(out.c_str());
        const std::string args = std::string(cmd) == "gemm"
                                     ? "gemm --a " + dir + "/a.npy --b " + dir + "/a.npy --op-b t --out " + out
                                     : "jacobi --nx 200 --ny 200 --iters 100000 --out " + out;
        const outcome r = run(3, args, "TILESTREAM_TEST_FAIL_RANK=1");
        if (r.status == 0) fail(std::string(cmd) + ": a failing rank left exit status 0");
        if (r.err.find("rank 1: error: rank 1 failed on purpose") == std::string::npos)
            fail(std::string(cmd) + ": the failing rank's message is missing:\n" + r.err);
        if (r.seconds > 30) fail(std::string(cmd) + ": the ranks took " + std::to_string(r.seconds) + " s to end");
        if (std::ifstream(out).good()) fail(std::string(cmd) + ": an output file was left after the failure");
    }
}

void test_grid() {
    for (const char* cmd : {"gemm --m 10 --n 10 --k 10", "jacobi --nx 10 --ny 10"}) {
        const outcome r = run(3, std::string(cmd) + " --grid 2x2");
        const std::string expected = "--grid 2x2 has 4 processes but 3 ranks were started";
        if (r.status != 2) fail(std::string(cmd) + " --grid 2x2 on 3 ranks: exit " + std::to_string(r.status) + ", expected 2");
        const auto first = r.err.find(expected);
        if (first == std::string::npos || r.err.find(expected, first + 1) != std::string::npos)
            fail(std::string(cmd) + ": expected the grid error once (rank 0):\n" + r.err);
    }
    const outcome bad = run(2, "gemm --m 10 --n 10 --k 10 --grid 2by1");
    if (bad.status != 2 || bad.err.find("--grid expects PxQ") == std::string::npos) fail("--grid 2by1 not refused clearly");
}

/// The number after `"key": ` in a JSON line (NaN when absent).
double json_number(const std::string& text, const std::string& key) {
    const auto at = text.find("\"" + key + "\": ");
    return at == std::string::npos ? std::nan("") : std::atof(text.c_str() + at + key.size() + 4);
}

/// Part `layers` (also accepted by main): 2.5D gemm (--layers) on 4 and 6 ranks against the
/// reference, its bytes against the model, the planner's choice of c, and a bad --layers refused.
void test_layers() {
    // 2.5D against the reference (mpi_pgemm_layers covers every layering of 2 and 4 ranks with
    // random descriptors): 2x1x2 (the layer grid given, c implied), 1x1x4, and 3x1x2 on 6 ranks;
    // odd shapes, op n/t, beta != 0 (only layer 0's C is scaled) and beta = 0 (C starts as NaN).
    // With transposes the model estimates what stays on its rank: within 10 %.
    const outcome t = gemm_case<float>(4, "2x1", ts::op::t, ts::op::t, 45, 19, 39, 0.5, 0.5, 6, ts::layout::col_major, 330, " --json");
    const double t_sent = json_number(t.out, "mean_bytes_sent_per_rank"), t_model = json_number(t.out, "model_words") * 4;
    if (json_number(t.out, "layers") != 2 || !(std::fabs(t_sent - t_model) <= 0.1 * t_model))
        fail("gemm --grid 2x1 on 4 ranks, op t t: layers " + std::to_string(json_number(t.out, "layers")) +
             ", mean bytes sent " + std::to_string(t_sent) + ", model " + std::to_string(t_model));
    gemm_case<float>(4, "", ts::op::t, ts::op::n, 31, 26, 43, 1.0, 0.0, 4, ts::layout::row_major, 350, " --layers 4");
    gemm_case<double>(6, "3x1", ts::op::n, ts::op::n, 43, 17, 59, -1.0, 1.0, 5, ts::layout::row_major, 360, " --layers 2");

    // The planner takes the fewest words on the busiest rank, ties to the fewest over all ranks.
    // On 8 ranks with k much larger than m and n, 2 layers of 2x2 tie c = 1 on the busiest rank
    // and send fewer words in all (measured here: busiest 524288 words against 655360 for c = 1),
    // so they are chosen when memory allows (operands aligned with C: the measured mean equals the
    // model's to 1e-9); a rank memory below what they hold -> c = 1. On 4 ranks the layer-0 rank
    // that scatters k would send the most: c = 1 even with ample memory.
    const std::string tall_k = "gemm --m 64 --n 64 --k 8192 --explain --json";
    const outcome ample = run(8, tall_k + " --rank-memory 1GiB");
    const double sent = json_number(ample.out, "mean_bytes_sent_per_rank"), model = json_number(ample.out, "model_words") * 4;
    if (ample.status != 0 || json_number(ample.out, "layers") != 2 ||
        ample.err.find("grid 2x2 over 8 ranks, c = 2 layers") == std::string::npos ||
        ample.err.find("measured 197120; model 197120") == std::string::npos ||
        ample.err.find("SUMMA with c = 1 on 2x4: 262144") == std::string::npos ||
        !(std::fabs(sent - model) <= 1e-9 * model) || !(model > 0))
        fail("the planner did not pick 2 layers on 8 ranks with ample memory, or the bytes differ from the model (" +
             std::to_string(sent) + " vs " + std::to_string(model) + "):\n" + ample.err + ample.out);
    const outcome tight = run(8, tall_k + " --rank-memory 1MiB");
    if (tight.status != 0 || json_number(tight.out, "layers") != 1 ||
        tight.err.find("c = 2 on 2x2: 197120 words (busiest rank 262144), 1.4 MiB (over the memory limit)") == std::string::npos)
        fail("the planner did not fall back to c = 1 with tight memory:\n" + tight.err + tight.out);
    const outcome four = run(4, "gemm --m 60 --n 50 --k 3000 --explain --json --rank-memory 1GiB");
    if (four.status != 0 || json_number(four.out, "layers") != 1 ||
        four.err.find("c = 4 on 1x1: 64125 words (busiest rank 247500)") == std::string::npos)
        fail("on 4 ranks the planner should keep c = 1 (a layer-0 rank would send the most):\n" + four.err + four.out);

    // A bad --layers: rank 0 says so once, every rank exits 2.
    const std::pair<const char*, const char*> bad[] = {
        {" --layers 3", "--layers 3 does not divide the 2 ranks"},
        {" --layers 0", "--layers must be in [1, 1048576], got 0"},
        {" --layers 2 --grid 2x1", "--grid 2x1 with --layers 2 has 4 processes but 2 ranks were started"}};
    for (const auto& [args, expected] : bad) {
        const outcome r = run(2, std::string("gemm --m 10 --n 10 --k 10") + args);
        const auto first = r.err.find(expected);
        if (r.status != 2 || first == std::string::npos || r.err.find(expected, first + 1) != std::string::npos)
            fail(std::string("gemm") + args + ": expected exit 2 and the error once, got " + std::to_string(r.status) +
                 ":\n" + r.err);
    }
}


/// How many times `what` occurs in `text`.
int occurrences(const std::string& text, const std::string& what) {
    int n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

/// Names in `where` (default: the test's folder) of temporaries left behind: ".tmp.PID.N" beside an
/// output (or ".tilestream.tmp..." for a long name), ".partial-" from older versions.
std::vector<std::string> partials(const std::string& where = dir) {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(where.c_str())) {
        while (dirent* e = ::readdir(d))
            if (std::strstr(e->d_name, ".partial-") || std::strstr(e->d_name, ".tmp.")) out.push_back(e->d_name);
        ::closedir(d);
    }
    return out;
}

/// Part `usage`: bad usage over ranks is one message from rank 0 and exit 2, as in one process:
/// a misspelt option gets the one-process "did you mean", a bad value names its option; a memory
/// need beyond the node is refused with the numbers before allocating; "1 rank", not "1 ranks".
void test_usage() {
    const std::pair<std::string, std::string> bad[] = {
        {"gemm --m 10 --n 10 --k 10 --chekc", "unknown option --chekc (did you mean --check?)"},
        {"gemm --m 10 --n 10 --k 10 --kernel fast", "'fast'"},
        {"gemm --m 10 --n 10 --k 10 --repeat 0", "--repeat must be in [1, 100000], got 0"},
        {"gemm --m 10 --n 10 --k 10 --reproducible yes", "--reproducible expects on or off, got 'yes'"},
        {"jacobi --nx 10 --ny 10 --iter 5", "unknown option --iter (did you mean --iters?)"},
        {"gemm --m 1000000 --n 1000000 --k 1000000", "of host memory (its blocks of A, B and C and SUMMA's panels) but only"},
    };
    for (const auto& [args, expected] : bad) {
        const outcome r = run(2, args);
        if (r.status != 2 || occurrences(r.err, expected) != 1 || occurrences(r.err, "error:") != 1 ||
            r.err.find("MPI_Abort") != std::string::npos)
            fail(args + ": expected exit 2 and once '" + expected + "', got " + std::to_string(r.status) + ":\n" + r.err);
    }
    const outcome one = run(1, "gemm --m 20 --n 10 --k 5 --grid 1x1");
    if (one.status != 0 || one.out.find("on 1 rank (grid 1x1") == std::string::npos) fail("one rank:\n" + one.out + one.err);
}

/// Part `parity`: the one-process report fields and options over ranks: --check (Freivalds over
/// the ranks) passes on random and file inputs, --anchor times ScaLAPACK's PDGEMM on the same
/// grid, --repeat, --kernel, --strategy/--tile for the local plans, --json with per-rank figures,
/// --explain bytes per rank, --trace and --timeline with one lane group per rank.
void test_parity() {
    const std::string common = " --check --json --repeat 3 --beta 0.5 --dtype f64";
    const outcome r = run(4, "gemm --m 301 --n 203 --k 157 --kernel tiled --strategy tiles-3d --tile 64 --anchor --explain "
                             "--trace " + dir + "/run.json --timeline " + dir + "/run.svg" + common);
    if (r.status != 0) return fail("gemm --check --anchor over 4 ranks: exit " + std::to_string(r.status) + "\n" + r.err);
    for (const char* key : {"\"check_passed\": true", "\"check_method\": \"freivalds\"", "\"anchor\": \"ScaLAPACK PDGEMM\"",
                            "\"repeat\": 3", "\"kernel\": \"tiled\"", "\"strategy\": \"tiles-3d\"", "\"tile_m\": 64",
                            "\"ratio_to_anchor\": ", "\"per_rank\": [", "\"rank\": 3", "\"peak_rss_bytes\": ",
                            "\"seconds\": ", "\"gflops\": ", "\"max_bytes_sent_per_rank\": "})
        if (r.out.find(key) == std::string::npos) fail(std::string("gemm --json over ranks lacks ") + key + ":\n" + r.out);
    if (json_number(r.out, "rel_error") > json_number(r.out, "tolerance") || !(json_number(r.out, "anchor_gflops") > 0))
        fail("check or anchor figures:\n" + r.out);
    if (r.err.find("bytes per rank: sent ") == std::string::npos || r.err.find("  rank 3 (layer 0): C block") == std::string::npos)
        fail("--explain lacks the bytes per rank:\n" + r.err);
    const std::string svg = slurp(dir + "/run.svg"), trace = slurp(dir + "/run.json");
    for (int k = 0; k < 4; ++k) {
        const std::string lane = "rank " + std::to_string(k) + ": ";
        if (svg.find(lane + "cpu:0") == std::string::npos || svg.find(lane + "mpi") == std::string::npos ||
            trace.find(lane + "cpu:0") == std::string::npos)
            fail("--timeline/--trace lack the lanes of rank " + std::to_string(k));
    }
    // File inputs, f32, op t: the check reads the same blocks.
    const outcome f = gemm_case<float>(3, "1x3", ts::op::t, ts::op::n, 67, 45, 39, 1.5, 0.5, 8, ts::layout::row_major, 900,
                                       " --check --json");
    if (f.status != 0 || f.out.find("\"check_passed\": true") == std::string::npos) fail("--check on files:\n" + f.out + f.err);
}

/// Part `reproducible`: with --reproducible on, C is bitwise the same on every grid, rank count
/// and block size (and the one-process --reproducible result on the same files); without it the
/// block sizes below change the bits.
void test_reproducible() {
    auto a = random_matrix<float>(203, 900, ts::layout::row_major, 71), b = random_matrix<float>(900, 117, ts::layout::col_major, 72);
    auto c = random_matrix<float>(203, 117, ts::layout::row_major, 73);
    ts::write_npy<float>(dir + "/a.npy", a.view());
    ts::write_npy<float>(dir + "/b.npy", b.view());
    ts::write_npy<float>(dir + "/c.npy", c.view());
    const std::string files = "gemm --a " + dir + "/a.npy --b " + dir + "/b.npy --c " + dir + "/c.npy --beta 0.5 --out ";
    if (run(0, files + dir + "/one.npy --reproducible on --quiet").status != 0) return fail("one-process --reproducible failed");
    const std::string one = slurp(dir + "/one.npy");
    struct variant {
        int ranks;
        const char* args;
    };
    const variant variants[] = {{1, "--grid 1x1 --block 50"}, {2, "--grid 2x1 --block 128"}, {3, "--grid 1x3 --block 77"},
                                {4, "--grid 2x2 --block 200"}};
    std::set<std::string> plain;
    for (const variant& v : variants) {
        const std::string out = dir + "/r.npy";
        std::remove(out.c_str());
        const outcome r = run(v.ranks, files + out + " --reproducible on " + v.args);
        if (r.status != 0 || slurp(out) != one)
            fail(std::string("--reproducible on ") + std::to_string(v.ranks) + " ranks " + v.args + " differs from one process");
        if (run(v.ranks, files + out + " " + v.args).status == 0) plain.insert(slurp(out));
    }
    if (plain.size() < 2) fail("without --reproducible the grids and blocks gave one result: the test cannot fail");
}

/// Part `nothing_lost`: an output that cannot be written (a full file system), a write error on
/// one rank, a rank killed or ended by a signal while the output is written, SIGINT or SIGTERM to
/// mpirun meanwhile: the previous output is untouched, no temporary is left, the job ends within
/// seconds, and a failure every rank learns of is one message with exit 3.
void test_nothing_lost() {
    const std::string out = dir + "/prev.npy";
    if (run(0, "gemm --m 9 --n 7 --k 5 --quiet --out " + out).status != 0) return fail("one-process gemm failed");
    const std::string before = slurp(out);
    const std::string job = "gemm --m 211 --n 103 --k 50 --out " + out;
    auto untouched = [&](const std::string& what) {
        if (slurp(out) != before) fail(what + ": the previous output was changed");
        if (!partials().empty()) fail(what + ": a temporary was left: " + partials().front());
    };
    const outcome e = run(3, job, "TILESTREAM_TEST_FAIL_WRITE=1:error");
    if (e.status != 3 || occurrences(e.err, "rank 1: write failed on purpose") != 1)
        fail("a write error on rank 1: exit " + std::to_string(e.status) + ", expected 3 and one message:\n" + e.err);
    untouched("a write error on rank 1");
    for (const char* how : {"kill", "term"}) {
        const outcome k = run(3, job, std::string("TILESTREAM_TEST_FAIL_WRITE=1:") + how);
        if (k.status == 0 || k.seconds > 20) fail(std::string("rank 1 ended by ") + how + ": exit " + std::to_string(k.status) +
                                                  " after " + std::to_string(k.seconds) + " s");
        untouched(std::string("rank 1 ended by ") + how);
    }
    // A rank that dies while computing: the job ends within seconds, mpirun naming the rank.
    const outcome d = run(3, "gemm --m 200 --n 100 --k 50", "TILESTREAM_TEST_KILL_RANK=2");
    if (d.status == 0 || d.seconds > 20 || d.err.find("rank 2") == std::string::npos)
        fail("a rank killed while computing: exit " + std::to_string(d.status) + " after " + std::to_string(d.seconds) +
             " s:\n" + d.err);
    // SIGINT and SIGTERM to mpirun while rank 0 holds the temporary open.
    for (int sig : {SIGINT, SIGTERM}) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::setenv("TILESTREAM_TEST_FAIL_WRITE", "0:pause", 1);
            const std::string cmd = "exec " + run_script + " 3 " + tool + " " + job + " > /dev/null 2>&1";
            ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
        for (int i = 0; i < 150 && partials().empty(); ++i) ::usleep(100000);
        if (partials().empty()) fail("no temporary appeared while rank 0 paused");
        // The script runs mpirun as its child: signal mpirun itself, as a terminal's Ctrl-C would.
        const std::string kids = slurp("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
        const pid_t mpirun = pid_t(std::atoi(kids.c_str()));
        const auto t0 = std::chrono::steady_clock::now();
        if (mpirun > 0) ::kill(mpirun, sig);
        else fail("mpirun's process was not found under " + std::to_string(pid));
        int status = 0;
        ::waitpid(pid, &status, 0);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (took > 20) fail("mpirun took " + std::to_string(took) + " s to end after signal " + std::to_string(sig));
        untouched("signal " + std::to_string(sig) + " to mpirun");
    }
    // A full file system (a 256 KiB tmpfs, where root may mount one): exit 3, nothing replaced.
    const std::string small = dir + "/small";
    ::mkdir(small.c_str(), 0700);
    if (std::system(("mount -t tmpfs -o size=256k tmpfs " + small + " 2>/dev/null").c_str()) != 0) {
        std::printf("SKIP full file system: cannot mount a tmpfs here (not root?)\n");
        return;
    }
    const std::string full = small + "/c.npy";
    run(0, "gemm --m 9 --n 7 --k 5 --quiet --out " + full);
    const std::string small_before = slurp(full);
    const outcome f = run(4, "gemm --m 300 --n 300 --k 40 --dtype f64 --out " + full);
    if (f.status != 3 || occurrences(f.err, "No space left on device") != 1 || slurp(full) != small_before)
        fail("gemm --out on a full file system: exit " + std::to_string(f.status) + ", expected 3, one message and the "
             "previous file kept:\n" + f.err);
    if (!partials(small).empty()) fail("a temporary was left on the full file system: " + partials(small).front());
    std::system(("umount " + small).c_str());
}

/// Part `special_outputs`: the outputs of gemm and jacobi over ranks are written as cp writes them
/// and committed together, as in one process: a symbolic link is followed and kept (its target
/// keeps mode 600), /dev/null stays a device, a FIFO receives the same bytes as a regular file, and
/// when C cannot be written an existing --trace is not replaced either.
void test_special_outputs() {
    const std::string job = "gemm --m 67 --n 45 --k 23 --seed 9 --reproducible on --quiet --out ";
    // A regular file first: the bytes every other kind of output must receive.
    const std::string plain = dir + "/plain.npy";
    if (run(3, job + plain).status != 0) return fail("gemm over 3 ranks to a regular file failed");
    const std::string want = slurp(plain);
    if (want.size() < 67 * 45 * 4) return fail("the regular output is too short");
    // A symbolic link to a file of mode 600.
    const std::string target = dir + "/target.npy", link = dir + "/link.npy";
    { std::ofstream(target) << "old"; }
    ::chmod(target.c_str(), 0600);
    if (::symlink(target.c_str(), link.c_str()) != 0) return fail("cannot make a symbolic link");
    if (run(3, job + link).status != 0) fail("gemm --out through a symbolic link failed");
    struct stat st {};
    if (::lstat(link.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) fail("--out replaced the symbolic link itself");
    if (slurp(target) != want) fail("--out through a symbolic link: the target does not hold C");
    if (::stat(target.c_str(), &st) != 0 || (st.st_mode & 0777) != 0600)
        fail("--out through a symbolic link: the target's mode 600 was not kept");
    // /dev/null for C and the trace at once (several outputs may name one device).
    if (run(3, job + "/dev/null --trace /dev/null").status != 0) fail("gemm --out /dev/null --trace /dev/null failed");
    if (::stat("/dev/null", &st) != 0 || !S_ISCHR(st.st_mode)) fail("/dev/null is no longer a character device");
    // A FIFO with a reader: the same bytes as the regular file, gathered by rank 0.
    const std::string fifo = dir + "/c.fifo", got = dir + "/from-fifo.npy";
    if (::mkfifo(fifo.c_str(), 0600) != 0) return fail("cannot make a FIFO");
    const pid_t reader = ::fork();
    if (reader == 0) {
        const std::string cmd = "exec cat " + fifo + " > " + got;
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    if (run(3, job + fifo).status != 0) fail("gemm --out to a FIFO failed");
    int status = 0;
    ::waitpid(reader, &status, 0);
    if (slurp(got) != want) fail("gemm --out to a FIFO: the reader did not get the bytes of the regular file");
    // All new or none: a write error on rank 1 leaves an existing trace as it was.
    const std::string trace = dir + "/t.json";
    { std::ofstream(trace) << "previous trace"; }
    const outcome e = run(3, job + plain + " --trace " + trace, "TILESTREAM_TEST_FAIL_WRITE=1:error");
    if (e.status != 3) fail("a write error on rank 1 with --trace: exit " + std::to_string(e.status) + ", expected 3");
    if (slurp(trace) != "previous trace") fail("C failed, but --trace was replaced");
    if (slurp(plain) != want) fail("C failed, but --out was changed");
    if (!partials().empty()) fail("a temporary was left: " + partials().front());
    // Jacobi over ranks: --out through a link, --image beside it.
    const std::string jt = dir + "/jt.npy", jl = dir + "/jl.npy";
    { std::ofstream(jt) << "old"; }
    ::chmod(jt.c_str(), 0600);
    if (::symlink(jt.c_str(), jl.c_str()) != 0) return fail("cannot make a symbolic link");
    if (run(2, "jacobi --nx 40 --ny 30 --iters 20 --quiet --out " + jl + " --image " + dir + "/j.png").status != 0)
        fail("jacobi over 2 ranks with --out through a link failed");
    if (::lstat(jl.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) fail("jacobi --out replaced the symbolic link itself");
    if (slurp(jt).rfind("\x93NUMPY", 0) != 0) fail("jacobi --out through a link: the target is not a .npy file");
    if (::stat(jt.c_str(), &st) != 0 || (st.st_mode & 0777) != 0600) fail("jacobi --out: the target's mode 600 was not kept");
}

/// Part `no_hang`: an input that one rank cannot read (mpirun's MPMD form gives rank 1 and 2 a
/// path that does not exist) is one message naming the rank and exit 2, not a hang in
/// MPI_File_open.
void test_no_hang() {
    auto a = random_matrix<double>(30, 20, ts::layout::row_major, 5);
    ts::write_npy<double>(dir + "/a.npy", a.view());
    const std::string args = "gemm --b " + dir + "/a.npy --op-b t --out " + dir + "/o.npy --a ";
    const outcome r = run(1, args + dir + "/a.npy : -np 2 " + tool + " " + args + dir + "/missing/a.npy");
    if (r.status != 2 || r.seconds > 30 || occurrences(r.err, "rank 1: cannot read " + dir + "/missing/a.npy") != 1)
        fail("an input missing on ranks 1 and 2: exit " + std::to_string(r.status) + " after " + std::to_string(r.seconds) +
             " s:\n" + r.err);
}

/// Part `complex`: c32 and c64 over ranks. .npy inputs on every grid of 1 to 4 ranks (and 2.5D
/// on 4) against the reference with ops n, t and c, complex alpha and beta, odd shapes, both file
/// orders; random inputs with --check, --anchor (ScaLAPACK PCGEMM/PZGEMM) and --json carrying the
/// imaginary parts; --check with op c on files; --reproducible bitwise across grids and against
/// one process.
void test_complex() {
    std::mt19937 rng(11);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const char* grids[5][4] = {{""}, {"1x1"}, {"1x2", "2x1"}, {"1x3", "3x1"}, {"2x2", "4x1"}};
    const ts::op ops[3] = {ts::op::n, ts::op::t, ts::op::c};
    int case_no = 0;
    for (int ranks = 1; ranks <= 4; ++ranks)
        for (const char* g : grids[ranks]) {
            if (!g) break;
            const ts::op op_a = ops[case_no % 3], op_b = ops[(case_no / 3 + case_no) % 3];
            const ts::scalar beta = case_no % 2 ? ts::scalar(0) : ts::scalar(0.25, -0.75);
            const auto l = case_no % 3 ? ts::layout::row_major : ts::layout::col_major;
            const ts::index_t m = uni(1, 47), n = uni(1, 47), k = uni(1, 47);
            if (case_no % 2)
                gemm_case<std::complex<double>>(ranks, g, op_a, op_b, m, n, k, {1.5, -2}, beta, uni(1, 9), l, 300 + case_no);
            else
                gemm_case<std::complex<float>>(ranks, g, op_a, op_b, m, n, k, {-0.5, 1}, beta, uni(1, 9), l, 300 + case_no);
            ++case_no;
        }
    // 2.5D: k cut over 2 layers, the partial complex sums reduced onto layer 0.
    gemm_case<std::complex<double>>(4, "", ts::op::c, ts::op::n, 23, 19, 40, {0.5, 2}, {1, 1}, 4, ts::layout::row_major, 399,
                                    " --layers 2");

    // Random inputs: --check passes, --anchor runs ScaLAPACK's complex routine, --json has the
    // imaginary parts and counts 8mnk flops.
    for (const char* type : {"c64", "c32"}) {
        const std::string args = std::string("gemm --m 37 --n 29 --k 41 --block 8 --dtype ") + type +
                                 " --op-a c --op-b t --alpha 1.5-2j --beta 0.5+1j --check --anchor --json";
        const outcome r = run(4, args);
        const std::string anchor = std::string("\"anchor\": \"ScaLAPACK P") + (type[1] == '6' ? "Z" : "C") + "GEMM\"";
        for (const std::string key : {std::string("\"check_passed\": true"), std::string("\"alpha_imag\": -2"),
                                      std::string("\"beta_imag\": 1"), std::string("\"dtype\": \"") + type + "\"",
                                      std::string("\"op_a\": \"c\""), anchor})
            if (r.status != 0 || r.out.find(key) == std::string::npos)
                fail(std::string(type) + " over 4 ranks: exit " + std::to_string(r.status) + ", no " + key + " in:\n" + r.out);
    }
    // --check conjugates as the product does: with op c on .npy inputs it passes (a check that
    // took c for t, or a product that did, would differ from the other and fail).
    {
        auto a = random_matrix<std::complex<double>>(21, 17, ts::layout::row_major, 401);
        auto b = random_matrix<std::complex<double>>(13, 17, ts::layout::row_major, 402);
        ts::write_npy<std::complex<double>>(dir + "/a.npy", a.view());
        ts::write_npy<std::complex<double>>(dir + "/b.npy", b.view());
        const std::string base = "gemm --a " + dir + "/a.npy --b " + dir + "/b.npy --check --out " + dir + "/out.npy";
        const outcome good = run(3, base + " --op-b c");
        if (good.status != 0 || good.out.find("check: passed") == std::string::npos)
            fail("c64 --op-b c --check on 3 ranks: exit " + std::to_string(good.status) + "\n" + good.out);
    }
    // --reproducible: bitwise the same on any grid (k over several k-blocks), and the one-process
    // result, on column-major (F-order) files and for c64 on row-major ones too: one process's
    // complex kernel adds the parts' products in the same order whatever C's layout, and the
    // ranks' local blocks are column-major.
    int plain_differs = 0;
    for (const auto& [type, lay] : {std::pair{"c64", ts::layout::col_major}, std::pair{"c64", ts::layout::row_major},
                                    std::pair{"c32", ts::layout::col_major}}) {
        const bool dbl = type[1] == '6';
        const ts::index_t k = dbl ? 300 : 450;
        const std::string a = dir + "/ra.npy", b = dir + "/rb.npy", c = dir + "/rc.npy";
        const auto col = lay;
        if (dbl) {
            ts::write_npy<std::complex<double>>(a, random_matrix<std::complex<double>>(k, 37, col, 501).view());
            ts::write_npy<std::complex<double>>(b, random_matrix<std::complex<double>>(k, 29, col, 502).view());
            ts::write_npy<std::complex<double>>(c, random_matrix<std::complex<double>>(37, 29, col, 503).view());
        } else {
            ts::write_npy<std::complex<float>>(a, random_matrix<std::complex<float>>(k, 37, col, 501).view());
            ts::write_npy<std::complex<float>>(b, random_matrix<std::complex<float>>(k, 29, col, 502).view());
            ts::write_npy<std::complex<float>>(c, random_matrix<std::complex<float>>(37, 29, col, 503).view());
        }
        const std::string files = "gemm --a " + a + " --b " + b + " --c " + c + " --op-a c --alpha 1-1j --beta 0.5j --out ";
        if (run(0, files + dir + "/one.npy --reproducible on --quiet").status != 0)
            return fail(std::string(type) + ": one-process --reproducible failed");
        // (One process writes C in C's order; the ranks write C order: values compared.)
        auto same_values = [&](const std::string& x, const std::string& y) {
            const auto fx = ts::read_npy(x), fy = ts::read_npy(y);
            if (fx.type() != fy.type() || fx.rows() != fy.rows() || fx.cols() != fy.cols()) return false;
            return ts::visit_dtype(fx.type(), [&]<class T>() {
                const auto vx = fx.view<T>(), vy = fy.view<T>();
                for (ts::index_t i = 0; i < fx.rows(); ++i)
                    for (ts::index_t j = 0; j < fx.cols(); ++j)
                        if (std::memcmp(&vx(i, j), &vy(i, j), sizeof(T)) != 0) return false;
                return true;
            });
        };
        for (const char* v : {"1 --grid 1x1 --block 50", "2 --grid 2x1 --block 64", "4 --grid 2x2 --block 33"}) {
            const int ranks = v[0] - '0';
            const std::string out = dir + "/r.npy";
            std::remove(out.c_str());
            const outcome r = run(ranks, files + out + " --reproducible on " + (v + 2));
            if (r.status != 0 || !same_values(out, dir + "/one.npy"))
                fail(std::string(type) + (lay == ts::layout::row_major ? " (C-order files)" : " (F-order files)") +
                     " --reproducible on " + v + " differs from one process");
            // Without it the grids' panels order the sums differently: the comparison can fail.
            if (dbl && run(ranks, files + out + " " + (v + 2)).status == 0 && !same_values(out, dir + "/one.npy"))
                ++plain_differs;
        }
    }
    if (plain_differs == 0) fail("complex without --reproducible matched one process on every grid: the test cannot fail");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s RUN_SCRIPT TILESTREAM gemm|jacobi|jacobi_devices|failure|grid|scale\n", argv[0]);
        return 2;
    }
    run_script = argv[1];
    tool = argv[2];
    char templ[] = "/tmp/tilestream-mpi-XXXXXX";
    if (!mkdtemp(templ)) return 2;
    dir = templ;
    const std::string what = argv[3];
    if (what == "gemm") test_gemm();
    else if (what == "jacobi") test_jacobi();
    else if (what == "jacobi_devices") test_jacobi_devices();
    else if (what == "scale") test_scale();
    else if (what == "failure") test_failure();
    else if (what == "grid") test_grid();
    else if (what == "layers") test_layers();
    else if (what == "usage") test_usage();
    else if (what == "parity") test_parity();
    else if (what == "reproducible") test_reproducible();
    else if (what == "nothing_lost") test_nothing_lost();
    else if (what == "no_hang") test_no_hang();
    else if (what == "special_outputs") test_special_outputs();
    else if (what == "complex") test_complex();
    else return 2;
    std::system(("rm -rf " + dir).c_str());
    std::printf("%s: %d failures\n", what.c_str(), failures);
    return failures == 0 ? 0 : 1;
}
