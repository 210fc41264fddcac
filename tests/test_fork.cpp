// A child made with fork() after the parent used tilestream works: the worker threads of CPU devices
// (the kernel pool and the streams' threads) did not come along, and are started again in the child
// (as OpenBLAS does) instead of waited on forever. Each child runs under a deadline, so a hang
// fails the test instead of the suite. Not in the TSan subset: TSan refuses threads started after a
// multi-threaded fork.
#include "backends/cpu/thread_pool.hpp"

#include <tilestream/context.hpp>
#include <tilestream/error.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace tilestream {
namespace {

/// Runs `child` in a forked child and returns its exit status (0: it returned true); -1 when it
/// was still running after `seconds` (then killed by its pid).
int in_child(const std::function<bool()>& child, int seconds = 30) {
    const pid_t pid = ::fork();
    if (pid < 0) return -2;
    if (pid == 0) {
        bool ok = false;
        try {
            ok = child();
        } catch (...) {
        }
        ::_exit(ok ? 0 : 1);  // no atexit handlers, no gtest output from the child
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct problem {
    index_t m = 67, n = 45, k = 53;
    std::vector<double> a, b, c;
    problem() : a(std::size_t(m * k)), b(std::size_t(k * n)), c(std::size_t(m * n)) {
        std::mt19937 gen(24);
        std::uniform_real_distribution<double> u(0.5, 1.0);
        for (auto& x : a) x = u(gen);
        for (auto& x : b) x = u(gen);
    }
    /// Runs C = A B on `ctx` with C poisoned first; true when every element matches the sum.
    bool run(context& ctx) {
        std::fill(c.begin(), c.end(), std::nan(""));
        ctx.gemm<double>(host_matrix_view<const double>(a.data(), m, k), host_matrix_view<const double>(b.data(), k, n),
                         host_matrix_view<double>(c.data(), m, n));
        for (index_t i = 0; i < m; ++i)
            for (index_t j = 0; j < n; ++j) {
                double s = 0;
                for (index_t p = 0; p < k; ++p) s += a[std::size_t(i * k + p)] * b[std::size_t(p * n + j)];
                if (!(std::abs(c[std::size_t(i * n + j)] - s) <= 1e-12 * s)) return false;
            }
        return true;
    }
};

TEST(ForkedChild, CpuWorkerPoolStartsAgainInTheChild) {
    cpu::thread_pool pool(3);
    std::atomic<int> ran{0};
    pool.run(3, [&](int) { ++ran; });  // the workers are up and idle
    ASSERT_EQ(ran.load(), 3);
    EXPECT_EQ(in_child([&] {
                  std::atomic<int> parts{0};
                  pool.run(3, [&](int) { ++parts; });
                  pool.run(5, [&](int) { ++parts; });
                  return parts.load() == 8;
              }),
              0);
    // The parent's workers are untouched.
    ran = 0;
    pool.run(4, [&](int) { ++ran; });
    EXPECT_EQ(ran.load(), 4);
}

TEST(ForkedChild, ContextComputesInTheChildAndInTheParent) {
    problem p;
    // Two CPU devices with a budget: tiles stream through both, so the streams' threads, the
    // kernels' pools and the buffers kept between calls were all made before the fork.
    context_options o;
    o.memory_budget = 16 << 10;
    o.cpu_threads = 2;
    auto ctx = std::make_unique<context>("cpu:2", o);
    ASSERT_TRUE(p.run(*ctx));
    EXPECT_EQ(in_child([&] { return p.run(*ctx) && p.run(*ctx); }), 0);
    // A child may also just drop what the parent opened, and its grandchild still computes.
    EXPECT_EQ(in_child([&] {
                  const bool ok = p.run(*ctx);
                  return ok && in_child([&] { return p.run(*ctx); }) == 0 && (ctx.reset(), true);
              }),
              0);
    EXPECT_TRUE(p.run(*ctx));
}

TEST(ForkedChild, ContextOpenedInPlaceComputesInTheChild) {
    problem p;
    context ctx("cpu", {});  // zero-copy on one device: OpenBLAS or the tiled kernel on the pool
    ASSERT_TRUE(p.run(ctx));
    EXPECT_EQ(in_child([&] { return p.run(ctx); }), 0);
}

#if defined(TILESTREAM_HAVE_OPENCL)
// OpenCL runtimes (PoCL here) and CUDA do not survive fork(): a child's first call on the parent's
// context hung before. It is refused with a message saying what to do, and dropping the context in
// the child does not wait for the runtime's missing threads either.
TEST(ForkedChild, GpuDevicesOfTheParentAreRefusedInTheChild) {
    problem p;
    auto ctx = std::make_unique<context>("opencl:0,cpu", context_options{});
    ASSERT_TRUE(p.run(*ctx));
    EXPECT_EQ(in_child([&] {
                  try {
                      p.run(*ctx);
                      return false;
                  } catch (const device_error& e) {
                      const std::string what = e.what();
                      if (what.find("opencl:0") == std::string::npos ||
                          what.find("cannot be used in the child") == std::string::npos ||
                          what.find("'spawn'") == std::string::npos)
                          return false;
                  }
                  ctx.reset();
                  return true;
              }),
              0);
    EXPECT_TRUE(p.run(*ctx));
}
#endif

}  // namespace
}  // namespace tilestream
