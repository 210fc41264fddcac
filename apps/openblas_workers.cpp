// Under an address-space limit (ulimit -v), OpenBLAS starts no worker threads when it loads.
//
// OpenBLAS starts its worker threads in its load-time constructor, and each maps its 128 MiB buffer at
// once; when the mapping fails under a limit it retries forever, and exit then waits for that thread
// (seen as a hang under `ulimit -v 200000` on a loaded 2-core machine, a race with the tool's own
// mappings). The executable's preinit array runs before every library's constructor, but a setenv
// there does not reach OpenBLAS (libc's own initialisation sets the environment back to the one on
// the stack before OpenBLAS's constructor runs), so under a limit, with no thread count given by the
// user, the tool executes itself again at once with OPENBLAS_NUM_THREADS=1: no thread exists yet,
// and OpenBLAS then starts none. The tool asks OpenBLAS for its threads per call, after
// cpu::openblas_call has checked that their buffers fit, and reports a limit that is too low as an
// error. main takes the setting back (restore_openblas_environment), so processes the tool starts do
// not inherit it.
#include "commands.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr const char* marker = "TILESTREAM_OPENBLAS_WORKERS_LIMITED";

void limit_openblas_workers(int, char** argv, char** envp) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
    for (char** e = envp; *e != nullptr; ++e)
        for (const char* given : {"OPENBLAS_NUM_THREADS=", "GOTO_NUM_THREADS=", "OMP_NUM_THREADS=", marker})
            if (std::strncmp(*e, given, std::strlen(given)) == 0) return;
    std::vector<char*> env;
    for (char** e = envp; *e != nullptr; ++e) env.push_back(*e);
    char threads[] = "OPENBLAS_NUM_THREADS=1";
    std::string mark = std::string(marker) + "=1";
    env.push_back(threads);
    env.push_back(mark.data());
    env.push_back(nullptr);
    ::execve("/proc/self/exe", argv, env.data());  // returns only when it failed: go on as we are
}

}  // namespace

// NOLINTNEXTLINE: the ELF preinit array takes plain function pointers.
__attribute__((section(".preinit_array"), used)) static void (*const preinit_openblas)(int, char**, char**) =
    limit_openblas_workers;

void tilestream::cli::restore_openblas_environment() {
    if (std::getenv(marker) == nullptr) return;
    ::unsetenv("OPENBLAS_NUM_THREADS");
    ::unsetenv(marker);
}
