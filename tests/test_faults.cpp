// Device faults and cancellation: a GEMM survives a device whose kernel, copy in, copy out or
// allocations fail (its units redone elsewhere, C blocks it had written restored when beta != 0),
// fails naming every cause when all devices are lost; Jacobi stops naming the device with the field
// untouched; a cancelled run returns promptly and leaves its devices usable. The soak (Soak.*) runs
// random GEMMs and Jacobi solves from several threads with injected faults and checks that memory
// and file descriptors do not grow.
#include "core/fault_injection.hpp"
#include "test_support.hpp"

#include <optional>
#include <tilestream/gemm.hpp>
#include <tilestream/jacobi.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/verify.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

namespace tilestream {
namespace {

namespace fi = fault_injection;

std::vector<device*> raw(const std::vector<std::unique_ptr<device>>& devs) {
    std::vector<device*> r;
    for (const auto& d : devs) r.push_back(d.get());
    return r;
}

/// Disarms every injected fault when a test ends, whatever happened in it.
class faults_test : public ::testing::Test {
protected:
    void TearDown() override { fi::clear(); }
};

/// One GEMM to run and check.
struct gemm_case {
    index_t m = 67, n = 45, k = 83;
    op oa = op::n, ob = op::n;
    layout la = layout::row_major, lb = layout::row_major, lc = layout::row_major;
    double alpha = 0.75, beta = 0;
    gemm_strategy strategy = gemm_strategy::c_block;
    index_t tile = 16;  ///< m, n and k tiles (0: the planner's)
    std::uint64_t seed = 1;
};

/// The outcome of one checked GEMM: the report, or the error it threw.
struct gemm_outcome {
    gemm_report rep;
    double error = 0, tolerance = 0;
    bool threw = false;
    std::string what;
};

/// Plans `g` for `devs` (their smallest budget), runs it on random operands with C poisoned (beta
/// = 0) or random (beta != 0), and measures the error against the float64 reference.
template <class T>
gemm_outcome run_checked(const std::vector<device*>& devs, const gemm_case& g, gemm_run_options run = {}) {
    host_matrix<T> a(g.oa == op::n ? g.m : g.k, g.oa == op::n ? g.k : g.m, g.la);
    host_matrix<T> b(g.ob == op::n ? g.k : g.n, g.ob == op::n ? g.n : g.k, g.lb);
    host_matrix<T> c(g.m, g.n, g.lc), c0(g.m, g.n, g.lc);
    fill_random(a.view(), g.seed);
    fill_random(b.view(), g.seed + 1);
    fill_random(c0.view(), g.seed + 2);
    if (g.beta != 0) std::memcpy(c.data(), c0.data(), sizeof(T) * std::size_t(c.size()));
    else fill_nan(c.view());
    const T alpha = T(g.alpha), beta = T(g.beta);
    const gemm_problem problem = describe_gemm<T>(g.oa, g.ob, alpha, a.view(), b.view(), beta, c.view());
    plan_options po;
    po.strategy = g.strategy;
    po.kernel = gemm_kernel::tiled;
    po.tile_m = po.tile_n = g.tile;
    po.tile_k = g.strategy == gemm_strategy::a_panel || g.strategy == gemm_strategy::b_panel ||
                        g.strategy == gemm_strategy::row_panels || g.strategy == gemm_strategy::zero_copy
                    ? 0
                    : g.tile;
    po.devices = int(devs.size());
    po.in_place = computes_in_place(devs);
    std::size_t budget = SIZE_MAX;
    for (device* d : devs) budget = std::min(budget, d->budget_for_runs());
    const gemm_plan plan = plan_gemm(problem, budget, device_rates{}, po);
    gemm_outcome out;
    try {
        out.rep = execute_gemm<T>(plan, devs, alpha, a.view(), b.view(), beta, c.view(), run);
    } catch (const error& e) {
        out.threw = true;
        out.what = e.what();
        return out;
    }
    out.error = gemm_relative_error<T>(g.oa, g.ob, alpha, a.view(), b.view(), beta, c0.view(), c.view());
    out.tolerance = gemm_tolerance(dtype_of<T>(), g.k);
    return out;
}

std::size_t units_done(const gemm_report& rep) {
    std::size_t n = 0;
    for (const auto& d : rep.devices) n += d.units;
    return n;
}

// ---- one device fails, the others finish

enum class fault_kind { kernel, h2d, d2h };

const char* name_of(fault_kind k) {
    switch (k) {
        case fault_kind::kernel: return "kernel";
        case fault_kind::h2d: return "h2d";
        case fault_kind::d2h: return "d2h";
    }
    return "?";
}

/// (fault, copying path (budgets) or zero-copy, dtype, beta != 0, case index for ops and layouts)
using survive_param = std::tuple<fault_kind, bool, dtype, bool, int>;
class device_fault_survived : public ::testing::TestWithParam<survive_param> {
protected:
    void TearDown() override { fi::clear(); }
};

TEST_P(device_fault_survived, OtherDevicesFinishAndTheResultIsRight) {
    const auto& [kind, copying, type, beta_nonzero, variant] = GetParam();
    open_options oo;
    oo.cpu_threads = 1;
    if (copying) oo.memory_budget = 256 * 1024;
    const auto devs = open_devices("cpu:3", oo);
    const auto ptrs = raw(devs);
    gemm_case g;
    g.beta = beta_nonzero ? -1.25 : 0.0;
    g.oa = (variant & 1) ? op::t : op::n;
    g.ob = (variant & 2) ? op::t : op::n;
    g.la = (variant & 1) ? layout::col_major : layout::row_major;
    g.lc = (variant & 2) ? layout::col_major : layout::row_major;
    g.strategy = copying ? (variant % 2 ? gemm_strategy::tiles_3d : gemm_strategy::c_block) : gemm_strategy::zero_copy;
    g.seed = 100 + std::uint64_t(variant);
    fi::faults f;
    switch (kind) {
        case fault_kind::kernel: f.fail_after_units = 0; break;
        case fault_kind::h2d: f.fail_h2d_after = 3; break;
        case fault_kind::d2h: f.fail_d2h_after = 0; break;
    }
    fi::arm(*devs[1], f);
    // The other two devices are slowed a little, so device 1 surely takes units before the run ends.
    gemm_run_options run;
    const fi::slowdown slow({{devs[0]->id(), 0.002}, {devs[2]->id(), 0.002}});
    visit_real_dtype(type, "test", [&]<class T>() {
        const gemm_outcome out = run_checked<T>(ptrs, g, run);
        ASSERT_FALSE(out.threw) << out.what;
        EXPECT_LE(out.error, out.tolerance);
        ASSERT_EQ(out.rep.faults.size(), 1u);
        EXPECT_EQ(out.rep.faults[0].id, devs[1]->id());
        EXPECT_NE(out.rep.faults[0].message.find("injected"), std::string::npos) << out.rep.faults[0].message;
        EXPECT_GE(out.rep.faults[0].units_redone, 1u);
        EXPECT_EQ(units_done(out.rep), out.rep.plan.units);
        for (const auto& d : devs) EXPECT_EQ(d->bytes_in_use(), 0u) << d->id();
        // The fault was one-shot: the same devices run the next GEMM whole.
        const gemm_outcome again = run_checked<T>(ptrs, g);
        ASSERT_FALSE(again.threw) << again.what;
        EXPECT_LE(again.error, again.tolerance);
        EXPECT_TRUE(again.rep.faults.empty());
    });
}

INSTANTIATE_TEST_SUITE_P(copying, device_fault_survived,
                         ::testing::Combine(::testing::Values(fault_kind::kernel, fault_kind::h2d, fault_kind::d2h),
                                            ::testing::Values(true), ::testing::Values(dtype::f32, dtype::f64),
                                            ::testing::Bool(), ::testing::Values(0, 3)),
                         [](const auto& info) {
                             return std::string(name_of(std::get<0>(info.param))) + "_" +
                                    std::string(to_string(std::get<2>(info.param))) +
                                    (std::get<3>(info.param) ? "_beta" : "_nobeta") + "_v" +
                                    std::to_string(std::get<4>(info.param));
                         });
INSTANTIATE_TEST_SUITE_P(zero_copy, device_fault_survived,
                         ::testing::Combine(::testing::Values(fault_kind::kernel), ::testing::Values(false),
                                            ::testing::Values(dtype::f32, dtype::f64), ::testing::Bool(),
                                            ::testing::Values(0, 3)),
                         [](const auto& info) {
                             return std::string(to_string(std::get<2>(info.param))) +
                                    (std::get<3>(info.param) ? "_beta" : "_nobeta") + "_v" +
                                    std::to_string(std::get<4>(info.param));
                         });

TEST_F(faults_test, RowPanelsOfALostDeviceAreRedoneByTheOthers) {
    open_options oo;
    oo.cpu_threads = 1;
    oo.memory_budget = 256 * 1024;
    const auto devs = open_devices("cpu:3", oo);
    fi::faults f;
    f.fail_allocations = 1000;  // device 2 cannot allocate anything: lost before its first unit
    fi::arm(*devs[2], f);
    gemm_case g;
    g.strategy = gemm_strategy::row_panels;
    g.beta = 0.5;
    const gemm_outcome out = run_checked<double>(raw(devs), g);
    ASSERT_FALSE(out.threw) << out.what;
    EXPECT_LE(out.error, out.tolerance);
    ASSERT_EQ(out.rep.faults.size(), 1u);
    EXPECT_EQ(out.rep.faults[0].id, devs[2]->id());
    EXPECT_NE(out.rep.faults[0].message.find("allocation failed"), std::string::npos) << out.rep.faults[0].message;
    // Its round-robin share: units 2, 5, 8, ...
    EXPECT_EQ(out.rep.faults[0].units_redone, (out.rep.plan.units + 0) / 3);
    EXPECT_EQ(units_done(out.rep), out.rep.plan.units);
}

TEST_F(faults_test, AFailedAllocationRetriesWithFewerBuffers) {
    for (const char* spec : {"cpu:1", "cpu:3"}) {
        SCOPED_TRACE(spec);
        open_options oo;
        oo.cpu_threads = 1;
        oo.memory_budget = 256 * 1024;
        const auto devs = open_devices(spec, oo);
        fi::faults f;
        f.fail_allocations = 1;
        fi::arm(*devs[0], f);
        gemm_case g;
        g.beta = -0.5;
        const gemm_outcome out = run_checked<float>(raw(devs), g);
        ASSERT_FALSE(out.threw) << out.what;
        EXPECT_LE(out.error, out.tolerance);
        EXPECT_TRUE(out.rep.faults.empty());
        ASSERT_EQ(out.rep.warnings.size(), 1u);
        EXPECT_NE(out.rep.warnings[0].find(devs[0]->id() + ": "), std::string::npos) << out.rep.warnings[0];
        EXPECT_NE(out.rep.warnings[0].find("fewer buffers"), std::string::npos) << out.rep.warnings[0];
        EXPECT_EQ(units_done(out.rep), out.rep.plan.units);
        fi::clear();
    }
}

TEST_F(faults_test, EveryDeviceLostFailsNamingEachCause) {
    for (bool copying : {true, false}) {
        SCOPED_TRACE(copying ? "copying" : "zero-copy");
        open_options oo;
        oo.cpu_threads = 1;
        if (copying) oo.memory_budget = 256 * 1024;
        const auto devs = open_devices("cpu:3", oo);
        fi::faults kernel;
        kernel.fail_after_units = 0;
        fi::arm(*devs[0], kernel);
        fi::arm(*devs[1], kernel);
        fi::faults alloc;
        alloc.fail_allocations = copying ? 1000 : 0;
        alloc.fail_after_units = copying ? -1 : 0;
        fi::arm(*devs[2], alloc);
        gemm_case g;
        g.beta = 1;
        g.strategy = copying ? gemm_strategy::c_block : gemm_strategy::zero_copy;
        const gemm_outcome out = run_checked<double>(raw(devs), g);
        ASSERT_TRUE(out.threw);
        EXPECT_NE(out.what.find("every device failed"), std::string::npos) << out.what;
        for (const auto& d : devs) EXPECT_NE(out.what.find(d->id() + ": "), std::string::npos) << out.what;
        EXPECT_NE(out.what.find(copying ? "allocation failed" : "kernel failed"), std::string::npos) << out.what;
        for (const auto& d : devs) EXPECT_EQ(d->bytes_in_use(), 0u) << d->id();
        fi::clear();
        const gemm_outcome again = run_checked<double>(raw(devs), g);
        ASSERT_FALSE(again.threw) << again.what;
        EXPECT_LE(again.error, again.tolerance);
    }
}

TEST_F(faults_test, SingleDeviceFaultStillFailsTheRun) {
    open_options oo;
    oo.cpu_threads = 1;
    oo.memory_budget = 256 * 1024;
    const auto devs = open_devices("cpu:1", oo);
    fi::faults f;
    f.fail_d2h_after = 1;
    fi::arm(*devs[0], f);
    const gemm_outcome out = run_checked<float>(raw(devs), gemm_case{});
    ASSERT_TRUE(out.threw);
    EXPECT_NE(out.what.find(devs[0]->id() + ": copy to the host failed"), std::string::npos) << out.what;
}

TEST_F(faults_test, OpenCLDeviceBesideCpuDevicesSurvivesAFaultOfEither) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    open_options oo;
    oo.memory_budget = 1024 * 1024;
    oo.cpu_threads = 1;
    const auto devs = open_devices("cpu:2,opencl:0", oo);
    for (std::size_t victim : {std::size_t(0), std::size_t(2)}) {
        SCOPED_TRACE(devs[victim]->id());
        fi::faults f;
        f.fail_after_units = 0;
        fi::arm(*devs[victim], f);
        gemm_case g;
        g.beta = 0.5;
        gemm_run_options run;
        run.peer_tiles = peer_tile_mode::off;
        // The others slowed a little, so the victim surely takes a unit (and fails in it).
        std::vector<std::pair<std::string, double>> slower;
        for (std::size_t i = 0; i < devs.size(); ++i)
            if (i != victim) slower.emplace_back(devs[i]->id(), 0.002);
        const fi::slowdown slow(slower);
        const gemm_outcome out = run_checked<float>(raw(devs), g, run);
        ASSERT_FALSE(out.threw) << out.what;
        EXPECT_LE(out.error, out.tolerance);
        ASSERT_EQ(out.rep.faults.size(), 1u);
        EXPECT_EQ(out.rep.faults[0].id, devs[victim]->id());
        EXPECT_GE(out.rep.faults[0].units_redone, 1u);
        EXPECT_EQ(units_done(out.rep), out.rep.plan.units);
        fi::clear();
    }
}

TEST_F(faults_test, NoTaskComputesWithAPeerTileWhoseLoadFailed) {
    // Peer tiles on: device 0's copies in start failing after two, so its later loads leave stale
    // bytes in slots it lists for peers. A device that copied such a tile checks on its copy-in
    // stream that the load ran, and that stream fails instead of computing with the tile: C is
    // right, or, when every device was lost so (devices reading the same tiles at once copy from
    // loads in flight), the run fails naming each. Without the check C was wrong in three of four
    // rounds on OpenCL slices.
    std::vector<std::string> specs = {"cpu:3"};
    std::string why;
    if (!testing::gpu_missing("opencl:0", why)) specs.push_back("opencl:0x3");
    for (const std::string& spec : specs) {
        open_options oo;
        oo.memory_budget = 1024 * 1024;
        oo.cpu_threads = 1;
        const auto devs = open_devices(spec, oo);
        for (int round = 0; round < 4; ++round) {
            SCOPED_TRACE(spec + " round " + std::to_string(round));
            fi::faults f;
            f.fail_h2d_after = 2;
            fi::arm(*devs[0], f);
            gemm_case g;
            g.strategy = gemm_strategy::tiles_3d;
            g.m = 97, g.n = 81, g.k = 120;
            g.seed = 10 + std::uint64_t(round);
            gemm_run_options run;
            run.peer_tiles = peer_tile_mode::on;
            const gemm_outcome out = run_checked<double>(raw(devs), g, run);
            fi::clear();
            if (out.threw) {
                EXPECT_NE(out.what.find("every device"), std::string::npos) << out.what;
                EXPECT_NE(out.what.find(devs[0]->id() + ": copy to the device failed"), std::string::npos) << out.what;
                continue;
            }
            EXPECT_LE(out.error, out.tolerance);
            bool named = false;
            for (const device_fault& x : out.rep.faults) named = named || x.id == devs[0]->id();
            EXPECT_TRUE(named);
            EXPECT_EQ(units_done(out.rep), out.rep.plan.units);
        }
    }
}

// ---- Jacobi: a fault stops the solve, naming the device

template <class T>
host_matrix<T> random_field(index_t nx, index_t ny, std::uint64_t seed) {
    host_matrix<T> f(ny, nx);
    fill_random(f.view(), seed);
    return f;
}

/// The plain loop the solver reproduces bit for bit.
template <class T>
void plain_jacobi(host_matrix<T>& field, index_t iters) {
    host_matrix<T> next(field.rows(), field.cols());
    std::memcpy(next.data(), field.data(), sizeof(T) * std::size_t(field.size()));
    for (index_t t = 0; t < iters; ++t) {
        for (index_t i = 1; i < field.rows() - 1; ++i)
            for (index_t j = 1; j < field.cols() - 1; ++j)
                next(i, j) = T(0.25) * ((field(i - 1, j) + field(i + 1, j)) + (field(i, j - 1) + field(i, j + 1)));
        std::swap(field, next);
    }
}

template <class T>
bool same_bits(const host_matrix<T>& a, const host_matrix<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(T) * std::size_t(a.size())) == 0;
}

template <class T>
jacobi_report solve(const std::vector<std::unique_ptr<device>>& devs, host_matrix<T>& field, index_t iters,
                    const std::atomic<bool>* cancel = nullptr) {
    jacobi_options o;
    o.iters = iters;
    o.check_every = 5;
    o.cancel = cancel;
    return run_jacobi<T>(plan_jacobi(jacobi_problem{field.cols(), field.rows(), dtype_of<T>()}, devs, o), field.view());
}

TEST_F(faults_test, JacobiFaultNamesTheDeviceAndLeavesTheFieldAsItWas) {
    open_options oo;
    oo.cpu_threads = 1;
    const auto devs = open_devices("cpu:3", oo);
    for (int kind = 0; kind < 2; ++kind) {
        SCOPED_TRACE(kind == 0 ? "kernel" : "allocation");
        const host_matrix<double> start = random_field<double>(41, 37, 5);
        host_matrix<double> field = random_field<double>(41, 37, 5);
        fi::faults f;
        if (kind == 0) f.fail_after_units = 7;
        else f.fail_allocations = 1;
        fi::arm(*devs[1], f);
        try {
            solve(devs, field, 40);
            FAIL() << "no error";
        } catch (const device_error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(devs[1]->id()), std::string::npos) << what;
            EXPECT_NE(what.find("starting values"), std::string::npos) << what;
        }
        EXPECT_TRUE(same_bits(field, start));
        for (const auto& d : devs) EXPECT_EQ(d->bytes_in_use(), 0u) << d->id();
        fi::clear();
        // The devices solve the next problem right.
        solve(devs, field, 40);
        host_matrix<double> expect = random_field<double>(41, 37, 5);
        plain_jacobi(expect, 40);
        EXPECT_TRUE(same_bits(field, expect));
    }
}

// ---- cancellation

TEST_F(faults_test, GemmCancelledFromAnotherThreadReturnsPromptly) {
    for (bool copying : {true, false}) {
        SCOPED_TRACE(copying ? "copying" : "zero-copy");
        open_options oo;
        oo.cpu_threads = 1;
        if (copying) oo.memory_budget = 256 * 1024;
        const auto devs = open_devices("cpu:2", oo);
        gemm_case g;
        g.m = 160;
        g.n = 144;
        g.k = 64;
        g.beta = 0.5;
        g.strategy = copying ? gemm_strategy::c_block : gemm_strategy::zero_copy;
        // 10 x 9 units of 20 ms (the slowdown) each: 0.9 s per device uncancelled.
        gemm_run_options run;
        std::optional<fi::slowdown> slow(std::in_place, std::vector<std::pair<std::string, double>>{
                                              {devs[0]->id(), 0.02}, {devs[1]->id(), 0.02}});
        std::atomic<bool> cancel{false};
        run.cancel = &cancel;
        using clock = std::chrono::steady_clock;
        clock::time_point cancelled_at;
        std::thread canceller([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            cancelled_at = clock::now();
            cancel = true;
        });
        const gemm_outcome out = run_checked<float>(raw(devs), g, run);  // errors land in out.what
        const auto returned_at = clock::now();
        canceller.join();
        // The units in flight (two per device, 20 ms each) finish; nothing else starts.
        EXPECT_LT(std::chrono::duration<double>(returned_at - cancelled_at).count(), 0.5);
        ASSERT_TRUE(out.threw);
        EXPECT_NE(out.what.find("gemm: cancelled after"), std::string::npos) << out.what;
        for (const auto& d : devs) EXPECT_EQ(d->bytes_in_use(), 0u) << d->id();
        // Usable after: the same GEMM, uncancelled, is right.
        cancel = false;
        slow.reset();
        const gemm_outcome again = run_checked<float>(raw(devs), g, run);
        ASSERT_FALSE(again.threw) << again.what;
        EXPECT_LE(again.error, again.tolerance);
    }
}

TEST_F(faults_test, JacobiCancelledLeavesTheFieldAsItWas) {
    open_options oo;
    oo.cpu_threads = 1;
    const auto devs = open_devices("cpu:2", oo);
    const host_matrix<float> start = random_field<float>(300, 301, 9);
    host_matrix<float> field = random_field<float>(300, 301, 9);
    std::atomic<bool> cancel{false};
    std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        cancel = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    // 300x300 points x 100000 iterations: minutes uncancelled.
    EXPECT_THROW(solve(devs, field, 100000, &cancel), cancelled);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    canceller.join();
    EXPECT_LT(seconds, 2.0);
    EXPECT_TRUE(same_bits(field, start));
    for (const auto& d : devs) EXPECT_EQ(d->bytes_in_use(), 0u) << d->id();
    solve(devs, field, 10);
    host_matrix<float> expect = random_field<float>(300, 301, 9);
    plain_jacobi(expect, 10);
    EXPECT_TRUE(same_bits(field, expect));
}

// ---- soak

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

/// VmRSS of this process in bytes (0 when /proc is not there).
std::size_t resident_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::size_t(std::stoull(line.substr(6))) * 1024;
    return 0;
}

std::size_t open_fds() {
    std::size_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::end(it);
         it.increment(ec))
        ++n;
    return n;
}

/// What the soak's callers did, summed over threads.
struct soak_counts {
    std::atomic<std::size_t> gemms{0}, jacobis{0}, devices_lost{0}, jacobi_stopped{0}, cancelled{0}, retried{0}, all_lost{0};
};

class soak_caller {
public:
    soak_caller(int id, const std::vector<std::unique_ptr<device>>& budgeted,
                const std::vector<std::unique_ptr<device>>& in_place, const std::vector<std::unique_ptr<device>>& solvers,
                soak_counts& counts)
        : id_(id), rng_(std::uint64_t(1000 + id)), budgeted_(budgeted), in_place_(in_place), solvers_(solvers),
          counts_(counts) {}

    /// One call: a GEMM (faults armed by caller 0 only, one device at a time, so no run loses
    /// every device), a Jacobi solve, or (caller 2) a GEMM cancelled before it starts.
    void call() {
        const int what = pick(0, 9);
        if (what < 6) gemm_call(false);
        else if (what < 9) jacobi_call();
        else if (id_ == 2) gemm_call(true);
        else gemm_call(false);
    }

private:
    int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

    std::vector<device*> subset(const std::vector<std::unique_ptr<device>>& from, int count) {
        std::vector<device*> all = raw(from);
        std::shuffle(all.begin(), all.end(), rng_);
        all.resize(std::size_t(count));
        return all;
    }

    void gemm_call(bool cancel_first) {
        const bool copying = pick(0, 3) != 0;
        const std::vector<device*> devs = copying ? subset(budgeted_, pick(2, 3)) : subset(in_place_, 2);
        gemm_case g;
        g.m = pick(1, 70);
        g.n = pick(1, 70);
        g.k = pick(1, 70);
        g.oa = pick(0, 1) ? op::t : op::n;
        g.ob = pick(0, 1) ? op::t : op::n;
        g.la = pick(0, 1) ? layout::col_major : layout::row_major;
        g.lb = pick(0, 1) ? layout::col_major : layout::row_major;
        g.lc = pick(0, 1) ? layout::col_major : layout::row_major;
        g.alpha = std::array{1.0, 0.5, -2.0}[std::size_t(pick(0, 2))];
        g.beta = std::array{0.0, 0.5, 1.0}[std::size_t(pick(0, 2))];
        g.seed = std::uint64_t(pick(1, 1 << 30));
        static constexpr std::array copying_strategies{gemm_strategy::automatic, gemm_strategy::tiles_3d,
                                                       gemm_strategy::a_panel,   gemm_strategy::b_panel,
                                                       gemm_strategy::c_block,   gemm_strategy::row_panels};
        g.strategy = copying ? copying_strategies[std::size_t(pick(0, 5))]
                             : (pick(0, 1) ? gemm_strategy::zero_copy : gemm_strategy::automatic);
        g.tile = std::array<index_t, 4>{0, 8, 16, 24}[std::size_t(pick(0, 3))];
        if (g.strategy == gemm_strategy::automatic) g.tile = 0;
        const bool inject = id_ == 0 && pick(0, 1) == 1;
        if (inject) {
            fi::faults f;
            switch (copying ? pick(0, 4) : 0) {
                case 0: f.fail_after_units = pick(0, 3); break;
                case 1: f.fail_h2d_after = pick(0, 6); break;
                case 2: f.fail_d2h_after = pick(0, 2); break;
                case 3: f.fail_allocations = 1; break;
                default: f.fail_allocations = 1000; break;
            }
            fi::arm(*devs[std::size_t(pick(0, int(devs.size()) - 1))], f);
        }
        std::atomic<bool> cancel{cancel_first};
        gemm_run_options run;
        if (cancel_first) run.cancel = &cancel;
        const auto checked = [&]<class T>() {
            gemm_outcome out;
            try {
                out = run_checked<T>(devs, g, run);
            } catch (const error&) {
                // The plan: this strategy or tile does not fit the budget; the planner's choice does.
                gemm_case fallback = g;
                fallback.strategy = copying ? gemm_strategy::automatic : gemm_strategy::zero_copy;
                fallback.tile = 0;
                out = run_checked<T>(devs, fallback, run);
            }
            return out;
        };
        const gemm_outcome out = pick(0, 1) ? checked.template operator()<float>() : checked.template operator()<double>();
        if (inject) fi::clear();
        if (cancel_first) {
            EXPECT_TRUE(out.threw);
            EXPECT_NE(out.what.find("cancelled"), std::string::npos) << out.what;
            ++counts_.cancelled;
            return;
        }
        if (out.threw && out.what.find("every device failed") != std::string::npos) {
            // Caller 0 armed a fault on each of this run's devices in turn while it ran (its
            // calls are shorter than this one): fine if every cause was injected and is named.
            for (device* d : devs) EXPECT_NE(out.what.find(d->id() + ": "), std::string::npos) << out.what;
            std::size_t causes = 0;
            for (std::size_t at = 0; (at = out.what.find("injected", at)) != std::string::npos; ++at) ++causes;
            EXPECT_EQ(causes, devs.size()) << out.what;
            ++counts_.all_lost;
            return;
        }
        ASSERT_FALSE(out.threw) << out.what;
        EXPECT_LE(out.error, out.tolerance) << g.m << "x" << g.n << "x" << g.k << " " << to_string(g.strategy);
        EXPECT_EQ(units_done(out.rep), out.rep.plan.units);
        counts_.devices_lost += out.rep.faults.size();
        counts_.retried += out.rep.warnings.size();
        ++counts_.gemms;
    }

    void jacobi_call() {
        const index_t nx = pick(8, 60), ny = pick(8, 60), iters = pick(1, 30);
        const auto devs = subset(solvers_, pick(1, 3));
        const bool inject = id_ == 0 && pick(0, 2) == 0;
        if (inject) {
            fi::faults f;
            f.fail_after_units = pick(0, 20);
            fi::arm(*devs[0], f);
        }
        const auto solve_one = [&]<class T>() {
            const host_matrix<T> start = random_field<T>(nx, ny, std::uint64_t(pick(1, 1000)));
            host_matrix<T> field(ny, nx);
            std::memcpy(field.data(), start.data(), sizeof(T) * std::size_t(start.size()));
            jacobi_options o;
            o.iters = iters;
            o.check_every = pick(1, 10);
            try {
                run_jacobi<T>(plan_jacobi(jacobi_problem{nx, ny, dtype_of<T>()}, devs, o), field.view());
            } catch (const device_error& e) {
                // Only an injected fault (armed by caller 0, maybe hit by another caller's solve).
                EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
                EXPECT_TRUE(same_bits(field, start));
                ++counts_.jacobi_stopped;
                return;
            }
            host_matrix<T> expect(ny, nx);
            std::memcpy(expect.data(), start.data(), sizeof(T) * std::size_t(start.size()));
            plain_jacobi(expect, iters);
            EXPECT_TRUE(same_bits(field, expect)) << nx << "x" << ny << " " << iters << " iterations";
            ++counts_.jacobis;
        };
        if (pick(0, 1)) solve_one.template operator()<float>();
        else solve_one.template operator()<double>();
        if (inject) fi::clear();
    }

    int id_;
    std::mt19937_64 rng_;
    const std::vector<std::unique_ptr<device>>& budgeted_;
    const std::vector<std::unique_ptr<device>>& in_place_;
    const std::vector<std::unique_ptr<device>>& solvers_;
    soak_counts& counts_;
};

/// Rounds of random GEMMs (shapes, ops, layouts, dtypes, strategies, tiles; three budgeted CPU
/// devices with 96 KiB each, or two zero-copy ones) and Jacobi solves from three threads at once,
/// with injected faults; every result checked. Round 0 warms up (thread pools, allocator arenas);
/// from the end of round 0 to the end of the last, open descriptors must not change and resident
/// memory must not grow by more than 24 MiB (glibc keeps freed thread stacks and per-thread arenas
/// for reuse; a leak of a C block per call would be far larger over the calls), except in
/// sanitizer builds, whose allocator quarantine holds freed memory (LeakSanitizer checks leaks).
/// TILESTREAM_SOAK_ROUNDS sets the rounds (default 40, 20 in sanitizer builds).
TEST(Soak, RandomGemmsAndJacobiWithFaultsFromThreeCallers) {
    int rounds = sanitized ? 20 : 40;
    if (const char* env = std::getenv("TILESTREAM_SOAK_ROUNDS")) rounds = std::max(2, std::atoi(env));
    constexpr int callers = 3, calls_per_round = 6;
    open_options budget;
    budget.cpu_threads = 1;
    budget.memory_budget = 96 * 1024;
    open_options plain;
    plain.cpu_threads = 1;
    const auto budgeted = open_devices("cpu:3", budget);
    const auto in_place = open_devices("cpu:2", plain);
    // A budget bounds the blocks a device keeps for reuse (an unbudgeted one keeps a block of
    // every size it saw, up to its memory share): the RSS figure then shows leaks, not that pool.
    open_options solver_budget = plain;
    solver_budget.memory_budget = 1024 * 1024;
    const auto solvers = open_devices("cpu:3", solver_budget);
    soak_counts counts;
    std::vector<std::unique_ptr<soak_caller>> who;
    for (int i = 0; i < callers; ++i)
        who.push_back(std::make_unique<soak_caller>(i, budgeted, in_place, solvers, counts));
    std::size_t rss0 = 0, fds0 = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r) {
        std::vector<std::thread> threads;
        for (int i = 0; i < callers; ++i)
            threads.emplace_back([&, i] {
                for (int c = 0; c < calls_per_round; ++c) who[std::size_t(i)]->call();
            });
        for (auto& t : threads) t.join();
        fi::clear();
        if (r == 0) {
            rss0 = resident_bytes();
            fds0 = open_fds();
        }
        if (rounds >= 8 && (r + 1) % (rounds / 4) == 0)
            std::printf("soak: after round %d: RSS %.1f MiB, open fds %zu\n", r + 1, double(resident_bytes()) / 1048576.0,
                        open_fds());
        if (::testing::Test::HasFatalFailure()) break;
    }
    const std::size_t rss1 = resident_bytes(), fds1 = open_fds();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("soak: %d rounds, %d calls (%zu gemm, %zu jacobi, %zu cancelled, %zu jacobi stopped by a fault), "
                "%zu devices lost and %zu buffer retries survived, %zu runs lost every device, %.1f s; after round 0 -> end: RSS %.1f -> %.1f MiB, "
                "open fds %zu -> %zu%s\n",
                rounds, rounds * callers * calls_per_round, counts.gemms.load(), counts.jacobis.load(),
                counts.cancelled.load(), counts.jacobi_stopped.load(), counts.devices_lost.load(), counts.retried.load(),
                counts.all_lost.load(), seconds, double(rss0) / 1048576.0, double(rss1) / 1048576.0, fds0, fds1,
                sanitized ? " (sanitizer build: RSS not bounded)" : "");
    EXPECT_EQ(fds1, fds0);
    if (!sanitized) EXPECT_LE(rss1, rss0 + 24 * 1024 * 1024);
    EXPECT_GT(counts.devices_lost.load(), 0u);
    for (const auto* set : {&budgeted, &in_place, &solvers})
        for (const auto& d : *set) EXPECT_EQ(d->bytes_in_use(), 0u) << d->id();
}

}  // namespace
}  // namespace tilestream
