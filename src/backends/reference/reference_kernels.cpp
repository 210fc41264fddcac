// Sequential GEMM and Jacobi sweep on host memory: the oracle every other kernel is tested against.
#include "reference_kernels.hpp"

#include "core/complex_arith.hpp"

namespace tilestream::reference {

namespace {

template <class T>
void gemm_typed(const gemm_call& call) {
    using W = detail::wide_t<T>;  // double, or std::complex<double>
    const T* a = static_cast<const T*>(call.a);
    const T* b = static_cast<const T*>(call.b);
    T* c = static_cast<T*>(call.c);
    const operand_desc da = call.a_desc(), db = call.b_desc(), dc = call.c_desc();
    const bool conj_a = da.conjugated(), conj_b = db.conjugated();
    // BLAS semantics: alpha == 0 never reads A or B, beta == 0 never reads C, so NaN or
    // uninitialised memory in an operand that does not contribute cannot leak into C.
    const bool read_ab = call.alpha != 0.0;
    const bool read_c = call.beta != 0.0;
    const W alpha = scalar_as<W>(call.alpha), beta = scalar_as<W>(call.beta);
    for (index_t i = 0; i < call.m; ++i) {
        for (index_t j = 0; j < call.n; ++j) {
            W acc = 0.0;
            if (read_ab)
                for (index_t p = 0; p < call.k; ++p)
                    acc = detail::mul_add(detail::widen(detail::conj_if(a[da.offset(i, p)], conj_a)),
                                          detail::widen(detail::conj_if(b[db.offset(p, j)], conj_b)), acc);
            T& cij = c[dc.offset(i, j)];
            W r = read_ab ? detail::mul(alpha, acc) : W(0.0);
            if (read_c) r = detail::mul_add(beta, detail::widen(cij), r);
            cij = detail::narrow<T>(r);  // the only rounding to T
        }
    }
}

template <class T>
void jacobi_typed(const jacobi_call& call) {
    const T* in = static_cast<const T*>(call.in);
    T* out = static_cast<T*>(call.out);
    const index_t ld = call.ld;
    double sum = 0.0;
    for (index_t i = call.row_begin; i < call.row_end; ++i) {
        for (index_t j = call.col_begin; j < call.col_end; ++j) {
            const T n = in[(i - 1) * ld + j], s = in[(i + 1) * ld + j];
            const T w = in[i * ld + j - 1], e = in[i * ld + j + 1];
            // The order (N+S)+(W+E) is part of the contract: every backend must match it bitwise.
            const T v = T(0.25) * ((n + s) + (w + e));
            out[i * ld + j] = v;
            const double d = double(v) - double(in[i * ld + j]);
            sum += d * d;
        }
    }
    if (call.residual) *call.residual += sum;
}

}  // namespace

void gemm(const gemm_call& call) {
    if (call.m <= 0 || call.n <= 0) return;
    visit_dtype(call.type, [&]<class T>() { gemm_typed<T>(call); });
}

void jacobi_sweep(const jacobi_call& call) {
    visit_real_dtype(call.type, "jacobi", [&]<class T>() { jacobi_typed<T>(call); });
}

}  // namespace tilestream::reference
