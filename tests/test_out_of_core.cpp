// Out-of-core GEMM on CPU devices with tiny budgets: every strategy, dtype, op, layout and
// transfer mode matches the reference; measured bytes equal the plan's prediction; peak memory
// stays within the budget; too small a budget names the smallest that fits.
#include "test_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/trace.hpp>
#include <tilestream/verify.hpp>

#include <tuple>

namespace tilestream {
namespace {

using ooc_param = std::tuple<gemm_strategy, dtype, int /*ops*/, int /*layouts*/>;

struct ooc_case {
    index_t m, n, k;
    index_t tm, tn, tk;
    double alpha, beta;
};

template <class T>
void check_case(gemm_strategy strategy, transfer_mode transfer, const ooc_case& cs, op oa, op ob, layout la,
                layout lb, layout lc, std::uint64_t seed, const std::string& spec = "cpu",
                gemm_kernel kernel = gemm_kernel::tiled) {
    const bool na = oa == op::n, nb = ob == op::n;
    // Padded leading dimensions on A, so tiles of full width are not contiguous either.
    const index_t a_rows = na ? cs.m : cs.k, a_cols = na ? cs.k : cs.m;
    const index_t a_ld = (la == layout::row_major ? a_cols : a_rows) + 3;
    std::vector<T> a_store(std::size_t(a_ld) * std::size_t(la == layout::row_major ? a_rows : a_cols));
    host_matrix_view<T> a(a_store.data(), a_rows, a_cols, la, a_ld);
    host_matrix<T> b(nb ? cs.k : cs.n, nb ? cs.n : cs.k, lb), c(cs.m, cs.n, lc), c0(cs.m, cs.n, lc);
    fill_random(a, seed);
    fill_random(b.view(), seed + 1);
    if (cs.beta != 0) fill_random(c0.view(), seed + 2);
    else fill_nan(c0.view());
    std::copy(c0.data(), c0.data() + cs.m * cs.n, c.data());

    host_matrix<double> ad(a.rows(), a.cols()), bd(b.rows(), b.cols()), ref(cs.m, cs.n);
    for (index_t i = 0; i < a.rows(); ++i)
        for (index_t j = 0; j < a.cols(); ++j) ad(i, j) = a(i, j);
    for (index_t i = 0; i < b.rows(); ++i)
        for (index_t j = 0; j < b.cols(); ++j) bd(i, j) = b(i, j);
    for (index_t i = 0; i < cs.m; ++i)
        for (index_t j = 0; j < cs.n; ++j) ref(i, j) = cs.beta != 0 ? double(c0(i, j)) : 0.0;
    reference_gemm<double>(oa, ob, cs.alpha, ad.view(), bd.view(), cs.beta, ref.view());

    const gemm_problem problem = describe_gemm<T>(oa, ob, T(cs.alpha), a, b.view(), T(cs.beta), c.view());
    plan_options po;
    po.strategy = strategy;
    po.transfer = transfer;
    po.kernel = kernel;
    const bool panel = strategy == gemm_strategy::a_panel || strategy == gemm_strategy::a_panel_c_panel ||
                       strategy == gemm_strategy::b_panel;
    po.tile_m = cs.tm;
    po.tile_n = strategy == gemm_strategy::tiles_3d ? cs.tm : cs.tn;
    po.tile_k = panel ? 0 : (strategy == gemm_strategy::tiles_3d ? cs.tm : cs.tk);
    // A budget of "a few tiles": what the pipeline's plan needs, found by planning with room to
    // spare (the task engine fills that budget with slots).
    plan_options sizing = po;
    sizing.engine = gemm_engine::pipeline;
    const gemm_plan sized = plan_gemm(problem, std::size_t(1) << 40, device_rates{}, sizing);
    const std::size_t budget = sized.peak_device_bytes + 64;

    open_options oo;
    oo.memory_budget = budget;
    auto devs = open_devices(spec, oo);
    // Both engines (the task engine is the default; the pipeline still runs several devices).
    for (gemm_engine e : {gemm_engine::tasks, gemm_engine::pipeline}) {
        SCOPED_TRACE(to_string(e));
        po.engine = e;
        const gemm_plan plan = plan_gemm(problem, budget, device_rates{}, po);
        ASSERT_EQ(plan.strategy, strategy);
        ASSERT_EQ(plan.engine, e);
        ASSERT_GT(plan.tiles_m * plan.tiles_n * plan.tiles_k, 1) << "the case must be out-of-core";
        device* d[] = {devs.front().get()};
        std::copy(c0.data(), c0.data() + cs.m * cs.n, c.data());
        const gemm_report rep = execute_gemm<T>(plan, d, T(cs.alpha), a, b.view(), T(cs.beta), c.view());

        EXPECT_LE(relative_frobenius_error<T>(c.view(), ref.view()), gemm_tolerance(dtype_of<T>(), cs.k));
        EXPECT_EQ(rep.bytes_h2d, plan.bytes_h2d);
        EXPECT_EQ(rep.bytes_d2h, plan.bytes_d2h);
        EXPECT_EQ(rep.bytes_packed, plan.bytes_packed);
        EXPECT_EQ(rep.peak_device_bytes, plan.peak_device_bytes);
        EXPECT_LE(rep.peak_device_bytes, budget);
        // The padded A has no contiguous tile of more than one row or column.
        if (transfer == transfer_mode::pack && cs.m > 1 && cs.k > 1) EXPECT_GT(rep.bytes_packed, 0u);
        if (transfer == transfer_mode::copy_2d) EXPECT_EQ(rep.bytes_packed, 0u);
    }
}

std::string ooc_name(const ::testing::TestParamInfo<ooc_param>& info) {
    std::string name(to_string(std::get<0>(info.param)));
    for (auto& ch : name)
        if (ch == '-') ch = '_';
    return name + "_" + std::string(to_string(std::get<1>(info.param))) + "_ops" +
           std::to_string(std::get<2>(info.param)) + "_layouts" + std::to_string(std::get<3>(info.param));
}

/// Every strategy and transfer mode on ragged tiles, on the device `spec` names.
void check_ragged_tiles(const std::string& spec, const ooc_param& param) {
    const auto& [strategy, type, ops, layouts] = param;
    const op oa = (ops & 1) ? op::t : op::n, ob = (ops & 2) ? op::t : op::n;
    const layout la = (layouts & 1) ? layout::col_major : layout::row_major;
    const layout lb = (layouts & 2) ? layout::col_major : layout::row_major;
    const layout lc = layouts == 3 || layouts == 1 ? layout::col_major : layout::row_major;
    const ooc_case cases[] = {
        {67, 45, 53, 16, 13, 11, 1.5, -0.5},  // ragged in every dimension, C read
        {31, 70, 9, 8, 32, 4, 1.0, 0.0},      // beta = 0 (C poisoned), flat
        {1, 37, 29, 1, 10, 8, -2.0, 1.0},     // a single row
    };
    std::uint64_t seed = 77;
    for (transfer_mode t : {transfer_mode::copy_2d, transfer_mode::pack})
        for (const auto& cs : cases) {
            SCOPED_TRACE(::testing::Message() << to_string(t) << " " << cs.m << "x" << cs.n << "x" << cs.k);
            visit_real_dtype(type, "test", [&]<class T>() { check_case<T>(strategy, t, cs, oa, ob, la, lb, lc, seed++, spec); });
        }
}

class out_of_core_matches_reference : public ::testing::TestWithParam<ooc_param> {};
TEST_P(out_of_core_matches_reference, RaggedTilesBothTransfers) { check_ragged_tiles("cpu", GetParam()); }

class out_of_core_opencl_matches_reference : public ::testing::TestWithParam<ooc_param> {};
TEST_P(out_of_core_opencl_matches_reference, RaggedTilesBothTransfers) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    check_ragged_tiles("opencl:0", GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    cpu, out_of_core_matches_reference,
    ::testing::Combine(::testing::Values(gemm_strategy::tiles_3d, gemm_strategy::a_panel, gemm_strategy::a_panel_c_panel,
                                         gemm_strategy::b_panel, gemm_strategy::c_block),
                       ::testing::Values(dtype::f32, dtype::f64), ::testing::Range(0, 4), ::testing::Range(0, 4)),
    ooc_name);

// On a GPU, the tiled and vendor kernels, with last tiles one row, column or k-step wide: the device tiles then
// have leading dimension 1 (issue 17: cuBLAS refused such operands).
class out_of_core_on_gpu : public ::testing::TestWithParam<std::tuple<std::string, gemm_kernel, dtype>> {};

TEST_P(out_of_core_on_gpu, LastTilesOfWidthOneMatchReference) {
    const auto& [spec, kernel, type] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU(spec);
    const ooc_case cases[] = {
        {65, 33, 17, 16, 16, 8, 1.5, -0.5},  // 4x16 + 1 rows, 2x16 + 1 columns, 2x8 + 1 k
        {1, 37, 29, 1, 12, 14, -2.0, 1.0},   // a single row of C, ragged k by 1
        {37, 1, 29, 12, 1, 14, 1.0, 0.0},    // a single column of C (n = 1)
    };
    std::uint64_t seed = 91;
    // The device tiles' leading dimensions depend on the tile shapes, not on the transfer mode;
    // tiles-3d and c-block cut all three dimensions, a-panel keeps k whole.
    for (gemm_strategy strategy : {gemm_strategy::tiles_3d, gemm_strategy::c_block, gemm_strategy::a_panel})
        for (int ops = 0; ops < 4; ++ops)
            for (int layouts = 0; layouts < 8; ++layouts)
                for (const auto& cs : cases) {
                    if (strategy == gemm_strategy::tiles_3d && cs.tm == 1) continue;  // 1x1x1 tiles: too many
                    const layout la = layouts & 1 ? layout::col_major : layout::row_major;
                    const layout lb = layouts & 2 ? layout::col_major : layout::row_major;
                    const layout lc = layouts & 4 ? layout::col_major : layout::row_major;
                    SCOPED_TRACE(::testing::Message() << to_string(strategy) << " ops " << ops << " layouts "
                                                      << layouts << " " << cs.m << "x" << cs.n << "x" << cs.k);
                    visit_real_dtype(type, "test", [&]<class T>() {
                        check_case<T>(strategy, transfer_mode::copy_2d, cs, ops & 1 ? op::t : op::n,
                                      ops & 2 ? op::t : op::n, la, lb, lc, seed++, spec, kernel);
                    });
                }
}

INSTANTIATE_TEST_SUITE_P(cuda, out_of_core_on_gpu,
                         ::testing::Combine(::testing::Values(std::string("cuda:0")),
                                            ::testing::Values(gemm_kernel::tiled, gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64)));

// Both op pairs that differ most and both layouts of A and B (C follows them): every strategy.
INSTANTIATE_TEST_SUITE_P(
    opencl, out_of_core_opencl_matches_reference,
    ::testing::Combine(::testing::Values(gemm_strategy::tiles_3d, gemm_strategy::a_panel, gemm_strategy::a_panel_c_panel,
                                         gemm_strategy::b_panel, gemm_strategy::c_block),
                       ::testing::Values(dtype::f32, dtype::f64), ::testing::Values(0, 3), ::testing::Values(0, 3)),
    ooc_name);

TEST(out_of_core, AutoFitsATinyBudgetAndMatches) {
    host_matrix<float> a(301, 211), b(211, 173), c(301, 173);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    fill_nan(c.view());
    open_options oo;
    oo.memory_budget = 96 * 1024;  // the operands need 651 KiB
    auto devs = open_devices("cpu", oo);
    gemm_options opt;
    opt.strategy = gemm_strategy::automatic;
    opt.kernel = gemm_kernel::tiled;
    const auto rep = gemm<float>(*devs.front(), op::n, op::n, 1.f, a.view(), b.view(), 0.f, c.view(), opt);
    EXPECT_NE(rep.plan.strategy, gemm_strategy::in_core);
    EXPECT_LE(rep.peak_device_bytes, 96u * 1024);
    EXPECT_EQ(rep.bytes_h2d, rep.plan.bytes_h2d);
    host_matrix<double> ad(301, 211), bd(211, 173), ref(301, 173);
    for (index_t i = 0; i < 301; ++i)
        for (index_t j = 0; j < 211; ++j) ad(i, j) = a(i, j);
    for (index_t i = 0; i < 211; ++i)
        for (index_t j = 0; j < 173; ++j) bd(i, j) = b(i, j);
    reference_gemm<double>(op::n, op::n, 1.0, ad.view(), bd.view(), 0.0, ref.view());
    EXPECT_LE(relative_frobenius_error<float>(c.view(), ref.view()), gemm_tolerance(dtype::f32, 211));
}

/// The error names the smallest budget that fits, and that budget does fit (one byte less does not).
TEST(out_of_core, BudgetBelowTheMinimumNamesTheMinimum) {
    gemm_problem p;
    p.type = dtype::f64;
    p.m = 500;
    p.n = 400;
    p.k = 300;
    for (gemm_strategy s : {gemm_strategy::automatic, gemm_strategy::a_panel, gemm_strategy::in_core}) {
        plan_options po;
        po.strategy = s;
        std::size_t minimum = 0;
        try {
            plan_gemm(p, 1000, device_rates{}, po);
            FAIL() << "a 1000-byte budget fitted";
        } catch (const out_of_budget& e) {
            const std::string w = e.what();
            const auto at = w.find("the smallest budget that would is ");
            ASSERT_NE(at, std::string::npos) << w;
            const auto open = w.find('(', at);
            minimum = std::stoull(w.substr(open + 1));
            EXPECT_NE(w.find("budget of 1000 B (1000 bytes)"), std::string::npos) << w;
        }
        EXPECT_NO_THROW(plan_gemm(p, minimum, device_rates{}, po)) << to_string(s);
        EXPECT_THROW(plan_gemm(p, minimum - 1, device_rates{}, po), out_of_budget) << to_string(s);
    }
}

TEST(out_of_core, CostFormulasMatchTheSeedsForSquareProblems) {
    // Strategy 1 copies about 2n^3/T + n^2 elements; strategies 2 and 4 about 2n^2 + n^3/T.
    gemm_problem p;
    p.type = dtype::f32;
    p.m = p.n = p.k = 1024;
    // The pipeline's plans copy what the formulas say; the task engine's, on the same tiles in an
    // LRU store filled to the budget, never more (a budget of 6 MiB: neither holds all of A or B).
    const double n = 1024, T = 256, es = 4;
    for (gemm_engine e : {gemm_engine::pipeline, gemm_engine::tasks}) {
        SCOPED_TRACE(to_string(e));
        plan_options po;
        po.engine = e;
        po.tile_m = po.tile_n = po.tile_k = 256;
        po.strategy = gemm_strategy::tiles_3d;
        const std::size_t budget = e == gemm_engine::pipeline ? std::size_t(1) << 40 : std::size_t(6) << 20;
        auto t3 = plan_gemm(p, budget, device_rates{}, po);
        EXPECT_EQ(t3.engine, e);
        const double tiles_3d = (2 * n * n * n / T + n * n) * es;
        if (e == gemm_engine::pipeline) EXPECT_EQ(double(t3.bytes_h2d + t3.bytes_d2h), tiles_3d);
        else EXPECT_LT(double(t3.bytes_h2d + t3.bytes_d2h), tiles_3d);
        po.tile_k = 0;
        for (auto s : {gemm_strategy::a_panel, gemm_strategy::b_panel}) {
            po.strategy = s;
            auto pl = plan_gemm(p, budget, device_rates{}, po);
            const double panels = (2 * n * n + n * n * n / T) * es;
            if (e == gemm_engine::pipeline) EXPECT_EQ(double(pl.bytes_h2d + pl.bytes_d2h), panels) << to_string(s);
            else EXPECT_LE(double(pl.bytes_h2d + pl.bytes_d2h), panels) << to_string(s);
        }
    }
}

TEST(out_of_core, BadPlanOptionsAreRejected) {
    gemm_problem p;
    p.m = p.n = p.k = 100;
    plan_options po;
    po.strategy = gemm_strategy::a_panel;
    po.tile_k = 10;
    EXPECT_THROW(plan_gemm(p, 1 << 30, device_rates{}, po), invalid_argument);
    po.strategy = gemm_strategy::tiles_3d;
    po.tile_m = 10;
    po.tile_n = 20;
    EXPECT_THROW(plan_gemm(p, 1 << 30, device_rates{}, po), invalid_argument);
    EXPECT_THROW(parse_gemm_strategy("diagonal"), invalid_argument);
    EXPECT_THROW(parse_rates("h2d=fast"), invalid_argument);
    EXPECT_THROW(parse_rates("warp=9"), invalid_argument);
    const auto r = parse_rates("h2d=12GB/s,d2h=500MB/s,gflops=150,overhead=5us");
    EXPECT_DOUBLE_EQ(r.h2d, 12e9);
    EXPECT_DOUBLE_EQ(r.d2h, 500e6);
    EXPECT_DOUBLE_EQ(r.flops, 150e9);
    EXPECT_DOUBLE_EQ(r.op_overhead, 5e-6);
}

TEST(out_of_core, TraceHasASpanPerCopyAndKernel) {
    host_matrix<double> a(40, 30), b(30, 20), c(40, 20);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    auto devs = open_devices("cpu");
    gemm_problem p = describe_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view());
    plan_options po;
    po.strategy = gemm_strategy::tiles_3d;
    po.tile_m = po.tile_n = po.tile_k = 16;
    po.kernel = gemm_kernel::naive;
    for (gemm_engine e : {gemm_engine::pipeline, gemm_engine::tasks}) {
        SCOPED_TRACE(to_string(e));
        po.engine = e;
        const auto plan = plan_gemm(p, 1 << 30, device_rates{}, po);
        ASSERT_EQ(plan.engine, e);
        trace_recorder rec;
        gemm_run_options run;
        run.trace = &rec;
        device* d[] = {devs.front().get()};
        execute_gemm<double>(plan, d, 1.0, a.view(), b.view(), 0.0, c.view(), run);
        std::size_t kernels = 0, h2d = 0, d2h = 0, h2d_bytes = 0;
        for (const auto& s : rec.spans()) {
            kernels += s.kind == span_kind::kernel;
            h2d += s.kind == span_kind::copy_h2d;
            d2h += s.kind == span_kind::copy_d2h;
            if (s.kind == span_kind::copy_h2d) h2d_bytes += s.bytes;
            EXPECT_LE(s.t0, s.t1);
        }
        EXPECT_EQ(kernels, plan.steps);
        // The pipeline copies an A and a B tile for every step; the task store (3 slots of each
        // here, the reused A's panel and one more) keeps tiles the next tasks read: fewer copies,
        // every one of A's 6 and B's 4 tiles at least once.
        if (e == gemm_engine::pipeline) EXPECT_EQ(h2d, plan.steps * 2);
        else {
            EXPECT_EQ(plan.a_slots, 3);
            EXPECT_LT(h2d, plan.steps * 2);
            EXPECT_GE(h2d, std::size_t(6 + 4));
        }
        EXPECT_EQ(d2h, plan.units);
        EXPECT_EQ(h2d_bytes, plan.bytes_h2d);
        const std::string json = rec.chrome_json();
        EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
        EXPECT_NE(json.find("\"ph\": \"X\""), std::string::npos);
    }
}

}  // namespace
}  // namespace tilestream
