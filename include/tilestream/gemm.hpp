// In-core GEMM through a device: C <- alpha*op(A)*op(B) + beta*C with BLAS semantics.
#pragma once

#include <tilestream/device.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/matrix.hpp>

#include <cstddef>

namespace tilestream {

struct gemm_options {
    gemm_kernel kernel = gemm_kernel::vendor;
    math_mode math = math_mode::strict;
};

/// What one GEMM did.
struct gemm_report {
    double seconds = 0;         ///< host to host, copies included
    double kernel_seconds = 0;  ///< the kernel alone on the device
    std::size_t bytes_h2d = 0;
    std::size_t bytes_d2h = 0;
    std::size_t peak_device_bytes = 0;
};

/// Throws dimension_mismatch / invalid_argument naming the operands when the shapes do not fit.
void validate_gemm(op op_a, op op_b, index_t a_rows, index_t a_cols, index_t b_rows,
                   index_t b_cols, index_t c_rows, index_t c_cols);

/// Runs the GEMM on one device with all operands resident (in-core): copies A, B (and C when
/// beta != 0) to the device, runs the kernel, copies C back. `reference` runs on the host.
/// Throws out_of_budget when the operands do not fit the device budget.
template <class T>
gemm_report gemm(device& dev, op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                 host_matrix_view<const T> b, T beta, host_matrix_view<T> c,
                 const gemm_options& opt = {});

/// The sequential reference on host data, accumulating in double (the test oracle).
template <class T>
void reference_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a,
                    host_matrix_view<const T> b, T beta, host_matrix_view<T> c);

}  // namespace tilestream
