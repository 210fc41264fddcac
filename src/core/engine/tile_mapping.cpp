// Tile operations as column-major vendor BLAS calls (see tile_mapping.hpp).
#include "core/engine/tile_mapping.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <utility>

namespace tilestream::detail::engine {

namespace {

blas_trans from_op(dtype t, op o) {
    switch (operand_op(t, o)) {
        case op::n: return blas_trans::none;
        case op::t: return blas_trans::trans;
        case op::c: return blas_trans::conj_trans;
    }
    return blas_trans::none;
}

uplo flip(uplo u) { return u == uplo::lower ? uplo::upper : uplo::lower; }
side flip(side s) { return s == side::left ? side::right : side::left; }

/// op(X) read through the column-major view of X's storage: X itself when X is column-major,
/// X^T when it is row-major. False when that needs a conjugate without a transpose.
bool through_storage(layout stored, blas_trans& t) {
    if (stored == layout::col_major) return true;
    switch (t) {
        case blas_trans::none: t = blas_trans::trans; return true;
        case blas_trans::trans: t = blas_trans::none; return true;
        case blas_trans::conj_trans:
        case blas_trans::conj_none: return false;  // conj(X_cm)
    }
    return false;
}

/// op(X)^T through X's column-major storage (the transposed problem of a row-major C).
bool transposed_through_storage(layout stored, blas_trans& t) {
    if (stored == layout::row_major) return true;  // op(X)^T = op(X^T) = op(X_cm)
    switch (t) {
        case blas_trans::none: t = blas_trans::trans; return true;
        case blas_trans::trans: t = blas_trans::none; return true;
        case blas_trans::conj_trans:
        case blas_trans::conj_none: return false;  // conj(X)
    }
    return false;
}

/// The leading dimension a column-major routine accepts for a rows x cols stored matrix: ld is
/// never used with one column, but the routines still check it.
index_t ld_for(index_t ld, index_t rows, index_t cols) {
    return cols <= 1 ? std::max<index_t>({ld, rows, 1}) : std::max<index_t>(ld, 1);
}

column_major_tile refuse(column_major_tile r, const std::string& why) {
    r.representable = false;
    r.why = why;
    return r;
}

}  // namespace

column_major_tile as_column_major(const tile_op& o) {
    column_major_tile r;
    r.kind = o.kind;
    r.side_ = o.side;
    r.uplo_ = o.uplo;
    r.trans = from_op(o.type, o.trans_a);
    r.diag_ = o.diag;
    r.m = o.m;
    r.n = o.n;
    r.k = o.k;
    r.alpha = o.alpha;
    r.beta = o.beta;
    r.a = o.a.data;
    r.b = o.b.data;
    r.c = const_cast<void*>(o.c.data);
    const bool c_row = o.c.lay == layout::row_major;
    const char* mixed = "layouts that would need a conjugate without a transpose";
    switch (o.kind) {
        case tile_kind::gemm:
            throw invalid_argument("as_column_major: gemm tiles go through device::gemm");
        case tile_kind::getrf:
        case tile_kind::laswp: return refuse(r, "LU's panel and row swaps are no BLAS call");
        case tile_kind::syrk:
        case tile_kind::syr2k:
        case tile_kind::herk:
        case tile_kind::her2k: {
            const bool herm = o.kind == tile_kind::herk || o.kind == tile_kind::her2k;
            const bool two = o.kind == tile_kind::syr2k || o.kind == tile_kind::her2k;
            if (two && o.a.lay != o.b.lay) return refuse(r, "syr2k/her2k with A and B in different layouts");
            // C symmetric: C^T = C, so a row-major C is its own transpose with the other triangle.
            // Hermitian: C^T = conj(C), the problem on conj(C) with op(A) -> conj(op(A)).
            if (c_row) r.uplo_ = flip(o.uplo);
            if (!herm) {
                if (o.a.lay == layout::row_major) r.trans = r.trans == blas_trans::none ? blas_trans::trans : blas_trans::none;
            } else {
                // conj(op(A)) through A's storage: N <-> C when both are row-major.
                if ((o.a.lay == layout::row_major) != c_row) return refuse(r, mixed);
                if (c_row) {
                    r.trans = r.trans == blas_trans::none ? blas_trans::conj_trans : blas_trans::none;
                    if (o.kind == tile_kind::her2k) r.alpha = std::conj(o.alpha);
                }
            }
            const index_t rows = r.trans == blas_trans::none ? o.n : o.k, cols = r.trans == blas_trans::none ? o.k : o.n;
            r.lda = ld_for(o.a.ld, rows, cols);
            r.ldb = two ? ld_for(o.b.ld, rows, cols) : 1;
            r.ldc = ld_for(o.c.ld, o.n, o.n);
            r.representable = true;
            return r;
        }
        case tile_kind::symm:
        case tile_kind::hemm: {
            // Left: C = alpha A B + beta C. C^T = alpha B^T A^T + beta C^T: the other side, with
            // A^T = A (symmetric; Hermitian: conj(A), whose row-major storage is a Hermitian matrix
            // with the other triangle). B has no transpose argument: its layout must be C's.
            const bool herm = o.kind == tile_kind::hemm;
            if (o.b.lay != o.c.lay) return refuse(r, "symm/hemm with B and C in different layouts");
            if (herm && o.a.lay != o.c.lay) return refuse(r, mixed);
            if (o.a.lay == layout::row_major) r.uplo_ = flip(o.uplo);
            if (c_row) {
                r.side_ = flip(o.side);
                std::swap(r.m, r.n);
            }
            const index_t na = r.side_ == side::left ? r.m : r.n;
            r.lda = ld_for(o.a.ld, na, na);
            r.ldb = ld_for(o.b.ld, r.m, r.n);
            r.ldc = ld_for(o.c.ld, r.m, r.n);
            r.representable = true;
            return r;
        }
        case tile_kind::trmm:
        case tile_kind::trsm: {
            // Left: op(A) X = alpha C. Row-major C: X^T op(A)^T = alpha C^T, the other side.
            if (c_row) {
                r.side_ = flip(o.side);
                std::swap(r.m, r.n);
                if (!transposed_through_storage(o.a.lay, r.trans)) return refuse(r, mixed);
            } else if (!through_storage(o.a.lay, r.trans)) {
                return refuse(r, mixed);
            }
            if (o.a.lay == layout::row_major) r.uplo_ = flip(o.uplo);
            const index_t na = r.side_ == side::left ? r.m : r.n;
            r.lda = ld_for(o.a.ld, na, na);
            r.ldc = ld_for(o.c.ld, r.m, r.n);
            r.representable = true;
            return r;
        }
        case tile_kind::potrf: {
            // A row-major C is the column-major A^T = conj(A): its factor's other triangle is the
            // same storage (lower L of A is upper U = L^T of A^T), so only the triangle flips.
            if (c_row) r.uplo_ = flip(o.uplo);
            r.ldc = ld_for(o.c.ld, o.n, o.n);
            r.representable = true;
            return r;
        }
    }
    return r;
}

}  // namespace tilestream::detail::engine
