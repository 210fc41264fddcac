// Level 3 calls as problems: names, argument checks with BLAS's rules, quick returns, flops, and
// the sequential reference on host views.
#include <tilestream/blas3.hpp>
#include <tilestream/error.hpp>

#include "backends/reference/reference_kernels.hpp"

#include <cctype>
#include <string>

namespace tilestream {

namespace {

std::string shape(index_t r, index_t c) { return std::to_string(r) + "x" + std::to_string(c); }

template <class V>
tile_matrix as_tile(const V& v) {
    tile_matrix t;
    t.data = v.data();
    t.ld = v.ld();
    t.lay = v.layout();
    return t;
}

bool hermitian(blas3_routine r) {
    return r == blas3_routine::hemm || r == blas3_routine::herk || r == blas3_routine::her2k;
}

}  // namespace

std::string_view to_string(blas3_routine r) noexcept {
    switch (r) {
        case blas3_routine::symm: return "symm";
        case blas3_routine::hemm: return "hemm";
        case blas3_routine::syrk: return "syrk";
        case blas3_routine::herk: return "herk";
        case blas3_routine::syr2k: return "syr2k";
        case blas3_routine::her2k: return "her2k";
        case blas3_routine::trmm: return "trmm";
        case blas3_routine::trsm: return "trsm";
        case blas3_routine::potrf: return "potrf";
    }
    return "?";
}

blas3_routine parse_blas3_routine(std::string_view s) {
    std::string v(s);
    for (char& ch : v) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    for (blas3_routine r : {blas3_routine::symm, blas3_routine::hemm, blas3_routine::syrk, blas3_routine::herk,
                            blas3_routine::syr2k, blas3_routine::her2k, blas3_routine::trmm, blas3_routine::trsm,
                            blas3_routine::potrf}) {
        const std::string name(to_string(r));
        if (v == name) return r;
        if (v.size() == name.size() + 1 && v.substr(1) == name && std::string("sdcz").find(v[0]) != std::string::npos)
            return r;
    }
    throw invalid_argument("unknown Level 3 routine '" + std::string(s) +
                           "' (symm, hemm, syrk, herk, syr2k, her2k, trmm, trsm, potrf)");
}

std::string_view to_string(blas3_order o) noexcept {
    switch (o) {
        case blas3_order::automatic: return "auto";
        case blas3_order::left_looking: return "left-looking";
        case blas3_order::right_looking: return "right-looking";
    }
    return "?";
}

blas3_order parse_blas3_order(std::string_view s) {
    if (s == "auto") return blas3_order::automatic;
    if (s == "left" || s == "left-looking") return blas3_order::left_looking;
    if (s == "right" || s == "right-looking") return blas3_order::right_looking;
    throw invalid_argument("--order expects auto, left or right, got '" + std::string(s) + "'");
}

double blas3_problem::flops() const {
    if (quick_return || !reads_ab) return 0.0;
    // Multiply-adds of two flops (a complex one is eight real flops: four per the half counted here).
    const double per = double(dtype_traits(type).flops_per_multiply_add) / 2.0;
    return per * multiply_adds2();
}

double blas3_problem::multiply_adds2() const {
    const double dm = double(m), dn = double(n), dk = double(k);
    const bool left = flags.side == side::left;
    switch (routine) {
        case blas3_routine::symm:
        case blas3_routine::hemm: return left ? 2.0 * dm * dm * dn : 2.0 * dm * dn * dn;
        case blas3_routine::syrk:
        case blas3_routine::herk: return dn * (dn + 1) * dk;
        case blas3_routine::syr2k:
        case blas3_routine::her2k: return 2.0 * dn * (dn + 1) * dk;
        case blas3_routine::trmm:
        case blas3_routine::trsm: return left ? dm * dm * dn : dm * dn * dn;
        case blas3_routine::potrf: return dn * dn * dn / 3.0;
    }
    return 0.0;
}

std::string blas3_problem::describe() const {
    std::string s(to_string(routine));
    const std::string t(to_string(type));
    switch (routine) {
        case blas3_routine::symm:
        case blas3_routine::hemm:
            s += " side=" + std::string(to_string(flags.side)) + " uplo=" + std::string(to_string(flags.uplo)) + ": C " +
                 shape(m, n) + ", A " + (flags.side == side::left ? shape(m, m) : shape(n, n));
            break;
        case blas3_routine::syrk:
        case blas3_routine::herk:
        case blas3_routine::syr2k:
        case blas3_routine::her2k:
            s += " uplo=" + std::string(to_string(flags.uplo)) + " trans=" + std::string(to_string(flags.trans)) +
                 ": C " + shape(n, n) + ", op(A) " + shape(n, k);
            break;
        case blas3_routine::trmm:
        case blas3_routine::trsm:
            s += " side=" + std::string(to_string(flags.side)) + " uplo=" + std::string(to_string(flags.uplo)) +
                 " trans=" + std::string(to_string(flags.trans)) + " diag=" + std::string(to_string(flags.diag)) +
                 ": B " + shape(m, n) + ", A " + (flags.side == side::left ? shape(m, m) : shape(n, n));
            break;
        case blas3_routine::potrf:
            s += " uplo=" + std::string(to_string(flags.uplo)) + ": A " + shape(n, n);
            break;
    }
    return s + ", " + t;
}

template <class T>
blas3_problem describe_blas3(blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& ops) {
    const std::string name(to_string(routine));
    constexpr dtype type = dtype_of<T>();
    if (hermitian(routine) && !is_complex(type))
        throw invalid_argument(name + ": needs a complex type (c32, c64), got " + std::string(to_string(type)));
    blas3_problem p;
    p.routine = routine;
    p.type = type;
    p.flags = flags;
    // BLAS's rules for trans: op c is op t on real data; herk/her2k take n or c, complex syrk/syr2k n or t.
    p.flags.trans = operand_op(type, flags.trans);
    const bool rank = routine == blas3_routine::syrk || routine == blas3_routine::syr2k || hermitian(routine);
    if (rank && routine != blas3_routine::hemm) {
        const bool herm = hermitian(routine);
        if (herm && p.flags.trans == op::t)
            throw invalid_argument(name + ": trans must be n or c, got t");
        if (!herm && is_complex(type) && p.flags.trans == op::c)
            throw invalid_argument(name + ": trans must be n or t for a complex symmetric update, got c (" +
                                   std::string(routine == blas3_routine::syrk ? "herk" : "her2k") + " takes c)");
    }
    // Scalars BLAS declares real.
    if constexpr (is_complex_v<T>) {
        const bool real_alpha = routine == blas3_routine::herk;
        const bool real_beta = routine == blas3_routine::herk || routine == blas3_routine::her2k;
        if (real_alpha && ops.alpha.imag() != 0)
            throw invalid_argument(name + ": alpha must be real, got " + format_scalar(as_scalar(ops.alpha)));
        if (real_beta && ops.beta.imag() != 0)
            throw invalid_argument(name + ": beta must be real, got " + format_scalar(as_scalar(ops.beta)));
    }
    const auto& a = ops.a;
    const auto& b = ops.b;
    const auto& c = ops.c;
    p.layout_a = a.layout();
    p.layout_b = b.layout();
    p.layout_c = c.layout();
    p.lda = a.ld();
    p.ldb = b.ld();
    p.ldc = c.ld();
    const T zero(0), one(1);
    switch (routine) {
        case blas3_routine::symm:
        case blas3_routine::hemm: {
            p.m = c.rows();
            p.n = c.cols();
            const index_t order = flags.side == side::left ? p.m : p.n;
            if (a.rows() != order || a.cols() != order)
                throw dimension_mismatch(name + ": A is " + shape(a.rows(), a.cols()) + " but side=" +
                                         std::string(to_string(flags.side)) + " with C " + shape(p.m, p.n) +
                                         " needs it " + shape(order, order));
            if (b.rows() != p.m || b.cols() != p.n)
                throw dimension_mismatch(name + ": B is " + shape(b.rows(), b.cols()) + " but C is " + shape(p.m, p.n) +
                                         " (they must be the same shape)");
            p.k = order;
            p.reads_ab = ops.alpha != zero && p.m > 0 && p.n > 0;
            p.reads_c = ops.beta != zero;
            p.quick_return = p.m == 0 || p.n == 0 || (ops.alpha == zero && ops.beta == one);
            break;
        }
        case blas3_routine::syrk:
        case blas3_routine::herk:
        case blas3_routine::syr2k:
        case blas3_routine::her2k: {
            const bool two = routine == blas3_routine::syr2k || routine == blas3_routine::her2k;
            if (c.rows() != c.cols())
                throw dimension_mismatch(name + ": C is " + shape(c.rows(), c.cols()) + ", it must be square");
            p.n = p.m = c.rows();
            const index_t rows = a.rows(), cols = a.cols();
            const index_t order = flags.trans == op::n ? rows : cols;
            p.k = flags.trans == op::n ? cols : rows;
            if (order != p.n)
                throw dimension_mismatch(name + ": op(A) is " +
                                         shape(order, p.k) + " (A " + shape(rows, cols) + ", trans=" +
                                         std::string(to_string(flags.trans)) + ") but C is " + shape(p.n, p.n));
            if (two && (b.rows() != rows || b.cols() != cols))
                throw dimension_mismatch(name + ": B is " + shape(b.rows(), b.cols()) + " but A is " + shape(rows, cols) +
                                         " (they must be the same shape)");
            p.reads_ab = ops.alpha != zero && p.k > 0 && p.n > 0;
            p.reads_c = ops.beta != zero;
            p.quick_return = p.n == 0 || ((ops.alpha == zero || p.k == 0) && ops.beta == one);
            break;
        }
        case blas3_routine::trmm:
        case blas3_routine::trsm: {
            p.m = c.rows();
            p.n = c.cols();
            const index_t order = flags.side == side::left ? p.m : p.n;
            if (a.rows() != order || a.cols() != order)
                throw dimension_mismatch(name + ": A is " + shape(a.rows(), a.cols()) + " but side=" +
                                         std::string(to_string(flags.side)) + " with B " + shape(p.m, p.n) +
                                         " needs it " + shape(order, order));
            p.k = order;
            p.reads_ab = ops.alpha != zero && p.m > 0 && p.n > 0;
            p.reads_c = p.reads_ab;
            p.quick_return = p.m == 0 || p.n == 0;
            break;
        }
        case blas3_routine::potrf: {
            // A is `c`, factored in place (a and b unused).
            if (c.rows() != c.cols())
                throw dimension_mismatch(name + ": A is " + shape(c.rows(), c.cols()) + ", it must be square");
            p.m = p.n = p.k = c.rows();
            p.flags.trans = op::n;
            p.reads_ab = p.n > 0;
            p.reads_c = p.n > 0;
            p.quick_return = p.n == 0;
            break;
        }
    }
    return p;
}

template <class T>
void reference_blas3(blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& ops) {
    const blas3_problem p = describe_blas3<T>(routine, flags, ops);
    if (p.quick_return) return;
    tile_op op;
    op.type = p.type;
    op.side = flags.side;
    op.uplo = flags.uplo;
    op.trans_a = p.flags.trans;
    op.trans_b = p.flags.trans;
    op.diag = flags.diag;
    op.m = p.m;
    op.n = p.n;
    op.k = p.k;
    op.alpha = as_scalar(ops.alpha);
    op.beta = as_scalar(ops.beta);
    op.a = as_tile(ops.a);
    op.b = as_tile(ops.b);
    op.c = as_tile(ops.c);
    switch (routine) {
        case blas3_routine::symm: op.kind = tile_kind::symm; break;
        case blas3_routine::hemm: op.kind = tile_kind::hemm; break;
        case blas3_routine::syrk: op.kind = tile_kind::syrk; break;
        case blas3_routine::herk: op.kind = tile_kind::herk; break;
        case blas3_routine::syr2k: op.kind = tile_kind::syr2k; break;
        case blas3_routine::her2k: op.kind = tile_kind::her2k; break;
        case blas3_routine::trmm: op.kind = tile_kind::trmm; break;
        case blas3_routine::trsm: op.kind = tile_kind::trsm; break;
        case blas3_routine::potrf: op.kind = tile_kind::potrf; break;  // info not reported here
    }
    reference::execute(op);
}

#define TILESTREAM_INSTANTIATE(T)                                                                               \
    template blas3_problem describe_blas3<T>(blas3_routine, const blas3_flags&, const blas3_operands<T>&);    \
    template void reference_blas3<T>(blas3_routine, const blas3_flags&, const blas3_operands<T>&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
