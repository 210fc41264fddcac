// Stands in for the CUDA backend when it is not compiled: no GPUs, and a clear error on use.
#include "backends/backends.hpp"

#include <tilestream/error.hpp>

namespace tilestream::backends {

cuda_discovery discover_cuda() noexcept {
    return {{}, "CUDA backend not compiled into this build"};
}

std::unique_ptr<device> make_cuda_device(int, int, int, std::optional<std::size_t>) {
    throw not_compiled("cuda");
}

}  // namespace tilestream::backends
