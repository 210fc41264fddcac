// Shared by the Level 3 testers (test_trsm.cpp, test_trmm.cpp, test_symm.cpp, test_syrk.cpp,
// test_syr2k.cpp): random operands of a call with the parts BLAS must not read poisoned (NaN in A's
// other triangle, in C when beta = 0; a sentinel in the triangle of C the SYRK family must not
// write), a run through a context, and the comparison with the reference.
#pragma once

#include "test_support.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tilestream::testing {

/// One Level 3 call to run: routine, flags, shapes (as blas3_problem names them), layouts, scalars.
struct blas3_case {
    blas3_routine routine = blas3_routine::trsm;
    blas3_flags flags;
    index_t m = 0, n = 0, k = 0;  ///< syrk family: C is n x n, op(A) n x k
    layout la = layout::row_major, lb = layout::row_major, lc = layout::row_major;
    double alpha = 0.75, beta = 0.0;
    std::uint64_t seed = 1;

    std::string name() const {
        std::ostringstream o;
        o << to_string(routine) << " side=" << to_string(flags.side) << " uplo=" << to_string(flags.uplo)
          << " trans=" << to_string(flags.trans) << " diag=" << to_string(flags.diag) << " m=" << m << " n=" << n
          << " k=" << k << " layouts=" << (la == layout::row_major ? 'r' : 'c') << (lb == layout::row_major ? 'r' : 'c')
          << (lc == layout::row_major ? 'r' : 'c') << " alpha=" << alpha << " beta=" << beta;
        return o.str();
    }
    bool rank_k() const {
        return routine == blas3_routine::syrk || routine == blas3_routine::syr2k || routine == blas3_routine::herk ||
               routine == blas3_routine::her2k;
    }
    bool two() const { return routine == blas3_routine::syr2k || routine == blas3_routine::her2k; }
    bool hermitian() const {
        return routine == blas3_routine::hemm || routine == blas3_routine::herk || routine == blas3_routine::her2k;
    }
    bool solves() const { return routine == blas3_routine::trsm || routine == blas3_routine::trmm; }
    index_t order() const { return rank_k() ? n : (flags.side == side::left ? m : n); }
};

/// The sentinel in the triangle of C a SYRK-family call must leave alone.
inline constexpr double untouched = 12345.0;

/// A random value of T, uniform in [-1, 1] in each part (complex: both parts non-zero).
template <class T, class R>
T random_value(std::uniform_real_distribution<double>& uni, R& rng) {
    if constexpr (is_complex_v<T>) {
        const double re = uni(rng), im = uni(rng);
        return T(real_type_t<T>(re), real_type_t<T>(im));
    } else {
        return T(uni(rng));
    }
}
template <class T>
T nan_value() {
    const real_type_t<T> nan = std::numeric_limits<real_type_t<T>>::quiet_NaN();
    if constexpr (is_complex_v<T>) return T(nan, nan);
    else return nan;
}
template <class T>
bool finite_value(T x) {
    if constexpr (is_complex_v<T>) return std::isfinite(x.real()) && std::isfinite(x.imag());
    else return std::isfinite(x);
}
template <class T>
wide_type_t<T> widen(T x) {
    return wide_type_t<T>(x);
}
template <class W>
double squared(W x) {
    if constexpr (std::is_same_v<W, double>) return x * x;
    else return std::norm(x);
}

template <class T>
struct blas3_data {
    host_matrix<T> a, b, c, c0;  ///< c: run here; c0: its starting values
    blas3_operands<T> ops(const blas3_case& g) {
        blas3_operands<T> o;
        o.alpha = T(g.alpha);
        o.beta = T(g.beta);
        if constexpr (is_complex_v<T>) {
            // Complex scalars with both parts (HERK's alpha and HERK's, HER2K's beta are real).
            if (g.routine != blas3_routine::herk) o.alpha = T(real_type_t<T>(g.alpha), real_type_t<T>(g.alpha / 2));
            if (!g.hermitian() || g.routine == blas3_routine::hemm)
                o.beta = T(real_type_t<T>(g.beta), real_type_t<T>(-g.beta / 3));
        }
        o.a = a.view();
        if (b.size() > 0 || !g.solves()) o.b = b.view();
        o.c = c.view();
        return o;
    }
};

/// Whether (i, j) of a square matrix lies in the `u` triangle (diagonal included).
inline bool in_triangle(uplo u, index_t i, index_t j) { return u == uplo::lower ? i >= j : i <= j; }

template <class T>
blas3_data<T> make_blas3_data(const blas3_case& g) {
    std::mt19937_64 rng(g.seed);
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    const T nan = nan_value<T>();
    blas3_data<T> d;
    const index_t order = g.order();
    if (g.rank_k()) {
        const bool nop = g.flags.trans == op::n;
        d.a = host_matrix<T>(nop ? g.n : g.k, nop ? g.k : g.n, g.la);
        for (index_t i = 0; i < d.a.rows(); ++i)
            for (index_t j = 0; j < d.a.cols(); ++j) d.a(i, j) = random_value<T>(uni, rng);
        if (g.two()) {
            d.b = host_matrix<T>(d.a.rows(), d.a.cols(), g.lb);
            for (index_t i = 0; i < d.b.rows(); ++i)
                for (index_t j = 0; j < d.b.cols(); ++j) d.b(i, j) = random_value<T>(uni, rng);
        }
        d.c = host_matrix<T>(g.n, g.n, g.lc);
        d.c0 = host_matrix<T>(g.n, g.n, g.lc);
        for (index_t i = 0; i < g.n; ++i)
            for (index_t j = 0; j < g.n; ++j)
                d.c0(i, j) = !in_triangle(g.flags.uplo, i, j) ? T(untouched) : g.beta == 0 ? nan : random_value<T>(uni, rng);
    } else {
        // A: the stored triangle random (trsm: well conditioned, off-diagonal scaled by 1/order and
        // a dominant diagonal), the other triangle NaN, which BLAS never reads; a unit diagonal NaN too.
        d.a = host_matrix<T>(order, order, g.la);
        using R = real_type_t<T>;
        for (index_t i = 0; i < order; ++i)
            for (index_t j = 0; j < order; ++j) {
                T v = random_value<T>(uni, rng);
                if (!in_triangle(g.flags.uplo, i, j)) {
                    d.a(i, j) = nan;
                    continue;
                }
                if (g.routine == blas3_routine::trsm) v = i == j ? T(R(2)) + T(R(0.5)) * v : v / T(R(order));
                if (g.solves() && i == j && g.flags.diag == diag::unit) {
                    d.a(i, j) = nan;
                    continue;
                }
                d.a(i, j) = v;  // (hemm: a diagonal's imaginary part is never read either)
            }
        if (g.routine == blas3_routine::symm || g.routine == blas3_routine::hemm) {
            d.b = host_matrix<T>(g.m, g.n, g.lb);
            for (index_t i = 0; i < g.m; ++i)
                for (index_t j = 0; j < g.n; ++j) d.b(i, j) = random_value<T>(uni, rng);
        }
        d.c = host_matrix<T>(g.m, g.n, g.lc);
        d.c0 = host_matrix<T>(g.m, g.n, g.lc);
        const bool poison = g.solves() ? g.alpha == 0 : g.beta == 0;
        for (index_t i = 0; i < g.m; ++i)
            for (index_t j = 0; j < g.n; ++j) d.c0(i, j) = poison ? nan : random_value<T>(uni, rng);
    }
    std::memcpy(d.c.data(), d.c0.data(), sizeof(T) * std::size_t(d.c.size()));
    return d;
}

/// Relative Frobenius error of c against the reference over the elements the call computes, and
/// whether every element it must not write still holds the sentinel (count of those changed).
struct blas3_comparison {
    double error = 0, reference_norm = 0;
    std::size_t changed_outside = 0, nonfinite = 0;
};

template <class T>
blas3_comparison compare_blas3(const blas3_case& g, const blas3_data<T>& d, host_matrix_view<const T> ref) {
    blas3_comparison r;
    double diff = 0, norm = 0;
    for (index_t i = 0; i < ref.rows(); ++i)
        for (index_t j = 0; j < ref.cols(); ++j) {
            const auto x = widen(d.c(i, j)), y = widen(ref(i, j));
            if (g.rank_k() && !in_triangle(g.flags.uplo, i, j)) {
                if (d.c(i, j) != T(untouched)) ++r.changed_outside;
                continue;
            }
            if (!finite_value(d.c(i, j))) ++r.nonfinite;
            diff += squared(x - y);
            norm += squared(y);
        }
    r.reference_norm = std::sqrt(norm);
    r.error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    return r;
}

/// The tolerance of a run against the double-accumulating reference: c sqrt(depth) u.
template <class T>
double blas3_tolerance(const blas3_case& g) {
    const double u = std::ldexp(1.0, -dtype_traits(dtype_of<T>()).mantissa_bits);
    const double depth = double(std::max<index_t>({g.k, g.order(), 1}));
    return (g.routine == blas3_routine::trsm ? 256.0 : 64.0) * std::sqrt(depth) * u;
}

/// Runs the case through the context (fresh operands) and checks it against the reference; the
/// report is returned for the caller's own checks.
template <class T>
blas3_report run_and_check(context& ctx, const blas3_case& g, const blas3_call_options& call = {},
                           std::vector<T>* result = nullptr) {
    blas3_data<T> d = make_blas3_data<T>(g);
    host_matrix<T> ref(d.c0.rows(), d.c0.cols(), d.c0.layout());
    std::memcpy(ref.data(), d.c0.data(), sizeof(T) * std::size_t(ref.size()));
    {
        blas3_operands<T> ro = d.ops(g);
        ro.c = ref.view();
        reference_blas3<T>(g.routine, g.flags, ro);
    }
    const blas3_report rep = ctx.blas3<T>(g.routine, g.flags, d.ops(g), call);
    const blas3_comparison cmp = compare_blas3<T>(g, d, ref.view());
    const double tol = blas3_tolerance<T>(g);
    EXPECT_EQ(cmp.nonfinite, 0u) << g.name() << " on " << ctx.device_names();
    EXPECT_EQ(cmp.changed_outside, 0u) << g.name() << " on " << ctx.device_names() << ": the other triangle of C was written";
    EXPECT_LE(cmp.error, tol) << g.name() << " on " << ctx.device_names() << " (" << to_string(dtype_of<T>()) << ")";
    if (g.alpha != 0 || (!g.solves() && g.beta != 0)) EXPECT_GT(cmp.reference_norm, 0.0) << g.name();
    if (result != nullptr) result->assign(d.c.data(), d.c.data() + d.c.size());
    return rep;
}

/// Every combination of the routine's flags (side, uplo, trans, diag as it has them) for a real
/// or complex type (trans c where BLAS allows it; on real data once, as BLAS reads it as t).
inline std::vector<blas3_flags> every_flag(blas3_routine r, bool complex_type = false) {
    std::vector<blas3_flags> out;
    const bool has_side = r == blas3_routine::symm || r == blas3_routine::hemm || r == blas3_routine::trmm ||
                          r == blas3_routine::trsm;
    const bool has_trans = r != blas3_routine::symm && r != blas3_routine::hemm;
    const bool has_diag = r == blas3_routine::trmm || r == blas3_routine::trsm;
    const bool herm = r == blas3_routine::herk || r == blas3_routine::her2k;
    const bool symmetric_update = r == blas3_routine::syrk || r == blas3_routine::syr2k;
    std::vector<op> ops = {op::n};
    if (has_trans) {
        if (herm) ops.push_back(op::c);
        else if (symmetric_update && complex_type) ops.push_back(op::t);
        else ops.insert(ops.end(), {op::t, op::c});
    }
    for (side s : {side::left, side::right}) {
        if (!has_side && s == side::right) continue;
        for (uplo u : {uplo::lower, uplo::upper})
            for (op t : ops) {
                if (!complex_type && t == op::c && (s == side::right || u == uplo::upper)) continue;  // c = t: once
                for (diag dg : {diag::non_unit, diag::unit}) {
                    if (!has_diag && dg == diag::unit) continue;
                    out.push_back({s, u, t, dg});
                }
            }
    }
    return out;
}

template <class T>
void run_every_option(context& ctx, blas3_routine r, index_t m, index_t n, index_t k, const blas3_call_options& call,
                      bool all_layouts, double alpha, double beta, std::uint64_t seed);

/// Runs every flag combination of the routine with layout combinations (all of them, or about
/// half) in f64 and f32 on the context: m x n (B or C; syrk family: C n x n, op(A) n x k).
inline void every_option(context& ctx, blas3_routine r, index_t m, index_t n, index_t k, const blas3_call_options& call,
                         bool all_layouts, double alpha = 0.75, double beta = 0.5) {
    run_every_option<double>(ctx, r, m, n, k, call, all_layouts, alpha, beta, 5);
    run_every_option<float>(ctx, r, m, n, k, call, all_layouts, alpha, beta, 1005);
}

/// The same for the complex types (complex scalars, both parts of every element non-zero).
inline void every_complex_option(context& ctx, blas3_routine r, index_t m, index_t n, index_t k,
                                 const blas3_call_options& call, bool all_layouts, double alpha = 0.75, double beta = 0.5) {
    run_every_option<std::complex<double>>(ctx, r, m, n, k, call, all_layouts, alpha, beta, 7);
    run_every_option<std::complex<float>>(ctx, r, m, n, k, call, all_layouts, alpha, beta, 1007);
}

template <class T>
void run_every_option(context& ctx, blas3_routine r, index_t m, index_t n, index_t k, const blas3_call_options& call,
                      bool all_layouts, double alpha, double beta, std::uint64_t seed) {
    int count = 0;
    for (const blas3_flags& f : every_flag(r, is_complex_v<T>))
        for (layout la : {layout::row_major, layout::col_major})
            for (layout lc : {layout::row_major, layout::col_major}) {
                ++count;
                if (!all_layouts && la != lc && count % 2) continue;
                blas3_case g;
                g.routine = r;
                g.flags = f;
                g.m = m;
                g.n = n;
                g.k = k;
                g.la = la;
                g.lb = count % 3 ? la : lc;
                g.lc = lc;
                g.alpha = alpha;
                g.beta = beta;
                g.seed = std::uint64_t(37 * count) + seed;
                run_and_check<T>(ctx, g, call);
            }
}

}  // namespace tilestream::testing
