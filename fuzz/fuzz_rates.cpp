// libFuzzer harness: the rates parser ("h2d=12GB/s,gflops=150,overhead=5us") on arbitrary text.
#include <tilestream/error.hpp>
#include <tilestream/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const auto r = tilestream::parse_rates(text);
        if (!(r.h2d > 0) || !(r.d2h > 0) || !(r.flops > 0) || !(r.op_overhead > 0)) __builtin_trap();
    } catch (const tilestream::invalid_argument&) {
    }
    return 0;
}
