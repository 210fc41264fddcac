// The measured rates of the tile operations other than GEMM (device_rates::tile_rates): the probe
// on CPU and OpenCL devices, the fit, and how the cost model and the planner use them.
#include "test_support.hpp"

#include "core/engine/schedule_model.hpp"
#include "core/engine/tile_kernels.hpp"
#include "core/engine/tile_rates.hpp"

#include <tilestream/blas3.hpp>
#include <tilestream/cholesky.hpp>
#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>

#include <chrono>
#include <complex>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tilestream {
namespace {

namespace eng = detail::engine;

TEST(TileRates, FitGivesTheSlopeAndWhatTheSmallCallLeaves) {
    // 1 MFLOP in 1 ms, 9 MFLOP in 2 ms: 8 GFLOP/s, and 1 ms - 1e6 / 8e9 of fixed cost.
    const auto r = eng::fit_tile_rate(1e6, 1e-3, 9e6, 2e-3);
    ASSERT_TRUE(r);
    EXPECT_NEAR(r->flops, 8e9, 1);
    EXPECT_NEAR(r->call_seconds, 1e-3 - 1e6 / 8e9, 1e-12);
    // The larger call no slower than the smaller one: a fixed cost of its time, its flops a tenth
    // of it (a small call is not priced at a fraction of what it measured).
    const auto flat = eng::fit_tile_rate(1e6, 2e-3, 9e6, 1.5e-3);
    ASSERT_TRUE(flat);
    EXPECT_NEAR(flat->call_seconds, 1.5e-3, 1e-15);
    EXPECT_NEAR(flat->flops, 9e6 / 1.5e-4, 1);
    // A slope so steep that the small call would have a negative fixed cost: the larger call's
    // average rate, no fixed cost.
    const auto steep = eng::fit_tile_rate(1e6, 1e-6, 9e6, 1e-3);
    ASSERT_TRUE(steep);
    EXPECT_EQ(steep->call_seconds, 0.0);
    EXPECT_NEAR(steep->flops, 9e6 / 1e-3, 1);
    EXPECT_FALSE(eng::fit_tile_rate(0, 1e-3, 9e6, 2e-3));
    EXPECT_FALSE(eng::fit_tile_rate(1e6, 0, 9e6, 2e-3));
    EXPECT_FALSE(eng::fit_tile_rate(9e6, 1e-3, 1e6, 2e-3));
}

/// The kinds of a routine's variants, in order.
std::vector<tile_kind> kinds_of(const std::vector<eng::tile_variant>& v) {
    std::vector<tile_kind> k;
    for (const auto& x : v) k.push_back(x.kind);
    return k;
}

blas3_problem problem_of(blas3_routine r, dtype t, blas3_flags f, layout lay) {
    blas3_problem p;
    p.routine = r;
    p.type = t;
    p.flags = f;
    p.m = p.n = p.k = 64;
    p.layout_a = p.layout_b = p.layout_c = lay;
    return p;
}

TEST(TileRates, RoutinesNameTheKindsTheirTilesHoldAsTheirStepsRunThem) {
    using V = std::vector<tile_kind>;
    const blas3_flags lower{side::left, uplo::lower, op::n, diag::non_unit};
    const blas3_flags upper{side::left, uplo::upper, op::n, diag::non_unit};
    // Cholesky: the matrix's layout everywhere; lower solves on the right with A^T (A^H complex)
    // and updates its diagonal with op n, upper solves on the left and updates with op t or c.
    const auto pl = eng::routine_tile_variants(problem_of(blas3_routine::potrf, dtype::f64, lower, layout::row_major));
    ASSERT_EQ(kinds_of(pl), (V{tile_kind::potrf, tile_kind::trsm, tile_kind::syrk}));
    EXPECT_EQ(pl[0].uplo, uplo::lower);
    EXPECT_EQ(pl[1].side, side::right);
    EXPECT_EQ(pl[1].trans, op::t);
    EXPECT_EQ(pl[1].diag, diag::non_unit);
    EXPECT_EQ(pl[2].trans, op::n);
    for (const auto& v : pl) EXPECT_EQ(v.layout_a, layout::row_major) << to_string(v.kind);
    const auto pu = eng::routine_tile_variants(problem_of(blas3_routine::potrf, dtype::c32, upper, layout::col_major));
    ASSERT_EQ(kinds_of(pu), (V{tile_kind::potrf, tile_kind::trsm, tile_kind::herk}));
    EXPECT_EQ(pu[1].side, side::left);
    EXPECT_EQ(pu[1].trans, op::c);
    EXPECT_EQ(pu[2].trans, op::c);
    EXPECT_EQ(pu[2].uplo, uplo::upper);
    // LU: the panel and the unit lower left solve, in A's layout.
    getrf_problem g;
    g.type = dtype::f32;
    g.m = g.n = 64;
    g.lay = layout::row_major;
    const auto lu = eng::routine_tile_variants(g);
    ASSERT_EQ(kinds_of(lu), (V{tile_kind::getrf, tile_kind::trsm}));
    EXPECT_EQ(lu[1].diag, diag::unit);
    EXPECT_EQ(lu[1].uplo, uplo::lower);
    EXPECT_EQ(lu[1].layout_c, layout::row_major);
    // A Level 3 routine: its own kind with the call's options.
    const blas3_flags f{side::right, uplo::upper, op::c, diag::unit};
    for (blas3_routine r : {blas3_routine::syrk, blas3_routine::herk, blas3_routine::syr2k, blas3_routine::her2k,
                            blas3_routine::symm, blas3_routine::hemm, blas3_routine::trmm, blas3_routine::trsm}) {
        const auto v = eng::routine_tile_variants(problem_of(r, dtype::c64, f, layout::col_major));
        ASSERT_EQ(v.size(), 1u) << to_string(r);
        EXPECT_EQ(to_string(v[0].kind), to_string(r));
        EXPECT_EQ(v[0].uplo, uplo::upper) << to_string(r);
    }
    const auto t = eng::routine_tile_variants(problem_of(blas3_routine::trsm, dtype::f64, f, layout::col_major));
    EXPECT_EQ(t[0].side, side::right);
    EXPECT_EQ(t[0].trans, op::c);
    EXPECT_EQ(t[0].diag, diag::unit);
}

TEST(TileRates, ProbeRunsEachRoutinesVariantOnTheCpu) {
    // Every variant a routine names runs in the probe (an option the kernel refused, or a potrf
    // that found its operand not positive definite in that triangle and layout, would come back
    // empty), and a variant is cached apart from the kind's default one.
    auto devs = open_devices("cpu");
    device& dev = *devs.front();
    const index_t orders[] = {24, 40};
    for (dtype t : {dtype::f64, dtype::c32})
        for (layout lay : {layout::row_major, layout::col_major})
            for (uplo u : {uplo::lower, uplo::upper}) {
                const blas3_flags f{side::right, u, op::t, diag::unit};
                std::vector<eng::tile_variant> all =
                    eng::routine_tile_variants(problem_of(blas3_routine::potrf, t, f, lay));
                for (blas3_routine r : {blas3_routine::trsm, blas3_routine::trmm, blas3_routine::symm, blas3_routine::syrk})
                    for (const auto& v : eng::routine_tile_variants(problem_of(r, t, f, lay))) all.push_back(v);
                for (const eng::tile_variant& v : all) {
                    const std::string what = std::string(to_string(v.kind)) + " " + std::string(to_string(t)) +
                                             (lay == layout::row_major ? " row" : " col") +
                                             (u == uplo::lower ? " lower" : " upper");
                    const std::vector<double> s = eng::probe_tile_seconds(dev, t, v, gemm_kernel::vendor, orders, 1);
                    ASSERT_EQ(s.size(), 2u) << what;
                    EXPECT_GT(s[0], 0.0) << what;
                }
            }
    eng::tile_variant right(tile_kind::trsm);
    right.side = side::right;
    right.trans = op::t;
    EXPECT_NE(right, eng::tile_variant(tile_kind::trsm));
    EXPECT_TRUE(eng::measured_tile_rate(dev, dtype::f64, right, gemm_kernel::vendor));
}

TEST(TileRates, ProbeRunsItsVariantsMathMode) {
    // A context in tf32 runs its tiles' GEMM pieces (CUDA's blocked trsm) in tf32: its probe
    // times them so, and caches that rate apart from the strict one.
    eng::tile_variant strict(tile_kind::trsm), tf32(tile_kind::trsm);
    tf32.math = math_mode::tf32;
    EXPECT_NE(strict, tf32);
    EXPECT_EQ(eng::probe_op(tf32, dtype::f32, gemm_kernel::vendor, 64, nullptr, nullptr, nullptr).math, math_mode::tf32);
    EXPECT_EQ(eng::probe_op(strict, dtype::f32, gemm_kernel::vendor, 64, nullptr, nullptr, nullptr).math, math_mode::strict);
}

/// Every kind in `types` that `spec`'s first device runs is timed at two small orders; each time
/// is positive, and the larger order is the one with more flops.
void probe_every_kind(const std::string& spec, std::initializer_list<dtype> types, std::initializer_list<tile_kind> kinds) {
    auto devs = open_devices(spec);
    device& dev = *devs.front();
    const index_t orders[] = {24, 40};
    int probed = 0;
    for (dtype t : types)
        for (tile_kind k : kinds) {
            const bool herm = k == tile_kind::herk || k == tile_kind::her2k || k == tile_kind::hemm;
            if (herm && !dtype_traits(t).is_complex) continue;
            const std::string what = spec + " " + std::string(to_string(k)) + " " + std::string(to_string(t));
            const std::vector<double> s = eng::probe_tile_seconds(dev, t, k, gemm_kernel::vendor, orders, 1);
            if (!dev.supports(k, t, gemm_kernel::vendor)) {
                EXPECT_TRUE(s.empty()) << what;
                continue;
            }
            ASSERT_EQ(s.size(), 2u) << what;
            EXPECT_GT(s[0], 0.0) << what;
            EXPECT_GT(s[1], 0.0) << what;
            EXPECT_GT(eng::tile_probe_flops(k, t, 40), eng::tile_probe_flops(k, t, 24)) << what;
            ++probed;
        }
    EXPECT_GT(probed, 0) << spec;
}

TEST(TileRates, ProbeTimesEveryKindOnTheCpu) {
    probe_every_kind("cpu", {dtype::f32, dtype::f64, dtype::c32, dtype::c64},
                     {tile_kind::potrf, tile_kind::getrf, tile_kind::trsm, tile_kind::trmm, tile_kind::syrk, tile_kind::herk,
                      tile_kind::syr2k, tile_kind::her2k, tile_kind::symm, tile_kind::hemm});
    // A measured rate from the default orders, cached: the second ask is the same.
    auto devs = open_devices("cpu");
    const auto r = eng::measured_tile_rate(*devs.front(), dtype::f64, tile_kind::trsm, gemm_kernel::vendor);
    ASSERT_TRUE(r);
    EXPECT_GT(r->flops, 0.0);
    EXPECT_GE(r->call_seconds, 0.0);
    const auto again = eng::measured_tile_rate(*devs.front(), dtype::f64, tile_kind::trsm, gemm_kernel::vendor);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->flops, r->flops);
}

TEST(TileRates, ProbeTimesTheKindsOnOpenCL) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    // One kind that runs (CLBlast compiles each routine and precision on PoCL: 60 s for four kinds
    // in two precisions with an empty kernel cache); potrf and getrf, which OpenCL devices stage to
    // the host, come back empty.
    probe_every_kind("opencl:0", {dtype::f64}, {tile_kind::trsm, tile_kind::potrf, tile_kind::getrf});
    // Too little memory left for the probe's operands: not measured.
    auto small = open_devices("opencl:0@64KiB");
    const index_t big[] = {24, 256};
    EXPECT_TRUE(eng::probe_tile_seconds(*small.front(), dtype::f64, tile_kind::trsm, gemm_kernel::vendor, big, 1).empty());
}

// On a GPU: every kind of the four precisions is measured (cuBLAS, cuSOLVER), and what the probe
// costs, which a context pays once per process and kind at its first Level 3 or Cholesky call.
TEST(TileRates, ProbeMeasuresTheKindsOnCuda) {
    TILESTREAM_SKIP_WITHOUT_GPU("cuda:0");
    auto devs = open_devices("cuda:0");
    device& dev = *devs.front();
    for (dtype t : {dtype::f32, dtype::f64, dtype::c32, dtype::c64})
        for (tile_kind k : {tile_kind::potrf, tile_kind::getrf, tile_kind::trsm, tile_kind::trmm, tile_kind::syrk,
                            tile_kind::herk, tile_kind::syr2k, tile_kind::her2k, tile_kind::symm, tile_kind::hemm}) {
            const bool herm = k == tile_kind::herk || k == tile_kind::her2k || k == tile_kind::hemm;
            if ((herm && !dtype_traits(t).is_complex) || !dev.supports(k, t, gemm_kernel::vendor)) continue;
            const auto t0 = std::chrono::steady_clock::now();
            const auto r = eng::measured_tile_rate(dev, t, k, gemm_kernel::vendor);
            const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ASSERT_TRUE(r) << to_string(k) << " " << to_string(t);
            EXPECT_GT(r->flops, 0.0);
            EXPECT_GE(r->call_seconds, 0.0);
            std::printf("probe %-6s %-4s %10.1f GFLOP/s + %7.3f ms a call; the probe took %6.1f ms\n",
                        std::string(to_string(k)).c_str(), std::string(to_string(t)).c_str(), r->flops * 1e-9,
                        r->call_seconds * 1e3, took * 1e3);
        }
    // A context on the GPU plans its Cholesky with them.
    host_matrix<double> c(600, 600, layout::col_major);
    context ctx("cuda:0");
    const blas3_plan plan = ctx.plan(describe_blas3<double>(blas3_routine::potrf, {side::left, uplo::lower, op::n, diag::non_unit},
                                                            {1.0, 0.0, {}, {}, c.view()}));
    EXPECT_GT(plan.rates.tile_rates[std::size_t(tile_kind::potrf)].flops, 0.0) << ctx.explain(plan);
    EXPECT_GT(plan.rates.tile_rates[std::size_t(tile_kind::trsm)].flops, 0.0) << ctx.explain(plan);
    EXPECT_NE(ctx.explain(plan).find("tile kinds"), std::string::npos) << ctx.explain(plan);
}

TEST(TileRates, TheModelPricesAKindByItsRateAndFixedCost) {
    eng::task_graph g;
    device_rates r;
    r.flops = 50e9;
    r.op_overhead = 1e-4;
    r.tile_rates[std::size_t(tile_kind::trsm)] = {2e9, 3e-3};
    eng::task_step st;
    st.op.kind = tile_kind::trsm;
    st.op.type = dtype::f64;
    st.op.m = 512;
    st.op.n = 300;
    const double f = st.op.flops();
    EXPECT_NEAR(eng::step_seconds(g, st, r), 3e-3 + f / 2e9, 1e-12);  // its own call cost, not op_overhead
    // Other kinds keep the GEMM rate.
    eng::task_step gemm = st;
    gemm.op.kind = tile_kind::gemm;
    gemm.op.k = 64;
    EXPECT_NEAR(eng::step_seconds(g, gemm, r), gemm.op.flops() / 50e9 + 1e-4, 1e-12);
    eng::task_step trmm = st;
    trmm.op.kind = tile_kind::trmm;
    EXPECT_NEAR(eng::step_seconds(g, trmm, r), f / 50e9 + 1e-4, 1e-12);
    // A step the executor splits in diagonal blocks (host devices) is priced by its blocks, as before.
    r.diagonal_block = 256;
    r.diagonal_flops = 10e9;
    const double share = eng::blocked_diagonal_share(512, 256);
    EXPECT_NEAR(eng::step_seconds(g, st, r), f * (share / 10e9 + (1 - share) / 50e9) + 3 * 1e-4, 1e-12);
}

// Only a first device apart from the host's cores is probed: CPU devices with a budget (copying),
// PoCL's, declared rates, reproducible mode and the reference kernel plan without kind rates and
// print no "tile kinds" line (a GPU's plan has them: TileRates.ProbeMeasuresTheKindsOnCuda and
// scripts/gpu-tile-rates.sh).
TEST(TileRates, OnlyDevicesApartFromTheHostAreProbed) {
    host_matrix<double> c(300, 300, layout::col_major);
    const blas3_problem p = describe_blas3<double>(blas3_routine::potrf, {side::left, uplo::lower, op::n, diag::non_unit},
                                                   {1.0, 0.0, {}, {}, c.view()});
    const auto none_measured = [](const blas3_plan& plan) {
        for (const tile_rate& t : plan.rates.tile_rates)
            if (t.flops != 0 || t.call_seconds != 0) return false;
        return true;
    };
    std::vector<std::pair<std::string, context_options>> cases;
    cases.push_back({"cpu@8MiB", {}});
    context_options reproducible;
    reproducible.reproducible = true;
    cases.push_back({"cpu@8MiB", reproducible});
    context_options reference;
    reference.kernel = gemm_kernel::reference;
    cases.push_back({"cpu@8MiB", reference});
    context_options declared;
    declared.rates = device_rates{};
    cases.push_back({"cpu@8MiB", declared});
    std::string why;
    if (!testing::gpu_missing("opencl:0", why)) cases.push_back({"opencl:0@64MiB", {}});
    for (const auto& [spec, options] : cases) {
        context ctx(spec, options);
        const blas3_plan plan = ctx.plan(p);
        EXPECT_TRUE(none_measured(plan)) << spec << "\n" << ctx.explain(plan);
        EXPECT_EQ(ctx.explain(plan).find("tile kinds"), std::string::npos) << spec << "\n" << ctx.explain(plan);
    }
}

/// A GPU-like device's rates: GEMM fast, copies fast, and (with `kinds`) the diagonal kinds slow
/// with a fixed cost per call (potrf slower than an H200's probe found cuSOLVER's, 1.1 TFLOP/s +
/// 0.2 ms, so that its calls dominate the prediction the test checks).
device_rates gpu_like(bool kinds) {
    device_rates r;
    r.h2d = r.d2h = 50e9;
    r.flops = 50e12;
    r.op_overhead = 10e-6;
    r.measured = true;
    if (kinds) {
        r.tile_rates[std::size_t(tile_kind::potrf)] = {100e9, 1.0e-3};
        r.tile_rates[std::size_t(tile_kind::trsm)] = {8e12, 0.1e-3};
        r.tile_rates[std::size_t(tile_kind::syrk)] = {12e12, 0.1e-3};
    }
    return r;
}

TEST(TileRates, PlansPredictTheDiagonalKindsAtTheirRates) {
    host_matrix<double> c(4096, 4096, layout::col_major);
    const blas3_problem p = describe_blas3<double>(blas3_routine::potrf, {side::left, uplo::lower, op::n, diag::non_unit},
                                                   {1.0, 0.0, {}, {}, c.view()});
    const std::size_t budget = std::size_t(8) << 30;
    const blas3_plan plain = plan_blas3(p, budget, gpu_like(false));
    const blas3_plan priced = plan_blas3(p, budget, gpu_like(true));
    const std::string why = explain(plain) + "\n" + explain(priced);
    // At the GEMM rate a Cholesky of 4096 is all copies (2.6 ms predicted on an H200, 24 measured);
    // with potrf's fixed cost each diagonal tile costs a millisecond on the critical path.
    const double potrf_tiles = std::ceil(4096.0 / double(priced.tile));
    EXPECT_GE(priced.predicted_seconds, potrf_tiles * 1.0e-3) << why;
    EXPECT_GT(priced.predicted_critical_path_seconds, 2 * plain.predicted_critical_path_seconds) << why;
    EXPECT_NE(explain(priced).find("potrf 100.0 GFLOP/s + 1.000 ms a call"), std::string::npos) << why;
    EXPECT_EQ(explain(plain).find("tile kinds"), std::string::npos) << why;
}

}  // namespace
}  // namespace tilestream
