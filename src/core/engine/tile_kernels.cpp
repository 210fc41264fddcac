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

}  // namespace tilestream::detail::engine

namespace tilestream::detail::engine {

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
        tile_op solve = op;
        solve.alpha = scale;
        solve.a = shifted(op.a, lo, lo, bytes);
        if (op.side == side::left) {
            solve.m = w;
            solve.c = c_at(lo, 0);
        } else {
            solve.n = w;
            solve.c = c_at(0, lo);
        }
        steps.push_back(solve);
        // The rest still to solve: after the block (forward) or before it.
        const index_t rest_lo = forward ? lo + w : 0, rest = forward ? order - lo - w : lo;
        if (rest == 0) continue;
        tile_op update;
        update.kind = tile_kind::gemm;
        update.type = op.type;
        update.kernel = op.kernel;
        update.math = op.math;
        update.alpha = -1.0;
        update.beta = scale;  // the first step also applies alpha to the rest
        if (op.side == side::left) {
            // C(rest, :) = scale C(rest, :) - op(A)(rest, block) X(block, :)
            update.m = rest;
            update.n = op.n;
            update.k = w;
            update.a = a_block(rest_lo, lo);
            update.trans_a = op.trans_a;
            update.b = c_at(lo, 0);
            update.trans_b = op::n;
            update.c = c_at(rest_lo, 0);
        } else {
            // C(:, rest) = scale C(:, rest) - X(:, block) op(A)(block, rest)
            update.m = op.m;
            update.n = rest;
            update.k = w;
            update.a = c_at(0, lo);
            update.trans_a = op::n;
            update.b = a_block(lo, rest_lo);
            update.trans_b = op.trans_a;
            update.c = c_at(0, rest_lo);
        }
        steps.push_back(update);
    }
    return steps;
}

}  // namespace tilestream::detail::engine
