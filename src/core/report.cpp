// Scaling tables and SVG pictures (scaling plot, timeline), and a small JSON reader for traces.
#include <tilestream/error.hpp>
#include <tilestream/report.hpp>

#include "core/input_files.hpp"
#include "core/json_text.hpp"
#include "core/message_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

namespace tilestream {

void compute_scaling(std::vector<scaling_row>& rows, bool weak) {
    if (rows.empty()) return;
    const scaling_row base = rows.front();
    for (auto& r : rows) {
        r.speedup = weak ? (base.rate > 0 ? r.rate / base.rate : 0) : (r.seconds > 0 ? base.seconds / r.seconds : 0);
        const double scale = double(r.device_count) / double(std::max(1, base.device_count));
        r.efficiency = scale > 0 ? r.speedup / scale : 0;
    }
}

std::string scaling_table(const std::vector<scaling_row>& rows, const std::string& unit) {
    std::ostringstream s;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-22s %7s %10s %10s %8s %10s %14s %9s  %s\n", "devices", "count", "seconds",
                  unit.c_str(), "speedup", "efficiency", "bytes moved", "cache hit", "problem");
    s << buf;
    for (const auto& r : rows) {
        char hit[32] = "-";
        if (r.cache_hit_rate >= 0) std::snprintf(hit, sizeof hit, "%.1f%%", 100 * r.cache_hit_rate);
        std::snprintf(buf, sizeof buf, "%-22s %7d %10.4f %10.2f %8.3f %9.1f%% %14.0f %9s  %s\n", r.devices.c_str(),
                      r.device_count, r.seconds, r.rate, r.speedup, 100 * r.efficiency, r.bytes_moved, hit,
                      r.problem.c_str());
        s << buf;
    }
    return s.str();
}

std::string scaling_json(const std::vector<scaling_row>& rows, const std::string& unit) {
    detail::json items = detail::json::array();
    for (const auto& r : rows) {
        detail::json o = {{"devices", r.devices},     {"device_count", r.device_count},
                          {"seconds", r.seconds},     {unit == "GFLOP/s" ? "gflops" : "glups", r.rate},
                          {"speedup", r.speedup},     {"efficiency", r.efficiency},
                          {"bytes_moved", r.bytes_moved}, {"problem", r.problem}};
        if (r.cache_hit_rate >= 0) o["cache_hit_rate"] = r.cache_hit_rate;
        items.push_back(std::move(o));
    }
    return detail::json_line(items);
}

namespace {

std::string xml_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        switch (c) {
            case '&': r += "&amp;"; break;
            case '<': r += "&lt;"; break;
            case '>': r += "&gt;"; break;
            case '"': r += "&quot;"; break;
            default: r += c;
        }
    }
    return r;
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

/// A "nice" axis step for a range.
double nice_step(double range, int ticks) {
    const double raw = range / std::max(1, ticks);
    const double mag = std::pow(10.0, std::floor(std::log10(raw > 0 ? raw : 1)));
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (raw <= m * mag) return m * mag;
    return 10 * mag;
}

}  // namespace

std::string scaling_svg(const std::vector<scaling_row>& rows, const std::string& title, const std::string& rate_unit,
                        const std::string& count_label) {
    const int W = 760, H = 440, L = 70, R = 210, T = 50, B = 60;
    const int pw = W - L - R, ph = H - T - B;
    int max_dev = 1;
    double max_y = 1.0;
    for (const auto& r : rows) {
        max_dev = std::max(max_dev, r.device_count);
        max_y = std::max({max_y, r.speedup, r.efficiency});
    }
    const double base_dev = rows.empty() ? 1 : rows.front().device_count;
    max_y = std::max(max_y, double(max_dev) / base_dev) * 1.1;
    const auto X = [&](double d) { return L + (max_dev > 1 ? (d - 1) / double(max_dev - 1) : 0.5) * pw; };
    const auto Y = [&](double v) { return T + ph - v / max_y * ph; };
    std::ostringstream s;
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    s << "<rect x=\"0\" y=\"0\" width=\"" << W << "\" height=\"" << H << "\" fill=\"white\"/>\n";
    s << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title) << "</text>\n";
    // Axes and grid.
    const double step = nice_step(max_y, 6);
    for (double v = 0; v <= max_y + 1e-9; v += step) {
        s << "<line x1=\"" << L << "\" y1=\"" << fmt("%.1f", Y(v)) << "\" x2=\"" << L + pw << "\" y2=\"" << fmt("%.1f", Y(v))
          << "\" stroke=\"#e0e0e0\"/>\n";
        s << "<text x=\"" << L - 6 << "\" y=\"" << fmt("%.1f", Y(v) + 4) << "\" text-anchor=\"end\">" << fmt("%g", v) << "</text>\n";
    }
    for (int d = 1; d <= max_dev; ++d)
        s << "<text x=\"" << fmt("%.1f", X(d)) << "\" y=\"" << T + ph + 18 << "\" text-anchor=\"middle\">" << d << "</text>\n";
    s << "<line x1=\"" << L << "\" y1=\"" << T + ph << "\" x2=\"" << L + pw << "\" y2=\"" << T + ph << "\" stroke=\"black\"/>\n";
    s << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << T + ph << "\" stroke=\"black\"/>\n";
    s << "<text x=\"" << L + pw / 2 << "\" y=\"" << H - 18 << "\" text-anchor=\"middle\">" << xml_escape(count_label)
      << " (count)</text>\n";
    s << "<text x=\"18\" y=\"" << T + ph / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " << T + ph / 2
      << ")\">speedup (x, against the first row) and efficiency (fraction of ideal)</text>\n";
    // Ideal speedup: device_count / base.
    s << "<line x1=\"" << fmt("%.1f", X(1)) << "\" y1=\"" << fmt("%.1f", Y(1.0 / base_dev)) << "\" x2=\"" << fmt("%.1f", X(max_dev))
      << "\" y2=\"" << fmt("%.1f", Y(max_dev / base_dev)) << "\" stroke=\"#999\" stroke-dasharray=\"6 4\"/>\n";
    const auto series = [&](auto value, const char* colour) {
        std::string pts;
        for (const auto& r : rows) pts += fmt("%.1f", X(r.device_count)) + "," + fmt("%.1f", Y(value(r))) + " ";
        s << "<polyline points=\"" << pts << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
        for (const auto& r : rows)
            s << "<circle cx=\"" << fmt("%.1f", X(r.device_count)) << "\" cy=\"" << fmt("%.1f", Y(value(r)))
              << "\" r=\"4\" fill=\"" << colour << "\"><title>" << xml_escape(r.devices) << ": " << fmt("%.3f", value(r))
              << "</title></circle>\n";
    };
    series([](const scaling_row& r) { return r.speedup; }, "#1f77b4");
    series([](const scaling_row& r) { return r.efficiency; }, "#d62728");
    const int lx = L + pw + 20;
    s << "<line x1=\"" << lx << "\" y1=\"" << T + 10 << "\" x2=\"" << lx + 24 << "\" y2=\"" << T + 10 << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
      << "<text x=\"" << lx + 30 << "\" y=\"" << T + 14 << "\">speedup (x)</text>\n";
    s << "<line x1=\"" << lx << "\" y1=\"" << T + 30 << "\" x2=\"" << lx + 24 << "\" y2=\"" << T + 30 << "\" stroke=\"#d62728\" stroke-width=\"2\"/>"
      << "<text x=\"" << lx + 30 << "\" y=\"" << T + 34 << "\">efficiency (fraction)</text>\n";
    s << "<line x1=\"" << lx << "\" y1=\"" << T + 50 << "\" x2=\"" << lx + 24 << "\" y2=\"" << T + 50 << "\" stroke=\"#999\" stroke-dasharray=\"6 4\"/>"
      << "<text x=\"" << lx + 30 << "\" y=\"" << T + 54 << "\">ideal speedup (x)</text>\n";
    int ly = T + 84;
    if (!rate_unit.empty()) {
        s << "<text x=\"" << lx << "\" y=\"" << ly << "\" font-size=\"11\">rate (" << xml_escape(rate_unit) << "):</text>\n";
        ly += 15;
    }
    for (const auto& r : rows) {
        s << "<text x=\"" << lx << "\" y=\"" << ly << "\" font-size=\"11\">" << xml_escape(r.devices) << ": "
          << fmt("%.2f", r.rate) << (rate_unit.empty() ? "" : " " + xml_escape(rate_unit)) << "</text>\n";
        ly += 15;
    }
    s << "</svg>\n";
    return s.str();
}

namespace {

/// A lane's label: the role the engine gave its stream, else one read from what ran on it (traces
/// of older versions), else its number.
std::string lane_role(const std::vector<trace_span>& spans, const std::string& device, int stream) {
    unsigned kinds = 0;
    for (const auto& sp : spans) {
        if (sp.device != device || sp.stream != stream) continue;
        if (!sp.role.empty()) return sp.role;
        kinds |= 1u << unsigned(sp.kind);
    }
    const auto only = [&](span_kind k) { return kinds == 1u << unsigned(k); };
    if (only(span_kind::copy_h2d)) return "copy in";
    if (only(span_kind::kernel)) return "compute";
    if (only(span_kind::copy_d2h)) return "copy out";
    if (only(span_kind::copy_peer)) return "peer copies";
    if (only(span_kind::copy_d2d)) return "device copies";
    return "stream " + std::to_string(stream);
}

}  // namespace

std::string timeline_svg(const std::vector<trace_span>& spans, const std::string& title) {
    std::map<std::pair<std::string, int>, int> lanes;
    double t0 = spans.empty() ? 0 : spans.front().t0, t1 = t0;
    for (const auto& sp : spans) {
        lanes.emplace(std::make_pair(sp.device, sp.stream), 0);
        t0 = std::min(t0, sp.t0);
        t1 = std::max(t1, sp.t1);
    }
    int next = 0;
    for (auto& [key, lane] : lanes) lane = next++;
    const int L = 190, R = 20, T = 50, lane_h = 26, W = 1140;
    const int H = T + std::max(1, next) * lane_h + 70;
    const double span = std::max(t1 - t0, 1e-9);
    const auto X = [&](double t) { return L + (t - t0) / span * (W - L - R); };
    const auto colour = [](span_kind k) {
        switch (k) {
            case span_kind::copy_h2d: return "#1f77b4";
            case span_kind::copy_d2h: return "#ff7f0e";
            case span_kind::copy_d2d: return "#8c564b";
            case span_kind::copy_peer: return "#9467bd";
            case span_kind::kernel: return "#2ca02c";
            case span_kind::host: return "#7f7f7f";
        }
        return "#000000";
    };
    std::ostringstream s;
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    s << "<rect x=\"0\" y=\"0\" width=\"" << W << "\" height=\"" << H << "\" fill=\"white\"/>\n";
    s << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title) << "</text>\n";
    for (const auto& [key, lane] : lanes) {
        const int y = T + lane * lane_h;
        s << "<rect x=\"" << L << "\" y=\"" << y << "\" width=\"" << W - L - R << "\" height=\"" << lane_h - 4
          << "\" fill=\"" << (lane % 2 ? "#fafafa" : "#f0f0f0") << "\"/>\n";
        s << "<text x=\"" << L - 8 << "\" y=\"" << y + 16 << "\" text-anchor=\"end\"><title>stream " << key.second
          << "</title>" << xml_escape(key.first + " " + lane_role(spans, key.first, key.second)) << "</text>\n";
    }
    for (const auto& sp : spans) {
        const int y = T + lanes[{sp.device, sp.stream}] * lane_h + 2;
        const double x = X(sp.t0), w = std::max(0.5, X(sp.t1) - X(sp.t0));
        s << "<rect class=\"span\" x=\"" << fmt("%.2f", x) << "\" y=\"" << y << "\" width=\"" << fmt("%.2f", w)
          << "\" height=\"" << lane_h - 8 << "\" fill=\"" << colour(sp.kind) << "\"><title>" << xml_escape(sp.name) << " ("
          << to_string(sp.kind) << ") " << fmt("%.3f", (sp.t1 - sp.t0) * 1e3) << " ms";
        if (sp.bytes) s << ", " << sp.bytes << " bytes";
        if (sp.flops > 0) s << ", " << fmt("%.3g", sp.flops) << " FLOP";
        s << "</title></rect>\n";
    }
    // Time axis.
    const int ay = T + next * lane_h + 6;
    s << "<line x1=\"" << L << "\" y1=\"" << ay << "\" x2=\"" << W - R << "\" y2=\"" << ay << "\" stroke=\"black\"/>\n";
    const double step = nice_step(span * 1e3, 10);
    // Counted, so that an infinite span (step = inf) or a step lost to rounding cannot loop forever.
    for (int tick = 0; tick <= 20 && std::isfinite(step) && tick * step <= span * 1e3 + 1e-9; ++tick) {
        const double v = tick * step;
        const double x = X(t0 + v * 1e-3);
        s << "<line x1=\"" << fmt("%.1f", x) << "\" y1=\"" << ay << "\" x2=\"" << fmt("%.1f", x) << "\" y2=\"" << ay + 5
          << "\" stroke=\"black\"/><text x=\"" << fmt("%.1f", x) << "\" y=\"" << ay + 18 << "\" text-anchor=\"middle\">"
          << fmt("%g", v) << "</text>\n";
    }
    s << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << ay + 34 << "\" text-anchor=\"middle\">milliseconds</text>\n";
    int lx = L;
    for (auto k : {span_kind::copy_h2d, span_kind::kernel, span_kind::copy_d2h, span_kind::copy_peer, span_kind::host}) {
        s << "<rect x=\"" << lx << "\" y=\"" << ay + 44 << "\" width=\"12\" height=\"12\" fill=\"" << colour(k) << "\"/><text x=\""
          << lx + 16 << "\" y=\"" << ay + 54 << "\">" << to_string(k) << "</text>\n";
        lx += 110;
    }
    s << "</svg>\n";
    return s.str();
}

namespace {
/// v limited to [lo, hi] (NaN -> lo): numbers from a file converted to integers must be in range.
double clamped(double v, double lo, double hi) { return v >= lo ? (v <= hi ? v : hi) : lo; }
}  // namespace

std::vector<trace_span> read_chrome_trace(const std::string& path) {
    // A run's trace is tens of bytes per copy or kernel; parsing takes several times the text in
    // memory, so larger files (or /dev/zero) are refused rather than read.
    constexpr std::size_t max_trace_bytes = std::size_t{1} << 30;
    const std::string text = detail::read_file_capped(path, max_trace_bytes, "a Chrome trace");
    // nlohmann's parser keeps its own stack (no recursion on deep nesting) and rejects what is
    // not JSON, invalid UTF-8 included, with the line and column.
    detail::json root;
    try {
        root = detail::json::parse(text);
    } catch (const detail::json::exception& e) {
        // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 22: ...".
        std::string what = e.what();
        if (const auto end = what.find("] "); what.rfind("[json.exception.", 0) == 0 && end != std::string::npos)
            what.erase(0, end + 2);
        if (e.id == 406) what = "a number that is not a finite number (" + what + ")";  // 1e900
        throw file_error(path + ": not a Chrome trace: " + detail::printable_text(what, 240));
    }
    if (!root.is_object() || !root.contains("traceEvents")) throw file_error(path + ": not a Chrome trace: no traceEvents");
    const detail::json& events = root["traceEvents"];
    if (!events.is_array()) throw file_error(path + ": not a Chrome trace: traceEvents is not an array");
    const auto str = [](const detail::json& m, const char* k) -> std::string {
        const auto it = m.find(k);
        return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    const auto num = [](const detail::json& m, const char* k) -> double {
        const auto it = m.find(k);
        return it != m.end() && it->is_number() ? it->get<double>() : 0.0;
    };
    std::map<double, std::string> names;
    std::map<std::pair<double, double>, std::string> roles;
    for (const auto& e : events) {
        if (!e.is_object() || str(e, "ph") != "M" || !e.contains("args") || !e["args"].is_object()) continue;
        if (str(e, "name") == "thread_name")
            roles[{num(e, "pid"), num(e, "tid")}] = str(e["args"], "name");
        else
            names[num(e, "pid")] = str(e["args"], "name");
    }
    std::vector<trace_span> out;
    for (const auto& e : events) {
        if (!e.is_object() || str(e, "ph") != "X") continue;
        trace_span sp;
        const double pid = num(e, "pid");
        sp.device = names.count(pid) ? names[pid] : "pid " + fmt("%g", pid);
        sp.stream = int(clamped(num(e, "tid"), 0, double(std::numeric_limits<int>::max())));
        sp.name = str(e, "name");
        if (const auto it = roles.find({pid, num(e, "tid")}); it != roles.end()) sp.role = it->second;
        const std::string cat = str(e, "cat");
        for (auto k : {span_kind::copy_h2d, span_kind::copy_d2h, span_kind::copy_d2d, span_kind::copy_peer,
                       span_kind::kernel, span_kind::host})
            if (cat == to_string(k)) sp.kind = k;
        sp.t0 = num(e, "ts") * 1e-6;
        sp.t1 = sp.t0 + num(e, "dur") * 1e-6;
        if (!std::isfinite(sp.t0) || !std::isfinite(sp.t1))
            throw file_error(path + ": event " + std::to_string(out.size()) + " has a time that is not a finite number");
        if (e.contains("args") && e["args"].is_object()) {
            sp.bytes = std::size_t(clamped(num(e["args"], "bytes"), 0, 1.8e19));
            sp.flops = num(e["args"], "flops");
        }
        out.push_back(std::move(sp));
    }
    return out;
}

}  // namespace tilestream
