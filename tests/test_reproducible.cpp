// Reproducible by design: one random problem run under many budgets, strategies, tile sizes and
// 1..5 CPU devices gives byte-identical C for each kernel (the k-order is fixed by the k-block),
// and tiny tiles neither exhaust memory (units are computed lazily) nor run for hours (a limit
// names the tile counts).
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/verify.hpp>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

namespace tilestream {
namespace {

struct variant {
    int count;  ///< devices
    std::size_t budget;
    gemm_strategy strategy;
    index_t tile_m, tile_n, tile_k;
    int cpu_threads;
};

using spec_for = std::function<std::string(int count)>;

std::string describe(const variant& v, const spec_for& spec) {
    return spec(v.count) + " budget " + std::to_string(v.budget) + " " + std::string(to_string(v.strategy)) + " tiles " +
           std::to_string(v.tile_m) + "x" + std::to_string(v.tile_n) + "x" + std::to_string(v.tile_k) + " threads " +
           std::to_string(v.cpu_threads);
}

/// One random problem (k spans several k-blocks plus a remainder, so both the k-order and the
/// last partial block count) run under every variant on the devices spec(count) names: all
/// outputs must be byte-identical.
void check_same_bytes(gemm_kernel kernel, dtype type, int layouts, const spec_for& spec) {
    visit_dtype(type, [&]<class T>() {
        const index_t kb = reproducible_k_block(type);
        const index_t m = 83, n = 61, k = 2 * kb + 37;
        const layout la = (layouts & 1) ? layout::col_major : layout::row_major;
        const layout lc = (layouts & 2) ? layout::col_major : layout::row_major;
        const op oa = (layouts & 1) ? op::c : op::n;  // on real data c is t
        host_matrix<T> a(oa == op::n ? m : k, oa == op::n ? k : m, la), b(k, n, lc), c0(m, n, lc), c(m, n, lc),
            first(m, n, lc);
        fill_random(a.view(), 31);
        fill_random(b.view(), 32);
        fill_random(c0.view(), 33);
        // Complex alpha and beta for complex types (real types take the real parts).
        const T alpha = scalar_as<T>({0.625, -0.375}), beta = scalar_as<T>({-1.5, 0.25});
        const std::size_t es = sizeof(T);
        const std::size_t kb_bytes = std::size_t(kb) * es;
        const std::size_t big = std::size_t(8) << 20;  // fits every plan here; the spare goes to the tile cache
        const std::vector<variant> variants = {
            {1, big, gemm_strategy::in_core, 0, 0, 0, 1},
            {1, big, gemm_strategy::in_core, 0, 0, 0, 2},
            {1, big, gemm_strategy::automatic, 0, 0, 0, 2},
            {2, 6 * 32 * kb_bytes + (1 << 16), gemm_strategy::automatic, 0, 0, 0, 1},
            {3, 6 * 16 * kb_bytes + (1 << 15), gemm_strategy::automatic, 0, 0, 0, 1},
            {1, big, gemm_strategy::c_block, 16, 16, kb, 1},
            {2, big, gemm_strategy::c_block, 32, 8, 2 * kb, 1},
            {4, big, gemm_strategy::c_block, 7, 13, 1, 1},  // tile-k rounded up
            {5, big, gemm_strategy::tiles_3d, 24, 24, 24, 1},
            {3, big, gemm_strategy::a_panel, 40, 16, 0, 1},
            {2, big, gemm_strategy::b_panel, 16, 40, 0, 1},
            {5, big, gemm_strategy::a_panel_c_panel, 9, 61, 0, 1},
            {3, big, gemm_strategy::row_panels, 11, 20, 0, 1},
            {1, big, gemm_strategy::b_panel, 83, 5, 0, 2},
        };
        bool have_first = false;
        for (const variant& v : variants) {
            open_options oo;
            oo.memory_budget = v.budget;
            oo.cpu_threads = v.cpu_threads;
            auto devs = open_devices(spec(v.count), oo);
            std::vector<device*> ptrs;
            for (auto& d : devs) ptrs.push_back(d.get());
            plan_options po;
            po.strategy = v.strategy;
            po.kernel = kernel;
            po.tile_m = v.tile_m;
            po.tile_n = v.tile_n;
            po.tile_k = v.tile_k;
            po.devices = int(ptrs.size());
            po.cache = ptrs.size() > 1 ? cache_mode::on : cache_mode::off;
            po.reproducible = true;
            device_rates rates;  // fixed, so the automatic choice is the same on every machine
            rates.h2d = rates.d2h = 1e9;
            rates.flops = 1e9;
            const gemm_problem q = describe_gemm<T>(oa, op::n, alpha, a.view(), b.view(), beta, c.view());
            const gemm_plan plan = plan_gemm(q, v.budget, rates, po);
            EXPECT_EQ(plan.k_block, kb);
            EXPECT_EQ(plan.kernel, kernel == gemm_kernel::vendor ? gemm_kernel::tiled : kernel);
            EXPECT_TRUE(plan.tile_k % kb == 0 || plan.tile_k == k) << describe(v, spec) << " tile_k " << plan.tile_k;
            std::memcpy(c.data(), c0.data(), std::size_t(m * n) * es);
            execute_gemm<T>(plan, ptrs, alpha, a.view(), b.view(), beta, c.view());
            const double err = gemm_relative_error<T>(oa, op::n, alpha, a.view(), b.view(), beta, c0.view(), c.view());
            ASSERT_LE(err, gemm_tolerance(type, k)) << describe(v, spec);
            if (!have_first) {
                std::memcpy(first.data(), c.data(), std::size_t(m * n) * es);
                have_first = true;
                continue;
            }
            index_t differ = 0;
            for (index_t i = 0; i < m; ++i)
                for (index_t j = 0; j < n; ++j) differ += std::memcmp(&c(i, j), &first(i, j), es) != 0;
            EXPECT_EQ(differ, 0) << describe(v, spec) << " (plan " << to_string(plan.strategy) << " " << plan.tile_m << "x"
                                 << plan.tile_n << "x" << plan.tile_k << ")";
        }
    });
}

class reproducible_gemm : public ::testing::TestWithParam<std::tuple<gemm_kernel, dtype, int>> {};

TEST_P(reproducible_gemm, SameBytesForEveryPlanAndDeviceCount) {
    const auto& [kernel, type, layouts] = GetParam();
    check_same_bytes(kernel, type, layouts, [](int count) { return "cpu:" + std::to_string(count); });
}

/// OpenCL devices (PoCL in CI): slices of one device, each its own queue and budget.
class reproducible_gemm_opencl : public reproducible_gemm {};
TEST_P(reproducible_gemm_opencl, SameBytesForEveryPlanAndSliceCount) {
    const auto& [kernel, type, layouts] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    check_same_bytes(kernel, type, layouts, [](int count) { return "opencl:0x" + std::to_string(count); });
}

std::string reproducible_name(const ::testing::TestParamInfo<std::tuple<gemm_kernel, dtype, int>>& info) {
    return std::string(to_string(std::get<0>(info.param))) + "_" + std::string(to_string(std::get<1>(info.param))) +
           "_layouts" + std::to_string(std::get<2>(info.param));
}

// Every kernel: naive and tiled add each element's k-block in order whatever the call's shape
// (tests/test_cpu_isa.cpp checks the tiled kernel's sub-problem invariance on its own), and a
// reproducible plan runs the tiled kernel where vendor was asked for.
INSTANTIATE_TEST_SUITE_P(cpu, reproducible_gemm,
                         ::testing::Combine(::testing::Values(gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64), ::testing::Values(0, 3)),
                         reproducible_name);
INSTANTIATE_TEST_SUITE_P(opencl, reproducible_gemm_opencl,
                         ::testing::Combine(::testing::Values(gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64), ::testing::Values(0, 3)),
                         reproducible_name);
// Complex (the 1m tiled kernel and the complex naive kernel), A read with op c, complex scalars.
INSTANTIATE_TEST_SUITE_P(cpu_complex, reproducible_gemm,
                         ::testing::Combine(::testing::Values(gemm_kernel::naive, gemm_kernel::tiled),
                                            ::testing::Values(dtype::c32, dtype::c64), ::testing::Values(3)),
                         reproducible_name);
INSTANTIATE_TEST_SUITE_P(opencl_complex, reproducible_gemm_opencl,
                         ::testing::Combine(::testing::Values(gemm_kernel::naive, gemm_kernel::tiled),
                                            ::testing::Values(dtype::c32, dtype::c64), ::testing::Values(3)),
                         reproducible_name);

// Reproducible mode promises the same bits whatever C's layout, as whatever the device count: the
// same values of A, B and C with C stored row-major and column-major, through a context (the direct
// path and the engine, one and three CPU devices), every precision, complex scalars, conjugates.
// The 1m complex kernel once computed a column-major C as C^T, which reversed the order of the two
// products of each imaginary part (issue 25).
TEST(reproducible_layouts, ResultsDoNotDependOnTheLayoutOfC) {
    for (dtype type : all_dtypes)
        visit_dtype(type, [&]<class T>() {
            const index_t kb = reproducible_k_block(type);
            for (const index_t m : {index_t(5), index_t(37)}) {
                const index_t n = m == 5 ? 3 : 29, k = 2 * kb + 13;
                host_matrix<T> a(k, m, layout::row_major), b(k, n, layout::col_major), c0(m, n);
                fill_random(a.view(), 71);
                fill_random(b.view(), 72);
                fill_random(c0.view(), 73);
                const T alpha = scalar_as<T>({0.625, -0.375});
                for (const T beta : {scalar_as<T>({-1.5, 0.25}), T(0)}) {
                    std::vector<T> first;
                    for (const char* spec : {"cpu", "cpu:3"}) {
                        context_options o;
                        o.reproducible = true;
                        context ctx(spec, o);
                        for (layout lc : {layout::row_major, layout::col_major}) {
                            SCOPED_TRACE(std::string(to_string(type)) + " " + std::to_string(m) + "x" +
                                         std::to_string(n) + "x" + std::to_string(k) + " beta " +
                                         (beta == T(0) ? "0" : "complex") + " on " + spec + ", C " +
                                         std::string(to_string(lc)));
                            host_matrix<T> c(m, n, lc);
                            if (beta == T(0))
                                fill_nan(c.view());
                            else
                                for (index_t i = 0; i < m; ++i)
                                    for (index_t j = 0; j < n; ++j) c(i, j) = c0(i, j);
                            ctx.gemm<T>(op::c, op::n, alpha, a.view(), b.view(), beta, c.view());
                            const double err = gemm_relative_error<T>(op::c, op::n, alpha, a.view(), b.view(), beta,
                                                                      c0.view(), c.view());
                            ASSERT_LE(err, gemm_tolerance(type, k));
                            std::vector<T> got;
                            for (index_t i = 0; i < m; ++i)
                                for (index_t j = 0; j < n; ++j) got.push_back(c(i, j));
                            if (first.empty()) {
                                first = got;
                                continue;
                            }
                            index_t differ = 0;
                            for (std::size_t e = 0; e < got.size(); ++e)
                                differ += std::memcmp(&got[e], &first[e], sizeof(T)) != 0;
                            EXPECT_EQ(differ, 0) << "elements with other bits than the first run's (cpu, row-major C)";
                        }
                    }
                }
            }
        });
}

TEST(reproducible_plan, TileKIsRoundedUpToTheKBlockAndExplainSaysSo) {
    gemm_problem q;
    q.type = dtype::f32;
    q.m = q.n = 100;
    q.k = 1000;
    plan_options po;
    po.strategy = gemm_strategy::c_block;
    po.tile_m = po.tile_n = 32;
    po.tile_k = 100;
    po.reproducible = true;
    const gemm_plan p = plan_gemm(q, std::size_t(1) << 30, device_rates{}, po);
    EXPECT_EQ(p.tile_k, 384);
    EXPECT_TRUE(p.tile_k_rounded);
    EXPECT_NE(explain(p).find("k-blocks of 384"), std::string::npos) << explain(p);
    po.reproducible = false;
    const gemm_plan free_k = plan_gemm(q, std::size_t(1) << 30, device_rates{}, po);
    EXPECT_EQ(free_k.tile_k, 100);
    EXPECT_EQ(free_k.k_block, 0);
}

/// Row 2 of issue 12: tile 1 on 512^3 made a vector of 134 million steps (std::bad_alloc).
TEST(lazy_units, TinyTilesMakeNoUnitVectorAndTooManyCallsAreRefusedNamingTheTiles) {
    gemm_problem q;
    q.type = dtype::f32;
    q.m = q.n = q.k = 512;
    plan_options po;
    po.strategy = gemm_strategy::c_block;
    po.tile_m = po.tile_n = 1;
    po.tile_k = 512;
    const gemm_plan p = plan_gemm(q, std::size_t(1) << 30, device_rates{}, po);  // 2^18 units, at the limit
    EXPECT_EQ(p.units, 512u * 512u);
    const gemm_unit last = plan_unit(p, p.units - 1);
    EXPECT_EQ(last.row0, 511);
    EXPECT_EQ(last.col0, 511);
    ASSERT_EQ(last.steps.size(), 1u);
    EXPECT_EQ(last.steps[0].depth, 512);
    EXPECT_THROW(plan_unit(p, p.units), invalid_argument);
    po.tile_k = 1;
    try {
        plan_gemm(q, std::size_t(1) << 30, device_rates{}, po);
        FAIL() << "134 million kernel calls were planned";
    } catch (const invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("512 x 512 x 512 tiles"), std::string::npos) << what;
        EXPECT_NE(what.find("134217728 kernel calls"), std::string::npos) << what;
    }
    // With the fixed k-order the k-tile is a whole k-block, and the same tiles then count 2 calls a unit.
    po.reproducible = true;
    EXPECT_THROW(plan_gemm(q, std::size_t(1) << 30, device_rates{}, po), invalid_argument);
}

TEST(lazy_units, PlanUnitMatchesEveryStrategysOrder) {
    gemm_problem q;
    q.type = dtype::f64;
    q.m = 50;
    q.n = 70;
    q.k = 600;
    for (auto s : {gemm_strategy::c_block, gemm_strategy::b_panel, gemm_strategy::a_panel_c_panel, gemm_strategy::tiles_3d}) {
        plan_options po;
        po.strategy = s;
        po.tile_m = 16;
        po.tile_n = s == gemm_strategy::tiles_3d ? 16 : 32;
        if (s == gemm_strategy::tiles_3d) po.tile_k = 16;  // tiles-3d takes one size for all three
        po.cache = cache_mode::on;
        const gemm_plan p = plan_gemm(q, std::size_t(1) << 30, device_rates{}, po);
        // Every C element is covered by exactly one unit, and its k-steps add up to k.
        std::vector<int> covered(std::size_t(q.m * q.n), 0);
        for (std::size_t u = 0; u < p.units; ++u) {
            const gemm_unit unit = plan_unit(p, u);
            for (index_t i = unit.row0; i < unit.row0 + unit.rows; ++i)
                for (index_t j = unit.col0; j < unit.col0 + unit.cols; ++j) ++covered[std::size_t(i * q.n + j)];
            index_t depth = 0;
            for (const auto& st : unit.steps)
                if (st.c_row == 0 && st.c_col == 0) depth += st.depth;
            EXPECT_EQ(depth, q.k) << to_string(s) << " unit " << u;
        }
        for (int x : covered) ASSERT_EQ(x, 1) << to_string(s);
    }
}

}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {

/// Row 2 of issue 12 through the CLI: 96^3 with tile 1 (884736 kernel calls, 9.9 s before) is
/// refused naming the tiles; with the fixed k-order its k-tile is a whole k-block, and it runs and
/// matches the reference.
TEST(lazy_units_cli, TooManyKernelCallsFailWithExitTwoAndTileOneRunsWithKBlocks) {
    const testing::cli_result refused = testing::run_cli("gemm --m 96 --n 96 --k 96 --tile 1 --strategy c-block");
    EXPECT_EQ(refused.exit_code, 2) << refused.out;
    EXPECT_NE(refused.out.find("96 x 96 x 96 tiles"), std::string::npos) << refused.out;
    const testing::cli_result ok =
        testing::run_cli("gemm --m 96 --n 96 --k 96 --tile 1 --strategy c-block --reproducible on --check --quiet");
    EXPECT_EQ(ok.exit_code, 0) << ok.out;
    const testing::cli_result bad = testing::run_cli("gemm --m 8 --n 8 --k 8 --reproducible maybe");
    EXPECT_EQ(bad.exit_code, 2) << bad.out;
    EXPECT_NE(bad.out.find("--reproducible"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {

/// Row 14 of issue 12: cpu:3 under a 1 MiB budget against cpu:1 gave a different C (the plan picked
/// another k-split per device count); with the fixed k-order the files are byte-identical.
// The default command line with --reproducible on (vendor asked for, tiled run), and the tiled
// and naive kernels: one device in place, three devices under a small budget and two with
// c-blocks write the same file.
TEST(reproducible_cli, OneTwoAndThreeDevicesWriteTheSameFile) {
    const std::string dir = ::testing::TempDir();
    for (const std::string kernel : {"", " --kernel tiled", " --kernel naive"}) {
        const std::string runs[] = {"--devices cpu:1", "--devices cpu:3 --memory-budget 1MiB",
                                    "--devices cpu:2 --memory-budget 3MiB --strategy c-block"};
        std::string files[3];
        for (int i = 0; i < 3; ++i) {
            files[i] = dir + "/reproducible_" + std::to_string(kernel.size()) + "_" + std::to_string(i) + ".npy";
            const auto r = testing::run_cli("gemm --m 300 --n 257 --k 900 --dtype f64 --beta 0.5 " + runs[i] + kernel +
                                            " --reproducible on --quiet --out " + files[i]);
            ASSERT_EQ(r.exit_code, 0) << r.out;
        }
        for (int i = 1; i < 3; ++i) {
            const std::string diff = testing::run_cli_raw("cmp " + files[0] + " " + files[i] + " && echo same");
            EXPECT_NE(diff.find("same"), std::string::npos) << "kernel" << kernel << ", " << runs[i] << ": " << diff;
        }
        for (const auto& f : files) std::remove(f.c_str());
    }
}

}  // namespace
}  // namespace tilestream
