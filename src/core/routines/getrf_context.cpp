// The context's LU calls: getrf planned for all its devices and run one at a time on them; getrs
// and gesv as row interchanges and two TRSMs on the same engine.
#include <tilestream/context.hpp>
#include <tilestream/error.hpp>

#include "core/context_routes.hpp"
#include "core/gemm_memory.hpp"
#include "core/engine/tile_rates.hpp"
#include "core/routines/routines.hpp"

#include <chrono>

namespace tilestream {

getrf_plan context::plan(const getrf_problem& problem, const getrf_call_options& call) {
    getrf_options o;
    o.kernel = call.kernel ? *call.kernel : options_.kernel.value_or(gemm_kernel::vendor);
    o.math = options_.math;
    o.tile = call.tile;
    o.order = call.order;
    o.devices = int(device_ptrs_.size());
    o.in_place = in_place_;
    o.reproducible = options_.reproducible;
    device_rates r = routine_rates("getrf", problem.type, o.kernel, problem.quick_return(), call.rates,
                                   detail::engine::routine_tile_variants(problem));
    if (!call.kernel && !call.rates && !problem.quick_return()) o.gemm_kernels = tile_gemm_kernels(problem.type, problem.flops(), r);
    // Each device's measured rate for the balance, also when the call declares the plan's rates
    // (those stand for every device; the model's scale is then theirs).
    const detail::device_balance b = problem.quick_return() ? detail::device_balance{} : balance(problem.type);
    // The model spreads tasks over the devices that take them (a GPU beside its host's CPU: the
    // GPU alone), at their mean rate; the build and the executor still use every device.
    if (b.idle_ones(o.devices)) o.working_devices = b.working;
    if (!options_.rates && !call.rates) {
        b.scale(r, o.devices);
    }
    try {
        getrf_plan p = plan_getrf(problem, budget(), r, o);
        p.device_flops = b.flops;
        return p;
    } catch (const out_of_budget& e) {
        throw out_of_budget(names_ + ": " + e.what());
    }
}

std::string context::explain(const getrf_plan& p) const {
    if (p.problem.quick_return()) return tilestream::explain(p);
    return tilestream::explain(p) + detail::balance_line(device_ptrs_, p.device_flops);
}

template <class T>
getrf_report context::execute(const getrf_plan& p, host_matrix_view<T> a, std::span<index_t> ipiv,
                              const getrf_call_options& call) {
    if (p.devices != int(device_ptrs_.size()))
        throw invalid_argument("context: the plan is for " + std::to_string(p.devices) + " device(s), this context has " +
                               std::to_string(device_ptrs_.size()) + " (" + names_ + ")");
    const std::lock_guard lock(mutex_);
    // A is overwritten: a kept view of it has changed once the call returns, however it returns.
    struct written_guard {
        detail::keep_registry& registry;
        host_matrix_view<T> a;
        ~written_guard() {
            if (a.empty()) return;
            const index_t outer = a.layout() == layout::row_major ? a.rows() : a.cols();
            const index_t inner = a.layout() == layout::row_major ? a.cols() : a.rows();
            detail::kept_written(registry, a.data(), std::size_t((outer - 1) * a.ld() + inner) * sizeof(T));
        }
    } written{*keeps_, a};
    return detail::execute_getrf_kept<T>(p, device_ptrs_, a, ipiv, call.run, memory_.get());
}

template <class T>
getrs_report context::getrs(op trans, host_matrix_view<const T> lu, std::span<const index_t> ipiv, host_matrix_view<T> b,
                            const blas3_call_options& call) {
    const index_t n = lu.rows();
    if (lu.cols() != n)
        throw dimension_mismatch("getrs: A must be square, got " + std::to_string(lu.rows()) + "x" + std::to_string(lu.cols()));
    if (b.rows() != n)
        throw dimension_mismatch("getrs: B has " + std::to_string(b.rows()) + " rows, A is " + std::to_string(n) + "x" +
                                 std::to_string(n));
    if (index_t(ipiv.size()) < n)
        throw dimension_mismatch("getrs: ipiv has " + std::to_string(ipiv.size()) + " entries, " + std::to_string(n) +
                                 " are needed");
    const auto t0 = std::chrono::steady_clock::now();
    getrs_report r;
    const std::span<const index_t> piv = ipiv.first(std::size_t(n));
    if (trans == op::n) {
        // A = P L U: X = U^-1 L^-1 P^T B.
        apply_row_swaps<T>(b, piv);
        r.first = trsm<T>(side::left, uplo::lower, op::n, diag::unit, T(1), lu, b, call);
        r.second = trsm<T>(side::left, uplo::upper, op::n, diag::non_unit, T(1), lu, b, call);
    } else {
        // op(A) = op(U) op(L) P^T: X = P op(L)^-1 op(U)^-1 B.
        r.first = trsm<T>(side::left, uplo::upper, trans, diag::non_unit, T(1), lu, b, call);
        r.second = trsm<T>(side::left, uplo::lower, trans, diag::unit, T(1), lu, b, call);
        apply_row_swaps<T>(b, piv, true);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

template <class T>
gesv_report context::gesv(host_matrix_view<T> a, std::span<index_t> ipiv, host_matrix_view<T> b,
                          const getrf_call_options& call) {
    if (a.rows() != a.cols())
        throw dimension_mismatch("gesv: A must be square, got " + std::to_string(a.rows()) + "x" + std::to_string(a.cols()));
    if (b.rows() != a.rows())
        throw dimension_mismatch("gesv: B has " + std::to_string(b.rows()) + " rows, A is " + std::to_string(a.rows()) + "x" +
                                 std::to_string(a.cols()));
    gesv_report r;
    r.factor = getrf<T>(a, ipiv, call);
    r.info = r.factor.info;
    if (r.info != 0) return r;
    blas3_call_options solve;
    solve.kernel = call.kernel;
    solve.rates = call.rates;
    solve.run = call.run;
    r.solve = getrs<T>(op::n, host_matrix_view<const T>(a), std::span<const index_t>(ipiv.data(), ipiv.size()), b, solve);
    return r;
}

#define TILESTREAM_INSTANTIATE(T)                                                                                     \
    template getrf_report context::execute<T>(const getrf_plan&, host_matrix_view<T>, std::span<index_t>,           \
                                              const getrf_call_options&);                                           \
    template getrs_report context::getrs<T>(op, host_matrix_view<const T>, std::span<const index_t>,                \
                                            host_matrix_view<T>, const blas3_call_options&);                        \
    template gesv_report context::gesv<T>(host_matrix_view<T>, std::span<index_t>, host_matrix_view<T>,             \
                                          const getrf_call_options&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
