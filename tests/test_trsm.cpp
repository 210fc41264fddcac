// TRSM against the reference: every side, uplo, trans and diag, both layouts, f32 and f64, odd
// sizes; in place on one and three CPU devices, out of core through small budgets (left- and
// right-looking), on OpenCL, alpha = 0, and the residual of a well-conditioned solve.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::blas3_case;
using testing::every_flag;
using testing::run_and_check;

/// Runs every flag combination and layout pair of TRSM in both precisions on the context.
void every_trsm(context& ctx, index_t m, index_t n, const blas3_call_options& call, bool all_layouts = true) {
    int count = 0;
    for (const blas3_flags& f : every_flag(blas3_routine::trsm))
        for (layout la : {layout::row_major, layout::col_major})
            for (layout lc : {layout::row_major, layout::col_major}) {
                if (!all_layouts && la != lc && (count++ % 2)) continue;
                blas3_case g;
                g.routine = blas3_routine::trsm;
                g.flags = f;
                g.m = m;
                g.n = n;
                g.la = la;
                g.lc = lc;
                g.alpha = 0.75;
                g.seed = std::uint64_t(37 * count + 5);
                run_and_check<double>(ctx, g, call);
                run_and_check<float>(ctx, g, call);
            }
}

TEST(Trsm, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_trsm(ctx, 67, 45, {});
}

TEST(Trsm, TilesOnThreeDevicesInPlaceMatchReference) {
    context ctx("cpu:3");
    for (blas3_order o : {blas3_order::left_looking, blas3_order::right_looking}) {
        blas3_call_options call;
        call.order = o;
        call.tile = 16;
        call.tile_free = 24;
        every_trsm(ctx, 53, 71, call, false);
    }
}

TEST(Trsm, ComplexInPlaceAndOutOfCoreMatchReference) {
    for (const char* spec : {"cpu", "cpu:3@64KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        if (std::string(spec) != "cpu") call.tile = 20;
        testing::every_complex_option(ctx, blas3_routine::trsm, 47, 33, 0, call, false);
    }
}

TEST(Trsm, OutOfCoreOnThreeDevicesMatchesReference) {
    // 48 KiB per device: a few 24 x 24 f64 tiles at a time.
    context ctx("cpu:3", {.memory_budget = std::size_t(48) << 10});
    for (blas3_order o : {blas3_order::left_looking, blas3_order::right_looking}) {
        blas3_call_options call;
        call.order = o;
        call.tile = 24;
        call.tile_free = 24;
        every_trsm(ctx, 61, 50, call, false);
    }
    // The planner's own tiles and order.
    every_trsm(ctx, 97, 33, {}, false);
}

TEST(Trsm, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (gemm_kernel k : {gemm_kernel::tiled, gemm_kernel::vendor}) {
        context ctx("opencl:0@256KiB", {.kernel = k});
        blas3_call_options call;
        call.tile = 32;
        call.tile_free = 32;
        every_trsm(ctx, 45, 70, call, false);
    }
}

TEST(Trsm, AlphaZeroOverwritesBWithZerosWithoutReadingA) {
    for (const char* spec : {"cpu", "cpu:2@64KiB"}) {
        context ctx(spec);
        blas3_case g;
        g.routine = blas3_routine::trsm;
        g.m = 40;
        g.n = 33;
        g.alpha = 0;  // B poisoned with NaN: every element must become 0
        for (const blas3_flags& f : every_flag(blas3_routine::trsm)) {
            g.flags = f;
            testing::blas3_data<double> d = testing::make_blas3_data<double>(g);
            for (index_t i = 0; i < d.a.rows(); ++i)
                for (index_t j = 0; j < d.a.cols(); ++j) d.a(i, j) = std::numeric_limits<double>::quiet_NaN();
            ctx.blas3<double>(g.routine, g.flags, d.ops(g));
            for (index_t i = 0; i < g.m; ++i)
                for (index_t j = 0; j < g.n; ++j) ASSERT_EQ(d.c(i, j), 0.0) << spec << " " << g.name();
        }
    }
}

TEST(Trsm, EmptyBIsAQuickReturn) {
    context ctx("cpu:2@64KiB");
    host_matrix<double> a(0, 0), b(0, 5);
    const blas3_report r = ctx.trsm<double>(side::left, uplo::lower, op::n, diag::non_unit, 1.0, a.view(), b.view());
    EXPECT_EQ(r.plan.tasks, 0u);
    EXPECT_EQ(r.bytes_h2d, 0u);
}

TEST(Trsm, ShapeErrorsNameTheOperands) {
    context ctx("cpu");
    host_matrix<double> a(5, 5), b(6, 3);
    try {
        ctx.trsm<double>(side::left, uplo::lower, op::n, diag::non_unit, 1.0, a.view(), b.view());
        FAIL() << "no error";
    } catch (const dimension_mismatch& e) {
        EXPECT_NE(std::string(e.what()).find("A is 5x5"), std::string::npos) << e.what();
    }
}

TEST(Trsm, LeftAndRightLookingAreBitwiseIdentical) {
    // The same operations on each tile in the same order: the same bits, on any device count.
    for (const char* spec : {"cpu", "cpu:3", "cpu:2@2MiB"}) {
        context ctx(spec, {.reproducible = true});
        blas3_case g;
        g.routine = blas3_routine::trsm;
        g.m = 300;
        g.n = 37;
        g.flags = {side::left, uplo::upper, op::t, diag::non_unit};
        std::vector<double> left, right;
        blas3_call_options call;
        call.order = blas3_order::left_looking;
        run_and_check<double>(ctx, g, call, &left);
        call.order = blas3_order::right_looking;
        run_and_check<double>(ctx, g, call, &right);
        EXPECT_EQ(left, right) << spec;
    }
}

}  // namespace
}  // namespace tilestream
