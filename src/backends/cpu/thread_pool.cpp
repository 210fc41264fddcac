// Worker threads of one CPU device and the parallel loops that run on them.
#include "thread_pool.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <exception>
#include <string>
#include <system_error>

namespace tilestream::cpu::detail {
std::function<bool(int)> thread_start_hook;
}  // namespace tilestream::cpu::detail

namespace tilestream::cpu {

thread_pool::thread_pool(int threads) {
    const int n = std::max(1, threads);
    workers_.reserve(n);
    try {
        for (int i = 0; i < n; ++i) {
            if (detail::thread_start_hook && !detail::thread_start_hook(i))
                throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
            workers_.emplace_back([this] { work(); });
        }
    } catch (const std::system_error& e) {
        // Stop and join the workers that did start, so that nothing waits on the missing ones.
        const auto started = workers_.size();
        stop_workers();
        throw device_error("cpu: cannot start worker thread " + std::to_string(started + 1) + " of " +
                           std::to_string(n) + ": " + e.what() +
                           " (fewer threads per device, e.g. --cpu-threads, or a larger thread/memory limit)");
    }
}

thread_pool::~thread_pool() { stop_workers(); }

void thread_pool::stop_workers() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
}

void thread_pool::work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty()) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();
    }
}

void thread_pool::run(int parts, const std::function<void(int)>& body) {
    if (parts <= 0) return;
    if (parts == 1) {
        body(0);
        return;
    }
    std::mutex done_mutex;
    std::condition_variable done_cv;
    int remaining = parts;
    std::exception_ptr first_error;
    {
        std::lock_guard lock(mutex_);
        for (int p = 0; p < parts; ++p)
            jobs_.emplace_back([&, p] {
                std::exception_ptr err;
                try {
                    body(p);
                } catch (...) {
                    err = std::current_exception();
                }
                std::lock_guard dl(done_mutex);
                if (err && !first_error) first_error = err;
                if (--remaining == 0) done_cv.notify_all();
            });
    }
    cv_.notify_all();
    std::unique_lock dl(done_mutex);
    done_cv.wait(dl, [&] { return remaining == 0; });
    if (first_error) std::rethrow_exception(first_error);
}

void thread_pool::parallel_for(index_t n, const std::function<void(index_t, index_t)>& body) {
    if (n <= 0) return;
    const int parts = static_cast<int>(std::min<index_t>(n, size()));
    run(parts, [&](int p) {
        const index_t begin = n * p / parts;
        const index_t end = n * (p + 1) / parts;
        if (begin < end) body(begin, end);
    });
}

}  // namespace tilestream::cpu
