// OpenBLAS timed directly on the host: the anchor `gemm --anchor` prints beside a run.
#include "backends/cpu/openblas_memory.hpp"

#include <tilestream/anchor.hpp>
#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>

#include "core/cblas_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

namespace tilestream {

template <class T>
blas_anchor time_host_blas_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                                T beta, host_matrix_view<const T> c0, int repeat) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c0.rows(), c0.cols());
    const index_t m = c0.rows(), n = c0.cols(), k = is_transposed(op_a) ? a.rows() : a.cols();
    for (index_t v : {m, n, k, a.ld(), b.ld()})
        if (v > INT_MAX)
            throw invalid_argument("anchor: " + std::to_string(v) + " exceeds CBLAS's 32-bit sizes");
    host_matrix<T> c(m, n, c0.layout());
    const layout order = c0.layout();
    const CBLAS_ORDER cblas_order = order == layout::row_major ? CblasRowMajor : CblasColMajor;
    const dtype type = dtype_of<T>();
    const detail::cblas_operand oa = detail::cblas_operand_of({operand_op(type, op_a), a.layout(), a.ld(), m, k}, order, "A");
    const detail::cblas_operand ob = detail::cblas_operand_of({operand_op(type, op_b), b.layout(), b.ld(), k, n}, order, "B");
    const int ldc = int(std::max<index_t>(1, order == layout::row_major ? n : m));
    auto run_once = [&] {
        if (beta != T(0))
            for (index_t i = 0; i < m; ++i)
                for (index_t j = 0; j < n; ++j) c(i, j) = c0(i, j);
        const auto t0 = std::chrono::steady_clock::now();
        detail::cblas_xgemm<T>(cblas_order, oa.trans, ob.trans, m, n, k, alpha, a.data(), oa.ld, b.data(), ob.ld, beta,
                              c.data(), ldc);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    blas_anchor r;
    r.threads = int(std::max(1u, std::thread::hardware_concurrency()));
    r.repeat = std::max(1, repeat);
    r.name = std::string("OpenBLAS cblas_") + dtype_traits(type).blas_prefix + "gemm on the host, " +
             std::to_string(r.threads) + " threads";
    const cpu::openblas_call announced(r.threads);
    const int previous = openblas_get_num_threads();
    openblas_set_num_threads(r.threads);
    std::vector<double> seconds;
    try {
        run_once();  // warm-up: OpenBLAS's threads and buffers, the first touch of C
        for (int i = 0; i < r.repeat; ++i) seconds.push_back(run_once());
    } catch (...) {
        openblas_set_num_threads(previous);
        throw;
    }
    openblas_set_num_threads(previous);
    std::sort(seconds.begin(), seconds.end());
    const std::size_t h = seconds.size() / 2;
    r.seconds = seconds.size() % 2 ? seconds[h] : 0.5 * (seconds[h - 1] + seconds[h]);
    const double flops = double(dtype_traits(type).flops_per_multiply_add) * double(m) * double(n) * double(k);
    r.gflops = r.seconds > 0 ? flops / r.seconds * 1e-9 : 0.0;
    return r;
}

#define TILESTREAM_INSTANTIATE(T)                                                                            \
    template blas_anchor time_host_blas_gemm<T>(op, op, T, host_matrix_view<const T>, host_matrix_view<const T>, \
                                                T, host_matrix_view<const T>, int);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
