// Device specs ("auto", "all", "cpu", "cpu:N", "cuda:I", "cuda:IxK", "opencl:I", "opencl:IxK", comma lists, "@budget") and
// discovery of the devices present.
#pragma once

#include <tilestream/device.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream {

/// One item of a device spec.
struct device_request {
    /// automatic ("auto", the fronts' default): the accelerators `all` would open (CUDA GPUs, OpenCL
    /// GPUs), without the CPU beside them; the CPU alone where there is none.
    enum class what { all, cpu, cuda, opencl, automatic } kind = what::cpu;
    int count = 1;       ///< cpu:N -> N CPU devices splitting the cores ("cpu" alone is N = 1)
    int index = 0;       ///< cuda:I, opencl:I
    int slices = 1;      ///< cuda:IxK, opencl:IxK -> K logical devices on device I
    std::optional<std::size_t> budget;  ///< "@256MiB": budget of each device this item makes
    std::string text;    ///< the item as written, for messages
};

/// Parses a comma list of device items; throws invalid_argument naming the bad item.
std::vector<device_request> parse_device_spec(std::string_view spec);

/// What discovery found on this machine.
struct system_inventory {
    int cpu_cores = 1;
    std::size_t host_memory = 0;
    std::string cpu_name;
    std::vector<device_info> gpus;  ///< one per physical GPU (empty when none)
    std::string cuda_status;        ///< one line: why there are no GPUs, or the driver/runtime versions
    std::vector<device_info> opencl_devices;  ///< every OpenCL device, in `opencl:I` order
    std::string opencl_status;      ///< one line: the platforms found, or why there are none
    /// One line when `all` skips OpenCL discovery here (every OpenCL driver is PoCL with CPU devices
    /// only, which `all` never takes: the host's cores are already `cpu`); empty when it discovers.
    std::string opencl_under_all;
    /// Why `all` (and `auto`) skip OpenCL discovery here or do not (one line, either way).
    std::string opencl_under_all_decision;
};
/// Discovers CPU cores, host memory, CUDA GPUs and OpenCL devices (never aborts; no GPU is not an
/// error). open_devices discovers OpenCL only for specs that name it (opencl:I), and for `all` and
/// `auto` unless opencl_under_all says it skips.
const system_inventory& inventory();

struct open_options {
    std::optional<std::size_t> memory_budget;  ///< default budget of devices without "@..."
    int cpu_threads = 0;                       ///< threads per CPU device; 0 = split the cores
};

/// Opens the devices a spec names, in order. Throws invalid_argument listing the devices present
/// when an item names a device that does not exist.
std::vector<std::unique_ptr<device>> open_devices(std::string_view spec, const open_options& opt = {});

/// A one-line-per-device description of what is present (for error messages and `devices`).
std::string describe_present_devices();

}  // namespace tilestream
