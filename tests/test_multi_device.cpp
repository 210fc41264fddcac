// One GEMM over several CPU devices: every strategy matches the reference, C is bitwise identical
// whatever the device count, a slowed device gets fewer units, and the tile cache counts hits and
// misses exactly as computed by hand.
#include "test_support.hpp"
#include "core/context_routes.hpp"
#include "core/fault_injection.hpp"

#include <tilestream/gemm.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/verify.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>

namespace tilestream {
namespace {

struct operands {
    host_matrix<double> ad, bd;
};

std::vector<device*> raw(const std::vector<std::unique_ptr<device>>& devs) {
    std::vector<device*> r;
    for (const auto& d : devs) r.push_back(d.get());
    return r;
}

template <class T>
gemm_report run_on(const std::string& spec, std::size_t budget, const plan_options& po, op oa, op ob,
                   host_matrix_view<const T> a, host_matrix_view<const T> b, T alpha, T beta, host_matrix_view<T> c,
                   const gemm_run_options& run = {}) {
    open_options oo;
    oo.memory_budget = budget;
    oo.cpu_threads = 1;
    auto devs = open_devices(spec, oo);
    const gemm_problem problem = describe_gemm<T>(oa, ob, alpha, a, b, beta, c);
    plan_options p = po;
    p.devices = int(devs.size());
    const gemm_plan plan = plan_gemm(problem, budget, device_rates{}, p);
    const auto ptrs = raw(devs);
    return execute_gemm<T>(plan, ptrs, alpha, a, b, beta, c, run);
}

using multi_param = std::tuple<gemm_strategy, dtype, int /*ops*/, int /*layouts*/>;
class multi_device_matches_reference : public ::testing::TestWithParam<multi_param> {};

/// Three devices (`spec`) with 64 KiB budgets each, cache off and on.
void check_three_devices(const std::string& spec, const multi_param& param) {
    const auto& [strategy, type, ops, layouts] = param;
    const op oa = (ops & 1) ? op::t : op::n, ob = (ops & 2) ? op::t : op::n;
    const layout la = (layouts & 1) ? layout::col_major : layout::row_major;
    const layout lb = (layouts & 2) ? layout::col_major : layout::row_major;
    const layout lc = layouts == 1 || layouts == 2 ? layout::col_major : layout::row_major;
    const index_t m = 71, n = 53, k = 47;
    visit_real_dtype(type, "test", [&]<class T>() {
        host_matrix<T> a(oa == op::n ? m : k, oa == op::n ? k : m, la), b(ob == op::n ? k : n, ob == op::n ? n : k, lb);
        host_matrix<T> c(m, n, lc), c0(m, n, lc);
        fill_random(a.view(), 11);
        fill_random(b.view(), 12);
        fill_random(c0.view(), 13);
        std::copy(c0.data(), c0.data() + m * n, c.data());
        plan_options po;
        po.strategy = strategy;
        po.kernel = gemm_kernel::tiled;
        po.tile_m = 16;
        po.tile_n = strategy == gemm_strategy::tiles_3d ? 16 : 12;
        const bool panel = strategy == gemm_strategy::a_panel || strategy == gemm_strategy::b_panel ||
                           strategy == gemm_strategy::row_panels;
        po.tile_k = panel ? 0 : 16;
        for (gemm_engine engine : {gemm_engine::tasks, gemm_engine::pipeline})
        for (bool cache : {false, true}) {
            SCOPED_TRACE(to_string(engine));
            po.engine = engine;
            po.cache = cache ? cache_mode::on : cache_mode::off;
            std::copy(c0.data(), c0.data() + m * n, c.data());
            const auto rep = run_on<T>(spec, 64 * 1024, po, oa, ob, a.view(), b.view(), T(0.5), T(-1.25), c.view());
            host_matrix<double> ad(a.rows(), a.cols()), bd(b.rows(), b.cols()), ref(m, n);
            for (index_t i = 0; i < a.rows(); ++i)
                for (index_t j = 0; j < a.cols(); ++j) ad(i, j) = a(i, j);
            for (index_t i = 0; i < b.rows(); ++i)
                for (index_t j = 0; j < b.cols(); ++j) bd(i, j) = b(i, j);
            for (index_t i = 0; i < m; ++i)
                for (index_t j = 0; j < n; ++j) ref(i, j) = c0(i, j);
            reference_gemm<double>(oa, ob, 0.5, ad.view(), bd.view(), -1.25, ref.view());
            EXPECT_LE(relative_frobenius_error<T>(c.view(), ref.view()), gemm_tolerance(type, k)) << "cache " << cache;
            EXPECT_LE(rep.peak_device_bytes, 64u * 1024);
            ASSERT_EQ(rep.devices.size(), 3u);
            std::size_t units = 0;
            for (const auto& d : rep.devices) units += d.units;
            EXPECT_EQ(units, rep.plan.units);
            ASSERT_EQ(rep.plan.engine, engine);
            if (engine == gemm_engine::tasks) {
                // Devices take C's tiles from one queue, so which of them reads a tile again
                // depends on timing: every element is read once at least, and each task's tiles
                // once at most (C's tile and, per k-step, its tiles of A and B).
                const std::size_t es = sizeof(T), bytes_a = std::size_t(m * k) * es, bytes_b = std::size_t(k * n) * es,
                                  bytes_c = std::size_t(m * n) * es;
                const std::size_t rows = std::size_t((m + rep.plan.tile_m - 1) / rep.plan.tile_m);
                ASSERT_EQ(rep.plan.units % rows, 0u);
                const std::size_t cols = rep.plan.units / rows;
                for (std::size_t bytes : {rep.bytes_h2d, rep.plan.bytes_h2d}) {
                    EXPECT_GE(bytes, bytes_a + bytes_b + bytes_c);
                    EXPECT_LE(bytes, cols * bytes_a + rows * bytes_b + bytes_c);
                }
                std::size_t per_device = 0;
                for (const auto& d : rep.devices) per_device += d.bytes_h2d;
                EXPECT_EQ(per_device, rep.bytes_h2d);
                EXPECT_EQ(rep.bytes_d2h, bytes_c);
                continue;
            }
            // A panel reused by one device is loaded again by each device that gets units of it.
            const bool shared_panel = strategy == gemm_strategy::a_panel || strategy == gemm_strategy::b_panel;
            if (cache) EXPECT_LE(rep.bytes_h2d, rep.plan.bytes_h2d + (shared_panel ? rep.bytes_h2d : 0));
            else if (shared_panel) EXPECT_GE(rep.bytes_h2d, rep.plan.bytes_h2d);
            else EXPECT_EQ(rep.bytes_h2d, rep.plan.bytes_h2d);
        }
    });
}

std::string multi_name(const ::testing::TestParamInfo<multi_param>& info) {
    std::string name(to_string(std::get<0>(info.param)));
    for (auto& ch : name)
        if (ch == '-') ch = '_';
    return name + "_" + std::string(to_string(std::get<1>(info.param))) + "_ops" +
           std::to_string(std::get<2>(info.param)) + "_layouts" + std::to_string(std::get<3>(info.param));
}

TEST_P(multi_device_matches_reference, ThreeDevicesSmallBudgets) { check_three_devices("cpu:3", GetParam()); }

/// Three logical OpenCL devices sharing one, and two of them beside a CPU device.
class multi_device_opencl_matches_reference : public ::testing::TestWithParam<std::tuple<std::string, multi_param>> {};
TEST_P(multi_device_opencl_matches_reference, ThreeDevicesSmallBudgets) {
    const auto& [spec, param] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU(spec);
    check_three_devices(spec, param);
}
INSTANTIATE_TEST_SUITE_P(
    opencl, multi_device_opencl_matches_reference,
    ::testing::Combine(::testing::Values(std::string("opencl:0x3"), std::string("cpu,opencl:0x2")),
                       ::testing::Combine(::testing::Values(gemm_strategy::tiles_3d, gemm_strategy::a_panel,
                                                            gemm_strategy::b_panel, gemm_strategy::c_block,
                                                            gemm_strategy::row_panels),
                                          ::testing::Values(dtype::f32, dtype::f64), ::testing::Values(0, 3),
                                          ::testing::Values(0, 3))),
    [](const auto& info) {
        std::string spec = std::get<0>(info.param);
        for (auto& ch : spec)
            if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
        return spec + "_" + multi_name(::testing::TestParamInfo<multi_param>(std::get<1>(info.param), info.index));
    });

INSTANTIATE_TEST_SUITE_P(cpu, multi_device_matches_reference,
                         ::testing::Combine(::testing::Values(gemm_strategy::tiles_3d, gemm_strategy::a_panel,
                                                              gemm_strategy::b_panel, gemm_strategy::c_block,
                                                              gemm_strategy::row_panels),
                                            ::testing::Values(dtype::f32, dtype::f64), ::testing::Range(0, 4),
                                            ::testing::Values(0, 3)),
                         multi_name);

/// The k-order of each C block is fixed, so any number of devices gives the same bits.
class multi_device_bitwise : public ::testing::TestWithParam<std::tuple<gemm_strategy, gemm_kernel>> {};

/// C from 1..max_count devices named by spec(count) is bitwise the same.
void check_same_bits(const std::function<std::string(int)>& spec, int max_count, gemm_strategy strategy,
                     gemm_kernel kernel) {
    const index_t m = 97, n = 83, k = 131;
    host_matrix<float> a(m, k), b(k, n), c(m, n), first(m, n);
    fill_random(a.view(), 21);
    fill_random(b.view(), 22);
    plan_options po;
    po.strategy = strategy;
    po.kernel = kernel;
    po.tile_m = 16;
    po.tile_n = 24;
    po.tile_k = strategy == gemm_strategy::row_panels ? 0 : 32;
    if (strategy == gemm_strategy::tiles_3d) po.tile_n = po.tile_k = 16;
    for (int count = 1; count <= max_count; ++count) {
        fill_nan(c.view());
        run_on<float>(spec(count), 1 << 20, po, op::n, op::n, a.view(), b.view(), 1.f, 0.f, c.view());
        if (count == 1)
            std::memcpy(first.data(), c.data(), sizeof(float) * m * n);
        else
            EXPECT_EQ(std::memcmp(first.data(), c.data(), sizeof(float) * m * n), 0) << count << " devices";
    }
}

TEST_P(multi_device_bitwise, SameBitsForOneToFiveDevices) {
    const auto& [strategy, kernel] = GetParam();
    check_same_bits([](int count) { return "cpu:" + std::to_string(count); }, 5, strategy, kernel);
}

class multi_device_opencl_bitwise : public multi_device_bitwise {};
TEST_P(multi_device_opencl_bitwise, SameBitsForOneToThreeSlices) {
    const auto& [strategy, kernel] = GetParam();
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    check_same_bits([](int count) { return "opencl:0x" + std::to_string(count); }, 3, strategy, kernel);
}
INSTANTIATE_TEST_SUITE_P(opencl, multi_device_opencl_bitwise,
                         ::testing::Combine(::testing::Values(gemm_strategy::c_block, gemm_strategy::tiles_3d,
                                                              gemm_strategy::row_panels),
                                            ::testing::Values(gemm_kernel::tiled, gemm_kernel::naive)));

INSTANTIATE_TEST_SUITE_P(cpu, multi_device_bitwise,
                         ::testing::Combine(::testing::Values(gemm_strategy::c_block, gemm_strategy::tiles_3d,
                                                              gemm_strategy::row_panels),
                                            ::testing::Values(gemm_kernel::tiled, gemm_kernel::vendor,
                                                              gemm_kernel::naive)));

TEST(multi_device, SlowedDeviceGetsFewerUnitsAndTheResultIsRight) {
    const index_t m = 192, n = 192, k = 64;
    host_matrix<double> a(m, k), b(k, n), c(m, n);
    fill_random(a.view(), 31);
    fill_random(b.view(), 32);
    fill_nan(c.view());
    plan_options po;
    po.strategy = gemm_strategy::c_block;
    po.kernel = gemm_kernel::tiled;
    po.tile_m = po.tile_n = 32;
    po.tile_k = 64;  // 36 units of one kernel call each
    gemm_run_options run;
    // Every unit takes a while (so no device can drain the queue before the others start), and
    // cpu:2 far longer than scheduling noise on a loaded machine.
    const fault_injection::slowdown slow({{"cpu:0", 0.005}, {"cpu:1", 0.005}, {"cpu:2", 0.2}});
    const auto rep = run_on<double>("cpu:3", 1 << 20, po, op::n, op::n, a.view(), b.view(), 1.0, 0.0, c.view(), run);
    ASSERT_EQ(rep.devices.size(), 3u);
    SCOPED_TRACE(::testing::Message() << "units " << rep.devices[0].units << " " << rep.devices[1].units << " " << rep.devices[2].units);
    EXPECT_LT(rep.devices[2].units, rep.devices[0].units);
    EXPECT_LT(rep.devices[2].units, rep.devices[1].units);
    EXPECT_EQ(rep.devices[0].units + rep.devices[1].units + rep.devices[2].units, 36u);
    host_matrix<double> ref(m, n);
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) ref(i, j) = 0;
    reference_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, ref.view());
    EXPECT_LE(relative_frobenius_error<double>(c.view(), ref.view()), gemm_tolerance(dtype::f64, k));
}

/// Two one-thread CPU devices on an m x n x 64 f32 product in 32 x 32 units (c-block, tiled), the
/// plan's device rates set to `device_flops`; checks that cpu:1 took no unit and C is right.
void check_second_device_takes_nothing(index_t m, index_t n, std::vector<double> device_flops) {
    const index_t k = 64;
    host_matrix<float> a(m, k), b(k, n), c(m, n);
    fill_random(a.view(), 41);
    fill_random(b.view(), 42);
    fill_nan(c.view());
    open_options oo;
    oo.memory_budget = 1 << 22;
    oo.cpu_threads = 1;
    auto devs = open_devices("cpu:2", oo);
    const gemm_problem problem = describe_gemm<float>(op::n, op::n, 1.f, a.view(), b.view(), 0.f, c.view());
    plan_options po;
    po.strategy = gemm_strategy::c_block;
    po.kernel = gemm_kernel::tiled;
    po.tile_m = po.tile_n = 32;
    po.tile_k = k;
    po.devices = 2;
    gemm_plan plan = plan_gemm(problem, 1 << 22, device_rates{}, po);
    const std::size_t units = std::size_t((m + 31) / 32 * ((n + 31) / 32));
    ASSERT_EQ(plan.units, units);
    plan.device_flops = std::move(device_flops);
    const auto rep = execute_gemm<float>(plan, raw(devs), 1.f, a.view(), b.view(), 0.f, c.view());
    ASSERT_EQ(rep.devices.size(), 2u);
    EXPECT_EQ(rep.devices[1].units, 0u);
    EXPECT_EQ(rep.devices[0].units, units);
    host_matrix<double> ad(m, k), bd(k, n), ref(m, n);
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < k; ++j) ad(i, j) = a(i, j);
    for (index_t i = 0; i < k; ++i)
        for (index_t j = 0; j < n; ++j) bd(i, j) = b(i, j);
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) ref(i, j) = 0;
    reference_gemm<double>(op::n, op::n, 1.0, ad.view(), bd.view(), 0.0, ref.view());
    EXPECT_LE(relative_frobenius_error<float>(c.view(), ref.view()), gemm_tolerance(dtype::f32, k));
}

/// A GPU beside the CPU: the CPU's rate is 50x below the GPU's, so one unit on the CPU outlasts all
/// of them on the GPU (the first H100 run, f64 16384 on cuda:0,cpu: the CPU took 2 of 4 units
/// before any had finished, and the call took 9.8 s against 0.23 s on the GPU alone). Before any
/// unit finishes, each device's time for one is estimated from its measured rate.
TEST(multi_device, ADeviceMeasuredFarSlowerTakesNoUnitWhenTheOthersWouldFinishFirst) {
    check_second_device_takes_nothing(96, 160, {1e12, 1e3});  // cpu:1 at 1 kFLOP/s: 131 s a unit
}

/// A device 20x slower than another that takes work does under 5% of it and would end last: it
/// takes none, even where its one unit would end before the others finished the rest. cpu:0 is
/// measured once its first unit is done (5-50 microseconds); cpu:1 stays at its estimate, 2 ms a
/// unit: far shorter than the ~4000 units left to cpu:0, over 20x its unit.
TEST(multi_device, ADeviceTwentyTimesSlowerThanAnotherTakesNoUnit) {
    check_second_device_takes_nothing(2048, 2048, {1e15, 2.0 * 32 * 32 * 64 / 0.002});
}

// The model's rate for devices measured one by one: the mean of those that take work, at the
// scale of the first device's probe; a device 20x slower than the fastest counts for nothing.
TEST(multi_device, TheModelCountsOnlyTheDevicesThatTakeWork) {
    detail::device_balance b = detail::balance_of({50e12, 1e12});  // a GPU, then the CPU
    EXPECT_EQ(b.flops, (std::vector<double>{50e12, 1e12}));
    EXPECT_DOUBLE_EQ(b.model_scale, 0.5);  // the GPU's rate over two devices
    EXPECT_DOUBLE_EQ(detail::balance_of({1e12, 50e12}).model_scale, 25.0);  // the CPU probed first
    EXPECT_DOUBLE_EQ(detail::balance_of({1e12, 3e12}).model_scale, 2.0);     // both work
    for (const std::vector<double>& none : {std::vector<double>{1e12, 0.0}, std::vector<double>{1e12}}) {
        EXPECT_TRUE(detail::balance_of(none).flops.empty());
        EXPECT_DOUBLE_EQ(detail::balance_of(none).model_scale, 1.0);
    }
}

TEST(multi_device, RowPanelsAreDealtRoundRobin) {
    const index_t m = 50, n = 20, k = 10;  // 7 row panels of 8 rows
    host_matrix<float> a(m, k), b(k, n), c(m, n);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    plan_options po;
    po.strategy = gemm_strategy::row_panels;
    po.kernel = gemm_kernel::naive;
    po.tile_m = 8;
    po.tile_n = 7;
    const auto rep = run_on<float>("cpu:3", 1 << 20, po, op::n, op::n, a.view(), b.view(), 1.f, 0.f, c.view());
    ASSERT_EQ(rep.devices.size(), 3u);
    EXPECT_EQ(rep.devices[0].units, 3u);  // panels 0, 3, 6
    EXPECT_EQ(rep.devices[1].units, 2u);  // 1, 4
    EXPECT_EQ(rep.devices[2].units, 2u);  // 2, 5
}

/// 32^3 in 16^3 tiles: units in serpentine order (0,0) (0,1) (1,1) (1,0), two k-steps each.
/// A requests: A00 A01 | A00 A01 | A10 A11 | A10 A11 -> with >= 2 slots: 4 misses, 4 hits.
/// B requests: B00 B10 | B01 B11 | B01 B11 | B00 B10 -> with 3 slots (LRU): 6 misses, 2 hits;
/// with room for all: 4 misses, 4 hits. (GEMM's pipeline: its units' order and slots; the task
/// engine's cache is pinned by GemmOnTasks.TheCacheAskedForFillsTheBudgetWithSlots.)
TEST(tile_cache, CountersMatchAHandComputedCase) {
    host_matrix<float> a(32, 32), b(32, 32), c(32, 32);
    fill_random(a.view(), 41);
    fill_random(b.view(), 42);
    plan_options po;
    po.strategy = gemm_strategy::tiles_3d;
    po.kernel = gemm_kernel::tiled;
    po.tile_m = po.tile_n = po.tile_k = 16;
    po.cache = cache_mode::on;
    po.engine = gemm_engine::pipeline;
    const std::size_t tile = 16 * 16 * sizeof(float);
    // 2 A + 2 B + 2 C base slots, plus room for exactly one spare A and B slot.
    auto rep = run_on<float>("cpu", 8 * tile, po, op::n, op::n, a.view(), b.view(), 1.f, 0.f, c.view());
    EXPECT_EQ(rep.plan.a_slots, 3);
    EXPECT_EQ(rep.cache_misses, 10u);
    EXPECT_EQ(rep.cache_hits, 6u);
    EXPECT_EQ(rep.bytes_saved, 6 * tile);
    EXPECT_EQ(rep.bytes_h2d, 10 * tile);
    rep = run_on<float>("cpu", 1 << 20, po, op::n, op::n, a.view(), b.view(), 1.f, 0.f, c.view());
    EXPECT_EQ(rep.cache_misses, 8u);
    EXPECT_EQ(rep.cache_hits, 8u);
    EXPECT_EQ(rep.bytes_saved, 8 * tile);
}

}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {

/// Row panels on three devices all need every B panel: with peer tiles on, devices copy B panels
/// out of each other's caches instead of from the host, and C is unchanged to the bit.
/// `automatic_uses_peers`: devices that do not share host memory copy tiles from each other.
void check_tiles_from_peer_caches(const std::string& spec, bool automatic_uses_peers) {
    for (gemm_engine engine : {gemm_engine::tasks, gemm_engine::pipeline}) {
    SCOPED_TRACE(to_string(engine));
    const index_t m = 96, n = 120, k = 40;
    host_matrix<float> a(m, k), b(k, n), c(m, n), plain(m, n);
    fill_random(a.view(), 51);
    fill_random(b.view(), 52);
    plan_options po;
    po.strategy = gemm_strategy::row_panels;
    po.kernel = gemm_kernel::tiled;
    po.tile_m = 8;
    po.tile_n = 12;
    po.cache = cache_mode::on;
    po.engine = engine;
    gemm_run_options off;
    off.peer_tiles = peer_tile_mode::off;
    const auto rep_off = run_on<float>(spec, 1 << 20, po, op::n, op::n, a.view(), b.view(), 1.f, 0.f, plain.view(), off);
    EXPECT_EQ(rep_off.peer_hits, 0u);
    gemm_run_options on;
    on.peer_tiles = peer_tile_mode::on;
    fill_nan(c.view());
    const auto rep = run_on<float>(spec, 1 << 20, po, op::n, op::n, a.view(), b.view(), 1.f, 0.f, c.view(), on);
    EXPECT_GT(rep.peer_hits, 0u);
    EXPECT_EQ(rep.bytes_from_peers, rep.peer_hits * std::size_t(k * 12) * sizeof(float));
    // Every tile a peer supplied is a tile the host did not.
    EXPECT_EQ(rep.bytes_h2d + rep.bytes_from_peers, rep_off.bytes_h2d);
    EXPECT_EQ(std::memcmp(c.data(), plain.data(), sizeof(float) * m * n), 0);
    // automatic: CPU devices share one memory, so no peer copies; OpenCL slices do copy.
    gemm_run_options automatic;
    fill_nan(c.view());
    const auto rep_auto = run_on<float>(spec, 1 << 20, po, op::n, op::n, a.view(), b.view(), 1.f, 0.f, c.view(), automatic);
    if (automatic_uses_peers) EXPECT_GT(rep_auto.peer_hits, 0u);
    else EXPECT_EQ(rep_auto.peer_hits, 0u);
    EXPECT_EQ(std::memcmp(c.data(), plain.data(), sizeof(float) * m * n), 0);
    ASSERT_EQ(rep.plan.engine, engine);
    }
}

TEST(tile_cache, TilesComeFromPeerCaches) { check_tiles_from_peer_caches("cpu:3", false); }

TEST(tile_cache, TilesComeFromPeerCachesOnOpenCLSlices) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    check_tiles_from_peer_caches("opencl:0x3", true);
}

}  // namespace
}  // namespace tilestream
