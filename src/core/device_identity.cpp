// Duplicate-device detection for device specs (see device_identity.hpp).
#include "core/device_identity.hpp"

#include <tilestream/error.hpp>

#include <map>
#include <string>

namespace tilestream {

const device_info* find_gpu(const std::vector<device_info>& gpus, int ordinal) {
    for (const auto& g : gpus)
        if (g.physical_index == ordinal) return &g;
    return nullptr;
}

void check_distinct_devices(const std::vector<device_request>& requests,
                            const std::vector<device_info>& gpus) {
    std::map<int, const device_request*> opened;         // GPU ordinal -> the item that opens it
    std::map<int, const device_request*> opened_opencl;  // OpenCL index -> the item that opens it
    const auto open = [&](int ordinal, const device_request& r) {
        const std::string gpu = "cuda:" + std::to_string(ordinal);
        const auto [it, fresh] = opened.emplace(ordinal, &r);
        if (!fresh)
            throw invalid_argument("device spec opens " + gpu + " twice (items '" +
                                   it->second->text + "' and '" + r.text +
                                   "'): name each GPU once; for several logical devices on "
                                   "one GPU use " + gpu + "xK");
    };
    for (const auto& r : requests) {
        switch (r.kind) {
            case device_request::what::cuda: open(r.index, r); break;
            case device_request::what::all:
            case device_request::what::automatic:
                for (const auto& g : gpus) open(g.physical_index, r);
                break;
            case device_request::what::opencl: {
                // The same OpenCL device twice would get two budgets from one memory and one id.
                const auto [it, fresh] = opened_opencl.emplace(r.index, &r);
                if (!fresh)
                    throw invalid_argument("device spec opens opencl:" + std::to_string(r.index) + " twice (items '" +
                                           it->second->text + "' and '" + r.text +
                                           "'): name each OpenCL device once; for several logical devices "
                                           "use opencl:" + std::to_string(r.index) + "xK");
                break;
            }
            case device_request::what::cpu: break;  // CPU devices split the cores: never a duplicate
        }
    }
}

int count_cpu_devices(const std::vector<device_request>& requests) {
    int n = 0;
    for (const auto& r : requests) {
        if (r.kind == device_request::what::cpu) n += r.count;
        if (r.kind == device_request::what::all || r.kind == device_request::what::automatic) n += 1;
    }
    return n;
}

}  // namespace tilestream
