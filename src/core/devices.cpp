// Device specs, discovery of what is present, and opening the devices a spec names.
#include "backends/backends.hpp"
#include "core/device_identity.hpp"
#include "core/message_text.hpp"
#include "core/opencl_icds.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <sched.h>
#include <unistd.h>

namespace tilestream {
namespace {

int parse_positive(std::string_view s, const std::string& item, const char* what) {
    int v = 0;
    const auto* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, v);
    if (s.empty() || ec != std::errc() || p != end || v < 0)
        throw invalid_argument("bad device '" + item + "': " + what + " '" + std::string(s) +
                               "' is not a non-negative integer");
    return v;
}

std::string trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t");
    return std::string(s.substr(b, e - b + 1));
}

int count_cpu_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

std::string read_cpu_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) return trim(line.substr(colon + 1));
        }
    return "CPU";
}

}  // namespace

std::vector<device_request> parse_device_spec(std::string_view spec) {
    std::vector<device_request> out;
    const std::string all(spec);
    if (trim(all).empty()) throw invalid_argument("empty device spec (examples: auto, cpu, cpu:2, cuda:0, all)");
    // Specs are plain ASCII: other bytes (an escape sequence pasted by mistake) are refused at once,
    // shown as \xNN, and never echoed raw into later messages.
    for (const char c : all)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
            throw invalid_argument("bad device spec " + detail::quote_text(all) +
                                   ": only printable ASCII is allowed (examples: cpu, cpu:2, cuda:0@4GiB, all)");
    std::size_t start = 0;
    while (start <= all.size()) {
        const std::size_t comma = all.find(',', start);
        const std::string item = trim(std::string_view(all).substr(
            start, comma == std::string::npos ? std::string::npos : comma - start));
        start = comma == std::string::npos ? all.size() + 1 : comma + 1;
        if (item.empty()) throw invalid_argument("empty item in device spec '" + all + "'");
        device_request r;
        r.text = item;
        std::string body = item;
        if (const auto at = item.find('@'); at != std::string::npos) {
            body = item.substr(0, at);
            try {
                r.budget = parse_bytes(item.substr(at + 1));
            } catch (const invalid_argument& e) {
                throw invalid_argument("bad device '" + item + "': " + e.what());
            }
        }
        std::string lower = body;
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        if (lower == "all") {
            r.kind = device_request::what::all;
        } else if (lower == "auto") {
            r.kind = device_request::what::automatic;
        } else if (lower == "cpu") {
            r.kind = device_request::what::cpu;
        } else if (lower.rfind("cpu:", 0) == 0) {
            r.kind = device_request::what::cpu;
            r.count = parse_positive(std::string_view(lower).substr(4), item, "CPU device count");
            if (r.count < 1) throw invalid_argument("bad device '" + item + "': cpu:N needs N >= 1");
        } else if (lower.rfind("cuda:", 0) == 0) {
            r.kind = device_request::what::cuda;
            const std::string rest = lower.substr(5);
            const auto x = rest.find('x');
            r.index = parse_positive(std::string_view(rest).substr(0, x), item, "GPU index");
            if (x != std::string::npos) {
                r.slices = parse_positive(std::string_view(rest).substr(x + 1), item, "slice count");
                if (r.slices < 1) throw invalid_argument("bad device '" + item + "': cuda:IxK needs K >= 1");
            }
        } else if (lower.rfind("opencl:", 0) == 0) {
            r.kind = device_request::what::opencl;
            const std::string rest = lower.substr(7);
            const auto x = rest.find('x');
            r.index = parse_positive(std::string_view(rest).substr(0, x), item, "OpenCL device index");
            if (x != std::string::npos) {
                r.slices = parse_positive(std::string_view(rest).substr(x + 1), item, "slice count");
                if (r.slices < 1) throw invalid_argument("bad device '" + item + "': opencl:IxK needs K >= 1");
            }
        } else {
            throw invalid_argument("unknown device '" + item + "' (expected auto, all, cpu, cpu:N, cuda:I, "
                                   "cuda:IxK, opencl:I or opencl:IxK, optionally @budget); devices present: " +
                                   describe_present_devices());
        }
        if (r.budget && *r.budget == 0) throw invalid_argument("bad device '" + item + "': zero budget");
        out.push_back(std::move(r));
    }
    if (out.size() > 1)
        for (const auto& r : out)
            if (r.kind == device_request::what::automatic)
                throw invalid_argument("device spec '" + all + "': 'auto' stands alone (it picks the devices); name "
                                       "devices instead to combine them, e.g. cuda:0,cpu");
    return out;
}

namespace {
system_inventory& inventory_storage() {
    static system_inventory& inv = *new system_inventory;  // never destroyed: read by runs in flight at exit
    return inv;
}
/// The CPU only: what a spec of CPU items needs. CUDA and OpenCL discovery load their backend
/// modules and vendor libraries (the CUDA runtime and cuBLAS map hundreds of MiB; PoCL spawns its
/// scheduler threads and loads LLVM), so each waits until something asks for its devices.
const system_inventory& host_inventory() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto& inv = inventory_storage();
        inv.cpu_cores = count_cpu_cores();
        inv.cpu_name = read_cpu_name();
        const long pages = sysconf(_SC_PHYS_PAGES);
        const long page = sysconf(_SC_PAGESIZE);
        inv.host_memory = pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : 0;
    });
    return inventory_storage();
}

/// The CPU and the CUDA GPUs.
const system_inventory& cuda_inventory() {
    host_inventory();
    static std::once_flag once;
    std::call_once(once, [] {
        auto cuda = backends::discover_cuda();
        inventory_storage().gpus = std::move(cuda.gpus);
        inventory_storage().cuda_status = std::move(cuda.status);
    });
    return inventory_storage();
}
}  // namespace

namespace {
/// Whether `all` discovers OpenCL: read from the ICD loader's files alone, once per process.
const detail::opencl_all_decision& opencl_under_all() {
    static const detail::opencl_all_decision d =
        detail::decide_opencl_under_all(detail::opencl_icd_environment::of_process());
    return d;
}
}  // namespace

const system_inventory& inventory() {
    cuda_inventory();
    static std::once_flag once;
    std::call_once(once, [] {
        if (opencl_under_all().skip) inventory_storage().opencl_under_all = opencl_under_all().reason;
        inventory_storage().opencl_under_all_decision = opencl_under_all().reason;
        auto opencl = backends::discover_opencl();
        inventory_storage().opencl_devices = std::move(opencl.devices);
        inventory_storage().opencl_status = std::move(opencl.status);
    });
    return inventory_storage();
}

std::string describe_present_devices() {
    const auto& inv = inventory();
    std::ostringstream s;
    s << "cpu (" << inv.cpu_name << ", " << inv.cpu_cores << " cores, " << format_bytes(inv.host_memory)
      << ")";
    if (inv.gpus.empty()) {
        s << "; no CUDA GPU (" << inv.cuda_status << ")";
    } else {
        for (const auto& g : inv.gpus)
            s << "; " << g.id << " (" << g.name << ", " << format_bytes(g.memory_bytes) << ")";
    }
    if (inv.opencl_devices.empty()) s << "; no OpenCL device (" << inv.opencl_status << ")";
    for (const auto& d : inv.opencl_devices)
        s << "; " << d.id << " (" << d.name << ", " << d.device_type << (d.emulated ? ", emulated" : "") << ")";
    return s.str();
}

namespace {
/// The most threads one CPU device may have, and the most CPU devices one spec may open.
int max_cpu_threads_per_device() { return std::max(16, 4 * host_inventory().cpu_cores); }
}  // namespace

std::vector<std::unique_ptr<device>> open_devices(std::string_view spec, const open_options& opt) {
    const auto requests = parse_device_spec(spec);
    const auto names = [&](device_request::what kind) {
        return std::any_of(requests.begin(), requests.end(), [&](const device_request& r) { return r.kind == kind; });
    };
    // `all` takes OpenCL GPUs only: where every OpenCL driver is PoCL with CPU devices, it skips
    // discovering them (libOpenCL, PoCL and LLVM, ~210 MiB, for no device it would take).
    const bool all = names(device_request::what::all) || names(device_request::what::automatic);
    const bool opencl = names(device_request::what::opencl) || (all && !opencl_under_all().skip);
    const auto& inv = opencl ? inventory() : all || names(device_request::what::cuda) ? cuda_inventory() : host_inventory();
    if (opt.cpu_threads < 0) throw invalid_argument("--cpu-threads must be >= 1");
    // More threads or CPU devices than this only oversubscribes the cores (and thousands of
    // threads exhaust memory); the floor keeps multi-device runs possible on small machines.
    const int cpu_limit = max_cpu_threads_per_device();
    if (opt.cpu_threads > cpu_limit)
        throw invalid_argument("--cpu-threads " + std::to_string(opt.cpu_threads) + " is above the limit of " +
                               std::to_string(cpu_limit) + " threads per CPU device (4 x " +
                               std::to_string(inv.cpu_cores) + " cores, at least 16)");
    const int cpu_devices = count_cpu_devices(requests);
    if (cpu_devices > cpu_limit)
        throw invalid_argument("device spec '" + std::string(spec) + "' asks for " + std::to_string(cpu_devices) +
                               " CPU devices, above the limit of " + std::to_string(cpu_limit) + " (4 x " +
                               std::to_string(inv.cpu_cores) + " cores, at least 16)");
    if (opt.memory_budget && *opt.memory_budget == 0) throw invalid_argument("memory budget must be > 0");
    // Every GPU once (an item per GPU, cuda:IxK for slices); all CPU devices split the host.
    check_distinct_devices(requests, inv.gpus);
    std::vector<std::unique_ptr<device>> out;
    int next_cpu = 0;

    const auto open_cpus = [&](int count, std::optional<std::size_t> budget) {
        for (int i = 0; i < count; ++i) {
            backends::cpu_device_config cfg;
            cfg.index = next_cpu++;
            // Split the cores over the spec's CPU devices: the first (cores % count) take one more.
            const int n = cpu_devices;
            cfg.threads = opt.cpu_threads > 0
                              ? opt.cpu_threads
                              : std::max(1, inv.cpu_cores / n + (cfg.index < inv.cpu_cores % n ? 1 : 0));
            cfg.memory = inv.host_memory / std::size_t(n);
            cfg.budget = budget ? *budget : (opt.memory_budget ? *opt.memory_budget : cfg.memory);
            cfg.budget_given = budget || opt.memory_budget;
            cfg.name = inv.cpu_name;
            out.push_back(backends::make_cpu_device(cfg));
        }
    };
    const auto open_gpu = [&](const device_request& r, std::optional<std::size_t> budget) {
        if (find_gpu(inv.gpus, r.index) == nullptr)  // ordinals, not positions: some may be left out
            throw invalid_argument("unknown device '" + r.text + "': devices present: " +
                                   describe_present_devices());
        for (int s = 0; s < r.slices; ++s)
            out.push_back(backends::make_cuda_device(r.index, s, r.slices, budget));
    };
    const auto open_opencl = [&](const device_request& r, std::optional<std::size_t> budget) {
        if (r.index >= static_cast<int>(inv.opencl_devices.size()))
            throw invalid_argument("unknown device '" + r.text + "': devices present: " + describe_present_devices());
        for (int s = 0; s < r.slices; ++s)
            out.push_back(backends::make_opencl_device(r.index, s, r.slices, budget));
    };
    // `all` takes an OpenCL GPU unless CUDA already took it (same vendor and model, counted);
    // CPU OpenCL devices are emulated and only used when named.
    const auto opencl_gpus_for_all = [&] {
        std::vector<int> taken;
        std::vector<bool> cuda_used(inv.gpus.size(), false);
        for (const auto& d : inv.opencl_devices) {
            if (d.emulated || d.device_type != "GPU") continue;
            bool through_cuda = false;
            for (std::size_t g = 0; g < inv.gpus.size() && !through_cuda; ++g)
                if (!cuda_used[g] && inv.gpus[g].name == d.name && d.vendor.find("NVIDIA") != std::string::npos)
                    cuda_used[g] = through_cuda = true;
            if (!through_cuda) taken.push_back(d.physical_index);
        }
        return taken;
    };

    // What `all` and `auto` open besides the CPU: every CUDA GPU, and the OpenCL GPUs not reached
    // through CUDA (skipped: not read, as another thread may be discovering them).
    const auto open_accelerators = [&](std::optional<std::size_t> budget) {
        for (const auto& g : inv.gpus) {
            device_request one;
            one.kind = device_request::what::cuda;
            one.index = g.physical_index;
            one.text = g.id;
            open_gpu(one, budget);
        }
        for (int index : opencl ? opencl_gpus_for_all() : std::vector<int>()) {
            device_request one;
            one.kind = device_request::what::opencl;
            one.index = index;
            one.text = "opencl:" + std::to_string(index);
            open_opencl(one, budget);
        }
    };

    for (const auto& r : requests) {
        const auto budget = r.budget ? r.budget : opt.memory_budget;
        switch (r.kind) {
            case device_request::what::cpu: open_cpus(r.count, budget); break;
            case device_request::what::cuda: open_gpu(r, budget); break;
            case device_request::what::opencl: open_opencl(r, budget); break;
            case device_request::what::all:
                open_accelerators(budget);
                open_cpus(1, budget);
                break;
            case device_request::what::automatic: {
                // The accelerators, else the CPU: a CPU beside a GPU 50-500x faster adds little and
                // costs its share of the host's cores and memory bandwidth (on an H200 host, GEMM f64
                // 16384 on cuda:0,cpu took 0.38 s against 0.22 s on cuda:0, the CPU taking no unit).
                const std::size_t before = out.size();
                open_accelerators(budget);
                if (out.size() == before) open_cpus(1, budget);
                break;
            }
        }
    }
    return out;
}

}  // namespace tilestream
