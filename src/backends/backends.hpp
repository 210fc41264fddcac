// Factories through which core opens the devices of each backend (private to the library).
#pragma once

#include <tilestream/device.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tilestream::backends {

struct cpu_device_config {
    int index = 0;             ///< cpu:<index>
    int threads = 1;           ///< compute worker threads of this device
    std::size_t memory = 0;    ///< its share of host memory
    std::size_t budget = 0;    ///< allocation budget
    bool budget_given = false; ///< set by the user: the device then stages operands through it
    std::string name;          ///< processor model
};
std::unique_ptr<device> make_cpu_device(const cpu_device_config& cfg);

/// What the CUDA backend found: one device_info per physical GPU, and a one-line status
/// ("CUDA backend not compiled", "no CUDA driver", "driver 12.2 older than runtime 13.0", ...).
struct cuda_discovery {
    std::vector<device_info> gpus;
    std::string status;
};
/// Never throws and never aborts: failures become zero GPUs and a status line.
cuda_discovery discover_cuda() noexcept;

/// Opens logical device `slice` of `slices` on GPU `ordinal`; each slice gets its own streams and
/// budget (default: its share of the GPU's free memory). The stub throws not_compiled("cuda").
std::unique_ptr<device> make_cuda_device(int ordinal, int slice, int slices,
                                         std::optional<std::size_t> budget);

/// What the OpenCL backend found: one device_info per OpenCL device in listing order (platform
/// by platform), and a one-line status ("OpenCL backend not compiled", "no OpenCL platform", ...).
struct opencl_discovery {
    std::vector<device_info> devices;
    std::string status;
};
/// Never throws and never aborts: failures become zero devices and a status line.
opencl_discovery discover_opencl() noexcept;

/// Opens logical device `slice` of `slices` on OpenCL device `index` (listing order); the slices
/// share the device and split its memory. The stub throws not_compiled("opencl").
std::unique_ptr<device> make_opencl_device(int index, int slice, int slices,
                                           std::optional<std::size_t> budget);

}  // namespace tilestream::backends
