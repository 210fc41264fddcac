// LU's tile operations on CPU devices: the panel factorization through the LAPACK that OpenBLAS
// carries (?getrf_, with OpenBLAS's threads when the device is the process's only one) and the row
// interchanges (a loop over the tile: memory traffic, no library call needed).
#include "cpu_kernels.hpp"
#include "openblas_memory.hpp"

#include "backends/reference/reference_kernels.hpp"
#include "core/lapack_calls.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <climits>
#include <complex>
#include <vector>

namespace tilestream::cpu {

namespace {

/// ?getrf_; an exactly zero pivot (info > 0) is found again from U's diagonal by the planner.
template <class T>
void getrf_checked(int m, int n, T* a, int lda, int* ipiv) {
    const int info = tilestream::detail::lapack_getrf<T>(m, n, a, lda, ipiv);
    if (info < 0) throw invalid_argument("?getrf: LAPACK refused argument " + std::to_string(-info));
}

/// Row-major src (m x n, leading dimension ld) to column-major dst (leading dimension m), or back
/// with `back`, in blocks of 32 x 32 so that both sides stay in cache (a 4096 x 384 f64 panel there
/// and back on a 2-core AMD EPYC (Zen 4) VM: 10 ms, against 15 ms row by row).
template <class T>
void transpose_panel(T* row_major, index_t ld, T* col_major, index_t m, index_t n, bool back) {
    constexpr index_t b = 32;
    for (index_t i0 = 0; i0 < m; i0 += b)
        for (index_t j0 = 0; j0 < n; j0 += b) {
            const index_t i1 = std::min(m, i0 + b), j1 = std::min(n, j0 + b);
            for (index_t j = j0; j < j1; ++j)
                for (index_t i = i0; i < i1; ++i) {
                    T& r = row_major[i * ld + j];
                    T& c = col_major[std::size_t(i + j * m)];
                    if (back) r = c;
                    else c = r;
                }
        }
}

template <class T>
void getrf_typed(const tile_op& op, int threads) {
    using R = real_type_t<T>;
    T* c = static_cast<T*>(const_cast<void*>(op.c.data));
    T* piv = static_cast<T*>(const_cast<void*>(op.b.data));
    const index_t steps = std::min(op.m, op.n);
    std::vector<int> ipiv(std::size_t(std::max<index_t>(steps, 1)));
    const openblas_call announced(threads);
    set_openblas_threads(threads);
    if (op.c.lay == layout::col_major) {
        getrf_checked<T>(int(op.m), int(op.n), c, int(std::max<index_t>(op.c.ld, std::max<index_t>(op.m, 1))), ipiv.data());
    } else {
        // LAPACK is column-major: the panel through a column-major copy (a panel is thin).
        std::vector<T> cm(std::size_t(op.m) * std::size_t(op.n));
        transpose_panel(c, op.c.ld, cm.data(), op.m, op.n, false);
        getrf_checked<T>(int(op.m), int(op.n), cm.data(), int(std::max<index_t>(op.m, 1)), ipiv.data());
        transpose_panel(c, op.c.ld, cm.data(), op.m, op.n, true);
    }
    // B's first row, whatever its layout: consecutive elements (one row).
    const index_t stride = op.b.lay == layout::row_major ? 1 : op.b.ld;
    for (index_t i = 0; i < steps; ++i) piv[i * stride] = T(R(ipiv[std::size_t(i)]));
}

}  // namespace

bool lu_vendor_supports(tile_kind kind) { return kind == tile_kind::getrf || kind == tile_kind::laswp; }

void lu_vendor(const tile_op& op, thread_pool& pool, bool openblas_threads) {
    lu_vendor_with(op, openblas_threads ? pool.size() : 1);
}

void lu_vendor_with(const tile_op& op, int threads) {
    if (op.m == 0 || op.n == 0) return;
    const bool fits = op.m <= INT_MAX && op.n <= INT_MAX && op.c.ld <= INT_MAX;
    if (op.kind == tile_kind::laswp || !fits) {
        reference::execute(op);
        return;
    }
    visit_dtype(op.type, [&]<class T>() { getrf_typed<T>(op, threads); });
}

}  // namespace tilestream::cpu
