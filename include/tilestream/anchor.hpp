// The anchor a GEMM figure is compared with: OpenBLAS called directly on the host, same operands,
// same process, timed the way the CLI times a run (median of repeats).
#pragma once

#include <tilestream/matrix.hpp>

#include <string>

namespace tilestream {

struct blas_anchor {
    std::string name;     ///< e.g. "OpenBLAS cblas_sgemm on the host, 2 threads" (cblas_[sdcz]gemm)
    double seconds = 0;   ///< median over the repeats (after one untimed warm-up)
    double gflops = 0;    ///< 2 m n k / seconds (8 m n k for complex types)
    int threads = 0;      ///< OpenBLAS threads used (the host's hardware threads)
    int repeat = 0;
};

/// Times cblas_?gemm(alpha, op(A), op(B), beta, C) on a scratch C of c0's shape and layout, filled
/// from c0 before each run when beta != 0, with OpenBLAS on all hardware threads (its previous
/// thread count is restored). Throws invalid_argument when a size exceeds CBLAS's 32-bit ints.
template <class T>
blas_anchor time_host_blas_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                                T beta, host_matrix_view<const T> c0, int repeat);

}  // namespace tilestream
