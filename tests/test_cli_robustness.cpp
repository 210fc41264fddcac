// Issue 12's defects, each as a test that fails without its fix: thread starts that fail, inputs
// truncated mid-run, rate probes on tiny budgets, output paths, overflowing sizes and offsets,
// hostile file text, signals while writing, empty problems, write failures, out-of-range scalars.
#include "test_support.hpp"

#include "backends/cpu/thread_pool.hpp"

#include <tilestream/error.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/report.hpp>
#include <tilestream/verify.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace tilestream {
namespace {

using testing::run_cli;
using testing::temp_dir;

bool contains(const std::string& text, const std::string& phrase) { return text.find(phrase) != std::string::npos; }

// ---- row 1: threads ----

TEST(robustness, ThreadPoolFailsCleanlyWhenAThreadCannotStart) {
    // Worker 3 of 8 cannot start: the constructor must throw, not wait for it forever.
    cpu::detail::thread_start_hook = [](int worker) { return worker != 3; };
    const auto t0 = std::chrono::steady_clock::now();
    try {
        cpu::thread_pool pool(8);
        ADD_FAILURE() << "expected device_error";
    } catch (const device_error& e) {
        EXPECT_TRUE(contains(e.what(), "cannot start worker thread 4 of 8")) << e.what();
    }
    cpu::detail::thread_start_hook = nullptr;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
    cpu::thread_pool pool(3);  // and pools still work afterwards
    std::atomic<int> parts{0};
    pool.run(3, [&](int) { ++parts; });
    EXPECT_EQ(parts.load(), 3);
}

TEST(cli_robustness, ThreadsAndCpuDevicesAboveTheLimitAreErrors) {
    auto r = run_cli("gemm --m 64 --n 64 --k 64 --cpu-threads 4096 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "--cpu-threads 4096 is above the limit of")) << r.out;
    r = run_cli("gemm --m 64 --n 64 --k 64 --devices cpu:100000 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "asks for 100000 CPU devices, above the limit of")) << r.out;
    r = run_cli("jacobi --nx 40 --ny 40 --iters 2 --cpu-threads 100000 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "above the limit")) << r.out;
}

TEST(cli_robustness, ThreadsThatCannotStartUnderAMemoryLimitGiveAnErrorNotAHang) {
    if (testing::sanitized) GTEST_SKIP() << "sanitizer runtimes need more address space than the limit this test sets";
    // 16 devices x 16 threads, each thread reserving its stack, exceed 1 GB of address space.
    const std::string out = testing::run_cli_raw(
        "(ulimit -v 1000000; timeout 120 " + std::string(TILESTREAM_CLI_PATH) +
        " gemm --m 64 --n 64 --k 64 --cpu-threads 16 --devices cpu:16 --quiet 2>&1; echo exit=$?)");
    EXPECT_TRUE(contains(out, "exit=3")) << out;
    EXPECT_TRUE(contains(out, "cannot start worker thread")) << out;
}

// ---- row 3: an input truncated while the run reads it ----

TEST(cli_robustness, InputTruncatedDuringTheRunExitsThreeWithoutOutput) {
    temp_dir dir;
    host_matrix<double> a(600, 600);
    fill_random(a.view(), 31);
    write_npy<double>(dir.file("a.npy"), a.view());
    write_npy<double>(dir.file("b.npy"), a.view());
    // Many repetitions read A again and again; the file shrinks under them after a second.
    const std::string cmd = "(" + std::string(TILESTREAM_CLI_PATH) + " gemm --a " + dir.file("a.npy") + " --b " +
                            dir.file("b.npy") + " --repeat 5000 --quiet --out " + dir.file("c.npy") +
                            " & pid=$!; sleep 1; truncate -s 200 " + dir.file("a.npy") +
                            "; wait $pid; echo exit=$?)";
    const std::string out = testing::run_cli_raw(cmd);
    EXPECT_TRUE(contains(out, "exit=3") || contains(out, "exit=2")) << out;  // 2: caught while opening
    EXPECT_TRUE(contains(out, "truncated")) << out;
    EXPECT_FALSE(std::filesystem::exists(dir.file("c.npy")));
    EXPECT_EQ(dir.entries(), 2u) << "no temporary left";
}

// ---- row 4: the rate probe and tiny budgets ----

TEST(cli_robustness, RateProbeFitsATinyBudgetOrIsSkipped) {
    auto r = run_cli("gemm --m 64 --n 64 --k 64 --memory-budget 32KiB --explain --check --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "rates: not measured")) << r.out;
    EXPECT_TRUE(contains(r.out, "OK")) << r.out;
    r = run_cli("gemm --m 64 --n 64 --k 64 --memory-budget 32KiB --check --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.out;
}

// ---- row 5: output paths checked before any work ----

TEST(cli_robustness, OutputPathsAreCheckedBeforeAnyWork) {
    for (const std::string opt : {"--out /nonexistent/c.npy", "--trace /nonexistent/t.json",
                                  "--timeline /nonexistent/t.svg"}) {
        // The reference kernel on this size runs for seconds: a check after the run would be slow,
        // and the message would come from the writer, not name the directory.
        auto r = run_cli("gemm --m 700 --n 700 --k 700 --kernel reference --quiet " + opt);
        EXPECT_EQ(r.exit_code, 2) << opt << ": " << r.out;
        EXPECT_TRUE(contains(r.out, "directory '/nonexistent'")) << opt << ": " << r.out;
    }
    for (const std::string opt : {"--out /nonexistent/f.npy", "--image /nonexistent/f.png"}) {
        auto r = run_cli("jacobi --nx 40 --ny 40 --iters 2 --quiet " + opt);
        EXPECT_EQ(r.exit_code, 2) << opt << ": " << r.out;
        EXPECT_TRUE(contains(r.out, "directory '/nonexistent'")) << opt << ": " << r.out;
    }
}

// ---- rows 7, 8, 9: overflow ----

TEST(cli_robustness, HugeTilesDecompositionIsNotWrapped) {
    auto r = run_cli("jacobi --nx 64 --ny 64 --iters 2 --decomp tiles:65536x65536 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "makes 4294967296 parts")) << r.out;
}

TEST(robustness, SectionRejectsOffsetsThatOverflow) {
    host_matrix<float> m(4, 5);
    const auto v = m.view();
    const index_t big = std::numeric_limits<index_t>::max();
    EXPECT_THROW((void)v.section(big, 0, 1, 1), tilestream::invalid_argument);
    EXPECT_THROW((void)v.section(0, big, 1, 1), tilestream::invalid_argument);
    EXPECT_THROW((void)v.section(1, 0, big, 1), tilestream::invalid_argument);
    EXPECT_THROW((void)v.section(0, 1, 1, big), tilestream::invalid_argument);
    EXPECT_EQ(v.section(3, 4, 1, 1).data(), &m(3, 4));
    EXPECT_EQ(v.section(4, 5, 0, 0).rows(), 0);
}

TEST(robustness, ByteSizesBeyondFourEiBAreTooLarge) {
    for (const char* text : {"10000000TiB", "9223372036854775808", "1e400"}) {
        try {
            (void)parse_bytes(text);
            ADD_FAILURE() << text << " accepted";
        } catch (const tilestream::invalid_argument& e) {
            EXPECT_TRUE(contains(e.what(), "too large") || contains(e.what(), "unknown unit")) << e.what();
        }
    }
    try {
        (void)parse_bytes("10000000TiB");
    } catch (const tilestream::invalid_argument& e) {
        EXPECT_TRUE(contains(e.what(), "too large")) << e.what();
    }
    EXPECT_EQ(parse_bytes("4096TiB"), std::size_t{4096} << 40);
    auto r = run_cli("gemm --m 4 --n 4 --k 4 --memory-budget 10000000TiB --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "too large")) << r.out;
}

// ---- row 11: SIGTERM while the output is written ----

TEST(cli_robustness, SigtermWhileWritingLeavesNoTemporary) {
    temp_dir dir;
    // A 4000x4000 f64 C is 128 MB: the write takes long enough to be interrupted.
    const std::string cmd = std::string(TILESTREAM_CLI_PATH) + " gemm --m 4000 --n 4000 --k 1 --dtype f64 --quiet --out " +
                            dir.file("c.npy");
    FILE* p = popen(("exec " + cmd + " > /dev/null 2>&1 & echo $!").c_str(), "r");
    ASSERT_NE(p, nullptr);
    long pid = 0;
    ASSERT_EQ(fscanf(p, "%ld", &pid), 1);
    pclose(p);
    bool seen = false;
    for (int i = 0; i < 4000 && !seen; ++i) {
        for (const auto& e : std::filesystem::directory_iterator(dir.path()))
            if (contains(e.path().filename().string(), ".tmp.")) seen = true;
        if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (seen) ::kill(pid_t(pid), SIGTERM);
    // The process is not our child (the shell started it): wait for it to go.
    for (int i = 0; i < 2000 && ::kill(pid_t(pid), 0) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!seen) GTEST_SKIP() << "the write finished before the temporary was seen; nothing interrupted";
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
        EXPECT_FALSE(contains(e.path().filename().string(), ".tmp.")) << "left behind: " << e.path();
}

// ---- row 13 ----

TEST(cli_robustness, EmptyProblemPrintsNoNan) {
    temp_dir dir;
    host_matrix<float> a(0, 5), b(5, 3);
    fill_random(b.view(), 32);
    write_npy<float>(dir.file("a.npy"), a.view());
    write_npy<float>(dir.file("b.npy"), b.view());
    for (const char* extra : {"", " --json"}) {
        auto r = run_cli("gemm --a " + dir.file("a.npy") + " --b " + dir.file("b.npy") + " --quiet" + extra);
        EXPECT_EQ(r.exit_code, 0) << r.out;
        EXPECT_FALSE(contains(r.out, "nan")) << r.out;
        EXPECT_FALSE(contains(r.out, "null")) << r.out;
    }
}

TEST(cli_robustness, FailedWriteOfTheOutputExitsThree) {
    temp_dir dir;
    // A file size limit of 1 KiB makes the write fail (EFBIG, with SIGXFSZ ignored), as a full
    // disk (ENOSPC) does: a runtime failure, not bad usage.
    const std::string out = testing::run_cli_raw(
        "sh -c 'ulimit -f 1; trap \"\" XFSZ; " + std::string(TILESTREAM_CLI_PATH) +
        " gemm --m 100 --n 100 --k 10 --quiet --out " + dir.file("c.npy") + "; echo exit=$?'");
    EXPECT_TRUE(contains(out, "exit=3")) << out;
    EXPECT_TRUE(contains(out, "cannot write")) << out;
    EXPECT_EQ(dir.entries(), 0u) << "no partial output or temporary";
}

TEST(robustness, HostMatrixOutOfMemorySaysWhatAndHowMuch) {
    if (testing::sanitized) GTEST_SKIP() << "sanitizer allocators abort on a 32 PiB request instead of returning null";
    try {
        host_matrix<double> huge(index_t{1} << 26, index_t{1} << 26);  // 32 PiB
        ADD_FAILURE() << "allocated 32 PiB?";
    } catch (const tilestream::error& e) {
        EXPECT_TRUE(contains(e.what(), "host_matrix: cannot allocate 32.0 PiB")) << e.what();
        EXPECT_TRUE(contains(e.what(), "67108864x67108864 f64")) << e.what();
    }
}

TEST(cli_robustness, RandomInputsBeyondFreeMemoryAreRefusedBeforeAllocating) {
    auto r = run_cli("gemm --m 300000 --n 300000 --k 300000 --dtype f64 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "of host memory needed but only")) << r.out;
    EXPECT_TRUE(contains(r.out, "MemAvailable")) << r.out;
    r = run_cli("jacobi --nx 3000000 --ny 3000000 --iters 1 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "jacobi: the 3000000x3000000 field: ")) << r.out;
    EXPECT_TRUE(contains(r.out, "MemAvailable")) << r.out;
}

TEST(cli_robustness, TileSizesIgnoredByAnInCorePlanAreWarnedAbout) {
    // A budget makes the CPU device stage data, so auto picks in-core (without one it is zero-copy, which uses the tiles).
    auto r = run_cli("gemm --m 64 --n 64 --k 64 --tile 3 --memory-budget 1MiB --check --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "warning: the tile sizes given are not used")) << r.out;
    r = run_cli("gemm --m 64 --n 64 --k 64 --tile 3 --strategy tiles-3d --check --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_FALSE(contains(r.out, "warning")) << r.out;
}

TEST(cli_robustness, ScalarsOutOfRangeForF32AreErrors) {
    auto r = run_cli("gemm --m 4 --n 4 --k 4 --beta 1e39 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "--beta 1e39 is out of range for f32")) << r.out;
    r = run_cli("gemm --m 4 --n 4 --k 4 --alpha -1e39 --quiet");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "--alpha -1e39 is out of range for f32")) << r.out;
    r = run_cli("gemm --m 4 --n 4 --k 4 --beta 1e39 --dtype f64 --check --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.out;
}

// ---- fuzzing findings in the trace reader ----

TEST(robustness, TraceReaderClampsNumbersOutOfRange) {
    temp_dir dir;
    const std::string p = dir.file("t.json");
    std::ofstream(p) << R"({"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "pid": 1, "tid": 1e300,)"
                     << R"( "ts": 1.5, "dur": 2, "args": {"bytes": -5e300}}]})";
    const auto spans = read_chrome_trace(p);
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].stream, std::numeric_limits<int>::max());
    EXPECT_EQ(spans[0].bytes, 0u);
}

TEST(cli_robustness, TimelineOfATraceWithInfiniteTimesIsAnErrorNotAHang) {
    temp_dir dir;
    const std::string p = dir.file("t.json");
    std::ofstream(p) << R"({"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "pid": 1, "tid": 0,)"
                     << R"( "ts": 0, "dur": 1e900}]})";
    const std::string out = testing::run_cli_raw("(timeout 60 " + std::string(TILESTREAM_CLI_PATH) + " timeline " + p +
                                                 " " + dir.file("t.svg") + " 2>&1; echo exit=$?)");
    EXPECT_TRUE(contains(out, "exit=2")) << out;
    EXPECT_TRUE(contains(out, "not a finite number")) << out;
}

}  // namespace
}  // namespace tilestream
