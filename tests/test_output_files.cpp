// The output-file mechanism under the writers and the CLI (src/core/output_files.hpp): paths
// resolved as cp resolves them, identities, outputs committed together or not at all, and the
// capped reader and message helpers beside it.
#include "test_support.hpp"

#include "core/input_files.hpp"
#include "core/message_text.hpp"
#include "core/output_files.hpp"

#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>
#include <tilestream/trace.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <sys/stat.h>
#include <unistd.h>

namespace tilestream {
namespace {

namespace fs = std::filesystem;
using detail::output_kind;
using testing::temp_dir;

using testing::read_file;
using testing::write_file;

std::vector<std::string> names(const temp_dir& dir) {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(dir.path())) r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
}

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const file_error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(output_files, PathsResolveAsCpResolvesThem) {
    temp_dir dir;
    EXPECT_EQ(detail::resolve_output(dir.file("new.npy")).kind, output_kind::create);
    write_file(dir.file("old.npy"), "x");
    EXPECT_EQ(detail::resolve_output(dir.file("old.npy")).kind, output_kind::replace);
    // Links are followed, relative to their directory, through chains; a dangling one names the
    // file to create.
    fs::create_directory(dir.file("sub"));
    fs::create_symlink("../old.npy", dir.file("sub/up.npy"));
    fs::create_symlink("sub/up.npy", dir.file("chain.npy"));
    const auto chain = detail::resolve_output(dir.file("chain.npy"));
    EXPECT_EQ(chain.kind, output_kind::replace);
    EXPECT_EQ(chain.path, fs::canonical(dir.file("old.npy")).string());
    EXPECT_EQ(chain.given, dir.file("chain.npy"));
    fs::create_symlink("sub/later.npy", dir.file("dangling.npy"));
    const auto dangling = detail::resolve_output(dir.file("dangling.npy"));
    EXPECT_EQ(dangling.kind, output_kind::create);
    EXPECT_EQ(dangling.path, fs::canonical(dir.file("sub")).string() + "/later.npy");
    fs::create_symlink("loop2", dir.file("loop1"));
    fs::create_symlink("loop1", dir.file("loop2"));
    EXPECT_NE(error_of([&] { detail::resolve_output(dir.file("loop1")); }).find("symbolic links"), std::string::npos);
    // Devices, FIFOs and what /proc/self/fd leads to are written in place.
    EXPECT_EQ(detail::resolve_output("/dev/null").kind, output_kind::in_place);
    EXPECT_EQ(detail::resolve_output("/dev/stdout").kind, output_kind::in_place);
    ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0644), 0);
    EXPECT_EQ(detail::resolve_output(dir.file("fifo")).kind, output_kind::in_place);
    // What cannot be written is said before anything is.
    EXPECT_NE(error_of([&] { detail::resolve_output(dir.file("sub")); }).find("it is a directory"), std::string::npos);
    EXPECT_NE(error_of([&] { detail::resolve_output(dir.file(std::string(300, 'x'))); }).find("File name too long"),
              std::string::npos);
    EXPECT_NE(error_of([&] { detail::resolve_output(dir.file("old.npy/x")); }).find("is not a directory"),
              std::string::npos);
    EXPECT_NE(error_of([&] { detail::resolve_output(dir.file("none/x")); }).find("No such file or directory"),
              std::string::npos);
    EXPECT_EQ(names(dir), (std::vector<std::string>{"chain.npy", "dangling.npy", "fifo", "loop1", "loop2", "old.npy", "sub"}))
        << "resolving creates nothing";
}

TEST(output_files, IdentitiesSeeThroughLinksAndSpellings) {
    temp_dir dir;
    write_file(dir.file("a"), "a");
    ASSERT_EQ(::link(dir.file("a").c_str(), dir.file("hard").c_str()), 0);
    fs::create_symlink("a", dir.file("soft"));
    const auto a = detail::identify(dir.file("a"));
    EXPECT_TRUE(a.same_file(detail::identify(dir.file("hard"))));
    EXPECT_TRUE(a.same_file(detail::identify(dir.file("soft"))));
    EXPECT_TRUE(a.same_file(detail::identify(detail::resolve_output(dir.file("soft")))));
    EXPECT_FALSE(a.same_file(detail::identify(dir.file("b"))));
    // Files that do not exist yet: the same resolved path however it is spelled.
    const auto b = detail::identify(detail::resolve_output(dir.file("b")));
    EXPECT_TRUE(b.same_file(detail::identify(detail::resolve_output(dir.path().string() + "/./b"))));
    fs::create_symlink("b", dir.file("to_b"));
    EXPECT_TRUE(b.same_file(detail::identify(detail::resolve_output(dir.file("to_b")))));
}

TEST(output_files, ReplacedFilesKeepModeAndSymbolicLinksStay) {
    temp_dir dir;
    write_file(dir.file("f"), "old");
    ::chmod(dir.file("f").c_str(), 0604);
    fs::create_symlink("f", dir.file("l"));
    write_text_file_atomically(dir.file("l"), "new");
    EXPECT_TRUE(fs::is_symlink(dir.file("l")));
    EXPECT_EQ(read_file(dir.file("f")), "new");
    struct stat st {};
    ASSERT_EQ(::stat(dir.file("f").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0604u);
    // A new file gets the umask's mode, as any other new file.
    write_text_file_atomically(dir.file("g"), "g");
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ASSERT_EQ(::stat(dir.file("g").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);
    EXPECT_EQ(names(dir), (std::vector<std::string>{"f", "g", "l"}));
}

TEST(output_files, CommitTogetherPutsBackWhatItReplacedWhenARenameFails) {
    temp_dir dir;
    write_file(dir.file("one"), "old one");
    {
        detail::output_file one(dir.file("one")), two(dir.file("two")), three(dir.file("three"));
        one.write("new one", 7);
        two.write("new two", 7);
        three.write("new three", 9);
        // The third target becomes a non-empty directory before the commit: its rename fails.
        fs::create_directories(dir.file("three/x"));
        const std::string e = error_of([&] { detail::commit_together({&one, &two, &three}); });
        EXPECT_NE(e.find("cannot rename"), std::string::npos) << e;
        EXPECT_NE(e.find("the other outputs were left as they were"), std::string::npos) << e;
    }
    EXPECT_EQ(read_file(dir.file("one")), "old one");
    EXPECT_FALSE(fs::exists(dir.file("two")));
    EXPECT_EQ(names(dir), (std::vector<std::string>{"one", "three"})) << "temporaries and backups gone";
    // And when all renames work, all are new and no backup is left.
    fs::remove_all(dir.file("three"));
    detail::output_file a(dir.file("one")), b(dir.file("two"));
    a.write("A", 1);
    b.write("B", 1);
    detail::commit_together({&a, &b});
    EXPECT_EQ(read_file(dir.file("one")), "A");
    EXPECT_EQ(read_file(dir.file("two")), "B");
    EXPECT_EQ(names(dir), (std::vector<std::string>{"one", "two"}));
}

TEST(output_files, TheCleanupCoversEveryTerminatingSignalAProgramDoesNotCause) {
    const auto s = detail::cleanup_signals();
    for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGALRM, SIGTERM, SIGUSR1, SIGUSR2, SIGXCPU, SIGXFSZ, SIGVTALRM,
                    SIGPROF, SIGIO, SIGABRT, SIGRTMIN, SIGRTMAX})
        EXPECT_NE(std::find(s.begin(), s.end(), sig), s.end()) << strsignal(sig);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGKILL, SIGSTOP, SIGCHLD, SIGCONT, SIGWINCH})
        EXPECT_EQ(std::find(s.begin(), s.end(), sig), s.end()) << strsignal(sig);
}

TEST(output_files, ATemporaryOfTheParentIsLeftAloneByAChildThatDies) {
    temp_dir dir;
    detail::output_file f(dir.file("out"));
    f.write("x", 1);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::raise(SIGTERM);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    EXPECT_TRUE(fs::exists(f.name())) << "the child removed its parent's temporary";
    f.commit();
    EXPECT_EQ(read_file(dir.file("out")), "x");
}

TEST(output_files, NpyOutputTruncatedUnderItsMappingIsReported) {
    temp_dir dir;
    npy_output out(dir.file("o.npy"), dtype::f64, 1000, 100, layout::row_major);
    const auto v = out.view<double>();
    v(0, 0) = 1;
    std::string temporary;
    for (const auto& e : fs::directory_iterator(dir.path())) temporary = e.path().string();
    ASSERT_EQ(::truncate(temporary.c_str(), 100), 0);
    for (index_t i = 0; i < 1000; ++i) v(i, 7) = double(i);  // beyond the end: no SIGBUS
    const std::string e = error_of([&] { out.check_intact(); });
    EXPECT_NE(e.find("was truncated while the result was written to it"), std::string::npos) << e;
    EXPECT_NE(error_of([&] { out.commit(); }).find("o.npy"), std::string::npos);
}

TEST(output_files, CappedReadsRefuseDevicesAndWhatIsTooLarge) {
    temp_dir dir;
    write_file(dir.file("small"), std::string(100, 'x'));
    EXPECT_EQ(detail::read_file_capped(dir.file("small"), 100, "a test file").size(), 100u);
    EXPECT_NE(error_of([&] { detail::read_file_capped(dir.file("small"), 99, "a test file"); })
                  .find("larger than the 99 B tilestream reads as a test file"),
              std::string::npos);
    EXPECT_NE(error_of([&] { detail::read_file_capped("/dev/zero", 1 << 20, "a test file"); }).find("character device"),
              std::string::npos);
    // /proc files say size 0; they are read to their end, within the cap.
    EXPECT_FALSE(detail::read_file_capped("/proc/self/status", 1 << 20, "a test file").empty());
    EXPECT_NE(error_of([&] { detail::read_file_capped("/proc/self/status", 10, "a test file"); }).find("more than"),
              std::string::npos);
}

TEST(output_files, TerminalSafeTextKeepsUtf8AndShowsControls) {
    EXPECT_EQ(detail::terminal_safe("caf\xc3\xa9.npy"), "caf\xc3\xa9.npy");
    EXPECT_EQ(detail::terminal_safe("a\x1b[31mb\x07"), "a\\x1b[31mb\\x07");
    EXPECT_EQ(detail::terminal_safe("\xc2\x9b" "2J"), "\\xc2\\x9b2J");  // C1 CSI
    EXPECT_EQ(detail::terminal_safe("bad \xff byte"), "bad \\xff byte");
    EXPECT_EQ(detail::terminal_safe("line\nnext\ttab"), "line\nnext\ttab");
}

}  // namespace
}  // namespace tilestream
