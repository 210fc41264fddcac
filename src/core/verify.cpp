// Random fills, poison and error norms shared by the CLI's --check, the tests and the benchmarks,
// and check_gemm: NaN/Inf compared by position, the finite part by a float64 reference (sequential
// or OpenBLAS on upcast blocks) or by Freivalds' random projections.
#include "backends/cpu/openblas_memory.hpp"
#include "core/verify_methods.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include "core/cblas_gemm.hpp"
#include "core/complex_arith.hpp"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <exception>
#include <limits>
#include <random>
#include <thread>
#include <vector>

namespace tilestream {

template <class T>
void fill_random(host_matrix_view<T> m, std::uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    const auto draw = [&] {
        const double v = dist(gen);
        return std::abs(v) < 1e-3 ? (v < 0 ? -0.5 : 0.5) : v;  // never (nearly) zero
    };
    // Walk in storage order so the values depend only on seed, shape and layout.
    const bool row = m.layout() == layout::row_major;
    const index_t outer = row ? m.rows() : m.cols(), inner = row ? m.cols() : m.rows();
    for (index_t o = 0; o < outer; ++o)
        for (index_t i = 0; i < inner; ++i) {
            T& e = row ? m(o, i) : m(i, o);
            if constexpr (is_complex_v<T>) {
                const double re = draw();
                e = T(static_cast<real_type_t<T>>(re), static_cast<real_type_t<T>>(draw()));
            } else {
                e = static_cast<T>(draw());
            }
        }
}

template <class T>
void fill_nan(host_matrix_view<T> m) {
    const real_type_t<T> nan = std::numeric_limits<real_type_t<T>>::quiet_NaN();
    for (index_t i = 0; i < m.rows(); ++i)
        for (index_t j = 0; j < m.cols(); ++j) {
            if constexpr (is_complex_v<T>)
                m(i, j) = T(nan, nan);
            else
                m(i, j) = nan;
        }
}

template <class T>
double relative_frobenius_error(host_matrix_view<const T> x, host_matrix_view<const wide_type_t<T>> ref) {
    double diff = 0, norm = 0;
    for (index_t i = 0; i < x.rows(); ++i)
        for (index_t j = 0; j < x.cols(); ++j) {
            const wide_type_t<T> v = detail::widen(x(i, j));
            if (!detail::is_finite(v)) return std::numeric_limits<double>::infinity();
            diff += detail::norm2(v - ref(i, j));
            norm += detail::norm2(ref(i, j));
        }
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

namespace {
template <class T>
host_matrix<wide_type_t<T>> to_wide(host_matrix_view<const T> v) {
    host_matrix<wide_type_t<T>> d(v.rows(), v.cols());
    for (index_t i = 0; i < v.rows(); ++i)
        for (index_t j = 0; j < v.cols(); ++j) d(i, j) = detail::widen(v(i, j));
    return d;
}
}  // namespace

template <class T>
double gemm_relative_error(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<const T> c0, host_matrix_view<const T> c) {
    using W = wide_type_t<T>;
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    const host_matrix<W> ad = to_wide(a), bd = to_wide(b);
    host_matrix<W> ref(c.rows(), c.cols());
    if (beta != T(0)) {
        validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c0.rows(), c0.cols());
        ref = to_wide(c0);
    } else {
        fill_nan(ref.view());  // beta = 0: the reference must not read it either
    }
    reference_gemm<W>(operand_op(dtype_of<T>(), op_a), operand_op(dtype_of<T>(), op_b), detail::widen(alpha),
                      ad.view(), bd.view(), detail::widen(beta), ref.view());
    return relative_frobenius_error<T>(c, ref.view());
}

double gemm_tolerance(dtype t, index_t k, math_mode m) {
    const dtype_info& d = dtype_traits(t);
    double u = std::ldexp(1.0, -d.mantissa_bits);
    if (d.real == dtype::f32 && m == math_mode::tf32) u = std::ldexp(1.0, -11);
    // A complex multiply-add is two real ones per part: the sum over k is one of 2k real terms.
    const double terms = double(std::max<index_t>(k, 1)) * (d.is_complex ? 2.0 : 1.0);
    return std::max(16.0, 8.0 * std::sqrt(terms)) * u;
}

#define TILESTREAM_INSTANTIATE_FILLS(T)                                                                           \
    template void fill_random<T>(host_matrix_view<T>, std::uint64_t);                                            \
    template void fill_nan<T>(host_matrix_view<T>);                                                              \
    template double relative_frobenius_error<T>(host_matrix_view<const T>, host_matrix_view<const wide_type_t<T>>); \
    template double gemm_relative_error<T>(op, op, T, host_matrix_view<const T>, host_matrix_view<const T>, T,   \
                                           host_matrix_view<const T>, host_matrix_view<const T>);
TILESTREAM_INSTANTIATE_FILLS(float)
TILESTREAM_INSTANTIATE_FILLS(double)
TILESTREAM_INSTANTIATE_FILLS(std::complex<float>)
TILESTREAM_INSTANTIATE_FILLS(std::complex<double>)
#undef TILESTREAM_INSTANTIATE_FILLS

// ---- check_gemm ----

std::string_view to_string(gemm_check_method m) noexcept {
    switch (m) {
        case gemm_check_method::reference: return "reference";
        case gemm_check_method::blas: return "blas";
        case gemm_check_method::freivalds: return "freivalds";
    }
    return "?";
}

gemm_check_method choose_gemm_check(index_t m, index_t n, index_t k) {
    const double mnk = double(m) * double(n) * double(k);
    if (mnk <= gemm_check_reference_max_mnk) return gemm_check_method::reference;
    if (mnk <= gemm_check_blas_max_mnk) return gemm_check_method::blas;
    return gemm_check_method::freivalds;
}

double gemm_check_tolerance(gemm_check_method method, dtype t, index_t n, index_t k, math_mode m) {
    const double tol = gemm_tolerance(t, k, m);
    if (method != gemm_check_method::freivalds) return tol;
    // C x and alpha A (B x) are sums of n and k terms in float64; rounding grows like sqrt(length) u.
    return tol + 8.0 * (std::sqrt(double(std::max<index_t>(n, 1))) + std::sqrt(double(std::max<index_t>(k, 1)))) *
                     std::ldexp(1.0, -53);
}

std::string gemm_check_result::summary() const {
    const std::string v = std::to_string(gemm_check_freivalds_vectors);
    const std::string name = method == gemm_check_method::reference ? "sequential float64 reference"
                             : method == gemm_check_method::blas    ? "float64 OpenBLAS reference"
                                                                    : "Freivalds estimate from " + v + "+" + v +
                                                                          " random vectors";
    char buf[200];
    std::snprintf(buf, sizeof buf, "relative Frobenius error %.3e (tolerance %.3e, %s, %.3f s)", error, tolerance,
                  name.c_str(), seconds);
    std::string s = buf;
    if (nonfinite_matched > 0)
        s += "; " + std::to_string(nonfinite_matched) + " NaN/Inf matched the reference's";
    if (nonfinite_mismatched > 0)
        s += "; " + std::to_string(nonfinite_mismatched) + " elements NaN/Inf/finite unlike the reference, first " +
             first_mismatch;
    return s + (passed() ? ": OK" : ": FAILED");
}

namespace {

/// op(x) as a view of the same memory: the transpose flips the layout (the conjugation of op::c is
/// the caller's, check_operands::conj_a and conj_b).
template <class T>
host_matrix_view<const T> op_view(host_matrix_view<const T> x, op o) {
    const operand_desc d{o, x.layout(), x.ld(), is_transposed(o) ? x.cols() : x.rows(),
                         is_transposed(o) ? x.rows() : x.cols()};
    return {x.data(), d.rows, d.cols, d.op_layout(), x.ld()};
}

template <class T>
host_matrix_view<const T> transposed(host_matrix_view<const T> x) {
    return op_view(x, op::t);
}

/// Calls f(i, j, x(i, j)) for every element in storage order.
template <class T, class F>
void for_each_stored(host_matrix_view<const T> x, F&& f) {
    if (x.layout() == layout::row_major) {
        for (index_t i = 0; i < x.rows(); ++i)
            for (index_t j = 0; j < x.cols(); ++j) f(i, j, x.data()[i * x.ld() + j]);
    } else {
        for (index_t j = 0; j < x.cols(); ++j)
            for (index_t i = 0; i < x.rows(); ++i) f(i, j, x.data()[i + j * x.ld()]);
    }
}

std::string format_value(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}
std::string format_value(std::complex<double> v) {
    return "(" + format_value(v.real()) + ", " + format_value(v.imag()) + ")";
}

std::string format_element(index_t i, index_t j, const std::string& c, const std::string& ref) {
    return "C(" + std::to_string(i) + ", " + std::to_string(j) + ") is " + c + " where the reference is " + ref;
}

/// The class of a real number beside the reference's: both finite, the same NaN/Inf, or not.
enum class part_match { finite, same_nonfinite, differs };
template <class R>
part_match compare_part(R c, double ref) {
    const R r = static_cast<R>(ref);  // the reference in C's type: beyond its range it is inf
    const bool cf = std::isfinite(c), rf = std::isfinite(r);
    if (cf && rf) return part_match::finite;
    const bool same = (std::isnan(c) && std::isnan(r)) || (std::isinf(c) && std::isinf(r) && (c > 0) == (r > 0));
    return same ? part_match::same_nonfinite : part_match::differs;
}

/// Squared differences and norms over elements finite in both, and the positional NaN/Inf count.
/// A complex element is finite when both parts are, and must be non-finite exactly where the
/// reference is: which part is NaN and which infinite depends on how an implementation multiplies
/// (a real alpha applied as (a, 0) turns 0 * inf into NaN, one applied per part does not), which
/// BLAS leaves open, so only finite against non-finite is compared for complex types.
struct error_tally {
    double diff2 = 0, norm2 = 0;
    index_t matched = 0, mismatched = 0;
    std::string first;

    template <class T>
    void add(index_t i, index_t j, T c, wide_type_t<T> ref) {
        part_match m;
        if constexpr (is_complex_v<T>) {
            using R = real_type_t<T>;
            const bool cf = detail::is_finite(c);
            const bool rf = std::isfinite(static_cast<R>(ref.real())) && std::isfinite(static_cast<R>(ref.imag()));
            m = cf && rf ? part_match::finite : cf == rf ? part_match::same_nonfinite : part_match::differs;
        } else {
            m = compare_part(c, ref);
        }
        if (m == part_match::finite) {
            diff2 += detail::norm2(detail::widen(c) - ref);
            norm2 += detail::norm2(ref);
        } else if (m == part_match::same_nonfinite) {
            ++matched;
        } else if (mismatched++ == 0) {
            first = format_element(i, j, format_value(detail::widen(c)), format_value(ref));
        }
    }
    void merge(const error_tally& o) {
        diff2 += o.diff2;
        norm2 += o.norm2;
        matched += o.matched;
        if (mismatched == 0) first = o.first;
        mismatched += o.mismatched;
    }
};

/// dst (ri.size() x nc, row-major) = x(ri[r], ci[c]) in double precision (conjugated when conj),
/// reading x in its storage order.
template <class T>
void gather(host_matrix_view<const T> x, bool conj, const index_t* ri, index_t nr, const index_t* ci, index_t nc,
            wide_type_t<T>* dst) {
    const T* p = x.data();
    const auto get = [conj](T v) { return detail::widen(detail::conj_if(v, conj)); };
    if (x.layout() == layout::row_major) {
        for (index_t r = 0; r < nr; ++r) {
            const T* row = p + ri[r] * x.ld();
            for (index_t c = 0; c < nc; ++c) dst[r * nc + c] = get(row[ci[c]]);
        }
    } else {
        for (index_t c = 0; c < nc; ++c) {
            const T* col = p + ci[c] * x.ld();
            for (index_t r = 0; r < nr; ++r) dst[r * nc + c] = get(col[ri[r]]);
        }
    }
}

std::vector<index_t> iota_indices(index_t n) {
    std::vector<index_t> v(std::size_t(std::max<index_t>(n, 0)));
    for (index_t i = 0; i < n; ++i) v[std::size_t(i)] = i;
    return v;
}

/// The operands of one check, op already applied to A and B (transposed views; conj_a/conj_b: the
/// elements of op(A)/op(B) are the conjugates of what the views hold).
template <class T>
struct check_operands {
    host_matrix_view<const T> a, b, c0, c;  // op(A) m x k, op(B) k x n
    bool conj_a, conj_b;
    T alpha, beta;
    index_t m, n, k;
};

/// Compares C(rows, cols) with a double-precision reference computed by OpenBLAS dgemm (zgemm for
/// complex types) on upcast blocks (mb x kb of op(A), kb x nb of op(B), an mb x nb block of C), C
/// blocks shared among threads.
template <class T>
error_tally compare_with_blas(const check_operands<T>& o, const std::vector<index_t>& rows,
                              const std::vector<index_t>& cols, const detail::gemm_check_options& opt) {
    using W = wide_type_t<T>;
    const index_t nr = index_t(rows.size()), nc = index_t(cols.size());
    if (nr == 0 || nc == 0) return {};
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    const int want_threads = opt.threads > 0 ? opt.threads : hw;
    // Per thread sizeof(W) * (mb*kb + kb*nb + mb*nb) bytes with mb = nb = s, kb = 256.
    const index_t kb = std::clamp<index_t>(o.k, 1, 256);
    const double per_thread = double(opt.workspace_bytes) / want_threads / double(sizeof(W));
    index_t s = index_t(std::sqrt(double(kb) * kb + per_thread) - double(kb));
    s = std::clamp<index_t>(s / 64 * 64, 64, 1024);
    const index_t mb = std::min(s, nr), nb = std::min(s, nc);
    const index_t grid_m = (nr + mb - 1) / mb, grid_n = (nc + nb - 1) / nb;
    const index_t units = grid_m * grid_n;
    const int threads = int(std::min<index_t>(units, want_threads));
    const std::vector<index_t> ks = iota_indices(o.k);
    const W alpha = detail::widen(o.alpha), beta = detail::widen(o.beta);

    // OpenBLAS's own pool is process-wide: the workers here run it single-threaded (as the vendor kernel does).
    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    std::atomic<index_t> next{0};
    std::vector<error_tally> tallies(static_cast<std::size_t>(threads));
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
    auto work = [&](int t) {
        try {
            const cpu::openblas_call announced(1);
            std::vector<W> ab(std::size_t(mb * kb)), bb(std::size_t(kb * nb)), cb(std::size_t(mb * nb));
            for (index_t u = next++; u < units; u = next++) {
                const index_t i0 = (u / grid_n) * mb, j0 = (u % grid_n) * nb;
                const index_t bm = std::min(mb, nr - i0), bn = std::min(nb, nc - j0);
                const index_t* ri = rows.data() + i0;
                const index_t* ci = cols.data() + j0;
                if (o.beta != T(0)) {
                    gather(o.c0, false, ri, bm, ci, bn, cb.data());
                    for (index_t e = 0; e < bm * bn; ++e) cb[std::size_t(e)] = detail::mul(cb[std::size_t(e)], beta);
                } else {
                    std::fill(cb.begin(), cb.begin() + bm * bn, W(0.0));  // beta = 0 never reads C0
                }
                if (o.alpha != T(0))  // alpha = 0 never reads A or B
                    for (index_t k0 = 0; k0 < o.k; k0 += kb) {
                        const index_t bk = std::min(kb, o.k - k0);
                        gather(o.a, o.conj_a, ri, bm, ks.data() + k0, bk, ab.data());
                        gather(o.b, o.conj_b, ks.data() + k0, bk, ci, bn, bb.data());
                        detail::cblas_gemm<W>(CblasRowMajor, CblasNoTrans, CblasNoTrans, bm, bn, bk, alpha, ab.data(),
                                              bk, bb.data(), bn, W(1.0), cb.data(), bn);
                    }
                error_tally& tally = tallies[std::size_t(t)];
                for (index_t i = 0; i < bm; ++i)
                    for (index_t j = 0; j < bn; ++j) tally.add(ri[i], ci[j], o.c(ri[i], ci[j]), cb[std::size_t(i * bn + j)]);
            }
        } catch (...) {
            errors[std::size_t(t)] = std::current_exception();
            next = units;
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (auto& th : pool) th.join();
    openblas_set_num_threads(blas_threads);
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    error_tally all;
    for (const auto& t : tallies) all.merge(t);
    return all;
}

/// The sequential reference over all of C (the tests' oracle, for small problems).
template <class T>
error_tally compare_with_reference(const check_operands<T>& o) {
    using W = wide_type_t<T>;
    const std::vector<index_t> mi = iota_indices(o.m), ni = iota_indices(o.n), ki = iota_indices(o.k);
    host_matrix<W> ad(o.m, o.k), bd(o.k, o.n), ref(o.m, o.n);
    gather(o.a, o.conj_a, mi.data(), o.m, ki.data(), o.k, ad.data());
    gather(o.b, o.conj_b, ki.data(), o.k, ni.data(), o.n, bd.data());
    if (o.beta != T(0))
        gather(o.c0, false, mi.data(), o.m, ni.data(), o.n, ref.data());
    else
        fill_nan(ref.view());  // beta = 0: the reference must not read it either
    reference_gemm<W>(op::n, op::n, detail::widen(o.alpha), ad.view(), bd.view(), detail::widen(o.beta), ref.view());
    error_tally tally;
    for (index_t i = 0; i < o.m; ++i)
        for (index_t j = 0; j < o.n; ++j) tally.add(i, j, o.c(i, j), ref(i, j));
    return tally;
}

constexpr int freivalds_v = gemm_check_freivalds_vectors;

/// Rows [i0, i1) of y (rows x V) += x_mat (rows x cols) * v (cols x V), both V wide row-major, leaving
/// out the rows and columns marked in skip_r / skip_c (and, with skip_nonfinite, non-finite elements);
/// x's elements are conjugated when conj.
template <bool skip_nonfinite, class T>
void apply_vectors_rows(host_matrix_view<const T> x, bool conj, const wide_type_t<T>* v, wide_type_t<T>* y,
                        const std::vector<char>& skip_r, const std::vector<char>& skip_c, index_t i0, index_t i1) {
    using W = wide_type_t<T>;
    const T* p = x.data();
    if (x.layout() == layout::row_major) {
        for (index_t i = i0; i < i1; ++i) {
            if (skip_r[std::size_t(i)]) continue;
            W acc[freivalds_v] = {};
            const T* row = p + i * x.ld();
            for (index_t j = 0; j < x.cols(); ++j) {
                const W e = detail::widen(detail::conj_if(row[j], conj));
                if (skip_c[std::size_t(j)] || (skip_nonfinite && !detail::is_finite(e))) continue;
                for (int w = 0; w < freivalds_v; ++w) acc[w] = detail::mul_add(e, v[j * freivalds_v + w], acc[w]);
            }
            for (int w = 0; w < freivalds_v; ++w) y[i * freivalds_v + w] += acc[w];
        }
    } else {
        for (index_t j = 0; j < x.cols(); ++j) {
            if (skip_c[std::size_t(j)]) continue;
            const T* col = p + j * x.ld();
            const W* vj = v + j * freivalds_v;
            for (index_t i = i0; i < i1; ++i) {
                const W e = detail::widen(detail::conj_if(col[i], conj));
                if (skip_r[std::size_t(i)] || (skip_nonfinite && !detail::is_finite(e))) continue;
                for (int w = 0; w < freivalds_v; ++w) y[i * freivalds_v + w] = detail::mul_add(e, vj[w], y[i * freivalds_v + w]);
            }
        }
    }
}

/// apply_vectors_rows over all rows, split among `threads` threads (each owns a range of y's rows)
/// when the matrix is large enough to pay for starting them.
template <bool skip_nonfinite, class T>
void apply_vectors(host_matrix_view<const T> x, bool conj, const wide_type_t<T>* v, wide_type_t<T>* y,
                   const std::vector<char>& skip_r, const std::vector<char>& skip_c, int threads) {
    const index_t rows = x.rows();
    if (double(rows) * double(x.cols()) < 32768.0) threads = 1;
    threads = int(std::clamp<index_t>(rows, 1, threads));
    std::vector<std::thread> pool;
    struct joiner {
        std::vector<std::thread>& pool;
        ~joiner() {
            for (auto& t : pool) t.join();
        }
    } join_all{pool};
    for (int t = 1; t < threads; ++t)
        pool.emplace_back([&, t] {
            apply_vectors_rows<skip_nonfinite>(x, conj, v, y, skip_r, skip_c, rows * t / threads,
                                               rows * (t + 1) / threads);
        });
    apply_vectors_rows<skip_nonfinite>(x, conj, v, y, skip_r, skip_c, 0, rows / threads);
}

/// A random entry of a Freivalds vector: +-1, or for complex types one of +-1, +-i (E[x conj(x')] is
/// 1 for the same entry and 0 for two, so E|E x|^2 = ||E||_F^2 for any error E, as with real +-1).
template <class W>
W random_unit(std::mt19937_64& gen) {
    const std::uint64_t r = gen();
    if constexpr (std::is_same_v<W, double>)
        return r & 1 ? 1.0 : -1.0;
    else
        return (r & 2) ? W(r & 1 ? 1.0 : -1.0, 0.0) : W(0.0, r & 1 ? 1.0 : -1.0);
}

/// One side of Freivalds: the largest ||c v - alpha a (b v) - beta c0 v||^2 over the vectors, where
/// rows skip_r of a/c and columns skip_c of b/c are left out (they were checked exactly).
template <class T>
double freivalds_side(host_matrix_view<const T> a, bool conj_a, host_matrix_view<const T> b, bool conj_b,
                      host_matrix_view<const T> c0, host_matrix_view<const T> c, T alpha, T beta,
                      const std::vector<char>& skip_r, const std::vector<char>& skip_c, std::mt19937_64& gen,
                      int threads) {
    using W = wide_type_t<T>;
    const index_t m = c.rows(), n = c.cols(), k = a.cols();
    std::vector<W> v(std::size_t(n * freivalds_v), W(0.0));
    for (index_t j = 0; j < n; ++j)
        for (int w = 0; w < freivalds_v; ++w)
            v[std::size_t(j * freivalds_v + w)] = skip_c[std::size_t(j)] ? W(0.0) : random_unit<W>(gen);
    const std::vector<char> none_k(std::size_t(k), 0);
    std::vector<W> bv(std::size_t(k * freivalds_v), W(0.0)), abv(std::size_t(m * freivalds_v), W(0.0)),
        c0v(std::size_t(m * freivalds_v), W(0.0)), cv(std::size_t(m * freivalds_v), W(0.0));
    if (alpha != T(0)) {
        apply_vectors<false>(b, conj_b, v.data(), bv.data(), none_k, skip_c, threads);
        apply_vectors<false>(a, conj_a, bv.data(), abv.data(), skip_r, none_k, threads);
    }
    if (beta != T(0)) apply_vectors<false>(c0, false, v.data(), c0v.data(), skip_r, skip_c, threads);
    apply_vectors<true>(c, false, v.data(), cv.data(), skip_r, skip_c, threads);
    const W wa = detail::widen(alpha), wb = detail::widen(beta);
    double worst = 0;
    for (int w = 0; w < freivalds_v; ++w) {
        double r2 = 0;
        for (index_t i = 0; i < m; ++i) {
            if (skip_r[std::size_t(i)]) continue;
            const std::size_t e = std::size_t(i * freivalds_v + w);
            const W r = cv[e] - detail::mul(wa, abv[e]) - detail::mul(wb, c0v[e]);
            r2 += detail::norm2(r);
        }
        worst = std::max(worst, r2);
    }
    return worst;
}

/// Freivalds: rows of op(A) (and of C0) and columns of op(B) holding NaN/Inf are checked exactly
/// against the blocked reference (their reference elements are NaN/Inf); the rest through random
/// projections from both sides, so a wrong row and a wrong column are each measured exactly.
template <class T>
gemm_check_result check_freivalds(const check_operands<T>& o, const detail::gemm_check_options& opt,
                                  gemm_check_result res) {
    std::vector<char> bad_row(std::size_t(o.m), 0), bad_col(std::size_t(o.n), 0);
    if (o.alpha != T(0)) {
        for_each_stored(o.a, [&](index_t i, index_t, T v) { if (!detail::is_finite(v)) bad_row[std::size_t(i)] = 1; });
        for_each_stored(o.b, [&](index_t, index_t j, T v) { if (!detail::is_finite(v)) bad_col[std::size_t(j)] = 1; });
    }
    if (o.beta != T(0))
        for_each_stored(o.c0, [&](index_t i, index_t, T v) { if (!detail::is_finite(v)) bad_row[std::size_t(i)] = 1; });
    std::vector<index_t> rows_bad, rows_good, cols_bad;
    for (index_t i = 0; i < o.m; ++i) (bad_row[std::size_t(i)] ? rows_bad : rows_good).push_back(i);
    for (index_t j = 0; j < o.n; ++j)
        if (bad_col[std::size_t(j)]) cols_bad.push_back(j);
    error_tally exact = compare_with_blas(o, rows_bad, iota_indices(o.n), opt);
    exact.merge(compare_with_blas(o, rows_good, cols_bad, opt));

    // Elsewhere every operand is finite, so the reference is too: C must be.
    double c_norm2 = 0;
    error_tally rest;
    for_each_stored(o.c, [&](index_t i, index_t j, T v) {
        if (bad_row[std::size_t(i)] || bad_col[std::size_t(j)]) return;
        if (detail::is_finite(v)) {
            c_norm2 += detail::norm2(v);
        } else if (rest.mismatched++ == 0) {
            rest.first = format_element(i, j, format_value(detail::widen(v)), "finite (all its operands are)");
        }
    });
    exact.merge(rest);

    std::mt19937_64 gen(opt.seed);
    const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    const double right = freivalds_side(o.a, o.conj_a, o.b, o.conj_b, o.c0, o.c, o.alpha, o.beta, bad_row, bad_col,
                                        gen, threads);
    // y^T C = alpha (y^T op(A)) op(B) + beta y^T C0, as C^T y with the transposed views (no conjugation).
    const double left = freivalds_side(transposed(o.b), o.conj_b, transposed(o.a), o.conj_a, transposed(o.c0),
                                       transposed(o.c), o.alpha, o.beta, bad_col, bad_row, gen, threads);
    const double diff2 = exact.diff2 + std::max(right, left), norm2 = exact.norm2 + c_norm2;
    res.error = norm2 > 0 ? std::sqrt(diff2 / norm2) : std::sqrt(diff2);
    res.nonfinite_matched = exact.matched;
    res.nonfinite_mismatched = exact.mismatched;
    res.first_mismatch = exact.first;
    return res;
}

}  // namespace

namespace detail {

template <class T>
gemm_check_result check_gemm_with(const gemm_check_options& opt, op op_a, op op_b, T alpha,
                                  host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                                  host_matrix_view<const T> c0, host_matrix_view<const T> c, math_mode mode) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    if (beta != T(0)) validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c0.rows(), c0.cols());
    const dtype type = dtype_of<T>();
    check_operands<T> o{op_view(a, op_a),
                        op_view(b, op_b),
                        beta != T(0) ? c0 : c,
                        c,
                        is_conjugated(operand_op(type, op_a)),
                        is_conjugated(operand_op(type, op_b)),
                        alpha,
                        beta,
                        c.rows(),
                        c.cols(),
                        is_transposed(op_a) ? a.rows() : a.cols()};
    const auto t0 = std::chrono::steady_clock::now();
    gemm_check_result res;
    res.method = opt.method ? *opt.method : choose_gemm_check(o.m, o.n, o.k);
    res.tolerance = gemm_check_tolerance(res.method, type, o.n, o.k, mode);
    if (res.method == gemm_check_method::freivalds) {
        res = check_freivalds(o, opt, res);
    } else {
        const error_tally t = res.method == gemm_check_method::reference
                                  ? compare_with_reference(o)
                                  : compare_with_blas(o, iota_indices(o.m), iota_indices(o.n), opt);
        res.error = t.norm2 > 0 ? std::sqrt(t.diff2 / t.norm2) : std::sqrt(t.diff2);
        res.nonfinite_matched = t.matched;
        res.nonfinite_mismatched = t.mismatched;
        res.first_mismatch = t.first;
    }
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace detail

template <class T>
gemm_check_result check_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                             T beta, host_matrix_view<const T> c0, host_matrix_view<const T> c, math_mode m) {
    return detail::check_gemm_with<T>({}, op_a, op_b, alpha, a, b, beta, c0, c, m);
}

#define TILESTREAM_INSTANTIATE_CHECK(T)                                                                         \
    template gemm_check_result check_gemm<T>(op, op, T, host_matrix_view<const T>, host_matrix_view<const T>, T, \
                                             host_matrix_view<const T>, host_matrix_view<const T>, math_mode);  \
    template gemm_check_result detail::check_gemm_with<T>(const detail::gemm_check_options&, op, op, T,         \
                                                          host_matrix_view<const T>, host_matrix_view<const T>, T, \
                                                          host_matrix_view<const T>, host_matrix_view<const T>, \
                                                          math_mode);
TILESTREAM_INSTANTIATE_CHECK(float)
TILESTREAM_INSTANTIATE_CHECK(double)
TILESTREAM_INSTANTIATE_CHECK(std::complex<float>)
TILESTREAM_INSTANTIATE_CHECK(std::complex<double>)
#undef TILESTREAM_INSTANTIATE_CHECK

}  // namespace tilestream
