// The command-line tool end to end: checked runs for every kernel, file inputs, JSON, and errors
// with exit code 2 and no output file left behind.
#include "test_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/verify.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

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

// One device with a budget runs on the task engine unless --engine pipeline asks otherwise; --explain
// and --json say which ran, and both pass their check.
TEST(cli, EngineIsTheTaskEngineByDefaultAndNamed) {
    for (const std::string engine : {"", "tasks", "pipeline"}) {
        const std::string flag = engine.empty() ? "" : " --engine " + engine;
        const auto r = run_cli("gemm --m 301 --n 203 --k 157 --memory-budget 96KiB --check --explain --json" + flag);
        ASSERT_EQ(r.exit_code, 0) << r.out;
        const std::string expected = engine.empty() ? "tasks" : engine;
        EXPECT_NE(r.out.find("  engine          " + expected + " ("), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("\"engine\": \"" + expected + "\""), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("\"check_passed\": true"), std::string::npos) << r.out;
    }
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
    expect_usage_error("gemm --m 10 --n 10 --k 10 --engine warp", "--engine expects tasks or pipeline, got 'warp'");
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

/// `devices --kernels` shows the kernels measured per precision and shape class and the default
/// each gets (issue 27: kernel choice by measurement, shown).
TEST(cli, DevicesShowsTheKernelsMeasuredAndTheDefaultChosen) {
    auto r = run_cli("devices --kernels");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    for (const char* line : {"f32 square", "f64 small", "c32 thin-k", "c64 thin-m", "f32 thin-n", "vendor ", "tiled ", "GFLOP/s"})
        EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
    EXPECT_TRUE(r.out.find("-> default vendor") != std::string::npos || r.out.find("-> default tiled") != std::string::npos)
        << r.out;
    EXPECT_EQ(run_cli("devices").out.find("-> default"), std::string::npos);  // measured only when asked
}

}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {

/// The progress line appears only on a terminal and only for runs longer than a second; `script`
/// gives the tool a pseudo-terminal.
TEST(cli, ProgressLineOnATerminal) {
    if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "no 'script' command for a pseudo-terminal";
    // Each run lasts past the line's first second (the reference kernel, 3-4 s in Release at
    // k = 2000); the sanitized tool's reference kernel (-O2, instrumented) is about twice as slow,
    // so under the sanitizers k = 800 (46 s of ASan's run at k = 2000; at k = 400 one run took
    // 3.0 s on a loaded 2-core machine, too close to the second on a fast idle one).
    const std::string k = testing::sanitized ? "800" : "2000";
    const std::string gemm = "gemm --m 1000 --n 1000 --k " + k + " --dtype f64 --kernel reference --memory-budget 2MiB";
    const std::string run = std::string("script -qec \"") + TILESTREAM_CLI_PATH + " " + gemm;
    auto shown = testing::run_cli_raw(run + "\" /dev/null");
    EXPECT_NE(shown.find("steps, "), std::string::npos) << shown;  // bounded steps (issue 27)
    EXPECT_NE(shown.find("GFLOP/s, ETA"), std::string::npos) << shown;
    auto quiet = testing::run_cli_raw(run + " --quiet\" /dev/null");
    EXPECT_EQ(quiet.find("ETA"), std::string::npos) << quiet;
    EXPECT_NE(quiet.find("GFLOP/s"), std::string::npos) << quiet;  // the result line is still there
    auto piped = run_cli(gemm);
    EXPECT_EQ(piped.out.find("ETA"), std::string::npos) << "no progress line when stderr is not a terminal";
}

/// Steps of ~0.2 s are planned only for a run that shows them (the progress line): piped or
/// --quiet, a product past the step bound is one call. Declared rates (1 GFLOP/s) put 600^3 f64
/// (0.43 s) past the bound on any machine.
// With no --devices the CLI takes TILESTREAM_DEVICES (the drop-in's setting), else auto; --devices
// wins; a bad value is named with where it came from, before any work.
TEST(cli, DefaultDevicesFromTheEnvironment) {
    const std::string cli = TILESTREAM_CLI_PATH, gemm = " gemm --m 64 --n 48 --k 32 --json --quiet";
    const std::string two = testing::run_cli_raw("TILESTREAM_DEVICES=cpu:2 " + cli + gemm);
    EXPECT_NE(two.find("\"devices\": \"cpu:0,cpu:1\""), std::string::npos) << two;
    const std::string named = testing::run_cli_raw("TILESTREAM_DEVICES=cpu:2 " + cli + gemm + " --devices cpu");
    EXPECT_NE(named.find("\"devices\": \"cpu:0\""), std::string::npos) << named;
    const std::string bad = testing::run_cli_raw("TILESTREAM_DEVICES=bogus " + cli + gemm + " 2>&1; echo \"exit=$?\"");
    EXPECT_NE(bad.find("TILESTREAM_DEVICES (the default of --devices): unknown device 'bogus'"), std::string::npos) << bad;
    EXPECT_NE(bad.find("exit=2"), std::string::npos) << bad;
}

TEST(cli, StepsOnlyWhenTheProgressLineShows) {
    if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "no 'script' command for a pseudo-terminal";
    const std::string args = " gemm --m 600 --n 600 --k 600 --dtype f64 --rates gflops=1";
    const std::string run = std::string("script -qec \"") + TILESTREAM_CLI_PATH + args;
    const auto shown = testing::run_cli_raw(run + "\" /dev/null");
    EXPECT_NE(shown.find("strategy=zero-copy"), std::string::npos) << "a terminal run is cut into steps:\n" << shown;
    const auto quiet = testing::run_cli_raw(run + " --quiet\" /dev/null");
    EXPECT_NE(quiet.find("strategy=direct"), std::string::npos) << "--quiet shows no steps, so none are planned:\n" << quiet;
    const auto piped = run_cli(args.substr(1));
    ASSERT_EQ(piped.exit_code, 0) << piped.out;
    EXPECT_NE(piped.out.find("strategy=direct"), std::string::npos) << "a piped run is one call:\n" << piped.out;
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


// ---- stacks of matrices: .npy inputs of 3 or more dimensions (issue 27) ----

/// A stack file of `count` random matrices rows x cols (C order) with leading shape `lead`;
/// returns the values.
template <class T>
std::vector<T> write_stack(const std::string& path, const std::vector<index_t>& lead, index_t rows, index_t cols,
                           std::uint64_t seed) {
    index_t count = 1;
    for (index_t d : lead) count *= d;
    // At least one element, filled as a whole (an empty stack still gets a valid buffer to view).
    const index_t all_rows = std::max<index_t>(1, count * rows), all_cols = std::max<index_t>(1, cols);
    std::vector<T> v(std::size_t(all_rows * all_cols));
    fill_random(host_matrix_view<T>(v.data(), all_rows, all_cols), seed);
    write_npy_stack<T>(path, lead, host_batch_view<const T>::strided(host_matrix_view<const T>(v.data(), rows, cols),
                                                                      rows * cols, count));
    return v;
}

// Each case: the leading shapes of A and B, op(A), a 2-D A stored column-major, whether C is given.
struct stack_case {
    std::vector<index_t> lead_a, lead_b, lead_out;
    bool trans_a;
    bool with_c;
};

TEST(cli_stacks, StacksBroadcastAsNumpysMatmulAndEveryProductMatchesTheReference) {
    const index_t m = 5, n = 3, k = 7;
    const stack_case cases[] = {
        {{3}, {3}, {3}, false, false},             // (b, m, k) @ (b, k, n)
        {{2, 1}, {3}, {2, 3}, true, false},        // leading axes broadcast both ways; op(A) = A^T
        {{}, {4}, {4}, false, true},               // a 2-D A for every product, C added (beta)
        {{2, 3}, {1}, {2, 3}, false, true},
    };
    for (dtype type : all_dtypes)
        visit_dtype(type, [&]<class T>() {
            for (const stack_case& sc : cases) {
                SCOPED_TRACE(std::string(to_string(type)) + " case " + std::to_string(&sc - cases));
                temp_dir dir;
                const index_t ar = sc.trans_a ? k : m, ac = sc.trans_a ? m : k;
                std::vector<T> av, bv = write_stack<T>(dir.file("b.npy"), sc.lead_b, k, n, 2);
                host_matrix<T> a2(ar, ac, layout::col_major);
                if (sc.lead_a.empty()) {
                    fill_random(a2.view(), 1);
                    write_npy<T>(dir.file("a.npy"), a2.view());
                } else {
                    av = write_stack<T>(dir.file("a.npy"), sc.lead_a, ar, ac, 1);
                }
                host_matrix<T> c2(m, n);
                fill_random(c2.view(), 3);
                std::string args = "gemm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --check --out " +
                                   dir.file("out.npy") + (sc.trans_a ? " --op-a t" : "");
                const T alpha = T(1.5), beta = sc.with_c ? T(-0.5) : T(0);
                args += " --alpha 1.5";
                if (sc.with_c) {
                    write_npy<T>(dir.file("c.npy"), c2.view());
                    args += " --c " + dir.file("c.npy") + " --beta -0.5";
                }
                const auto r = run_cli(args);
                ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.out;
                EXPECT_NE(r.out.find("gemm batch"), std::string::npos) << r.out;
                const npy_array out = read_npy_stack(dir.file("out.npy"));
                ASSERT_EQ(out.leading_shape(), sc.lead_out);
                ASSERT_EQ(out.rows(), m);
                ASSERT_EQ(out.cols(), n);
                ASSERT_EQ(out.type(), type);
                // Product i's A and B by numpy's rules: leading axes aligned right, 1 repeated.
                const auto matrix_of = [&](const std::vector<index_t>& lead, index_t i) {
                    std::vector<index_t> idx(sc.lead_out.size());
                    for (std::size_t d = sc.lead_out.size(); d-- > 0;) {
                        idx[d] = i % sc.lead_out[d];
                        i /= sc.lead_out[d];
                    }
                    index_t which = 0;
                    const std::size_t off = sc.lead_out.size() - lead.size();
                    for (std::size_t d = 0; d < lead.size(); ++d) which = which * lead[d] + (lead[d] == 1 ? 0 : idx[d + off]);
                    return which;
                };
                const auto result = out.stack_view<T>();
                for (index_t i = 0; i < result.count(); ++i) {
                    const host_matrix_view<const T> ai =
                        sc.lead_a.empty() ? host_matrix_view<const T>(a2.view())
                                          : host_matrix_view<const T>(av.data() + matrix_of(sc.lead_a, i) * ar * ac, ar, ac);
                    const host_matrix_view<const T> bi(bv.data() + matrix_of(sc.lead_b, i) * k * n, k, n);
                    const auto chk = check_gemm<T>(sc.trans_a ? op::t : op::n, op::n, alpha, ai, bi, beta, c2.view(),
                                                   result[i]);
                    EXPECT_TRUE(chk.passed()) << "product " << i << ": " << chk.summary();
                }
            }
        });
}

TEST(cli_stacks, ShapesThatDoNotBroadcastAreClearErrorsAndWriteNothing) {
    temp_dir dir;
    write_stack<float>(dir.file("a2.npy"), {2}, 4, 3, 1);
    write_stack<float>(dir.file("b3.npy"), {3}, 3, 5, 2);
    write_stack<float>(dir.file("b2.npy"), {2}, 4, 5, 3);  // inner dimension 4, A's is 3
    write_stack<float>(dir.file("c.npy"), {3}, 4, 5, 4);
    write_stack<double>(dir.file("bd.npy"), {2}, 3, 5, 5);
    // A Fortran-ordered stack: the header says so (its matrices are not contiguous).
    write_stack<float>(dir.file("f.npy"), {2}, 4, 3, 6);
    {
        std::ifstream in(dir.file("f.npy"), std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), {});
        const auto at = bytes.find("'fortran_order': False");
        ASSERT_NE(at, std::string::npos);
        bytes.replace(at, 22, "'fortran_order': True ");
        std::ofstream(dir.file("f.npy"), std::ios::binary) << bytes;
    }
    const std::string out = " --out " + dir.file("out.npy");
    const std::string a = " --a " + dir.file("a2.npy");
    expect_usage_error("gemm" + a + " --b " + dir.file("b3.npy") + out, "the stacks do not broadcast");
    expect_usage_error("gemm" + a + " --b " + dir.file("b3.npy") + out, "leading shape (2,)");
    expect_usage_error("gemm" + a + " --b " + dir.file("b2.npy") + out, "inner dimensions differ");
    write_stack<float>(dir.file("b.npy"), {2}, 3, 5, 7);
    expect_usage_error("gemm" + a + " --b " + dir.file("b.npy") + " --c " + dir.file("c.npy") + " --beta 1" + out,
                       "does not broadcast to the result's (2, 4, 5)");
    expect_usage_error("gemm" + a + " --b " + dir.file("bd.npy") + out, "dtypes differ");
    expect_usage_error("gemm --a " + dir.file("f.npy") + " --b " + dir.file("b.npy") + out, "Fortran-ordered");
    expect_usage_error("gemm" + a + " --b " + dir.file("b.npy") + " --strategy tiles-3d" + out,
                       "does not apply to stacks");
    // Other commands still take 2-D files only, and say so.
    expect_usage_error("syrk --a " + dir.file("a2.npy") + out, "stacks of matrices");
    EXPECT_FALSE(std::filesystem::exists(dir.file("out.npy")));
    // A good run next to them works, and an empty stack (a zero leading dimension) is numpy's empty result.
    ASSERT_EQ(run_cli("gemm" + a + " --b " + dir.file("b.npy") + out).exit_code, 0);
    write_stack<float>(dir.file("a0.npy"), {0}, 4, 3, 8);
    const auto r = run_cli("gemm --a " + dir.file("a0.npy") + " --b " + dir.file("b.npy") + " --out " + dir.file("e.npy"));
    ASSERT_EQ(r.exit_code, 2) << r.out;  // (0,) and (2,) do not broadcast
    write_stack<float>(dir.file("b1.npy"), {1}, 3, 5, 9);
    const auto r0 = run_cli("gemm --a " + dir.file("a0.npy") + " --b " + dir.file("b1.npy") + " --out " + dir.file("e.npy"));
    ASSERT_EQ(r0.exit_code, 0) << r0.out;
    const npy_array e = read_npy_stack(dir.file("e.npy"));
    EXPECT_EQ(e.leading_shape(), std::vector<index_t>{0});
    EXPECT_EQ(e.rows(), 4);
    EXPECT_EQ(e.cols(), 5);
}

}  // namespace
}  // namespace tilestream
