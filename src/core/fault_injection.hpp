// Test-only fault injection (not part of the public headers): makes a device fail the way a real
// one does, through its streams and its allocations, so the engines' recovery can be tested on CPU
// devices. Faults are armed per device object and are one-shot: each fires once, then the device
// works normally again (a run that lost it can be followed by a run that uses it).
#pragma once

#include <tilestream/device.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tilestream::fault_injection {

/// What to break on one device. Counts start when armed; -1 / 0 leave that kind unarmed.
struct faults {
    /// The unit (GEMM) or iteration (Jacobi) after this many the device starts fails: its first
    /// kernel runs (so C is partly written in place), then the compute stream reports an error.
    long fail_after_units = -1;
    /// The next this-many allocations (device::allocate) fail as if the memory were taken by
    /// something else, though the budget has room (device_error).
    int fail_allocations = 0;
    /// Allocations that succeed before those fail (a device that runs out part way).
    int allocations_before_failing = 0;
    /// The copy to the device after this many (GEMM loads) fails: nothing is copied and the
    /// copy stream reports an error.
    long fail_h2d_after = -1;
    /// The copy to the host after this many (GEMM C blocks) fails half way: it writes garbage
    /// over the host C block first, then the copy stream reports an error.
    long fail_d2h_after = -1;
};

/// Arms `f` on `dev` (replacing what was armed there).
void arm(const device& dev, const faults& f);
/// Disarms every device.
void clear();

// ---- hooks the engines call (cheap when nothing is armed) ----
/// Throws device_error when an allocation on dev is due to fail.
void on_allocate(const device& dev);
/// True when the unit dev starts now is due to fail (counts the unit).
bool unit_fails(const device& dev);
/// True when this copy to the device (h2d) or to the host (d2h) on dev is due to fail.
bool h2d_fails(const device& dev);
bool d2h_fails(const device& dev);

/// Slows devices down for as long as it lives: after each GEMM kernel step the compute stream of
/// the device with that id idles for the given seconds (scheduling and tail-balance tests).
class slowdown {
public:
    explicit slowdown(std::vector<std::pair<std::string, double>> seconds_by_device_id);
    slowdown(const slowdown&) = delete;
    slowdown& operator=(const slowdown&) = delete;
    ~slowdown();
};
/// The seconds a slowdown asks of this device now (0 when none).
double slowdown_seconds(const device& dev);

}  // namespace tilestream::fault_injection
