// Sequential tile operations on host memory (every tile_kind), accumulating in double: the oracle
// of the Level 3 routines and the host fallback of devices without a kernel for a diagonal block.
#include "reference_kernels.hpp"

#include <tilestream/error.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace tilestream::reference {

namespace {

template <class T>
struct wide {
    using type = double;
};
template <class R>
struct wide<std::complex<R>> {
    using type = std::complex<double>;
};

template <class X>
X conj_of(X x) {
    if constexpr (std::is_arithmetic_v<X>) return x;
    else return std::conj(x);
}

template <class X>
double real_of(X x) {
    if constexpr (std::is_arithmetic_v<X>) return double(x);
    else return double(x.real());
}

/// Element access to a tile_matrix of T, widened; strides and conjugation from the operand
/// descriptor (kernels.hpp), as every kernel derives them.
template <class T>
struct view {
    using W = typename wide<T>::type;
    const T* p;
    layout lay;
    index_t ld;
    explicit view(const tile_matrix& m) : p(static_cast<const T*>(m.data)), lay(m.lay), ld(m.ld) {}
    W operator()(index_t i, index_t j) const { return at(op::n, i, j); }
    /// op(X)(i, j): X's element, its transpose's, or its conjugate transpose's.
    W at(op o, index_t i, index_t j) const {
        const operand_desc d{o, lay, ld, 0, 0};
        const W x = W(p[d.offset(i, j)]);
        return d.conjugated() ? conj_of(x) : x;
    }
};

template <class T>
struct out_view {
    T* p;
    operand_desc d;
    explicit out_view(const tile_matrix& m)
        : p(static_cast<T*>(const_cast<void*>(m.data))), d{op::n, m.lay, m.ld, 0, 0} {}
    T& operator()(index_t i, index_t j) const { return p[d.offset(i, j)]; }
};

template <class T, class W>
T narrow(W w) {
    if constexpr (std::is_arithmetic_v<T>) return static_cast<T>(w);
    else return T(static_cast<typename T::value_type>(w.real()), static_cast<typename T::value_type>(w.imag()));
}

template <class T>
struct scalars {
    using W = typename wide<T>::type;
    W alpha, beta;
    explicit scalars(const tile_op& o) {
        if constexpr (std::is_arithmetic_v<T>) {
            alpha = o.alpha.real();
            beta = o.beta.real();
        } else {
            alpha = o.alpha;
            beta = o.beta;
        }
    }
};

/// C(i, j) <- alpha*sum + beta*C(i, j) with BLAS's rules: beta == 0 never reads C.
template <class T, class W>
void update(T& cij, W alpha, W sum, W beta, bool use_sum) {
    W r = use_sum ? W(alpha * sum) : W(0);
    if (beta != W(0)) r += beta * W(cij);
    cij = narrow<T>(r);
}

template <class T>
void gemm_tile(const tile_op& o) {
    using W = typename wide<T>::type;
    const scalars<T> s(o);
    const view<T> a(o.a), b(o.b);
    const out_view<T> c(o.c);
    const bool ab = o.reads_ab();
    for (index_t i = 0; i < o.m; ++i)
        for (index_t j = 0; j < o.n; ++j) {
            W sum(0);
            if (ab)
                for (index_t p = 0; p < o.k; ++p) sum += a.at(o.trans_a, i, p) * b.at(o.trans_b, p, j);
            update(c(i, j), s.alpha, sum, s.beta, ab);
        }
}

/// syrk/herk/syr2k/her2k: the `uplo` triangle of C (n x n).
template <class T>
void rank_k_tile(const tile_op& o) {
    using W = typename wide<T>::type;
    const bool herm = o.kind == tile_kind::herk || o.kind == tile_kind::her2k;
    const bool two = o.kind == tile_kind::syr2k || o.kind == tile_kind::her2k;
    scalars<T> s(o);
    if (herm) s.beta = W(real_of(s.beta));
    if (o.kind == tile_kind::herk) s.alpha = W(real_of(s.alpha));
    // BLAS's quick return: nothing changes (not even the diagonal's imaginary parts).
    if ((s.alpha == W(0) || o.k == 0) && s.beta == W(1)) return;
    const view<T> a(o.a), b(two ? o.b : o.a);
    const out_view<T> c(o.c);
    const bool ab = o.reads_ab();
    const auto opx = [&](const view<T>& x, index_t i, index_t p) { return x.at(o.trans_a, i, p); };
    for (index_t j = 0; j < o.n; ++j) {
        const index_t i0 = o.uplo == uplo::lower ? j : 0, i1 = o.uplo == uplo::lower ? o.n : j + 1;
        for (index_t i = i0; i < i1; ++i) {
            W r(0);
            if (ab) {
                W s1(0), s2(0);
                for (index_t p = 0; p < o.k; ++p) {
                    const W xa = opx(a, i, p), xb = opx(b, j, p);
                    s1 += herm ? xa * conj_of(xb) : xa * xb;
                    if (two) {
                        const W ya = opx(b, i, p), yb = opx(a, j, p);
                        s2 += herm ? ya * conj_of(yb) : ya * yb;
                    }
                }
                r = s.alpha * s1;
                if (two) r += (herm ? conj_of(s.alpha) : s.alpha) * s2;
            }
            if (s.beta != W(0)) r += s.beta * W(c(i, j));
            if (herm && i == j) r = W(real_of(r));
            c(i, j) = narrow<T>(r);
        }
    }
}

/// symm/hemm: C(m x n) = alpha S B + beta C (left) or alpha B S + beta C (right).
template <class T>
void symm_tile(const tile_op& o) {
    using W = typename wide<T>::type;
    const bool herm = o.kind == tile_kind::hemm;
    const scalars<T> s(o);
    const view<T> a(o.a), b(o.b);
    const out_view<T> c(o.c);
    const bool ab = o.reads_ab();
    // Element (i, p) of the symmetric/Hermitian matrix from its stored triangle.
    const auto sym = [&](index_t i, index_t p) -> W {
        if (i == p) return herm ? W(real_of(a(i, i))) : a(i, i);
        const bool stored = o.uplo == uplo::lower ? i > p : i < p;
        if (stored) return a(i, p);
        return herm ? conj_of(a(p, i)) : a(p, i);
    };
    const index_t inner = o.side == side::left ? o.m : o.n;
    for (index_t i = 0; i < o.m; ++i)
        for (index_t j = 0; j < o.n; ++j) {
            W sum(0);
            if (ab)
                for (index_t p = 0; p < inner; ++p)
                    sum += o.side == side::left ? sym(i, p) * b(p, j) : b(i, p) * sym(p, j);
            update(c(i, j), s.alpha, sum, s.beta, ab);
        }
}

/// Whether op(A) is lower triangular.
bool op_lower(const tile_op& o) { return (o.uplo == uplo::lower) == (o.trans_a == op::n); }

/// op(A)(i, p) of a triangular A (zero outside its triangle, one on a unit diagonal).
template <class T>
typename wide<T>::type tri(const tile_op& o, const view<T>& a, index_t i, index_t p) {
    using W = typename wide<T>::type;
    if (i == p && o.diag == diag::unit) return W(1);
    const bool lower = op_lower(o);
    if (lower ? p > i : p < i) return W(0);
    return a.at(o.trans_a, i, p);
}

template <class T>
void trmm_tile(const tile_op& o) {
    using W = typename wide<T>::type;
    const scalars<T> s(o);
    const out_view<T> c(o.c);
    if (s.alpha == W(0)) {
        for (index_t i = 0; i < o.m; ++i)
            for (index_t j = 0; j < o.n; ++j) c(i, j) = T(0);
        return;
    }
    const view<T> a(o.a);
    const bool left = o.side == side::left;
    const index_t lines = left ? o.n : o.m, len = left ? o.m : o.n;
    std::vector<W> x(static_cast<std::size_t>(len)), y(static_cast<std::size_t>(len));
    for (index_t l = 0; l < lines; ++l) {
        for (index_t q = 0; q < len; ++q) x[std::size_t(q)] = W(left ? c(q, l) : c(l, q));
        // Only the triangle's terms, as BLAS computes them (a NaN in x meets no implicit zero).
        const bool lower = op_lower(o);
        for (index_t q = 0; q < len; ++q) {
            W sum(0);
            const bool below = left ? lower : !lower;  // the terms p <= q
            const index_t p0 = below ? 0 : q, p1 = below ? q + 1 : len;
            for (index_t p = p0; p < p1; ++p)
                sum += (left ? tri<T>(o, a, q, p) : tri<T>(o, a, p, q)) * x[std::size_t(p)];
            y[std::size_t(q)] = s.alpha * sum;
        }
        for (index_t q = 0; q < len; ++q) (left ? c(q, l) : c(l, q)) = narrow<T>(y[std::size_t(q)]);
    }
}

template <class T>
void trsm_tile(const tile_op& o) {
    using W = typename wide<T>::type;
    const scalars<T> s(o);
    const out_view<T> c(o.c);
    if (s.alpha == W(0)) {
        for (index_t i = 0; i < o.m; ++i)
            for (index_t j = 0; j < o.n; ++j) c(i, j) = T(0);
        return;
    }
    const view<T> a(o.a);
    const bool left = o.side == side::left;
    const index_t lines = left ? o.n : o.m, len = left ? o.m : o.n;
    // Left: op(A) x = b per column; right: x op(A) = b per row, i.e. op(A)^T x = b: forward when
    // the matrix x is multiplied by is lower (left) or upper (right).
    const bool forward = left ? op_lower(o) : !op_lower(o);
    std::vector<W> x(static_cast<std::size_t>(len));
    for (index_t l = 0; l < lines; ++l) {
        for (index_t q = 0; q < len; ++q) x[std::size_t(q)] = s.alpha * W(left ? c(q, l) : c(l, q));
        for (index_t step = 0; step < len; ++step) {
            const index_t q = forward ? step : len - 1 - step;
            W v = x[std::size_t(q)];
            const index_t p0 = forward ? 0 : q + 1, p1 = forward ? q : len;
            for (index_t p = p0; p < p1; ++p) {
                const W t = left ? tri<T>(o, a, q, p) : tri<T>(o, a, p, q);
                v -= t * x[std::size_t(p)];
            }
            if (o.diag == diag::non_unit) v /= tri<T>(o, a, q, q);
            x[std::size_t(q)] = v;
        }
        for (index_t q = 0; q < len; ++q) (left ? c(q, l) : c(l, q)) = narrow<T>(x[std::size_t(q)]);
    }
}

/// |re| + |im| (the magnitude LAPACK's i?amax compares), or |x|.
template <class T>
real_type_t<T> abs1(T x) {
    if constexpr (std::is_arithmetic_v<T>) return x < T(0) ? -x : x;
    else return std::abs(x.real()) + std::abs(x.imag());
}

/// LU with partial pivoting of C (m x n) in place, column by column as LAPACK's ?getf2 does, in
/// C's own precision (so the pivots are LAPACK's up to ties); pivots (1-based) into B's first row.
template <class T>
void getrf_tile(const tile_op& o) {
    using R = real_type_t<T>;
    const out_view<T> c(o.c);
    const out_view<T> piv(o.b);
    const index_t steps = std::min(o.m, o.n);
    const R small = std::numeric_limits<R>::min();
    for (index_t j = 0; j < steps; ++j) {
        index_t p = j;
        R best = abs1(c(j, j));
        for (index_t i = j + 1; i < o.m; ++i)
            if (const R v = abs1(c(i, j)); v > best) {
                best = v;
                p = i;
            }
        piv(0, j) = T(R(p + 1));
        if (c(p, j) != T(0)) {
            if (p != j)
                for (index_t q = 0; q < o.n; ++q) std::swap(c(j, q), c(p, q));
            const T d = c(j, j);
            if (abs1(d) >= small) {  // LAPACK: a reciprocal unless it would overflow
                const T r = T(1) / d;
                for (index_t i = j + 1; i < o.m; ++i) c(i, j) *= r;
            } else {
                for (index_t i = j + 1; i < o.m; ++i) c(i, j) /= d;
            }
        }
        for (index_t q = j + 1; q < o.n; ++q) {
            const T u = c(j, q);
            if (u == T(0)) continue;
            for (index_t i = j + 1; i < o.m; ++i) c(i, q) -= c(i, j) * u;
        }
    }
}

/// Row interchanges of C (m x n) from the pivots in A's first row (k of them), in order.
template <class T>
void laswp_tile(const tile_op& o) {
    const out_view<T> c(o.c);
    const view<T> piv(o.a);
    for (index_t i = 0; i < o.k; ++i) {
        const index_t p = index_t(real_of(piv(0, i))) - 1;
        if (p < 0 || p >= o.m)
            throw invalid_argument("laswp: pivot " + std::to_string(p + 1) + " of row " + std::to_string(i + 1) +
                                   " is outside the tile's " + std::to_string(o.m) + " rows");
        if (p != i)
            for (index_t q = 0; q < o.n; ++q) std::swap(c(i, q), c(p, q));
    }
}

/// Cholesky of the `uplo` triangle of C, column by column in double (complex<double>): LAPACK's
/// unblocked ?potf2 order. Stops at the first pivot that is not positive (or NaN), as LAPACK does,
/// leaving the columns before it factored; the other triangle is never touched.
template <class T>
void potrf_tile(const tile_op& o) {
    using W = typename wide<T>::type;
    const index_t n = o.n;
    const bool lower = o.uplo == uplo::lower;
    const view<T> in(o.c);
    const out_view<T> c(o.c);
    // The factor in W, lower-stored: l(i, j) for i >= j (the upper case is its conjugate transpose).
    std::vector<W> l(std::size_t(n) * std::size_t(n));
    const auto at = [&](index_t i, index_t j) -> W& { return l[std::size_t(i) + std::size_t(j) * std::size_t(n)]; };
    for (index_t j = 0; j < n; ++j)
        for (index_t i = j; i < n; ++i) at(i, j) = lower ? in(i, j) : conj_of(in(j, i));
    int info = 0;
    for (index_t j = 0; j < n && info == 0; ++j) {
        double d = real_of(at(j, j));
        for (index_t p = 0; p < j; ++p) d -= std::norm(std::complex<double>(at(j, p)));
        if (!(d > 0.0)) {
            info = int(j + 1);
            break;
        }
        const double djj = std::sqrt(d);
        at(j, j) = W(djj);
        for (index_t i = j + 1; i < n; ++i) {
            W v = at(i, j);
            for (index_t p = 0; p < j; ++p) v -= at(i, p) * conj_of(at(j, p));
            at(i, j) = v / djj;
        }
        // Column j is final: written back now, so a failure later leaves it factored.
        for (index_t i = j; i < n; ++i) {
            if (lower) c(i, j) = narrow<T>(at(i, j));
            else c(j, i) = narrow<T>(conj_of(at(i, j)));
        }
    }
    if (o.info != nullptr) *o.info = info;
}

template <class T>
void execute_typed(const tile_op& o) {
    switch (o.kind) {
        case tile_kind::gemm: return gemm_tile<T>(o);
        case tile_kind::syrk:
        case tile_kind::herk:
        case tile_kind::syr2k:
        case tile_kind::her2k: return rank_k_tile<T>(o);
        case tile_kind::symm:
        case tile_kind::hemm: return symm_tile<T>(o);
        case tile_kind::trmm: return trmm_tile<T>(o);
        case tile_kind::trsm: return trsm_tile<T>(o);
        case tile_kind::getrf: return getrf_tile<T>(o);
        case tile_kind::laswp: return laswp_tile<T>(o);
        case tile_kind::potrf: return potrf_tile<T>(o);
    }
}

}  // namespace

void execute(const tile_op& o) {
    const bool hermitian = o.kind == tile_kind::herk || o.kind == tile_kind::her2k || o.kind == tile_kind::hemm;
    if (hermitian && !is_complex(o.type))
        throw invalid_argument(std::string(to_string(o.kind)) + ": needs a complex type, got " +
                               std::string(to_string(o.type)));
    visit_dtype(o.type, [&]<class T>() { execute_typed<T>(o); });
}

}  // namespace tilestream::reference
