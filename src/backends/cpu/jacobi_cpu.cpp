// CPU Jacobi sweep: rows split over the workers, a vectorised stencil, a deterministic residual.
#include "cpu_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace tilestream::cpu {

namespace {

// Eight double lanes: the residual of a row is accumulated lane-wise so the loop vectorises and
// the summation order depends only on the grid, not on the compiler's choices.
typedef double lanes_f64 __attribute__((vector_size(64)));
constexpr index_t lanes = 8;

template <class T>
void stencil_row(const T* __restrict north, const T* __restrict centre, const T* __restrict south,
                 T* __restrict out, index_t count) {
    // Same expression and order as the reference, so results agree bitwise; no a*b+c pattern
    // exists that the compiler could contract into an FMA.
    for (index_t j = 0; j < count; ++j)
        out[j] = T(0.25) * ((north[j] + south[j]) + (centre[j - 1] + centre[j + 1]));
}

template <class T>
double row_residual(const T* __restrict out, const T* __restrict in, index_t count) {
    typedef T lanes_t __attribute__((vector_size(lanes * sizeof(T))));
    lanes_f64 acc = {};
    index_t j = 0;
    for (; j + lanes <= count; j += lanes) {
        lanes_t o, c;
        std::memcpy(&o, out + j, sizeof o);
        std::memcpy(&c, in + j, sizeof c);
        const lanes_f64 d = __builtin_convertvector(o, lanes_f64) - __builtin_convertvector(c, lanes_f64);
        acc += d * d;
    }
    double sum = 0.0;
    for (int l = 0; l < lanes; ++l) sum += acc[l];
    for (; j < count; ++j) {
        const double d = double(out[j]) - double(in[j]);
        sum += d * d;
    }
    return sum;
}

template <class T>
void jacobi_typed(const jacobi_call& call, thread_pool& pool) {
    const T* in = static_cast<const T*>(call.in);
    T* out = static_cast<T*>(call.out);
    const index_t ld = call.ld, rows = call.row_end - call.row_begin;
    const index_t cols = call.col_end - call.col_begin;
    if (rows <= 0 || cols <= 0) return;  // an empty sweep adds nothing to the residual

    // Parts are formed here rather than by parallel_for so each knows its index: the partial
    // residuals are then added in part order and the result does not depend on thread timing.
    const int parts = static_cast<int>(std::min<index_t>(rows, pool.size()));
    std::vector<double> partial(parts, 0.0);
    pool.run(parts, [&](int part) {
        const index_t begin = call.row_begin + rows * part / parts;
        const index_t end = call.row_begin + rows * (part + 1) / parts;
        double sum = 0.0;
        for (index_t i = begin; i < end; ++i) {
            const T* centre = in + i * ld + call.col_begin;
            T* dst = out + i * ld + call.col_begin;
            stencil_row<T>(centre - ld, centre, centre + ld, dst, cols);
            if (call.residual) sum += row_residual<T>(dst, centre, cols);
        }
        partial[part] = sum;
    });
    if (call.residual) {
        double total = 0.0;
        for (double s : partial) total += s;
        *call.residual += total;
    }
}

}  // namespace

void jacobi_sweep(const jacobi_call& call, thread_pool& pool) {
    visit_real_dtype(call.type, "jacobi", [&]<class T>() { jacobi_typed<T>(call, pool); });
}

}  // namespace tilestream::cpu
