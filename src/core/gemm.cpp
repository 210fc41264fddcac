// In-core GEMM through one device: validate, stage operands into device memory, run, copy back.
#include "backends/reference/reference_kernels.hpp"
#include "core/gemm_direct.hpp"

#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>

#include <string>

namespace tilestream {
namespace {

std::string shape(index_t r, index_t c) { return std::to_string(r) + "x" + std::to_string(c); }

}  // namespace

void validate_gemm(op op_a, op op_b, index_t a_rows, index_t a_cols, index_t b_rows, index_t b_cols,
                   index_t c_rows, index_t c_cols) {
    for (index_t v : {a_rows, a_cols, b_rows, b_cols, c_rows, c_cols})
        if (v < 0) throw size_overflow("gemm: negative matrix extent " + std::to_string(v));
    const index_t m = is_transposed(op_a) ? a_cols : a_rows;
    const index_t ka = is_transposed(op_a) ? a_rows : a_cols;
    const index_t kb = is_transposed(op_b) ? b_cols : b_rows;
    const index_t n = is_transposed(op_b) ? b_rows : b_cols;
    if (ka != kb)
        throw dimension_mismatch("gemm: inner dimensions differ: op(A) is " + shape(m, ka) +
                                 ", op(B) is " + shape(kb, n));
    if (c_rows != m || c_cols != n)
        throw dimension_mismatch("gemm: C is " + shape(c_rows, c_cols) + " but op(A)*op(B) is " +
                                 shape(m, n));
    // Extents (checked non-negative above) under 2^31 have products that fit 64 bits.
    constexpr index_t fits = index_t(1) << 31;
    if (m < fits && ka < fits && n < fits) return;
    checked_mul(m, ka, "gemm: op(A)");
    checked_mul(kb, n, "gemm: op(B)");
    checked_mul(m, n, "gemm: C");
}

template <class T>
void reference_gemm(op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                    T beta, host_matrix_view<T> c) {
    validate_gemm(op_a, op_b, a.rows(), a.cols(), b.rows(), b.cols(), c.rows(), c.cols());
    reference::gemm(detail::host_gemm_call(op_a, op_b, alpha, a, b, beta, c));
}

template <class T>
gemm_report gemm(device& dev, op op_a, op op_b, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                 T beta, host_matrix_view<T> c, const gemm_options& opt) {
    const gemm_problem problem = describe_gemm(op_a, op_b, alpha, a, b, beta, c);
    if (!dev.supports(opt.kernel))
        throw invalid_argument("gemm: device " + dev.id() + " has no '" + std::string(to_string(opt.kernel)) +
                               "' kernel (the reference kernel runs on CPU devices only)");
    plan_options po;
    po.strategy = opt.strategy;
    po.tile_m = opt.tile_m;
    po.tile_n = opt.tile_n;
    po.tile_k = opt.tile_k;
    po.transfer = opt.transfer;
    po.engine = opt.engine;
    po.kernel = opt.kernel;
    po.math = opt.math;
    device* devs[] = {&dev};
    po.in_place = computes_in_place(devs);
    po.reproducible = opt.reproducible;
    // Rates only steer the automatic choice; a fixed strategy, or one device computing in place
    // (one unit, nothing copied), runs without probing the device.
    device_rates rates = opt.rates ? *opt.rates
                               : opt.strategy == gemm_strategy::automatic && !po.in_place
                                   ? measure_rates(dev, problem.type, opt.kernel, opt.math)
                                                                          : device_rates{};
    rates.host_memory = computes_on_host_cores(devs);
    gemm_plan plan;
    try {
        // Memory that concurrent calls hold is theirs only for a while (see budget_reservation).
        plan = plan_gemm(problem, dev.budget_for_runs(), rates, po);
    } catch (const out_of_budget& e) {
        throw out_of_budget(dev.id() + ": " + e.what());
    }
    return execute_gemm<T>(plan, devs, alpha, a, b, beta, c);
}

#define TILESTREAM_INSTANTIATE(T)                                                                   \
    template gemm_report gemm<T>(device&, op, op, T, host_matrix_view<const T>,                    \
                                 host_matrix_view<const T>, T, host_matrix_view<T>, const gemm_options&); \
    template void reference_gemm<T>(op, op, T, host_matrix_view<const T>, host_matrix_view<const T>, T, \
                                    host_matrix_view<T>);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
