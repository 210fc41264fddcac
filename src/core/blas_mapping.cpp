// The gemm_call to column-major BLAS mapping (see blas_mapping.hpp).
#include "core/blas_mapping.hpp"

#include <algorithm>

namespace tilestream {

column_major_operand as_column_major_operand(index_t rows, index_t cols, index_t row_stride,
                                             index_t col_stride) {
    // Untransposed: element (i, j) at i + j*ld, which needs unit steps along i (or one row).
    if (rows <= 1 || row_stride == 1) {
        // One column: ld never steps, so any value is right and the smallest legal one is taken.
        return {false, cols <= 1 ? std::max<index_t>(1, rows) : col_stride};
    }
    // Otherwise unit steps along j: the stored matrix is the cols x rows transpose, ld apart.
    // rows > 1 here, so ld = row_stride steps; a valid operand has it >= its cols.
    return {true, row_stride};
}

column_major_gemm as_column_major(const gemm_call& call) {
    column_major_gemm g;
    g.k = call.k;
    column_major_operand x, y, z;
    if (call.layout_c == layout::col_major) {
        g.rows = call.m, g.cols = call.n, g.x = call.a, g.y = call.b;
        x = as_column_major_operand(call.m, call.k, call.a_row_stride(), call.a_col_stride());
        y = as_column_major_operand(call.k, call.n, call.b_row_stride(), call.b_col_stride());
        z = as_column_major_operand(call.m, call.n, call.c_row_stride(), call.c_col_stride());
    } else {
        // Transposing swaps the strides: X = op(B)^T is n x k, Y = op(A)^T is k x m.
        g.rows = call.n, g.cols = call.m, g.x = call.b, g.y = call.a;
        x = as_column_major_operand(call.n, call.k, call.b_col_stride(), call.b_row_stride());
        y = as_column_major_operand(call.k, call.m, call.a_col_stride(), call.a_row_stride());
        z = as_column_major_operand(call.n, call.m, call.c_col_stride(), call.c_row_stride());
    }
    g.z = call.c;
    g.trans_x = x.trans, g.ldx = x.ld;
    g.trans_y = y.trans, g.ldy = y.ld;
    // C's contiguous index is Z's first (unit row stride), so Z is never read transposed.
    g.ldz = z.ld;
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
