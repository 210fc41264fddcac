// The gemm_call to column-major BLAS mapping (see blas_mapping.hpp).
#include "core/blas_mapping.hpp"

#include <algorithm>

namespace tilestream {

column_major_gemm as_column_major(const gemm_call& call) {
    // BLAS in C's layout; for a row-major C the column-major call swaps the operands and keeps
    // each one's flag (CBLAS's row-major interface does the same).
    const layout order = call.layout_c;
    const operand_desc::blas_view a = call.a_desc().for_blas(order), b = call.b_desc().for_blas(order);
    const operand_desc::blas_view c = call.c_desc().for_blas(order);
    const bool col = order == layout::col_major;
    const operand_desc::blas_view& x = col ? a : b;
    const operand_desc::blas_view& y = col ? b : a;
    column_major_gemm g;
    g.k = call.k;
    g.rows = col ? call.m : call.n;
    g.cols = col ? call.n : call.m;
    g.x = col ? call.a : call.b;
    g.y = col ? call.b : call.a;
    g.z = call.c;
    const auto transposes = [](blas_trans t) { return t == blas_trans::trans || t == blas_trans::conj_trans; };
    const auto conjugates = [](blas_trans t) { return t == blas_trans::conj_trans || t == blas_trans::conj_none; };
    g.trans_x = transposes(x.trans), g.conj_x = conjugates(x.trans), g.ldx = x.ld;
    g.trans_y = transposes(y.trans), g.conj_y = conjugates(y.trans), g.ldy = y.ld;
    g.ldz = c.ld;  // C is read in its own layout: never transposed
    return g;
}

std::string column_major_gemm_violation(const column_major_gemm& g) {
    if (g.rows < 0 || g.cols < 0 || g.k < 0)
        return "negative size " + std::to_string(g.rows) + "x" + std::to_string(g.cols) + "x" +
               std::to_string(g.k);
    const auto rule = [](const char* name, index_t ld, index_t need, const char* why) {
        need = std::max<index_t>(1, need);
        return ld >= need ? std::string()
                          : std::string(name) + " = " + std::to_string(ld) + " is below " +
                                std::to_string(need) + " (" + why + ")";
    };
    std::string e = rule("ldx", g.ldx, g.trans_x ? g.k : g.rows,
                         g.trans_x ? "max(1, k) for a transposed X" : "max(1, rows) for X");
    if (e.empty())
        e = rule("ldy", g.ldy, g.trans_y ? g.cols : g.k,
                 g.trans_y ? "max(1, cols) for a transposed Y" : "max(1, k) for Y");
    if (e.empty()) e = rule("ldz", g.ldz, g.rows, "max(1, rows) for Z");
    return e;
}

}  // namespace tilestream
