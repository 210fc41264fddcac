// Names, parsing and checked size arithmetic for the basic types.
#include <tilestream/error.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/matrix.hpp>
#include <tilestream/types.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>

namespace tilestream {

namespace {
std::string lower(std::string_view s) {
    std::string r(s);
    std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
    return r;
}
}  // namespace

std::size_t size_of(dtype t) noexcept { return t == dtype::f32 ? 4 : 8; }
std::string_view to_string(dtype t) noexcept { return t == dtype::f32 ? "f32" : "f64"; }
std::string_view to_string(layout l) noexcept {
    return l == layout::row_major ? "row-major" : "col-major";
}
std::string_view to_string(op o) noexcept { return o == op::n ? "n" : "t"; }

dtype parse_dtype(std::string_view s) {
    const std::string v = lower(s);
    if (v == "f32" || v == "float32" || v == "float") return dtype::f32;
    if (v == "f64" || v == "float64" || v == "double") return dtype::f64;
    throw invalid_argument("unknown dtype '" + std::string(s) + "' (expected f32 or f64)");
}

op parse_op(std::string_view s) {
    const std::string v = lower(s);
    if (v == "n") return op::n;
    if (v == "t") return op::t;
    throw invalid_argument("unknown op '" + std::string(s) + "' (expected n or t)");
}

std::string_view to_string(gemm_kernel k) noexcept {
    switch (k) {
        case gemm_kernel::reference: return "reference";
        case gemm_kernel::naive: return "naive";
        case gemm_kernel::tiled: return "tiled";
        case gemm_kernel::vendor: return "vendor";
    }
    return "?";
}

gemm_kernel parse_gemm_kernel(std::string_view s) {
    const std::string v = lower(s);
    for (auto k : {gemm_kernel::reference, gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor})
        if (v == to_string(k)) return k;
    throw invalid_argument("unknown kernel '" + std::string(s) +
                           "' (expected reference, naive, tiled or vendor)");
}

std::string_view to_string(math_mode m) noexcept { return m == math_mode::strict ? "strict" : "tf32"; }

math_mode parse_math_mode(std::string_view s) {
    const std::string v = lower(s);
    if (v == "strict" || v == "fp32" || v == "default") return math_mode::strict;
    if (v == "tf32") return math_mode::tf32;
    throw invalid_argument("unknown math mode '" + std::string(s) + "' (expected strict or tf32)");
}

index_t checked_mul(index_t a, index_t b, std::string_view what) {
    index_t r = 0;
    if (a < 0 || b < 0)
        throw size_overflow(std::string(what) + ": negative size (" + std::to_string(a) + " x " +
                            std::to_string(b) + ")");
    if (__builtin_mul_overflow(a, b, &r))
        throw size_overflow(std::string(what) + ": size " + std::to_string(a) + " x " +
                            std::to_string(b) + " overflows 64 bits");
    return r;
}

index_t checked_add(index_t a, index_t b, std::string_view what) {
    index_t r = 0;
    if (a < 0 || b < 0)
        throw size_overflow(std::string(what) + ": negative size (" + std::to_string(a) + " + " +
                            std::to_string(b) + ")");
    if (__builtin_add_overflow(a, b, &r))
        throw size_overflow(std::string(what) + ": size " + std::to_string(a) + " + " +
                            std::to_string(b) + " overflows 64 bits");
    return r;
}

std::size_t checked_bytes(index_t rows, index_t cols, dtype t, std::string_view what) {
    const index_t elements = checked_mul(rows, cols, what);
    return static_cast<std::size_t>(checked_mul(elements, static_cast<index_t>(size_of(t)), what));
}

std::string format_bytes(std::size_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    char buf[64];
    if (u == 0)
        std::snprintf(buf, sizeof buf, "%zu B", bytes);
    else
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

std::size_t parse_bytes(std::string_view text) {
    const std::string t(text);
    const auto bad = [&](const std::string& why) {
        return invalid_argument("bad byte size '" + t + "': " + why +
                                " (examples: 512MiB, 1.5GiB, 64KB, 4096)");
    };
    std::size_t pos = 0;
    while (pos < t.size() && (std::isdigit(static_cast<unsigned char>(t[pos])) || t[pos] == '.')) ++pos;
    if (pos == 0) throw bad("no number");
    double value = 0;
    try {
        std::size_t used = 0;
        value = std::stod(t.substr(0, pos), &used);
        if (used != pos) throw bad("malformed number");
    } catch (const std::logic_error&) {
        throw bad("malformed number");
    }
    std::string unit = lower(std::string_view(t).substr(pos));
    while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
    double scale = 1;
    if (unit.empty() || unit == "b") scale = 1;
    else if (unit == "k" || unit == "kib") scale = 1024.0;
    else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
    else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
    else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (unit == "p" || unit == "pib") scale = 1024.0 * 1024 * 1024 * 1024 * 1024;
    else if (unit == "e" || unit == "eib") scale = 1024.0 * 1024 * 1024 * 1024 * 1024 * 1024;
    else if (unit == "kb") scale = 1e3;
    else if (unit == "mb") scale = 1e6;
    else if (unit == "gb") scale = 1e9;
    else if (unit == "tb") scale = 1e12;
    else if (unit == "pb") scale = 1e15;
    else if (unit == "eb") scale = 1e18;
    else throw bad("unknown unit '" + unit + "'");
    const double bytes = value * scale;
    // Sizes are added and multiplied as 64-bit signed numbers elsewhere; 2^62 bytes (4 EiB) leaves
    // room for that and is beyond any memory.
    constexpr double max_bytes = 4611686018427387904.0;  // 2^62
    if (!std::isfinite(bytes) || bytes > max_bytes) throw bad("too large (at most 4 EiB)");
    return static_cast<std::size_t>(std::llround(bytes));
}

namespace detail {

void throw_bad_view(const std::string& what) { throw invalid_argument(what); }

void check_view_shape(index_t rows, index_t cols, index_t ld, layout l, const char* where) {
    if (rows < 0 || cols < 0)
        throw size_overflow(std::string(where) + ": negative extent " + std::to_string(rows) + "x" +
                            std::to_string(cols));
    const index_t min_ld = std::max<index_t>(1, l == layout::row_major ? cols : rows);
    if (ld < min_ld)
        throw invalid_argument(std::string(where) + ": leading dimension " + std::to_string(ld) +
                               " is too small for a " + std::to_string(rows) + "x" +
                               std::to_string(cols) + " " + std::string(to_string(l)) +
                               " matrix (needs at least " + std::to_string(min_ld) + ")");
    // The span of the last element must be addressable.
    if (rows > 0 && cols > 0) {
        const index_t outer = l == layout::row_major ? rows : cols;
        checked_mul(outer, ld, where);
    }
}

void* aligned_host_alloc(std::size_t bytes) {
    const std::size_t rounded = ((bytes ? bytes : 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw std::bad_alloc();
    return p;
}

void throw_out_of_host_memory(const char* what, index_t rows, index_t cols, dtype t, std::size_t bytes) {
    throw error(std::string(what) + ": cannot allocate " + format_bytes(bytes) + " of host memory for a " +
                std::to_string(rows) + "x" + std::to_string(cols) + " " + std::string(to_string(t)) +
                " matrix (out of memory)");
}

}  // namespace detail

std::size_t available_host_memory() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (f == nullptr) return 0;
    char line[256];
    std::size_t kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %zu kB", &kib) == 1) break;
    std::fclose(f);
    return kib * 1024;
}

void check_host_memory(std::size_t bytes, const std::string& what) {
    const std::size_t available = available_host_memory();
    if (available != 0 && bytes > available)
        throw out_of_budget(what + ": " + format_bytes(bytes) + " of host memory needed but only " +
                            format_bytes(available) + " is available (MemAvailable)");
}

}  // namespace tilestream
