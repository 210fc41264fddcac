// The entry point of libtilestream_cuda.so: core's loader (backend_modules.cpp) reaches the CUDA
// backend through this table only.
#include "backends/backend_module.hpp"

extern "C" __attribute__((visibility("default"))) const tilestream::backends::cuda_module* tilestream_cuda_module() {
    static const tilestream::backends::cuda_module table{tilestream::backends::backend_module_abi,
                                                         &tilestream::backends::discover_cuda_devices,
                                                         &tilestream::backends::open_cuda_device};
    return &table;
}
