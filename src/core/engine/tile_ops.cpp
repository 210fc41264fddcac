// Names and arithmetic of tile operations, and the device interface's default: gemm tiles run
// through device::gemm, other kinds only where a backend adds them.
#include <tilestream/device.hpp>
#include <tilestream/error.hpp>
#include <tilestream/tile_ops.hpp>

#include "core/engine/tile_kernels.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace tilestream {

namespace {

std::string lower_text(std::string_view s) {
    std::string r(s);
    for (char& ch : r) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return r;
}

}  // namespace

std::string_view to_string(side s) noexcept { return s == side::left ? "left" : "right"; }
std::string_view to_string(uplo u) noexcept { return u == uplo::lower ? "lower" : "upper"; }
std::string_view to_string(diag d) noexcept { return d == diag::non_unit ? "non-unit" : "unit"; }

std::string_view to_string(tile_kind k) noexcept {
    switch (k) {
        case tile_kind::gemm: return "gemm";
        case tile_kind::syrk: return "syrk";
        case tile_kind::herk: return "herk";
        case tile_kind::syr2k: return "syr2k";
        case tile_kind::her2k: return "her2k";
        case tile_kind::symm: return "symm";
        case tile_kind::hemm: return "hemm";
        case tile_kind::trmm: return "trmm";
        case tile_kind::trsm: return "trsm";
        case tile_kind::getrf: return "getrf";
        case tile_kind::laswp: return "laswp";
        case tile_kind::potrf: return "potrf";
    }
    return "?";
}

side parse_side(std::string_view s) {
    const std::string v = lower_text(s);
    if (v == "left" || v == "l") return side::left;
    if (v == "right" || v == "r") return side::right;
    throw invalid_argument("side must be left or right, got '" + std::string(s) + "'");
}

uplo parse_uplo(std::string_view s) {
    const std::string v = lower_text(s);
    if (v == "lower" || v == "l") return uplo::lower;
    if (v == "upper" || v == "u") return uplo::upper;
    throw invalid_argument("uplo must be lower or upper, got '" + std::string(s) + "'");
}

diag parse_diag(std::string_view s) {
    const std::string v = lower_text(s);
    if (v == "non-unit" || v == "nonunit" || v == "n") return diag::non_unit;
    if (v == "unit" || v == "u") return diag::unit;
    throw invalid_argument("diag must be non-unit or unit, got '" + std::string(s) + "'");
}

bool tile_op::reads_ab() const {
    if (kind == tile_kind::getrf || kind == tile_kind::laswp) return kind == tile_kind::laswp && k > 0;
    if (alpha == 0.0) return false;
    switch (kind) {
        case tile_kind::gemm:
        case tile_kind::syrk:
        case tile_kind::herk:
        case tile_kind::syr2k:
        case tile_kind::her2k: return k > 0;
        default: return true;
    }
}

bool tile_op::reads_c() const {
    if (kind == tile_kind::getrf || kind == tile_kind::laswp) return true;
    if (kind == tile_kind::trmm || kind == tile_kind::trsm) return alpha != 0.0;
    if (kind == tile_kind::potrf) return true;
    return beta != 0.0;
}

double tile_op::flops() const {
    // Counted in multiply-adds of two flops; complex ones are four real products and four sums.
    const double per = double(dtype_traits(type).flops_per_multiply_add) / 2.0;
    const double dm = double(m), dn = double(n), dk = double(k);
    if (kind == tile_kind::getrf) return per * multiply_adds2(dm, dn, dk);
    if (!reads_ab()) return 0.0;
    return per * multiply_adds2(dm, dn, dk);
}

double tile_op::multiply_adds2(double dm, double dn, double dk) const {
    switch (kind) {
        case tile_kind::gemm: return 2.0 * dm * dn * dk;
        case tile_kind::syrk:
        case tile_kind::herk: return dn * (dn + 1) * dk;
        case tile_kind::syr2k:
        case tile_kind::her2k: return 2.0 * dn * (dn + 1) * dk;
        case tile_kind::symm:
        case tile_kind::hemm: return side == side::left ? 2.0 * dm * dm * dn : 2.0 * dm * dn * dn;
        case tile_kind::trmm:
        case tile_kind::trsm: return side == side::left ? dm * dm * dn : dm * dn * dn;
        case tile_kind::getrf: {
            // LAPACK's count for ?getrf: m n^2 - n^3/3 flops (m >= n; the transpose otherwise).
            const double big = std::max(dm, dn), small = std::min(dm, dn);
            return big * small * small - small * small * small / 3.0;
        }
        case tile_kind::laswp: return 0.0;  // memory traffic only
        case tile_kind::potrf: return dn * dn * dn / 3.0;  // n^3/6 multiply-adds
    }
    return 0.0;
}

bool device::supports(tile_kind kind, dtype, gemm_kernel kernel) const {
    return kind == tile_kind::gemm && supports(kernel);
}

void device::execute(stream& s, const tile_op& op) {
    if (op.kind != tile_kind::gemm)
        throw invalid_argument(id() + ": no '" + std::string(to_string(op.kind)) +
                               "' tile kernel on this device (the engine runs it elsewhere)");
    gemm(s, detail::engine::as_gemm_call(op));
}

}  // namespace tilestream
