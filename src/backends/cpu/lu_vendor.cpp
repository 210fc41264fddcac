// LU's tile operations on CPU devices: the panel factorization through the LAPACK that OpenBLAS
// carries (?getrf_, with OpenBLAS's threads when the device is the process's only one) and the row
// interchanges (a loop over the tile: memory traffic, no library call needed).
#include "cpu_kernels.hpp"
#include "openblas_memory.hpp"

#include "backends/reference/reference_kernels.hpp"
#include "core/cblas_gemm.hpp"
#include "core/lapack_calls.hpp"

#include <tilestream/error.hpp>

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <complex>
#include <utility>
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

/// Width of the block columns of a row-major LU: the panel LAPACK factors (through a column-major
/// copy) and the depth of each trailing GEMM update. LAPACK's own default is 64 for all four. On a
/// 2-core AMD EPYC (Zen 4) VM, OpenBLAS 0.3.21 (Cooperlake kernels), alternating with OpenBLAS's
/// ?getrf_ on the column-major matrix (lu_bench --only row, 2026-11-28): f64 4096 ran 0.97x at
/// 96-128, 0.90-0.98x at 192-384 and 0.74x as one panel (the whole matrix transposed, as before);
/// c64 2048 0.91-0.93x at 64-96 against 0.81-0.88x at 128-384 (a complex rank-64 update already does
/// four times the flops per element moved). Single runs of f32 4096 agreed (0.93-0.97x at 128,
/// 0.71-0.89x at 256).
template <class T>
constexpr index_t row_major_lu_block() {
    return is_complex_v<T> ? 64 : 128;
}

/// LU with partial pivoting of the row-major m x n matrix a (leading dimension ld) in place,
/// LAPACK's blocked right-looking algorithm in row-major form: each block column of width nb goes
/// through a column-major copy to ?getrf_ (only the panel is copied, never A), its row interchanges
/// are applied to the columns on both sides (whole rows: contiguous in row-major), then the block
/// row of U by ?trsm and the trailing matrix by ?gemm. ipiv gets min(m, n) 1-based pivots. An
/// exactly zero pivot does not stop it (LAPACK's convention; the planner finds it on U's diagonal).
template <class T>
void getrf_row_major(index_t m, index_t n, T* a, index_t ld, int* ipiv) {
    const index_t steps = std::min(m, n), nb = row_major_lu_block<T>();
    std::vector<T> panel(std::size_t(m) * std::size_t(std::min(nb, steps)));
    for (index_t j = 0; j < steps; j += nb) {
        const index_t jb = std::min(nb, steps - j), rows = m - j;
        T* diag = a + j * ld + j;
        transpose_panel(diag, ld, panel.data(), rows, jb, false);
        getrf_checked<T>(int(rows), int(jb), panel.data(), int(rows), ipiv + j);
        transpose_panel(diag, ld, panel.data(), rows, jb, true);
        // The panel's interchanges, on the columns left and right of it; its pivots become A's.
        for (index_t i = 0; i < jb; ++i) {
            const index_t p = j + ipiv[j + i] - 1;
            ipiv[j + i] += int(j);
            if (p == j + i) continue;
            T* r0 = a + (j + i) * ld;
            T* r1 = a + p * ld;
            std::swap_ranges(r0, r0 + j, r1);
            std::swap_ranges(r0 + j + jb, r0 + n, r1 + j + jb);
        }
        if (j + jb >= n) continue;
        // U's block row: L11^-1 A12 (unit lower, left).
        tilestream::detail::cblas_xtrsm<T>(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, jb, n - j - jb, T(1),
                                           diag, ld, diag + jb, ld);
        if (j + jb < m)
            tilestream::detail::cblas_xgemm<T>(CblasRowMajor, CblasNoTrans, CblasNoTrans, m - j - jb, n - j - jb, jb, T(-1),
                                               diag + jb * ld, ld, diag + jb, ld, T(1), diag + jb * ld + jb, ld);
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
    if (op.c.lay == layout::col_major)
        getrf_checked<T>(int(op.m), int(op.n), c, int(std::max<index_t>(op.c.ld, std::max<index_t>(op.m, 1))), ipiv.data());
    else
        getrf_row_major<T>(op.m, op.n, c, op.c.ld, ipiv.data());
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
