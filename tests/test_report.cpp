// Scaling tables and plots, timelines and the trace reader: the SVGs are well-formed XML with one
// mark per span or point, a saved trace reads back unchanged, and the CLI writes both.
#include "test_support.hpp"

#include <tilestream/report.hpp>

#include <fstream>
#include <regex>

namespace tilestream {
namespace {

using testing::run_cli;
using testing::temp_dir;

/// A strict-enough XML check: every tag closes in order, attributes are quoted, entities are known.
void expect_well_formed_xml(const std::string& xml) {
    std::vector<std::string> stack;
    std::size_t i = 0;
    ASSERT_EQ(xml.rfind("<svg", 0), 0u) << "does not start with <svg";
    while ((i = xml.find('<', i)) != std::string::npos) {
        const std::size_t end = xml.find('>', i);
        ASSERT_NE(end, std::string::npos) << "unterminated tag at " << i;
        std::string tag = xml.substr(i + 1, end - i - 1);
        i = end + 1;
        if (tag.empty()) FAIL() << "empty tag";
        if (tag[0] == '/') {
            ASSERT_FALSE(stack.empty()) << "closing </" << tag << "> with nothing open";
            ASSERT_EQ(stack.back(), tag.substr(1)) << "mismatched closing tag";
            stack.pop_back();
            continue;
        }
        const bool self = tag.back() == '/';
        const std::string name = tag.substr(0, tag.find_first_of(" /"));
        // Attribute values are double-quoted: an even number of quotes.
        EXPECT_EQ(std::count(tag.begin(), tag.end(), '"') % 2, 0) << tag;
        if (!self) stack.push_back(name);
    }
    EXPECT_TRUE(stack.empty()) << "unclosed <" << (stack.empty() ? "" : stack.back()) << ">";
    const std::regex bad_amp("&(?!amp;|lt;|gt;|quot;)");
    EXPECT_FALSE(std::regex_search(xml, bad_amp)) << "bare & in the SVG";
}

std::size_t count(const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
    return n;
}

TEST(report, TimelineHasOneMarkPerSpan) {
    std::vector<trace_span> spans = {
        {"cpu:0", 0, span_kind::copy_h2d, "h2d <A & B>", 4096, 0, 1.0, 1.002},
        {"cpu:0", 1, span_kind::kernel, "gemm", 0, 2e6, 1.002, 1.010},
        {"cpu:1", 0, span_kind::copy_d2h, "d2h", 1024, 0, 1.011, 1.012},
    };
    const std::string svg = timeline_svg(spans, "t & t");
    expect_well_formed_xml(svg);
    EXPECT_EQ(count(svg, "class=\"span\""), 3u);
    // Lanes are named by what ran on them when the engine named no role (traces of older versions).
    EXPECT_NE(svg.find("</title>cpu:0 copy in</text>"), std::string::npos) << svg;
    EXPECT_NE(svg.find("</title>cpu:0 compute</text>"), std::string::npos);
    EXPECT_NE(svg.find("</title>cpu:1 copy out</text>"), std::string::npos);
}

TEST(report, StreamRolesNameTheLanesAndTravelInTheTrace) {
    temp_dir dir;
    trace_recorder rec;
    rec.name_stream("cpu:0", 2, "halo out");
    rec.record("cpu:0", 2, span_kind::copy_d2d, "halo", 64, 0, 1.0, 1.1);
    rec.record("cpu:0", 3, span_kind::copy_h2d, "h2d", 64, 0, 1.0, 1.1);  // not named: mixed kinds
    rec.record("cpu:0", 3, span_kind::kernel, "gemm", 0, 1e6, 1.1, 1.2);
    EXPECT_EQ(rec.spans().front().role, "halo out");
    rec.write_chrome(dir.file("t.json"));
    EXPECT_NE(rec.chrome_json().find("\"thread_name\""), std::string::npos);
    const auto spans = read_chrome_trace(dir.file("t.json"));
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(spans[0].role, "halo out");
    EXPECT_EQ(spans[1].role, "");
    const std::string svg = timeline_svg(spans, "roles");
    expect_well_formed_xml(svg);
    EXPECT_NE(svg.find("</title>cpu:0 halo out</text>"), std::string::npos) << svg;
    EXPECT_NE(svg.find("</title>cpu:0 stream 3</text>"), std::string::npos) << svg;
}

TEST(report, ScalingPlotAndTable) {
    std::vector<scaling_row> rows(3);
    rows[0].devices = "cpu:1";
    rows[0].device_count = 1;
    rows[0].seconds = 4;
    rows[1].devices = "cpu:2";
    rows[1].device_count = 2;
    rows[1].seconds = 2.5;
    rows[2].devices = "cpu:4";
    rows[2].device_count = 4;
    rows[2].seconds = 1.6;
    compute_scaling(rows, false);
    EXPECT_DOUBLE_EQ(rows[1].speedup, 1.6);
    EXPECT_DOUBLE_EQ(rows[1].efficiency, 0.8);
    EXPECT_DOUBLE_EQ(rows[2].efficiency, 0.625);
    const std::string svg = scaling_svg(rows, "strong <scaling>");
    expect_well_formed_xml(svg);
    EXPECT_EQ(count(svg, "<circle"), 6u);  // speedup and efficiency per row
    EXPECT_EQ(count(svg, "<polyline"), 2u);
    EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);  // the ideal line
    // Axes and legend carry units.
    const std::string units = scaling_svg(rows, "units", "GFLOP/s", "MPI ranks");
    for (const char* text : {"MPI ranks (count)", "speedup (x, against the first row)", "efficiency (fraction of ideal)",
                             "speedup (x)", "rate (GFLOP/s):", "cpu:2: 0.00 GFLOP/s"})
        EXPECT_NE(units.find(text), std::string::npos) << text;
    const std::string table = scaling_table(rows, "GFLOP/s");
    EXPECT_NE(table.find("62.5%"), std::string::npos) << table;
    // Weak scaling: the rate ratio.
    rows[0].rate = 10;
    rows[1].rate = 18;
    rows[2].rate = 30;
    compute_scaling(rows, true);
    EXPECT_DOUBLE_EQ(rows[1].speedup, 1.8);
    EXPECT_DOUBLE_EQ(rows[2].efficiency, 0.75);
}

TEST(report, ChromeTraceReadsBack) {
    temp_dir dir;
    trace_recorder rec;
    rec.record("cpu:0", 2, span_kind::copy_h2d, "h2d", 1234, 0, 10.0, 10.5);
    rec.record("cuda:0.1", 3, span_kind::kernel, "gemm \"x\"", 0, 5e9, 10.5, 11.0);
    rec.write_chrome(dir.file("t.json"));
    const auto spans = read_chrome_trace(dir.file("t.json"));
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ(spans[0].device, "cpu:0");
    EXPECT_EQ(spans[0].stream, 2);
    EXPECT_EQ(spans[0].kind, span_kind::copy_h2d);
    EXPECT_EQ(spans[0].bytes, 1234u);
    EXPECT_NEAR(spans[0].t1 - spans[0].t0, 0.5, 1e-9);
    EXPECT_EQ(spans[1].device, "cuda:0.1");
    EXPECT_EQ(spans[1].name, "gemm \"x\"");
    EXPECT_DOUBLE_EQ(spans[1].flops, 5e9);
    {
        std::ofstream bad(dir.file("bad.json"));
        bad << "{\"traceEvents\": [1, 2";
    }
    try {
        read_chrome_trace(dir.file("bad.json"));
        FAIL() << "no error";
    } catch (const file_error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.json: not a Chrome trace"), std::string::npos) << e.what();
    }
}

TEST(report_cli, ScaleGemmWritesTableJsonAndPlot) {
    temp_dir dir;
    auto r = run_cli("scale gemm --m 300 --n 200 --k 100 --devices cpu:1,cpu:2,cpu:3 --cpu-threads 1 --repeat 1 "
                     "--memory-budget 256KiB --cache on --rates h2d=10GB/s,d2h=10GB/s,gflops=20 --json --plot " + dir.file("s.svg"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    for (const char* key : {"\"devices\": \"cpu:3\"", "\"device_count\": 3", "\"speedup\": ", "\"efficiency\": ",
                            "\"bytes_moved\": ", "\"cache_hit_rate\": "})
        EXPECT_NE(r.out.find(key), std::string::npos) << key << " missing in " << r.out;
    std::ifstream in(dir.file("s.svg"));
    std::string svg((std::istreambuf_iterator<char>(in)), {});
    expect_well_formed_xml(svg);
    EXPECT_EQ(count(svg, "<circle"), 6u);
}

TEST(report_cli, TimelineFromGemmAndFromSavedTrace) {
    temp_dir dir;
    auto r = run_cli("gemm --m 200 --n 150 --k 90 --devices cpu:2 --memory-budget 64KiB --kernel tiled --quiet --trace " +
                     dir.file("t.json") + " --timeline " + dir.file("a.svg"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    r = run_cli("timeline " + dir.file("t.json") + " " + dir.file("b.svg"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto spans = read_chrome_trace(dir.file("t.json"));
    for (const char* name : {"a.svg", "b.svg"}) {
        std::ifstream in(dir.file(name));
        std::string svg((std::istreambuf_iterator<char>(in)), {});
        expect_well_formed_xml(svg);
        EXPECT_EQ(count(svg, "class=\"span\""), spans.size()) << name;
    }
    EXPECT_EQ(run_cli("timeline " + dir.file("missing.json") + " " + dir.file("c.svg")).exit_code, 2);
    EXPECT_FALSE(std::ifstream(dir.file("c.svg")).good());
}

}  // namespace
}  // namespace tilestream
