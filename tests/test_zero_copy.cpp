// CPU devices without a budget compute on host operands in place (zero-copy): results match the
// reference for every op/layout and padded leading dimensions, nothing is copied or allocated;
// a budget brings the copying path back; the tile cache is sized by the problem and only turned on
// where the cost model predicts a gain.
#include "test_support.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/verify.hpp>

#include <cmath>
#include <cstring>
#include <tuple>

namespace tilestream {
namespace {

std::vector<device*> raw(const std::vector<std::unique_ptr<device>>& devs) {
    std::vector<device*> r;
    for (const auto& d : devs) r.push_back(d.get());
    return r;
}

/// A matrix stored with leading dimension ld > its packed one, the padding filled with NaN so a
/// kernel that strays into it poisons the result.
template <class T>
struct padded {
    std::vector<T> storage;
    host_matrix_view<T> view;
    padded(index_t rows, index_t cols, layout l, index_t pad, std::uint64_t seed)
        : storage(std::size_t((l == layout::row_major ? rows : cols) * ((l == layout::row_major ? cols : rows) + pad)) + 1,
                  std::numeric_limits<T>::quiet_NaN()),
          view(storage.data(), rows, cols, l, (l == layout::row_major ? cols : rows) + pad) {
        host_matrix<T> tmp(rows, cols, l);
        fill_random(tmp.view(), seed);
        for (index_t i = 0; i < rows; ++i)
            for (index_t j = 0; j < cols; ++j) view(i, j) = tmp(i, j);
    }
};

template <class T>
host_matrix<double> upcast(host_matrix_view<const T> v) {
    host_matrix<double> d(v.rows(), v.cols());
    for (index_t i = 0; i < v.rows(); ++i)
        for (index_t j = 0; j < v.cols(); ++j) d(i, j) = double(v(i, j));
    return d;
}

using zc_param = std::tuple<std::string, gemm_kernel, dtype, int /*ops*/, int /*layouts*/>;
class zero_copy_matches_reference : public ::testing::TestWithParam<zc_param> {};

TEST_P(zero_copy_matches_reference, PaddedOperandsInPlace) {
    const auto& [spec, kernel, type, ops, layouts] = GetParam();
    const op oa = (ops & 1) ? op::t : op::n, ob = (ops & 2) ? op::t : op::n;
    const layout la = (layouts & 1) ? layout::col_major : layout::row_major;
    const layout lb = (layouts & 2) ? layout::col_major : layout::row_major;
    const layout lc = layouts == 1 || layouts == 2 ? layout::col_major : layout::row_major;
    const index_t m = 301, n = 267, k = 173;
    // Both engines: one device runs in place on the task engine by default, several on the pipeline.
    for (gemm_engine engine : {gemm_engine::tasks, gemm_engine::pipeline})
    visit_real_dtype(type, "test", [&]<class T>() {
        SCOPED_TRACE(to_string(engine));
        padded<T> a(oa == op::n ? m : k, oa == op::n ? k : m, la, 3, 21);
        padded<T> b(ob == op::n ? k : n, ob == op::n ? n : k, lb, 5, 22);
        padded<T> c(m, n, lc, 7, 23);
        // C's start values, for beta.
        host_matrix<double> c0 = upcast<T>(c.view);
        auto devs = open_devices(spec);
        const auto ptrs = raw(devs);
        ASSERT_TRUE(computes_in_place(ptrs));
        const T alpha = T(0.75), beta = T(-0.5);
        plan_options po;
        po.kernel = kernel;
        po.devices = int(ptrs.size());
        po.in_place = true;
        po.engine = engine;
        const gemm_problem q = describe_gemm<T>(oa, ob, alpha, a.view, b.view, beta, c.view);
        const gemm_plan plan = plan_gemm(q, devs.front()->budget(), device_rates{}, po);
        ASSERT_EQ(plan.strategy, gemm_strategy::zero_copy);
        EXPECT_EQ(plan.engine, engine);
        const auto rep = execute_gemm<T>(plan, ptrs, alpha, a.view, b.view, beta, c.view);
        EXPECT_EQ(rep.bytes_h2d, 0u);
        EXPECT_EQ(rep.bytes_d2h, 0u);
        EXPECT_EQ(rep.peak_device_bytes, 0u);
        for (auto* d : ptrs) EXPECT_EQ(d->bytes_in_use(), 0u);
        // Reference in double from the same inputs.
        host_matrix<double> ad = upcast<T>(a.view), bd = upcast<T>(b.view);
        reference_gemm<double>(oa, ob, double(alpha), ad.view(), bd.view(), double(beta), c0.view());
        EXPECT_LE(relative_frobenius_error<T>(c.view, c0.view()), gemm_tolerance(type, k));
        // Padding untouched (NaN stays NaN, element by element).
        const index_t outer = lc == layout::row_major ? m : n, inner = lc == layout::row_major ? n : m;
        for (index_t o = 0; o < outer; ++o)
            for (index_t p = inner; p < c.view.ld(); ++p)
                ASSERT_TRUE(std::isnan(c.storage[std::size_t(o * c.view.ld() + p)])) << "padding written at " << o << "," << p;
        EXPECT_TRUE(std::isnan(c.storage.back()));
    });
}

INSTANTIATE_TEST_SUITE_P(cpu, zero_copy_matches_reference,
                         ::testing::Combine(::testing::Values(std::string("cpu"), std::string("cpu:3")),
                                            ::testing::Values(gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64), ::testing::Range(0, 4),
                                            ::testing::Values(0, 1, 3)));

TEST(zero_copy, LibraryCallComputesInPlaceWithoutABudget) {
    host_matrix<float> a(129, 77), b(77, 65), c(129, 65);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    fill_nan(c.view());
    auto devs = open_devices("cpu");
    for (auto s : {gemm_strategy::automatic, gemm_strategy::in_core}) {
        gemm_options opt;
        opt.strategy = s;
        const auto rep = gemm<float>(*devs.front(), op::n, op::n, 1.f, a.view(), b.view(), 0.f, c.view(), opt);
        EXPECT_EQ(rep.plan.strategy, gemm_strategy::zero_copy) << to_string(s);
        EXPECT_EQ(rep.plan.units, 1u) << to_string(s);
        EXPECT_EQ(rep.bytes_h2d, 0u);
    }
    host_matrix<double> ref(129, 65);
    reference_gemm<double>(op::n, op::n, 1.0, upcast<float>(a.view()).view(), upcast<float>(b.view()).view(), 0.0, ref.view());
    EXPECT_LE(relative_frobenius_error<float>(c.view(), ref.view()), gemm_tolerance(dtype::f32, 77));
}

TEST(zero_copy, ABudgetBringsBackTheCopyingPath) {
    host_matrix<double> a(90, 70), b(70, 50), c(90, 50);
    fill_random(a.view(), 3);
    fill_random(b.view(), 4);
    open_options oo;
    oo.memory_budget = 256 * 1024;
    auto devs = open_devices("cpu:2", oo);
    const auto ptrs = raw(devs);
    EXPECT_FALSE(computes_in_place(ptrs));
    EXPECT_TRUE(devs.front()->info().budget_given);
    gemm_options opt;
    opt.strategy = gemm_strategy::automatic;
    const auto rep = gemm<double>(*devs.front(), op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), opt);
    EXPECT_NE(rep.plan.strategy, gemm_strategy::zero_copy);
    EXPECT_GT(rep.bytes_h2d, 0u);
    EXPECT_EQ(rep.bytes_h2d, rep.plan.bytes_h2d);
    // Asking for zero-copy where the devices stage data is a clear error.
    plan_options po;
    po.strategy = gemm_strategy::zero_copy;
    const auto q = describe_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view());
    try {
        plan_gemm(q, 1 << 20, device_rates{}, po);
        FAIL() << "zero-copy planned for devices that do not compute in place";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("zero-copy"), std::string::npos) << e.what();
    }
    EXPECT_EQ(parse_gemm_strategy("zero-copy"), gemm_strategy::zero_copy);
}

TEST(zero_copy, SeveralDevicesShareBlocksOfAtLeast256) {
    gemm_problem q;
    q.m = q.n = q.k = 2048;
    plan_options po;
    po.in_place = true;
    po.devices = 2;
    const auto p2 = plan_gemm(q, 1 << 20, device_rates{}, po);
    EXPECT_EQ(p2.strategy, gemm_strategy::zero_copy);
    EXPECT_GE(p2.units, 4u);  // room for balance, not one block per device
    EXPECT_GE(p2.tile_m, 256);
    EXPECT_GE(p2.tile_n, 256);
    EXPECT_EQ(p2.tile_k, 2048);
    po.devices = 1;
    const auto p1 = plan_gemm(q, 1 << 20, device_rates{}, po);
    EXPECT_EQ(p1.units, 1u);
}

/// Rates of a CPU device as measure_rates reports them (host_memory: copies and packing on its cores).
device_rates cpu_rates() {
    device_rates r;
    r.h2d = r.d2h = 8e9;
    r.flops = 90e9;
    r.host_memory = true;
    return r;
}

/// 2048^3 f32, and options for devices that compute in place.
gemm_problem square_2048() {
    gemm_problem q;
    q.type = dtype::f32;
    q.m = q.n = q.k = 2048;
    return q;
}
plan_options in_place_on(int devices) {
    plan_options po;
    po.in_place = true;
    po.devices = devices;
    return po;
}

TEST(zero_copy, PackingMakesUnitsLargerOnCpuDevices) {
    // Each call packs its rows of A and columns of B: 256 x 256 units of 2048^3 pack 8x one call's
    // elements, so the planner takes fewer, larger units while keeping rounds for balance.
    const gemm_problem q = square_2048();
    plan_options po = in_place_on(2);
    const auto chosen = plan_gemm(q, 1 << 20, cpu_rates(), po);
    EXPECT_GE(chosen.units, 2u);
    EXPECT_LE(chosen.units, 16u);
    EXPECT_GE(chosen.tile_m * chosen.tile_n, 512 * 512);
    po.tile_m = po.tile_n = 256;
    const auto small = plan_gemm(q, 1 << 20, cpu_rates(), po);
    EXPECT_EQ(small.units, 64u);
    EXPECT_GT(small.predicted_seconds, chosen.predicted_seconds * 1.05);
}

TEST(zero_copy, UnitsSplitEvenlyOverEqualDevices) {
    // The busiest device decides: 768-row blocks of 2048 rows give three devices 768, 768 and 512
    // rows (the busiest does 0.375 of the work, not 1/3); the planner finds near-even blocks.
    const gemm_problem q = square_2048();
    plan_options po = in_place_on(1);
    for (int devices : {2, 3, 4, 5}) {
        po.devices = devices;
        const auto p = plan_gemm(q, 1 << 20, cpu_rates(), po);
        EXPECT_EQ(p.units % std::size_t(devices), 0u) << devices << " devices: " << p.tile_m << " x " << p.tile_n;
        const double even = double(q.m) * double(q.n) / double(p.units);
        EXPECT_LE(double(p.tile_m) * double(p.tile_n), 1.05 * even) << devices << " devices: " << p.tile_m << " x " << p.tile_n;
    }
    po.devices = 3;
    po.tile_m = 768;
    po.tile_n = 2048;
    const auto ragged = plan_gemm(q, 1 << 20, cpu_rates(), po);
    ASSERT_EQ(ragged.units, 3u);
    po.devices = 1;
    const auto one = plan_gemm(q, 1 << 20, cpu_rates(), po);  // the same blocks on one device
    // (Within 1%: the task engine's model adds each kernel call's fixed cost, once on the busiest
    // device and three times on one.)
    EXPECT_NEAR(ragged.predicted_compute_seconds / one.predicted_compute_seconds, 0.375, 0.004);
    EXPECT_LT(ragged.predicted_compute_seconds / one.predicted_compute_seconds, 0.375 + 1e-9);
}

TEST(cost_model, CpuCopiesAddToComputeAndKTilesCoverAKc) {
    gemm_problem q;
    q.type = dtype::f32;
    q.m = q.n = q.k = 4096;
    const std::size_t budget = std::size_t(48) << 20;  // 25% of the operands
    plan_options po;
    const auto cpu = plan_gemm(q, budget, cpu_rates(), po);
    ASSERT_NE(cpu.strategy, gemm_strategy::in_core);
    EXPECT_LE(cpu.peak_device_bytes, budget);
    // Copies run on the cores the kernels use: the time is their sum, not the slowest stream.
    EXPECT_NEAR(cpu.predicted_seconds,
                cpu.predicted_h2d_seconds + cpu.predicted_compute_seconds + cpu.predicted_d2h_seconds,
                1e-12 * cpu.predicted_seconds);
    EXPECT_TRUE(cpu.tile_k >= reproducible_k_block(q.type) || cpu.tile_k == q.k) << cpu.tile_k;
    // Fewer bytes than the 1024^3 blocks the overlap model settles for.
    EXPECT_LT(cpu.bytes_h2d, std::size_t(512) << 20);
    device_rates gpu = cpu_rates();
    gpu.host_memory = false;
    const auto overlapped = plan_gemm(q, budget, gpu, po);
    EXPECT_LT(overlapped.predicted_seconds, overlapped.predicted_h2d_seconds + overlapped.predicted_compute_seconds +
                                                overlapped.predicted_d2h_seconds);
}

TEST(cost_model, TinyBudgetsStillPlanWithShortKTilesOnCpuDevices) {
    gemm_problem q;
    q.type = dtype::f64;
    q.m = 200;
    q.n = 150;
    q.k = 170;
    const auto p = plan_gemm(q, 64 * 1024, cpu_rates(), plan_options{});
    EXPECT_LE(p.peak_device_bytes, 64u * 1024);
    EXPECT_LT(p.tile_k, 170);
}

TEST(zero_copy, EachDeviceTakesOneUnitAtATime) {
    // Two units on two devices: with nothing to overlap in place, a device queues no second unit,
    // so each computes one (a device that claimed both would leave the other idle).
    host_matrix<double> a(1024, 768), b(768, 640), c(1024, 640);
    fill_random(a.view(), 5);
    fill_random(b.view(), 6);
    open_options oo;
    oo.cpu_threads = 1;
    auto devs = open_devices("cpu:2", oo);
    std::vector<device*> ptrs{devs[0].get(), devs[1].get()};
    plan_options po;
    po.in_place = true;
    po.devices = 2;
    po.strategy = gemm_strategy::zero_copy;
    po.tile_m = 512;
    po.tile_n = 640;
    const gemm_problem q = describe_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view());
    const gemm_plan plan = plan_gemm(q, std::size_t(1) << 30, cpu_rates(), po);
    ASSERT_EQ(plan.units, 2u);
    fill_nan(c.view());
    const gemm_report rep = execute_gemm<double>(plan, ptrs, 1.0, a.view(), b.view(), 0.0, c.view());
    ASSERT_EQ(rep.devices.size(), 2u);
    EXPECT_EQ(rep.devices[0].units, 1u);
    EXPECT_EQ(rep.devices[1].units, 1u);
    // Against one vendor call on one device (the reference kernel would take a second here).
    host_matrix<double> one(1024, 640);
    gemm<double>(*devs[0], op::n, op::n, 1.0, a.view(), b.view(), 0.0, one.view());
    EXPECT_LE(relative_frobenius_error<double>(c.view(), one.view()), gemm_tolerance(dtype::f64, 768));
}

TEST(tile_cache, SpareSlotsNeverExceedTheDistinctTiles) {
    gemm_problem q;
    q.type = dtype::f32;
    q.m = q.n = q.k = 512;
    plan_options po;
    po.strategy = gemm_strategy::c_block;
    po.tile_m = po.tile_n = po.tile_k = 128;
    po.cache = cache_mode::on;
    const auto p = plan_gemm(q, std::size_t(1) << 34, device_rates{}, po);  // a huge budget
    ASSERT_TRUE(p.cache);
    EXPECT_LE(p.a_slots, 4 * 4);  // 4 x 4 A tiles in all
    EXPECT_LE(p.b_slots, 4 * 4);
    EXPECT_LE(p.peak_device_bytes, std::size_t(2 * 16 + 2) * 128 * 128 * 4);
}

TEST(tile_cache, AutomaticOnlyWhereTheCostModelPredictsAGain) {
    gemm_problem q;
    q.type = dtype::f32;
    q.m = q.n = q.k = 1024;
    plan_options po;
    po.strategy = gemm_strategy::c_block;
    po.tile_m = po.tile_n = po.tile_k = 256;
    po.cache = cache_mode::automatic;
    po.devices = 2;
    po.engine = gemm_engine::pipeline;  // its cache's choice (the task store's spare slots cache anyway)
    // Compute-bound (fast copies, slow kernel) on a device computing with the host's cores: skipped
    // copies gain nothing.
    device_rates on_host = parse_rates("h2d=50GB/s,d2h=50GB/s,gflops=10");
    on_host.host_memory = true;
    const auto compute_bound = plan_gemm(q, 64 << 20, on_host, po);
    EXPECT_FALSE(compute_bound.cache);
    // The same on a device with memory of its own, where the cache saves three quarters of the
    // bytes: kept (its copies are the model's least certain part; on an H200 a GEMM plan re-reading
    // its tiles took 0.317 s, one keeping them 0.197 s).
    const auto own_memory = plan_gemm(q, 64 << 20, parse_rates("h2d=50GB/s,d2h=50GB/s,gflops=10"), po);
    EXPECT_TRUE(own_memory.cache);
    // ... but not where it saves nothing: one tile of C reads each A and B tile once.
    gemm_problem flat = q;
    flat.m = flat.n = 256;
    const auto little = plan_gemm(flat, 64 << 20, parse_rates("h2d=50GB/s,d2h=50GB/s,gflops=10"), po);
    EXPECT_FALSE(little.cache);
    // Copy-bound (slow link): the cache is predicted to help and is used.
    const auto copy_bound = plan_gemm(q, 64 << 20, parse_rates("h2d=0.1GB/s,d2h=50GB/s,gflops=1000"), po);
    EXPECT_TRUE(copy_bound.cache);
    po.cache = cache_mode::off;
    const auto uncached = plan_gemm(q, 64 << 20, parse_rates("h2d=0.1GB/s,d2h=50GB/s,gflops=1000"), po);
    EXPECT_LT(copy_bound.predicted_seconds, 0.97 * uncached.predicted_seconds);
    EXPECT_EQ(parse_cache_mode("auto"), cache_mode::automatic);
    EXPECT_THROW(parse_cache_mode("sometimes"), invalid_argument);
    EXPECT_EQ(parse_peer_tile_mode("auto"), peer_tile_mode::automatic);
    EXPECT_EQ(parse_peer_tile_mode("on"), peer_tile_mode::on);
    EXPECT_EQ(parse_peer_tile_mode("off"), peer_tile_mode::off);
    EXPECT_THROW(parse_peer_tile_mode("sometimes"), invalid_argument);
}

TEST(cli, DefaultCpuGemmIsZeroCopyAndBudgetedIsNot) {
    // In place: zero-copy, or direct on the calling thread where the measured rates say so.
    auto r = testing::run_cli("gemm --m 300 --n 200 --k 100 --devices cpu:2 --json --check");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_TRUE(r.out.find("\"strategy\": \"zero-copy\"") != std::string::npos ||
                r.out.find("\"strategy\": \"direct\"") != std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"bytes_h2d\": 0"), std::string::npos) << r.out;
    r = testing::run_cli("gemm --m 300 --n 200 --k 100 --devices cpu:2 --memory-budget 64KiB --json --check");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.find("\"strategy\": \"zero-copy\""), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"strategy\": \"direct\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tilestream
