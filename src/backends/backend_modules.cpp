// Core's side of the backend modules: the factories of backends.hpp for the CUDA and OpenCL backends
// load libtilestream_cuda.so / libtilestream_opencl.so (beside libtilestream) the first time devices
// of that kind are asked for, and unload a module again when its discovery finds no device, so that
// nothing of CUDA or OpenCL stays mapped where neither is present. A module that cannot be loaded
// (not installed, its vendor libraries missing) means no such devices, and a status that says why.
#include "backends/backend_module.hpp"
#ifdef TILESTREAM_CUDA_MODULE
#include "backends/cuda/cuda_logic.hpp"
#endif

#include <tilestream/error.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>
#include <string>

namespace tilestream::backends {

namespace {

// The folder of libtilestream itself: the modules are built and installed beside it (the Python
// package keeps them in a backends/ folder beside it: meson installs a folder of files that may or
// may not exist, but not a list of such files).
std::string module_path(const char* file) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void*>(&module_path), &info) && info.dli_fname) {
        const std::string self = info.dli_fname;
        if (const auto slash = self.rfind('/'); slash != std::string::npos) {
            const std::string beside = self.substr(0, slash + 1) + file;
            const std::string packaged = self.substr(0, slash + 1) + "backends/" + file;
            return ::access(beside.c_str(), F_OK) != 0 && ::access(packaged.c_str(), F_OK) == 0 ? packaged : beside;
        }
    }
    return file;  // the dynamic loader's search path
}

template <class Module>
class module_loader {
public:
    /// `absent`, when given, tells without loading the module that no device can be there (a status
    /// line), or returns an empty string.
    module_loader(const char* backend, const char* file, const char* entry, std::string (*absent)() = nullptr)
        : backend_(backend), file_(file), entry_(entry), absent_(absent) {}

    /// What discovery found; the module stays loaded only when it found a device.
    template <class Discovery>
    Discovery discover() {
        const std::lock_guard lock(mutex_);
        std::string why = table_ || !absent_ ? std::string() : absent_();
        if (!why.empty() || !load(why)) {
            Discovery d;
            d.status = why;
            return d;
        }
        Discovery d = table_->discover();
        if (device_count(d) == 0 && !opened_) unload();
        return d;
    }

    /// What `absent` says while the module is not loaded (empty: it may find devices).
    std::string absent_reason() {
        const std::lock_guard lock(mutex_);
        return table_ || !absent_ ? std::string() : absent_();
    }

    std::unique_ptr<device> open(int index, int slice, int slices, std::optional<std::size_t> budget) {
        const std::lock_guard lock(mutex_);
        std::string why;
        if (!load(why)) throw device_error(why);
        opened_ = true;  // its code now runs in devices: never unloaded again
        return table_->open_device(index, slice, slices, budget);
    }

private:
    static std::size_t device_count(const cuda_discovery& d) { return d.gpus.size(); }
    static std::size_t device_count(const opencl_discovery& d) { return d.devices.size(); }

    bool load(std::string& why) {
        if (table_) return true;
        const std::string path = module_path(file_);
        handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle_) {
            const char* e = dlerror();
            why = std::string(backend_) + " backend not installed or not loadable: " + (e ? e : path);
            return false;
        }
        using entry_fn = const Module* (*)();
        const auto entry = reinterpret_cast<entry_fn>(dlsym(handle_, entry_));
        const Module* table = entry ? entry() : nullptr;
        if (!table || table->abi != backend_module_abi) {
            why = std::string(backend_) + " backend " + path + " is from another build of tilestream (" +
                  (table ? "interface version " + std::to_string(table->abi) : std::string("no entry point")) +
                  ", expected " + std::to_string(backend_module_abi) + ")";
            unload();
            return false;
        }
        table_ = table;
        return true;
    }

    void unload() {
        if (handle_) dlclose(handle_);
        handle_ = nullptr;
        table_ = nullptr;
    }

    const char* backend_;
    const char* file_;
    const char* entry_;
    std::string (*absent_)();
    std::mutex mutex_;
    void* handle_ = nullptr;
    const Module* table_ = nullptr;
    bool opened_ = false;
};

}  // namespace

#ifdef TILESTREAM_CUDA_MODULE
namespace {
// The CUDA runtime finds GPUs through the driver library; where that cannot be loaded there is none
// to find, so the module (the runtime and cuBLAS: ~200 MiB mapped and 0.2 s, if only for a moment)
// is not loaded to say so. Unloaded again: the runtime loads it itself.
std::string no_cuda_driver() {
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
        dlclose(driver);
        return {};
    }
    const char* e = dlerror();
    return std::string("no CUDA driver found (") + (e ? e : "libcuda.so.1 cannot be loaded") + ")";
}

module_loader<cuda_module>& cuda_loader() {
    static auto& l =
        *new module_loader<cuda_module>("CUDA", "libtilestream_cuda.so", "tilestream_cuda_module", &no_cuda_driver);
    return l;
}
}  // namespace

cuda_discovery discover_cuda() noexcept {
    try {
        return cuda_loader().discover<cuda_discovery>();
    } catch (const std::exception& e) {
        return {{}, std::string("CUDA discovery failed: ") + e.what()};
    }
}

std::unique_ptr<device> make_cuda_device(int ordinal, int slice, int slices, std::optional<std::size_t> budget) {
    // No driver, no GPU: said as the module says it, without loading the module to say it.
    if (const std::string why = cuda_loader().absent_reason(); !why.empty()) {
        cuda::check_slice_request(ordinal, slice, slices);
        throw invalid_argument("cuda:" + std::to_string(ordinal) + " does not exist: " + why);
    }
    return cuda_loader().open(ordinal, slice, slices, budget);
}
#endif

#ifdef TILESTREAM_OPENCL_MODULE
namespace {
// libtilestream_opencl.so cannot be unloaded once loaded (CLBlast's C++ inline statics, and its own,
// are STB_GNU_UNIQUE symbols, which make a library permanent). So the ICD loader alone, which unloads
// cleanly, is asked first whether any platform is present (and unloaded again when none is).
std::string no_opencl_platform() {
    void* icd = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!icd) {
        const char* e = dlerror();
        return std::string("no OpenCL ICD loader (") + (e ? e : "libOpenCL.so.1") + ")";
    }
    using platform_ids_fn = int (*)(unsigned, void*, unsigned*);
    const auto platform_ids = reinterpret_cast<platform_ids_fn>(dlsym(icd, "clGetPlatformIDs"));
    unsigned platforms = 0;
    const int status = platform_ids ? platform_ids(0, nullptr, &platforms) : -1;
    if (status == 0 && platforms > 0) return {};  // kept loaded: the module uses it (and what it set up) next
    dlclose(icd);
    return "no OpenCL platform (the ICD loader found no driver in /etc/OpenCL/vendors or OCL_ICD_VENDORS)";
}

module_loader<opencl_module>& opencl_loader() {
    static auto& l = *new module_loader<opencl_module>("OpenCL", "libtilestream_opencl.so",
                                                       "tilestream_opencl_module", &no_opencl_platform);
    return l;
}
}  // namespace

opencl_discovery discover_opencl() noexcept {
    try {
        return opencl_loader().discover<opencl_discovery>();
    } catch (const std::exception& e) {
        return {{}, std::string("OpenCL discovery failed: ") + e.what()};
    }
}

std::unique_ptr<device> make_opencl_device(int index, int slice, int slices, std::optional<std::size_t> budget) {
    return opencl_loader().open(index, slice, slices, budget);
}
#endif

}  // namespace tilestream::backends
