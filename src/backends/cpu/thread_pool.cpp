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

/// One run() call's parts: how many are still running, and the first error one threw.
struct parts_left {
    std::mutex mutex;
    std::condition_variable cv;
    int remaining = 0;
    std::exception_ptr first_error;
};

/// The workers of one process: started when made, stopped and joined when destroyed.
struct thread_pool::workers {
    struct job {
        std::function<void()> body;
        parts_left* batch;
    };
    std::uint64_t generation = tilestream::detail::fork_generation();  // before any thread starts
    std::vector<std::thread> threads;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<job> jobs;
    bool stopping = false;
    std::size_t started = 0;  // workers that have entered work()

    explicit workers(int n) {
        threads.reserve(std::size_t(n));
        try {
            for (int i = 0; i < n; ++i) {
                if (detail::thread_start_hook && !detail::thread_start_hook(i))
                    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
                threads.emplace_back([this] { work(); });
            }
            // Made only once every worker runs: a thread still starting holds its C library's and
            // sanitizer's locks, and a fork() then would leave the child waiting on them (under
            // ASan the ForkedChild test's child hung in 1 of 100 runs when forked right after).
            std::unique_lock lock(mutex);
            cv.wait(lock, [this] { return started == threads.size(); });
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
        {
            std::lock_guard lock(mutex);
            ++started;
        }
        cv.notify_all();
        for (;;) {
            job j;
            {
                std::unique_lock lock(mutex);
                cv.wait(lock, [this] { return stopping || !jobs.empty(); });
                if (jobs.empty()) return;
                j = std::move(jobs.front());
                jobs.pop_front();
            }
            std::exception_ptr err;
            try {
                j.body();
            } catch (...) {
                err = std::current_exception();
            }
            // The part's memory is freed before it counts as done: once run() has returned no
            // worker is inside the allocator, so a fork() right after it finds no allocator lock
            // held (ASan's, unlike glibc's, is not made safe around fork(); a child of the
            // ForkedChild test hung on it under a loaded ASan run).
            j.body = nullptr;
            parts_left& b = *j.batch;
            std::lock_guard dl(b.mutex);
            if (err && !b.first_error) b.first_error = std::move(err);
            err = nullptr;
            if (--b.remaining == 0) b.cv.notify_all();
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
    parts_left batch;
    batch.remaining = parts;
    {
        std::lock_guard lock(w.mutex);
        // All parts or none: no worker takes a job while the lock is held, so when a push fails
        // (bad_alloc) the parts already queued come off again before `batch` and `body` go out
        // of scope (and no part of a call whose parts wait for each other runs alone).
        int queued = 0;
        try {
            for (; queued < parts; ++queued) w.jobs.push_back({[&body, p = queued] { body(p); }, &batch});
        } catch (...) {
            for (; queued > 0; --queued) w.jobs.pop_back();
            throw;
        }
    }
    w.cv.notify_all();
    std::unique_lock dl(batch.mutex);
    batch.cv.wait(dl, [&] { return batch.remaining == 0; });
    if (batch.first_error) std::rethrow_exception(batch.first_error);
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
