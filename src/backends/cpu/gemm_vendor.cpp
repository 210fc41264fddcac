// The vendor CPU GEMM: OpenBLAS through CBLAS (cblas_[sdcz]gemm, or cblas_[sdcz]gemv when C is a single
// column or row), one single-threaded call per worker on its block of C.
#include "cpu_kernels.hpp"
#include "openblas_memory.hpp"

#include "backends/reference/reference_kernels.hpp"

#include <tilestream/error.hpp>

#include "core/cblas_gemm.hpp"
#include "core/complex_arith.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <complex>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

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

/// cblas_?gemv for T (sizes already known to fit CBLAS's int).
template <class T>
void cblas_gemv(CBLAS_ORDER order, CBLAS_TRANSPOSE t, index_t rows, index_t cols, T alpha, const T* a, index_t lda,
                const T* x, index_t incx, T beta, T* y, index_t incy) {
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemv(order, t, int(rows), int(cols), alpha, a, int(lda), x, int(incx), beta, y, int(incy));
    else if constexpr (std::is_same_v<T, double>)
        cblas_dgemv(order, t, int(rows), int(cols), alpha, a, int(lda), x, int(incx), beta, y, int(incy));
    else if constexpr (std::is_same_v<T, std::complex<float>>)
        cblas_cgemv(order, t, int(rows), int(cols), &alpha, a, int(lda), x, int(incx), &beta, y, int(incy));
    else
        cblas_zgemv(order, t, int(rows), int(cols), &alpha, a, int(lda), x, int(incx), &beta, y, int(incy));
}

/// `call` (alpha != 0, k > 0) as a matrix-vector product when C is a single column or row, as
/// numpy runs such products: OpenBLAS's ?gemv is ~2.8x faster than its ?gemm at 1x4096x4096.
/// n == 1: C's column y <- alpha op(A) x + beta y, x op(B)'s column; m == 1: C's row as C^T =
/// op(B)^T op(A)^T, x op(A)'s row. gemv conjugates only its matrix, so a conjugated vector
/// operand takes the other form when C is 1x1, else ?gemm (returns false, having done nothing);
/// likewise a leading dimension gemv would refuse (?gemm then names the malformed operand).
template <class T>
bool gemv_product(const gemm_call& call, T alpha, T beta) {
    if (call.m != 1 && call.n != 1) return false;
    const operand_desc da = call.a_desc(), db = call.b_desc(), dc = call.c_desc();
    const bool column = call.n == 1 && !db.conjugated();
    if (!column && !(call.m == 1 && !da.conjugated())) return false;
    const operand_desc& g = column ? da : db;  // G = op(A), or op(B)^T
    const operand_desc& x = column ? db : da;
    // G as gemv reads it: g's storage in some order, with a flag. op(B)^T is B^T for op n, B for
    // op t, and conj(B) for op c: B's storage read in the other order (as B^T), conjugate-transposed.
    layout order = g.stored;
    index_t rows = g.stored_rows(), cols = g.stored_cols();
    CBLAS_TRANSPOSE t = CblasNoTrans;
    if (column) {
        t = g.o == op::n ? CblasNoTrans : g.o == op::t ? CblasTrans : CblasConjTrans;
    } else if (g.o == op::n) {
        t = CblasTrans;
    } else if (g.o == op::c) {
        order = order == layout::row_major ? layout::col_major : layout::row_major;
        std::swap(rows, cols);
        t = CblasConjTrans;
    }
    const index_t min_ld = std::max<index_t>(1, order == layout::row_major ? cols : rows);
    const index_t len_x = call.k, len_y = column ? call.m : call.n;
    const index_t incx = len_x == 1 ? 1 : column ? x.row_stride() : x.col_stride();
    const index_t incy = len_y == 1 ? 1 : column ? dc.row_stride() : dc.col_stride();
    if (g.ld < min_ld || !fits_int(rows) || !fits_int(cols) || !fits_int(g.ld) || !fits_int(incx) || !fits_int(incy))
        return false;
    T* y = static_cast<T*>(call.c);
    // beta == 0 must not read C (NaN there must not survive), which not every OpenBLAS version's
    // gemv promises: C's line is zeroed first.
    if (beta == T(0))
        for (index_t i = 0; i < len_y; ++i) y[i * incy] = T(0);
    cblas_gemv<T>(order == layout::row_major ? CblasRowMajor : CblasColMajor, t, rows, cols, alpha,
                  static_cast<const T*>(column ? call.a : call.b), g.ld, static_cast<const T*>(column ? call.b : call.a),
                  incx, beta, y, incy);
    return true;
}

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
        if (!gemv_product<T>(call, alpha, beta))
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
        // A single column or row of C (split into parts) is a matrix-vector product in each part.
        gemm_call piece = call;
        if (split_rows) {
            piece.m = b1 - b0;
            piece.a = pa + b0 * ars;
            piece.c = c + b0 * crs;
        } else {
            piece.n = b1 - b0;
            piece.b = pb + b0 * bcs;
            piece.c = c + b0 * ccs;
        }
        if ((piece.m == 1 || piece.n == 1) && gemv_product<T>(piece, alpha, beta)) return;
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
