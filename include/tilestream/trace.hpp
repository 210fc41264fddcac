// Collects the spans devices report (copies, kernels) and writes them as a Chrome trace
// (chrome://tracing, Perfetto): one track per device stream.
#pragma once

#include <tilestream/device.hpp>

#include <map>
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
    std::string role;       ///< the stream's role when the engine named it ("copy in", "compute", ...)
};

class trace_recorder final : public trace_sink {
public:
    void record(const std::string& device_id, int stream_id, span_kind kind, const std::string& name,
                std::size_t bytes, double flops, double t0, double t1) override;
    void name_stream(const std::string& device_id, int stream_id, const std::string& role) override;
    /// The spans so far, each with its stream's role when one was named.
    std::vector<trace_span> spans() const;
    /// Chrome trace JSON: {"traceEvents": [...]} with one "X" event per span, times in microseconds
    /// from the first span; pid = device, tid = stream, named by process_name and thread_name
    /// metadata events (the device id; the stream's role and number).
    std::string chrome_json() const;
    /// Writes chrome_json() to path atomically; throws file_error naming the path.
    void write_chrome(const std::string& path) const;

private:
    mutable std::mutex mutex_;
    std::vector<trace_span> spans_;
    std::map<std::pair<std::string, int>, std::string> roles_;
};

/// Writes text to path through a temporary file in the same directory and a rename; throws
/// file_error naming the path (no partial file is left). A file it replaces keeps its mode and
/// owner, a symbolic link is followed and kept, a device or FIFO is written in place (as cp does).
void write_text_file_atomically(const std::string& path, const std::string& text);

}  // namespace tilestream
