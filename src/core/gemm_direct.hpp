// The direct path: a GEMM on host memory run by the host's kernel on the calling thread, with no
// plan search, device, queue, thread hand-off or allocation. A context sends small calls here
// (gemm_strategy::direct), and the tile tasks of other routines may call host_gemm themselves.
#pragma once

#include <tilestream/gemm.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/plan.hpp>

#include <algorithm>

namespace tilestream::detail {

/// The problem of C <- alpha op(A) op(B) + beta C on host views whose shapes validate_gemm has
/// accepted (describe_gemm is this after validate_gemm; the direct path validates once).
template <class T>
gemm_problem describe_validated_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                                     T beta, host_matrix_view<T> c) noexcept {
    gemm_problem p;
    p.type = dtype_of<T>();
    p.op_a = op_a;
    p.op_b = op_b;
    p.m = c.rows();
    p.n = c.cols();
    p.k = is_transposed(op_a) ? a.rows() : a.cols();
    p.layout_a = a.layout();
    p.layout_b = b.layout();
    p.layout_c = c.layout();
    p.lda = a.ld();
    p.ldb = b.ld();
    p.ldc = c.ld();
    p.reads_ab = alpha != T(0) && p.k > 0;
    p.reads_c = beta != T(0);
    return p;
}

/// The kernel call of C <- alpha op(A) op(B) + beta C on host views (shapes already validated).
template <class T>
gemm_call host_gemm_call(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                         host_matrix_view<T> c, gemm_kernel kernel = gemm_kernel::vendor) {
    gemm_call call;
    call.type = dtype_of<T>();
    call.op_a = op_a;
    call.op_b = op_b;
    call.m = c.rows();
    call.n = c.cols();
    call.k = is_transposed(op_a) ? a.rows() : a.cols();
    call.alpha = as_scalar(alpha);
    call.beta = as_scalar(beta);
    call.a = a.data();
    call.lda = a.ld();
    call.layout_a = a.layout();
    call.b = b.data();
    call.ldb = b.ld();
    call.layout_b = b.layout();
    call.c = c.data();
    call.ldc = c.ld();
    call.layout_c = c.layout();
    call.kernel = kernel;
    return call;
}

/// Calls f(part) for each k-block of `call` in order when kb > 0 and k is longer (the first part
/// applies beta, the others add), else f(call): the fixed k-order of reproducible plans.
template <class F>
void for_each_k_block(const gemm_call& call, index_t kb, F&& f) {
    if (kb <= 0 || call.k <= kb) {
        f(call);
        return;
    }
    const std::size_t es = size_of(call.type);
    for (index_t p0 = 0; p0 < call.k; p0 += kb) {
        gemm_call part = call;
        part.k = std::min(kb, call.k - p0);
        part.beta = p0 == 0 ? call.beta : scalar(1.0);
        part.a = static_cast<const char*>(call.a) + std::size_t(p0 * call.a_col_stride()) * es;
        part.b = static_cast<const char*>(call.b) + std::size_t(p0 * call.b_row_stride()) * es;
        f(part);
    }
}

/// Runs `call` (host pointers) on the calling thread with call.kernel: vendor is OpenBLAS with
/// `openblas_threads` of its own threads, tiled, naive and reference run on this thread alone.
/// k_block > 0: k in blocks of that many, in order (for_each_k_block). Every kernel gives the
/// bits it gives on a CPU device for the same call (the tiled kernel's do not depend on threads).
void host_gemm(const gemm_call& call, int openblas_threads, index_t k_block = 0);

/// The products of `batch` (host pointers) on the calling thread, one after the other, each with
/// one thread (vendor: OpenBLAS single-threaded), the kernel's settings made once for the stack;
/// k_block > 0 as host_gemm. Each product's bits are those host_gemm gives it.
void host_gemm_batched(const gemm_batched_call& batch, index_t k_block = 0);

/// The threads a host call may use: the context's CPU devices' threads, else the host's cores.
int host_threads(std::span<device* const> devices);

}  // namespace tilestream::detail
