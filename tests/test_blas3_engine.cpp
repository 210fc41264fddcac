// The tile-task engine under the Level 3 routines: reproducible results bitwise across device counts
// and budgets, device faults survived by rerunning tasks from committed tile versions, cancellation,
// progress, balance, the cost model's bytes against the measured ones, and the tile operations'
// host-side logic (column-major mapping, the cuBLAS plan).
#include "blas3_support.hpp"

#include "backends/cuda/cuda_blas3_logic.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "core/engine/schedule_model.hpp"
#include "core/engine/tile_kernels.hpp"
#include "core/engine/tile_mapping.hpp"
#include "core/fault_injection.hpp"
#include "core/lapack_calls.hpp"
#include "core/rate_probes.hpp"
#include "core/routines/routines.hpp"

#include <tilestream/cholesky.hpp>
#include <tilestream/lu.hpp>
#include <tilestream/trace.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <tuple>

namespace tilestream {
namespace {

using testing::blas3_case;
using testing::run_and_check;
namespace fi = fault_injection;

class blas3_faults : public ::testing::Test {
protected:
    void TearDown() override { fi::clear(); }
};

/// One case per routine, sizes beyond a reproducible k-block (256 f64, 384 f32).
std::vector<blas3_case> one_of_each(index_t big) {
    std::vector<blas3_case> out;
    const auto add = [&](blas3_routine r, blas3_flags f, index_t m, index_t n, index_t k, double beta) {
        blas3_case g;
        g.routine = r;
        g.flags = f;
        g.m = m;
        g.n = n;
        g.k = k;
        g.beta = beta;
        g.la = layout::col_major;
        g.seed = 7 + out.size();
        out.push_back(g);
    };
    add(blas3_routine::trsm, {side::left, uplo::lower, op::n, diag::non_unit}, big, 53, 0, 0);
    add(blas3_routine::trsm, {side::right, uplo::upper, op::t, diag::unit}, 47, big, 0, 0);
    add(blas3_routine::trmm, {side::left, uplo::upper, op::n, diag::non_unit}, big, 41, 0, 0);
    add(blas3_routine::symm, {side::right, uplo::lower, op::n, diag::non_unit}, 39, big, 0, 0.5);
    add(blas3_routine::syrk, {side::left, uplo::lower, op::t, diag::non_unit}, 0, 70, big, 0);
    add(blas3_routine::syr2k, {side::left, uplo::upper, op::n, diag::non_unit}, 0, 66, big, 1.5);
    return out;
}

template <class T>
void reproducible_everywhere(const std::vector<const char*>& specs) {
    for (const blas3_case& g : one_of_each(std::is_same_v<T, float> ? 400 : 300)) {
        std::vector<T> first;
        std::string first_spec;
        for (const char* spec : specs) {
            context ctx(spec, {.reproducible = true});
            std::vector<T> got;
            const blas3_report rep = run_and_check<T>(ctx, g, {}, &got);
            EXPECT_TRUE(rep.plan.reproducible);
            if (first.empty()) {
                first = got;
                first_spec = spec;
            } else {
                EXPECT_TRUE(got == first) << g.name() << ": " << spec << " differs from " << first_spec << " ("
                                          << to_string(dtype_of<T>()) << ")";
            }
        }
    }
}

TEST(Blas3Engine, ReproducibleIsBitwiseAcrossDevicesAndBudgets) {
    const std::vector<const char*> specs = {"cpu", "cpu:3", "cpu@3MiB", "cpu:2@2MiB", "cpu,cpu@4MiB"};
    reproducible_everywhere<double>(specs);
    reproducible_everywhere<float>(specs);
}

TEST(Blas3Engine, ReproducibleIsBitwiseAcrossOpenCLSlices) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    reproducible_everywhere<double>({"opencl:0@8MiB", "opencl:0x2@4MiB"});
}

TEST_F(blas3_faults, DeviceFaultsRerunTasksFromCommittedTiles) {
    struct fault_kind {
        const char* name;
        fi::faults f;
    };
    std::vector<fault_kind> kinds(3);
    kinds[0].name = "kernel";
    kinds[0].f.fail_after_units = 1;
    kinds[1].name = "copy in";
    kinds[1].f.fail_h2d_after = 2;
    kinds[2].name = "copy out half way";
    kinds[2].f.fail_d2h_after = 1;
    for (const char* spec : {"cpu:3@48KiB", "cpu:3"}) {
        const bool copies = std::string(spec).find('@') != std::string::npos;
        for (const fault_kind& k : kinds) {
            if (!copies && k.name != std::string("kernel")) continue;
            for (blas3_case g : one_of_each(90)) {
                context ctx(spec);
                // The others slowed down, so the faulty device takes a few tasks; which ones is the
                // scheduler's choice, so a run where it never reached its fault point (a copy out
                // half way, say) is run again (each run's result is checked all the same).
                const fi::slowdown slow({{ctx.devices()[0]->id(), 0.004}, {ctx.devices()[2]->id(), 0.004}});
                blas3_call_options call;
                call.tile = 24;
                call.tile_free = 24;
                call.tile_k = 24;
                blas3_report rep;
                for (int attempt = 0; attempt < 8 && rep.faults.empty(); ++attempt) {
                    fi::clear();
                    fi::arm(*ctx.devices()[1], k.f);
                    rep = run_and_check<double>(ctx, g, call);
                }
                ASSERT_EQ(rep.faults.size(), 1u) << spec << " " << k.name << " " << g.name() << " (8 runs)";
                EXPECT_EQ(rep.faults[0].id, ctx.devices()[1]->id());
                EXPECT_NE(rep.faults[0].message.find("injected"), std::string::npos) << rep.faults[0].message;
                fi::clear();
            }
        }
    }
}

TEST_F(blas3_faults, EveryDeviceLostNamesEachCause) {
    context ctx("cpu:2@64KiB");
    for (device* d : ctx.devices()) {
        fi::faults f;
        f.fail_after_units = 0;
        fi::arm(*d, f);
    }
    host_matrix<double> a(60, 60), b(60, 40);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    try {
        blas3_call_options call;
        call.tile = 16;
        ctx.trmm<double>(side::left, uplo::lower, op::n, diag::unit, 1.0, a.view(), b.view(), call);
        FAIL() << "no error";
    } catch (const device_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("every device failed"), std::string::npos) << what;
        EXPECT_NE(what.find("cpu:0"), std::string::npos) << what;
        EXPECT_NE(what.find("cpu:1"), std::string::npos) << what;
    }
    fi::clear();
    // The devices work again afterwards.
    blas3_case g = one_of_each(64)[2];
    run_and_check<double>(ctx, g);
}

TEST_F(blas3_faults, CancelledFromAnotherThreadReturnsPromptly) {
    for (const char* spec : {"cpu:2@256KiB", "cpu:2"}) {
        context ctx(spec);
        const fi::slowdown slow({{ctx.devices()[0]->id(), 0.02}, {ctx.devices()[1]->id(), 0.02}});
        host_matrix<double> a(200, 200), b(200, 200), c(200, 200);
        fill_random(a.view(), 1);
        fill_random(c.view(), 3);
        std::atomic<bool> cancel{false};
        std::atomic<std::size_t> done{0};
        blas3_call_options call;
        call.tile = 16;
        call.run.cancel = &cancel;
        call.run.on_task_done = [&](std::size_t d, std::size_t) { done = d; };
        std::thread stopper([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            cancel = true;
        });
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_THROW(ctx.syrk<double>(uplo::lower, op::n, 1.0, a.view(), 0.0, c.view(), call), cancelled) << spec;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        stopper.join();
        EXPECT_LT(s, 1.0) << spec << ": 91 tasks of >= 20 ms each would take over 0.9 s per device";
        EXPECT_LT(done.load(), 91u);
        // The context runs again normally.
        blas3_case g = one_of_each(64)[4];
        run_and_check<double>(ctx, g);
    }
}

TEST(Blas3Engine, ProgressCountsEveryTaskAndSlowDevicesTakeFewer) {
    context ctx("cpu:2@128KiB");
    const fi::slowdown slow({{ctx.devices()[1]->id(), 0.01}});
    std::atomic<std::size_t> calls{0}, last{0}, total{0};
    blas3_call_options call;
    call.tile = 24;
    call.run.on_task_done = [&](std::size_t d, std::size_t t) {
        ++calls;
        last = std::max(last.load(), d);
        total = t;
    };
    blas3_case g = one_of_each(150)[3];  // symm: independent tasks
    const blas3_report rep = run_and_check<double>(ctx, g, call);
    EXPECT_EQ(calls.load(), rep.plan.tasks);
    EXPECT_EQ(last.load(), rep.plan.tasks);
    EXPECT_EQ(total.load(), rep.plan.tasks);
    ASSERT_EQ(rep.devices.size(), 2u);
    EXPECT_GT(rep.devices[0].units, rep.devices[1].units) << "the slowed device took as many tasks";
}

// In place on one CPU device the tasks' steps run on the calling thread (its compute stream is a
// calling_thread one): a task commits, and on_task_done runs, before the next task is taken, with
// no hand-off to a stream's thread (a 4 x 4 LU through the BLAS drop-in spent about 100 us in
// those). The numbers are checked against the reference as every other run's.
TEST(Blas3Engine, InPlaceOnOneCpuDeviceTheStepsRunOnTheCallingThread) {
    context ctx("cpu");
    for (const blas3_case& g : one_of_each(120)) {
        std::vector<std::thread::id> threads;
        blas3_call_options call;
        call.tile = 32;
        call.run.on_task_done = [&](std::size_t, std::size_t) { threads.push_back(std::this_thread::get_id()); };
        const blas3_report rep = run_and_check<double>(ctx, g, call);
        EXPECT_GT(rep.plan.tasks, 1u) << g.name();
        ASSERT_EQ(threads.size(), rep.plan.tasks) << g.name();
        for (const std::thread::id& t : threads) EXPECT_EQ(t, std::this_thread::get_id()) << g.name();
    }
    // LU's tasks likewise.
    host_matrix<double> a(150, 150, layout::col_major), lu(150, 150, layout::col_major);
    fill_random(a.view(), 5);
    std::memcpy(lu.data(), a.data(), sizeof(double) * std::size_t(a.size()));
    std::vector<index_t> ipiv(150);
    std::vector<std::thread::id> threads;
    getrf_call_options call;
    call.tile = 32;
    call.run.on_task_done = [&](std::size_t, std::size_t) { threads.push_back(std::this_thread::get_id()); };
    const getrf_report rep = ctx.getrf<double>(lu.view(), ipiv, call);
    EXPECT_EQ(rep.info, 0);
    ASSERT_EQ(threads.size(), rep.plan.tasks);
    EXPECT_GT(rep.plan.tasks, 1u);
    for (const std::thread::id& t : threads) EXPECT_EQ(t, std::this_thread::get_id());
    std::vector<int> piv32(150);
    for (std::size_t i = 0; i < 150; ++i) piv32[i] = int(ipiv[i]);
    ASSERT_EQ(detail::lapack_getrf<double>(150, 150, a.data(), 150, piv32.data()), 0);
    for (std::size_t i = 0; i < 150; ++i) EXPECT_EQ(ipiv[i], index_t(piv32[i])) << "pivot " << i;
    double worst = 0;
    for (index_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a.data()[i] - lu.data()[i]));
    EXPECT_LT(worst, 1e-10) << "the LU differs from LAPACK's";
}

/// A GPU beside the CPU (rates 50x apart): each device's measured GEMM rate is its rate for the
/// balance until it finishes a task, so the slow one takes no task that would end after the others
/// have done all of them (the first H100 run's multi-device GEMM lost 40x to that; the task engine
/// balanced the same way).
TEST(Blas3Engine, ADeviceMeasuredFarSlowerTakesNoTaskWhenTheOthersWouldFinishFirst) {
    context ctx("cpu:2@128KiB");
    blas3_call_options call;
    call.tile = 24;
    const blas3_case g = one_of_each(150)[3];  // symm: independent tasks
    testing::blas3_data<double> d = testing::make_blas3_data<double>(g);
    host_matrix<double> ref(d.c0.rows(), d.c0.cols(), d.c0.layout());
    std::memcpy(ref.data(), d.c0.data(), sizeof(double) * std::size_t(ref.size()));
    {
        blas3_operands<double> ro = d.ops(g);
        ro.c = ref.view();
        reference_blas3<double>(g.routine, g.flags, ro);
    }
    blas3_plan plan = ctx.plan(describe_blas3<double>(g.routine, g.flags, d.ops(g)), call);
    ASSERT_GT(plan.tasks, 4u);
    EXPECT_TRUE(plan.device_flops.empty()) << "CPU slices of one host are of one speed: nothing to measure";
    plan.device_flops = {1e12, 1e3};  // as if the second were measured at 1 kFLOP/s
    const blas3_report rep = ctx.execute<double>(plan, d.ops(g), call);
    ASSERT_EQ(rep.devices.size(), 2u);
    EXPECT_EQ(rep.devices[1].units, 0u);
    EXPECT_EQ(rep.devices[0].units, plan.tasks);
    const testing::blas3_comparison cmp = testing::compare_blas3<double>(g, d, ref.view());
    EXPECT_EQ(cmp.nonfinite, 0u);
    EXPECT_LE(cmp.error, testing::blas3_tolerance<double>(g));
}

TEST(Blas3Engine, MeasuredBytesAreThePredictedOnes) {
    // One device, tasks without dependencies and a cache too small to reuse across tasks: the
    // executor's order and the model's are the same, so are the bytes.
    for (blas3_case g : {one_of_each(160)[3], one_of_each(160)[4], one_of_each(160)[0]}) {
        context ctx("cpu@40KiB");
        blas3_call_options call;
        call.tile = 32;
        call.tile_free = 32;
        call.tile_k = 32;
        call.run.max_tasks_in_flight = 1;
        const blas3_report rep = run_and_check<double>(ctx, g, call);
        EXPECT_EQ(rep.bytes_h2d, rep.plan.bytes_h2d) << g.name();
        EXPECT_EQ(rep.bytes_d2h, rep.plan.bytes_d2h) << g.name();
        EXPECT_LE(rep.peak_device_bytes, rep.plan.peak_device_bytes);
        EXPECT_GT(rep.plan.bytes_h2d, 0u);
    }
}

TEST(Blas3Engine, PeerTilesComeFromOtherDevicesAndChangeNoBit) {
    // Three devices with small stores: a tile another device holds at the version asked for is
    // copied from there (peer tiles on; automatic on devices that do not address host memory,
    // such as OpenCL's), with the same bits as read from the host.
    std::vector<std::pair<const char*, bool>> specs = {{"cpu:3@96KiB", false}};
    std::string why;
    if (!testing::gpu_missing("opencl:0", why)) specs.push_back({"opencl:0x3@96KiB", true});
    for (const auto& [spec, automatic_copies] : specs) {
        SCOPED_TRACE(spec);
        context ctx(spec);
        std::size_t hits = 0, auto_hits = 0;
        for (const blas3_case& g : one_of_each(150)) {
            SCOPED_TRACE(std::string(spec) + " " + g.name());
            blas3_call_options call;
            call.tile = call.tile_free = call.tile_k = 32;
            std::vector<double> off_bits, on_bits, auto_bits;
            call.run.peer_tiles = peer_tile_mode::off;
            const blas3_report off = run_and_check<double>(ctx, g, call, &off_bits);
            EXPECT_EQ(off.peer_hits, 0u);
            call.run.peer_tiles = peer_tile_mode::on;
            const blas3_report on = run_and_check<double>(ctx, g, call, &on_bits);
            EXPECT_EQ(on.peer_hits > 0, on.bytes_from_peers > 0);
            hits += on.peer_hits;
            std::size_t by_device = 0;
            for (const device_share& d : on.devices) by_device += d.peer_hits;
            EXPECT_EQ(by_device, on.peer_hits);
            EXPECT_TRUE(on_bits == off_bits);
            call.run.peer_tiles = peer_tile_mode::automatic;
            const blas3_report automatic = run_and_check<double>(ctx, g, call, &auto_bits);
            if (!automatic_copies) EXPECT_EQ(automatic.peer_hits, 0u);
            auto_hits += automatic.peer_hits;
            EXPECT_TRUE(auto_bits == off_bits);
        }
        // Which device takes which task depends on timing (one may take them all on a loaded
        // machine): counted over the six routines.
        EXPECT_GT(hits, 0u);
        if (automatic_copies) EXPECT_GT(auto_hits, 0u);
    }
}

TEST(Blas3Engine, DiagonalTilesGoBackWholeFromADeviceWithoutHostAccess) {
    // A SYRK-family diagonal tile leaves a device that cannot address host memory whole: loaded
    // first (also when beta = 0, so its other triangle holds the caller's values), then one copy
    // back, instead of a copy to host staging and a host-side merge of its triangle ("d2h
    // triangle"). CPU devices keep copying the triangle out directly. The model counts the loads.
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    const auto merges = [](const trace_recorder& rec) {
        const std::vector<trace_span> spans = rec.spans();
        return std::count_if(spans.begin(), spans.end(), [](const trace_span& s) { return s.name == "d2h triangle"; });
    };
    for (blas3_case g : {one_of_each(160)[4], one_of_each(160)[5]}) {  // syrk beta = 0, syr2k beta = 1.5
        blas3_call_options call;
        call.tile = 32;
        call.tile_k = 32;
        call.run.max_tasks_in_flight = 1;
        trace_recorder on_cpu, on_opencl;
        call.run.trace = &on_cpu;
        context cpu("cpu@96KiB");
        const blas3_report host = run_and_check<double>(cpu, g, call);
        call.run.trace = &on_opencl;
        context ocl("opencl:0@96KiB", {.kernel = gemm_kernel::vendor});
        const blas3_report dev = run_and_check<double>(ocl, g, call);
        EXPECT_EQ(merges(on_cpu), 3) << g.name();  // diagonal tiles of 32, 32 and 2 (n = 66 or 70)
        EXPECT_EQ(merges(on_opencl), 0) << g.name();
        EXPECT_EQ(dev.bytes_h2d, dev.plan.bytes_h2d) << g.name();
        EXPECT_EQ(dev.bytes_d2h, dev.plan.bytes_d2h) << g.name();
        // beta = 0: the diagonal tiles are loaded too, which the CPU device does not need.
        const std::size_t diagonal = (32 * 32 * 2 + (g.n - 64) * (g.n - 64)) * sizeof(double);
        EXPECT_EQ(dev.plan.bytes_h2d, host.plan.bytes_h2d + (g.beta == 0 ? diagonal : 0)) << g.name();
    }
}

// With several devices each loaded output is copied aside on the host before its task starts (for a
// rerun elsewhere after a fault): one span per task on the trace's "backups (host)" lane, its bytes
// the output tile's; the executor's streams carry their roles. One device takes no backups.
TEST(Blas3Engine, BackupsOfTaskOutputsAreTraced) {
    const blas3_case g = one_of_each(160)[5];  // syr2k, beta = 1.5: every tile of C is loaded
    ASSERT_NE(g.beta, 0.0);
    blas3_call_options call;
    call.tile = 32;
    call.tile_k = 32;
    for (const char* spec : {"cpu:2@96KiB", "cpu@96KiB"}) {
        trace_recorder rec;
        call.run.trace = &rec;
        context ctx(spec);
        const blas3_report rep = run_and_check<double>(ctx, g, call);
        std::size_t backups = 0, bytes = 0;
        std::set<std::string> roles;
        for (const trace_span& s : rec.spans()) {
            roles.insert(s.role);
            if (s.role != "backups (host)") continue;
            EXPECT_EQ(s.stream, -1);
            EXPECT_EQ(s.name, "backup of task outputs");
            ++backups;
            bytes += s.bytes;
        }
        EXPECT_TRUE(roles.count("copy in") && roles.count("compute") && roles.count("copy out")) << spec;
        if (rep.devices.size() == 1) {
            EXPECT_EQ(backups, 0u) << spec;
            continue;
        }
        // C's tiles in the lower triangle of blocks, of 32, 32 and n - 64 rows: one task each.
        const std::size_t r[3] = {32, 32, std::size_t(g.n - 64)};
        std::size_t tiles = 0;
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j <= i; ++j) tiles += r[i] * r[j] * sizeof(double);
        EXPECT_EQ(backups, rep.plan.graph->tasks.size()) << spec;
        EXPECT_EQ(bytes, tiles) << spec;
    }
}

// Those triangles come back from a device without host access through staging and a merge on the
// host's copy-out stream: the model prices the merge at device_rates::host_merge, and the context
// measures that rate where a SYRK-family call shares several devices, one of them without host access.
TEST(Blas3Engine, TriangleMergesOnTheHostArePriced) {
    namespace e = detail::engine;
    host_matrix<double> a(70, 40), c(70, 70);
    const blas3_problem p = describe_blas3<double>(blas3_routine::syrk, {side::left, uplo::lower, op::n, diag::non_unit},
                                                   {1.0, 0.0, a.view(), {}, c.view()});
    detail::routines::build_settings s;
    s.tile = s.tile_free = 32;
    s.tile_k = 16;
    s.whole_diagonal_tiles = true;
    s.devices = 2;
    const e::task_graph g = detail::routines::build_tasks(p, s);
    double triangle_bytes = 0;
    for (const e::tile_task& t : g.tasks)
        for (const e::task_output& o : t.outputs)
            if (o.region != e::tile_region::full) triangle_bytes += double(g.tile_bytes(o.tile));
    ASSERT_EQ(triangle_bytes, double((32 * 32 * 2 + 6 * 6) * 8));  // 70 = 32 + 32 + 6
    e::model_settings m;
    m.rates.h2d = m.rates.d2h = 10e9;
    m.rates.flops = 1e12;
    m.slots = 64;
    const e::model_result plain = e::model_run(g, m);
    m.rates.host_merge = 1e6;  // slow enough to dominate the copy-out stream
    const e::model_result merged = e::model_run(g, m);
    EXPECT_NEAR(merged.d2h_seconds - plain.d2h_seconds, triangle_bytes / 1e6, 1e-9);
    EXPECT_GT(merged.seconds, plain.seconds);
    EXPECT_EQ(merged.bytes_d2h, plain.bytes_d2h);
}

TEST(Blas3Engine, DiagonalTilesNotReadGoBackWholeOnlyOnOneDevice) {
    // Where several devices share a call, a task's loaded outputs are kept aside on the host for a
    // rerun elsewhere: a diagonal tile loaded only for its other triangle (beta = 0) would pay that
    // copy, so it keeps its triangle's write-back; one read anyway (beta != 0) goes back whole.
    namespace e = detail::engine;
    for (double beta : {0.0, 1.5}) {
        host_matrix<double> a(70, 40), c(70, 70);
        const blas3_problem p = describe_blas3<double>(blas3_routine::syrk, {side::left, uplo::upper, op::n, diag::non_unit},
                                                       {1.0, beta, a.view(), {}, c.view()});
        detail::routines::build_settings s;
        s.tile = s.tile_free = 32;
        s.tile_k = 16;
        const e::task_graph plain = detail::routines::build_tasks(p, s);
        s.whole_diagonal_tiles = true;
        for (int devices : {1, 2}) {
            s.devices = devices;
            const e::task_graph g = detail::routines::build_tasks(p, s);
            ASSERT_EQ(g.tasks.size(), plain.tasks.size());
            int whole = 0, triangles = 0;
            for (std::size_t t = 0; t < g.tasks.size(); ++t) {
                const e::task_output& before = plain.tasks[t].outputs.at(0);
                const e::task_output& after = g.tasks[t].outputs.at(0);
                if (before.region == e::tile_region::full) {
                    EXPECT_EQ(after.region, e::tile_region::full);
                    EXPECT_EQ(after.load, before.load);
                    continue;
                }
                EXPECT_EQ(before.region, e::tile_region::upper);
                EXPECT_EQ(before.load, beta != 0);
                if (after.region == e::tile_region::full) {
                    EXPECT_TRUE(after.load);
                    ++whole;
                } else {
                    EXPECT_EQ(after.load, before.load);
                    ++triangles;
                }
            }
            const bool goes_whole = devices == 1 || beta != 0;
            EXPECT_EQ(whole, goes_whole ? 3 : 0) << "beta " << beta << ", " << devices << " device(s)";
            EXPECT_EQ(triangles, goes_whole ? 0 : 3) << "beta " << beta << ", " << devices << " device(s)";
        }
    }
}

TEST(Blas3Engine, OutOfCoreSearchStopsEarlyAndFindsTheFastestTilingOfAll) {
    // Out of core the planner descends from the largest tile and stops once smaller ones stop
    // paying: it must model fewer tilings than there are, and still pick a plan as fast as the
    // best of every tile size and order planned one at a time.
    device_rates rates;
    rates.h2d = 12e9;
    rates.d2h = 12e9;
    rates.flops = 60e9;
    rates.measured = true;
    const std::size_t budget = std::size_t(3) << 20;
    for (blas3_routine r : {blas3_routine::trsm, blas3_routine::syrk, blas3_routine::trmm}) {
        const bool rk = r == blas3_routine::syrk;
        host_matrix<std::complex<double>> a(rk ? 600 : 700, rk ? 300 : 700), c(rk ? 600 : 700, rk ? 600 : 180);
        blas3_operands<std::complex<double>> ops;
        ops.a = a.view();
        ops.c = c.view();
        if (!rk) ops.b = {};
        const blas3_problem q = describe_blas3<std::complex<double>>(r, {}, ops);
        blas3_options opt;
        const blas3_plan p = plan_blas3(q, budget, rates, opt);
        EXPECT_GT(p.tilings_modelled, 0) << to_string(r);
        double best = 0;
        // The tilings an exhaustive search models: square, and (not the SYRK family) twice as long
        // along the free dimension.
        std::set<std::tuple<index_t, index_t, blas3_order>> fitting;
        for (index_t t : {16, 32, 64, 96, 128, 192, 256, 384, 512, 768})
            for (index_t free : {t, rk ? t : 2 * t}) {
                for (blas3_order o : {blas3_order::left_looking, blas3_order::right_looking}) {
                    blas3_options one = opt;
                    one.tile = one.tile_k = t;
                    one.tile_free = free;
                    one.order = o;
                    try {
                        const blas3_plan f = plan_blas3(q, budget, rates, one);
                        fitting.insert({f.tile, f.tile_free, f.order});
                        if (best == 0 || f.predicted_seconds < best) best = f.predicted_seconds;
                    } catch (const error&) {
                        // does not fit, or this routine has one order
                    }
                }
            }
        ASSERT_GT(best, 0) << to_string(r);
        EXPECT_LT(std::size_t(p.tilings_modelled), fitting.size()) << to_string(r);
        EXPECT_LE(p.tilings_modelled, p.tilings_possible) << to_string(r);
        EXPECT_LE(p.predicted_seconds, best * 1.01) << to_string(r) << ": tile " << p.tile;
        EXPECT_NE(explain(p).find("tilings"), std::string::npos) << explain(p);
    }
}

/// The planner's choice out of core with a quarter of A and B, on a device computing with the
/// host's cores, and the same call at square tiles of the chosen size.
template <class T>
std::pair<blas3_plan, blas3_plan> quarter_budget_plans(blas3_routine r, side s, index_t n) {
    device_rates rates;
    rates.h2d = rates.d2h = 10e9;
    rates.flops = 100e9;
    rates.measured = true;
    rates.host_memory = true;
    host_matrix<T> a(n, n), b(n, n);
    blas3_operands<T> ops;
    ops.a = a.view();
    ops.c = b.view();
    blas3_flags f;
    f.side = s;
    f.uplo = s == side::left ? uplo::lower : uplo::upper;
    const blas3_problem q = describe_blas3<T>(r, f, ops);
    const std::size_t budget = 2 * std::size_t(n) * std::size_t(n) * sizeof(T) / 4;
    const blas3_plan chosen = plan_blas3(q, budget, rates, {});
    blas3_options square;
    square.tile = square.tile_free = chosen.tile;
    square.order = chosen.order;
    return {chosen, plan_blas3(q, budget, rates, square)};
}

TEST(Blas3Engine, OutOfCoreTilesMayBeLongerAlongTheFreeDimension) {
    // Out of core on host cores, a TRMM/TRSM tile twice as long along B's free dimension halves the
    // GEMM calls and their packing: the planner considers it and takes it where it models faster.
    const auto check = [](const std::pair<blas3_plan, blas3_plan>& p, const char* what) {
        EXPECT_EQ(p.first.tile_free, 2 * p.first.tile) << what << "\n" << explain(p.first);
        EXPECT_LT(p.first.predicted_seconds, p.second.predicted_seconds) << what << "\n" << explain(p.second);
    };
    check(quarter_budget_plans<double>(blas3_routine::trmm, side::left, 1024), "trmm left f64");
    check(quarter_budget_plans<double>(blas3_routine::trsm, side::right, 1024), "trsm right f64");
    check(quarter_budget_plans<std::complex<double>>(blas3_routine::trsm, side::left, 512), "trsm left c64");
    check(quarter_budget_plans<float>(blas3_routine::trmm, side::right, 1024), "trmm right f32");
}

TEST(Blas3Engine, ExplainComparesLeftAndRightLookingTraffic) {
    context ctx("cpu:2@1MiB");
    host_matrix<double> a(512, 512), b(512, 128);
    blas3_operands<double> ops;
    ops.a = a.view();
    ops.c = b.view();
    const blas3_plan p = ctx.plan(describe_blas3<double>(blas3_routine::trsm, {}, ops));
    const std::string text = ctx.explain(p);
    EXPECT_NE(text.find("left-looking"), std::string::npos) << text;
    EXPECT_NE(text.find("right-looking"), std::string::npos) << text;
    ASSERT_EQ(p.alternatives.size(), 2u);
    // Right-looking writes each tile of B once per update: more bytes back to the host.
    const auto& left = p.alternatives[0].order == blas3_order::left_looking ? p.alternatives[0] : p.alternatives[1];
    const auto& right = p.alternatives[0].order == blas3_order::right_looking ? p.alternatives[0] : p.alternatives[1];
    EXPECT_GT(right.bytes_d2h, left.bytes_d2h) << text;
}

TEST(Blas3Engine, KeptOperandsTilesAreReusedAcrossCalls) {
    // A (kept) in a cache large enough for all its tiles: the second solve loads none of them.
    context ctx("cpu@1MiB");
    const index_t n = 160;
    host_matrix<double> a(n, n, layout::col_major);
    fill_random(a.view(), 1);
    for (index_t i = 0; i < n; ++i) a(i, i) = 4.0;
    blas3_call_options call;  // the same tiles (and slot size) for every call below
    call.tile = 32;
    call.tile_free = 32;
    call.tile_k = 32;
    const auto solve = [&](std::uint64_t seed) {
        host_matrix<double> b(n, 40, layout::col_major), x(n, 40, layout::col_major);
        fill_random(b.view(), seed);
        std::memcpy(x.data(), b.data(), sizeof(double) * std::size_t(b.size()));
        const blas3_report r = ctx.trsm<double>(side::left, uplo::lower, op::n, diag::non_unit, 1.0, a.view(), x.view(), call);
        blas3_operands<double> in;
        in.a = a.view();
        in.c = b.view();
        EXPECT_TRUE(check_blas3<double>(blas3_routine::trsm, {}, in, x.view()).passed);
        return r;
    };
    const blas3_report cold = solve(2);
    EXPECT_EQ(cold.kept_hits, 0u);
    kept_operand ka = ctx.keep(a.view());
    solve(3);  // loads A's tiles, from a kept operand now
    const blas3_report warm = solve(4);
    EXPECT_GT(warm.kept_hits, 0u);
    EXPECT_LT(warm.bytes_h2d, cold.bytes_h2d);
    ka.changed();  // A "written": nothing of it is reused
    for (index_t i = 0; i < n; ++i) a(i, i) = 5.0;
    const blas3_report after = solve(5);
    EXPECT_EQ(after.kept_hits, 0u);
    // A call writing into a kept operand (as B of trsm) changes it: a later call reading it (as A of
    // syrk) loads it again, where without that write it would not.
    ka.reset();
    host_matrix<double> x(n, 40, layout::col_major), c(n, n, layout::col_major);
    fill_random(x.view(), 6);
    kept_operand kx = ctx.keep(x.view());
    const auto syrk = [&] { return ctx.syrk<double>(uplo::lower, op::n, 1.0, x.view(), 0.0, c.view(), call); };
    syrk();
    EXPECT_GT(syrk().kept_hits, 0u);
    ctx.trsm<double>(side::left, uplo::lower, op::n, diag::non_unit, 1.0, a.view(), x.view(), call);
    EXPECT_EQ(syrk().kept_hits, 0u) << "tiles of x read before trsm overwrote it were reused";
}

TEST(TileOps, CublasPlanScalesWithoutReadingAWhenAlphaIsZero) {
    tile_op op;
    op.kind = tile_kind::trsm;
    op.type = dtype::f64;
    op.m = 5;
    op.n = 7;
    op.alpha = 0.0;
    op.c.ld = 5;
    const cuda::cublas_tile_work w = cuda::plan_cublas_tile(op, "cuda:0");
    EXPECT_TRUE(w.scale_only);
    EXPECT_EQ(w.scale.beta, 0.0);
    op.kind = tile_kind::syrk;
    op.alpha = 1.0;
    op.k = 0;
    op.beta = 1.0;
    EXPECT_TRUE(cuda::plan_cublas_tile(op, "cuda:0").nothing);  // BLAS's quick return
    op.k = 3;
    op.a.ld = 5;
    op.c.lay = layout::row_major;
    op.a.lay = layout::row_major;
    const cuda::cublas_tile_work m = cuda::plan_cublas_tile(op, "cuda:0");
    ASSERT_TRUE(m.call.representable);
    EXPECT_EQ(m.call.uplo_, uplo::upper);  // a row-major lower triangle is a column-major upper one
    EXPECT_EQ(m.call.trans, blas_trans::trans);
}

TEST(TileOps, BlockedTrsmLeavesSmallSolvesAndZeroAlphaWhole) {
    tile_op o;
    o.kind = tile_kind::trsm;
    o.type = dtype::f64;
    o.m = 64;
    o.n = 300;
    o.a.ld = o.c.ld = 300;
    EXPECT_EQ(detail::engine::blocked_trsm(o, 64).size(), 1u);   // the triangle fits one block
    EXPECT_EQ(detail::engine::blocked_trsm(o, 0).size(), 1u);    // blocking off
    EXPECT_EQ(detail::engine::blocked_trsm(o, 16).size(), 7u);   // 4 solves, 3 updates
    o.alpha = 0.0;
    EXPECT_EQ(detail::engine::blocked_trsm(o, 16).size(), 1u);   // C <- 0, nothing read
    o.alpha = 1.0;
    o.side = side::right;
    EXPECT_EQ(detail::engine::blocked_trsm(o, 128).size(), 5u);  // 300 = 128 + 128 + 44
    o.kind = tile_kind::trmm;
    EXPECT_EQ(detail::engine::blocked_trsm(o, 16).size(), 1u);
}

/// blocked_diagonal's steps for trsm, trmm, symm and hemm (complex), run one by one on the
/// reference, compute what one reference call computes: every side, triangle, op and diag (trsm,
/// trmm), layout, blocks that do not divide the triangle, padded leading dimensions (left NaN), NaN
/// in A's other triangle (and on a unit diagonal), and for symm/hemm beta 0 on a NaN C (never read)
/// beside a beta that is not. trsm's A is diagonally dominant (well conditioned).
template <class T>
void blocked_diagonal_matches_one_call(tile_kind kind) {
    using testing::nan_value;
    using testing::random_value;
    std::mt19937_64 rng(93);
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    const bool complex = is_complex_v<T>;
    const std::complex<double> alpha = complex ? std::complex<double>(0.7, -0.3) : std::complex<double>(0.7);
    // (A unit triangle's solve grows rounding with its off-diagonal entries: 1.1e-13 seen in f64.)
    const double tol = std::is_same_v<real_type_t<T>, float> ? 2e-5 : kind == tile_kind::trsm ? 1e-12 : 1e-13;
    const bool tri = kind == tile_kind::trmm || kind == tile_kind::trsm;
    const std::vector<op> ops = tri ? std::vector<op>{op::n, op::t, op::c} : std::vector<op>{op::n};
    const std::vector<diag> diags = tri ? std::vector<diag>{diag::non_unit, diag::unit} : std::vector<diag>{diag::non_unit};
    const std::vector<std::complex<double>> betas =
        tri ? std::vector<std::complex<double>>{0.0} : std::vector<std::complex<double>>{0.0, {0.4, complex ? 0.2 : 0.0}};
    int cases = 0;
    for (side sd : {side::left, side::right})
        for (uplo ul : {uplo::lower, uplo::upper})
            for (op tr : ops)
                for (diag dg : diags)
                    for (const std::complex<double>& beta : betas)
                        for (layout lay : {layout::col_major, layout::row_major}) {
                            const index_t m = sd == side::left ? 37 : 19, n = sd == side::left ? 13 : 41;
                            const index_t order = sd == side::left ? m : n, block = sd == side::left ? 8 : 16;
                            const auto ld_of = [&](index_t rows, index_t cols) {
                                return (lay == layout::col_major ? rows : cols) + 3;
                            };
                            const auto at = [&](index_t ld, index_t i, index_t j) {
                                return std::size_t(lay == layout::col_major ? i + j * ld : i * ld + j);
                            };
                            const index_t lda = ld_of(order, order), ldc = ld_of(m, n);
                            std::vector<T> a(std::size_t(lda * order), nan_value<T>());
                            for (index_t i = 0; i < order; ++i)
                                for (index_t j = 0; j < order; ++j)
                                    if ((ul == uplo::lower ? j <= i : j >= i) && !(i == j && dg == diag::unit))
                                        a[at(lda, i, j)] = random_value<T>(uni, rng) +
                                                           (i == j && kind == tile_kind::trsm ? T(real_type_t<T>(order)) : T(0));
                            const std::size_t c_size = std::size_t(ldc * (lay == layout::col_major ? n : m));
                            std::vector<T> b(c_size, nan_value<T>()), c(c_size, nan_value<T>());
                            for (index_t i = 0; i < m; ++i)
                                for (index_t j = 0; j < n; ++j) {
                                    b[at(ldc, i, j)] = random_value<T>(uni, rng);
                                    // trmm reads C; symm/hemm with beta 0 must not.
                                    if (tri || beta != 0.0) c[at(ldc, i, j)] = random_value<T>(uni, rng);
                                }
                            tile_op o;
                            o.kind = kind;
                            o.type = dtype_of<T>();
                            o.side = sd;
                            o.uplo = ul;
                            o.trans_a = tr;
                            o.diag = dg;
                            o.m = m;
                            o.n = n;
                            o.alpha = alpha;
                            o.beta = beta;
                            o.a = {a.data(), lda, lay};
                            if (!tri) o.b = {b.data(), ldc, lay};
                            std::vector<T> want = c, got = c;
                            o.c = {want.data(), ldc, lay};
                            reference::execute(o);
                            o.c = {got.data(), ldc, lay};
                            const std::vector<tile_op> steps = detail::engine::blocked_diagonal(o, block);
                            const index_t blocks = (order + block - 1) / block;
                            ASSERT_EQ(steps.size(), std::size_t(tri ? 2 * blocks - 1 : 3 * blocks - 2));
                            for (const tile_op& s : steps) reference::execute(s);
                            double worst = 0;
                            for (std::size_t e = 0; e < got.size(); ++e) {
                                const bool padding = lay == layout::col_major ? index_t(e) % ldc >= m : index_t(e) % ldc >= n;
                                if (padding) {
                                    ASSERT_TRUE(std::isnan(std::abs(got[e]))) << "padding written at " << e;
                                    continue;
                                }
                                ASSERT_FALSE(std::isnan(std::abs(got[e]))) << "NaN at " << e << " (a NaN read?)";
                                worst = std::max(worst, double(std::abs(got[e] - want[e])) / (1.0 + double(std::abs(want[e]))));
                            }
                            EXPECT_LT(worst, tol) << to_string(kind) << " " << to_string(sd) << " " << to_string(ul) << " "
                                                  << to_string(tr) << " " << to_string(dg) << " beta " << beta << " "
                                                  << to_string(lay);
                            ++cases;
                        }
    EXPECT_EQ(cases, tri ? 48 : 16);
}

TEST(TileOps, BlockedDiagonalStepsComputeWhatOneCallComputes) {
    for (tile_kind k : {tile_kind::trsm, tile_kind::trmm, tile_kind::symm}) {
        blocked_diagonal_matches_one_call<float>(k);
        blocked_diagonal_matches_one_call<double>(k);
        blocked_diagonal_matches_one_call<std::complex<float>>(k);
        blocked_diagonal_matches_one_call<std::complex<double>>(k);
    }
    blocked_diagonal_matches_one_call<std::complex<float>>(tile_kind::hemm);
    blocked_diagonal_matches_one_call<std::complex<double>>(tile_kind::hemm);
}

TEST(TileOps, BlockedDiagonalSplitsOnlyItsKindsAndPricesTheirShare) {
    tile_op o;
    o.type = dtype::f64;
    o.m = 300;
    o.n = 64;
    o.a.ld = o.b.ld = o.c.ld = 300;
    o.beta = 1.0;
    for (tile_kind k : {tile_kind::syrk, tile_kind::potrf, tile_kind::gemm, tile_kind::getrf}) {
        o.kind = k;
        EXPECT_EQ(detail::engine::blocked_diagonal(o, 16).size(), 1u) << to_string(k);
        EXPECT_FALSE(detail::engine::blockable(k));
    }
    o.kind = tile_kind::trmm;
    EXPECT_EQ(detail::engine::blocked_diagonal(o, 128).size(), 5u);  // 300 = 128 + 128 + 44
    o.kind = tile_kind::symm;
    EXPECT_EQ(detail::engine::blocked_diagonal(o, 128).size(), 7u);  // 3 symm, 4 gemm
    EXPECT_EQ(detail::engine::blocked_diagonal(o, 300).size(), 1u);
    o.alpha = 0.0;
    EXPECT_EQ(detail::engine::blocked_diagonal(o, 16).size(), 1u);  // C <- beta C, A and B unread
    EXPECT_DOUBLE_EQ(detail::engine::blocked_diagonal_share(300, 128), (2.0 * 128 * 128 + 44 * 44) / (300.0 * 300.0));
    EXPECT_DOUBLE_EQ(detail::engine::blocked_diagonal_share(256, 128), 0.5);
    EXPECT_DOUBLE_EQ(detail::engine::blocked_diagonal_share(100, 128), 1.0);
    EXPECT_DOUBLE_EQ(detail::engine::blocked_diagonal_share(100, 0), 1.0);
}

// The model prices a split step's diagonal blocks at the vendor rate and the rest at the GEMM
// rate, its triangle's order taken from m (left) or n (right), and one fixed cost per call.
TEST(TileOps, TheModelPricesASplitStepByItsBlocks) {
    detail::engine::task_graph g;
    device_rates r;
    r.flops = 10e9;
    r.diagonal_flops = 2e9;
    r.diagonal_block = 256;
    r.op_overhead = 1e-3;
    for (tile_kind k : {tile_kind::trsm, tile_kind::trmm, tile_kind::symm})
        for (side sd : {side::left, side::right}) {
            detail::engine::task_step st;
            st.op.kind = k;
            st.op.type = dtype::f64;
            st.op.side = sd;
            st.op.m = sd == side::left ? 1024 : 100;  // the order 1024, the other dimension 100
            st.op.n = sd == side::left ? 100 : 1024;
            const double f = st.op.flops();
            const double calls = k == tile_kind::symm ? 3 * 4 - 2 : 2 * 4 - 1;  // 4 blocks
            EXPECT_NEAR(detail::engine::step_seconds(g, st, r), f * (0.25 / 2e9 + 0.75 / 10e9) + calls * 1e-3, 1e-9)
                << to_string(k) << " " << to_string(sd);
            detail::engine::task_graph one;
            one.tasks.push_back({{}, {st}});
            EXPECT_TRUE(detail::engine::splits_diagonal_tiles(one, r));
            device_rates whole = r;
            whole.diagonal_block = 0;  // not split: all of it at the vendor rate, one call
            EXPECT_NEAR(detail::engine::step_seconds(g, st, whole), f / 2e9 + 1e-3, 1e-9);
            EXPECT_FALSE(detail::engine::splits_diagonal_tiles(one, whole));
        }
}

TEST(TileOps, CudaTrsmBlockComesFromTheEnvironmentOrIsAClearError) {
    EXPECT_EQ(cuda::trsm_block_from(nullptr), cuda::default_trsm_block);
    EXPECT_EQ(cuda::trsm_block_from(""), cuda::default_trsm_block);
    EXPECT_EQ(cuda::trsm_block_from("0"), 0);
    EXPECT_EQ(cuda::trsm_block_from("128"), 128);
    for (const char* bad : {"-1", "12x", "x", "65537", " 64"}) {
        try {
            (void)cuda::trsm_block_from(bad);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("TILESTREAM_CUDA_TRSM_BLOCK"), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {
/// Scripted GEMM probes: the CPU devices (and the host) measure `cpu` FLOP/s, the others `other`
/// (seconds for each probe's shape: probes differ in shape).
detail::scripted_kernel_probes cpu_and_other_rates(double cpu, double other) {
    return detail::scripted_kernel_probes(
        [cpu, other](const detail::scripted_kernel_probes::request& r) {
            const bool on_cpu = r.where.rfind("cpu", 0) == 0 || r.where == "host";
            const double s = 2.0 * double(r.shape.m) * double(r.shape.n) * double(r.shape.k) / (on_cpu ? cpu : other);
            detail::probe_timings p;
            for (int k = 0; k < 2; ++k) p.seconds.push_back({s, s, s});
            p.notes.resize(2);
            return p;
        },
        3600);
}

// A device whose measured GEMM rate is a twentieth of another's or less takes no task while that
// one works: on an H200 host, syrk f64 8192 on cuda:0,cpu took 0.41 s with the CPU holding 2 of 36
// tasks (0.015 s for 4096 on the GPU alone). Scripted probes make opencl:0 (PoCL) 30 times
// slower than the CPU device here; the other way round, the CPU is the one left out.
TEST(Blas3Balance, AFarSlowerDeviceTakesNoTask) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (bool cpu_fast : {true, false}) {
        const detail::scripted_kernel_probes probes = cpu_fast ? cpu_and_other_rates(30e12, 1e12) : cpu_and_other_rates(1e12, 30e12);
        context ctx("cpu@64MiB,opencl:0@64MiB");
        const index_t n = 700, k = 300;
        host_matrix<double> a(n, k, layout::col_major), c(n, n, layout::col_major);
        fill_random(a.view(), 11);
        blas3_call_options call;
        call.tile = 64;  // 66 tasks: the slower device's one task would end before the faster one's whole share
        const blas3_report rep = ctx.syrk<double>(uplo::lower, op::n, 1.0, a.view(), 0.0, c.view(), call);
        ASSERT_EQ(rep.devices.size(), 2u);
        const std::size_t slow = cpu_fast ? 1 : 0;
        EXPECT_EQ(rep.devices[slow].units, 0u) << rep.devices[slow].id << " took tasks (cpu fast: " << cpu_fast
                                               << ")\n" << ctx.explain(rep.plan);
        EXPECT_GT(rep.devices[1 - slow].units, 0u);
        // The model plans for the device that works: its bytes are the measured ones, and the
        // plan of that device alone (it once modelled two devices at half the rate, each with its
        // own cache: twice the loads on an H200 beside its CPU, 562 MB predicted against 281).
        EXPECT_EQ(rep.bytes_h2d, rep.plan.bytes_h2d) << ctx.explain(rep.plan);
        EXPECT_EQ(rep.plan.devices, 2);
        if (!cpu_fast) continue;  // alone, opencl:0 would write unread diagonal tiles back whole
        context alone("cpu@64MiB");
        const blas3_plan one = alone.plan(rep.plan.problem, call);
        EXPECT_EQ(one.bytes_h2d, rep.plan.bytes_h2d) << alone.explain(one) << ctx.explain(rep.plan);
        EXPECT_EQ(one.bytes_d2h, rep.plan.bytes_d2h);
        EXPECT_NEAR(one.predicted_seconds, rep.plan.predicted_seconds, 1e-6 * one.predicted_seconds);
    }
}

// GEMM sizes its units for the devices that take work: a device 30 times slower than the other
// takes none, so C is not cut for it (on an H200 host, cuda:0,cpu got twice the units, each one
// reading all of B again: 0.39 s against 0.20 s on cuda:0 alone). With two equal devices the same
// product is cut in two or more units; with the slow one, in the units of the fast one alone.
TEST(GemmBalance, AFarSlowerDeviceIsNotPlannedFor) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    const index_t n = 512;  // 1024 at 64 MiB until 2026-11-29: the same plans, the check took 6 s
    host_matrix<double> a(n, n, layout::col_major), b(n, n, layout::col_major), c(n, n, layout::col_major),
        c0(n, n, layout::col_major);
    fill_random(a.view(), 21);
    fill_random(b.view(), 22);
    fill_random(c0.view(), 23);  // beta = 0: never read
    const gemm_problem q = describe_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view());
    std::size_t units[3] = {};  // opencl:0 30x slower, both equal, the CPU alone
    for (int mode : {0, 1, 2}) {
        const detail::scripted_kernel_probes probes = cpu_and_other_rates(30e12, mode == 1 ? 30e12 : 1e12);
        context ctx(mode == 2 ? "cpu@16MiB" : "cpu@16MiB,opencl:0@16MiB");
        gemm_call_options call;
        call.rates = std::nullopt;
        const gemm_plan p = ctx.plan(q, call);
        EXPECT_EQ(p.devices, mode == 2 ? 1 : 2) << ctx.explain(p);
        units[mode] = p.units;
        if (mode == 0) {  // and the run: the slow device takes nothing, C is right
            std::fill(c.data(), c.data() + c.size(), std::nan(""));  // poisoned: unwritten elements fail
            const gemm_report rep = ctx.execute<double>(p, 1.0, a.view(), b.view(), 0.0, c.view());
            ASSERT_EQ(rep.devices.size(), 2u);
            EXPECT_EQ(rep.devices[1].units, 0u) << ctx.explain(p);
            EXPECT_LE(gemm_relative_error<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c0.view(), c.view()),
                      gemm_tolerance(dtype::f64, n));
        }
    }
    EXPECT_GE(units[1], 2u);
    EXPECT_EQ(units[0], units[2]);
    EXPECT_LT(units[0], units[1]);
    // Row panels asked for are dealt to the slow device too: they stay on the pipeline (the task
    // engine would pin them there while its model counts the devices as identical). A smaller
    // product at a smaller budget, still cut in panels: the slow device (PoCL in CI) computes its
    // share of it (1024^3 on PoCL and its check took 17 of this test's 20 s, 60 s under ASan).
    const index_t m2 = 301, n2 = 203, k2 = 257;
    host_matrix<double> a2(m2, k2, layout::col_major), b2(k2, n2, layout::col_major), c2(m2, n2, layout::col_major),
        c20(m2, n2, layout::col_major);
    fill_random(a2.view(), 24);
    fill_random(b2.view(), 25);
    fill_random(c20.view(), 26);
    const gemm_problem q2 = describe_gemm<double>(op::n, op::n, 1.0, a2.view(), b2.view(), 0.0, c2.view());
    const detail::scripted_kernel_probes probes = cpu_and_other_rates(30e12, 1e12);
    context ctx("cpu@256KiB,opencl:0@256KiB");
    gemm_call_options call;
    call.rates = std::nullopt;
    call.strategy = gemm_strategy::row_panels;
    const gemm_plan p = ctx.plan(q2, call);
    EXPECT_TRUE(p.static_assignment) << ctx.explain(p);
    EXPECT_EQ(p.engine, gemm_engine::pipeline) << ctx.explain(p);
    EXPECT_GE(p.units, 2u) << ctx.explain(p);
    std::fill(c2.data(), c2.data() + c2.size(), std::nan(""));
    const gemm_report rep = ctx.execute<double>(p, 1.0, a2.view(), b2.view(), 0.0, c2.view());
    ASSERT_EQ(rep.devices.size(), 2u);
    EXPECT_GE(rep.devices[1].units, 1u) << "dealt to the slow device too\n" << ctx.explain(p);
    EXPECT_LE(gemm_relative_error<double>(op::n, op::n, 1.0, a2.view(), b2.view(), 0.0, c20.view(), c2.view()),
              gemm_tolerance(dtype::f64, k2));
}

// A call small enough for the host's direct path, on devices of which one is far slower, runs:
// the direct plan once kept the working devices' count (1 of 2) and its run refused it ("the plan
// is for 1 device(s), this context has 2": `gemm --devices all` on an H200 host).
TEST(GemmBalance, TheDirectPathBesideAFarSlowerDeviceRuns) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    const detail::scripted_kernel_probes probes = cpu_and_other_rates(30e12, 1e12);
    context ctx("cpu,opencl:0");  // an unbudgeted CPU device, as `--devices all` names it
    host_matrix<double> a(37, 23, layout::col_major), b(23, 29, layout::col_major), c(37, 29, layout::col_major),
        c0(37, 29, layout::col_major);
    fill_random(a.view(), 31);
    fill_random(b.view(), 32);
    fill_random(c0.view(), 33);
    std::copy(c0.data(), c0.data() + c0.size(), c.data());
    const gemm_problem q = describe_gemm<double>(op::n, op::n, 1.5, a.view(), b.view(), 0.5, c.view());
    const gemm_plan p = ctx.plan(q, {});
    ASSERT_EQ(p.strategy, gemm_strategy::direct) << ctx.explain(p);
    EXPECT_EQ(p.devices, 2) << ctx.explain(p);
    ctx.execute<double>(p, 1.5, a.view(), b.view(), 0.5, c.view());
    EXPECT_LE(gemm_relative_error<double>(op::n, op::n, 1.5, a.view(), b.view(), 0.5, c0.view(), c.view()),
              gemm_tolerance(dtype::f64, 37));
}

// LU's model likewise plans for the devices that take tasks: with opencl:0 30 times slower than
// the CPU device, it takes none and the predicted bytes are the measured ones.
TEST(Blas3Balance, LuPlansForTheDevicesThatWork) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    const detail::scripted_kernel_probes probes = cpu_and_other_rates(30e12, 1e12);
    context ctx("cpu@1MiB,opencl:0@1MiB");
    const index_t n = 301;
    host_matrix<double> a(n, n, layout::col_major);
    fill_random(a.view(), 17);
    std::vector<index_t> ipiv(static_cast<std::size_t>(n));
    getrf_call_options call;
    call.tile = 32;
    const getrf_report rep = ctx.getrf<double>(a.view(), ipiv, call);
    ASSERT_EQ(rep.devices.size(), 2u);
    EXPECT_EQ(rep.devices[1].units, 0u) << ctx.explain(rep.plan);
    EXPECT_EQ(rep.bytes_h2d, rep.plan.bytes_h2d) << ctx.explain(rep.plan);
    EXPECT_EQ(rep.bytes_d2h, rep.plan.bytes_d2h) << ctx.explain(rep.plan);
}

// The merge rate is measured where merges happen: a SYRK-family call on several devices of which
// one without host access takes tasks (scripted probes: equal rates, both work); not on one device
// (diagonal tiles go back whole), nor for routines without triangles, nor when that device sits out.
TEST(Blas3Balance, TriangleMergeRateIsMeasuredWhereMergesHappen) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    host_matrix<double> a(70, 40), c(70, 70), b(70, 40);
    const blas3_problem p = describe_blas3<double>(blas3_routine::syrk, {side::left, uplo::lower, op::n, diag::non_unit},
                                                   {1.0, 0.0, a.view(), {}, c.view()});
    const blas3_problem solve = describe_blas3<double>(blas3_routine::trsm, {side::left, uplo::lower, op::n, diag::non_unit},
                                                       {1.0, 0.0, c.view(), {}, b.view()});
    {
        const detail::scripted_kernel_probes probes = cpu_and_other_rates(1e12, 1e12);
        context mixed("cpu@1MiB,opencl:0@1MiB");
        const blas3_plan q = mixed.plan(p);
        EXPECT_GT(q.rates.host_merge, 0.0);
        EXPECT_NE(mixed.explain(q).find("triangle merges"), std::string::npos) << mixed.explain(q);
        context alone("opencl:0@1MiB");
        EXPECT_EQ(alone.plan(p).rates.host_merge, 0.0);  // one device: diagonal tiles go back whole
        EXPECT_EQ(mixed.plan(solve).rates.host_merge, 0.0);  // no triangles written
    }
    const detail::scripted_kernel_probes probes = cpu_and_other_rates(30e12, 1e12);
    context idle("cpu@1MiB,opencl:0@1MiB");
    const blas3_plan q = idle.plan(p);
    EXPECT_EQ(q.rates.host_merge, 0.0) << idle.explain(q);  // opencl:0 takes no task
}

// Rates declared for a call stand for the plan's model; the balance still has each device's own
// measured rate (once, declared rates dropped it, and a CPU beside a GPU took tasks).
TEST(Blas3Balance, DeclaredCallRatesKeepEachDevicesRate) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    context ctx("cpu@1MiB,opencl:0@1MiB");
    host_matrix<double> a(120, 80, layout::col_major), c(120, 120, layout::col_major);
    fill_random(a.view(), 12);
    const blas3_problem q = describe_blas3<double>(blas3_routine::syrk, {side::left, uplo::lower, op::n, diag::non_unit},
                                                   {1.0, 0.0, a.view(), {}, c.view()});
    blas3_call_options call;
    call.rates = device_rates{};
    const blas3_plan p = ctx.plan(q, call);
    ASSERT_EQ(p.device_flops.size(), 2u) << ctx.explain(p);
    EXPECT_GT(p.device_flops[0], 0);
    EXPECT_GT(p.device_flops[1], 0);
    EXPECT_NE(ctx.explain(p).find("balance         cpu:0 "), std::string::npos) << ctx.explain(p);
}
}  // namespace
}  // namespace tilestream

namespace tilestream {
namespace {

/// Scripted GEMM probes of the CPU devices (and the host): the vendor kernel at `vendor` FLOP/s,
/// tiled at `tiled` (the candidates' order: vendor, tiled).
detail::scripted_kernel_probes cpu_kernel_rates(double vendor, double tiled) {
    return detail::scripted_kernel_probes(
        [vendor, tiled](const detail::scripted_kernel_probes::request& r) {
            const double f = 2.0 * double(r.shape.m) * double(r.shape.n) * double(r.shape.k);
            detail::probe_timings p;
            p.seconds.push_back({f / vendor, f / vendor, f / vendor});
            p.seconds.push_back({f / tiled, f / tiled, f / tiled});
            p.notes.resize(2);
            return p;
        },
        3600);
}

/// The kernels named by a run's compute spans ("gemm tiled", "trsm vendor", ...), by name.
std::map<std::string, int> kernel_spans(const trace_recorder& rec) {
    std::map<std::string, int> out;
    for (const trace_span& s : rec.spans())
        if (s.kind == span_kind::kernel) ++out[s.name];
    return out;
}

std::string spans_text(const std::map<std::string, int>& spans) {
    std::string out;
    for (const auto& [name, count] : spans) out += name + " " + std::to_string(count) + "; ";
    return out;
}

// With no kernel asked for, a Level 3 plan's GEMM tiles take each device's fastest measured GEMM
// kernel and its other tiles the vendor routines: on an Emerald Rapids VM, where Debian's OpenBLAS
// runs its Prescott kernels at a quarter of the tiled kernel's speed, dpotrf 4096 in place went
// from 0.80 s (one LAPACK call) to 0.43 s (384 tiles, GEMM on tiled). Scripted probes make tiled
// 5 times vendor here: the in-place plan cuts the factorization into tiles, its GEMM steps run on
// tiled and the rest on vendor (the trace names each step's kernel), and the factor is right. With
// vendor measured fastest, or a kernel asked for, the plan is the one vendor call it was.
TEST(Blas3Kernels, GemmTilesTakeTheFastestMeasuredKernel) {
    const index_t n = 901;
    host_matrix<double> a(n, n, layout::col_major);
    fill_random(a.view(), 41);
    for (index_t i = 0; i < n; ++i) a.view()(i, i) = double(n) + 1.0;  // dominant: positive definite
    for (int mode : {0, 1, 2}) {  // tiled fast; vendor fast; tiled fast but vendor asked for
        // Rates low enough that the model's packing term, priced at the copy rates measured on
        // this machine (4 GB/s under ASan), cannot decide the tiling.
        const detail::scripted_kernel_probes probes = cpu_kernel_rates(2e9, mode == 1 ? 1e9 : 10e9);
        context_options co;
        if (mode == 2) co.kernel = gemm_kernel::vendor;
        context ctx("cpu", co);
        // The choice a GEMM call of the square class makes (a call this small would not probe).
        (void)choose_kernel(*ctx.devices().front(), dtype::f64, shape_class::square);
        host_matrix<double> f(n, n, layout::col_major);  // the upper triangle must come back unchanged
        std::copy(a.data(), a.data() + a.size(), f.data());
        trace_recorder rec;
        blas3_call_options call;
        call.run.trace = &rec;
        const blas3_report rep = ctx.potrf<double>(uplo::lower, f.view(), call);
        const std::string why = ctx.explain(rep.plan) + spans_text(kernel_spans(rec));
        EXPECT_EQ(rep.info, 0);
        const blas3_check_result check = check_potrf<double>(uplo::lower, a.view(), f.view());
        EXPECT_TRUE(check.passed) << check.summary() << "\n" << why;
        const std::map<std::string, int> spans = kernel_spans(rec);
        if (mode == 0) {
            ASSERT_EQ(rep.plan.gemm_kernels, std::vector<gemm_kernel>{gemm_kernel::tiled}) << why;
            EXPECT_EQ(rep.plan.kernel, gemm_kernel::vendor);
            EXPECT_NEAR(rep.plan.rates.flops, 10e9, 1e2) << why;
            EXPECT_NEAR(rep.plan.rates.diagonal_flops, 2e9, 1e2) << why;
            EXPECT_GT(rep.plan.tasks, 1u) << why;  // tiles move work from LAPACK to GEMM
            EXPECT_GT(spans.count("gemm tiled"), 0u) << why;
            EXPECT_EQ(spans.count("gemm vendor"), 0u) << why;
            EXPECT_GT(spans.count("potrf vendor"), 0u) << why;
            EXPECT_NE(ctx.explain(rep.plan).find("kernel auto: GEMM tiles tiled, the other tiles vendor"), std::string::npos)
                << why;
        } else {
            EXPECT_TRUE(rep.plan.gemm_kernels.empty()) << why;
            EXPECT_EQ(rep.plan.rates.diagonal_flops, 0.0) << why;
            EXPECT_EQ(rep.plan.tasks, 1u) << why;  // one LAPACK call in place
            EXPECT_EQ(spans.count("gemm tiled"), 0u) << why;
        }
    }
}

// The same choice for LU (block columns in place, updates on tiled) and for a trsm on two CPU
// devices, whose plan models both kernels' rates; each result checked.
TEST(Blas3Kernels, LuAndSeveralDevicesTakeTheMeasuredGemmKernel) {
    const detail::scripted_kernel_probes probes = cpu_kernel_rates(2e9, 10e9);
    {
        context ctx("cpu");
        (void)choose_kernel(*ctx.devices().front(), dtype::f64, shape_class::square);
        const index_t m = 1211, n = 1177;
        host_matrix<double> a(m, n, layout::row_major), lu(m, n, layout::row_major);
        fill_random(a.view(), 51);
        std::copy(a.data(), a.data() + a.size(), lu.data());
        std::vector<index_t> ipiv(std::size_t(std::min(m, n)), -1);
        trace_recorder rec;
        getrf_call_options call;
        call.run.trace = &rec;
        const getrf_report rep = ctx.getrf<double>(lu.view(), ipiv, call);
        const std::map<std::string, int> spans = kernel_spans(rec);
        const std::string why = ctx.explain(rep.plan) + spans_text(spans);
        EXPECT_EQ(rep.info, 0);
        ASSERT_EQ(rep.plan.gemm_kernels, std::vector<gemm_kernel>{gemm_kernel::tiled}) << why;
        EXPECT_GT(rep.plan.tasks, 1u) << why;
        EXPECT_GT(spans.count("gemm tiled"), 0u) << why;
        EXPECT_EQ(spans.count("gemm vendor"), 0u) << why;
        EXPECT_LT(getrf_residual<double>(host_matrix_view<const double>(a.view()), host_matrix_view<const double>(lu.view()), ipiv),
                  8.0)
            << why;
    }
    context two("cpu:2");
    for (device* d : two.devices()) (void)choose_kernel(*d, dtype::c64, shape_class::square);
    const index_t m = 433, n = 389;  // B m x n, A m x m lower
    host_matrix<std::complex<double>> a(m, m, layout::col_major), b(m, n, layout::col_major), x(m, n, layout::col_major);
    fill_random(a.view(), 52);
    fill_random(b.view(), 53);
    for (index_t i = 0; i < m; ++i) a.view()(i, i) = std::complex<double>(double(m), 1.0);
    std::copy(b.data(), b.data() + b.size(), x.data());
    const std::complex<double> alpha(0.5, -1.25);
    trace_recorder rec;
    blas3_call_options call;
    call.run.trace = &rec;
    const blas3_report rep =
        two.trsm<std::complex<double>>(side::left, uplo::lower, op::c, diag::non_unit, alpha, a.view(), x.view(), call);
    ASSERT_EQ(rep.plan.gemm_kernels, (std::vector<gemm_kernel>{gemm_kernel::tiled, gemm_kernel::tiled})) << two.explain(rep.plan);
    EXPECT_GT(rep.plan.rates.diagonal_flops, 0.0);
    EXPECT_LT(rep.plan.rates.diagonal_flops, rep.plan.rates.flops);
    // Each device ran its GEMM steps on tiled, none on vendor.
    std::map<std::string, std::set<std::string>> gemm_by_device;
    for (const trace_span& s : rec.spans())
        if (s.kind == span_kind::kernel && s.name.rfind("gemm ", 0) == 0) gemm_by_device[s.device].insert(s.name);
    for (const device* d : two.devices())
        EXPECT_EQ(gemm_by_device[d->id()], std::set<std::string>{"gemm tiled"}) << d->id() << "\n" << two.explain(rep.plan);
    const blas3_check_result check = check_blas3<std::complex<double>>(
        blas3_routine::trsm, {side::left, uplo::lower, op::c, diag::non_unit}, {alpha, {}, a.view(), {}, b.view()},
        host_matrix_view<const std::complex<double>>(x.view()));
    EXPECT_TRUE(check.passed) << check.summary() << "\n" << two.explain(rep.plan);
}

// Where the GEMM tiles run on a kernel far faster than the vendor routines (scripted: 5 times),
// trsm, trmm, symm and hemm tiles wider than the diagonal block run in diagonal blocks of 256 on
// vendor with GEMMs on the fast kernel between them (f64 n = 4096 on a 2-core VM: trsm 0.66 s in
// one call so blocked, against 0.77-0.85 s in tiles; out of core at a quarter budget, 0.73-0.87 s
// against 0.96-0.99). In place and out of core, both sides, a complex op C and hemm, and with the tiled
// kernel asked for: the trace shows more vendor diagonal calls than the plan has diagonal tiles,
// GEMMs on tiled only, and the result passes its check; with vendor asked for, nothing is split.
TEST(Blas3Kernels, DiagonalTilesRunInBlocksWithGemmsBetween) {
    const detail::scripted_kernel_probes probes = cpu_kernel_rates(2e9, 10e9);
    struct setup {
        bool out_of_core = false;
        std::optional<gemm_kernel> asked;  ///< the context's kernel (none: auto)
        layout lay = layout::col_major;
        bool one_call = false;  ///< in place: the whole order as one tile
    };
    const auto run = [&]<class T>(blas3_routine r, blas3_flags f, setup su) {
        const bool out_of_core = su.out_of_core;
        const std::optional<gemm_kernel> asked = su.asked;
        context_options co;
        if (out_of_core) co.memory_budget = std::size_t(6) << 20;
        co.kernel = asked;
        const bool vendor = asked == gemm_kernel::vendor;
        context ctx("cpu", co);
        (void)choose_kernel(*ctx.devices().front(), dtype_of<T>(), shape_class::square);
        const index_t m = f.side == side::left ? 611 : 283, n = f.side == side::left ? 283 : 611;
        const index_t order = f.side == side::left ? m : n;
        host_matrix<T> a(order, order, su.lay), b(m, n, su.lay), c(m, n, su.lay);
        fill_random(a.view(), 61);
        fill_random(b.view(), 62);
        fill_random(c.view(), 63);
        for (index_t i = 0; i < order; ++i) a.view()(i, i) = T(double(order)) + T(1);  // well conditioned
        const bool symm = r == blas3_routine::symm || r == blas3_routine::hemm;
        blas3_operands<T> in;
        if constexpr (is_complex_v<T>) in.alpha = T(0.75, -0.5);
        else in.alpha = T(0.75);
        in.beta = symm ? T(-0.5) : T(0);
        in.a = a.view();
        if (symm) in.b = b.view();
        in.c = c.view();
        host_matrix<T> out(m, n, su.lay);
        std::copy(c.data(), c.data() + c.size(), out.data());
        blas3_operands<T> ops = in;
        ops.c = out.view();
        trace_recorder rec;
        blas3_call_options call;
        call.run.trace = &rec;
        // A's order 611 in tiles wider than a block: 448 in place (and a rest of 163, not split) or
        // one call (a plan without GEMM tiles), 320 out of core (and a rest of 291, split too).
        call.tile = out_of_core ? 320 : su.one_call ? order : 448;
        if (out_of_core) call.tile_free = 320;
        const blas3_report rep = ctx.blas3<T>(r, f, ops, call);
        const std::map<std::string, int> spans = kernel_spans(rec);
        const std::string label = std::string(to_string(r)) + " " + std::string(to_string(f.side)) + " " +
                                  std::string(to_string(dtype_of<T>())) + (out_of_core ? " out of core" : " in place") +
                                  (asked ? ", " + std::string(to_string(*asked)) + " asked for" : "") + ", " +
                                  std::string(to_string(su.lay)) + (su.one_call ? ", one call" : "");
        const std::string why = label + "\n" + ctx.explain(rep.plan) + spans_text(spans);
        const blas3_check_result check = check_blas3<T>(r, f, in, host_matrix_view<const T>(out.view()));
        EXPECT_TRUE(check.passed) << check.summary() << "\n" << why;
        EXPECT_EQ(rep.plan.in_place, !out_of_core) << why;
        std::size_t diagonal_tiles = 0;
        for (const auto& [kind, count] : rep.plan.kernel_counts)
            if (kind != tile_kind::gemm) diagonal_tiles += count;
        const std::string diagonal = std::string(to_string(rep.plan.kernel_counts.back().first)) + " vendor";
        const int diagonal_calls = spans.count(diagonal) ? spans.at(diagonal) : 0;
        if (vendor) {
            EXPECT_EQ(rep.plan.rates.diagonal_block, 0) << why;
            EXPECT_FALSE(rep.plan.blocked_diagonal) << why;
            EXPECT_EQ(std::size_t(diagonal_calls), diagonal_tiles) << why;
            EXPECT_EQ(spans.count("gemm tiled"), 0u) << why;
            return;
        }
        EXPECT_EQ(rep.plan.rates.diagonal_block, 256) << why;
        EXPECT_TRUE(rep.plan.blocked_diagonal) << why;
        if (su.one_call) {
            EXPECT_EQ(rep.plan.tasks, 1u) << why;
            EXPECT_EQ(rep.plan.kernel_counts.size(), 1u) << why;  // no GEMM tile: the GEMMs are the call's blocks
            // The executor finds the GEMM kernel in the plan (auto) or in the step (asked for).
            if (!asked) EXPECT_EQ(rep.plan.gemm_kernels, std::vector<gemm_kernel>{gemm_kernel::tiled}) << why;
        }
        EXPECT_NE(ctx.explain(rep.plan).find("in diagonal blocks of 256"), std::string::npos) << why;
        EXPECT_GT(std::size_t(diagonal_calls), diagonal_tiles) << why;
        EXPECT_GT(spans.count("gemm tiled"), 0u) << why;
        EXPECT_EQ(spans.count("gemm vendor"), 0u) << why;
    };
    const blas3_flags left_lower{side::left, uplo::lower, op::n, diag::non_unit};
    const blas3_flags right_upper_t{side::right, uplo::upper, op::t, diag::unit};
    const layout row = layout::row_major, col = layout::col_major;
    for (bool ooc : {false, true}) {
        run.template operator()<double>(blas3_routine::trsm, left_lower, {ooc, std::nullopt, col, !ooc});
        run.template operator()<double>(blas3_routine::trmm, right_upper_t, {ooc, std::nullopt, row, !ooc});
        run.template operator()<double>(blas3_routine::symm, left_lower, {ooc, std::nullopt, ooc ? row : col, false});
        run.template operator()<std::complex<double>>(blas3_routine::hemm, {side::right, uplo::upper, op::n, diag::non_unit},
                                                      {ooc, std::nullopt, row, !ooc});
        run.template operator()<std::complex<float>>(blas3_routine::trsm, {side::right, uplo::lower, op::c, diag::non_unit},
                                                     {ooc, std::nullopt, col, false});
        // The tiled kernel asked for: the same blocks (its diagonal tiles can only run on vendor).
        run.template operator()<double>(blas3_routine::trmm, left_lower, {ooc, gemm_kernel::tiled, col, !ooc});
    }
    run.template operator()<double>(blas3_routine::trsm, left_lower, {false, gemm_kernel::vendor, col, true});
    run.template operator()<double>(blas3_routine::symm, left_lower, {true, gemm_kernel::vendor, col, false});
}

// A plan names GEMM kernels only when it has GEMM steps or steps split into blocks with GEMMs
// between them: Cholesky in two tiles of at most 256 has neither (potrf, trsm, syrk, potrf), an LU
// of 400 rows in block columns of 512 has no GEMM update but its trsm steps (order 400) split.
TEST(Blas3Kernels, OnlyPlansThatSplitOrHaveGemmTilesNameGemmKernels) {
    const detail::scripted_kernel_probes probes = cpu_kernel_rates(2e9, 10e9);
    context ctx("cpu");
    (void)choose_kernel(*ctx.devices().front(), dtype::f64, shape_class::square);
    {
        const index_t n = 400;
        host_matrix<double> a(n, n, layout::col_major), f(n, n, layout::col_major);
        fill_random(a.view(), 71);
        for (index_t i = 0; i < n; ++i) a.view()(i, i) = double(n) + 1.0;
        std::copy(a.data(), a.data() + a.size(), f.data());
        blas3_call_options call;
        call.tile = 208;
        const blas3_report rep = ctx.potrf<double>(uplo::lower, f.view(), call);
        const std::string why = ctx.explain(rep.plan);
        EXPECT_EQ(rep.info, 0);
        EXPECT_TRUE(check_potrf<double>(uplo::lower, a.view(), f.view()).passed) << why;
        EXPECT_GT(rep.plan.tasks, 1u) << why;
        for (const auto& [kind, count] : rep.plan.kernel_counts) EXPECT_NE(kind, tile_kind::gemm) << why;
        EXPECT_FALSE(rep.plan.blocked_diagonal) << why;
        EXPECT_TRUE(rep.plan.gemm_kernels.empty()) << why;
        EXPECT_EQ(why.find("diagonal tiles "), std::string::npos) << why;
    }
    const index_t m = 400, n = 1500;
    host_matrix<double> a(m, n, layout::col_major), lu(m, n, layout::col_major);
    fill_random(a.view(), 72);
    std::copy(a.data(), a.data() + a.size(), lu.data());
    std::vector<index_t> ipiv(std::size_t(m), -1);
    trace_recorder rec;
    getrf_call_options call;
    call.tile = 512;
    call.run.trace = &rec;
    const getrf_report rep = ctx.getrf<double>(lu.view(), ipiv, call);
    const std::map<std::string, int> spans = kernel_spans(rec);
    const std::string why = ctx.explain(rep.plan) + spans_text(spans);
    EXPECT_EQ(rep.info, 0);
    for (const auto& [kind, count] : rep.plan.kernel_counts) EXPECT_NE(kind, tile_kind::gemm) << why;
    EXPECT_TRUE(rep.plan.blocked_diagonal) << why;
    EXPECT_EQ(rep.plan.gemm_kernels, std::vector<gemm_kernel>{gemm_kernel::tiled}) << why;
    EXPECT_NE(why.find("diagonal tiles "), std::string::npos) << why;
    EXPECT_GT(spans.count("gemm tiled"), 0u) << why;  // the split trsm steps' GEMMs
    EXPECT_LT(getrf_residual<double>(host_matrix_view<const double>(a.view()), host_matrix_view<const double>(lu.view()), ipiv),
              8.0)
        << why;
}

// Without a choice made before, a context probes the GEMM kernels for its Level 3 plans only once
// their work outweighs the probe (3 times its 1.45e10 multiply-adds): small calls stay on vendor
// without the probe's cost (0.7-3 s on a 2-core VM), and enough of them make it.
TEST(Blas3Kernels, TheProbeRunsOnceTheWorkOutweighsIt) {
    const detail::scripted_kernel_probes probes = cpu_kernel_rates(2e9, 10e9);
    context ctx("cpu");
    const index_t n = 1024;
    host_matrix<double> a(n, n), b(n, n);
    const blas3_problem p = describe_blas3<double>(blas3_routine::trsm, {side::left, uplo::lower, op::n, diag::non_unit},
                                                   {1.0, 0.0, a.view(), {}, b.view()});
    const double needed = 3 * 1.45e10 * 2;  // f64: 2 flops a multiply-add
    const int before = int(needed / p.flops());  // calls that stay below it
    ASSERT_GT(before, 10);
    for (int i = 0; i < before; ++i) {
        const blas3_plan q = ctx.plan(p);
        ASSERT_TRUE(q.gemm_kernels.empty()) << "call " << i << "\n" << ctx.explain(q);
    }
    EXPECT_FALSE(detail::known_kernel(*ctx.devices().front(), dtype::f64, shape_class::square, math_mode::strict));
    const blas3_plan q = ctx.plan(p);
    EXPECT_EQ(q.gemm_kernels, std::vector<gemm_kernel>{gemm_kernel::tiled}) << ctx.explain(q);
    EXPECT_TRUE(detail::known_kernel(*ctx.devices().front(), dtype::f64, shape_class::square, math_mode::strict));
    // Another type keeps its own count.
    host_matrix<float> af(n, n), bf(n, n);
    EXPECT_TRUE(ctx.plan(describe_blas3<float>(blas3_routine::trsm, {side::left, uplo::lower, op::n, diag::non_unit},
                                               {1.0f, 0.0f, af.view(), {}, bf.view()}))
                    .gemm_kernels.empty());
}

// The model prices diagonal blocks at their own rate, and in place on one device it then weighs
// tiles against the one call: with them 5 times slower than GEMM a trsm is cut into tiles; at
// GEMM's rate (diagonal_flops 0) it stays one call.
TEST(Blas3Plan, SlowDiagonalBlocksCutAnInPlaceCall) {
    host_matrix<double> a(2000, 2000), b(2000, 1500);
    const blas3_problem p = describe_blas3<double>(blas3_routine::trsm, {side::left, uplo::lower, op::n, diag::non_unit},
                                                   {1.0, 0.0, a.view(), {}, b.view()});
    blas3_options o;
    o.in_place = true;
    device_rates r;
    r.flops = 100e9;
    EXPECT_EQ(plan_blas3(p, 0, r, o).tile, 2000) << explain(plan_blas3(p, 0, r, o));
    r.diagonal_flops = 20e9;
    const blas3_plan cut = plan_blas3(p, 0, r, o);
    EXPECT_LT(cut.tile, 2000) << explain(cut);
    blas3_options whole = o;
    whole.tile = 2000;  // the one call, all of it at the diagonal blocks' rate
    const blas3_plan one = plan_blas3(p, 0, r, whole);
    EXPECT_NEAR(one.predicted_seconds, 2000.0 * 2000 * 1500 / 20e9, 1e-3) << explain(one);
    EXPECT_LT(cut.predicted_seconds, one.predicted_seconds * 0.5) << explain(cut);
    EXPECT_NE(explain(cut).find("(the other tiles: the vendor kernel)"), std::string::npos) << explain(cut);
}

}  // namespace
}  // namespace tilestream
