// The vendor CPU GEMM: OpenBLAS through CBLAS (cblas_[sdcz]gemm, or cblas_[sdcz]gemv when C is a single
// column or row: detail::cblas_gemm), one single-threaded call per worker on its block of C.
#include "cpu_kernels.hpp"
#include "openblas_memory.hpp"

#include "backends/reference/reference_kernels.hpp"

#include <tilestream/error.hpp>

#include "core/cblas_gemm.hpp"
#include "core/complex_arith.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <string>
#include <type_traits>

namespace tilestream::cpu {

// OpenBLAS's own thread pool is process-wide. Several CPU devices sharing it would serialise on it
// and oversubscribe the cores, so then each worker of a device makes single-threaded calls on its
// block of C. A process's only CPU device instead hands the whole call to OpenBLAS with its thread
// count: OpenBLAS's threads share one packed panel of B, where split calls would each pack all of
// it (about 5% of a 2048^3 f64 run on 2 cores).
void set_openblas_threads(int n) {
    if (openblas_get_num_threads() == n) return;  // the common case, with no lock (a small call's cost)
    static std::mutex mutex;
    const std::lock_guard lock(mutex);
    if (openblas_get_num_threads() != n) openblas_set_num_threads(n);
}

namespace {

bool fits_int(index_t v) { return v <= INT_MAX; }

// pool == nullptr: on the calling thread, with `openblas_threads` of OpenBLAS's own threads.
template <class T>
void gemm_vendor_typed(const gemm_call& call, thread_pool* pool, int openblas_threads) {
    T* c = static_cast<T*>(call.c);
    const index_t crs = call.c_row_stride(), ccs = call.c_col_stride();
    const index_t m = call.m, n = call.n, k = call.k;
    const bool split_rows = m >= n;
    const index_t extent = split_rows ? m : n;
    const int parts = pool ? static_cast<int>(std::min<index_t>(extent, pool->size())) : 1;

    if (call.alpha == 0.0 || k == 0) {
        // C = beta * C done here: A and B must not be read, and beta == 0 must not read C.
        const T beta = scalar_as<T>(call.beta);
        const auto scale_part = [&](int part) {
            const index_t b0 = extent * part / parts, b1 = extent * (part + 1) / parts;
            const index_t i0 = split_rows ? b0 : 0, i1 = split_rows ? b1 : m;
            const index_t j0 = split_rows ? 0 : b0, j1 = split_rows ? n : b1;
            auto scale = [&](T& cij) { cij = call.beta == 0.0 ? T(0) : tilestream::detail::mul(beta, cij); };
            if (call.layout_c == layout::row_major)
                for (index_t i = i0; i < i1; ++i)
                    for (index_t j = j0; j < j1; ++j) scale(c[i * crs + j]);
            else
                for (index_t j = j0; j < j1; ++j)
                    for (index_t i = i0; i < i1; ++i) scale(c[i + j * ccs]);
        };
        if (parts <= 1)
            scale_part(0);
        else
            pool->run(parts, scale_part);
        return;
    }

    const layout order = call.layout_c;
    const tilestream::detail::cblas_operand a = tilestream::detail::cblas_operand_of(call.a_desc(), order, "A");
    const tilestream::detail::cblas_operand b = tilestream::detail::cblas_operand_of(call.b_desc(), order, "B");
    const tilestream::detail::cblas_operand cc = tilestream::detail::cblas_operand_of(call.c_desc(), order, "C");
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(a.ld) || !fits_int(b.ld) ||
        !fits_int(cc.ld)) {
        // CBLAS takes 32-bit sizes; the blocked kernel is 64-bit clean and gives the same result.
        if (pool)
            gemm_tiled(call, *pool);
        else
            gemm_tiled_serial(call);
        return;
    }
    const T* pa = static_cast<const T*>(call.a);
    const T* pb = static_cast<const T*>(call.b);
    const index_t ars = call.a_row_stride(), bcs = call.b_col_stride();
    const CBLAS_ORDER cblas_order = order == layout::row_major ? CblasRowMajor : CblasColMajor;
    const T alpha = scalar_as<T>(call.alpha), beta = scalar_as<T>(call.beta);
    if (!pool || (openblas_threads > 1 && pool->size() > 1)) {
        const int threads = std::max(1, pool ? pool->size() : openblas_threads);
        const openblas_call announced(threads);
        set_openblas_threads(threads);
        tilestream::detail::cblas_gemm<T>(cblas_order, a.trans, b.trans, m, n, k, alpha, pa, a.ld, pb, b.ld, beta, c, cc.ld);
        return;
    }
    set_openblas_threads(1);
    pool->run(parts, [&](int part) {
        const index_t b0 = extent * part / parts, b1 = extent * (part + 1) / parts;
        if (b0 >= b1) return;
        const openblas_call announced(1);
        // A block of rows of C needs the same rows of op(A) and all of op(B); a block of columns
        // the same columns of op(B) and all of op(A). With beta == 0 OpenBLAS stores zeros
        // without reading C, so NaN in C does not survive (BetaZeroOverwritesNaNInC checks it).
        if (split_rows)
            tilestream::detail::cblas_gemm<T>(cblas_order, a.trans, b.trans, b1 - b0, n, k, alpha, pa + b0 * ars, a.ld, pb, b.ld,
                          beta, c + b0 * crs, cc.ld);
        else
            tilestream::detail::cblas_gemm<T>(cblas_order, a.trans, b.trans, m, b1 - b0, k, alpha, pa, a.ld, pb + b0 * bcs, b.ld,
                          beta, c + b0 * ccs, cc.ld);
    });
}

}  // namespace

void gemm_vendor(const gemm_call& call, thread_pool& pool, bool openblas_threads) {
    if (call.m <= 0 || call.n <= 0) return;
    visit_dtype(call.type, [&]<class T>() { gemm_vendor_typed<T>(call, &pool, openblas_threads ? pool.size() : 1); });
}

void gemm_items_on_calling_thread(const gemm_batched_call& batch, index_t begin, index_t end) {
    if (begin >= end || batch.call.m <= 0 || batch.call.n <= 0) return;
    const gemm_call& call = batch.call;
    if (call.kernel == gemm_kernel::tiled) {
        gemm_tiled_serial_items(batch, begin, end);
        return;
    }
    if (call.kernel != gemm_kernel::vendor || call.alpha == 0.0 || call.k == 0) {
        for (index_t i = begin; i < end; ++i) gemm_on_calling_thread(batch.item(i), 1);
        return;
    }
    // One announcement and thread setting for the whole range; then only the BLAS calls.
    const openblas_call announced(1);
    set_openblas_threads(1);
    visit_dtype(call.type, [&]<class T>() {
        const layout order = call.layout_c;
        const auto a = tilestream::detail::cblas_operand_of(call.a_desc(), order, "A");
        const auto b = tilestream::detail::cblas_operand_of(call.b_desc(), order, "B");
        const auto c = tilestream::detail::cblas_operand_of(call.c_desc(), order, "C");
        if (!fits_int(call.m) || !fits_int(call.n) || !fits_int(call.k) || !fits_int(a.ld) || !fits_int(b.ld) ||
            !fits_int(c.ld)) {
            for (index_t i = begin; i < end; ++i) gemm_tiled_serial(batch.item(i));
            return;
        }
        const CBLAS_ORDER o = order == layout::row_major ? CblasRowMajor : CblasColMajor;
        const T alpha = scalar_as<T>(call.alpha), beta = scalar_as<T>(call.beta);
        for (index_t i = begin; i < end; ++i) {
            const gemm_call g = batch.item(i);
            tilestream::detail::cblas_gemm<T>(o, a.trans, b.trans, call.m, call.n, call.k, alpha, static_cast<const T*>(g.a),
                                              a.ld, static_cast<const T*>(g.b), b.ld, beta, static_cast<T*>(g.c), c.ld);
        }
    });
}

void gemm_on_calling_thread(const gemm_call& call, int openblas_threads) {
    if (call.m <= 0 || call.n <= 0) return;
    switch (call.kernel) {
        case gemm_kernel::reference: reference::gemm(call); return;
        case gemm_kernel::naive: gemm_naive_serial(call); return;
        case gemm_kernel::tiled: gemm_tiled_serial(call); return;
        case gemm_kernel::vendor: break;
    }
    visit_dtype(call.type, [&]<class T>() { gemm_vendor_typed<T>(call, nullptr, openblas_threads); });
}

void gemm_vendor(const gemm_call& call, thread_pool& pool) { gemm_vendor(call, pool, false); }

}  // namespace tilestream::cpu
