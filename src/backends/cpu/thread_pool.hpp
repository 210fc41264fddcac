// A fixed set of worker threads that run parallel loops for one CPU device.
#pragma once

#include <tilestream/types.hpp>

#include "core/process_fork.hpp"

#include <functional>

namespace tilestream::cpu {

namespace detail {
/// Test hook: called before starting worker i; returning false makes that start fail as when the
/// system has no more threads (std::system_error). Empty in normal runs.
extern std::function<bool(int worker)> thread_start_hook;
}  // namespace detail

/// Throws device_error when a worker cannot start (the ones started are joined first). In a child
/// made with fork() the parent's workers are not there: the first run() starts new ones (and may
/// throw device_error then).
class thread_pool {
public:
    explicit thread_pool(int threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return size_; }

    /// Runs body(part) for part in [0, parts) on the workers and waits for all of them.
    /// The first exception a part throws is rethrown here after every part has finished.
    /// Parts may wait for each other (the tiled GEMM's workers wait for each other's shares of B): with
    /// parts <= size(), every part runs on its own worker at once, because a call's parts are
    /// queued together (all or none), first come first served, and only a lone part runs on the
    /// caller. So body must not call run() on the same pool, and parts beyond size() must not
    /// wait for each other.
    void run(int parts, const std::function<void(int part)>& body);

    /// Splits [0, n) into size() contiguous ranges and runs body(begin, end) on each.
    void parallel_for(index_t n, const std::function<void(index_t begin, index_t end)>& body);

private:
    struct workers;  // the threads, their queue and lock: one set per process (see process_fork.hpp)
    workers& live();
    int size_;
    tilestream::detail::process_local<workers> workers_;
};

}  // namespace tilestream::cpu
