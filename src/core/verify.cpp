// Random fills, poison and error norms shared by the CLI's --check, the tests and the benchmarks,
// and check_gemm: NaN/Inf compared by position, the finite part by a float64 reference (sequential
// or OpenBLAS on upcast blocks) or by Freivalds' random projections.
#include "backends/cpu/openblas_memory.hpp"
#include "core/verify_methods.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
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
    // Walk in storage order so the values depend only on seed, shape and layout.
    const bool row = m.layout() == layout::row_major;
    const index_t outer = row ? m.rows() : m.cols(), inner = row ? m.cols() : m.rows();
    for (index_t o = 0; o < outer; ++o)
        for (index_t i = 0; i < inner; ++i) {
            double v = dist(gen);
            if (std::abs(v) < 1e-3) v = v < 0 ? -0.5 : 0.5;  // never (nearly) zero
            (row ? m(o, i) : m(i, o)) = static_cast<T>(v);
        }
}

template <class T>
void fill_nan(host_matrix_view<T> m) {
    for (index_t i = 0; i < m.rows(); ++i)
        for (index_t j = 0; j < m.cols(); ++j) m(i, j) = std::numeric_limits<T>::quiet_NaN();
}

template <class T>
double relative_frobenius_error(host_matrix_view<const T> x, host_matrix_view<const double> ref) {
    double diff = 0, norm = 0;
    for (index_t i = 0; i < x.rows(); ++i)
        for (index_t j = 0; j < x.cols(); ++j) {
            const double v = static_cast<double>(x(i, j));
            if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
            const double d = v - ref(i, j);
            diff += d * d;
            norm += ref(i, j) * ref(i, j);
        }
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

namespace {
template <class T>
host_matrix<double> to_double(host_matrix_view<const T> v) {
    host_matrix<double> d(v.rows(), v.cols());
    for (index_t i = 0; i < v.rows(); ++i)
        for (index_t j = 0; j < v.cols(); ++j) d(i, j) = static_cast<double>(v(i, j));
    return d;
}
}  // namespace

template <class T>
double gemm_relative_error(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                           T beta, host_matrix_view<const T> c0, host_matrix_view<const T> c) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    const host_matrix<double> ad = to_double(a), bd = to_double(b);
    host_matrix<double> ref(c.rows(), c.cols());
    if (beta != T(0)) {
        validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c0.rows(), c0.cols());
        ref = to_double(c0);
    } else {
        fill_nan(ref.view());  // beta = 0: the reference must not read it either
    }
    reference_gemm<double>(op_a, op_b, double(alpha), ad.view(), bd.view(), double(beta), ref.view());
    return relative_frobenius_error<T>(c, ref.view());
}

double gemm_tolerance(dtype t, index_t k, math_mode m) {
    double u = t == dtype::f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
    if (t == dtype::f32 && m == math_mode::tf32) u = std::ldexp(1.0, -11);
    return std::max(16.0, 8.0 * std::sqrt(static_cast<double>(std::max<index_t>(k, 1)))) * u;
}

template void fill_random<float>(host_matrix_view<float>, std::uint64_t);
template void fill_random<double>(host_matrix_view<double>, std::uint64_t);
template void fill_nan<float>(host_matrix_view<float>);
template void fill_nan<double>(host_matrix_view<double>);
template double relative_frobenius_error<float>(host_matrix_view<const float>, host_matrix_view<const double>);
template double gemm_relative_error<float>(op, op, float, host_matrix_view<const float>, host_matrix_view<const float>,
                                          float, host_matrix_view<const float>, host_matrix_view<const float>);
template double gemm_relative_error<double>(op, op, double, host_matrix_view<const double>,
                                           host_matrix_view<const double>, double, host_matrix_view<const double>,
                                           host_matrix_view<const double>);
template double relative_frobenius_error<double>(host_matrix_view<const double>, host_matrix_view<const double>);

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

/// op(x) as a view of the same memory (a transpose flips the layout).
template <class T>
host_matrix_view<const T> op_view(host_matrix_view<const T> x, op o) {
    if (o == op::n) return x;
    return {x.data(), x.cols(), x.rows(), x.layout() == layout::row_major ? layout::col_major : layout::row_major,
            x.ld()};
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

std::string format_element(index_t i, index_t j, double c, const std::string& ref) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "C(%lld, %lld) is %.9g where the reference is ", (long long)i, (long long)j, c);
    return buf + ref;
}

/// Squared differences and norms over elements finite in both, and the positional NaN/Inf count.
struct error_tally {
    double diff2 = 0, norm2 = 0;
    index_t matched = 0, mismatched = 0;
    std::string first;

    template <class T>
    void add(index_t i, index_t j, T c, double ref) {
        const T r = static_cast<T>(ref);  // the reference in C's type: beyond its range it is inf
        const bool cf = std::isfinite(c), rf = std::isfinite(r);
        if (cf && rf) {
            const double d = double(c) - ref;
            diff2 += d * d;
            norm2 += ref * ref;
            return;
        }
        const bool same = (std::isnan(c) && std::isnan(r)) || (std::isinf(c) && std::isinf(r) && (c > 0) == (r > 0));
        if (same) {
            ++matched;
        } else if (mismatched++ == 0) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.9g", ref);
            first = format_element(i, j, double(c), buf);
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

/// dst (ri.size() x nc, row-major) = x(ri[r], ci[c]) in float64, reading x in its storage order.
template <class T>
void gather(host_matrix_view<const T> x, const index_t* ri, index_t nr, const index_t* ci, index_t nc, double* dst) {
    const T* p = x.data();
    if (x.layout() == layout::row_major) {
        for (index_t r = 0; r < nr; ++r) {
            const T* row = p + ri[r] * x.ld();
            for (index_t c = 0; c < nc; ++c) dst[r * nc + c] = double(row[ci[c]]);
        }
    } else {
        for (index_t c = 0; c < nc; ++c) {
            const T* col = p + ci[c] * x.ld();
            for (index_t r = 0; r < nr; ++r) dst[r * nc + c] = double(col[ri[r]]);
        }
    }
}

std::vector<index_t> iota_indices(index_t n) {
    std::vector<index_t> v(std::size_t(std::max<index_t>(n, 0)));
    for (index_t i = 0; i < n; ++i) v[std::size_t(i)] = i;
    return v;
}

/// The operands of one check, op already applied to A and B.
template <class T>
struct check_operands {
    host_matrix_view<const T> a, b, c0, c;  // op(A) m x k, op(B) k x n
    T alpha, beta;
    index_t m, n, k;
};

/// Compares C(rows, cols) with a float64 reference computed by OpenBLAS dgemm on upcast blocks
/// (mb x kb of op(A), kb x nb of op(B), an mb x nb block of C), C blocks shared among threads.
template <class T>
error_tally compare_with_blas(const check_operands<T>& o, const std::vector<index_t>& rows,
                              const std::vector<index_t>& cols, const detail::gemm_check_options& opt) {
    const index_t nr = index_t(rows.size()), nc = index_t(cols.size());
    if (nr == 0 || nc == 0) return {};
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    const int want_threads = opt.threads > 0 ? opt.threads : hw;
    // Per thread 8 * (mb*kb + kb*nb + mb*nb) bytes with mb = nb = s, kb = 256.
    const index_t kb = std::clamp<index_t>(o.k, 1, 256);
    const double per_thread = double(opt.workspace_bytes) / want_threads / 8.0;
    index_t s = index_t(std::sqrt(double(kb) * kb + per_thread) - double(kb));
    s = std::clamp<index_t>(s / 64 * 64, 64, 1024);
    const index_t mb = std::min(s, nr), nb = std::min(s, nc);
    const index_t grid_m = (nr + mb - 1) / mb, grid_n = (nc + nb - 1) / nb;
    const index_t units = grid_m * grid_n;
    const int threads = int(std::min<index_t>(units, want_threads));
    const std::vector<index_t> ks = iota_indices(o.k);

    // OpenBLAS's own pool is process-wide: the workers here run it single-threaded (as the vendor kernel does).
    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    std::atomic<index_t> next{0};
    std::vector<error_tally> tallies(static_cast<std::size_t>(threads));
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(threads));
    auto work = [&](int t) {
        try {
            const cpu::openblas_call announced(1);
            std::vector<double> ab(std::size_t(mb * kb)), bb(std::size_t(kb * nb)), cb(std::size_t(mb * nb));
            for (index_t u = next++; u < units; u = next++) {
                const index_t i0 = (u / grid_n) * mb, j0 = (u % grid_n) * nb;
                const index_t bm = std::min(mb, nr - i0), bn = std::min(nb, nc - j0);
                const index_t* ri = rows.data() + i0;
                const index_t* ci = cols.data() + j0;
                if (o.beta != T(0)) {
                    gather(o.c0, ri, bm, ci, bn, cb.data());
                    for (index_t e = 0; e < bm * bn; ++e) cb[std::size_t(e)] *= double(o.beta);
                } else {
                    std::fill(cb.begin(), cb.begin() + bm * bn, 0.0);  // beta = 0 never reads C0
                }
                if (o.alpha != T(0))  // alpha = 0 never reads A or B
                    for (index_t k0 = 0; k0 < o.k; k0 += kb) {
                        const index_t bk = std::min(kb, o.k - k0);
                        gather(o.a, ri, bm, ks.data() + k0, bk, ab.data());
                        gather(o.b, ks.data() + k0, bk, ci, bn, bb.data());
                        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(bm), int(bn), int(bk),
                                    double(o.alpha), ab.data(), int(bk), bb.data(), int(bn), 1.0, cb.data(), int(bn));
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
    const std::vector<index_t> mi = iota_indices(o.m), ni = iota_indices(o.n), ki = iota_indices(o.k);
    host_matrix<double> ad(o.m, o.k), bd(o.k, o.n), ref(o.m, o.n);
    gather(o.a, mi.data(), o.m, ki.data(), o.k, ad.data());
    gather(o.b, ki.data(), o.k, ni.data(), o.n, bd.data());
    if (o.beta != T(0))
        gather(o.c0, mi.data(), o.m, ni.data(), o.n, ref.data());
    else
        fill_nan(ref.view());  // beta = 0: the reference must not read it either
    reference_gemm<double>(op::n, op::n, double(o.alpha), ad.view(), bd.view(), double(o.beta), ref.view());
    error_tally tally;
    for (index_t i = 0; i < o.m; ++i)
        for (index_t j = 0; j < o.n; ++j) tally.add(i, j, o.c(i, j), ref(i, j));
    return tally;
}

constexpr int freivalds_v = gemm_check_freivalds_vectors;

/// Rows [i0, i1) of y (rows x V) += x_mat (rows x cols) * v (cols x V), both V wide row-major, leaving
/// out the rows and columns marked in skip_r / skip_c (and, with skip_nonfinite, non-finite elements).
template <bool skip_nonfinite, class T>
void apply_vectors_rows(host_matrix_view<const T> x, const double* v, double* y, const std::vector<char>& skip_r,
                        const std::vector<char>& skip_c, index_t i0, index_t i1) {
    const T* p = x.data();
    if (x.layout() == layout::row_major) {
        for (index_t i = i0; i < i1; ++i) {
            if (skip_r[std::size_t(i)]) continue;
            double acc[freivalds_v] = {};
            const T* row = p + i * x.ld();
            for (index_t j = 0; j < x.cols(); ++j) {
                const double e = double(row[j]);
                if (skip_c[std::size_t(j)] || (skip_nonfinite && !std::isfinite(e))) continue;
                for (int w = 0; w < freivalds_v; ++w) acc[w] += e * v[j * freivalds_v + w];
            }
            for (int w = 0; w < freivalds_v; ++w) y[i * freivalds_v + w] += acc[w];
        }
    } else {
        for (index_t j = 0; j < x.cols(); ++j) {
            if (skip_c[std::size_t(j)]) continue;
            const T* col = p + j * x.ld();
            const double* vj = v + j * freivalds_v;
            for (index_t i = i0; i < i1; ++i) {
                const double e = double(col[i]);
                if (skip_r[std::size_t(i)] || (skip_nonfinite && !std::isfinite(e))) continue;
                for (int w = 0; w < freivalds_v; ++w) y[i * freivalds_v + w] += e * vj[w];
            }
        }
    }
}

/// apply_vectors_rows over all rows, split among `threads` threads (each owns a range of y's rows)
/// when the matrix is large enough to pay for starting them.
template <bool skip_nonfinite, class T>
void apply_vectors(host_matrix_view<const T> x, const double* v, double* y, const std::vector<char>& skip_r,
                   const std::vector<char>& skip_c, int threads) {
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
            apply_vectors_rows<skip_nonfinite>(x, v, y, skip_r, skip_c, rows * t / threads, rows * (t + 1) / threads);
        });
    apply_vectors_rows<skip_nonfinite>(x, v, y, skip_r, skip_c, 0, rows / threads);
}

/// One side of Freivalds: the largest ||c v - alpha a (b v) - beta c0 v||^2 over the vectors, where
/// rows skip_r of a/c and columns skip_c of b/c are left out (they were checked exactly).
template <class T>
double freivalds_side(host_matrix_view<const T> a, host_matrix_view<const T> b, host_matrix_view<const T> c0,
                      host_matrix_view<const T> c, T alpha, T beta, const std::vector<char>& skip_r,
                      const std::vector<char>& skip_c, std::mt19937_64& gen, int threads) {
    const index_t m = c.rows(), n = c.cols(), k = a.cols();
    std::vector<double> v(std::size_t(n * freivalds_v), 0.0);
    for (index_t j = 0; j < n; ++j)
        for (int w = 0; w < freivalds_v; ++w)
            v[std::size_t(j * freivalds_v + w)] = skip_c[std::size_t(j)] ? 0.0 : (gen() & 1 ? 1.0 : -1.0);
    const std::vector<char> none_k(std::size_t(k), 0);
    std::vector<double> bv(std::size_t(k * freivalds_v), 0.0), abv(std::size_t(m * freivalds_v), 0.0),
        c0v(std::size_t(m * freivalds_v), 0.0), cv(std::size_t(m * freivalds_v), 0.0);
    if (alpha != T(0)) {
        apply_vectors<false>(b, v.data(), bv.data(), none_k, skip_c, threads);
        apply_vectors<false>(a, bv.data(), abv.data(), skip_r, none_k, threads);
    }
    if (beta != T(0)) apply_vectors<false>(c0, v.data(), c0v.data(), skip_r, skip_c, threads);
    apply_vectors<true>(c, v.data(), cv.data(), skip_r, skip_c, threads);
    double worst = 0;
    for (int w = 0; w < freivalds_v; ++w) {
        double r2 = 0;
        for (index_t i = 0; i < m; ++i) {
            if (skip_r[std::size_t(i)]) continue;
            const std::size_t e = std::size_t(i * freivalds_v + w);
            const double r = cv[e] - double(alpha) * abv[e] - double(beta) * c0v[e];
            r2 += r * r;
        }
        worst = std::max(worst, r2);
    }
    return worst;
}

/// Freivalds: rows of op(A) (and of C0) and columns of op(B) holding NaN/Inf are checked exactly
/// against the blocked reference (their reference elements are NaN/Inf); the rest through random
/// +-1 projections from both sides, so a wrong row and a wrong column are each measured exactly.
template <class T>
gemm_check_result check_freivalds(const check_operands<T>& o, const detail::gemm_check_options& opt,
                                  gemm_check_result res) {
    std::vector<char> bad_row(std::size_t(o.m), 0), bad_col(std::size_t(o.n), 0);
    if (o.alpha != T(0)) {
        for_each_stored(o.a, [&](index_t i, index_t, T v) { if (!std::isfinite(v)) bad_row[std::size_t(i)] = 1; });
        for_each_stored(o.b, [&](index_t, index_t j, T v) { if (!std::isfinite(v)) bad_col[std::size_t(j)] = 1; });
    }
    if (o.beta != T(0))
        for_each_stored(o.c0, [&](index_t i, index_t, T v) { if (!std::isfinite(v)) bad_row[std::size_t(i)] = 1; });
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
        if (std::isfinite(v)) {
            c_norm2 += double(v) * double(v);
        } else if (rest.mismatched++ == 0) {
            rest.first = format_element(i, j, double(v), "finite (all its operands are)");
        }
    });
    exact.merge(rest);

    std::mt19937_64 gen(opt.seed);
    const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    const double right = freivalds_side(o.a, o.b, o.c0, o.c, o.alpha, o.beta, bad_row, bad_col, gen, threads);
    const double left = freivalds_side(transposed(o.b), transposed(o.a), transposed(o.c0), transposed(o.c), o.alpha,
                                       o.beta, bad_col, bad_row, gen, threads);
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
    check_operands<T> o{op_view(a, op_a), op_view(b, op_b), beta != T(0) ? c0 : c, c, alpha, beta,
                        c.rows(), c.cols(), op_a == op::n ? a.cols() : a.rows()};
    const auto t0 = std::chrono::steady_clock::now();
    gemm_check_result res;
    res.method = opt.method ? *opt.method : choose_gemm_check(o.m, o.n, o.k);
    res.tolerance = gemm_check_tolerance(res.method, dtype_of<T>(), o.n, o.k, mode);
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
#undef TILESTREAM_INSTANTIATE_CHECK

}  // namespace tilestream
