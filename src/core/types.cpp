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
#include <cstdlib>
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

std::string_view to_string(dtype t) noexcept { return dtype_traits(t).name; }
std::string_view to_string(layout l) noexcept {
    return l == layout::row_major ? "row-major" : "col-major";
}
std::string_view to_string(op o) noexcept {
    switch (o) {
        case op::n: return "n";
        case op::t: return "t";
        case op::c: return "c";
    }
    return "?";
}
std::string_view to_string(blas_trans t) noexcept {
    switch (t) {
        case blas_trans::none: return "none";
        case blas_trans::trans: return "trans";
        case blas_trans::conj_trans: return "conj-trans";
        case blas_trans::conj_none: return "conj-none";
    }
    return "?";
}

dtype parse_dtype(std::string_view s) {
    const std::string v = lower(s);
    for (const dtype_info& d : dtype_table)
        if (v == d.name || v == d.numpy_name) return d.type;
    if (v == "float") return dtype::f32;
    if (v == "double") return dtype::f64;
    std::string names;
    for (const dtype_info& d : dtype_table)
        names += (names.empty() ? "" : ", ") + std::string(d.name) + "/" + std::string(d.numpy_name);
    throw invalid_argument("unknown dtype '" + std::string(s) + "' (expected one of " + names + ")");
}

bool dtype_from_npy_descr(std::string_view descr, dtype& out) noexcept {
    for (const dtype_info& d : dtype_table)
        if (descr == d.npy_descr) {
            out = d.type;
            return true;
        }
    return false;
}

namespace detail {
void throw_bad_dtype(dtype t) {
    throw invalid_argument("bad dtype value " + std::to_string(int(t)));
}
void throw_real_only(std::string_view what, dtype t) {
    throw invalid_argument(std::string(what) + ": " + std::string(to_string(t)) +
                           " is complex; only f32 and f64 are supported");
}
}  // namespace detail

namespace {
// A number as strtod reads it, the whole text and nothing else (no leading space).
bool parse_real(std::string_view text, double& out) {
    if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
    const std::string t(text);
    char* end = nullptr;
    out = std::strtod(t.c_str(), &end);
    return end == t.c_str() + t.size();
}
}  // namespace

scalar parse_scalar(std::string_view text) {
    const auto bad = [&] {
        return invalid_argument("'" + std::string(text) +
                                "' is not a number (examples: 2, -1.5e3, 1.5-2j, 2j, (1+2j))");
    };
    std::string_view s = text;
    if (!s.empty() && s.front() == '(') {
        if (s.size() < 2 || s.back() != ')') throw bad();
        s = s.substr(1, s.size() - 2);
    }
    if (s.empty()) throw bad();
    const char last = s.back();
    if (last != 'j' && last != 'J' && last != 'i' && last != 'I') {
        double re = 0;
        if (!parse_real(s, re)) throw bad();
        return {re, 0.0};
    }
    // "a+bj": the imaginary part starts at the last sign that is neither the first character nor
    // an exponent's.
    const std::string_view body = s.substr(0, s.size() - 1);
    std::size_t split = std::string_view::npos;
    for (std::size_t p = body.size(); p-- > 1;)
        if ((body[p] == '+' || body[p] == '-') && body[p - 1] != 'e' && body[p - 1] != 'E') {
            split = p;
            break;
        }
    double re = 0, im = 0;
    std::string_view imag = body;
    if (split != std::string_view::npos) {
        if (!parse_real(body.substr(0, split), re)) throw bad();
        imag = body.substr(split);
    }
    if (imag.empty() || imag == "+") im = 1;
    else if (imag == "-") im = -1;
    else if (!parse_real(imag, im)) throw bad();
    return {re, im};
}

std::string format_scalar(scalar z) {
    const auto text = [](double v) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, v);
        return std::string(buf, r.ptr);
    };
    if (z.imag() == 0 && !std::signbit(z.imag())) return text(z.real());
    const std::string im = text(z.imag());
    if (z.real() == 0 && !std::signbit(z.real())) return im + "j";
    return text(z.real()) + (im.front() == '-' ? "" : "+") + im + "j";
}

op parse_op(std::string_view s) {
    const std::string v = lower(s);
    if (v == "n") return op::n;
    if (v == "t") return op::t;
    if (v == "c") return op::c;
    throw invalid_argument("unknown op '" + std::string(s) + "' (expected n, t or c)");
}

operand_desc::blas_view operand_desc::for_blas(layout order) const noexcept {
    const bool flip = op_layout() != order;
    blas_view v;
    v.trans = flip ? (conjugated() ? blas_trans::conj_trans : blas_trans::trans)
                   : (conjugated() ? blas_trans::conj_none : blas_trans::none);
    // The BLAS's matrix (op(X), or its transpose when flipped) lies in `order`: lines of `len`
    // elements, ld apart. With one line ld never steps, but BLASes still check it.
    const index_t br = flip ? cols : rows, bc = flip ? rows : cols;
    const index_t lines = order == layout::row_major ? br : bc, len = order == layout::row_major ? bc : br;
    v.min_ld = std::max<index_t>(1, len);
    v.ld = lines <= 1 ? std::max(ld, v.min_ld) : ld;
    return v;
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

std::optional<gemm_kernel> parse_kernel_setting(std::string_view s) {
    if (lower(s) == "auto") return std::nullopt;
    try {
        return parse_gemm_kernel(s);
    } catch (const invalid_argument&) {
        throw invalid_argument("unknown kernel '" + std::string(s) +
                               "' (expected auto, reference, naive, tiled or vendor)");
    }
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
    // The span of the last element must be addressable (extents and ld under 2^31: it is).
    constexpr index_t fits = index_t(1) << 31;
    if (rows > 0 && cols > 0 && (rows >= fits || cols >= fits || ld >= fits)) {
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
