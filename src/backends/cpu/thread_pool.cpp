// Worker threads of one CPU device and the parallel loops that run on them.
#include "thread_pool.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace tilestream::cpu::detail {
std::function<bool(int)> thread_start_hook;
}  // namespace tilestream::cpu::detail

namespace tilestream::cpu {

/// The workers of one process: started when made, stopped and joined when destroyed.
struct thread_pool::workers {
    std::uint64_t generation = tilestream::detail::fork_generation();  // before any thread starts
    std::vector<std::thread> threads;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stopping = false;

    explicit workers(int n) {
        threads.reserve(std::size_t(n));
        try {
            for (int i = 0; i < n; ++i) {
                if (detail::thread_start_hook && !detail::thread_start_hook(i))
                    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
                threads.emplace_back([this] { work(); });
            }
        } catch (const std::system_error& e) {
            // Stop and join the workers that did start, so that nothing waits on the missing ones.
            const auto started = threads.size();
            stop();
            throw device_error("cpu: cannot start worker thread " + std::to_string(started + 1) + " of " +
                               std::to_string(n) + ": " + e.what() +
                               " (fewer threads per device, e.g. --cpu-threads, or a larger thread/memory limit)");
        }
    }
    ~workers() { stop(); }

    void stop() {
        {
            std::lock_guard lock(mutex);
            stopping = true;
        }
        cv.notify_all();
        for (auto& w : threads) w.join();
        threads.clear();
    }

    void work() {
        for (;;) {
            std::function<void()> job;
            {
                std::unique_lock lock(mutex);
                cv.wait(lock, [this] { return stopping || !jobs.empty(); });
                if (jobs.empty()) return;
                job = std::move(jobs.front());
                jobs.pop_front();
            }
            job();
        }
    }
};

thread_pool::thread_pool(int threads) : size_(std::max(1, threads)) { live(); }

thread_pool::~thread_pool() = default;  // joins this process's workers (a parent's are left alone)

thread_pool::workers& thread_pool::live() {
    return workers_.get([this] { return std::make_unique<workers>(size_); });
}

void thread_pool::run(int parts, const std::function<void(int)>& body) {
    if (parts <= 0) return;
    if (parts == 1) {
        body(0);
        return;
    }
    workers& w = live();
    std::mutex done_mutex;
    std::condition_variable done_cv;
    int remaining = parts;
    std::exception_ptr first_error;
    {
        std::lock_guard lock(w.mutex);
        for (int p = 0; p < parts; ++p)
            w.jobs.emplace_back([&, p] {
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
    w.cv.notify_all();
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
