// Test-only fault injection: per-device counters behind one mutex, skipped by an atomic flag when
// nothing is armed (the normal case), so the hooks cost a load per call.
#include "core/fault_injection.hpp"

#include <tilestream/error.hpp>

#include <atomic>
#include <map>
#include <mutex>

namespace tilestream::fault_injection {
namespace {

struct registry {
    std::mutex mutex;
    std::map<const device*, faults> armed;
    std::atomic<bool> any{false};
};

registry& reg() {
    static registry& r = *new registry;  // never destroyed: runs still in flight at exit read it
    return r;
}

/// Counts one event of a kind armed as "fail after N": true on the (N+1)-th, which disarms it.
bool count_down(long& after) {
    if (after < 0) return false;
    if (after == 0) {
        after = -1;
        return true;
    }
    --after;
    return false;
}

template <class F>
bool with(const device& dev, F&& f) {
    registry& r = reg();
    if (!r.any.load(std::memory_order_relaxed)) return false;
    std::lock_guard lock(r.mutex);
    const auto it = r.armed.find(&dev);
    if (it == r.armed.end()) return false;
    return f(it->second);
}

}  // namespace

void arm(const device& dev, const faults& f) {
    registry& r = reg();
    std::lock_guard lock(r.mutex);
    r.armed[&dev] = f;
    r.any = true;
}

void clear() {
    registry& r = reg();
    std::lock_guard lock(r.mutex);
    r.armed.clear();
    r.any = false;
}

void on_allocate(const device& dev) {
    if (with(dev, [](faults& f) {
            if (f.fail_allocations <= 0) return false;
            if (f.allocations_before_failing > 0) {
                --f.allocations_before_failing;
                return false;
            }
            --f.fail_allocations;
            return true;
        }))
        throw device_error(dev.id() + ": allocation failed (injected: the memory is taken, though the budget has room)");
}

bool unit_fails(const device& dev) {
    return with(dev, [](faults& f) { return count_down(f.fail_after_units); });
}

bool h2d_fails(const device& dev) {
    return with(dev, [](faults& f) { return count_down(f.fail_h2d_after); });
}

bool d2h_fails(const device& dev) {
    return with(dev, [](faults& f) { return count_down(f.fail_d2h_after); });
}

namespace {
std::mutex slowdown_mutex;
std::vector<std::pair<std::string, double>> slowdowns;  // guarded by slowdown_mutex
}  // namespace

slowdown::slowdown(std::vector<std::pair<std::string, double>> seconds_by_device_id) {
    std::lock_guard lock(slowdown_mutex);
    slowdowns = std::move(seconds_by_device_id);
}

slowdown::~slowdown() {
    std::lock_guard lock(slowdown_mutex);
    slowdowns.clear();
}

double slowdown_seconds(const device& dev) {
    std::lock_guard lock(slowdown_mutex);
    for (const auto& [id, seconds] : slowdowns)
        if (id == dev.id()) return seconds;
    return 0;
}

}  // namespace tilestream::fault_injection
