// Collects the spans devices report (copies, kernels) and writes them as a Chrome trace
// (chrome://tracing, Perfetto): one track per device stream.
#pragma once

#include <tilestream/device.hpp>

#include <mutex>
#include <string>
#include <vector>

namespace tilestream {

struct trace_span {
    std::string device;
    int stream = 0;
    span_kind kind = span_kind::host;
    std::string name;
    std::size_t bytes = 0;
    double flops = 0;
    double t0 = 0, t1 = 0;  ///< seconds on trace_clock_seconds()
};

class trace_recorder final : public trace_sink {
public:
    void record(const std::string& device_id, int stream_id, span_kind kind, const std::string& name,
                std::size_t bytes, double flops, double t0, double t1) override;
    std::vector<trace_span> spans() const;
    /// Chrome trace JSON: {"traceEvents": [...]} with one "X" event per span, times in microseconds
    /// from the first span; pid = device, tid = stream.
    std::string chrome_json() const;
    /// Writes chrome_json() to path atomically; throws file_error naming the path.
    void write_chrome(const std::string& path) const;

private:
    mutable std::mutex mutex_;
    std::vector<trace_span> spans_;
};

/// Writes text to path through a temporary file in the same directory and a rename; throws
/// file_error naming the path (no partial file is left).
void write_text_file_atomically(const std::string& path, const std::string& text);

}  // namespace tilestream
