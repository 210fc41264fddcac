// The process-wide part of the OpenCL backend: the devices discovery found, one context per
// device (shared by its logical slices), and programs built once per device and cached on disk.
#pragma once

#include "backends/opencl/opencl_check.hpp"

#include <tilestream/device.hpp>

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tilestream::opencl {

/// One OpenCL device in listing order, with its lazily created context.
struct root_device {
    cl_platform_id platform = nullptr;
    cl_device_id device = nullptr;
    device_info info;                  ///< as discovery filled it (id "opencl:I")
    std::string version;               ///< CL_DEVICE_VERSION ("OpenCL 3.0 PoCL ...")
    std::string extensions;            ///< CL_DEVICE_EXTENSIONS
    std::size_t max_alloc = 0;         ///< CL_DEVICE_MAX_MEM_ALLOC_SIZE
    std::size_t max_work_group = 0;    ///< CL_DEVICE_MAX_WORK_GROUP_SIZE
    bool has_extension(std::string_view name) const;
    /// The context of this device (created on first use; lives as long as the process).
    cl_context context();

private:
    std::once_flag context_once_;
    cl_context context_ = nullptr;
};

/// Every OpenCL device present (discovery runs once; never throws) and the status line.
std::vector<root_device*>& roots();
const std::string& discovery_status();

/// The program for `source` built with `options` on root device `index`: from this process's
/// memory when built before, else from the disk cache (key: device, driver, options and source
/// hash; folder TILESTREAM_OPENCL_CACHE, else $XDG_CACHE_HOME/tilestream/opencl, else
/// ~/.cache/tilestream/opencl), else compiled and stored there. A failed build throws
/// device_error with the compiler log.
cl_program program(int index, std::string_view name, std::string_view source, const std::string& options);

/// How programs were obtained so far in this process (tests check the disk cache with it).
struct program_stats {
    int from_memory = 0, from_disk = 0, compiled = 0;
};
program_stats current_program_stats();
/// Test hook: forget the programs built in this process so the next request goes to the disk.
void forget_programs_in_memory();
/// The folder of the on-disk program cache.
std::string program_cache_folder();

}  // namespace tilestream::opencl
