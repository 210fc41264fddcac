// What the engines' dynamic balance (gemm_engine's units, the task executor's tasks) shares.
#pragma once

namespace tilestream::detail {

/// A device at least this many times slower than another one still taking work could do under
/// 1/(1 + this) of it, and its one unit or task would end last (a CPU beside a GPU, about 50x apart:
/// on the first H100 run, syrk f64 8192 on cuda:0,cpu took 0.184 s with the CPU holding one task of
/// 36, against 0.045 s on the GPU alone). It takes none while that one works; it still takes what
/// a lost device gives back, and all of the work when it is the only one left.
inline constexpr double negligible_device_ratio = 20.0;

/// How a peer compares with the device deciding whether to take work, by rates (higher: faster).
/// A far faster peer makes the device decline; a far slower one takes no work while the device
/// works, so it does not count as one that would finish what is left (judged by its estimate, a
/// peer that had not run once made a fast device decline and hand it tasks: an H200 host's 16-core
/// CPU beside PoCL scripted 30x slower, PoCL took 2 of 66).
enum class peer_speed { far_slower, comparable, far_faster };
inline peer_speed compare_peer(double my_rate, double peer_rate) {
    if (peer_rate >= negligible_device_ratio * my_rate) return peer_speed::far_faster;
    if (my_rate >= negligible_device_ratio * peer_rate) return peer_speed::far_slower;
    return peer_speed::comparable;
}
/// The same by the time each takes per unit of work (lower: faster).
inline peer_speed compare_peer_by_time(double my_seconds, double peer_seconds) {
    return compare_peer(peer_seconds, my_seconds);
}

}  // namespace tilestream::detail
