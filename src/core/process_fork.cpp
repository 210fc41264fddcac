// The fork generation (see process_fork.hpp).
#include "core/process_fork.hpp"

#include <pthread.h>

namespace tilestream::detail {
namespace {

std::atomic<std::uint64_t> forks{0};

void count_fork_in_child() { forks.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

std::uint64_t fork_generation() noexcept {
    // Registered once, by the first caller (glibc unregisters it if the library is unloaded).
    [[maybe_unused]] static const bool registered = ::pthread_atfork(nullptr, nullptr, count_fork_in_child) == 0;
    return forks.load(std::memory_order_relaxed);
}

}  // namespace tilestream::detail
