// The naive CPU GEMM: one output element per work item, each a plain dot product in the value type
// (complex: four real products per term, conjugated operands read with the imaginary part negated).
#include "cpu_kernels.hpp"

#include "core/complex_arith.hpp"

namespace tilestream::cpu {

namespace {

template <class T>
void gemm_naive_typed(const gemm_call& call, thread_pool& pool) {
    const T* a = static_cast<const T*>(call.a);
    const T* b = static_cast<const T*>(call.b);
    T* c = static_cast<T*>(call.c);
    const operand_desc da = call.a_desc(), db = call.b_desc();
    const index_t ars = da.row_stride(), acs = da.col_stride();
    const index_t brs = db.row_stride(), bcs = db.col_stride();
    const index_t crs = call.c_row_stride(), ccs = call.c_col_stride();
    const bool conj_a = da.conjugated(), conj_b = db.conjugated();
    const T alpha = scalar_as<T>(call.alpha), beta = scalar_as<T>(call.beta);
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
                for (index_t p = 0; p < k; ++p)
                    acc = tilestream::detail::mul_add(tilestream::detail::conj_if(a[i * ars + p * acs], conj_a),
                                          tilestream::detail::conj_if(b[p * brs + j * bcs], conj_b), acc);
            T& cij = c[i * crs + j * ccs];
            T r = read_ab ? tilestream::detail::mul(alpha, acc) : T(0);
            if (read_c) r = tilestream::detail::mul_add(beta, cij, r);
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
