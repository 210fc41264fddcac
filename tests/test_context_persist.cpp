// What a context keeps between GEMM calls: buffers (and the budget they hold, given back when
// another run needs it) and the tiles of operands the caller keeps. A second call on kept operands
// copies less and is right; after changed() (or with a new handle) the new values are read; calls
// of other shapes and types on the kept buffers, and concurrent callers, stay right. CPU devices
// with a budget copy into "device" buffers, so this runs without a GPU.
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <cstring>
#include <thread>

namespace tilestream {
namespace {

context_options budgeted(std::size_t bytes) {
    context_options o;
    o.memory_budget = bytes;
    o.cpu_threads = 1;
    o.rates = device_rates{};  // declared: no probe, the same plan every run
    return o;
}

/// C (poisoned when beta is 0, else holding c0) <- alpha op(A) op(B) + beta C through the context,
/// checked against the reference; returns the report.
template <class T>
gemm_report run_checked(context& ctx, op oa, op ob, T alpha, host_matrix_view<const T> a, host_matrix_view<const T> b,
                        T beta, host_matrix_view<const T> c0, host_matrix_view<T> c, const gemm_call_options& call = {}) {
    if (beta == T(0)) fill_nan(c);
    else
        for (index_t i = 0; i < c.rows(); ++i)
            for (index_t j = 0; j < c.cols(); ++j) c(i, j) = c0(i, j);
    const gemm_report rep = ctx.gemm<T>(oa, ob, alpha, a, b, beta, c, call);
    const auto r = check_gemm<T>(oa, ob, alpha, a, b, beta, c0, host_matrix_view<const T>(c));
    EXPECT_TRUE(r.passed()) << c.rows() << "x" << c.cols() << ": " << r.summary();
    return rep;
}

template <class T>
std::size_t bytes_of(const host_matrix<T>& m) {
    return sizeof(T) * std::size_t(m.rows()) * std::size_t(m.cols());
}

template <class T>
void second_call_copies_less(const char* spec, layout lay, std::uint64_t seed) {
    SCOPED_TRACE(spec);
    // In-core: one tile of A and one of B, both left on the device by the first call.
    context ctx(spec, budgeted(1 << 20));
    gemm_call_options in_core;
    in_core.strategy = gemm_strategy::in_core;
    host_matrix<T> a(61, 53, lay), b(53, 47, lay), b2(53, 47, lay), c0(61, 47, lay), c(61, 47, lay);
    fill_random(a.view(), seed);
    fill_random(b.view(), seed + 1);
    fill_random(b2.view(), seed + 2);
    fill_random(c0.view(), seed + 3);
    const kept_operand ka = ctx.keep(a.view()), kb = ctx.keep(b.view());

    const gemm_report first = run_checked<T>(ctx, op::n, op::n, T(1), a.view(), b.view(), T(0), c0.view(), c.view(), in_core);
    EXPECT_EQ(first.bytes_h2d, bytes_of(a) + bytes_of(b));
    EXPECT_EQ(first.kept_hits, 0u);

    // Same operands, C read this time: only C is copied in.
    const gemm_report second =
        run_checked<T>(ctx, op::n, op::n, T(-0.5), a.view(), b.view(), T(2), c0.view(), c.view(), in_core);
    EXPECT_EQ(second.bytes_h2d, bytes_of(c));
    EXPECT_EQ(second.kept_hits, 2u);
    EXPECT_EQ(second.kept_bytes_saved, bytes_of(a) + bytes_of(b));
    ASSERT_EQ(second.devices.size(), 1u);
    EXPECT_EQ(second.devices[0].kept_hits, 2u);
    EXPECT_EQ(second.devices[0].bytes_h2d, bytes_of(c));

    // Another B, not kept: A still comes from the device, B2 is copied.
    const gemm_report third =
        run_checked<T>(ctx, op::n, op::n, T(1), a.view(), b2.view(), T(0), c0.view(), c.view(), in_core);
    EXPECT_EQ(third.bytes_h2d, bytes_of(b2));
    EXPECT_EQ(third.kept_hits, 1u);
    // And B2 once more: not kept, so copied again although its tile may still be there.
    const gemm_report fourth =
        run_checked<T>(ctx, op::n, op::n, T(1), a.view(), b2.view(), T(0), c0.view(), c.view(), in_core);
    EXPECT_EQ(fourth.bytes_h2d, bytes_of(b2));
}

TEST(context_persist, SecondCallOnKeptOperandsCopiesOnlyC) {
    second_call_copies_less<float>("cpu", layout::row_major, 11);
    second_call_copies_less<double>("cpu", layout::col_major, 21);
}

TEST(context_persist, SecondCallOnKeptOperandsCopiesOnlyCOnAccelerators) {
    std::string skipped;
    for (const char* spec : {"opencl:0", "cuda:0"}) {
        std::string why;
        if (testing::gpu_missing(spec, why)) {
            skipped += std::string(skipped.empty() ? "" : "; ") + spec + ": " + why;
            continue;
        }
        second_call_copies_less<float>(spec, layout::col_major, 12);
        second_call_copies_less<double>(spec, layout::row_major, 22);
    }
    if (skipped.find("opencl") != std::string::npos && skipped.find("cuda") != std::string::npos) GTEST_SKIP() << skipped;
}

TEST(context_persist, OutOfCoreSecondCallReusesTilesLeftOnTheDevice) {
    // 64 KiB cannot hold the operands: tiles are streamed, the last ones stay in the slots.
    context ctx("cpu", budgeted(64 * 1024));
    host_matrix<double> a(131, 95, layout::col_major), b(77, 95, layout::col_major), c0(131, 77), c(131, 77);
    fill_random(a.view(), 31);
    fill_random(b.view(), 32);
    fill_random(c0.view(), 33);
    const kept_operand ka = ctx.keep(a.view()), kb = ctx.keep(b.view());
    const gemm_report first = run_checked<double>(ctx, op::n, op::t, 0.75, a.view(), b.view(), 0.0, c0.view(), c.view());
    EXPECT_NE(first.plan.strategy, gemm_strategy::in_core);
    const gemm_report second = run_checked<double>(ctx, op::n, op::t, 0.75, a.view(), b.view(), 0.0, c0.view(), c.view());
    EXPECT_GT(second.kept_hits, 0u);
    EXPECT_LT(second.bytes_h2d, first.bytes_h2d);
    EXPECT_LE(second.peak_device_bytes, 64u * 1024);
}

TEST(context_persist, ChangedOperandsAreReadAgain) {
    context ctx("cpu", budgeted(1 << 20));
    gemm_call_options in_core;
    in_core.strategy = gemm_strategy::in_core;
    host_matrix<float> a(45, 38), b(38, 29), c0(45, 29), c(45, 29), old_c(45, 29);
    fill_random(a.view(), 41);
    fill_random(b.view(), 42);
    fill_random(c0.view(), 43);
    kept_operand ka = ctx.keep(a.view());
    run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), old_c.view(), in_core);

    // New values, said so: the result reflects them (a stale tile would fail the check).
    fill_random(a.view(), 44);
    ka.changed();
    gemm_report rep = run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view(), in_core);
    EXPECT_EQ(rep.kept_hits, 0u);
    // Unchanged since: reused again.
    rep = run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view(), in_core);
    EXPECT_EQ(rep.kept_hits, 1u);

    // A new handle after the old one is dropped: nothing of the old promise is used.
    ka.reset();
    fill_random(a.view(), 45);
    const kept_operand ka2 = ctx.keep(a.view());
    rep = run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view(), in_core);
    EXPECT_EQ(rep.kept_hits, 0u);

    // Operands not kept are read every call.
    fill_random(b.view(), 46);
    run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view(), in_core);

    // The promise is what makes reuse safe: broken (A written, changed() not called), the call
    // computes with the values A had, which shows the tile really came from the device.
    host_matrix<float> before(45, 38);
    std::memcpy(before.data(), a.data(), bytes_of(a));
    fill_random(a.view(), 47);
    fill_nan(c.view());
    rep = ctx.gemm<float>(op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c.view(), in_core);
    EXPECT_EQ(rep.kept_hits, 1u);
    EXPECT_TRUE(check_gemm<float>(op::n, op::n, 1.0f, before.view(), b.view(), 0.0f, c0.view(), c.view()).passed());
}

TEST(context_persist, AKeptOperandWrittenAsCIsReadAgain) {
    // x is kept and used as A (three row panels); a call then writes x's first panel (as C) and
    // loads one A panel, so x's old first panel stays in an A buffer: the next call on x must read
    // the new values (reusing that buffer's tile would fail the check).
    context ctx("cpu", budgeted(1 << 20));
    gemm_call_options panels;
    panels.strategy = gemm_strategy::a_panel;
    panels.tile_m = 11;
    panels.tile_n = 16;
    host_matrix<double> x(33, 27), b(27, 19), c0(33, 19), c(33, 19), p(11, 27), q(27, 27);
    fill_random(x.view(), 101);
    fill_random(b.view(), 102);
    fill_random(p.view(), 103);
    fill_random(q.view(), 104);
    const kept_operand kx = ctx.keep(x.view());
    run_checked<double>(ctx, op::n, op::n, 1.0, x.view(), b.view(), 0.0, c0.view(), c.view(), panels);
    ctx.gemm<double>(op::n, op::n, 1.0, p.view(), q.view(), 0.5, x.view().section(0, 0, 11, 27), panels);
    const gemm_report rep = run_checked<double>(ctx, op::n, op::n, 1.0, x.view(), b.view(), 0.0, c0.view(), c.view(), panels);
    EXPECT_EQ(rep.kept_hits, 0u);
    // Unchanged since: reused.
    EXPECT_GT(run_checked<double>(ctx, op::n, op::n, 1.0, x.view(), b.view(), 0.0, c0.view(), c.view(), panels).kept_hits, 0u);
}

TEST(context_persist, KeptBuffersServeCallsOfOtherShapesTypesAndViews) {
    context ctx("cpu", budgeted(96 * 1024));
    gemm_call_options tiles;  // the same buffer sizes whatever the shape: buffers serve every f64 call
    tiles.strategy = gemm_strategy::tiles_3d;
    tiles.tile_m = tiles.tile_n = tiles.tile_k = 16;
    // One kept matrix, used through different sections: tiles of one section are never taken for
    // another (they hold other elements).
    host_matrix<double> big(100, 80, layout::col_major);
    fill_random(big.view(), 51);
    const kept_operand kbig = ctx.keep(big.view());
    struct shape {
        index_t r0, c0, m, k;
    };
    int round = 0;
    for (const shape s : {shape{0, 0, 67, 45}, shape{10, 5, 61, 39}, shape{10, 5, 61, 39}, shape{3, 20, 90, 33},
                          shape{0, 0, 67, 45}}) {
        const auto a = host_matrix_view<const double>(big.view()).section(s.r0, s.c0, s.m, s.k);
        host_matrix<double> b(s.k, 37 + round, layout::row_major), c0(s.m, 37 + round), c(s.m, 37 + round);
        fill_random(b.view(), 60 + std::uint64_t(round));
        fill_random(c0.view(), 70 + std::uint64_t(round));
        run_checked<double>(ctx, op::n, op::n, 1.5, a, b.view(), round % 2 ? 0.5 : 0.0, c0.view(), c.view(), tiles);
        // f32 between the f64 calls: other slot sizes, buffers freed and made again.
        host_matrix<float> fa(s.k, 29, layout::col_major), fb(s.k, 41), fc0(29, 41), fc(29, 41);
        fill_random(fa.view(), 80 + std::uint64_t(round));
        fill_random(fb.view(), 90 + std::uint64_t(round));
        fill_random(fc0.view(), 95 + std::uint64_t(round));
        run_checked<float>(ctx, op::t, op::n, -1.0f, fa.view(), fb.view(), 0.0f, fc0.view(), fc.view(), tiles);
        EXPECT_LE(ctx.devices()[0]->bytes_in_use(), ctx.devices()[0]->budget());
        ++round;
    }
    // Calls with the same tile sizes back to back reuse the kept section's tiles.
    const auto a = host_matrix_view<const double>(big.view()).section(10, 5, 61, 39);
    host_matrix<double> b(39, 37), c0(61, 37), c(61, 37);
    fill_random(b.view(), 99);
    run_checked<double>(ctx, op::n, op::n, 1.0, a, b.view(), 0.0, c0.view(), c.view(), tiles);
    const gemm_report again = run_checked<double>(ctx, op::n, op::n, 1.0, a, b.view(), 0.0, c0.view(), c.view(), tiles);
    EXPECT_GT(again.kept_hits, 0u);
    // Another section of the same kept matrix with the same tiling: its tiles cover other elements.
    const auto shifted = host_matrix_view<const double>(big.view()).section(11, 5, 61, 39);
    const gemm_report other = run_checked<double>(ctx, op::n, op::n, 1.0, shifted, b.view(), 0.0, c0.view(), c.view(), tiles);
    EXPECT_EQ(other.kept_hits, 0u);
}

TEST(context_persist, KeptMemoryIsGivenBackToOtherRunsAndAllocations) {
    const std::size_t budget = 256 * 1024;
    context ctx("cpu", budgeted(budget));
    device& dev = *ctx.devices()[0];
    host_matrix<float> a(70, 90), b(90, 60), c0(70, 60), c(70, 60);
    fill_random(a.view(), 61);
    fill_random(b.view(), 62);
    run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view());
    EXPECT_GT(dev.bytes_in_use(), 0u);  // kept for the next call
    EXPECT_EQ(dev.budget_for_runs(), budget);  // ... but as a reservation other runs may claim
    {
        // A run of the whole budget on the same device gets it (instead of waiting for ever).
        const budget_reservation whole(dev, budget);
        EXPECT_EQ(dev.bytes_in_use(), budget);
    }
    run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view());
    {
        // So does an allocation of all of it outside runs.
        const device_buffer all = dev.allocate(budget);
        EXPECT_EQ(dev.bytes_in_use(), budget);
    }
    run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view());
    // A Jacobi solve on the context after GEMMs.
    const jacobi_problem p{33, 21, dtype::f32};
    jacobi_options jo;
    jo.iters = 5;
    EXPECT_EQ(ctx.jacobi<float>(p, jo).report.iterations, 5);
    run_checked<float>(ctx, op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c0.view(), c.view());
}

TEST(context_persist, ConcurrentCallersOnKeptOperands) {
    context ctx("cpu:2", budgeted(128 * 1024));
    host_matrix<double> shared_a(73, 57);
    fill_random(shared_a.view(), 71);
    const kept_operand ka = ctx.keep(shared_a.view());
    std::vector<std::thread> threads;
    std::vector<int> failures(3, 0);
    for (int t = 0; t < 3; ++t)
        threads.emplace_back([&, t] {
            host_matrix<double> b(57, 31 + 4 * t), c(73, 31 + 4 * t), c0(73, 31 + 4 * t);
            fill_random(b.view(), 200 + std::uint64_t(t));
            kept_operand kb = ctx.keep(b.view());
            for (int i = 0; i < 3; ++i) {
                if (i == 2) {  // this thread's B changes between its calls
                    fill_random(b.view(), 300 + std::uint64_t(t));
                    kb.changed();
                }
                fill_nan(c.view());
                ctx.gemm<double>(op::n, op::n, 2.0, shared_a.view(), b.view(), 0.0, c.view());
                if (!check_gemm<double>(op::n, op::n, 2.0, shared_a.view(), b.view(), 0.0, c0.view(), c.view()).passed())
                    ++failures[std::size_t(t)];
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 3; ++t) EXPECT_EQ(failures[std::size_t(t)], 0) << "thread " << t;
}

TEST(context_persist, KeptHandleMayOutliveItsContext) {
    host_matrix<float> a(20, 20);
    fill_random(a.view(), 81);
    kept_operand ka;
    {
        context ctx("cpu", budgeted(1 << 20));
        ka = ctx.keep(a.view());
    }
    ka.changed();
    ka.reset();
    EXPECT_FALSE(bool(ka));
}

}  // namespace
}  // namespace tilestream
