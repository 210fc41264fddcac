// Batched GEMM on a CPU device: the products of a stack shared out to the device's workers when they
// are small (each on one thread: no thread start, no sharing of packed panels to wait for), or run
// one after the other on the whole pool when they are large.
#include "cpu_kernels.hpp"

#include "backends/reference/reference_kernels.hpp"

#include <algorithm>
#include <atomic>

namespace tilestream::cpu {

void gemm_batched(const gemm_batched_call& batch, thread_pool& pool, bool openblas_threads) {
    if (batch.count <= 0 || batch.call.m <= 0 || batch.call.n <= 0) return;
    // Below about a millisecond of work per product one thread per product wins: a product split
    // over the workers pays their start and the packing of the operand they share.
    constexpr double one_thread_flops = 2.0 * 192 * 192 * 192;
    const bool split_batch = batch.count >= pool.size() && batch.call.flops() <= one_thread_flops;
    if (split_batch || batch.call.kernel == gemm_kernel::reference) {
        // Workers take runs of products from a shared counter (about 16 a worker), not a fixed
        // share each: a worker the machine's load holds back leaves its products to the others
        // instead of making the whole stack wait for it. A product's bits do not depend on the
        // worker that computes it.
        const index_t n = batch.count;
        const int parts = int(std::min<index_t>(n, pool.size()));
        const index_t run = std::max<index_t>(1, n / (index_t(parts) * 16));
        std::atomic<index_t> next{0};
        pool.run(parts, [&](int) {
            for (index_t first; (first = next.fetch_add(run)) < n;)
                gemm_items_on_calling_thread(batch, first, std::min(n, first + run));
        });
        return;
    }
    for (index_t i = 0; i < batch.count; ++i) {
        const gemm_call g = batch.item(i);
        switch (g.kernel) {
            case gemm_kernel::reference: reference::gemm(g); break;
            case gemm_kernel::naive: gemm_naive(g, pool); break;
            case gemm_kernel::tiled: gemm_tiled(g, pool); break;
            case gemm_kernel::vendor: gemm_vendor(g, pool, openblas_threads); break;
        }
    }
}

}  // namespace tilestream::cpu
