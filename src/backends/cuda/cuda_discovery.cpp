// Run-time discovery of CUDA GPUs: a missing driver, an old driver or no GPU becomes zero GPUs
// and a one-line reason, never an abort.
#include "backends/backend_module.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_device.hpp"

#include <tilestream/error.hpp>

#include <exception>
#include <string>

namespace tilestream::cuda {

std::string describe_cuda_failure(cudaError_t count_error) {
    int driver = 0, runtime = 0;
    // Both only read versions; cudaDriverGetVersion reports 0 when no driver is installed.
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    const cuda_count_failure failure = count_error == cudaErrorNoDevice ? cuda_count_failure::no_device
                                       : count_error == cudaErrorInsufficientDriver
                                           ? cuda_count_failure::insufficient_driver
                                           : cuda_count_failure::other;
    return cuda_failure_text(failure, driver, runtime, cudaGetErrorString(count_error));
}

device_info describe_gpu(int ordinal, int count) {
    device_info info;
    info.id = "cuda:" + std::to_string(ordinal);
    info.kind = device_kind::cuda;
    info.physical_index = ordinal;

    cudaDeviceProp prop{};
    TS_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal), info.id);
    info.name = prop.name;
    info.memory_bytes = prop.totalGlobalMem;
    info.threads = prop.multiProcessorCount;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;

    {
        // Free memory needs the GPU's (primary) context, which this creates if need be.
        device_guard guard(ordinal, info.id);
        std::size_t free = 0, total = 0;
        TS_CUDA_CHECK(cudaMemGetInfo(&free, &total), info.id);
        info.memory_free = free;
    }
    info.budget_bytes = default_budget(info.memory_free);

    for (int peer = 0; peer < count; ++peer) {
        if (peer == ordinal) continue;
        int can = 0;
        TS_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, ordinal, peer), info.id);
        if (can) info.peer_access.push_back(peer);
    }
    return info;
}

}  // namespace tilestream::cuda

namespace tilestream::backends {

cuda_discovery discover_cuda_devices() noexcept {
    cuda_discovery found;
    try {
        int count = 0;
        const cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            found.status = cuda::describe_cuda_failure(e);
            return found;
        }
        if (count == 0) {
            found.status = cuda::describe_cuda_failure(cudaErrorNoDevice);
            return found;
        }
        std::string problems;
        for (int i = 0; i < count; ++i) {
            try {
                found.gpus.push_back(cuda::describe_gpu(i, count));
            } catch (const std::exception& ex) {
                // A GPU that cannot be opened (exclusive mode, failed context) is left out; say so.
                problems += std::string("; cuda:") + std::to_string(i) + " left out: " + ex.what();
            }
        }
        int driver = 0, runtime = 0;
        (void)cudaDriverGetVersion(&driver);
        (void)cudaRuntimeGetVersion(&runtime);
        const std::size_t n = found.gpus.size();
        found.status = std::to_string(n) + (n == 1 ? " CUDA GPU" : " CUDA GPUs") + " (driver " +
                       cuda::cuda_version_string(driver) + ", runtime " +
                       cuda::cuda_version_string(runtime) + ")" + problems;
    } catch (const std::exception& ex) {
        found.gpus.clear();
        found.status = std::string("CUDA discovery failed: ") + ex.what();
    } catch (...) {
        found.gpus.clear();
        found.status = "CUDA discovery failed";
    }
    return found;
}

}  // namespace tilestream::backends
