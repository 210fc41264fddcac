// Concurrent GEMM calls sharing devices: every result matches the reference, each report gives
// its own call's figures (peak = its plan's peak, never another call's), calls that fit alone
// never fail for lack of memory (they take turns), and a call that could never fit fails at once.
#include "test_support.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/verify.hpp>

#include <atomic>
#include <string>
#include <thread>

namespace tilestream {
namespace {

template <class T>
struct problem_data {
    op oa = op::n, ob = op::n;
    host_matrix<T> a, b, c0;
};

template <class T>
problem_data<T> make_problem(index_t m, index_t n, index_t k, int variant, std::uint64_t seed) {
    problem_data<T> p;
    p.oa = (variant & 1) ? op::t : op::n;
    p.ob = (variant & 2) ? op::t : op::n;
    const layout la = (variant & 4) ? layout::col_major : layout::row_major;
    const layout lc = (variant & 8) ? layout::col_major : layout::row_major;
    p.a = host_matrix<T>(p.oa == op::n ? m : k, p.oa == op::n ? k : m, la);
    p.b = host_matrix<T>(p.ob == op::n ? k : n, p.ob == op::n ? n : k, la);
    p.c0 = host_matrix<T>(m, n, lc);
    fill_random(p.a.view(), seed);
    fill_random(p.b.view(), seed + 1);
    fill_random(p.c0.view(), seed + 2);
    return p;
}

/// Threads x calls of the library gemm on one device whose budget holds about two calls at once.
template <class T>
void concurrent_calls_match_reference(gemm_kernel kernel) {
    const index_t m = 37, n = 29, k = 23;
    const std::size_t one_call = std::size_t(m * k + k * n + m * n) * sizeof(T);
    open_options oo;
    oo.memory_budget = 2 * one_call + one_call / 2;
    oo.cpu_threads = 1;
    auto devs = open_devices("cpu", oo);
    device& dev = *devs.front();
    constexpr int threads = 4, calls = 200;
    std::vector<problem_data<T>> problems;
    for (int v = 0; v < 16; ++v) problems.push_back(make_problem<T>(m, n, k, v, 100 + 3 * v));
    std::atomic<int> wrong{0}, bad_peak{0}, failures{0}, checked{0};
    std::vector<std::string> first_error(threads);
    const auto caller = [&](int t) {
        for (int i = 0; i < calls; ++i) {
            const problem_data<T>& p = problems[std::size_t(t * calls + i) % problems.size()];
            host_matrix<T> c(m, n, p.c0.layout());
            std::copy(p.c0.data(), p.c0.data() + m * n, c.data());
            gemm_options opt;
            opt.kernel = kernel;
            opt.strategy = gemm_strategy::in_core;  // the peak below is in-core's
            try {
                const gemm_report rep = gemm<T>(dev, p.oa, p.ob, T(0.75), p.a.view(), p.b.view(), T(-0.5), c.view(), opt);
                // This call's own peak: in-core holds A, B and C, whatever the other calls hold.
                if (rep.peak_device_bytes != rep.plan.peak_device_bytes || rep.peak_device_bytes != one_call) ++bad_peak;
            } catch (const std::exception& e) {
                if (first_error[std::size_t(t)].empty()) first_error[std::size_t(t)] = e.what();
                ++failures;
                continue;
            }
            const double err = gemm_relative_error<T>(p.oa, p.ob, T(0.75), p.a.view(), p.b.view(), T(-0.5),
                                                      p.c0.view(), c.view());
            if (!(err <= gemm_tolerance(dtype_of<T>(), k))) ++wrong;
            ++checked;
        }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(caller, t);
    for (auto& th : pool) th.join();
    for (const auto& e : first_error) EXPECT_TRUE(e.empty()) << e;
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(bad_peak.load(), 0);
    EXPECT_EQ(checked.load(), threads * calls);
    EXPECT_EQ(dev.bytes_in_use(), 0u);
}

TEST(concurrent_gemm, FourThreadsOnOneDeviceMatchReferenceFloatVendor) {
    concurrent_calls_match_reference<float>(gemm_kernel::vendor);
}
TEST(concurrent_gemm, FourThreadsOnOneDeviceMatchReferenceDoubleVendor) {
    concurrent_calls_match_reference<double>(gemm_kernel::vendor);
}
TEST(concurrent_gemm, FourThreadsOnOneDeviceMatchReferenceFloatTiled) {
    concurrent_calls_match_reference<float>(gemm_kernel::tiled);
}
TEST(concurrent_gemm, FourThreadsOnOneDeviceMatchReferenceDoubleNaive) {
    concurrent_calls_match_reference<double>(gemm_kernel::naive);
}

/// Streaming runs over two shared devices, listed in opposite orders by different callers: the
/// reservations are taken in one order, so no two runs wait for each other for ever.
TEST(concurrent_gemm, RunsOverSharedDevicesInOppositeOrdersFinish) {
    const index_t m = 61, n = 47, k = 53;
    const auto p = make_problem<double>(m, n, k, 5, 7);
    plan_options po;
    po.strategy = gemm_strategy::c_block;
    po.tile_m = po.tile_n = 16;
    po.devices = 2;
    host_matrix<double> shape(m, n, p.c0.layout());
    const gemm_problem q = describe_gemm<double>(p.oa, p.ob, 1.0, p.a.view(), p.b.view(), 1.0, shape.view());
    const gemm_plan plan = plan_gemm(q, std::size_t(1) << 30, device_rates{}, po);
    open_options oo;
    oo.memory_budget = plan.peak_device_bytes + plan.peak_device_bytes / 2;  // one run at a time
    oo.cpu_threads = 1;
    auto devs = open_devices("cpu:2", oo);
    std::atomic<int> wrong{0}, failures{0};
    const auto caller = [&](int t) {
        std::vector<device*> order = {devs[0].get(), devs[1].get()};
        if (t % 2) std::swap(order[0], order[1]);
        for (int i = 0; i < 25; ++i) {
            host_matrix<double> c(m, n, p.c0.layout());
            std::copy(p.c0.data(), p.c0.data() + m * n, c.data());
            try {
                const auto rep = execute_gemm<double>(plan, order, 1.0, p.a.view(), p.b.view(), 1.0, c.view());
                if (rep.peak_device_bytes > plan.peak_device_bytes) ++wrong;
            } catch (const std::exception&) {
                ++failures;
                continue;
            }
            if (!(gemm_relative_error<double>(p.oa, p.ob, 1.0, p.a.view(), p.b.view(), 1.0, p.c0.view(), c.view()) <=
                  gemm_tolerance(dtype::f64, k)))
                ++wrong;
        }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t) pool.emplace_back(caller, t);
    for (auto& th : pool) th.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(devs[0]->bytes_in_use(), 0u);
    EXPECT_EQ(devs[1]->bytes_in_use(), 0u);
}

TEST(concurrent_gemm, DeviceListedTwiceIsRefusedInsteadOfWaitingForItself) {
    open_options oo;
    oo.memory_budget = 1 << 20;
    auto devs = open_devices("cpu", oo);
    host_matrix<float> a(8, 8), b(8, 8), c(8, 8);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    const gemm_problem q = describe_gemm<float>(op::n, op::n, 1.f, a.view(), b.view(), 0.f, c.view());
    const gemm_plan plan = plan_gemm(q, 1 << 20, device_rates{}, plan_options{});
    std::vector<device*> twice = {devs[0].get(), devs[0].get()};
    try {
        execute_gemm<float>(plan, twice, 1.f, a.view(), b.view(), 0.f, c.view());
        FAIL() << "a device listed twice was accepted";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("cpu:0 is listed twice"), std::string::npos) << e.what();
    }
}

/// Memory allocated outside runs is not given back by waiting: a run that needs it fails at once
/// with a message naming the device and both amounts.
TEST(concurrent_gemm, RunThatCanNeverFitFailsAtOnceNamingTheMemoryHeldOutside) {
    open_options oo;
    oo.memory_budget = 64 * 1024;
    oo.cpu_threads = 1;
    auto devs = open_devices("cpu", oo);
    device& dev = *devs.front();
    const device_buffer held = dev.allocate(40 * 1024);
    EXPECT_EQ(dev.budget_for_runs(), 24u * 1024);
    try {
        budget_reservation r(dev, 30 * 1024);
        FAIL() << "a reservation beyond the memory left to runs was granted";
    } catch (const out_of_budget& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("cpu:0"), std::string::npos) << what;
        EXPECT_NE(what.find("outside"), std::string::npos) << what;
    }
    {
        budget_reservation r(dev, 24 * 1024);
        const device_buffer x = dev.allocate(10 * 1024, &r);
        EXPECT_EQ(r.in_use(), 10u * 1024);
        EXPECT_EQ(dev.bytes_in_use(), 64u * 1024);  // the reservation is counted once
        EXPECT_THROW(dev.allocate(1), out_of_budget);
    }
    EXPECT_EQ(dev.bytes_in_use(), 40u * 1024);
}

}  // namespace
}  // namespace tilestream
