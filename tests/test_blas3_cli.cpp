// The Level 3 commands of the tool: every routine checked on random inputs (in place, out of core on
// several devices, OpenCL), .npy files in and out against the reference, --json, --explain,
// --timeline, and clear errors (exit 2) for bad shapes, options and precisions.
#include "blas3_support.hpp"

#include <tilestream/npy.hpp>

#include <complex>
#include <filesystem>

namespace tilestream {
namespace {

using testing::run_cli;

TEST(Blas3Cli, EveryRoutinePassesItsCheck) {
    const std::vector<std::string> runs = {
        "trsm --m 301 --n 157 --side right --uplo upper --trans t --diag unit --dtype f64",
        "trsm --m 233 --n 190 --devices cpu:3@96KiB --order right --alpha -0.5",
        "trmm --m 211 --n 97 --layout col --devices cpu:2@64KiB",
        "symm --m 120 --n 211 --side right --uplo upper --beta 0.5 --devices cpu:3",
        "syrk --n 190 --k 77 --trans t --beta 2 --devices cpu:2@48KiB --dtype f64",
        "syr2k --n 143 --k 201 --uplo upper --devices opencl:0@512KiB --kernel tiled",
    };
    for (const std::string& args : runs) {
        if (args.find("opencl") != std::string::npos) {
            std::string why;
            if (testing::gpu_missing("opencl:0", why)) continue;
        }
        const auto r = run_cli(args + " --check");
        EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.out;
        EXPECT_NE(r.out.find("check: passed"), std::string::npos) << args << "\n" << r.out;
    }
}

TEST(Blas3Cli, FilesInFileOutMatchTheReference) {
    testing::temp_dir dir;
    host_matrix<double> a(70, 70, layout::col_major), b(70, 45, layout::row_major);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    for (index_t i = 0; i < 70; ++i) a(i, i) = 3.0 + a(i, i);
    write_npy<double>(dir.file("a.npy"), a.view());
    write_npy<double>(dir.file("b.npy"), b.view());
    const auto r = run_cli("trsm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --uplo upper --alpha 2 --out " +
                           dir.file("x.npy") + " --devices cpu:2@32KiB --tile 16 --check");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const npy_array x = read_npy(dir.file("x.npy"));
    const auto xv = x.view<double>();
    blas3_operands<double> ops;
    ops.alpha = 2;
    ops.a = a.view();
    ops.c = b.view();
    reference_blas3<double>(blas3_routine::trsm, {side::left, uplo::upper, op::n, diag::non_unit}, ops);
    double worst = 0;
    for (index_t i = 0; i < 70; ++i)
        for (index_t j = 0; j < 45; ++j) worst = std::max(worst, std::abs(xv(i, j) - b(i, j)));
    EXPECT_LT(worst, 1e-12);
    EXPECT_EQ(xv.layout(), layout::row_major);
}

// Complex operands from and to .npy files (HERK with a complex alpha refused, a real one run), and
// the outputs registered with the run's files: --out may replace the written operand's input (--b
// of trsm), never another input, and a failed check leaves every output unwritten.
TEST(Blas3Cli, ComplexFilesAndOutputsCommittedTogether) {
    using z = std::complex<double>;
    testing::temp_dir dir;
    host_matrix<z> a(23, 31, layout::col_major), c(23, 23, layout::row_major);
    for (index_t i = 0; i < 23; ++i)
        for (index_t j = 0; j < 31; ++j) a(i, j) = z(0.01 * double((i * 7 + j * 3) % 19) - 0.09, 0.02 * double((i + 2 * j) % 11) - 0.1);
    for (index_t i = 0; i < 23; ++i)
        for (index_t j = 0; j < 23; ++j) c(i, j) = z(0.5 - 0.03 * double(i), 0.25 + 0.01 * double(j));
    write_npy<z>(dir.file("a.npy"), a.view());
    write_npy<z>(dir.file("c.npy"), c.view());
    const std::string files = "herk --a " + dir.file("a.npy") + " --c " + dir.file("c.npy");
    const auto refused = run_cli(files + " --alpha 1+1j --beta 0.5 --out " + dir.file("x.npy"));
    EXPECT_EQ(refused.exit_code, 2) << refused.out;
    EXPECT_FALSE(std::filesystem::exists(dir.file("x.npy")));
    const auto r = run_cli(files + " --alpha -0.75 --beta 0.5 --uplo upper --out " + dir.file("x.npy") + " --timeline " +
                           dir.file("t.svg") + " --check");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("wrote " + dir.file("x.npy")), std::string::npos) << r.out;
    const npy_array x = read_npy(dir.file("x.npy"));
    ASSERT_EQ(x.type(), dtype::c64);
    blas3_operands<z> ops;
    ops.alpha = -0.75;
    ops.beta = 0.5;
    ops.a = a.view();
    ops.c = c.view();
    reference_blas3<z>(blas3_routine::herk, {side::left, uplo::upper, op::n, diag::non_unit}, ops);
    const auto xv = x.view<z>();
    double worst = 0;
    for (index_t i = 0; i < 23; ++i)
        for (index_t j = 0; j < 23; ++j) worst = std::max(worst, std::abs(xv(i, j) - c(i, j)));
    EXPECT_LT(worst, 1e-12);
    EXPECT_TRUE(std::filesystem::exists(dir.file("t.svg")));

    // trsm --out may name --b (B is overwritten in place), not --a.
    host_matrix<double> t(9, 9), b(9, 4);
    fill_random(t.view(), 3);
    fill_random(b.view(), 4);
    for (index_t i = 0; i < 9; ++i) t(i, i) = 3.0 + t(i, i);
    write_npy<double>(dir.file("t.npy"), t.view());
    write_npy<double>(dir.file("b.npy"), b.view());
    const std::string trsm = "trsm --a " + dir.file("t.npy") + " --b " + dir.file("b.npy");
    const auto onto_a = run_cli(trsm + " --out " + dir.file("t.npy"));
    EXPECT_EQ(onto_a.exit_code, 2) << onto_a.out;
    EXPECT_NE(onto_a.out.find("--a"), std::string::npos) << onto_a.out;
    const auto onto_b = run_cli(trsm + " --out " + dir.file("b.npy") + " --check");
    ASSERT_EQ(onto_b.exit_code, 0) << onto_b.out;
    const npy_array solved = read_npy(dir.file("b.npy"));
    blas3_operands<double> dops;
    dops.alpha = 1;
    dops.a = t.view();
    dops.c = b.view();
    reference_blas3<double>(blas3_routine::trsm, {side::left, uplo::lower, op::n, diag::non_unit}, dops);
    double worst_b = 0;
    for (index_t i = 0; i < 9; ++i)
        for (index_t j = 0; j < 4; ++j) worst_b = std::max(worst_b, std::abs(solved.view<double>()(i, j) - b(i, j)));
    EXPECT_LT(worst_b, 1e-12);
}

TEST(Blas3Cli, JsonExplainAndTimeline) {
    testing::temp_dir dir;
    const auto j = run_cli("trsm --m 300 --n 200 --devices cpu:2@256KiB --json --check --anchor --repeat 2");
    ASSERT_EQ(j.exit_code, 0) << j.out;
    for (const char* key : {"\"routine\": \"trsm\"", "\"order\"", "\"tasks\"", "\"bytes_h2d\"", "\"predicted_bytes_h2d\"",
                            "\"orders\"", "\"check_passed\": true", "\"ratio_to_anchor\"", "\"device_shares\""})
        EXPECT_NE(j.out.find(key), std::string::npos) << key << "\n" << j.out;
    const auto e = run_cli("syrk --n 200 --k 100 --devices cpu@128KiB --explain --timeline " + dir.file("t.svg"));
    ASSERT_EQ(e.exit_code, 0) << e.out;
    for (const char* text : {"plan: syrk", "tile slots", "measured:", "predicted"})
        EXPECT_NE(e.out.find(text), std::string::npos) << text << "\n" << e.out;
    EXPECT_TRUE(std::filesystem::exists(dir.file("t.svg")));
}

// --explain shows the plan it runs: on devices of different kinds the balance keeps each device's
// measured rate (an explanation's rates once replaced them, and a CPU beside an H200 then took 2
// of 36 syrk tasks: 0.41 s against 0.015 s on the GPU alone at half the order).
TEST(Blas3Cli, ExplainKeepsEachDevicesRateForTheBalance) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (const char* routine : {"syrk --n 300 --k 200", "potrf --n 300"}) {
        const auto e = run_cli(std::string(routine) + " --devices cpu@1MiB,opencl:0@1MiB --explain --check");
        ASSERT_EQ(e.exit_code, 0) << e.out;
        EXPECT_NE(e.out.find("balance         cpu:0 "), std::string::npos) << routine << "\n" << e.out;
        EXPECT_NE(e.out.find("(each device's measured GEMM rate)"), std::string::npos) << routine << "\n" << e.out;
    }
}

TEST(Blas3Cli, ClearErrorsWithExitCode2) {
    testing::temp_dir dir;
    host_matrix<float> a(5, 6), b(5, 3);
    write_npy<float>(dir.file("a.npy"), a.view());
    write_npy<float>(dir.file("b.npy"), b.view());
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"trsm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy"), "A is 5x6"},
        {"syrk --n 10 --k 5 --side left", "unknown option --side"},
        {"trsm --m 10", "give --m and --n"},
        {"trsm --m 10 --n 10 --order sideways", "--order expects"},
        {"herk --n 10 --k 5", "needs a complex type"},
        {"trmm --m 10 --n 10 --uplo middle", "uplo must be lower or upper"},
        {"symm --m 400 --n 400 --devices cpu@1KiB", "does not fit a budget"},
    };
    for (const auto& [args, text] : cases) {
        const auto r = run_cli(args);
        EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
        EXPECT_NE(r.out.find(text), std::string::npos) << args << "\n" << r.out;
    }
}

}  // namespace
}  // namespace tilestream
