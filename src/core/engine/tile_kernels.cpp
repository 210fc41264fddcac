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
