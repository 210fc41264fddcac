// `tilestream potrf|posv|getrf|gesv`: random inputs pass --check (every dtype, in place, out of core
// on several devices, OpenCL), .npy in and out (the factor's other triangle kept; LU's factors and
// pivots as the library computes them), LAPACK's info for a matrix that is not positive definite or
// is singular (exit 1, nothing written), --json and --explain, and clear errors (exit 2).
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/lu.hpp>
#include <tilestream/npy.hpp>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tilestream {
namespace {

using testing::run_cli;

/// Runs each command line with --check: exit 0, the check passed, info 0; returns the outputs.
std::vector<std::string> expect_checks_pass(const std::vector<std::string>& runs) {
    std::vector<std::string> outputs;
    for (const std::string& args : runs) {
        if (args.find("opencl") != std::string::npos) {
            std::string why;
            EXPECT_FALSE(testing::gpu_missing("opencl:0", why)) << why;  // PoCL in CI: never skipped
        }
        const auto r = run_cli(args + " --check");
        EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.out;
        EXPECT_NE(r.out.find("check: passed"), std::string::npos) << args << "\n" << r.out;
        EXPECT_NE(r.out.find("info 0"), std::string::npos) << args << "\n" << r.out;
        outputs.push_back(r.out);
    }
    return outputs;
}

TEST(FactorCli, RandomInputsPassTheirCheck) {
    const std::vector<std::string> runs = {
        "potrf --n 301 --dtype f64",
        "potrf --n 233 --uplo upper --layout col --devices cpu:3@96KiB --order right",
        "potrf --n 150 --dtype c64 --devices cpu:2@64KiB --tile 32",
        "potrf --n 97 --dtype c32 --uplo upper --reproducible on --devices cpu:2",
        "posv --n 211 --nrhs 7 --dtype f64 --devices cpu:2@64KiB",
        "posv --n 120 --nrhs 3 --dtype c64 --uplo upper",
        "potrf --n 300 --dtype f64 --devices opencl:0@2MiB --reproducible on",  // no CLBlast program to build
    };
    expect_checks_pass(runs);
}

TEST(FactorCli, FilesInFactorOutAndInfo) {
    testing::temp_dir dir;
    const index_t n = 60;
    host_matrix<double> a(n, n, layout::col_major);
    for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j) a(i, j) = i == j ? double(n) : std::sin(double(3 * i + 7 * j)) * ((i + j) % 2 ? 1 : -1);
    for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < i; ++j) a(j, i) = a(i, j);
    write_npy<double>(dir.file("a.npy"), a.view());
    const auto r = run_cli("potrf --a " + dir.file("a.npy") + " --out " + dir.file("l.npy") +
                           " --devices cpu:2@16KiB --tile 16 --check --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"info\": 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"check_passed\": true"), std::string::npos) << r.out;
    const npy_array l = read_npy(dir.file("l.npy"));
    const auto lv = l.view<double>();
    // L L^T = A on the lower triangle; the upper one is A's, untouched.
    double worst = 0;
    for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j) {
            if (j > i) {
                EXPECT_EQ(lv(i, j), a(i, j));
                continue;
            }
            double s = 0;
            for (index_t p = 0; p <= j; ++p) s += lv(i, p) * lv(j, p);
            worst = std::max(worst, std::abs(s - a(i, j)));
        }
    EXPECT_LT(worst, 1e-11 * double(n));
    // Not positive definite at index 20 (a negative pivot): info 21, exit 1, nothing written.
    a(20, 20) = -1.0;
    write_npy<double>(dir.file("bad.npy"), a.view());
    const auto bad = run_cli("potrf --a " + dir.file("bad.npy") + " --out " + dir.file("none.npy") + " --tile 16");
    EXPECT_EQ(bad.exit_code, 1) << bad.out;
    EXPECT_NE(bad.out.find("info 21"), std::string::npos) << bad.out;
    EXPECT_FALSE(std::filesystem::exists(dir.file("none.npy")));
}

TEST(FactorCli, ExplainShowsBothOrdersAndBadInputIsNamed) {
    const auto r = run_cli("potrf --n 200 --dtype f64 --devices cpu@96KiB --explain");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("left-looking"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("right-looking"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("measured: factorization"), std::string::npos) << r.out;
    const auto missing = run_cli("potrf --dtype f64");
    EXPECT_EQ(missing.exit_code, 2) << missing.out;
    EXPECT_NE(missing.out.find("give --n"), std::string::npos) << missing.out;
    const auto order = run_cli("potrf --n 10 --order sideways");
    EXPECT_EQ(order.exit_code, 2) << order.out;
}

/// A file of NaNs where an output goes: a run that does not write it leaves the NaNs.
void poison_file(const std::string& path, index_t rows, index_t cols) {
    host_matrix<double> p(rows, cols, layout::col_major);
    for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) p(i, j) = std::numeric_limits<double>::quiet_NaN();
    write_npy<double>(path, p.view());
}

/// A one-dimensional '<i8' .npy file (the CLI's --ipiv) as its values; fails the test otherwise.
std::vector<std::int64_t> read_int64_npy(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_GE(bytes.size(), 10u) << path;
    if (bytes.size() < 10) return {};
    EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY") << path;
    const std::size_t header = std::size_t(std::uint8_t(bytes[8])) | std::size_t(std::uint8_t(bytes[9])) << 8;
    const std::string dict = bytes.substr(10, header);
    EXPECT_NE(dict.find("'descr': '<i8'"), std::string::npos) << dict;
    EXPECT_NE(dict.find("'fortran_order': False"), std::string::npos) << dict;
    const std::size_t data = 10 + header;
    EXPECT_EQ((bytes.size() - data) % 8, 0u) << path;
    std::vector<std::int64_t> v((bytes.size() - data) / 8);
    if (!v.empty()) std::memcpy(v.data(), bytes.data() + data, v.size() * 8);
    EXPECT_NE(dict.find("'shape': (" + std::to_string(v.size()) + ",)"), std::string::npos) << dict;
    return v;
}

template <class T>
host_matrix<T> random_general(index_t m, index_t n, layout lay, std::uint64_t seed) {
    host_matrix<T> a(m, n, lay);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) {
            if constexpr (is_complex_v<T>) a(i, j) = T(real_type_t<T>(u(rng)), real_type_t<T>(u(rng)));
            else a(i, j) = T(u(rng));
        }
    return a;
}

template <class T>
bool bitwise_equal(host_matrix_view<const T> x, host_matrix_view<const T> y, std::string& where) {
    if (x.rows() != y.rows() || x.cols() != y.cols()) {
        where = "shapes differ";
        return false;
    }
    for (index_t i = 0; i < x.rows(); ++i)
        for (index_t j = 0; j < x.cols(); ++j)
            if (std::memcmp(&x(i, j), &y(i, j), sizeof(T)) != 0) {
                where = "(" + std::to_string(i) + ", " + std::to_string(j) + ")";
                return false;
            }
    return true;
}

TEST(LuCli, RandomInputsPassTheirCheck) {
    const std::vector<std::string> runs = {
        "getrf --n 301 --dtype f64 --anchor",
        "getrf --n 233 --layout col --devices cpu:3@96KiB --order right",
        "getrf --m 157 --n 211 --dtype c64 --devices cpu:2@256KiB --tile 32",
        "getrf --m 203 --n 131 --dtype c32 --reproducible on --devices cpu:2 --order left",
        "gesv --n 211 --nrhs 7 --dtype f64 --devices cpu:2@128KiB",
        "gesv --n 120 --nrhs 3 --dtype c64 --layout col",
        "gesv --n 99 --nrhs 2 --devices cpu@64KiB --order left",
        "gesv --n 77 --nrhs 5 --dtype c32 --tile 16 --kernel tiled",
        "getrf --n 300 --dtype f64 --devices opencl:0@2MiB --reproducible on",  // no CLBlast program to build
    };
    const std::vector<std::string> outputs = expect_checks_pass(runs);
    ASSERT_EQ(outputs.size(), runs.size());
    EXPECT_NE(outputs[0].find("dgetrf_"), std::string::npos) << outputs[0];  // the first run's --anchor
}

/// The CLI's getrf (--out, --ipiv) and gesv (--out) on .npy files equal the library's calls on the
/// same matrices, bitwise (reproducible mode on both sides), and the pivots are LAPACK's 1-based ones.
template <class T>
void files_round_trip(const testing::temp_dir& dir, index_t m, index_t n, layout lay, std::uint64_t seed) {
    const std::string what = std::string(to_string(dtype_of<T>())) + " " + std::to_string(m) + "x" + std::to_string(n) +
                             (lay == layout::col_major ? " col" : " row");
    const host_matrix<T> a = random_general<T>(m, n, lay, seed);
    const host_matrix<T> b = random_general<T>(m, 3, lay, seed + 1);
    write_npy<T>(dir.file("a.npy"), a.view());
    write_npy<T>(dir.file("b.npy"), b.view());
    poison_file(dir.file("lu.npy"), m, n);
    poison_file(dir.file("x.npy"), m, 3);
    const std::string devices = " --devices cpu:2@256KiB --reproducible on";  // staged: a budget
    const auto r = run_cli("getrf --a " + dir.file("a.npy") + " --out " + dir.file("lu.npy") + " --ipiv " +
                           dir.file("p.npy") + devices + " --check --json");
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.out;
    EXPECT_NE(r.out.find("\"info\": 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"m\": " + std::to_string(m)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"check_passed\": true"), std::string::npos) << r.out;

    context ctx("cpu:2@256KiB", {.reproducible = true});
    host_matrix<T> lu(m, n, lay);
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) lu(i, j) = a(i, j);
    std::vector<index_t> ipiv(std::size_t(std::min(m, n)), -1);
    ASSERT_EQ(ctx.getrf<T>(lu.view(), ipiv).info, 0) << what;
    const npy_array got = read_npy(dir.file("lu.npy"));
    ASSERT_EQ(got.type(), dtype_of<T>()) << what;
    std::string where;
    EXPECT_TRUE(bitwise_equal<T>(got.view<T>(), lu.view(), where)) << what << ": --out differs from ctx.getrf at " << where;
    const std::vector<std::int64_t> p = read_int64_npy(dir.file("p.npy"));
    ASSERT_EQ(p.size(), ipiv.size()) << what;
    for (std::size_t i = 0; i < p.size(); ++i) {
        ASSERT_EQ(p[i], ipiv[i]) << what << ": ipiv[" << i << "]";
        ASSERT_TRUE(p[i] >= index_t(i) + 1 && p[i] <= m) << what << ": not LAPACK's 1-based ipiv: " << p[i];
    }
    if (m != n) return;
    const auto s = run_cli("gesv --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --out " + dir.file("x.npy") +
                           devices + " --check");
    ASSERT_EQ(s.exit_code, 0) << what << "\n" << s.out;
    host_matrix<T> a2(m, n, lay), x(m, 3, lay);
    for (index_t i = 0; i < m; ++i) {
        for (index_t j = 0; j < n; ++j) a2(i, j) = a(i, j);
        for (index_t j = 0; j < 3; ++j) x(i, j) = b(i, j);
    }
    ASSERT_EQ(ctx.gesv<T>(a2.view(), ipiv, x.view()).info, 0) << what;
    const npy_array gx = read_npy(dir.file("x.npy"));
    EXPECT_TRUE(bitwise_equal<T>(gx.view<T>(), x.view(), where)) << what << ": gesv --out differs from ctx.gesv at " << where;
}

TEST(LuCli, FilesRoundTripAgainstTheLibrary) {
    testing::temp_dir dir;
    files_round_trip<double>(dir, 67, 67, layout::col_major, 3);
    files_round_trip<float>(dir, 83, 61, layout::row_major, 5);
    files_round_trip<std::complex<float>>(dir, 45, 71, layout::col_major, 7);
    files_round_trip<std::complex<double>>(dir, 53, 53, layout::row_major, 9);
}

TEST(LuCli, SingularMatrixGivesInfoAndWritesNothing) {
    testing::temp_dir dir;
    const index_t n = 61;
    // Column 20 zero: U(21, 21) is exactly zero (every update of that column subtracts zeros).
    host_matrix<double> a = random_general<double>(n, n, layout::col_major, 13);
    for (index_t i = 0; i < n; ++i) a(i, 20) = 0.0;
    write_npy<double>(dir.file("a.npy"), a.view());
    write_npy<double>(dir.file("b.npy"), random_general<double>(n, 2, layout::col_major, 14).view());
    for (const std::string& devices : {"cpu", "cpu:2@24KiB"}) {
        const auto r = run_cli("getrf --a " + dir.file("a.npy") + " --out " + dir.file("lu.npy") + " --ipiv " +
                               dir.file("p.npy") + " --check --devices " + devices);
        EXPECT_EQ(r.exit_code, 1) << devices << "\n" << r.out;
        EXPECT_NE(r.out.find("info 21: U(21, 21) is exactly zero"), std::string::npos) << r.out;
        const auto s = run_cli("gesv --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --out " +
                               dir.file("x.npy") + " --json --devices " + devices);
        EXPECT_EQ(s.exit_code, 1) << devices << "\n" << s.out;
        EXPECT_NE(s.out.find("\"info\": 21"), std::string::npos) << s.out;
        EXPECT_NE(s.out.find("\"files_written\": []"), std::string::npos) << s.out;
    }
    EXPECT_EQ(dir.entries(), 2u) << "an output of a singular run was written";
}

TEST(LuCli, BadInputIsNamedAndExitsTwo) {
    testing::temp_dir dir;
    write_npy<double>(dir.file("rect.npy"), random_general<double>(5, 7, layout::col_major, 1).view());
    write_npy<double>(dir.file("sq.npy"), random_general<double>(6, 6, layout::col_major, 2).view());
    write_npy<double>(dir.file("b5.npy"), random_general<double>(5, 2, layout::col_major, 3).view());
    write_npy<float>(dir.file("b6f.npy"), random_general<float>(6, 2, layout::col_major, 4).view());
    const std::string out = " --out " + dir.file("out.npy");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"getrf --dtype f64" + out, "give --n"},
        {"gesv --n 10 --order sideways" + out, "order must be auto, left or right"},
        {"getrf --n 10 --uplo lower" + out, "unknown option --uplo"},
        {"gesv --n 10 --m 5" + out, "unknown option --m"},
        {"getrf --n 0" + out, "--n must be at least 1"},
        {"gesv --a " + dir.file("rect.npy") + " --b " + dir.file("b5.npy") + out, "must be square"},
        {"gesv --a " + dir.file("sq.npy") + " --b " + dir.file("b5.npy") + out, "B has 5 rows"},
        {"gesv --a " + dir.file("sq.npy") + " --b " + dir.file("b6f.npy") + out, "dtypes differ"},
        {"gesv --a " + dir.file("sq.npy") + out, "--b is missing"},
        {"getrf --a " + dir.file("sq.npy") + " --dtype f32" + out, "holds f64"},
        {"getrf --a " + dir.file("sq.npy") + " --n 6" + out, "--n is for random inputs"},
        {"getrf --n 10 --ipiv " + dir.file("p.svg") + out, "--ipiv"},
        {"getrf --a " + dir.file("sq.npy") + " --ipiv " + dir.file("sq.npy") + out, "an output may not overwrite an input"},
        {"getrf --n 10 --reproducible maybe" + out, "--reproducible expects on or off"},
    };
    for (const auto& [args, message] : cases) {
        const auto r = run_cli(args);
        EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
        EXPECT_NE(r.out.find(message), std::string::npos) << args << "\n" << r.out;
        EXPECT_FALSE(std::filesystem::exists(dir.file("out.npy"))) << args;
    }
    EXPECT_EQ(dir.entries(), 4u);
    // The tool's command list and its "did you mean".
    const auto help = run_cli("--help");
    EXPECT_NE(help.out.find("getrf|gesv"), std::string::npos) << help.out;
    const auto typo = run_cli("gesvv --n 3");
    EXPECT_EQ(typo.exit_code, 2) << typo.out;
    EXPECT_NE(typo.out.find("did you mean gesv?"), std::string::npos) << typo.out;
}

TEST(LuCli, ExplainTraceAndTimeline) {
    testing::temp_dir dir;
    const auto r = run_cli("gesv --n 200 --nrhs 3 --dtype f64 --devices cpu@96KiB --explain --trace " + dir.file("t.json") +
                           " --timeline " + dir.file("t.svg") + " --check");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("left-looking"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("right-looking"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("measured: factorization"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("getrf: A 200x200"), std::string::npos) << r.out;
    EXPECT_GT(std::filesystem::file_size(dir.file("t.json")), 100u);
    EXPECT_GT(std::filesystem::file_size(dir.file("t.svg")), 100u);
}

/// The number after "key": in a --json line (NaN when absent).
double json_number(const std::string& out, const std::string& key) {
    const auto at = out.find("\"" + key + "\": ");
    if (at == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
    return std::strtod(out.c_str() + at + key.size() + 4, nullptr);
}

TEST(FactorCli, SolvesReportTheirOwnBytesBesideTheirPredictionOutOfCore) {
    // gesv and posv out of core with about a quarter of A fitting (the case): the
    // factorization's bytes against its plan, and the solve's (two TRSMs) against theirs, apart
    // (they were once summed and compared with the factorization's prediction alone).
    for (const std::string args : {"gesv --n 300 --nrhs 40 --dtype f64 --devices cpu@180KiB",
                                   "posv --n 257 --nrhs 33 --dtype c64 --uplo upper --devices cpu@256KiB",
                                   "posv --n 400 --nrhs 33 --dtype f32 --devices cpu@160KiB"}) {
        const auto r = run_cli(args + " --json --check");
        ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.out;
        const double h2d = json_number(r.out, "bytes_h2d"), predicted = json_number(r.out, "predicted_bytes_h2d");
        const double solve = json_number(r.out, "solve_bytes_h2d"), predicted_solve = json_number(r.out, "predicted_solve_bytes_h2d");
        const double solve_d2h = json_number(r.out, "solve_bytes_d2h"), predicted_solve_d2h = json_number(r.out, "predicted_solve_bytes_d2h");
        EXPECT_GT(predicted, 0) << r.out;
        EXPECT_GT(predicted_solve, 0) << r.out;
        EXPECT_NEAR(h2d, predicted, 0.1 * predicted) << args << "\n" << r.out;
        EXPECT_NEAR(solve, predicted_solve, 0.1 * predicted_solve) << args << "\n" << r.out;
        EXPECT_NEAR(solve_d2h, predicted_solve_d2h, 0.1 * predicted_solve_d2h) << args << "\n" << r.out;
        EXPECT_GT(json_number(r.out, "predicted_solve_seconds"), 0) << r.out;
        EXPECT_GT(json_number(r.out, "solve_seconds"), 0) << r.out;
        const auto e = run_cli(args + " --explain");
        ASSERT_EQ(e.exit_code, 0) << e.out;
        EXPECT_NE(e.out.find("measured: solve"), std::string::npos) << e.out;
        EXPECT_NE(e.out.find("  solve           trsm"), std::string::npos) << e.out;
    }
}

}  // namespace
}  // namespace tilestream
