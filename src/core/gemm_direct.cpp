// The direct path (gemm_direct.hpp): the host's kernels on the calling thread.
#include "core/gemm_direct.hpp"

#include "backends/cpu/cpu_kernels.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace tilestream::detail {

void host_gemm(const gemm_call& call, int openblas_threads, index_t k_block) {
    for_each_k_block(call, k_block, [&](const gemm_call& part) { cpu::gemm_on_calling_thread(part, openblas_threads); });
}

void host_gemm_batched(const gemm_batched_call& batch, index_t k_block) {
    if (k_block <= 0 || batch.call.k <= k_block) {
        cpu::gemm_items_on_calling_thread(batch, 0, batch.count);
        return;
    }
    for (index_t i = 0; i < batch.count; ++i) host_gemm(batch.item(i), 1, k_block);
}

int host_threads(std::span<device* const> devices) {
    int threads = 0;
    for (const device* d : devices)
        if (d->info().kind == device_kind::cpu) threads += d->info().threads;
    if (threads > 0) return threads;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, int(std::thread::hardware_concurrency()));
}

}  // namespace tilestream::detail
