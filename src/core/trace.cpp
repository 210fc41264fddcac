// Span collection and the Chrome trace format; atomic text-file writes.
#include <tilestream/error.hpp>
#include <tilestream/trace.hpp>

#include "core/json_text.hpp"
#include "core/output_files.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include <fcntl.h>
#include <unistd.h>

namespace tilestream {

void trace_recorder::record(const std::string& device_id, int stream_id, span_kind kind, const std::string& name,
                            std::size_t bytes, double flops, double t0, double t1) {
    std::lock_guard lock(mutex_);
    spans_.push_back({device_id, stream_id, kind, name, bytes, flops, t0, t1});
}

void trace_recorder::name_stream(const std::string& device_id, int stream_id, const std::string& role) {
    std::lock_guard lock(mutex_);
    roles_[{device_id, stream_id}] = role;
}

std::vector<trace_span> trace_recorder::spans() const {
    std::lock_guard lock(mutex_);
    std::vector<trace_span> out = spans_;
    for (auto& s : out)
        if (const auto it = roles_.find({s.device, s.stream}); it != roles_.end()) s.role = it->second;
    return out;
}

std::string trace_recorder::chrome_json() const {
    const auto spans = this->spans();
    double origin = spans.empty() ? 0 : spans.front().t0;
    for (const auto& s : spans) origin = std::min(origin, s.t0);
    std::map<std::string, int> pids;
    for (const auto& s : spans) pids.emplace(s.device, 0);
    int next = 1;
    for (auto& [name, pid] : pids) pid = next++;
    detail::json events = detail::json::array();
    for (const auto& [name, pid] : pids)
        events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
    std::map<std::pair<std::string, int>, std::string> lanes;
    for (const auto& s : spans) lanes.emplace(std::make_pair(s.device, s.stream), s.role);
    for (const auto& [key, role] : lanes)
        if (!role.empty())
            events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pids[key.first]}, {"tid", key.second},
                              {"args", {{"name", role}}}});
    for (const auto& s : spans) {
        detail::json args = detail::json::object();
        if (s.bytes) args["bytes"] = s.bytes;
        if (s.flops > 0) args["flops"] = s.flops;
        events.push_back({{"ph", "X"},
                          {"name", s.name},
                          {"cat", std::string(to_string(s.kind))},
                          {"pid", pids[s.device]},
                          {"tid", s.stream},
                          {"ts", (s.t0 - origin) * 1e6},
                          {"dur", std::max(0.0, s.t1 - s.t0) * 1e6},
                          {"args", std::move(args)}});
    }
    return detail::json_line(detail::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}});
}

void trace_recorder::write_chrome(const std::string& path) const { write_text_file_atomically(path, chrome_json()); }

void write_text_file_atomically(const std::string& path, const std::string& text) {
    detail::output_file out(path);
    out.write(text.data(), text.size());
    out.commit();
}

}  // namespace tilestream
