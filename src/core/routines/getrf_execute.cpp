// Running a getrf plan: A and the pivots' scratch row bound to the plan's tasks, the executor run,
// then LAPACK's ipiv (global, 1-based) and info read back; the row interchanges of a solve, the
// sequential oracle and the residual check.
#include "core/engine/executor.hpp"
#include "core/check/host_anchor.hpp"
#include "core/engine/task_graph.hpp"
#include "core/lapack_calls.hpp"
#include "core/routines/routines.hpp"

#include <tilestream/error.hpp>
#include <tilestream/lu.hpp>

#include <cblas.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <thread>
#include <complex>
#include <limits>
#include <vector>


namespace tilestream {

namespace {

bool same_problem(const getrf_problem& a, const getrf_problem& b) {
    return a.type == b.type && a.m == b.m && a.n == b.n && a.lay == b.lay;
}

template <class T>
std::size_t span_bytes(const host_matrix_view<T>& v) {
    if (v.empty()) return 0;
    const index_t outer = v.layout() == layout::row_major ? v.rows() : v.cols();
    const index_t inner = v.layout() == layout::row_major ? v.cols() : v.rows();
    return std::size_t((outer - 1) * v.ld() + inner) * sizeof(std::remove_const_t<T>);
}

}  // namespace

template <class T>
getrf_problem describe_getrf(host_matrix_view<const T> a) {
    getrf_problem p;
    p.type = dtype_of<T>();
    p.m = a.rows();
    p.n = a.cols();
    p.lay = a.layout();
    p.lda = a.ld();
    return p;
}

namespace detail {

/// execute_getrf with each device's tile store taken from (and given back to) a context's memory.
template <class T>
getrf_report execute_getrf_kept(const getrf_plan& plan, std::span<device* const> devices, host_matrix_view<T> a,
                                std::span<index_t> ipiv, const blas3_run_options& run, gemm_memory* memory) {
    const getrf_problem actual = describe_getrf<T>(a);
    if (!same_problem(actual, plan.problem))
        throw invalid_argument("execute_getrf: the matrix does not match the problem the plan was made for (" +
                               actual.describe() + " against " + plan.problem.describe() + ")");
    const index_t mn = std::min(actual.m, actual.n);
    if (index_t(ipiv.size()) < mn)
        throw dimension_mismatch("getrf: ipiv has " + std::to_string(ipiv.size()) + " entries, min(m, n) = " +
                                 std::to_string(mn) + " are needed");
    if (plan.devices != int(devices.size()))
        throw invalid_argument("execute_getrf: the plan is for " + std::to_string(plan.devices) + " device(s), " +
                               std::to_string(devices.size()) + " given");
    getrf_report rep;
    rep.plan = plan;
    if (plan.problem.quick_return() || !plan.graph || plan.graph->tasks.empty()) return rep;
    for (device* d : devices) {
        if (plan.in_place && !d->host_addressable())
            throw invalid_argument("execute_getrf: an in-place plan on " + d->id() + ", which cannot address host memory");
        if (!d->supports(plan.kernel))
            throw invalid_argument("getrf: device " + d->id() + " has no '" + std::string(to_string(plan.kernel)) + "' kernel");
    }
    // The panels' pivots, relative to each panel's first row, as values of A's type (a graph operand).
    std::vector<T> pivots(std::size_t(std::max<index_t>(mn, 1)), T(0));
    engine::run_request rq;
    rq.graph = plan.graph.get();
    engine::host_operand ha;
    ha.base = reinterpret_cast<char*>(a.data());
    ha.ld = a.ld();
    ha.lay = a.layout();
    engine::host_operand hp;
    hp.base = reinterpret_cast<char*>(pivots.data());
    hp.ld = std::max<index_t>(mn, 1);
    hp.lay = layout::row_major;
    rq.operands = {ha, hp};
    rq.in_place = plan.in_place;
    rq.slots = plan.slots;
    rq.slot_bytes = plan.slot_bytes;
    rq.deterministic = plan.reproducible;
    rq.device_flops = plan.device_flops;
    rq.gemm_kernels = plan.gemm_kernels;
    rq.diagonal_block = plan.rates.diagonal_block;
    rq.run = run;
    rq.memory = memory;
    pinned_operands pinned;
    if (run.register_host && !plan.in_place)
        pinned = pinned_operands(devices, std::array{std::pair<const void*, std::size_t>{a.data(), span_bytes(a)}});
    for (const auto& w : pinned.refused()) rep.warnings.push_back("host memory not pinned (copies stay pageable): " + w);
    engine::run_result r = engine::run_tasks(rq, devices);
    for (index_t i = 0; i < mn; ++i) {
        const index_t first = i / plan.tile * plan.tile;
        ipiv[std::size_t(i)] = first + index_t(std::real(pivots[std::size_t(i)]));
    }
    for (index_t i = 0; i < mn && rep.info == 0; ++i)
        if (a(i, i) == T(0)) rep.info = i + 1;
    engine::report_run(rep, std::move(r));
    return rep;
}

}  // namespace detail

template <class T>
getrf_report execute_getrf(const getrf_plan& plan, std::span<device* const> devices, host_matrix_view<T> a,
                           std::span<index_t> ipiv, const blas3_run_options& run) {
    return detail::execute_getrf_kept<T>(plan, devices, a, ipiv, run, nullptr);
}

template <class T>
void apply_row_swaps(host_matrix_view<T> b, std::span<const index_t> ipiv, bool reverse) {
    const index_t count = index_t(ipiv.size());
    for (index_t s = 0; s < count; ++s) {
        const index_t i = reverse ? count - 1 - s : s;
        const index_t p = ipiv[std::size_t(i)] - 1;
        if (i >= b.rows() || p < 0 || p >= b.rows())
            throw invalid_argument("row swaps: ipiv[" + std::to_string(i) + "] = " + std::to_string(p + 1) +
                                   " is not a row of the " + std::to_string(b.rows()) + "-row matrix");
        if (p != i)
            for (index_t j = 0; j < b.cols(); ++j) std::swap(b(i, j), b(p, j));
    }
}

template <class T>
index_t reference_getrf(host_matrix_view<T> a, std::span<index_t> ipiv) {
    using R = real_type_t<T>;
    const index_t m = a.rows(), n = a.cols(), mn = std::min(m, n);
    if (index_t(ipiv.size()) < mn) throw dimension_mismatch("reference_getrf: ipiv shorter than min(m, n)");
    const auto abs1 = [](T x) -> R {
        if constexpr (is_complex_v<T>) return std::abs(x.real()) + std::abs(x.imag());
        else return std::abs(x);
    };
    index_t info = 0;
    for (index_t j = 0; j < mn; ++j) {
        index_t p = j;
        R best = abs1(a(j, j));
        for (index_t i = j + 1; i < m; ++i)
            if (abs1(a(i, j)) > best) {
                best = abs1(a(i, j));
                p = i;
            }
        ipiv[std::size_t(j)] = p + 1;
        if (a(p, j) != T(0)) {
            if (p != j)
                for (index_t q = 0; q < n; ++q) std::swap(a(j, q), a(p, q));
            const T d = a(j, j);
            for (index_t i = j + 1; i < m; ++i) a(i, j) /= d;
        } else if (info == 0) {
            info = j + 1;
        }
        for (index_t q = j + 1; q < n; ++q)
            for (index_t i = j + 1; i < m; ++i) a(i, q) -= a(i, j) * a(j, q);
    }
    return info;
}

template <class T>
double getrf_residual(host_matrix_view<const T> a, host_matrix_view<const T> lu, std::span<const index_t> ipiv) {
    using W = wide_type_t<T>;
    const detail::host_blas_threads all_threads;  // the reference on every core
    const index_t m = a.rows(), n = a.cols(), mn = std::min(m, n);
    if (lu.rows() != m || lu.cols() != n)
        throw dimension_mismatch("getrf_residual: A is " + std::to_string(m) + "x" + std::to_string(n) + ", LU " +
                                 std::to_string(lu.rows()) + "x" + std::to_string(lu.cols()));
    if (index_t(ipiv.size()) < mn) throw dimension_mismatch("getrf_residual: ipiv shorter than min(m, n)");
    // Column-major float64 (complex128) copies: P A into r, L and U apart, r <- r - L U by OpenBLAS.
    std::vector<W> r(std::size_t(m * n)), l(std::size_t(m * std::max<index_t>(mn, 1))), u(std::size_t(std::max<index_t>(mn, 1) * n));
    double norm_a = 0;
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < m; ++i) {
            const W x = W(a(i, j));
            r[std::size_t(i + j * m)] = x;
            norm_a += std::norm(std::complex<double>(x));
        }
    host_matrix_view<W> rv(r.data(), m, n, layout::col_major, m);
    apply_row_swaps<W>(rv, ipiv.first(std::size_t(mn)));
    for (index_t j = 0; j < mn; ++j)
        for (index_t i = 0; i < m; ++i) l[std::size_t(i + j * m)] = i == j ? W(1) : i > j ? W(lu(i, j)) : W(0);
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < mn; ++i) u[std::size_t(i + j * mn)] = i <= j ? W(lu(i, j)) : W(0);
    if (mn > 0) {
        if constexpr (is_complex_v<T>) {
            const W minus(-1), one(1);
            cblas_zgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(mn), &minus, l.data(), int(m), u.data(),
                        int(mn), &one, r.data(), int(m));
        } else {
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(mn), -1.0, l.data(), int(m), u.data(),
                        int(mn), 1.0, r.data(), int(m));
        }
    }
    double norm_r = 0;
    for (const W& x : r) norm_r += std::norm(std::complex<double>(x));
    const double eps = double(std::numeric_limits<real_type_t<T>>::epsilon());
    const double scale = std::sqrt(norm_a) * double(std::max<index_t>({m, n, 1})) * eps;
    return scale > 0 ? std::sqrt(norm_r) / scale : std::sqrt(norm_r);
}

template <class T>
double gesv_backward_error(host_matrix_view<const T> a, host_matrix_view<const T> x, host_matrix_view<const T> b) {
    using W = wide_type_t<T>;
    const detail::host_blas_threads all_threads;  // the reference on every core
    const index_t n = a.rows(), nrhs = x.cols();
    if (a.cols() != n || x.rows() != n || b.rows() != n || b.cols() != nrhs)
        throw dimension_mismatch("gesv_backward_error: A is " + std::to_string(a.rows()) + "x" + std::to_string(a.cols()) +
                                 ", X " + std::to_string(x.rows()) + "x" + std::to_string(x.cols()) + ", B " +
                                 std::to_string(b.rows()) + "x" + std::to_string(b.cols()));
    if (n == 0 || nrhs == 0) return 0.0;
    std::vector<W> aw(std::size_t(n * n)), xw(std::size_t(n * nrhs)), r(std::size_t(n * nrhs));
    double na = 0, nx = 0;
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < n; ++i) {
            aw[std::size_t(i + j * n)] = W(a(i, j));
            na += std::norm(std::complex<double>(aw[std::size_t(i + j * n)]));
        }
    for (index_t j = 0; j < nrhs; ++j)
        for (index_t i = 0; i < n; ++i) {
            xw[std::size_t(i + j * n)] = W(x(i, j));
            r[std::size_t(i + j * n)] = W(b(i, j));
            nx += std::norm(std::complex<double>(xw[std::size_t(i + j * n)]));
        }
    if constexpr (is_complex_v<T>) {
        const W one(1), minus(-1);
        cblas_zgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, int(n), int(nrhs), int(n), &one, aw.data(), int(n), xw.data(),
                    int(n), &minus, r.data(), int(n));
    } else {
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, int(n), int(nrhs), int(n), 1.0, aw.data(), int(n), xw.data(),
                    int(n), -1.0, r.data(), int(n));
    }
    double nr = 0;
    for (const W& v : r) nr += std::norm(std::complex<double>(v));
    const double eps = double(std::numeric_limits<real_type_t<T>>::epsilon());
    const double scale = std::sqrt(na) * std::sqrt(nx) * double(n) * eps;
    return scale > 0 ? std::sqrt(nr) / scale : std::sqrt(nr);
}

template <class T>
blas_anchor time_host_getrf(host_matrix_view<const T> a, int repeat) {
    const index_t m = a.rows(), n = a.cols();
    if (m > INT_MAX || n > INT_MAX) throw invalid_argument("getrf anchor: A is larger than LAPACK's 32-bit sizes");
    std::vector<T> a0(std::size_t(m * n)), work(a0.size());
    for (index_t j = 0; j < n; ++j)
        for (index_t i = 0; i < m; ++i) a0[std::size_t(i + j * m)] = a(i, j);
    std::vector<int> ipiv(std::size_t(std::max<index_t>(std::min(m, n), 1)));
    const int im = int(m), in = int(n), lda = int(std::max<index_t>(m, 1));
    const auto run = [&] {
        if (m == 0 || n == 0) return;
        (void)detail::lapack_getrf<T>(im, in, work.data(), lda, ipiv.data());
    };
    return detail::time_host_anchor(std::string(1, dtype_traits(dtype_of<T>()).blas_prefix) + "getrf_",
                                    describe_getrf<T>(a).flops(), repeat,
                                    [&] { std::memcpy(work.data(), a0.data(), a0.size() * sizeof(T)); }, run);
}

#define TILESTREAM_INSTANTIATE(T)                                                                                     \
    template getrf_problem describe_getrf<T>(host_matrix_view<const T>);                                            \
    template getrf_report execute_getrf<T>(const getrf_plan&, std::span<device* const>, host_matrix_view<T>,        \
                                           std::span<index_t>, const blas3_run_options&);                           \
    template getrf_report detail::execute_getrf_kept<T>(const getrf_plan&, std::span<device* const>,                \
                                                        host_matrix_view<T>, std::span<index_t>,                    \
                                                        const blas3_run_options&, gemm_memory*);                    \
    template void apply_row_swaps<T>(host_matrix_view<T>, std::span<const index_t>, bool);                          \
    template index_t reference_getrf<T>(host_matrix_view<T>, std::span<index_t>);                                   \
    template double getrf_residual<T>(host_matrix_view<const T>, host_matrix_view<const T>, std::span<const index_t>); \
    template double gesv_backward_error<T>(host_matrix_view<const T>, host_matrix_view<const T>, host_matrix_view<const T>); \
    template blas_anchor time_host_getrf<T>(host_matrix_view<const T>, int);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
