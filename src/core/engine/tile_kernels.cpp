// Routing of tile operations to a device's kernels, its vendor routine or the host reference.
#include "core/engine/tile_kernels.hpp"
#include "core/engine/tile_mapping.hpp"

#include <tilestream/error.hpp>

namespace tilestream::detail::engine {

gemm_call as_gemm_call(const tile_op& op) {
    gemm_call c;
    c.type = op.type;
    c.op_a = op.trans_a;
    c.op_b = op.trans_b;
    c.m = op.m;
    c.n = op.n;
    c.k = op.k;
    c.alpha = op.alpha;
    c.beta = op.beta;
    c.a = op.a.data;
    c.lda = op.a.ld;
    c.layout_a = op.a.lay;
    c.b = op.b.data;
    c.ldb = op.b.ld;
    c.layout_b = op.b.lay;
    c.c = const_cast<void*>(op.c.data);
    c.ldc = op.c.ld;
    c.layout_c = op.c.lay;
    c.kernel = op.kernel;
    c.math = op.math;
    return c;
}

tile_matrix shifted(const tile_matrix& m, index_t i, index_t j, std::size_t element_bytes) {
    tile_matrix r = m;
    if (m.data == nullptr) return r;
    const operand_desc d{op::n, m.lay, m.ld, 0, 0};
    r.data = static_cast<const char*>(m.data) + std::size_t(d.offset(i, j)) * element_bytes;
    return r;
}

bool blas_has(tile_kind kind, dtype type) noexcept {
    switch (kind) {
        case tile_kind::gemm:
        case tile_kind::syrk:
        case tile_kind::syr2k:
        case tile_kind::symm:
        case tile_kind::trmm:
        case tile_kind::trsm: return true;
        case tile_kind::hemm:
        case tile_kind::herk:
        case tile_kind::her2k: return is_complex(type);
        case tile_kind::getrf:
        case tile_kind::laswp: return false;  // LAPACK, not BLAS: each backend says (supports)
        case tile_kind::potrf: return false;  // LAPACK, not BLAS: only devices that name it (CPU)
    }
    return false;
}

std::string_view to_string(tile_route r) noexcept {
    switch (r) {
        case tile_route::device_kernel: return "device kernel";
        case tile_route::device_vendor: return "vendor";
        case tile_route::host_reference: return "reference (host)";
    }
    return "?";
}

tile_route route_of(const device& dev, const tile_op& op, bool deterministic) {
    if (op.kind == tile_kind::gemm) {
        if (!dev.supports(op.kernel))
            throw invalid_argument("tile gemm: device " + dev.id() + " has no '" + std::string(to_string(op.kernel)) +
                                   "' kernel");
        return tile_route::device_kernel;
    }
    if (deterministic) return tile_route::host_reference;
    // A Hermitian diagonal tile only scaled (alpha = 0 or k = 0) has its diagonal's imaginary parts
    // zeroed: the CPU's vendor path and the reference do that; GPUs' scaling kernels would not.
    const bool herm = op.kind == tile_kind::herk || op.kind == tile_kind::her2k;
    if (herm && !op.reads_ab() && !dev.host_addressable()) return tile_route::host_reference;
    if (dev.supports(op.kind, op.type, op.kernel)) {
        // A vendor routine takes one layout; mixed layouts that would need a conjugate without a
        // transpose go to the reference (the CPU's own vendor path does that itself).
        if (op.kernel == gemm_kernel::vendor && !dev.host_addressable() && !as_column_major(op).representable)
            return tile_route::host_reference;
        return tile_route::device_kernel;
    }
    if (op.kernel != gemm_kernel::vendor && dev.supports(op.kind, op.type, gemm_kernel::vendor)) {
        tile_op v = op;
        v.kernel = gemm_kernel::vendor;
        if (!dev.host_addressable() && !as_column_major(v).representable) return tile_route::host_reference;
        return tile_route::device_vendor;
    }
    return tile_route::host_reference;
}

namespace {

/// The step of a blocked operation on its diagonal block [lo, lo + w): op on the block of A and
/// the matching rows (left) or columns (right) of C (and of B, where op reads one).
tile_op diagonal_piece(const tile_op& op, index_t lo, index_t w) {
    const std::size_t bytes = size_of(op.type);
    const bool left = op.side == side::left;
    tile_op d = op;
    d.a = shifted(op.a, lo, lo, bytes);
    (left ? d.m : d.n) = w;
    d.b = left ? shifted(op.b, lo, 0, bytes) : shifted(op.b, 0, lo, bytes);
    d.c = left ? shifted(op.c, lo, 0, bytes) : shifted(op.c, 0, lo, bytes);
    return d;
}

/// A gemm step of a blocked operation: C(m x n) = alpha op(A) op(B) + beta C, on op's type,
/// kernel and math.
tile_op gemm_piece(const tile_op& op, index_t m, index_t n, index_t k, const tile_matrix& a, tilestream::op trans_a,
                   const tile_matrix& b, tilestream::op trans_b, const tile_matrix& c, std::complex<double> alpha,
                   std::complex<double> beta) {
    tile_op g;
    g.kind = tile_kind::gemm;
    g.type = op.type;
    g.kernel = op.kernel;
    g.math = op.math;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = alpha;
    g.beta = beta;
    g.a = a;
    g.trans_a = trans_a;
    g.b = b;
    g.trans_b = trans_b;
    g.c = c;
    return g;
}

}  // namespace

std::vector<tile_op> blocked_trsm(const tile_op& op, index_t block) {
    const index_t order = op.side == side::left ? op.m : op.n;  // A is order x order
    if (op.kind != tile_kind::trsm || block <= 0 || order <= block || op.m == 0 || op.n == 0 || !op.reads_ab())
        return {op};
    const std::size_t bytes = size_of(op.type);
    // op(A) lower: its block (i, j), i > j, is A(i, j) (trans n) or A(j, i) transposed.
    const bool lower = (op.uplo == uplo::lower) == (op.trans_a == op::n);
    const auto a_block = [&](index_t r0, index_t c0) {  // op(A)'s element (r0, c0) in A
        return op.trans_a == op::n ? shifted(op.a, r0, c0, bytes) : shifted(op.a, c0, r0, bytes);
    };
    const auto c_at = [&](index_t i, index_t j) { return shifted(op.c, i, j, bytes); };
    // Left:  op(A) X = alpha C; lower solves top-down, upper bottom-up (rows of C).
    // Right: X op(A) = alpha C; upper solves left to right, lower right to left (columns of C).
    const bool forward = op.side == side::left ? lower : !lower;
    const index_t blocks = (order + block - 1) / block;
    std::vector<tile_op> steps;
    steps.reserve(std::size_t(2 * blocks));
    for (index_t s = 0; s < blocks; ++s) {
        const index_t b = forward ? s : blocks - 1 - s;
        const index_t lo = b * block, w = std::min(block, order - lo);
        const std::complex<double> scale = s == 0 ? op.alpha : std::complex<double>(1.0);
        tile_op solve = diagonal_piece(op, lo, w);
        solve.alpha = scale;
        steps.push_back(solve);
        // The rest still to solve: after the block (forward) or before it.
        const index_t rest_lo = forward ? lo + w : 0, rest = forward ? order - lo - w : lo;
        if (rest == 0) continue;
        // The first step also applies alpha to the rest (beta = scale).
        if (op.side == side::left)  // C(rest, :) = scale C(rest, :) - op(A)(rest, block) X(block, :)
            steps.push_back(gemm_piece(op, rest, op.n, w, a_block(rest_lo, lo), op.trans_a, c_at(lo, 0), op::n, c_at(rest_lo, 0),
                                       -1.0, scale));
        else  // C(:, rest) = scale C(:, rest) - X(:, block) op(A)(block, rest)
            steps.push_back(gemm_piece(op, op.m, rest, w, c_at(0, lo), op::n, a_block(lo, rest_lo), op.trans_a, c_at(0, rest_lo),
                                       -1.0, scale));
    }
    return steps;
}

std::vector<tile_op> blocked_trmm(const tile_op& op, index_t block) {
    const bool left = op.side == side::left;
    const index_t order = left ? op.m : op.n;
    if (op.kind != tile_kind::trmm || block <= 0 || order <= block || op.m == 0 || op.n == 0 || !op.reads_ab()) return {op};
    const std::size_t bytes = size_of(op.type);
    const bool lower = (op.uplo == uplo::lower) == (op.trans_a == op::n);  // op(A)'s triangle
    const auto op_a = [&](index_t r0, index_t c0) {  // op(A)'s element (r0, c0) in A
        return op.trans_a == op::n ? shifted(op.a, r0, c0, bytes) : shifted(op.a, c0, r0, bytes);
    };
    const auto c_at = [&](index_t i, index_t j) { return shifted(op.c, i, j, bytes); };
    // Left, C <- alpha op(A) C: block column j of op(A) times C's block j adds to the rows below it
    // (lower) or above it (upper); those rows must already hold their own block's product, and C's
    // block j must still be old: lower goes bottom-up, upper top-down. Right, C <- alpha C op(A):
    // block row j of op(A) adds to the columns left of it (lower: left to right) or right of it
    // (upper: right to left).
    const bool forward = left ? !lower : lower;
    const index_t blocks = (order + block - 1) / block;
    std::vector<tile_op> steps;
    steps.reserve(std::size_t(2 * blocks));
    for (index_t s = 0; s < blocks; ++s) {
        const index_t j = forward ? s : blocks - 1 - s;
        const index_t lo = j * block, w = std::min(block, order - lo), hi = lo + w;
        // The off-diagonal part: after the block (lower left, upper right) or before it.
        const bool after = left ? lower : !lower;
        const index_t r0 = after ? hi : 0, count = after ? order - hi : lo;
        if (count > 0) {
            if (left)  // C(r0.., :) += alpha op(A)(r0.., block) C(block, :)
                steps.push_back(
                    gemm_piece(op, count, op.n, w, op_a(r0, lo), op.trans_a, c_at(lo, 0), op::n, c_at(r0, 0), op.alpha, 1.0));
            else  // C(:, r0..) += alpha C(:, block) op(A)(block, r0..)
                steps.push_back(
                    gemm_piece(op, op.m, count, w, c_at(0, lo), op::n, op_a(lo, r0), op.trans_a, c_at(0, r0), op.alpha, 1.0));
        }
        steps.push_back(diagonal_piece(op, lo, w));
    }
    return steps;
}

std::vector<tile_op> blocked_symm(const tile_op& op, index_t block) {
    const bool left = op.side == side::left;
    const index_t order = left ? op.m : op.n;
    if ((op.kind != tile_kind::symm && op.kind != tile_kind::hemm) || block <= 0 || order <= block || op.m == 0 ||
        op.n == 0 || !op.reads_ab())
        return {op};
    const std::size_t bytes = size_of(op.type);
    const tilestream::op mirrored = op.kind == tile_kind::hemm ? op::c : op::t;
    // The block of the full A at (r0, c0), wholly below (or above) the diagonal: stored there, or
    // the mirror of the stored triangle's block.
    const auto full = [&](index_t r0, index_t c0, bool below) -> std::pair<tile_matrix, tilestream::op> {
        if (below == (op.uplo == uplo::lower)) return {shifted(op.a, r0, c0, bytes), op::n};
        return {shifted(op.a, c0, r0, bytes), mirrored};
    };
    const auto b_at = [&](index_t i, index_t j) { return shifted(op.b, i, j, bytes); };
    const auto c_at = [&](index_t i, index_t j) { return shifted(op.c, i, j, bytes); };
    const index_t blocks = (order + block - 1) / block;
    std::vector<tile_op> steps;
    steps.reserve(std::size_t(3 * blocks));
    for (index_t j = 0; j < blocks; ++j) {
        const index_t lo = j * block, w = std::min(block, order - lo), hi = lo + w;
        // The first block's steps write every row (column) of C once: they apply beta.
        const std::complex<double> beta = j == 0 ? op.beta : std::complex<double>(1.0);
        tile_op diagonal = diagonal_piece(op, lo, w);
        diagonal.beta = beta;
        steps.push_back(diagonal);
        if (left) {
            // C(rows, :) += alpha A(rows, block) B(block, :), for the rows above and below the block.
            if (lo > 0) {
                const auto [a, t] = full(0, lo, false);
                steps.push_back(gemm_piece(op, lo, op.n, w, a, t, b_at(lo, 0), op::n, c_at(0, 0), op.alpha, 1.0));
            }
            if (hi < order) {
                const auto [a, t] = full(hi, lo, true);
                steps.push_back(gemm_piece(op, order - hi, op.n, w, a, t, b_at(lo, 0), op::n, c_at(hi, 0), op.alpha, beta));
            }
        } else {
            // C(:, cols) += alpha B(:, block) A(block, cols), for the columns left and right of it.
            if (lo > 0) {
                const auto [a, t] = full(lo, 0, true);
                steps.push_back(gemm_piece(op, op.m, lo, w, b_at(0, lo), op::n, a, t, c_at(0, 0), op.alpha, 1.0));
            }
            if (hi < order) {
                const auto [a, t] = full(lo, hi, false);
                steps.push_back(gemm_piece(op, op.m, order - hi, w, b_at(0, lo), op::n, a, t, c_at(0, hi), op.alpha, beta));
            }
        }
    }
    return steps;
}

bool blockable(tile_kind kind) noexcept {
    return kind == tile_kind::trsm || kind == tile_kind::trmm || kind == tile_kind::symm || kind == tile_kind::hemm;
}

std::vector<tile_op> blocked_diagonal(const tile_op& op, index_t block) {
    switch (op.kind) {
        case tile_kind::trsm: return blocked_trsm(op, block);
        case tile_kind::trmm: return blocked_trmm(op, block);
        case tile_kind::symm:
        case tile_kind::hemm: return blocked_symm(op, block);
        default: return {op};
    }
}

double blocked_diagonal_share(index_t order, index_t block) noexcept {
    if (block <= 0 || order <= block) return 1.0;
    const double q = double(order / block), r = double(order % block), b = double(block), t = double(order);
    return (q * b * b + r * r) / (t * t);
}

}  // namespace tilestream::detail::engine
