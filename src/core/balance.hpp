// What the engines' dynamic balance (gemm_engine's units, the task executor's tasks) shares.
#pragma once

namespace tilestream::detail {

/// A device at least this many times slower than another one still taking work could do under
/// 1/(1 + this) of it, and its one unit or task would end last (a CPU beside a GPU, about 50x apart:
/// on the first H100 run, syrk f64 8192 on cuda:0,cpu took 0.184 s with the CPU holding one task of
/// 36, against 0.045 s on the GPU alone). It takes none while that one works; it still takes what
/// a lost device gives back, and all of the work when it is the only one left.
inline constexpr double negligible_device_ratio = 20.0;

}  // namespace tilestream::detail
