// Reads the ICD loader's configuration as ocl-icd does (OCL_ICD_VENDORS, OPENCL_VENDOR_PATH,
// /etc/OpenCL/vendors/*.icd; OCL_ICD_FILENAMES as the Khronos loader adds it) and PoCL's driver
// folder, to tell whether `all` may skip OpenCL discovery (opencl_icds.hpp).
#include "core/opencl_icds.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tilestream::detail {
namespace {

std::optional<std::string> env_of(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
}

bool set(const std::optional<std::string>& v) { return v && !v->empty(); }

std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, sep))
        if (!item.empty()) out.push_back(item);
    return out;
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_directory(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

std::string base_name(const std::string& p) {
    const auto slash = p.rfind('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string dir_name(const std::string& p) {
    const auto slash = p.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}

/// The entries of a folder whose names end with `tail`, sorted; nullopt when it cannot be read.
std::optional<std::vector<std::string>> entries(const std::string& dir, const std::string& tail) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return std::nullopt;
    std::vector<std::string> out;
    while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != ".." && ends_with(name, tail)) out.push_back(name);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

struct icd {
    std::string source;   // where it is listed: a .icd file or a variable
    std::string library;  // the library the loader dlopens
};

/// A .icd file's library name (its content, trimmed); empty when it cannot be read.
std::string read_icd(const std::string& path) {
    std::ifstream in(path);
    if (!in) return {};
    std::ostringstream text;
    text << in.rdbuf();
    return trim(text.str());
}

constexpr const char* cpu_drivers[] = {"basic", "pthread", "tbb", "cpu", "cpu-minimal"};

bool is_cpu_driver(const std::string& name) {
    return std::find(std::begin(cpu_drivers), std::end(cpu_drivers), name) != std::end(cpu_drivers);
}

bool is_pocl(const std::string& library) {
    const std::string b = base_name(library);
    return b.rfind("libpocl", 0) == 0 && b.rfind("libpocl-devices", 0) != 0;
}

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
    return out;
}

}  // namespace

opencl_icd_environment opencl_icd_environment::of_process() {
    opencl_icd_environment e;
    e.ocl_icd_vendors = env_of("OCL_ICD_VENDORS");
    e.opencl_vendor_path = env_of("OPENCL_VENDOR_PATH");
    e.ocl_icd_filenames = env_of("OCL_ICD_FILENAMES");
    e.pocl_devices = env_of("POCL_DEVICES");
    if (auto p = env_of("LD_LIBRARY_PATH")) e.library_dirs = split(*p, ':');
    // The system's library folders: libc's own (the multiarch one on Debian), then the usual ones.
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&::getpid), &info) && info.dli_fname && info.dli_fname[0] == '/') {
        const std::string d = dir_name(info.dli_fname);
        e.library_dirs.push_back(d);
        if (d.rfind("/lib", 0) == 0) e.library_dirs.push_back("/usr" + d);
        if (d.rfind("/usr/lib", 0) == 0) e.library_dirs.push_back(d.substr(4));
    }
    for (const char* d : {"/usr/local/lib", "/usr/lib64", "/lib64", "/usr/lib", "/lib"}) e.library_dirs.push_back(d);
    return e;
}

opencl_all_decision decide_opencl_under_all(const opencl_icd_environment& env) {
    const auto no = [](std::string why) { return opencl_all_decision{false, std::move(why)}; };
    // The ICDs, as ocl-icd finds them.
    std::vector<icd> icds;
    const std::string vendor_dir = set(env.opencl_vendor_path) ? *env.opencl_vendor_path : env.default_vendor_dir;
    const auto scan = [&](const std::string& dir) -> std::string {
        const auto files = entries(dir, ".icd");
        if (!files) return {};  // no folder: no ICD from it (the loader finds none either)
        for (const auto& f : *files) {
            const std::string path = dir + "/" + f, library = read_icd(path);
            if (library.empty()) return "cannot read the OpenCL driver list " + path;
            icds.push_back({path, library});
        }
        return {};
    };
    std::string problem;
    if (set(env.ocl_icd_vendors)) {
        const std::string& v = *env.ocl_icd_vendors;
        if (is_directory(v)) {
            problem = scan(v);
        } else if (ends_with(v, ".icd")) {
            // One .icd file: by name in the vendors folder first when it has no slash, else as a path.
            std::vector<std::string> tries;
            if (v.find('/') == std::string::npos) tries.push_back(vendor_dir + "/" + v);
            tries.push_back(v);
            for (const auto& t : tries)
                if (is_file(t)) {
                    const std::string library = read_icd(t);
                    if (library.empty()) problem = "cannot read the OpenCL driver list " + t;
                    else icds.push_back({t, library});
                    break;
                }
        } else {
            icds.push_back({"OCL_ICD_VENDORS", v});  // the driver library itself
        }
    } else {
        problem = scan(vendor_dir);
    }
    if (set(env.ocl_icd_filenames))
        for (const auto& f : split(*env.ocl_icd_filenames, ':')) icds.push_back({"OCL_ICD_FILENAMES", f});
    if (!problem.empty()) return no(problem);
    if (icds.empty()) return no("no OpenCL driver listed");

    // Each must be PoCL with CPU drivers only.
    std::vector<std::string> sources, drivers;
    for (const auto& i : icds) {
        if (!is_pocl(i.library))
            return no("OpenCL driver " + i.library + " (" + i.source + ") is not PoCL");
        std::string path;
        if (i.library.find('/') != std::string::npos) {
            if (is_file(i.library)) path = i.library;
        } else {
            for (const auto& d : env.library_dirs)
                if (is_file(d + "/" + i.library)) {
                    path = d + "/" + i.library;
                    break;
                }
        }
        if (path.empty()) return no("cannot find " + i.library + " (" + i.source + ")");
        sources.push_back(base_name(i.source));
        std::vector<std::string> names;
        if (set(env.pocl_devices)) {
            names = split(*env.pocl_devices, ' ');
        } else {
            // PoCL loads its drivers from the folder pocl/ beside its (real) library.
            char* real = ::realpath(path.c_str(), nullptr);
            const std::string folder = dir_name(real ? std::string(real) : path) + "/pocl";
            std::free(real);
            const auto libs = entries(folder, ".so");
            if (!libs) return no("cannot read PoCL's driver folder " + folder);
            for (const auto& l : *libs)
                if (l.rfind("libpocl-devices-", 0) == 0) names.push_back(l.substr(16, l.size() - 16 - 3));
            if (names.empty()) return no("no PoCL driver in " + folder + " (built in: cannot tell which)");
        }
        for (const auto& n : names) {
            if (!is_cpu_driver(n)) return no("PoCL has a '" + n + "' driver (not a CPU one)");
            if (std::find(drivers.begin(), drivers.end(), n) == drivers.end()) drivers.push_back(n);
        }
    }
    return {true, "skipped under 'all': only PoCL CPU devices (" + join(sources) + "; drivers " + join(drivers) +
                      "), the CPU is already used (name opencl:I to use them)"};
}

}  // namespace tilestream::detail
