// The entry point of libtilestream_opencl.so: core's loader (backend_modules.cpp) reaches the OpenCL
// backend through this table only.
#include "backends/backend_module.hpp"

extern "C" __attribute__((visibility("default"))) const tilestream::backends::opencl_module*
tilestream_opencl_module() {
    static const tilestream::backends::opencl_module table{tilestream::backends::backend_module_abi,
                                                           &tilestream::backends::discover_opencl_devices,
                                                           &tilestream::backends::open_opencl_device};
    return &table;
}
