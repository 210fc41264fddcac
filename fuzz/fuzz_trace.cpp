// libFuzzer harness: the Chrome trace reader (what `tilestream timeline` reads) on arbitrary
// bytes, and the SVG timeline drawn from what it accepts.
#include "fuzz_input_file.hpp"

#include <tilestream/error.hpp>
#include <tilestream/report.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    tilestream::fuzz::memory_file file(data, size);
    if (!file.ok()) return 0;
    try {
        const auto spans = tilestream::read_chrome_trace(file.path());
        (void)tilestream::timeline_svg(spans, "fuzz");
    } catch (const tilestream::error&) {
    }
    return 0;
}
