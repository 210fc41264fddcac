// Running a Level 3 plan: the call's operands bound to the plan's tasks, handed to the executor.
#include "core/engine/executor.hpp"
#include "core/engine/task_graph.hpp"
#include "core/routines/routines.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/error.hpp>

#include <array>

namespace tilestream {

namespace {

template <class V>
detail::engine::host_operand host_of(const V& v) {
    using T = std::remove_const_t<typename V::value_type>;
    detail::engine::host_operand o;
    o.base = reinterpret_cast<char*>(const_cast<T*>(v.data()));
    o.ld = v.ld();
    o.lay = v.layout();
    return o;
}

template <class V>
std::size_t span_bytes(const V& v) {
    using T = std::remove_const_t<typename V::value_type>;
    if (v.empty()) return 0;
    const index_t outer = v.layout() == layout::row_major ? v.rows() : v.cols();
    const index_t inner = v.layout() == layout::row_major ? v.cols() : v.rows();
    return std::size_t((outer - 1) * v.ld() + inner) * sizeof(T);
}

bool same_call(const blas3_problem& a, const blas3_problem& b) {
    return a.routine == b.routine && a.type == b.type && a.flags.side == b.flags.side && a.flags.uplo == b.flags.uplo &&
           a.flags.trans == b.flags.trans && a.flags.diag == b.flags.diag && a.m == b.m && a.n == b.n && a.k == b.k &&
           a.layout_a == b.layout_a && a.layout_b == b.layout_b && a.layout_c == b.layout_c &&
           a.reads_ab == b.reads_ab && a.reads_c == b.reads_c && a.quick_return == b.quick_return;
}

}  // namespace

template <class T>
blas3_report execute_blas3(const blas3_plan& plan, std::span<device* const> devices, const blas3_operands<T>& ops,
                           const blas3_run_options& run) {
    return detail::execute_blas3_kept<T>(plan, devices, ops, run, nullptr, {});
}

template <class T>
blas3_report detail::execute_blas3_kept(const blas3_plan& plan, std::span<device* const> devices,
                                        const blas3_operands<T>& ops, const blas3_run_options& run, gemm_memory* memory,
                                        const std::vector<operand_keep>& keeps) {
    const blas3_problem actual = describe_blas3<T>(plan.problem.routine, plan.problem.flags, ops);
    if (!same_call(actual, plan.problem))
        throw invalid_argument("execute_blas3: the operands do not match the problem the plan was made for (" +
                               actual.describe() + " against " + plan.problem.describe() + ")");
    if (plan.devices != int(devices.size()))
        throw invalid_argument("execute_blas3: the plan is for " + std::to_string(plan.devices) + " device(s), " +
                               std::to_string(devices.size()) + " given");
    blas3_report rep;
    rep.plan = plan;
    if (plan.problem.quick_return || !plan.graph || plan.graph->tasks.empty()) return rep;
    for (device* d : devices) {
        if (plan.in_place && !d->host_addressable())
            throw invalid_argument("execute_blas3: an in-place plan on " + d->id() + ", which cannot address host memory");
        if (!d->supports(plan.kernel))
            throw invalid_argument(std::string(to_string(plan.problem.routine)) + ": device " + d->id() + " has no '" +
                                   std::string(to_string(plan.kernel)) + "' kernel");
    }
    const bool in_place_b = plan.problem.routine == blas3_routine::trmm || plan.problem.routine == blas3_routine::trsm;
    detail::engine::run_request rq;
    rq.graph = plan.graph.get();
    rq.operands = {host_of(ops.a), in_place_b ? host_of(ops.c) : host_of(ops.b),
                   in_place_b ? detail::engine::host_operand{} : host_of(ops.c)};
    rq.alpha = as_scalar(ops.alpha);
    rq.beta = as_scalar(ops.beta);
    rq.in_place = plan.in_place;
    rq.slots = plan.slots;
    rq.slot_bytes = plan.slot_bytes;
    rq.deterministic = plan.reproducible;
    rq.device_flops = plan.device_flops;
    rq.gemm_kernels = plan.gemm_kernels;
    rq.diagonal_block = plan.rates.diagonal_block;
    rq.run = run;
    rq.memory = memory;
    rq.keeps = keeps;
    // Pinning is set-up, done before the clock (for devices that copy faster from pinned memory).
    pinned_operands pinned;
    if (run.register_host && !plan.in_place)
        pinned = pinned_operands(devices, std::array{std::pair<const void*, std::size_t>{ops.a.data(), span_bytes(ops.a)},
                                                     std::pair<const void*, std::size_t>{ops.b.data(), span_bytes(ops.b)},
                                                     std::pair<const void*, std::size_t>{ops.c.data(), span_bytes(ops.c)}});
    for (const auto& w : pinned.refused()) rep.warnings.push_back("host memory not pinned (copies stay pageable): " + w);
    detail::engine::run_result r = detail::engine::run_tasks(rq, devices);
    rep.info = r.info;
    detail::engine::report_run(rep, std::move(r));
    return rep;
}

template <class T>
blas3_report blas3(device& dev, blas3_routine routine, const blas3_flags& flags, const blas3_operands<T>& ops,
                   const blas3_options& options) {
    const blas3_problem p = describe_blas3<T>(routine, flags, ops);
    std::array<device*, 1> devs{&dev};
    blas3_options o = options;
    o.devices = 1;
    o.in_place = computes_in_place(devs);
    o.whole_diagonal_tiles = !dev.host_addressable();
    device_rates rates;
    if (!o.in_place) {
        rates = measure_rates(dev, p.type, o.kernel == gemm_kernel::reference ? gemm_kernel::reference : o.kernel, o.math);
        rates.host_memory = computes_on_host_cores(devs);
    }
    const blas3_plan plan = plan_blas3(p, dev.budget_for_runs(), rates, o);
    return execute_blas3<T>(plan, devs, ops);
}

#define TILESTREAM_INSTANTIATE(T)                                                                                 \
    template blas3_report execute_blas3<T>(const blas3_plan&, std::span<device* const>, const blas3_operands<T>&, \
                                           const blas3_run_options&);                                            \
    template blas3_report blas3<T>(device&, blas3_routine, const blas3_flags&, const blas3_operands<T>&,          \
                                   const blas3_options&);                                                       \
    template blas3_report detail::execute_blas3_kept<T>(const blas3_plan&, std::span<device* const>,             \
                                                        const blas3_operands<T>&, const blas3_run_options&,       \
                                                        gemm_memory*, const std::vector<operand_keep>&);
TILESTREAM_INSTANTIATE(float)
TILESTREAM_INSTANTIATE(double)
TILESTREAM_INSTANTIATE(std::complex<float>)
TILESTREAM_INSTANTIATE(std::complex<double>)
#undef TILESTREAM_INSTANTIATE

}  // namespace tilestream
