// The naive CPU GEMM: one output element per work item, each a plain dot product in the value type.
#include "cpu_kernels.hpp"

namespace tilestream::cpu {

namespace {

template <class T>
void gemm_naive_typed(const gemm_call& call, thread_pool& pool) {
    const T* a = static_cast<const T*>(call.a);
    const T* b = static_cast<const T*>(call.b);
    T* c = static_cast<T*>(call.c);
    const index_t ars = call.a_row_stride(), acs = call.a_col_stride();
    const index_t brs = call.b_row_stride(), bcs = call.b_col_stride();
    const index_t crs = call.c_row_stride(), ccs = call.c_col_stride();
    const T alpha = static_cast<T>(call.alpha), beta = static_cast<T>(call.beta);
    const bool read_ab = call.alpha != 0.0;  // BLAS: alpha == 0 never reads A or B
    const bool read_c = call.beta != 0.0;    // BLAS: beta == 0 never reads C
    const index_t m = call.m, n = call.n, k = call.k;

    // Work items are numbered along C's contiguous direction so neighbouring items share a cache
    // line of C, as neighbouring threads of a GPU grid would.
    const bool row_major_c = call.layout_c == layout::row_major;
    pool.parallel_for(m * n, [&](index_t begin, index_t end) {
        const index_t inner = row_major_c ? n : m;
        index_t outer_idx = begin / inner, inner_idx = begin % inner;
        for (index_t e = begin; e < end; ++e) {
            const index_t i = row_major_c ? outer_idx : inner_idx;
            const index_t j = row_major_c ? inner_idx : outer_idx;
            T acc = 0;  // accumulating in T on purpose: this is the "first accelerator version"
            if (read_ab)
                for (index_t p = 0; p < k; ++p) acc += a[i * ars + p * acs] * b[p * brs + j * bcs];
            T& cij = c[i * crs + j * ccs];
            T r = read_ab ? alpha * acc : T(0);
            if (read_c) r += beta * cij;
            cij = r;
            if (++inner_idx == inner) {
                inner_idx = 0;
                ++outer_idx;
            }
        }
    });
}

}  // namespace

void gemm_naive(const gemm_call& call, thread_pool& pool) {
    if (call.m <= 0 || call.n <= 0) return;
    visit_dtype(call.type, [&]<class T>() { gemm_naive_typed<T>(call, pool); });
}

}  // namespace tilestream::cpu
