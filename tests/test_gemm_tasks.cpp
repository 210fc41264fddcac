// GEMM as tile tasks on the Level 3 engine (the case without dependencies): against the reference
// in place, out of core and on three devices, surviving a device fault, and bitwise the GEMM
// pipeline's result in reproducible mode (same kernel, same k-blocks), on any device count.
#include "core/fault_injection.hpp"
#include "core/routines/gemm_tasks.hpp"
#include "test_support.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/verify.hpp>

#include <cstring>

namespace tilestream {
namespace {

using detail::routines::gemm_on_tasks;
using detail::routines::gemm_tiling;

std::vector<device*> raw(const std::vector<std::unique_ptr<device>>& devs) {
    std::vector<device*> r;
    for (const auto& d : devs) r.push_back(d.get());
    return r;
}

template <class T>
double run_case(const std::vector<device*>& devs, op oa, op ob, index_t m, index_t n, index_t k, layout l, double beta,
                const gemm_tiling& t, host_matrix<T>* out = nullptr) {
    host_matrix<T> a(oa == op::n ? m : k, oa == op::n ? k : m, l), b(ob == op::n ? k : n, ob == op::n ? n : k, l);
    host_matrix<T> c(m, n, l), c0(m, n, l);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    fill_random(c0.view(), 3);
    if (beta != 0) std::memcpy(c.data(), c0.data(), sizeof(T) * std::size_t(c.size()));
    else fill_nan(c.view());
    gemm_on_tasks<T>(devs, oa, ob, T(0.75), a.view(), b.view(), T(beta), c.view(), t);
    const double e = gemm_relative_error<T>(oa, ob, T(0.75), a.view(), b.view(), T(beta), c0.view(), c.view());
    if (out) *out = std::move(c);
    return e;
}

TEST(GemmOnTasks, MatchesReferenceInPlaceOutOfCoreAndOnThreeDevices) {
    for (const char* spec : {"cpu", "cpu:3", "cpu@64KiB", "cpu:3@48KiB"}) {
        const auto devs = open_devices(spec);
        gemm_tiling t;
        t.tile_m = 24;
        t.tile_n = 32;
        t.tile_k = 20;
        for (op oa : {op::n, op::t})
            for (op ob : {op::n, op::t})
                for (layout l : {layout::row_major, layout::col_major}) {
                    EXPECT_LT(run_case<double>(raw(devs), oa, ob, 67, 45, 83, l, 0.0, t), 1e-13) << spec;
                    EXPECT_LT(run_case<float>(raw(devs), oa, ob, 53, 71, 29, l, 1.5, t), 1e-5) << spec;
                }
    }
}

TEST(GemmOnTasks, SurvivesADeviceFault) {
    const auto devs = open_devices("cpu:3@48KiB");
    fault_injection::faults f;
    f.fail_after_units = 1;
    fault_injection::arm(*devs[1], f);
    const fault_injection::slowdown slow({{devs[0]->id(), 0.003}, {devs[2]->id(), 0.003}});
    gemm_tiling t;
    t.tile_m = t.tile_n = t.tile_k = 24;
    EXPECT_LT(run_case<double>(raw(devs), op::n, op::t, 97, 70, 50, layout::row_major, 0.5, t), 1e-13);
    fault_injection::clear();
}

TEST(GemmOnTasks, ReproducibleIsBitwiseTheGemmPipelines) {
    // The pipeline, reproducible, tiled kernel, on two budgeted devices.
    const index_t m = 130, n = 90, k = 700;
    host_matrix<double> a(m, k), b(k, n), c(m, n), d(m, n);
    fill_random(a.view(), 4);
    fill_random(b.view(), 5);
    const auto two = open_devices("cpu:2@256KiB");
    plan_options po;
    po.reproducible = true;
    po.kernel = gemm_kernel::tiled;
    po.devices = 2;
    const gemm_problem q = describe_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view());
    execute_gemm<double>(plan_gemm(q, two[0]->budget(), device_rates{}, po), raw(two), 1.0, a.view(), b.view(), 0.0,
                         c.view());
    // The task engine, the same kernel and k-blocks, other tiles, one and three devices.
    for (const char* spec : {"cpu", "cpu:3@512KiB"}) {
        const auto devs = open_devices(spec);
        gemm_tiling t;
        t.tile_m = 40;
        t.tile_n = 56;
        t.k_block = reproducible_k_block(dtype::f64);
        t.kernel = gemm_kernel::tiled;
        fill_nan(d.view());
        gemm_on_tasks<double>(raw(devs), op::n, op::n, 1.0, a.view(), b.view(), 0.0, d.view(), t);
        EXPECT_EQ(std::memcmp(c.data(), d.data(), sizeof(double) * std::size_t(c.size())), 0) << spec;
    }
}

}  // namespace
}  // namespace tilestream
