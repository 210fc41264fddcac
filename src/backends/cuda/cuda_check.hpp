// Checking of CUDA runtime and cuBLAS return codes: a failed call becomes a device_error that
// names the call, the device and CUDA's message ("cudaMemcpyAsync failed on cuda:0: invalid argument").
#pragma once

#include <tilestream/error.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <string>
#include <string_view>

namespace tilestream::cuda {

/// The function name of a call expression: "cudaMemcpyAsync(dst, src, ...)" -> "cudaMemcpyAsync".
inline std::string_view call_name(std::string_view expr) {
    const auto paren = expr.find('(');
    return paren == std::string_view::npos ? expr : expr.substr(0, paren);
}

/// Errors after which the CUDA context is unusable for the rest of the process (sticky errors).
inline bool is_sticky(cudaError_t e) {
    switch (e) {
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchFailure:
        case cudaErrorIllegalInstruction:
        case cudaErrorMisalignedAddress:
        case cudaErrorInvalidAddressSpace:
        case cudaErrorInvalidPc:
        case cudaErrorHardwareStackError:
        case cudaErrorAssert:
        case cudaErrorECCUncorrectable:
        case cudaErrorLaunchTimeout:
            return true;
        default:
            return false;
    }
}

/// Throws device_error for a failed CUDA runtime call; `device` is the tilestream id ("cuda:0.1").
[[noreturn]] inline void throw_cuda_error(std::string_view call, std::string_view device,
                                          cudaError_t e) {
    // Reset the per-thread "last error" so that a later cudaGetLastError() after a kernel launch
    // does not report this (already thrown) error again. Sticky errors stay regardless.
    (void)cudaGetLastError();
    std::string msg = std::string(call) + " failed on " + std::string(device) + ": " +
                      cudaGetErrorString(e);
    if (is_sticky(e))
        msg += " (the CUDA context of this GPU is no longer usable; restart the process)";
    throw device_error(msg);
}

/// Throws device_error for a failed cuBLAS call.
[[noreturn]] inline void throw_cublas_error(std::string_view call, std::string_view device,
                                            cublasStatus_t s) {
    throw device_error(std::string(call) + " failed on " + std::string(device) + ": " +
                       cublasGetStatusString(s));
}

/// Throws device_error for a failed cuSOLVER call (cuSOLVER has no message table: the status code).
[[noreturn]] inline void throw_cusolver_error(std::string_view call, std::string_view device,
                                              cusolverStatus_t s) {
    throw device_error(std::string(call) + " failed on " + std::string(device) + ": cusolverStatus_t " +
                       std::to_string(int(s)));
}

inline void check(cudaError_t e, std::string_view call, std::string_view device) {
    if (e != cudaSuccess) throw_cuda_error(call, device, e);
}

inline void check(cublasStatus_t s, std::string_view call, std::string_view device) {
    if (s != CUBLAS_STATUS_SUCCESS) throw_cublas_error(call, device, s);
}

inline void check(cusolverStatus_t s, std::string_view call, std::string_view device) {
    if (s != CUSOLVER_STATUS_SUCCESS) throw_cusolver_error(call, device, s);
}

}  // namespace tilestream::cuda

/// Checks a CUDA runtime or cuBLAS call made on behalf of the device whose id is `device_id`.
#define TS_CUDA_CHECK(expr, device_id) \
    ::tilestream::cuda::check((expr), ::tilestream::cuda::call_name(#expr), (device_id))
