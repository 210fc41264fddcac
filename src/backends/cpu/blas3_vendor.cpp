// The Level 3 tile operations on CPU devices through OpenBLAS (cblas_?trsm, ?trmm, ?symm, ?syrk,
// ?syr2k) in column-major form, either one call with OpenBLAS's threads or the tile split over the
// device's workers (independent columns or rows; the rank-k kinds in row bands of equal area).
#include "cpu_kernels.hpp"
#include "openblas_memory.hpp"

#include "backends/reference/reference_kernels.hpp"
#include "core/blas_mapping.hpp"
#include "core/cblas_gemm.hpp"
#include "core/engine/tile_kernels.hpp"
#include "core/engine/tile_mapping.hpp"
#include "core/lapack_calls.hpp"

#include <tilestream/error.hpp>

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <complex>
#include <string>
#include <type_traits>
#include <thread>
#include <vector>

namespace tilestream::cpu {

namespace {

using tilestream::detail::engine::column_major_tile;
using tilestream::detail::engine::shifted;

CBLAS_SIDE cblas_of(side s) { return s == side::left ? CblasLeft : CblasRight; }
CBLAS_UPLO cblas_of(uplo u) { return u == uplo::lower ? CblasLower : CblasUpper; }
CBLAS_DIAG cblas_of(diag d) { return d == diag::unit ? CblasUnit : CblasNonUnit; }
CBLAS_TRANSPOSE cblas_of(blas_trans t) { return tilestream::detail::to_cblas(t); }

bool fits_int(const column_major_tile& r) {
    return std::max({r.m, r.n, r.k, r.lda, r.ldb, r.ldc}) <= INT_MAX;
}

/// One OpenBLAS call for a representable, non-empty tile operation of type T (cblas_[sdcz]...;
/// complex scalars by address, HERK's and HER2K's real ones by value).
template <class T>
void call_typed(const column_major_tile& r) {
    using R = real_type_t<T>;
    constexpr dtype t = dtype_of<T>();
    const T alpha = scalar_as<T>(r.alpha), beta = scalar_as<T>(r.beta);
    const R alpha_re = R(r.alpha.real()), beta_re = R(r.beta.real());
    const T* a = static_cast<const T*>(r.a);
    const T* b = static_cast<const T*>(r.b);
    T* c = static_cast<T*>(r.c);
    const int m = int(r.m), n = int(r.n), k = int(r.k), lda = int(r.lda), ldb = int(r.ldb), ldc = int(r.ldc);
    const auto o = CblasColMajor;
    const auto sd = cblas_of(r.side_);
    const auto ul = cblas_of(r.uplo_);
    const auto tr = cblas_of(r.trans);
    const auto dg = cblas_of(r.diag_);
    switch (r.kind) {
        case tile_kind::trsm:
            tilestream::detail::cblas_xtrsm<T>(o, sd, ul, tr, dg, m, n, alpha, a, lda, c, ldc);
            return;
        case tile_kind::trmm:
            if constexpr (t == dtype::f32) cblas_strmm(o, sd, ul, tr, dg, m, n, alpha, a, lda, c, ldc);
            else if constexpr (t == dtype::f64) cblas_dtrmm(o, sd, ul, tr, dg, m, n, alpha, a, lda, c, ldc);
            else if constexpr (t == dtype::c32) cblas_ctrmm(o, sd, ul, tr, dg, m, n, &alpha, a, lda, c, ldc);
            else cblas_ztrmm(o, sd, ul, tr, dg, m, n, &alpha, a, lda, c, ldc);
            return;
        case tile_kind::symm:
            if constexpr (t == dtype::f32) cblas_ssymm(o, sd, ul, m, n, alpha, a, lda, b, ldb, beta, c, ldc);
            else if constexpr (t == dtype::f64) cblas_dsymm(o, sd, ul, m, n, alpha, a, lda, b, ldb, beta, c, ldc);
            else if constexpr (t == dtype::c32) cblas_csymm(o, sd, ul, m, n, &alpha, a, lda, b, ldb, &beta, c, ldc);
            else cblas_zsymm(o, sd, ul, m, n, &alpha, a, lda, b, ldb, &beta, c, ldc);
            return;
        case tile_kind::syrk:
            if constexpr (t == dtype::f32) cblas_ssyrk(o, ul, tr, n, k, alpha, a, lda, beta, c, ldc);
            else if constexpr (t == dtype::f64) cblas_dsyrk(o, ul, tr, n, k, alpha, a, lda, beta, c, ldc);
            else if constexpr (t == dtype::c32) cblas_csyrk(o, ul, tr, n, k, &alpha, a, lda, &beta, c, ldc);
            else cblas_zsyrk(o, ul, tr, n, k, &alpha, a, lda, &beta, c, ldc);
            return;
        case tile_kind::syr2k:
            if constexpr (t == dtype::f32) cblas_ssyr2k(o, ul, tr, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            else if constexpr (t == dtype::f64) cblas_dsyr2k(o, ul, tr, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
            else if constexpr (t == dtype::c32) cblas_csyr2k(o, ul, tr, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
            else cblas_zsyr2k(o, ul, tr, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
            return;
        case tile_kind::hemm:
            if constexpr (t == dtype::c32) cblas_chemm(o, sd, ul, m, n, &alpha, a, lda, b, ldb, &beta, c, ldc);
            else if constexpr (t == dtype::c64) cblas_zhemm(o, sd, ul, m, n, &alpha, a, lda, b, ldb, &beta, c, ldc);
            else break;
            return;
        case tile_kind::herk:
            if constexpr (t == dtype::c32) cblas_cherk(o, ul, tr, n, k, alpha_re, a, lda, beta_re, c, ldc);
            else if constexpr (t == dtype::c64) cblas_zherk(o, ul, tr, n, k, alpha_re, a, lda, beta_re, c, ldc);
            else break;
            return;
        case tile_kind::her2k:
            if constexpr (t == dtype::c32) cblas_cher2k(o, ul, tr, n, k, &alpha, a, lda, b, ldb, beta_re, c, ldc);
            else if constexpr (t == dtype::c64) cblas_zher2k(o, ul, tr, n, k, &alpha, a, lda, b, ldb, beta_re, c, ldc);
            else break;
            return;
        case tile_kind::gemm:
        case tile_kind::getrf:
        case tile_kind::laswp:
        case tile_kind::potrf: break;  // potrf: LAPACK's, potrf_vendor
    }
    throw invalid_argument(std::string("OpenBLAS tile kernel: no '") + std::string(to_string(r.kind)) + "' for " +
                           std::string(to_string(t)));
}

template <class T>
void gemm_typed(const gemm_call& call) {
    const column_major_gemm g = as_column_major(call);
    const auto flag = [](bool trans, bool conj) {
        return trans ? (conj ? CblasConjTrans : CblasTrans) : (conj ? CblasConjNoTrans : CblasNoTrans);
    };
    tilestream::detail::cblas_gemm<T>(CblasColMajor, flag(g.trans_x, g.conj_x), flag(g.trans_y, g.conj_y), g.rows, g.cols,
                                      g.k, scalar_as<T>(call.alpha), static_cast<const T*>(g.x), g.ldx,
                                      static_cast<const T*>(g.y), g.ldy, scalar_as<T>(call.beta), static_cast<T*>(g.z), g.ldz);
}

/// One part of a split tile operation, on the calling thread: gemm parts through cblas_?gemm,
/// the others through their routine, or the reference where no vendor call represents them.
void run_part(const tile_op& op) {
    if (op.kind == tile_kind::gemm) {
        const gemm_call call = tilestream::detail::engine::as_gemm_call(op);
        if (call.m == 0 || call.n == 0) return;
        if (call.alpha == scalar(0) || call.k == 0) {
            reference::execute(op);  // C <- beta C: the scaling loop, A and B never read
            return;
        }
        visit_dtype(op.type, [&]<class T>() { gemm_typed<T>(call); });
        return;
    }
    const column_major_tile r = tilestream::detail::engine::as_column_major(op);
    if (!r.representable || !fits_int(r)) {
        reference::execute(op);
        return;
    }
    visit_dtype(op.type, [&]<class T>() { call_typed<T>(r); });
}

/// Boundaries of `parts` row bands of a triangle of order n with equal areas (lower: the band
/// [r0, r1) covers r1^2 - r0^2; upper the mirror image).
std::vector<index_t> equal_area_bands(index_t n, int parts, uplo u) {
    std::vector<index_t> b(std::size_t(parts) + 1);
    for (int p = 0; p <= parts; ++p) {
        const double f = std::sqrt(double(p) / parts);
        b[std::size_t(p)] = u == uplo::lower ? index_t(std::llround(double(n) * f))
                                             : n - index_t(std::llround(double(n) * std::sqrt(double(parts - p) / parts)));
    }
    b.front() = 0;
    b.back() = n;
    return b;
}

/// The operations of one row band [r0, r1) of a syrk-family tile: its diagonal block and the
/// rectangle beside it (left of it for lower, right of it for upper) as GEMMs.
std::vector<tile_op> band_ops(const tile_op& op, index_t r0, index_t r1) {
    const std::size_t es = size_of(op.type);
    const bool lower = op.uplo == uplo::lower;
    const bool two = op.kind == tile_kind::syr2k || op.kind == tile_kind::her2k;
    // Rows [x0, x1) of op(X): X's rows (trans n) or columns (trans t).
    const auto rows_of = [&](const tile_matrix& x, index_t x0) {
        return op.trans_a == op::n ? shifted(x, x0, 0, es) : shifted(x, 0, x0, es);
    };
    std::vector<tile_op> ops;
    tile_op d = op;
    d.n = r1 - r0;
    d.a = rows_of(op.a, r0);
    if (two) d.b = rows_of(op.b, r0);
    d.c = shifted(op.c, r0, r0, es);
    ops.push_back(d);
    const index_t c0 = lower ? 0 : r1, c1 = lower ? r0 : op.n;
    if (c1 > c0) {
        // op(X)[c0:c1]^T (^H for the Hermitian kinds) as X's storage reads it.
        const bool herm = op.kind == tile_kind::herk || op.kind == tile_kind::her2k;
        const tilestream::op back = op.trans_a == tilestream::op::n ? (herm ? tilestream::op::c : tilestream::op::t)
                                                                    : tilestream::op::n;
        const auto gemm = [&](const tile_matrix& x, const tile_matrix& y, scalar alpha, scalar beta) {
            tile_op g = op;
            g.kind = tile_kind::gemm;
            g.m = r1 - r0;
            g.n = c1 - c0;
            g.trans_a = op.trans_a;
            g.trans_b = back;
            g.a = rows_of(x, r0);
            g.b = rows_of(y, c0);
            g.c = shifted(op.c, r0, c0, es);
            g.alpha = alpha;
            g.beta = beta;
            return g;
        };
        // herk and her2k take a real beta; her2k's second product has conj(alpha).
        const scalar beta = herm ? scalar(op.beta.real()) : op.beta;
        ops.push_back(gemm(op.a, two ? op.b : op.a, op.kind == tile_kind::herk ? scalar(op.alpha.real()) : op.alpha, beta));
        if (two) ops.push_back(gemm(op.b, op.a, herm ? std::conj(op.alpha) : op.alpha, 1.0));
    }
    return ops;
}

/// A diagonal tile of Cholesky through LAPACK ?potrf: one call, with OpenBLAS's threads when the
/// device is the process's only CPU device (a factorization does not split over workers).
void potrf_vendor_with(const tile_op& op, int threads) {
    if (op.n == 0) {
        if (op.info != nullptr) *op.info = 0;
        return;
    }
    const column_major_tile r = tilestream::detail::engine::as_column_major(op);
    if (!r.representable || !fits_int(r)) {
        reference::execute(op);
        return;
    }
    set_openblas_threads(threads);
    const openblas_call announced(threads);
    const char u = r.uplo_ == uplo::lower ? 'L' : 'U';
    const int n = int(r.n), ld = int(r.ldc);
    int info = 0;
    visit_dtype(op.type, [&]<class T>() { info = tilestream::detail::lapack_potrf<T>(u, n, static_cast<T*>(r.c), ld); });
    if (info < 0) throw device_error("LAPACK ?potrf refused argument " + std::to_string(-info) + " of a tile (n " +
                                     std::to_string(n) + ", ld " + std::to_string(ld) + ")");
    if (op.info != nullptr) *op.info = info;
}

}  // namespace

bool tile_vendor_supports(tile_kind kind, dtype type) { return tilestream::detail::engine::blas_has(kind, type); }

namespace {

bool is_rank_k(tile_kind kind) {
    return kind == tile_kind::syrk || kind == tile_kind::syr2k || kind == tile_kind::herk || kind == tile_kind::her2k;
}

/// Refuses a kind OpenBLAS lacks, and does BLAS's quick returns: true when nothing is left to run.
bool vendor_quick_return(const tile_op& op) {
    if (!tile_vendor_supports(op.kind, op.type))
        throw invalid_argument(std::string("OpenBLAS tile kernel: no '") + std::string(to_string(op.kind)) + "' for " +
                               std::string(to_string(op.type)));
    const bool rank_k = is_rank_k(op.kind);
    if (rank_k ? op.n == 0 : (op.m == 0 || op.n == 0)) return true;
    // The rank-k kinds' scaling-only case is done here: OpenBLAS would be asked for k = 0 with a
    // placeholder A.
    if (rank_k && !op.reads_ab()) {
        if (op.beta != scalar(1)) reference::execute(op);
        return true;
    }
    return false;
}

/// The whole tile in one OpenBLAS call with `threads` OpenBLAS threads.
void tile_vendor_whole(const tile_op& op, int threads) {
    if (vendor_quick_return(op)) return;
    set_openblas_threads(threads);
    run_part(op);
}

}  // namespace

bool tile_vendor_on_calling_thread(const tile_op& op) {
    // An accelerator's LAPACK step (its potrf or getrf panel) waits here on the host, on the
    // factorization's critical path: it takes OpenBLAS's own threads over every host core. With
    // one thread, the first H100 run (2026-11-26) spent 186 of potrf 8192's 236 ms in eight 1024
    // tiles at 15 GFLOP/s, and getrf 8192 took 12.9 s for two 8192x4096 panels.
    static const int host = int(std::max(1u, std::thread::hardware_concurrency()));
    if (op.kind == tile_kind::getrf || op.kind == tile_kind::laswp) {
        if (!lu_vendor_supports(op.kind)) return false;
        lu_vendor_with(op, host);
        return true;
    }
    if (op.kind == tile_kind::potrf) {
        potrf_vendor_with(op, host);
        return true;
    }
    if (!tile_vendor_supports(op.kind, op.type)) return false;
    tile_vendor_whole(op, host);
    return true;
}

void tile_vendor(const tile_op& op, thread_pool& pool, bool openblas_threads) {
    if (op.kind == tile_kind::potrf) return potrf_vendor_with(op, openblas_threads ? pool.size() : 1);
    if (openblas_threads || pool.size() == 1) return tile_vendor_whole(op, openblas_threads ? pool.size() : 1);
    if (vendor_quick_return(op)) return;
    const bool rank_k = is_rank_k(op.kind);
    set_openblas_threads(1);
    const std::size_t es = size_of(op.type);
    if (rank_k) {
        const int parts = int(std::min<index_t>(pool.size(), std::max<index_t>(1, op.n / 64)));
        const std::vector<index_t> bands = equal_area_bands(op.n, parts, op.uplo);
        pool.run(parts, [&](int p) {
            const index_t r0 = bands[std::size_t(p)], r1 = bands[std::size_t(p) + 1];
            if (r1 > r0)
                for (const tile_op& part : band_ops(op, r0, r1)) run_part(part);
        });
        return;
    }
    // trsm/trmm/symm: the columns of C (left side) or its rows (right side) are independent.
    const bool by_columns = op.side == side::left;
    const index_t extent = by_columns ? op.n : op.m;
    const int parts = int(std::min<index_t>(pool.size(), extent));
    pool.run(parts, [&](int p) {
        const index_t e0 = extent * p / parts, e1 = extent * (p + 1) / parts;
        if (e1 <= e0) return;
        tile_op part = op;
        if (by_columns) {
            part.n = e1 - e0;
            part.c = shifted(op.c, 0, e0, es);
            if (op.kind == tile_kind::symm || op.kind == tile_kind::hemm) part.b = shifted(op.b, 0, e0, es);
        } else {
            part.m = e1 - e0;
            part.c = shifted(op.c, e0, 0, es);
            if (op.kind == tile_kind::symm || op.kind == tile_kind::hemm) part.b = shifted(op.b, e0, 0, es);
        }
        run_part(part);
    });
}

}  // namespace tilestream::cpu
