// The context: one object opens the devices, plans any shape on all of them (out-of-core when the
// budget says so) and runs; concurrent callers get correct results; Jacobi through it matches the
// plain library call bitwise; bad specs and mismatched plans are clear errors.
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/error.hpp>
#include <tilestream/verify.hpp>

#include <cstring>
#include <thread>

namespace tilestream {
namespace {

template <class T>
struct problem_data {
    op oa, ob;
    index_t m, n, k;
    host_matrix<T> a, b, c0, c;
    problem_data(op oa_, op ob_, index_t m_, index_t n_, index_t k_, layout lay, std::uint64_t seed)
        : oa(oa_), ob(ob_), m(m_), n(n_), k(k_), a(oa == op::n ? m : k, oa == op::n ? k : m, lay),
          b(ob == op::n ? k : n, ob == op::n ? n : k, lay), c0(m, n, lay), c(m, n, lay) {
        fill_random(a.view(), seed);
        fill_random(b.view(), seed + 1);
        fill_random(c0.view(), seed + 2);
    }
    /// Runs through the context with C poisoned (beta = 0) or holding C0, then checks.
    void run_and_check(context& ctx, T alpha, T beta, const gemm_call_options& call = {}) {
        if (beta == T(0)) fill_nan(c.view());
        else std::memcpy(c.data(), c0.data(), sizeof(T) * std::size_t(m * n));
        ctx.gemm<T>(oa, ob, alpha, a.view(), b.view(), beta, c.view(), call);
        const auto r = check_gemm<T>(oa, ob, alpha, a.view(), b.view(), beta, c0.view(), c.view());
        EXPECT_TRUE(r.passed()) << ctx.device_names() << " " << m << "x" << n << "x" << k << ": " << r.summary();
    }
};

TEST(context, AnyShapeOnAllDevicesOutOfCoreWhenTheBudgetSaysSo) {
    // 64 KiB per device cannot hold these operands in-core: the automatic plan must stream them.
    context_options o;
    o.memory_budget = 64 * 1024;
    o.cpu_threads = 1;
    context ctx("cpu:3", o);
    ASSERT_EQ(ctx.devices().size(), 3u);
    EXPECT_FALSE(ctx.computes_in_place());
    for (layout lay : {layout::row_major, layout::col_major})
        for (int ops = 0; ops < 4; ++ops) {
            const op oa = (ops & 1) ? op::t : op::n, ob = (ops & 2) ? op::t : op::n;
            problem_data<float> f(oa, ob, 131, 77, 95, lay, 100 + ops);
            f.run_and_check(ctx, 0.75f, 0.0f);
            problem_data<double> d(oa, ob, 67, 143, 89, lay, 200 + ops);
            d.run_and_check(ctx, -1.5, 0.5);
        }
    problem_data<double> big(op::n, op::n, 200, 150, 170, layout::row_major, 7);
    const gemm_plan plan = ctx.plan<double>(op::n, op::n, 1.0, big.a.view(), big.b.view(), 0.0, big.c.view());
    EXPECT_NE(plan.strategy, gemm_strategy::in_core);
    EXPECT_LE(plan.peak_device_bytes, 64u * 1024);
    EXPECT_NE(ctx.explain(plan).find(std::string(to_string(plan.strategy))), std::string::npos);
}

TEST(context, InPlaceOnCpuWithoutBudget) {
    context ctx("cpu:2");
    EXPECT_TRUE(ctx.computes_in_place());
    problem_data<float> f(op::t, op::n, 301, 257, 129, layout::col_major, 3);
    const gemm_plan plan = ctx.plan<float>(f.oa, f.ob, 1.0f, f.a.view(), f.b.view(), 0.0f, f.c.view());
    // In place: zero-copy, or direct on the calling thread where the measured rates say so.
    EXPECT_TRUE(plan.strategy == gemm_strategy::zero_copy || plan.strategy == gemm_strategy::direct)
        << to_string(plan.strategy);
    fill_nan(f.c.view());
    const gemm_report rep = ctx.execute<float>(plan, 1.0f, f.a.view(), f.b.view(), 0.0f, f.c.view());
    EXPECT_EQ(rep.bytes_h2d, 0u);
    const auto r = check_gemm<float>(f.oa, f.ob, 1.0f, f.a.view(), f.b.view(), 0.0f, f.c0.view(), f.c.view());
    EXPECT_TRUE(r.passed()) << r.summary();
}

TEST(context, SeveralDevicesPlanWithEachOnesMeasuredRate) {
    context ctx("cpu:2");
    problem_data<double> d(op::n, op::n, 1023, 1021, 517, layout::row_major, 5);
    gemm_call_options call;
    call.strategy = gemm_strategy::zero_copy;  // the engine, not the direct path
    const gemm_plan plan = ctx.plan<double>(d.oa, d.ob, 1.0, d.a.view(), d.b.view(), 0.0, d.c.view(), call);
    ASSERT_EQ(plan.device_flops.size(), 2u);
    EXPECT_GT(plan.device_flops[0], 0.0);
    EXPECT_GT(plan.device_flops[1], 0.0);
    fill_nan(d.c.view());
    ctx.execute<double>(plan, 1.0, d.a.view(), d.b.view(), 0.0, d.c.view());
    EXPECT_TRUE(check_gemm<double>(d.oa, d.ob, 1.0, d.a.view(), d.b.view(), 0.0, d.c0.view(), d.c.view()).passed());
}

TEST(context, ConcurrentCallersGetCorrectResults) {
    context_options o;
    o.memory_budget = 256 * 1024;
    o.cpu_threads = 1;
    context ctx("cpu:2", o);
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 3; ++i) {
                problem_data<double> d(i % 2 ? op::t : op::n, op::n, 97 + 13 * t, 61 + 7 * i, 83, layout::row_major,
                                       std::uint64_t(1000 + 10 * t + i));
                fill_nan(d.c.view());
                ctx.gemm<double>(d.oa, d.ob, 2.0, d.a.view(), d.b.view(), 0.0, d.c.view());
                if (!check_gemm<double>(d.oa, d.ob, 2.0, d.a.view(), d.b.view(), 0.0, d.c0.view(), d.c.view()).passed())
                    ++failures[std::size_t(t)];
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[std::size_t(t)], 0) << "thread " << t;
}

TEST(context, JacobiMatchesThePlainCallBitwise) {
    jacobi_problem p;
    p.nx = 67;
    p.ny = 45;
    p.type = dtype::f64;
    jacobi_options jo;
    jo.iters = 40;
    context ctx("cpu:3");
    const auto through_context = ctx.jacobi<double>(p, jo);
    auto devs = open_devices("cpu");
    const auto plain = solve_jacobi<double>(plan_jacobi(p, devs, jo));
    ASSERT_EQ(through_context.field.rows(), plain.field.rows());
    EXPECT_EQ(0, std::memcmp(through_context.field.data(), plain.field.data(), sizeof(double) * std::size_t(p.nx * p.ny)));
    EXPECT_EQ(through_context.report.iterations, 40);
}

TEST(context, ClearErrors) {
    try {
        context ctx("cpu,bogus:1");
        FAIL() << "a bad spec was accepted";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos) << e.what();
    }
    context two("cpu:2"), one("cpu");
    problem_data<float> f(op::n, op::n, 33, 35, 37, layout::row_major, 5);
    const gemm_plan plan = two.plan<float>(f.oa, f.ob, 1.0f, f.a.view(), f.b.view(), 0.0f, f.c.view());
    EXPECT_THROW(one.execute<float>(plan, 1.0f, f.a.view(), f.b.view(), 0.0f, f.c.view()), invalid_argument);
    host_matrix<float> wrong(34, 35);
    EXPECT_THROW(one.gemm<float>(f.a.view(), f.b.view(), wrong.view()), dimension_mismatch);
    context_options tiny;
    tiny.memory_budget = 64;
    context small("cpu", tiny);
    try {
        small.gemm<float>(f.a.view(), f.b.view(), f.c.view());
        FAIL() << "a 64-byte budget was accepted";
    } catch (const out_of_budget& e) {
        EXPECT_NE(std::string(e.what()).find("cpu:0"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tilestream
