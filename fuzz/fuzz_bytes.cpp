// libFuzzer harness: the byte-size parser ("512MiB", "1.5GiB") on arbitrary text.
#include <tilestream/error.hpp>
#include <tilestream/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const std::size_t bytes = tilestream::parse_bytes(text);
        // Accepted sizes stay within 4 EiB, so that sums and products of a few stay in 64 bits.
        if (bytes > (std::size_t{1} << 62)) __builtin_trap();
        (void)tilestream::format_bytes(bytes);
    } catch (const tilestream::invalid_argument&) {
    }
    return 0;
}
