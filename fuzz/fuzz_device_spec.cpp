// libFuzzer harness: the device spec parser ("cpu:2,cuda:0x2@1GiB") and the Jacobi decomposition
// parser ("tiles:2x3") on arbitrary text.
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/jacobi.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        for (const auto& r : tilestream::parse_device_spec(text))
            if (r.count < 1 || r.slices < 1 || r.index < 0 || (r.budget && *r.budget == 0)) __builtin_trap();
    } catch (const tilestream::invalid_argument&) {
    }
    try {
        const auto d = tilestream::parse_jacobi_decomposition(text);
        // What to_string writes, parse reads back the same.
        const auto again = tilestream::parse_jacobi_decomposition(tilestream::to_string(d));
        if (again.split != d.split || again.p != d.p || again.q != d.q) __builtin_trap();
    } catch (const tilestream::invalid_argument&) {
    }
    return 0;
}
