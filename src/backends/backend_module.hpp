// What a backend module (libtilestream_cuda.so, libtilestream_opencl.so) hands to core. The CUDA and
// OpenCL backends are separate libraries that core loads (dlopen) the first time devices of their
// kind are asked for, so a process that uses only CPU devices maps none of their vendor libraries
// (CUDA runtime, cuBLAS, cuBLASLt, the OpenCL ICD loader, CLBlast). See backend_modules.cpp.
#pragma once

#include "backends/backends.hpp"

namespace tilestream::backends {

/// Bumped whenever a module's table or the types it passes change: a module from another build is
/// refused with a message instead of being called.
inline constexpr int backend_module_abi = 1;

template <class Discovery>
struct backend_module {
    int abi;  ///< backend_module_abi of the build that made the module
    Discovery (*discover)() noexcept;
    std::unique_ptr<device> (*open_device)(int index, int slice, int slices, std::optional<std::size_t> budget);
};
using cuda_module = backend_module<cuda_discovery>;
using opencl_module = backend_module<opencl_discovery>;

// Inside the modules: what their tables point to.
cuda_discovery discover_cuda_devices() noexcept;
std::unique_ptr<device> open_cuda_device(int ordinal, int slice, int slices, std::optional<std::size_t> budget);
opencl_discovery discover_opencl_devices() noexcept;
std::unique_ptr<device> open_opencl_device(int index, int slice, int slices, std::optional<std::size_t> budget);

}  // namespace tilestream::backends

// The one entry point of each module (looked up with dlsym).
extern "C" const tilestream::backends::cuda_module* tilestream_cuda_module();
extern "C" const tilestream::backends::opencl_module* tilestream_opencl_module();
