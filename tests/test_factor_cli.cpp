// `tilestream potrf|posv`: random SPD inputs pass --check (in place, out of core on several devices,
// OpenCL), .npy in and out (the factor's other triangle kept), LAPACK's info for a matrix that is
// not positive definite (exit 1, nothing written), --json and --explain, and clear errors.
#include "test_support.hpp"

#include <tilestream/npy.hpp>

#include <cmath>
#include <filesystem>
#include <string>

namespace tilestream {
namespace {

using testing::run_cli;

TEST(FactorCli, RandomInputsPassTheirCheck) {
    const std::vector<std::string> runs = {
        "potrf --n 301 --dtype f64",
        "potrf --n 233 --uplo upper --layout col --devices cpu:3@96KiB --order right",
        "potrf --n 150 --dtype c64 --devices cpu:2@64KiB --tile 32",
        "potrf --n 97 --dtype c32 --uplo upper --reproducible on --devices cpu:2",
        "posv --n 211 --nrhs 7 --dtype f64 --devices cpu:2@64KiB",
        "posv --n 120 --nrhs 3 --dtype c64 --uplo upper",
        "potrf --n 143 --dtype f64 --devices opencl:0@512KiB --tile 48",
    };
    for (const std::string& args : runs) {
        if (args.find("opencl") != std::string::npos) {
            std::string why;
            ASSERT_FALSE(testing::gpu_missing("opencl:0", why)) << why;  // PoCL in CI: never skipped
        }
        const auto r = run_cli(args + " --check");
        EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.out;
        EXPECT_NE(r.out.find("check: passed"), std::string::npos) << args << "\n" << r.out;
        EXPECT_NE(r.out.find("info 0"), std::string::npos) << args << "\n" << r.out;
    }
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

}  // namespace
}  // namespace tilestream
