// The Jacobi sweep in OpenCL C (-DREAL=float|double): one work item per row, the same expression
// and order as the CPU and reference kernels (0.25*((N+S)+(W+E)), no contraction), so fields agree
// bitwise; each row's squared change goes to partial[row] and sum_residual adds them in row order.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

typedef REAL real;

__kernel void jacobi_sweep(__global const real* in, const long in_off, __global real* out, const long out_off,
                           const long ld, const long row_begin, const long col_begin, const long rows,
                           const long cols, __global double* partial, const int with_residual) {
    const long r = get_global_id(0);
    if (r >= rows) return;
    const long row = row_begin + r;
    __global const real* centre = in + in_off + row * ld + col_begin;
    __global real* dst = out + out_off + row * ld + col_begin;
    double sum = 0.0;
    for (long j = 0; j < cols; ++j) {
        const real v = (real)0.25 * ((centre[j - ld] + centre[j + ld]) + (centre[j - 1] + centre[j + 1]));
        dst[j] = v;
        if (with_residual) {
            const double d = (double)v - (double)centre[j];
            sum += d * d;
        }
    }
    if (with_residual) partial[r] = sum;
}

__kernel void sum_residual(__global const double* partial, const long rows, __global double* residual,
                           const long residual_off) {
    if (get_global_id(0) != 0) return;
    double total = 0.0;
    for (long r = 0; r < rows; ++r) total += partial[r];
    residual[residual_off] += total;
}
