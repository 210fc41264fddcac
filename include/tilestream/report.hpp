// Showing what happened: scaling tables and plots, timelines of copies and kernels (SVG), and
// reading a saved Chrome trace back.
#pragma once

#include <tilestream/trace.hpp>

#include <string>
#include <vector>

namespace tilestream {

/// One line of a scaling study: the same problem on one device set.
struct scaling_row {
    std::string devices;        ///< the spec, e.g. "cpu:2"
    int device_count = 1;
    double seconds = 0;         ///< median
    double rate = 0;            ///< GFLOP/s (gemm) or GLUP/s (jacobi)
    double speedup = 1;         ///< against the first row (strong) or rate ratio (weak)
    double efficiency = 1;      ///< speedup / (device_count / first row's device_count)
    double bytes_moved = 0;     ///< host<->device (gemm) or halo bytes (jacobi)
    double cache_hit_rate = -1; ///< -1 when not applicable
    std::string problem;        ///< e.g. "4096x4096x4096 f32" (grows in weak scaling)
};

/// Fills speedup and efficiency from seconds (strong: same problem) or rates (weak: the problem
/// grows with the devices, so speedup is the rate ratio).
void compute_scaling(std::vector<scaling_row>& rows, bool weak);

/// A fixed-width text table with the columns devices, seconds, rate, speedup, efficiency, bytes
/// moved and cache hit rate.
std::string scaling_table(const std::vector<scaling_row>& rows, const std::string& rate_unit);
std::string scaling_json(const std::vector<scaling_row>& rows, const std::string& rate_unit);
/// Speedup (x) and efficiency (fraction of ideal) against the count of devices (or ranks: say so in
/// `count_label`), with the ideal line (SVG); the legend gives each row's rate in `rate_unit`.
std::string scaling_svg(const std::vector<scaling_row>& rows, const std::string& title,
                        const std::string& rate_unit = "", const std::string& count_label = "devices");

/// Copies and kernels per device and stream on a time axis (SVG), so overlap and idle gaps show.
std::string timeline_svg(const std::vector<trace_span>& spans, const std::string& title);

/// Reads a Chrome trace written by trace_recorder::write_chrome back into spans; throws
/// file_error naming the file when it is not such a trace.
std::vector<trace_span> read_chrome_trace(const std::string& path);

}  // namespace tilestream
