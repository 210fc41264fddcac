// OpenCL discovery (every platform and device, never aborting), per-device contexts, and the
// program cache: built once per device per process, binaries kept on disk between processes.
#include "backends/opencl/opencl_runtime.hpp"

#include "backends/backend_module.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

namespace tilestream::opencl {
namespace {

std::string device_string(cl_device_id d, cl_device_info what) {
    std::size_t n = 0;
    if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
    std::string s(n, '\0');
    if (clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
    std::size_t n = 0;
    if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
    std::string s(n, '\0');
    if (clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
    return s;
}

template <class T>
T device_value(cl_device_id d, cl_device_info what) {
    T v{};
    if (clGetDeviceInfo(d, what, sizeof v, &v, nullptr) != CL_SUCCESS) return T{};
    return v;
}

std::string type_text(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return "GPU";
    if (t & CL_DEVICE_TYPE_CPU) return "CPU";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    return "custom";
}

struct registry {
    std::vector<root_device*> devices;  // never freed: OpenCL objects outlive static destructors
    std::string status;
};

registry discover() {
    registry r;
    cl_uint platforms = 0;
    const cl_int e = clGetPlatformIDs(0, nullptr, &platforms);
    if (e == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (e == CL_SUCCESS && platforms == 0)) {
        r.status = "no OpenCL platform (the ICD loader found no driver in /etc/OpenCL/vendors)";
        return r;
    }
    if (e != CL_SUCCESS) {
        r.status = "clGetPlatformIDs failed: " + error_name(e);
        return r;
    }
    std::vector<cl_platform_id> ids(platforms);
    if (const cl_int e2 = clGetPlatformIDs(platforms, ids.data(), nullptr); e2 != CL_SUCCESS) {
        r.status = "clGetPlatformIDs failed: " + error_name(e2);
        return r;
    }
    std::vector<std::string> notes;
    for (cl_platform_id p : ids) {
        const std::string pname = platform_string(p, CL_PLATFORM_NAME);
        cl_uint count = 0;
        const cl_int de = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &count);
        if (de != CL_SUCCESS || count == 0) {
            notes.push_back(pname + ": " + (de == CL_SUCCESS || de == CL_DEVICE_NOT_FOUND ? "no device" : error_name(de)));
            continue;
        }
        std::vector<cl_device_id> devs(count);
        if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, count, devs.data(), nullptr) != CL_SUCCESS) continue;
        notes.push_back(pname + " " + platform_string(p, CL_PLATFORM_VERSION) + ": " + std::to_string(count) +
                        (count == 1 ? " device" : " devices"));
        for (cl_device_id d : devs) {
            auto* root = new root_device;
            root->platform = p;
            root->device = d;
            root->version = device_string(d, CL_DEVICE_VERSION);
            root->extensions = device_string(d, CL_DEVICE_EXTENSIONS);
            root->max_alloc = device_value<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
            root->max_work_group = device_value<std::size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
            device_info& in = root->info;
            in.id = "opencl:" + std::to_string(r.devices.size());
            in.kind = device_kind::opencl;
            in.name = device_string(d, CL_DEVICE_NAME);
            in.platform = pname;
            in.vendor = device_string(d, CL_DEVICE_VENDOR);
            in.driver = device_string(d, CL_DRIVER_VERSION);
            const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
            in.device_type = type_text(type);
            in.emulated = (type & CL_DEVICE_TYPE_CPU) != 0;
            in.memory_bytes = device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
            in.memory_free = in.memory_bytes;
            in.budget_bytes = in.memory_bytes;
            in.local_memory = device_value<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE);
            in.threads = static_cast<int>(device_value<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS));
            in.fp64 = device_value<cl_device_fp_config>(d, CL_DEVICE_DOUBLE_FP_CONFIG) != 0 ||
                      root->has_extension("cl_khr_fp64");
            in.physical_index = static_cast<int>(r.devices.size());
            r.devices.push_back(root);
        }
    }
    std::ostringstream s;
    for (std::size_t i = 0; i < notes.size(); ++i) s << (i ? "; " : "") << notes[i];
    r.status = s.str();
    return r;
}

registry& the_registry() {
    // Never destroyed: the devices (and their contexts) stay reachable until the process ends.
    static registry* r = new registry([] {
        try {
            return discover();
        } catch (const std::exception& ex) {
            return registry{{}, std::string("OpenCL discovery failed: ") + ex.what()};
        } catch (...) {
            return registry{{}, "OpenCL discovery failed"};
        }
    }());
    return *r;
}

// ---- program cache

std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

struct program_memory {
    std::mutex mutex;
    std::map<std::string, cl_program> programs;  // key: device index, name, options
    program_stats stats;
};
program_memory& memory() {
    static auto* m = new program_memory;  // never destroyed: programs outlive static destructors
    return *m;
}

std::string build_log(cl_program p, cl_device_id d) {
    std::size_t n = 0;
    if (clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
    std::string log(n, '\0');
    if (clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr) != CL_SUCCESS) return {};
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
}

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return {};
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Stores the binary; a cache that cannot be written costs only a recompilation next time.
void store_binary(cl_program prog, const std::filesystem::path& file) {
    std::size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0)
        return;
    std::string bin(size, '\0');
    unsigned char* ptr = reinterpret_cast<unsigned char*>(bin.data());
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS) return;
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    const auto tmp = file.string() + ".tmp" + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary);
        if (!out.write(bin.data(), std::streamsize(bin.size()))) return;
    }
    std::filesystem::rename(tmp, file, ec);  // atomic: a concurrent reader sees all or nothing
    if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

bool root_device::has_extension(std::string_view name) const {
    std::istringstream s(extensions);
    std::string word;
    while (s >> word)
        if (word == name) return true;
    return false;
}

cl_context root_device::context() {
    std::call_once(context_once_, [this] {
        cl_int e = CL_SUCCESS;
        const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                               reinterpret_cast<cl_context_properties>(platform), 0};
        context_ = clCreateContext(props, 1, &device, nullptr, nullptr, &e);
        if (e != CL_SUCCESS) {
            context_ = nullptr;
            throw_cl_error("clCreateContext", info.id, e);
        }
    });
    if (context_ == nullptr) throw device_error("no OpenCL context for " + info.id + " (its creation failed before)");
    return context_;
}

std::vector<root_device*>& roots() { return the_registry().devices; }
const std::string& discovery_status() { return the_registry().status; }

std::string program_cache_folder() {
    if (const char* dir = std::getenv("TILESTREAM_OPENCL_CACHE"); dir && *dir) return dir;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/tilestream/opencl";
    if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/tilestream/opencl";
    return "/tmp/tilestream-opencl-cache";
}

program_stats current_program_stats() {
    auto& m = memory();
    std::lock_guard lock(m.mutex);
    return m.stats;
}

void forget_programs_in_memory() {
    auto& m = memory();
    std::lock_guard lock(m.mutex);
    for (auto& [key, p] : m.programs) clReleaseProgram(p);
    m.programs.clear();
}

cl_program program(int index, std::string_view name, std::string_view source, const std::string& options) {
    root_device& root = *roots().at(static_cast<std::size_t>(index));
    auto& mem = memory();
    const std::string key = std::to_string(index) + "|" + std::string(name) + "|" + options;
    // One build at a time: PoCL compiles with all cores, and two threads asking for the same
    // program must not both compile it.
    std::lock_guard lock(mem.mutex);
    if (auto it = mem.programs.find(key); it != mem.programs.end()) {
        ++mem.stats.from_memory;
        return it->second;
    }
    cl_context ctx = root.context();
    std::uint64_t h = fnv1a(root.info.name);
    h = fnv1a(root.info.platform, h);
    h = fnv1a(root.info.driver, h);
    h = fnv1a(root.version, h);
    h = fnv1a(options, h);
    h = fnv1a(source, h);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    const std::filesystem::path file =
        std::filesystem::path(program_cache_folder()) / (std::string(name) + "-" + hex + ".bin");

    cl_program prog = nullptr;
    if (const std::string bin = read_file(file); !bin.empty()) {
        const auto* data = reinterpret_cast<const unsigned char*>(bin.data());
        const std::size_t size = bin.size();
        cl_int status = CL_SUCCESS, e = CL_SUCCESS;
        prog = clCreateProgramWithBinary(ctx, 1, &root.device, &size, &data, &status, &e);
        if (e == CL_SUCCESS && status == CL_SUCCESS &&
            clBuildProgram(prog, 1, &root.device, options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
            ++mem.stats.from_disk;
        } else {  // stale or foreign binary: compile from source
            if (prog) clReleaseProgram(prog);
            prog = nullptr;
        }
    }
    if (prog == nullptr) {
        const char* text = source.data();
        const std::size_t length = source.size();
        cl_int e = CL_SUCCESS;
        prog = clCreateProgramWithSource(ctx, 1, &text, &length, &e);
        if (e != CL_SUCCESS) throw_cl_error("clCreateProgramWithSource", root.info.id, e);
        const cl_int b = clBuildProgram(prog, 1, &root.device, options.c_str(), nullptr, nullptr);
        if (b != CL_SUCCESS) {
            const std::string log = build_log(prog, root.device);
            clReleaseProgram(prog);
            throw device_error("clBuildProgram of the OpenCL program '" + std::string(name) + "' (options '" +
                               options + "') failed on " + root.info.id + " (" + root.info.name +
                               "): " + error_name(b) + "; compiler log:\n" + log);
        }
        ++mem.stats.compiled;
        store_binary(prog, file);
    }
    mem.programs.emplace(key, prog);
    return prog;
}

}  // namespace tilestream::opencl

namespace tilestream::backends {

opencl_discovery discover_opencl_devices() noexcept {
    opencl_discovery d;
    try {
        for (auto* r : opencl::roots()) d.devices.push_back(r->info);
        d.status = opencl::discovery_status();
    } catch (...) {
        d.devices.clear();
        d.status = "OpenCL discovery failed";
    }
    return d;
}

}  // namespace tilestream::backends
