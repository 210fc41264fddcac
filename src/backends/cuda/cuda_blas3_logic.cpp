// Host-side decisions for cuBLAS tile operations (see cuda_blas3_logic.hpp).
#include "backends/cuda/cuda_blas3_logic.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <charconv>
#include <climits>

namespace tilestream::cuda {

cublas_tile_work plan_cublas_tile(const tile_op& op, const std::string& device_id) {
    cublas_tile_work w;
    const bool rank_k = op.kind == tile_kind::syrk || op.kind == tile_kind::syr2k || op.kind == tile_kind::herk ||
                        op.kind == tile_kind::her2k;
    const bool solves = op.kind == tile_kind::trmm || op.kind == tile_kind::trsm;
    const index_t rows = rank_k ? op.n : op.m, cols = op.n;
    if (rows == 0 || cols == 0) {
        w.nothing = true;
        return w;
    }
    const bool herm = op.kind == tile_kind::herk || op.kind == tile_kind::her2k;
    if (!op.reads_ab()) {
        if (!solves && op.beta == scalar(1)) {
            w.nothing = true;
            return w;
        }
        if (herm) {
            // C <- beta C with the diagonal's imaginary parts zeroed: herk with k = 0 (A, given
            // as C, is not read).
            tile_op h = op;
            h.kind = tile_kind::herk;
            h.k = 0;
            h.alpha = 0.0;
            h.a = op.c;
            h.trans_a = op::n;
            w.call = ::tilestream::detail::engine::as_column_major(h);
            w.call.lda = std::max<index_t>(w.call.ldc, 1);
            if (!w.call.representable)
                throw invalid_argument(std::string(to_string(op.kind)) + " on " + device_id + ": " + w.call.why);
            return w;
        }
        w.scale_only = true;
        w.scale.type = op.type;
        w.scale.m = rows;
        w.scale.n = cols;
        w.scale.k = 0;
        w.scale.alpha = 0;
        w.scale.beta = solves ? 0.0 : op.beta.real();
        w.scale.c = const_cast<void*>(op.c.data);
        w.scale.ldc = op.c.ld;
        w.scale.layout_c = op.c.lay;
        w.scale.kernel = gemm_kernel::naive;
        return w;
    }
    w.call = ::tilestream::detail::engine::as_column_major(op);
    if (!w.call.representable)
        throw invalid_argument(std::string(to_string(op.kind)) + " on " + device_id + ": " + w.call.why);
    if (std::max({w.call.m, w.call.n, w.call.k, w.call.lda, w.call.ldb, w.call.ldc}) > INT_MAX)
        throw invalid_argument(std::string(to_string(op.kind)) + " on " + device_id + ": a tile beyond 32-bit sizes");
    return w;
}

index_t trsm_block_from(const char* value) {
    if (value == nullptr || *value == '\0') return default_trsm_block;
    const std::string text(value);
    index_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > 65536)
        throw invalid_argument("TILESTREAM_CUDA_TRSM_BLOCK='" + text +
                               "': expected a whole number of rows in [0, 65536] (0: one cuBLAS solve per tile)");
    return v;
}

}  // namespace tilestream::cuda
