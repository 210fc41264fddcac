// The parts of the device interface shared by every backend: budget accounting and names.
#include <tilestream/device.hpp>
#include <tilestream/error.hpp>

#include <chrono>

namespace tilestream {

std::string_view to_string(device_kind k) noexcept {
    switch (k) {
        case device_kind::cpu: return "cpu";
        case device_kind::cuda: return "cuda";
        case device_kind::opencl: return "opencl";
    }
    return "?";
}

std::string_view to_string(span_kind k) noexcept {
    switch (k) {
        case span_kind::copy_h2d: return "copy_h2d";
        case span_kind::copy_d2h: return "copy_d2h";
        case span_kind::copy_d2d: return "copy_d2d";
        case span_kind::copy_peer: return "copy_peer";
        case span_kind::kernel: return "kernel";
        case span_kind::host: return "host";
    }
    return "?";
}

double trace_clock_seconds() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

device::~device() = default;

device_buffer device::allocate(std::size_t bytes) {
    const std::size_t budget = info_.budget_bytes;
    std::size_t cur = in_use_.load();
    do {
        if (bytes > budget || cur > budget - bytes)
            throw out_of_budget(info_.id + ": cannot allocate " + format_bytes(bytes) + " (" +
                                std::to_string(bytes) + " bytes): " + format_bytes(cur) +
                                " already in use of a budget of " + format_bytes(budget) + " (" +
                                std::to_string(budget) + " bytes)");
    } while (!in_use_.compare_exchange_weak(cur, cur + bytes));
    void* p = nullptr;
    try {
        p = raw_allocate(bytes == 0 ? 1 : bytes);
    } catch (...) {
        in_use_.fetch_sub(bytes);
        throw;
    }
    const std::size_t now = cur + bytes;
    std::size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return device_buffer(this, p, bytes);
}

void device::release(void* p, std::size_t bytes) noexcept {
    raw_free(p);
    in_use_.fetch_sub(bytes);
}

}  // namespace tilestream
