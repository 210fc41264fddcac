// What the CPU supports and reports (cpuid, xgetbv, cache sizes), the choice of instruction set,
// and the block sizes each registry entry gets on this CPU.
#include "cpu_isa.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace tilestream::cpu {

std::string_view to_string(isa s) noexcept {
    switch (s) {
        case isa::generic: return "generic";
        case isa::avx2: return "avx2";
        case isa::avx512: return "avx512";
    }
    return "?";
}

isa parse_isa(std::string_view s) {
    for (isa candidate : {isa::generic, isa::avx2, isa::avx512})
        if (s == to_string(candidate)) return candidate;
    throw invalid_argument("unknown CPU instruction set '" + std::string(s) +
                           "' (expected generic, avx2 or avx512)");
}

namespace {

std::string join(const std::vector<isa>& sets) {
    std::string out;
    for (isa s : sets) out += (out.empty() ? "" : ", ") + std::string(to_string(s));
    return out;
}

#if defined(__x86_64__)
// XCR0: which register state the operating system saves on a context switch.
std::uint64_t read_xcr0() {
    std::uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (std::uint64_t(hi) << 32) | lo;
}
#endif

}  // namespace

std::vector<isa> supported_isas() {
    std::vector<isa> out{isa::generic};
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return out;
    const bool fma = ecx & (1u << 12), osxsave = ecx & (1u << 27), avx = ecx & (1u << 28);
    if (!osxsave || !avx || __get_cpuid_max(0, nullptr) < 7) return out;
    const std::uint64_t xcr0 = read_xcr0();
    const bool ymm_saved = (xcr0 & 0x6) == 0x6;     // SSE and AVX state
    const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;   // and opmask, upper ZMM, ZMM16-31
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    const bool avx2 = ebx & (1u << 5), avx512f = ebx & (1u << 16);
    if (ymm_saved && avx2 && fma) out.push_back(isa::avx2);
    if (ymm_saved && zmm_saved && avx512f && avx2 && fma) out.push_back(isa::avx512);
#endif
    return out;
}

isa choose_isa(const char* requested, const std::vector<isa>& available) {
    if (requested == nullptr || *requested == '\0') return available.back();
    isa want;
    try {
        want = parse_isa(requested);
    } catch (const invalid_argument& e) {
        throw invalid_argument(std::string("TILESTREAM_CPU_ISA: ") + e.what());
    }
    if (std::find(available.begin(), available.end(), want) == available.end())
        throw invalid_argument("TILESTREAM_CPU_ISA=" + std::string(requested) +
                               ": this CPU does not support " + std::string(to_string(want)) +
                               "; it supports " + join(available));
    return want;
}

isa selected_isa() {
    // A bad request throws from the initializer, so every later call reports it again.
    static const isa chosen = choose_isa(std::getenv("TILESTREAM_CPU_ISA"), supported_isas());
    return chosen;
}

namespace {

// "32K", "512K", "32768K", "1M" -> bytes; 0 when unreadable.
std::size_t parse_cache_size(const std::string& text) {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
    if (end == text.c_str()) return 0;
    switch (*end) {
        case 'K': return std::size_t(value) << 10;
        case 'M': return std::size_t(value) << 20;
        case 'G': return std::size_t(value) << 30;
        default: return std::size_t(value);
    }
}

// "0-1,4,6-7" -> 5; at least 1.
int count_cpu_list(const std::string& text) {
    int count = 0;
    std::stringstream in(text);
    std::string range;
    while (std::getline(in, range, ',')) {
        int first = 0, last = 0;
        const int fields = std::sscanf(range.c_str(), "%d-%d", &first, &last);
        if (fields == 2 && last >= first) count += last - first + 1;
        else if (fields >= 1) count += 1;
    }
    return std::max(count, 1);
}

std::string read_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

cache_sizes sysfs_cache_sizes() {
    cache_sizes out;
    for (int index = 0; index < 16; ++index) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
        const std::string level = read_line(dir + "level"), type = read_line(dir + "type");
        if (level.empty()) break;
        if (type != "Data" && type != "Unified") continue;
        const std::size_t bytes = parse_cache_size(read_line(dir + "size"));
        if (level == "1") out.l1d = bytes;
        else if (level == "2") out.l2 = bytes;
        else if (level == "3") out.l3 = bytes / std::size_t(count_cpu_list(read_line(dir + "shared_cpu_list")));
    }
    return out;
}

std::size_t sysconf_bytes(int name) {
    const long v = sysconf(name);
    return v > 0 ? std::size_t(v) : 0;
}

// A reported size outside [low, high] is taken as unknown and replaced by `typical`.
std::size_t plausible(std::size_t reported, std::size_t low, std::size_t high, std::size_t typical) {
    return reported >= low && reported <= high ? reported : typical;
}

}  // namespace

cache_sizes host_cache_sizes() {
    static const cache_sizes sizes = [] {
        cache_sizes c = sysfs_cache_sizes();
#if defined(_SC_LEVEL1_DCACHE_SIZE)
        // sysconf knows no sharing: its L3 is spread over the online CPUs.
        if (c.l1d == 0) c.l1d = sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE);
        if (c.l2 == 0) c.l2 = sysconf_bytes(_SC_LEVEL2_CACHE_SIZE);
        if (c.l3 == 0) c.l3 = sysconf_bytes(_SC_LEVEL3_CACHE_SIZE) / std::max<std::size_t>(1, sysconf_bytes(_SC_NPROCESSORS_ONLN));
#endif
        constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
        c.l1d = plausible(c.l1d, 4 * KiB, 4 * MiB, 32 * KiB);
        c.l2 = plausible(c.l2, 32 * KiB, 64 * MiB, 512 * KiB);
        c.l3 = plausible(c.l3, 64 * KiB, 1024 * MiB, 2 * MiB);
#if defined(__x86_64__)
        c.intel = __builtin_cpu_is("intel");
#endif
        return c;
    }();
    return sizes;
}

const isa_config& config_for(isa s) {
    switch (s) {
#if defined(__x86_64__)
        case isa::avx2: return avx2_config;
        case isa::avx512: return avx512_config;
#endif
        default: return generic_config;
    }
}

block_sizes derive_block_sizes(const isa_config& cfg, dtype type, const cache_sizes& caches) {
    // Complex types run the micro-kernel of their parts' type (the 1m method, gemm_tiled.cpp), so
    // the blocks are sized for that real kernel and then counted in complex elements.
    const dtype_info& info = dtype_traits(type);
    const index_t e = index_t(size_of(info.real));
    block_sizes b;
    const micro_tile tile = register_tile(cfg, info.real);
    b.mr = tile.mr;
    b.nr = tile.nr;
    const auto share = [](std::size_t bytes, double fraction) { return index_t(double(bytes) * fraction); };
    const bool intel = caches.intel && cfg.intel_l1_share > 0;
    const double l1_share = intel ? cfg.intel_l1_share : info.real == dtype::f32 ? cfg.l1_share_f32 : cfg.l1_share_f64;
    const double l2_share = intel ? cfg.intel_l2_share : cfg.l2_share;
    const auto round_down = [](index_t x, index_t unit) { return x / unit * unit; };
    // Floors keep a tiny report working; caps bound the packing buffers when a report is huge.
    b.kc = std::clamp<index_t>(round_down(share(caches.l1d, l1_share) / (b.nr * e), 8), 16, 1024);
    b.mc = std::clamp<index_t>(round_down(share(caches.l2, l2_share) / (b.kc * e), b.mr), b.mr,
                               round_down(1024, b.mr));
    b.nc = std::clamp<index_t>(round_down(share(caches.l3, cfg.l3_share) / (b.kc * e), b.nr), b.nr,
                               round_down(8192, b.nr));
    if (info.is_complex) {
        // 1m: a complex element of k is two real ones in the packed panels, a complex column of
        // packed B two real columns (the real NR is even in every entry).
        b.nr /= 2;
        b.kc /= 2;
        b.nc /= 2;
    }
    return b;
}

micro_tile register_tile(const isa_config& cfg, dtype real) {
    switch (real) {
        case dtype::f32: return {cfg.mr_f32, cfg.nr_f32};
        case dtype::f64: return {cfg.mr_f64, cfg.nr_f64};
        case dtype::c32:
        case dtype::c64: break;
    }
    throw invalid_argument("register_tile: " + std::string(to_string(real)) + " is not a real type");
}

std::string describe_blocking(isa s, const cache_sizes& caches) {
    std::string out;
    for (dtype type : all_dtypes) {
        const block_sizes b = derive_block_sizes(config_for(s), type, caches);
        out += (out.empty() ? "" : ", ") + std::string(to_string(type)) + " " + std::to_string(b.mr) + "x" +
               std::to_string(b.nr) + " kc=" + std::to_string(b.kc) + " mc=" + std::to_string(b.mc) +
               " nc=" + std::to_string(b.nc);
    }
    return out + " (complex: the real kernels by the 1m method)";
}

}  // namespace tilestream::cpu
