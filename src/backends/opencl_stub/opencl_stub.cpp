// Stands in for the OpenCL backend when it is not compiled: no devices, and a clear error on use.
#include "backends/backends.hpp"

#include <tilestream/error.hpp>

namespace tilestream::backends {

opencl_discovery discover_opencl() noexcept {
    return {{}, "OpenCL backend not compiled into this build (no OpenCL headers and ICD loader found)"};
}

std::unique_ptr<device> make_opencl_device(int, int, int, std::optional<std::size_t>) {
    throw not_compiled("opencl");
}

}  // namespace tilestream::backends
