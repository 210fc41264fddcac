// What the Level 3 and factorization commands (cmd_blas3.cpp, cmd_factor.cpp) share: the context
// their options open, the dtype their files hold, copies of operands, and the parts of their
// reports that read a plan and a run the same way (orders, faults, the files written).
#pragma once

#include "cli_args.hpp"
#include "core/json_text.hpp"

#include <tilestream/context.hpp>
#include <tilestream/error.hpp>
#include <tilestream/npy.hpp>

#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

namespace tilestream::cli {

/// The context options of --memory-budget, --cpu-threads, --kernel, --reproducible and --rates.
inline context_options routine_context_options(const args& a) {
    context_options co;
    const open_options oo = device_options(a);
    co.memory_budget = oo.memory_budget;
    co.cpu_threads = oo.cpu_threads;
    co.kernel = parse_kernel_setting(a.get_or("kernel", "auto"));
    const std::string reproducible = a.get_or("reproducible", "off");
    if (reproducible != "on" && reproducible != "off")
        throw invalid_argument("--reproducible expects on or off, got '" + reproducible + "'");
    co.reproducible = reproducible == "on";
    if (a.has("rates")) co.rates = parse_rates(*a.get("rates"));
    return co;
}

/// --json's "gemm_kernels": each device's GEMM tile kernel (the plan's kernel where it chose none by
/// device: blas3_plan::gemm_kernels).
inline std::vector<std::string> gemm_kernel_names(gemm_kernel kernel, const std::vector<gemm_kernel>& by_device, int devices) {
    std::vector<std::string> out;
    for (int d = 0; d < devices; ++d)
        out.emplace_back(to_string(std::size_t(d) < by_device.size() ? by_device[std::size_t(d)] : kernel));
    return out;
}

/// --explain of one device in place, whose plan measured no rates of its own: with the kernel left
/// to the context the plan made first (`plan`) leaves the rates to its kernel choice, which in place
/// may measure nothing (vendor kept, or too little work for the probe: context::tile_gemm_kernels);
/// then the same plan again with the vendor kernel's measured rates declared (`call.rates`), so
/// that the explanation's prediction is a measured one. Declaring them first would turn the
/// choice off.
template <class Plan, class Call, class Replan>
void explain_with_measured_rates(context& ctx, dtype type, bool explain, bool quick_return, Plan& plan, Call& call,
                                 Replan&& replan) {
    if (!explain || quick_return || ctx.devices().size() != 1 || ctx.options().rates || plan.rates.measured) return;
    call.rates = ctx.rates(type, ctx.options().kernel);
    plan = replan();
}

/// The run's dtype: --dtype (f32 by default), or with --a the files' own, one for all of `inputs`
/// (invalid_argument naming both files, or --dtype and the file, when they differ).
inline dtype routine_dtype(const args& a, const std::string& cmd, std::initializer_list<const char*> inputs) {
    dtype type = parse_dtype(a.get_or("dtype", "f32"));
    if (!a.has("a")) return type;
    const npy_array fa = read_npy(*a.get("a"));
    for (const char* o : inputs) {
        if (std::string(o) == "a" || !a.has(o)) continue;
        const npy_array fo = read_npy(*a.get(o));
        if (fo.type() != fa.type())
            throw invalid_argument(cmd + ": dtypes differ: " + fa.path() + " is " + std::string(to_string(fa.type())) + ", " +
                                   fo.path() + " is " + std::string(to_string(fo.type())));
    }
    if (a.has("dtype") && type != fa.type())
        throw invalid_argument(cmd + ": --dtype " + *a.get("dtype") + " but " + fa.path() + " holds " +
                               std::string(to_string(fa.type())));
    return fa.type();
}

/// --layout of random inputs: row (default) or col.
inline layout random_layout(const args& a) {
    const std::string lay = a.get_or("layout", "row");
    if (lay != "row" && lay != "col") throw invalid_argument("--layout expects row or col, got '" + lay + "'");
    return lay == "row" ? layout::row_major : layout::col_major;
}

template <class T>
host_matrix<T> copy_of(host_matrix_view<const T> v) {
    host_matrix<T> m(v.rows(), v.cols(), v.layout());
    for (index_t i = 0; i < v.rows(); ++i)
        for (index_t j = 0; j < v.cols(); ++j) m(i, j) = v(i, j);
    return m;
}

/// "warning: ..." on standard error for each device lost and each warning of a run.
inline void print_faults_and_warnings(const std::vector<device_fault>& faults, const std::vector<std::string>& warnings) {
    for (const auto& fl : faults)
        std::fprintf(stderr, "warning: device %s failed and was dropped (%zu of its tasks rerun by the others): %s\n",
                     fl.id.c_str(), fl.units_redone, fl.message.c_str());
    for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
}

/// Each order the planner weighed (blas3_plan, getrf_plan): its predicted bytes and time.
template <class Plan>
detail::json orders_json(const Plan& plan) {
    detail::json alternatives = detail::json::array();
    for (const auto& alt : plan.alternatives)
        alternatives.push_back({{"order", std::string(to_string(alt.order))}, {"bytes_h2d", alt.bytes_h2d},
                                {"bytes_d2h", alt.bytes_d2h}, {"predicted_seconds", alt.predicted_seconds}});
    return alternatives;
}

inline detail::json faults_json(const std::vector<device_fault>& faults) {
    detail::json lost = detail::json::array();
    for (const auto& fl : faults) lost.push_back({{"device", fl.id}, {"message", fl.message}, {"tasks_rerun", fl.units_redone}});
    return lost;
}

/// The output options given, when `written`; an empty array otherwise.
inline detail::json written_json(const args& a, bool written, const std::vector<const char*>& outputs) {
    detail::json files = detail::json::array();
    if (written)
        for (const char* o : outputs)
            if (a.has(o)) files.push_back(*a.get(o));
    return files;
}

/// "wrote X" or "not written (why): X" for each output option given.
inline void print_written(std::FILE* report, const args& a, bool written, const std::vector<const char*>& outputs,
                          const std::string& why) {
    for (const char* o : outputs) {
        if (!a.has(o)) continue;
        if (written) std::fprintf(report, "wrote %s\n", a.get(o)->c_str());
        else std::fprintf(report, "not written (%s): %s\n", why.c_str(), a.get(o)->c_str());
    }
}

}  // namespace tilestream::cli
