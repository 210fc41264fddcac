// Issue 24, the one-process CLI and its files: nothing lost, nothing hung, no surprise. Each test
// is named after the defect class it guards: write failures (1, 4), special files (2), outputs
// naming inputs (3), signals (5), SIGBUS from a truncated mapping (6), what is read (9), messages
// (13) and timelines (16).
#include "test_support.hpp"

#include <tilestream/npy.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include "core/output_files.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tilestream {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::temp_dir;

bool contains(const std::string& text, const std::string& phrase) { return text.find(phrase) != std::string::npos; }

using testing::read_file;
using testing::write_file;

/// Names in `dir` that look like a temporary or a backup of ours.
std::vector<std::string> leftovers(const temp_dir& dir) {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(dir.path())) {
        const std::string n = e.path().filename().string();
        if (contains(n, ".tmp.") || contains(n, ".old.") || n.rfind(".tilestream", 0) == 0) r.push_back(n);
    }
    return r;
}

std::string cli() { return TILESTREAM_CLI_PATH; }

/// A shell command line's output and exit status ("...; echo exit=$?").
std::string sh(const std::string& command) { return testing::run_cli_raw("(" + command + ") 2>&1; echo exit=$?"); }

/// The CLI started directly (no shell, so no signal is ignored on the way): stdout and stderr to
/// files, `ignore` signals set to SIG_IGN in the child.
pid_t spawn(const std::vector<std::string>& args, const std::string& out_file, const std::string& err_file,
            const std::vector<int>& ignore = {}, int stdout_fd = -1) {
    std::vector<char*> argv;
    std::string path = cli();
    argv.push_back(path.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
        // Signals as a fresh process has them (whatever the test runner ignores), then `ignore`.
        for (int s : detail::cleanup_signals()) ::signal(s, SIG_DFL);
        for (int s : ignore) ::signal(s, SIG_IGN);
        const rlimit no_core{0, 0};  // the signals that dump core must not write one
        ::setrlimit(RLIMIT_CORE, &no_core);
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        const int o = stdout_fd >= 0 ? stdout_fd : ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(o, 1);
        ::dup2(e, 2);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    return pid;
}

/// Waits for the child (at most `seconds`, then kills it); its wait status.
int wait_for(pid_t pid, double seconds = 120) {
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

/// Waits until a temporary of ours shows in `dir` (or the child ended).
bool temporary_appears(const temp_dir& dir, pid_t pid, double seconds = 60) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
        if (!leftovers(dir).empty()) return true;
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG | WNOWAIT) == pid) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
}

// ---- 1 and 4: failed writes keep every previous output, leave no temporary, exit 3 ----

TEST(cli_files, AFailedOutputKeepsEveryPreviousOutputAndLeavesNoTemporary) {
    temp_dir dir;
    const std::string out = dir.file("c.npy"), trace = dir.file("t.json"), timeline = dir.file("t.svg");
    write_file(out, "previous C");
    write_file(trace, "previous trace");
    write_file(timeline, "previous timeline");
    // A file size limit of 8 KiB: the trace and timeline of this run fit, C (16 KiB) does not.
    // Before the fix the trace and timeline were replaced and then C failed.
    const std::string run = cli() + " gemm --m 64 --n 64 --k 64 --quiet --out " + out + " --trace " + trace +
                            " --timeline " + timeline;
    const std::string r = sh("ulimit -f 8; trap '' XFSZ; " + run);
    EXPECT_TRUE(contains(r, "exit=3")) << r;
    EXPECT_TRUE(contains(r, "File too large")) << r;
    EXPECT_EQ(read_file(out), "previous C");
    EXPECT_EQ(read_file(trace), "previous trace");
    EXPECT_EQ(read_file(timeline), "previous timeline");
    EXPECT_TRUE(leftovers(dir).empty()) << leftovers(dir).front();
    // The same with SIGXFSZ not ignored: the process dies of it (5), the files stay as they were.
    const std::string killed = sh("ulimit -c 0; ulimit -f 8; exec " + run);
    EXPECT_TRUE(contains(killed, "exit=153")) << killed;
    EXPECT_EQ(read_file(out), "previous C");
    EXPECT_EQ(read_file(trace), "previous trace");
    EXPECT_TRUE(leftovers(dir).empty());
}

TEST(cli_files, JacobiAndScaleOutputsFailTogether) {
    temp_dir dir;
    write_file(dir.file("f.npy"), "previous field");
    write_file(dir.file("f.png"), "previous image");
    // The image fits 8 KiB, the 200x200 f64 field (320 KB) does not.
    std::string r = sh("ulimit -f 8; trap '' XFSZ; " + cli() + " jacobi --nx 200 --ny 200 --iters 3 --dtype f64 --quiet" +
                       " --image " + dir.file("f.png") + " --out " + dir.file("f.npy"));
    EXPECT_TRUE(contains(r, "exit=3")) << r;
    EXPECT_EQ(read_file(dir.file("f.npy")), "previous field");
    EXPECT_EQ(read_file(dir.file("f.png")), "previous image");
    r = sh(cli() + " scale gemm --m 32 --n 32 --k 32 --devices cpu:1 --repeat 1 --plot /dev/full");
    EXPECT_TRUE(contains(r, "exit=3")) << r;
    EXPECT_TRUE(contains(r, "No space left on device")) << r;
    EXPECT_TRUE(leftovers(dir).empty());
}

TEST(cli_files, ResultsToAFullDeviceFailTheRunWithNoOutputsNew) {
    temp_dir dir;
    const std::string out = dir.file("c.npy"), trace = dir.file("t.json");
    write_file(out, "previous C");
    // --json to a full device: exit 3 and the outputs stay as they were (before: exit 0).
    std::string r = sh(cli() + " gemm --m 32 --n 32 --k 32 --quiet --json --out " + out + " --trace " + trace +
                       " > /dev/full");
    EXPECT_TRUE(contains(r, "exit=3")) << r;
    EXPECT_TRUE(contains(r, "cannot write standard output: No space left on device")) << r;
    EXPECT_EQ(read_file(out), "previous C");
    EXPECT_FALSE(fs::exists(trace));
    // An output that is the full device: exit 3, no other output new, and no result printed.
    r = sh(cli() + " gemm --m 32 --n 32 --k 32 --quiet --out /dev/full --trace " + trace);
    EXPECT_TRUE(contains(r, "exit=3")) << r;
    EXPECT_TRUE(contains(r, "/dev/full: cannot write: No space left on device")) << r;
    EXPECT_FALSE(contains(r, "wrote")) << r;
    EXPECT_FALSE(fs::exists(trace));
    // `devices --json` too.
    r = sh(cli() + " devices --json > /dev/full");
    EXPECT_TRUE(contains(r, "exit=3")) << r;
    EXPECT_TRUE(leftovers(dir).empty());
}

// ---- 2: devices, FIFOs, symbolic links and existing files are written as cp writes them ----

TEST(cli_files, SymbolicLinksAreFollowedAndKeptAndFilesKeepTheirModeAndOwner) {
    temp_dir dir;
    fs::create_directory(dir.file("real"));
    const std::string target = dir.file("real/c.npy");
    write_file(target, "old");
    ::chmod(target.c_str(), 0640);
    const bool root = ::geteuid() == 0;
    if (root) ASSERT_EQ(::chown(target.c_str(), 65534, 65534), 0);
    fs::create_symlink("real/c.npy", dir.file("link.npy"));
    fs::create_symlink("real/t.svg", dir.file("dangling.svg"));  // its target does not exist yet
    auto r = run_cli("gemm --m 20 --n 12 --k 7 --quiet --out " + dir.file("link.npy") + " --timeline " +
                     dir.file("dangling.svg"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(fs::is_symlink(dir.file("link.npy")));
    EXPECT_TRUE(fs::is_symlink(dir.file("dangling.svg")));
    EXPECT_TRUE(fs::is_regular_file(dir.file("real/t.svg")));
    const auto c = read_npy(target);
    EXPECT_EQ(c.rows(), 20);
    EXPECT_EQ(c.cols(), 12);
    struct stat st {};
    ASSERT_EQ(::stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u) << std::oct << (st.st_mode & 07777);
    if (root) {
        EXPECT_EQ(st.st_uid, 65534u);
        EXPECT_EQ(st.st_gid, 65534u);
    }
    EXPECT_TRUE(leftovers(dir).empty());
}

TEST(cli_files, DevicesAndFifosAreWrittenInPlace) {
    temp_dir dir;
    // A character device of our own (a copy of /dev/null) as root; as another user /dev/null itself,
    // which the old code refused (its directory is not writable) and could never delete.
    std::string null_dev = "/dev/null";
    if (::geteuid() == 0 && ::mknod(dir.file("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0)
        null_dev = dir.file("null");
    auto r = run_cli("gemm --m 16 --n 16 --k 16 --quiet --out " + null_dev + " --trace " + null_dev + " --timeline " +
                     null_dev);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    struct stat st {};
    ASSERT_EQ(::stat(null_dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << null_dev << " was replaced";
    r = run_cli("jacobi --nx 30 --ny 30 --iters 2 --quiet --out " + null_dev + " --image " + null_dev);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    ASSERT_EQ(::stat(null_dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));

    // A FIFO: the reader gets the whole .npy, the FIFO stays a FIFO. The test holds a write end of
    // its own until the run ended, so the reader waits for the run's data, and sees the end (not a
    // hang) if the run never opens the FIFO.
    const std::string fifo = dir.file("pipe");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    const int rfd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    const int wfd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(rfd, 0);
    ASSERT_GE(wfd, 0);
    ::fcntl(rfd, F_SETFL, 0);
    std::string got;
    std::thread reader([&] {
        char buf[65536];
        for (ssize_t n; (n = ::read(rfd, buf, sizeof buf)) > 0;) got.append(buf, std::size_t(n));
    });
    r = run_cli("gemm --m 16 --n 8 --k 5 --dtype f64 --seed 3 --quiet --out " + fifo);
    ::close(wfd);
    reader.join();
    ::close(rfd);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    r = run_cli("gemm --m 16 --n 8 --k 5 --dtype f64 --seed 3 --quiet --out " + dir.file("same.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(got, read_file(dir.file("same.npy")));
}

TEST(cli_files, DevStdoutGetsTheDataAndTheReportGoesToStderr) {
    temp_dir dir;
    // Through a pipe: stdout carries exactly the .npy, the report moves to stderr.
    const std::string got = testing::run_cli_raw(cli() + " gemm --m 16 --n 8 --k 5 --seed 4 --quiet --out /dev/stdout 2>" +
                                                 dir.file("err.txt") + " | cat > " + dir.file("piped.npy"));
    (void)got;
    auto r = run_cli("gemm --m 16 --n 8 --k 5 --seed 4 --quiet --out " + dir.file("file.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(read_file(dir.file("piped.npy")), read_file(dir.file("file.npy")));
    EXPECT_TRUE(contains(read_file(dir.file("err.txt")), "wrote /dev/stdout")) << read_file(dir.file("err.txt"));
}

TEST(cli_files, DevNullWorksForAnotherUser) {
    // The old code needed /dev to be writable to write /dev/null (a temporary beside it).
    std::string prefix;
    if (::geteuid() == 0) {
        if (std::system("command -v setpriv > /dev/null 2>&1") != 0) GTEST_SKIP() << "root without setpriv";
        prefix = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
        if (!contains(sh(prefix + cli() + " --version"), "exit=0"))
            GTEST_SKIP() << "user nobody cannot run the build (its directory is private)";
    }
    const std::string r = sh(prefix + cli() + " gemm --m 16 --n 16 --k 16 --quiet --out /dev/null --trace /dev/null");
    EXPECT_TRUE(contains(r, "exit=0")) << r;
    EXPECT_TRUE(contains(r, "wrote /dev/null")) << r;
}

// ---- 3: an output may not name an input or another output ----

TEST(cli_files, OutputsNamingAnInputOrAnotherOutputAreRefusedBeforeAnyWork) {
    temp_dir dir;
    host_matrix<float> a(700, 700), b(700, 700);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    write_npy<float>(dir.file("a.npy"), a.view());
    write_npy<float>(dir.file("b.npy"), b.view());
    const std::string a_bytes = read_file(dir.file("a.npy"));
    ASSERT_EQ(::link(dir.file("b.npy").c_str(), dir.file("hard.json").c_str()), 0);
    fs::create_symlink("a.npy", dir.file("soft.svg"));
    // The reference kernel takes seconds here: a refusal after the run would be slow.
    const std::string in = "gemm --kernel reference --quiet --a " + dir.file("a.npy") + " --b " + dir.file("b.npy");
    const struct {
        std::string opts, phrase;
    } cases[] = {
        {" --trace " + dir.file("hard.json"), "and --b " + dir.file("b.npy") + " name the same file"},
        {" --timeline " + dir.file("soft.svg"), "and --a " + dir.file("a.npy") + " name the same file"},
        {" --out " + dir.file("./a.npy"), "and --a " + dir.file("a.npy") + " name the same file"},
        {" --out " + dir.file("c") + " --trace " + dir.file("c"), "and --out " + dir.file("c") + " name the same file"},
        {" --trace " + dir.file("t") + " --timeline " + dir.path().string() + "/./t", "name the same file"},
    };
    for (const auto& c : cases) {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = run_cli(in + c.opts);
        EXPECT_EQ(r.exit_code, 2) << c.opts << ": " << r.out;
        EXPECT_TRUE(contains(r.out, c.phrase)) << c.opts << ": " << r.out;
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0) << c.opts;
    }
    EXPECT_EQ(read_file(dir.file("a.npy")), a_bytes);
    EXPECT_FALSE(fs::exists(dir.file("c")));
    EXPECT_FALSE(fs::exists(dir.file("t")));
    // --timeline naming the trace it draws is refused too.
    ASSERT_EQ(::link(dir.file("b.npy").c_str(), dir.file("same").c_str()), 0);
    auto r = run_cli("timeline " + dir.file("hard.json") + " " + dir.file("same"));
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "and the trace " + dir.file("hard.json") + " name the same file")) << r.out;
    // The BLAS update C <- A B + C into the same file is allowed: --out may name --c.
    host_matrix<double> x(9, 7), y(7, 5), z(9, 5);
    fill_random(x.view(), 3);
    fill_random(y.view(), 4);
    fill_random(z.view(), 5);
    write_npy<double>(dir.file("x.npy"), x.view());
    write_npy<double>(dir.file("y.npy"), y.view());
    write_npy<double>(dir.file("z.npy"), z.view());
    r = run_cli("gemm --a " + dir.file("x.npy") + " --b " + dir.file("y.npy") + " --c " + dir.file("z.npy") +
                " --beta 1 --quiet --out " + dir.file("z.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    host_matrix<double> ref(9, 5);
    for (index_t i = 0; i < 9; ++i)
        for (index_t j = 0; j < 5; ++j) ref(i, j) = z(i, j);
    reference_gemm<double>(op::n, op::n, 1.0, x.view(), y.view(), 1.0, ref.view());
    EXPECT_LE(relative_frobenius_error<double>(read_npy(dir.file("z.npy")).view<double>(), ref.view()), 1e-14);
}

// ---- 5: every catchable terminating signal removes the temporaries ----

TEST(cli_files, EveryTerminatingSignalRemovesTheTemporariesAndEndsWithIt) {
    temp_dir dir;
    int seen = 0;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGXFSZ, SIGVTALRM}) {
        // The temporary of --out is created (and reserved) before the work; the reference kernel
        // on 500^3 runs for seconds after it.
        const pid_t pid = spawn({"gemm", "--m", "500", "--n", "500", "--k", "500", "--kernel", "reference", "--dtype",
                                 "f64", "--quiet", "--out", dir.file("c.npy")},
                                dir.file("out.txt"), dir.file("err.txt"));
        ASSERT_GT(pid, 0);
        const bool appeared = temporary_appears(dir, pid);
        ::kill(pid, sig);
        const int status = wait_for(pid);
        ASSERT_TRUE(appeared) << strsignal(sig) << ": no temporary seen; " << read_file(dir.file("err.txt"));
        ++seen;
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig)
            << strsignal(sig) << ": status " << status << " " << read_file(dir.file("err.txt"));
        EXPECT_TRUE(leftovers(dir).empty()) << strsignal(sig) << " left " << leftovers(dir).front();
        EXPECT_FALSE(fs::exists(dir.file("c.npy")));
    }
    EXPECT_EQ(seen, 11);
}

TEST(cli_files, AClosedStdoutPipeEndsQuietlyWithNoOutputNew) {
    temp_dir dir;
    for (bool ignored : {false, true}) {
        int p[2];
        ASSERT_EQ(::pipe(p), 0);
        ::close(p[0]);  // nobody reads: the first write of the result meets a closed pipe
        const pid_t pid = spawn({"gemm", "--m", "32", "--n", "32", "--k", "32", "--quiet", "--json", "--out",
                                 dir.file("c.npy")},
                                "", dir.file("err.txt"), ignored ? std::vector<int>{SIGPIPE} : std::vector<int>{}, p[1]);
        ::close(p[1]);
        const int status = wait_for(pid);
        if (ignored)
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 141) << "status " << status;
        else
            EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE) << "status " << status;
        EXPECT_EQ(read_file(dir.file("err.txt")), "") << "not quiet";
        EXPECT_FALSE(fs::exists(dir.file("c.npy")));
        EXPECT_TRUE(leftovers(dir).empty());
    }
    // `... --json | head -c1`: the reader takes what it wants, the run ends without a message.
    const std::string r = sh(cli() + " gemm --m 32 --n 32 --k 32 --quiet --json --out " + dir.file("c.npy") + " | head -c1");
    EXPECT_EQ(r, "{exit=0\n");
}

// ---- 6: a mapped temporary or input truncated under the run ----

TEST(cli_files, TruncatedOutputTemporaryEndsWithAClearErrorNotSigbus) {
    temp_dir dir;
    host_matrix<double> a(600, 600);
    fill_random(a.view(), 31);
    write_npy<double>(dir.file("a.npy"), a.view());
    write_npy<double>(dir.file("b.npy"), a.view());
    // With file inputs C is written through a mapping of its temporary; many repetitions keep
    // writing it after it is cut to 100 bytes.
    const pid_t pid = spawn({"gemm", "--a", dir.file("a.npy"), "--b", dir.file("b.npy"), "--repeat", "5000", "--quiet",
                             "--out", dir.file("c.npy")},
                            dir.file("out.txt"), dir.file("err.txt"));
    ASSERT_TRUE(temporary_appears(dir, pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (const auto& n : leftovers(dir)) ::truncate(dir.file(n).c_str(), 100);
    const int status = wait_for(pid);
    const std::string err = read_file(dir.file("err.txt"));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "status " << status << ": " << err;
    EXPECT_TRUE(contains(err, "was truncated while the result was written to it")) << err;
    EXPECT_TRUE(contains(err, "c.npy")) << err;
    EXPECT_FALSE(fs::exists(dir.file("c.npy")));
    EXPECT_TRUE(leftovers(dir).empty());
}

// ---- 9: what is read must be a file of a sane size ----

TEST(cli_files, TracesThatAreDevicesFifosOrHugeAreRefusedWithoutHanging) {
    temp_dir dir;
    // Each under a time limit, so a regression fails instead of hanging or eating memory.
    const std::string t = "timeout 30 " + cli() + " timeline ";
    std::string r = sh(t + "/dev/zero " + dir.file("z.svg"));
    EXPECT_TRUE(contains(r, "exit=2")) << r;
    EXPECT_TRUE(contains(r, "character device")) << r;
    {
        std::ofstream(dir.file("huge.json"));
    }
    ASSERT_EQ(::truncate(dir.file("huge.json").c_str(), (off_t(1) << 30) + 1), 0);  // sparse: no disk used
    r = sh(t + dir.file("huge.json") + " " + dir.file("h.svg"));
    EXPECT_TRUE(contains(r, "exit=2")) << r;
    EXPECT_TRUE(contains(r, "larger than the 1.0 GiB")) << r;
    ASSERT_EQ(::mkfifo(dir.file("fifo.json").c_str(), 0644), 0);
    r = sh(t + dir.file("fifo.json") + " " + dir.file("f.svg"));  // no writer: an empty file, not a wait
    EXPECT_TRUE(contains(r, "exit=2")) << r;
    EXPECT_TRUE(contains(r, "not a Chrome trace")) << r;
    // A trace through a pipe works.
    auto ok = run_cli("gemm --m 32 --n 32 --k 32 --quiet --trace " + dir.file("t.json"));
    ASSERT_EQ(ok.exit_code, 0) << ok.out;
    r = sh("cat " + dir.file("t.json") + " | " + t + "/dev/stdin " + dir.file("p.svg"));
    EXPECT_TRUE(contains(r, "exit=0")) << r;
    // Inputs that must be mapped: a device or a FIFO is refused at once.
    for (const std::string& in : {std::string("/dev/zero"), dir.file("fifo.json")}) {
        r = sh("timeout 30 " + cli() + " gemm --a " + in + " --b " + in + " --quiet");
        EXPECT_TRUE(contains(r, "exit=2")) << r;
        EXPECT_TRUE(contains(r, "not a regular file")) << r;
    }
}

// ---- 13: messages ----

void expect_refused(const std::string& args, const std::string& phrase) {
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, phrase)) << args << "\nmissing '" << phrase << "' in:\n" << r.out;
}

TEST(cli_files, MessagesSayWhatIsWrong) {
    temp_dir dir;
    // Ranges without a 19-digit bound.
    expect_refused("gemm --m 10 --n 10 --k -3", "--k must be at least 1, got -3");
    // Budgets in PiB and EiB are understood and refused at once when no device has them.
    expect_refused("gemm --m 8 --n 8 --k 8 --memory-budget 3PiB", "is more than the host's memory");
    expect_refused("gemm --m 8 --n 8 --k 8 --devices cpu@1EiB", "is more than the host's memory");
    expect_refused("jacobi --nx 8 --ny 8 --memory-budget 4096TiB", "is more than the host's memory");
    // Tiles the budget cannot hold: the tiles given are named, and the planner's own choice.
    expect_refused("gemm --m 1000 --n 1000 --k 1000 --tile 100000 --memory-budget 2MiB",
                   "the tiles given (--tile 100000, cut to the matrices where larger) decide that: give smaller tiles "
                   "or leave them to the planner, whose choice fits");
    // Escape sequences in a device spec are shown, not obeyed.
    auto r = run_cli("gemm --m 8 --n 8 --k 8 --devices \"$(printf 'cpu\\033[31mRED')\"");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_FALSE(contains(r.out, "\x1b")) << r.out;
    EXPECT_TRUE(contains(r.out, "\\x1b[31mRED")) << r.out;
    // --tile-m alone never sets the other two.
    expect_refused("gemm --m 300 --n 300 --k 300 --strategy tiles-3d --tile-m 50 --memory-budget 4MiB",
                   "tiles-3d uses one tile size for m, n and k");
    r = run_cli("gemm --m 300 --n 300 --k 300 --tile-m 50 --memory-budget 400KiB --explain --check --quiet");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "tiles           50 x")) << r.out;
    EXPECT_FALSE(contains(r.out, "50 x 50 x 50")) << r.out;
    // A name too long for the file system is refused before the work (the reference kernel
    // would run for seconds); a long name that fits works (its temporary gets a short name).
    const std::string long_name(300, 'c');
    const auto t0 = std::chrono::steady_clock::now();
    expect_refused("gemm --m 700 --n 700 --k 700 --kernel reference --quiet --out " + dir.file(long_name + ".npy"),
                   "File name too long");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    r = run_cli("gemm --m 8 --n 8 --k 8 --quiet --out " + dir.file(std::string(250, 'd') + ".npy"));
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(fs::exists(dir.file(std::string(250, 'd') + ".npy")));
    // --c that would not be read.
    host_matrix<float> m(4, 4);
    fill_random(m.view(), 9);
    write_npy<float>(dir.file("m.npy"), m.view());
    const std::string files = " --a " + dir.file("m.npy") + " --b " + dir.file("m.npy");
    expect_refused("gemm" + files + " --c " + dir.file("m.npy"), "--beta is 0 (the default), so C's input would not be read");
    // TF32 only where tensor cores have it.
    expect_refused("gemm --m 8 --n 8 --k 8 --math tf32 --devices cpu", "cpu:0 has none; devices here with TF32:");
    expect_refused("gemm --m 8 --n 8 --k 8 --math tf32 --dtype f64", "--math tf32 rounds f32 operands");
    // An output named for another format.
    expect_refused("gemm --m 8 --n 8 --k 8 --timeline " + dir.file("run.png"), "name it .svg");
    expect_refused("jacobi --nx 8 --ny 8 --image " + dir.file("f.svg"), "name it .png");
    expect_refused("gemm --m 8 --n 8 --k 8 --out " + dir.file("c.json"), "name it .npy");
    // A 1-D .npy is refused with the shapes that would work.
    host_matrix<float> v(5, 1);
    fill_random(v.view(), 10);
    write_npy<float>(dir.file("v2.npy"), v.view());
    std::string bytes = read_file(dir.file("v2.npy"));
    const auto shape = bytes.find("(5, 1)");
    ASSERT_NE(shape, std::string::npos);
    bytes.replace(shape, 6, "(5,)  ");
    write_file(dir.file("v.npy"), bytes);
    ASSERT_EQ(read_npy(dir.file("v.npy")).ndim(), 1);
    expect_refused("gemm --a " + dir.file("m.npy") + " --b " + dir.file("v.npy"), "is a 1-D array (shape (5,))");
    expect_refused("jacobi --init " + dir.file("v.npy"), "is a 1-D array");
    // --version.
    r = run_cli("--version");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.rfind("tilestream 0.", 0), 0u) << r.out;
    EXPECT_TRUE(leftovers(dir).empty());
}

// ---- 16: timelines name their lanes by role ----

TEST(cli_files, TimelineLanesNameTheirRole) {
    temp_dir dir;
    auto r = run_cli("gemm --m 300 --n 300 --k 300 --devices cpu:2 --memory-budget 1MiB --quiet --timeline " +
                     dir.file("g.svg") + " --trace " + dir.file("g.json"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::string g = read_file(dir.file("g.svg"));
    for (const char* lane : {"cpu:0 copy in", "cpu:0 compute", "cpu:0 copy out", "cpu:1 copy in", "cpu:1 compute"})
        EXPECT_TRUE(contains(g, std::string("</title>") + lane + "</text>")) << lane;
    EXPECT_FALSE(contains(g, "</title>cpu:0 stream")) << "a lane without a role";
    // The roles travel in the trace (thread_name) and come back when it is drawn later.
    r = run_cli("timeline " + dir.file("g.json") + " " + dir.file("again.svg"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(contains(read_file(dir.file("again.svg")), "</title>cpu:1 copy out</text>"));
    r = run_cli("jacobi --nx 200 --ny 200 --iters 20 --devices cpu:2 --quiet --timeline " + dir.file("j.svg"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::string j = read_file(dir.file("j.svg"));
    for (const char* lane : {"cpu:0 compute (interior)", "cpu:0 compute (boundary strips)", "cpu:0 halo out"})
        EXPECT_TRUE(contains(j, std::string("</title>") + lane + "</text>")) << lane << "\n" << j.substr(0, 3000);
    // The scaling plot's axes and legend carry units.
    r = run_cli("scale gemm --m 64 --n 64 --k 64 --devices cpu:1,cpu:2 --repeat 1 --plot " + dir.file("s.svg"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::string s = read_file(dir.file("s.svg"));
    for (const char* text : {"devices (count)", "speedup (x", "efficiency (fraction", "GFLOP/s"})
        EXPECT_TRUE(contains(s, text)) << text;
}

}  // namespace
}  // namespace tilestream
