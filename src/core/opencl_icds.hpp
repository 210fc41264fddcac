// Which OpenCL drivers (ICDs) the ICD loader would load, read from its configuration files alone (no
// library is loaded), and whether `all` may skip OpenCL discovery because every one is PoCL with
// CPU device drivers only: `all` never takes an emulated CPU OpenCL device (the host's cores are
// already `cpu`), and discovering them loads libOpenCL, PoCL, LLVM and the OpenCL module (CLBlast),
// about +210 MiB and a second or two, for nothing.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tilestream::detail {

/// The environment the decision reads (the ICD loader's variables and PoCL's), so tests can pass
/// their own; of_process() reads the process's.
struct opencl_icd_environment {
    std::optional<std::string> ocl_icd_vendors;     ///< OCL_ICD_VENDORS (ocl-icd): a folder, a .icd file, or a library
    std::optional<std::string> opencl_vendor_path;  ///< OPENCL_VENDOR_PATH: the folder instead of /etc/OpenCL/vendors
    std::optional<std::string> ocl_icd_filenames;   ///< OCL_ICD_FILENAMES (Khronos loader): more libraries, ':'-separated
    std::optional<std::string> pocl_devices;        ///< POCL_DEVICES: the PoCL drivers used (space-separated)
    std::vector<std::string> library_dirs;          ///< where a bare library name is found (LD_LIBRARY_PATH, system dirs)
    std::string default_vendor_dir = "/etc/OpenCL/vendors";

    static opencl_icd_environment of_process();
};

struct opencl_all_decision {
    bool skip = false;   ///< `all` need not discover OpenCL
    std::string reason;  ///< one line: why it skips, or why it does not
};

/// Skips only when every ICD listed is PoCL and each PoCL's drivers (its installed
/// libpocl-devices-*.so, or POCL_DEVICES when set) are CPU drivers only (basic, pthread, tbb, cpu,
/// cpu-minimal). Anything it cannot tell (an unreadable .icd, a library or driver folder not found)
/// means no skip.
opencl_all_decision decide_opencl_under_all(const opencl_icd_environment& env);

}  // namespace tilestream::detail
