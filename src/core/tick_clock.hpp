// A clock for timing short calls on the calling thread (the direct path's gemm_report::seconds):
// the x86 time-stamp counter read directly (about 20 ns, where std::chrono::steady_clock's vDSO
// read costs about 50 ns on the 2-core AVX-512 VM, two of them a third of a small call's fixed
// cost), used only where the kernel keeps its own time with it (clocksource "tsc": invariant and
// synchronised across cores), its rate calibrated once against steady_clock; steady_clock elsewhere.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace tilestream::detail {

class tick_clock {
public:
    /// A point in ticks.
    static std::uint64_t now() noexcept {
#if defined(__x86_64__)
        if (rate().tsc) return __rdtsc();
#endif
        return std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    /// The tick of steady_clock time `t`, for a deadline checked with `now() >= at(t)`: never 0
    /// (free for "none"), now() when `t` has passed, the largest tick when beyond reach.
    static std::uint64_t at(std::chrono::steady_clock::time_point t) noexcept {
        const std::uint64_t ticks_now = std::max<std::uint64_t>(now(), 1);
        const double ahead = std::chrono::duration<double>(t - std::chrono::steady_clock::now()).count();
        if (!(ahead > 0)) return ticks_now;
        const double ticks = ahead / rate().seconds_per_tick;
        const auto room = std::numeric_limits<std::uint64_t>::max() - ticks_now;
        return ticks >= double(room) ? std::numeric_limits<std::uint64_t>::max() : ticks_now + std::uint64_t(ticks);
    }
    /// Seconds from `from` to `to` (two now()s).
    static double seconds(std::uint64_t from, std::uint64_t to) noexcept {
        return to > from ? double(to - from) * rate().seconds_per_tick : 0.0;
    }

private:
    struct tick_rate {
        bool tsc = false;
        double seconds_per_tick = double(std::chrono::steady_clock::period::num) / std::chrono::steady_clock::period::den;
    };
    static const tick_rate& rate() noexcept {
        static const tick_rate r = calibrate();
        return r;
    }
    static tick_rate calibrate() noexcept {
        tick_rate r;
#if defined(__x86_64__)
        std::string source;
        try {
            std::ifstream("/sys/devices/system/clocksource/clocksource0/current_clocksource") >> source;
        } catch (...) {
        }
        if (source != "tsc") return r;
        // About 2 ms against steady_clock: a read's jitter (tens of ns) is then ~1e-5 of the rate.
        using clock = std::chrono::steady_clock;
        const auto t0 = clock::now();
        const std::uint64_t c0 = __rdtsc();
        auto t1 = t0;
        while (t1 - t0 < std::chrono::milliseconds(2)) t1 = clock::now();
        const std::uint64_t c1 = __rdtsc();
        if (c1 <= c0) return r;
        r.tsc = true;
        r.seconds_per_tick = std::chrono::duration<double>(t1 - t0).count() / double(c1 - c0);
#endif
        return r;
    }
};

}  // namespace tilestream::detail
