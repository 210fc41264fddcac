// A fixed set of worker threads that run parallel loops for one CPU device.
#pragma once

#include <tilestream/types.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tilestream::cpu {

namespace detail {
/// Test hook: called before starting worker i; returning false makes that start fail as when the
/// system has no more threads (std::system_error). Empty in normal runs.
extern std::function<bool(int worker)> thread_start_hook;
}  // namespace detail

/// Throws device_error when a worker cannot start (the ones started are joined first).
class thread_pool {
public:
    explicit thread_pool(int threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return static_cast<int>(workers_.size()); }

    /// Runs body(part) for part in [0, parts) on the workers and waits for all of them.
    /// The first exception a part throws is rethrown here after every part has finished.
    void run(int parts, const std::function<void(int part)>& body);

    /// Splits [0, n) into size() contiguous ranges and runs body(begin, end) on each.
    void parallel_for(index_t n, const std::function<void(index_t begin, index_t end)>& body);

private:
    void work();
    void stop_workers();
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool stopping_ = false;
};

}  // namespace tilestream::cpu
