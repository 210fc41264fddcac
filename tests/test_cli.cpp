// The command-line tool end to end: checked runs for every kernel, file inputs, JSON, and errors
// with exit code 2 and no output file left behind.
#include "test_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/verify.hpp>

#include <fstream>

namespace tilestream {
namespace {

using testing::run_cli;
using testing::temp_dir;

class cli_gemm_check : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(cli_gemm_check, OddShapePassesCheck) {
    const auto& [kernel, type] = GetParam();
    auto r = run_cli("gemm --m 1031 --n 517 --k 769 --kernel " + kernel + " --dtype " + type + " --check");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("check: relative Frobenius error"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("OK"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(kernels, cli_gemm_check,
                         ::testing::Combine(::testing::Values("reference", "naive", "tiled", "vendor"),
                                            ::testing::Values("f32", "f64")));

TEST(cli, JsonHasTheRequiredFields) {
    auto r = run_cli("gemm --m 33 --n 17 --k 9 --dtype f64 --kernel tiled --alpha 0.5 --beta 2 --op-a t --check --json --repeat 3");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    for (const char* key : {"\"m\": 33", "\"n\": 17", "\"k\": 9", "\"dtype\": \"f64\"", "\"kernel\": \"tiled\"",
                            "\"devices\": \"cpu:0\"", "\"seconds\": ", "\"gflops\": ", "\"rel_error\": "})
        EXPECT_NE(r.out.find(key), std::string::npos) << key << " missing in " << r.out;
}

TEST(cli, FilesInFileOut) {
    temp_dir dir;
    host_matrix<double> a(23, 11, layout::col_major), b(11, 5), c(23, 5);
    fill_random(a.view(), 5);
    fill_random(b.view(), 6);
    fill_random(c.view(), 7);
    write_npy<double>(dir.file("a.npy"), a.view());
    write_npy<double>(dir.file("b.npy"), b.view());
    write_npy<double>(dir.file("c.npy"), c.view());
    auto r = run_cli("gemm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --c " + dir.file("c.npy") +
                     " --beta -1 --alpha 3 --kernel naive --check --out " + dir.file("out.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    auto out = read_npy(dir.file("out.npy"));
    ASSERT_EQ(out.rows(), 23);
    ASSERT_EQ(out.cols(), 5);
    auto v = out.view<double>();
    host_matrix<double> ref(23, 5);
    for (index_t i = 0; i < 23; ++i)
        for (index_t j = 0; j < 5; ++j) ref(i, j) = -c(i, j);
    reference_gemm<double>(op::n, op::n, 3.0, a.view(), b.view(), 1.0, ref.view());
    EXPECT_LE(relative_frobenius_error<double>(v, ref.view()), 1e-14);
}

void expect_usage_error(const std::string& args, const std::string& phrase) {
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(phrase), std::string::npos) << args << "\nmissing '" << phrase << "' in:\n" << r.out;
}

TEST(cli_bad_input, ClearErrorsWithExitCode2) {
    expect_usage_error("gemm --m 10 --n 10", "give --m, --n and --k");
    expect_usage_error("gemm --m 10 --n 10 --k -3", "--k must be at least 1, got -3");
    expect_usage_error("gemm --m 10 --n 10 --k 99999999999999999999", "does not fit in 64 bits");
    expect_usage_error("gemm --m 4294967296 --n 4294967296 --k 4", "overflows 64 bits");
    expect_usage_error("gemm --m 10 --n 10 --k 10 --devices tpu:0", "devices present: cpu");
    expect_usage_error("gemm --m 10 --n 10 --k 10 --devices cuda:9", "unknown device 'cuda:9'");
    expect_usage_error("gemm --m 100 --n 100 --k 100 --memory-budget 4KiB", "no plan fits the device budget of 4.0 KiB");
    expect_usage_error("gemm --m 10 --n 10 --k 10 --kernel magic", "unknown kernel 'magic'");
    expect_usage_error("gemm --m 10 --n 10 --k 10 --dtype f16", "unknown dtype 'f16'");
    expect_usage_error("gemm --m 10 --n 10 --k 10 --bogus", "unknown option --bogus");
    expect_usage_error("frobnicate", "unknown command 'frobnicate'");
}

TEST(cli_bad_input, BadFilesAndNoPartialOutput) {
    temp_dir dir;
    host_matrix<float> a(4, 3), b(5, 2);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    write_npy<float>(dir.file("a.npy"), a.view());
    write_npy<float>(dir.file("b.npy"), b.view());
    host_matrix<double> bd(3, 2);
    fill_random(bd.view(), 3);
    write_npy<double>(dir.file("bd.npy"), bd.view());
    {
        std::ofstream junk(dir.file("junk.npy"), std::ios::binary);
        junk << "this is not numpy";
    }
    {
        std::ifstream in(dir.file("a.npy"), std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), {});
        std::ofstream cut(dir.file("cut.npy"), std::ios::binary);
        cut << bytes.substr(0, bytes.size() - 5);
    }
    const std::size_t before = dir.entries();
    const std::string out = " --out " + dir.file("c.npy");
    expect_usage_error("gemm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + out, "inner dimensions differ");
    expect_usage_error("gemm --a " + dir.file("a.npy") + " --b " + dir.file("bd.npy") + out, "dtypes differ");
    expect_usage_error("gemm --a " + dir.file("junk.npy") + " --b " + dir.file("b.npy") + out, "junk.npy");
    expect_usage_error("gemm --a " + dir.file("cut.npy") + " --b " + dir.file("b.npy") + out, "truncated");
    expect_usage_error("gemm --a " + dir.file("missing.npy") + " --b " + dir.file("b.npy") + out, "missing.npy");
    expect_usage_error("gemm --m 3 --n 4 --k 5 --out " + dir.file("no/such/dir/c.npy"), "c.npy");
    EXPECT_EQ(dir.entries(), before);  // nothing written, no temporary left
}

TEST(cli, DevicesListsTheCpu) {
    auto r = run_cli("devices");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("cpu:0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("CUDA:"), std::string::npos) << r.out;
    auto j = run_cli("devices --json");
    EXPECT_EQ(j.exit_code, 0) << j.out;
    EXPECT_NE(j.out.find("\"id\": \"cpu:0\""), std::string::npos) << j.out;
    EXPECT_NE(j.out.find("\"threads\": "), std::string::npos) << j.out;
}

}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {

/// The progress line appears only on a terminal and only for runs longer than a second; `script`
/// gives the tool a pseudo-terminal.
TEST(cli, ProgressLineOnATerminal) {
    if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "no 'script' command for a pseudo-terminal";
    const std::string run = std::string("script -qec \"") + TILESTREAM_CLI_PATH +
                            " gemm --m 1000 --n 1000 --k 2000 --dtype f64 --kernel reference --memory-budget 2MiB";
    auto shown = testing::run_cli_raw(run + "\" /dev/null");
    EXPECT_NE(shown.find("tiles, "), std::string::npos) << shown;
    EXPECT_NE(shown.find("GFLOP/s, ETA"), std::string::npos) << shown;
    auto quiet = testing::run_cli_raw(run + " --quiet\" /dev/null");
    EXPECT_EQ(quiet.find("ETA"), std::string::npos) << quiet;
    EXPECT_NE(quiet.find("GFLOP/s"), std::string::npos) << quiet;  // the result line is still there
    auto piped = run_cli("gemm --m 1000 --n 1000 --k 2000 --dtype f64 --kernel reference --memory-budget 2MiB");
    EXPECT_EQ(piped.out.find("ETA"), std::string::npos) << "no progress line when stderr is not a terminal";
}

}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {

/// CLI11 (issue 14 part 5): --help generated for every command, "did you mean" for misspelt
/// options and commands, typed values rejected while parsing with the option named.
TEST(cli, HelpForEveryCommandAndSuggestions) {
    for (const std::string cmd : {"devices", "gemm", "jacobi", "scale gemm", "scale jacobi", "timeline"}) {
        auto r = run_cli(cmd + " --help");
        EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.out;
        EXPECT_NE(r.out.find("Usage: tilestream " + cmd), std::string::npos) << r.out;
    }
    auto gemm = run_cli("gemm --help");
    for (const char* opt : {"--m INT", "--alpha NUMBER", "--memory-budget BYTES", "--strategy", "--check", "Freivalds"})
        EXPECT_NE(gemm.out.find(opt), std::string::npos) << opt << " missing in\n" << gemm.out;
    expect_usage_error("gemm --m 8 --n 8 --k 8 --memory-buget 1MiB", "unknown option --memory-buget (did you mean --memory-budget?)");
    expect_usage_error("jacobi --iter 3", "unknown option --iter (did you mean --iters?)");
    expect_usage_error("gemn --m 8", "unknown command 'gemn' (did you mean gemm?)");
    expect_usage_error("scale gemmm --m 8", "did you mean gemm?");
    expect_usage_error("gemm --m 8 --n 8 --k eight", "--k expects an integer, got 'eight'");
    expect_usage_error("gemm --m 8 --n 8 --k 8 --alpha two", "--alpha expects a number, got 'two'");
    expect_usage_error("gemm --m 8 --n 8 --k 8 --json=1", "option --json takes no value");
    expect_usage_error("gemm --m 8 --n 8 --k", "--k");
    expect_usage_error("gemm --m 8 --n 8 --k 8 stray", "unexpected argument 'stray'");
    // --name=value, a negative value after a space and the last of a repeated option all work.
    auto r = run_cli("gemm --m=20 --n 12 --k 12 --k 7 --alpha -2 --beta=0 --check --json");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("\"k\": 7"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"alpha\": -2"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tilestream
