// Address space for OpenBLAS's buffers: see openblas_memory.hpp.
#include "openblas_memory.hpp"

#include <tilestream/error.hpp>
#include <tilestream/types.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace tilestream::cpu {

namespace {

// OpenBLAS 0.3's BUFFER_SIZE on x86-64 (32 << 22) plus its alignment padding, and room for what the
// call itself maps around it.
constexpr std::size_t buffer_bytes = (std::size_t(128) << 20) + (std::size_t(64) << 10);
constexpr std::size_t margin_bytes = std::size_t(16) << 20;

struct buffer_count {
    std::mutex mutex;                  // a check against the limit, one at a time
    std::atomic<int> callers_now{0};   // threads inside an OpenBLAS call
    std::atomic<int> callers_most{0};  // the most at once so far: a buffer each, kept by OpenBLAS for reuse
    std::atomic<int> workers_most{0};  // OpenBLAS worker threads used so far: a buffer each, kept
};

buffer_count& count() {
    static buffer_count& c = *new buffer_count;  // never destroyed: calls may run while the process exits
    return c;
}

// The process's mapped address space (VmSize), in bytes; 0 when unknown.
std::size_t mapped_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "re");
    if (!f) return 0;
    unsigned long pages = 0;
    const int got = std::fscanf(f, "%lu", &pages);
    std::fclose(f);
    return got == 1 ? std::size_t(pages) * std::size_t(::sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

openblas_call::openblas_call(int threads) {
    buffer_count& c = count();
    // No lock while the buffers OpenBLAS already holds cover this call (every call but the first
    // few of a process): a small call's fixed cost is two atomic additions here.
    const int now = c.callers_now.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (now <= c.callers_most.load(std::memory_order_acquire) && threads - 1 <= c.workers_most.load(std::memory_order_acquire))
        return;
    try {
        const std::lock_guard lock(c.mutex);
        const int most = c.callers_most.load(), workers_most = c.workers_most.load();
        const int callers = std::max(most, now);
        const int workers = std::max(workers_most, threads - 1);
        const int more = (callers - most) + (workers - workers_most);
        rlimit limit{};
        if (more > 0 && ::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
            const std::size_t used = mapped_bytes();
            const std::size_t left = limit.rlim_cur > used ? std::size_t(limit.rlim_cur) - used : 0;
            const std::size_t need = std::size_t(more) * buffer_bytes + margin_bytes;
            if (left < need)
                throw device_error("OpenBLAS needs " + format_bytes(buffer_bytes) +
                                   " of address space for each thread that runs it (" + std::to_string(more) +
                                   " more here), but the address-space limit (ulimit -v " +
                                   std::to_string(limit.rlim_cur / 1024) + " KiB) leaves " + format_bytes(left) +
                                   "; raise the limit, use fewer threads (--cpu-threads) or --kernel tiled");
        }
        c.callers_most.store(callers);
        c.workers_most.store(workers);
    } catch (...) {
        c.callers_now.fetch_sub(1, std::memory_order_acq_rel);
        throw;
    }
}

openblas_call::~openblas_call() { count().callers_now.fetch_sub(1, std::memory_order_acq_rel); }

}  // namespace tilestream::cpu
