// OpenBLAS timed directly on the host: the anchor `gemm --anchor` prints beside a run.
#include "backends/cpu/openblas_memory.hpp"

#include <tilestream/anchor.hpp>
#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

namespace tilestream {

namespace {

// op(x) is stored in x's layout, flipped by a transpose; CBLAS transposes when that differs from C's.
CBLAS_TRANSPOSE cblas_trans(layout stored, op o, layout order) {
    const bool op_row_major = (stored == layout::row_major) == (o == op::n);
    return op_row_major == (order == layout::row_major) ? CblasNoTrans : CblasTrans;
}

}  // namespace

template <class T>
blas_anchor time_host_blas_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                                T beta, host_matrix_view<const T> c0, int repeat) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c0.rows(), c0.cols());
    const index_t m = c0.rows(), n = c0.cols(), k = op_a == op::n ? a.cols() : a.rows();
    for (index_t v : {m, n, k, a.ld(), b.ld()})
        if (v > INT_MAX)
            throw invalid_argument("anchor: " + std::to_string(v) + " exceeds CBLAS's 32-bit sizes");
    host_matrix<T> c(m, n, c0.layout());
    const layout order = c0.layout();
    const CBLAS_ORDER cblas_order = order == layout::row_major ? CblasRowMajor : CblasColMajor;
    const CBLAS_TRANSPOSE ta = cblas_trans(a.layout(), op_a, order), tb = cblas_trans(b.layout(), op_b, order);
    const int ldc = int(std::max<index_t>(1, order == layout::row_major ? n : m));
    auto run_once = [&] {
        if (beta != T(0))
            for (index_t i = 0; i < m; ++i)
                for (index_t j = 0; j < n; ++j) c(i, j) = c0(i, j);
        const auto t0 = std::chrono::steady_clock::now();
        if constexpr (std::is_same_v<T, float>)
            cblas_sgemm(cblas_order, ta, tb, int(m), int(n), int(k), alpha, a.data(), int(a.ld()), b.data(),
                        int(b.ld()), beta, c.data(), ldc);
        else
            cblas_dgemm(cblas_order, ta, tb, int(m), int(n), int(k), alpha, a.data(), int(a.ld()), b.data(),
                        int(b.ld()), beta, c.data(), ldc);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    blas_anchor r;
    r.threads = int(std::max(1u, std::thread::hardware_concurrency()));
    r.repeat = std::max(1, repeat);
    r.name = std::string("OpenBLAS cblas_") + (std::is_same_v<T, float> ? "s" : "d") + "gemm on the host, " +
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
    r.gflops = r.seconds > 0 ? 2.0 * double(m) * double(n) * double(k) / r.seconds * 1e-9 : 0.0;
    return r;
}

template blas_anchor time_host_blas_gemm<float>(op, op, float, host_matrix_view<const float>,
                                                host_matrix_view<const float>, float, host_matrix_view<const float>, int);
template blas_anchor time_host_blas_gemm<double>(op, op, double, host_matrix_view<const double>,
                                                 host_matrix_view<const double>, double, host_matrix_view<const double>,
                                                 int);

}  // namespace tilestream
