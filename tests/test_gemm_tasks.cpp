// GEMM as tile tasks on the Level 3 engine (the case without dependencies): against the reference
// in place, out of core and on three devices, surviving a device fault, and bitwise the GEMM
// pipeline's result in reproducible mode (same kernel, same k-blocks), on any device count.
#include "core/fault_injection.hpp"
#include "core/routines/gemm_tasks.hpp"
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/devices.hpp>
#include <tilestream/gemm.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/verify.hpp>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace tilestream {
namespace {

using detail::routines::gemm_on_tasks;
using detail::routines::gemm_tiling;

std::vector<device*> raw(const std::vector<std::unique_ptr<device>>& devs) {
    std::vector<device*> r;
    for (const auto& d : devs) r.push_back(d.get());
    return r;
}

using c32 = std::complex<float>;
using c64 = std::complex<double>;

template <class T>
double run_case(const std::vector<device*>& devs, op oa, op ob, index_t m, index_t n, index_t k, layout l, T beta,
                const gemm_tiling& t, host_matrix<T>* out = nullptr, detail::engine::run_result* result = nullptr,
                detail::engine::model_result* model = nullptr) {
    host_matrix<T> a(oa == op::n ? m : k, oa == op::n ? k : m, l), b(ob == op::n ? k : n, ob == op::n ? n : k, l);
    host_matrix<T> c(m, n, l), c0(m, n, l);
    fill_random(a.view(), 1);
    fill_random(b.view(), 2);
    fill_random(c0.view(), 3);
    if (beta != T(0)) std::memcpy(c.data(), c0.data(), sizeof(T) * std::size_t(c.size()));
    else fill_nan(c.view());
    const auto r = gemm_on_tasks<T>(devs, oa, ob, T(0.75), a.view(), b.view(), beta, c.view(), t, {}, model);
    if (result) *result = r;
    const double e = gemm_relative_error<T>(oa, ob, T(0.75), a.view(), b.view(), beta, c0.view(), c.view());
    if (out) *out = std::move(c);
    return e;
}

TEST(GemmOnTasks, MatchesReferenceInPlaceOutOfCoreAndOnThreeDevices) {
    for (const char* spec : {"cpu", "cpu:3", "cpu@64KiB", "cpu:3@48KiB"}) {
        const auto devs = open_devices(spec);
        gemm_tiling t;
        t.tile_m = 24;
        t.tile_n = 32;
        t.tile_k = 20;
        for (op oa : {op::n, op::t})
            for (op ob : {op::n, op::t})
                for (layout l : {layout::row_major, layout::col_major}) {
                    EXPECT_LT(run_case<double>(raw(devs), oa, ob, 67, 45, 83, l, 0.0, t), 1e-13) << spec;
                    EXPECT_LT(run_case<float>(raw(devs), oa, ob, 53, 71, 29, l, 1.5f, t), 1e-5) << spec;
                }
        // Complex, every op pair with conjugation, complex beta (and beta = 0 on NaN).
        for (op oa : {op::n, op::t, op::c})
            for (op ob : {op::n, op::c}) {
                EXPECT_LT(run_case<c64>(raw(devs), oa, ob, 41, 37, 45, layout::col_major, c64(0.5, -1.25), t), 1e-13)
                    << spec;
                EXPECT_LT(run_case<c32>(raw(devs), oa, ob, 29, 43, 31, layout::row_major, c32(0), t), 1e-5) << spec;
            }
    }
}

// The order of C's tiles decides which panel stays in the slots, as the GEMM pipeline's a_panel
// (row panels of A, all of k, B's column panels streamed) and b_panel strategies do; the bytes
// copied are the cost model's, to the byte, and at most the strategy's (the executor's preference
// for tasks whose tiles a device holds reuses some of the streamed operand's too). Slots are sized
// per operand: the panels fit budgets where slots of the largest tile would not.
TEST(GemmOnTasks, PanelOrdersCopyWhatTheModelPredicts) {
    // f64: A panels 40 x 90 (the last 30 rows, in A's slots still), B panels 90 x 48, C tiles 40 x 48.
    const index_t m = 150, n = 144, k = 90;
    gemm_tiling t;
    t.tile_m = 40;
    t.tile_n = 48;
    t.tile_k = k;
    const std::size_t es = sizeof(double);
    const std::size_t a_panel = 40 * k * es, b_panel = k * 48 * es, c_tile = 40 * 48 * es;
    // One of each: what a task holds; uniform slots of the largest tile would need three of them.
    const std::size_t least = a_panel + b_panel + c_tile;
    ASSERT_LT(least, 3 * std::max(a_panel, b_panel));
    for (const bool by_columns : {false, true}) {
        t.by_columns = by_columns;
        for (const std::size_t budget : {least, least + a_panel + b_panel, 2 * least})
            for (const char* where : {"cpu", "opencl:0"}) {
                const auto devs = open_devices(std::string(where) + "@" + std::to_string(budget) + "B");
                for (const double beta : {0.0, 0.5}) {
                    SCOPED_TRACE(std::string(where) + (by_columns ? " by columns" : " by rows") + " budget " +
                                 std::to_string(budget) + " beta " + std::to_string(beta));
                    detail::engine::run_result r;
                    detail::engine::model_result model;
                    EXPECT_LT(run_case<double>(raw(devs), op::n, op::t, m, n, k, layout::col_major, beta, t, nullptr,
                                               &r, &model),
                              1e-13);
                    EXPECT_LE(r.peak_device_bytes, budget);
                    EXPECT_TRUE(r.warnings.empty());  // every slot planned was allocated
                    EXPECT_EQ(r.bytes_h2d, model.bytes_h2d);
                    EXPECT_EQ(r.bytes_d2h, model.bytes_d2h);
                    EXPECT_EQ(r.bytes_d2h, std::size_t(m * n) * es);
                    const std::size_t c_in = beta != 0 ? std::size_t(m * n) * es : 0;
                    // The strategy's: the reused panel loaded once, the other operand once per panel of it.
                    const std::size_t ab = by_columns ? std::size_t(k * n + 3 * m * k) * es   // 3 B panels
                                                      : std::size_t(m * k + 4 * k * n) * es;  // 4 A panels
                    EXPECT_LE(r.bytes_h2d, ab + c_in);
                    if (budget > least) EXPECT_LT(r.bytes_h2d, ab + c_in);
                }
            }
    }
}

// k in steps: with room for a row of A's tiles (all of k) the row order loads A once and B once per
// row of C's tiles; in the least budget A's tiles come again for every tile of C. The model
// predicts both to the byte.
TEST(GemmOnTasks, KStepsKeepARowOfATilesWhereTheyFit) {
    const index_t m = 96, n = 100, k = 120;
    gemm_tiling t;
    t.tile_m = 32;
    t.tile_n = 25;
    t.tile_k = 40;  // three k-steps
    const std::size_t es = sizeof(float);
    const std::size_t a = 32 * 40 * es, b = 40 * 25 * es, c = 32 * 25 * es;
    const std::size_t roomy = 4 * a + 4 * b + 2 * c;  // a row of A's tiles (and of B's) and one more
    const auto devs = open_devices("cpu@" + std::to_string(roomy) + "B");
    detail::engine::run_result r;
    detail::engine::model_result model;
    EXPECT_LT(run_case<float>(raw(devs), op::t, op::n, m, n, k, layout::row_major, 0.0f, t, nullptr, &r, &model), 1e-5);
    EXPECT_EQ(r.bytes_h2d, model.bytes_h2d);
    EXPECT_LE(r.bytes_h2d, std::size_t(m * k + 3 * k * n) * es);  // A once, B at most once per row of C
    const std::size_t roomy_bytes = r.bytes_h2d;
    const auto tight = open_devices("cpu@" + std::to_string(a + b + c) + "B");
    EXPECT_LT(run_case<float>(raw(tight), op::t, op::n, m, n, k, layout::row_major, 0.0f, t, nullptr, &r, &model), 1e-5);
    EXPECT_EQ(r.bytes_h2d, model.bytes_h2d);
    EXPECT_EQ(r.bytes_h2d, std::size_t(m * k * 4 + k * n * 3) * es);  // A's tiles again for each C tile
    EXPECT_GT(r.bytes_h2d, roomy_bytes);
}


// A ragged tile takes a slot among its own operand's: B's last k-tile (4 x 32) is smaller than A's
// tiles (16 x 12), and once took one of A's slots, which held A's row exactly; each task then
// evicted the A tile it needed next (LRU on a cycle one longer than the slots), so A came in twice
// (GEMM f32 4096 at 48 MiB: 384 MiB in where 320 do).
TEST(GemmOnTasks, ARaggedTileOfBLeavesTheRowOfATilesInPlace) {
    const index_t m = 64, n = 64, k = 64;
    gemm_tiling t;
    t.tile_m = 16;
    t.tile_n = 32;
    t.tile_k = 12;  // six k-steps, the last 4 deep
    const std::size_t es = sizeof(float);
    const std::size_t a = 16 * 12 * es, b = 12 * 32 * es, c = 16 * 32 * es;
    ASSERT_LE(4 * 32 * es, a);
    // Two of C, B and A, then A's row (6): no room for a seventh A or a third B.
    const std::size_t budget = 2 * c + 2 * b + 6 * a + a / 2;
    const auto devs = open_devices("cpu@" + std::to_string(budget) + "B");
    detail::engine::run_result r;
    detail::engine::model_result model;
    for (float beta : {0.0f, 0.5f}) {
        EXPECT_LT(run_case<float>(raw(devs), op::n, op::n, m, n, k, layout::row_major, beta, t, nullptr, &r, &model), 1e-5);
        const std::size_t c_in = beta != 0 ? std::size_t(m * n) * es : 0;
        EXPECT_EQ(r.bytes_h2d, model.bytes_h2d);
        EXPECT_EQ(r.bytes_h2d, std::size_t(m * k + 4 * k * n) * es + c_in) << "beta " << beta;  // A once, B per row of C
        EXPECT_EQ(r.peak_device_bytes, 2 * c + 2 * b + 6 * a);
    }
}
// Pack transfers: tiles that are not contiguous in host memory are gathered into host staging and
// copied whole (and scattered back); contiguous ones (whole rows of a row-major operand) are
// copied as they lie. Same bytes and results as 2-D copies, on a CPU device and on OpenCL.
TEST(GemmOnTasks, PackTransfersGatherWhatIsNotContiguous) {
    for (const char* where : {"cpu@256KiB", "opencl:0@256KiB"}) {
        const auto devs = open_devices(where);
        SCOPED_TRACE(where);
        gemm_tiling t;
        t.tile_m = 24;
        t.tile_n = 20;
        t.tile_k = 30;
        detail::engine::run_result two_d, packed;
        detail::engine::model_result model;
        EXPECT_LT(run_case<double>(raw(devs), op::t, op::n, 61, 47, 75, layout::col_major, 0.5, t, nullptr, &two_d, &model),
                  1e-13);
        EXPECT_EQ(two_d.bytes_packed, 0u);
        EXPECT_EQ(model.bytes_packed, 0u);
        t.transfer = transfer_mode::pack;
        EXPECT_LT(run_case<double>(raw(devs), op::t, op::n, 61, 47, 75, layout::col_major, 0.5, t, nullptr, &packed, &model),
                  1e-13);
        EXPECT_EQ(packed.bytes_h2d, two_d.bytes_h2d);
        EXPECT_EQ(packed.bytes_h2d, model.bytes_h2d);
        EXPECT_EQ(packed.bytes_d2h, two_d.bytes_d2h);
        EXPECT_EQ(packed.bytes_packed, packed.bytes_h2d + packed.bytes_d2h);  // every tile is a part of its columns
        EXPECT_EQ(packed.bytes_packed, model.bytes_packed);
        // Row-major A with tiles as wide as its rows: A's tiles lie whole, B's and C's do not.
        t.tile_n = 20;
        t.tile_k = 75;
        EXPECT_LT(run_case<double>(raw(devs), op::n, op::n, 61, 47, 75, layout::row_major, 0.5, t, nullptr, &packed, &model),
                  1e-13);
        EXPECT_GT(packed.bytes_packed, 0u);
        EXPECT_LT(packed.bytes_packed, packed.bytes_h2d + packed.bytes_d2h);
        EXPECT_EQ(packed.bytes_packed, model.bytes_packed);
        // Row-major, tiles as wide as their operands: every tile is contiguous, nothing is packed.
        t.tile_n = 47;
        t.tile_k = 75;
        EXPECT_LT(run_case<c64>(raw(devs), op::n, op::n, 61, 47, 75, layout::row_major, c64(0.5, 1), t, nullptr, &packed,
                                &model),
                  1e-13);
        EXPECT_GT(packed.bytes_h2d, 0u);
        EXPECT_EQ(packed.bytes_packed, 0u);
    }
}

// Row panels: device d of three runs C's tile rows d, d+3, ... and nothing else, so each device's
// bytes are known in advance: the model's, to the byte, on three devices (and on OpenCL beside
// CPU devices). A device lost mid-run leaves its rows to the others.
TEST(GemmOnTasks, RowPanelsPinEachTileRowToItsDevice) {
    const index_t m = 7 * 16 + 5, n = 70, k = 50;  // 8 tile rows: 3, 3 and 2 per device
    gemm_tiling t;
    t.tile_m = 16;
    t.tile_n = 24;
    t.tile_k = 20;
    t.row_panels = true;
    for (const char* spec : {"cpu:3@40KiB", "cpu:2@40KiB,opencl:0@40KiB"})
      for (const bool c_panel : {false, true}) {  // C tiles 16 x 24, or panels 16 x 70 (what tiling_of makes)
        SCOPED_TRACE(std::string(spec) + (c_panel ? " C panels" : ""));
        t.c_panel = c_panel;
        const auto devs = open_devices(spec);
        detail::engine::run_result r;
        detail::engine::model_result model;
        EXPECT_LT(run_case<double>(raw(devs), op::n, op::n, m, n, k, layout::row_major, 0.5, t, nullptr, &r, &model),
                  1e-13);
        EXPECT_EQ(r.bytes_h2d, model.bytes_h2d);
        EXPECT_EQ(r.bytes_d2h, model.bytes_d2h);
        ASSERT_EQ(r.devices.size(), 3u);
        const std::size_t per_row = c_panel ? 1 : 3;  // tiles of C in a row: 70 / 24
        EXPECT_EQ(r.devices[0].units, 3 * per_row);
        EXPECT_EQ(r.devices[1].units, 3 * per_row);
        EXPECT_EQ(r.devices[2].units, 2 * per_row);
    }
    // The second device fails after one task: its rows are done by the others.
    t.c_panel = false;
    const auto devs = open_devices("cpu:3@40KiB");
    fault_injection::faults f;
    f.fail_after_units = 1;
    fault_injection::arm(*devs[1], f);
    detail::engine::run_result r;
    EXPECT_LT(run_case<double>(raw(devs), op::n, op::t, m, n, k, layout::col_major, 0.5, t, nullptr, &r), 1e-13);
    fault_injection::clear();
    ASSERT_EQ(r.faults.size(), 1u);
    EXPECT_EQ(r.faults[0].id, devs[1]->id());
    ASSERT_EQ(r.devices.size(), 3u);
    EXPECT_LE(r.devices[1].units, 1u);
    // The survivors did all 24 tasks but the lost device's finished one, more than their own 9 and 6.
    EXPECT_EQ(r.devices[0].units + r.devices[2].units, 24u - r.devices[1].units);
    EXPECT_GT(r.devices[0].units + r.devices[2].units, 15u);
}

// Every strategy the GEMM pipeline plans runs as tasks on its tiles (tiling_of): the reference's
// result, C written back once, no more bytes copied in than the pipeline's plan predicts, within
// the same budget; row panels on three devices, pack transfers on OpenCL.
TEST(GemmOnTasks, EveryPipelineStrategyRunsAsTasks) {
    const index_t m = 77, n = 65, k = 91;
    const std::size_t budget = 48 * 1024;
    for (const char* where : {"cpu", "opencl:0"})
        for (gemm_strategy st : {gemm_strategy::tiles_3d, gemm_strategy::a_panel, gemm_strategy::a_panel_c_panel,
                                 gemm_strategy::b_panel, gemm_strategy::c_block, gemm_strategy::row_panels,
                                 gemm_strategy::in_core})
            for (transfer_mode tr : {transfer_mode::copy_2d, transfer_mode::pack}) {
                const bool rows = st == gemm_strategy::row_panels;
                const std::size_t b = st == gemm_strategy::in_core ? 1 << 20 : budget;
                const std::string spec = std::string(where) + (rows ? ":3@" : "@") + std::to_string(b) + "B";
                if (rows && std::string(where) == "opencl:0") continue;  // one OpenCL device here
                SCOPED_TRACE(spec + " " + std::string(to_string(st)) + " " + std::string(to_string(tr)));
                const auto devs = open_devices(spec);
                host_matrix<float> a(k, m, layout::col_major), bm(k, n, layout::col_major), c(m, n, layout::col_major);
                host_matrix<float> c0(m, n, layout::col_major);
                fill_random(a.view(), 7);
                fill_random(bm.view(), 8);
                fill_random(c0.view(), 9);
                std::memcpy(c.data(), c0.data(), sizeof(float) * std::size_t(c.size()));
                const gemm_problem q =
                    describe_gemm<float>(op::t, op::n, 1.5f, a.view(), bm.view(), -0.5f, c.view());
                plan_options po;
                po.strategy = st;
                po.transfer = tr;
                po.devices = int(devs.size());
                gemm_plan plan;
                try {
                    plan = plan_gemm(q, b, device_rates{}, po);
                } catch (const out_of_budget&) {
                    ADD_FAILURE() << "the pipeline cannot plan it";
                    continue;
                }
                EXPECT_EQ(plan.strategy, st);
                if (plan.strategy != st) continue;
                const gemm_tiling t = detail::routines::tiling_of(plan);
                const auto r = gemm_on_tasks<float>(raw(devs), op::t, op::n, 1.5f, a.view(), bm.view(), -0.5f, c.view(), t);
                EXPECT_LT(gemm_relative_error<float>(op::t, op::n, 1.5f, a.view(), bm.view(), -0.5f, c0.view(), c.view()),
                          1e-5);
                EXPECT_LE(r.bytes_h2d, plan.bytes_h2d);
                EXPECT_EQ(r.bytes_d2h, std::size_t(m * n) * sizeof(float));
                EXPECT_LE(r.peak_device_bytes, b);
                // Parts of the operands go through staging; whole operands (in core) lie contiguous.
                if (tr == transfer_mode::pack) EXPECT_EQ(r.bytes_packed > 0, st != gemm_strategy::in_core);
                if (rows) {
                    ASSERT_EQ(r.devices.size(), 3u);
                    for (const auto& d : r.devices) EXPECT_GT(d.units, 0u) << d.id;
                }
            }
}

// The task model's own choice among every strategy's tiles and both orders: it fits the budget,
// copies what its model predicts, computes the product, and is modelled no slower than the
// pipeline's automatic plan run as tasks; a budget nothing fits is refused, naming it.
TEST(GemmOnTasks, TheTaskModelChoosesAmongEveryStrategysTiles) {
    const index_t m = 150, n = 130, k = 170;
    host_matrix<double> a(m, k), b(k, n), c(m, n), c0(m, n);
    fill_random(a.view(), 11);
    fill_random(b.view(), 12);
    fill_random(c0.view(), 13);
    std::memcpy(c.data(), c0.data(), sizeof(double) * std::size_t(c.size()));
    const gemm_problem q = describe_gemm<double>(op::n, op::n, 2.0, a.view(), b.view(), 0.5, c.view());
    const std::size_t budget = 96 * 1024;
    const auto devs = open_devices("cpu@" + std::to_string(budget) + "B");
    gemm_tiling t;
    gemm_strategy from = gemm_strategy::automatic;
    const auto chosen = detail::routines::choose_gemm_tasks(q, budget, false, device_rates{}, 1, {}, &t, &from);
    EXPECT_NE(from, gemm_strategy::automatic);
    const auto pipeline = plan_gemm(q, budget, device_rates{});
    const auto as_tasks =
        detail::routines::plan_gemm_tasks(q, detail::routines::tiling_of(pipeline), budget, false, device_rates{}, 1);
    EXPECT_FALSE(detail::engine::better_plan(as_tasks.model, as_tasks.graph.steps, chosen.model, chosen.graph.steps));
    detail::engine::model_result model;
    const auto r = gemm_on_tasks<double>(raw(devs), op::n, op::n, 2.0, a.view(), b.view(), 0.5, c.view(), t, {}, &model);
    EXPECT_LT(gemm_relative_error<double>(op::n, op::n, 2.0, a.view(), b.view(), 0.5, c0.view(), c.view()), 1e-13);
    EXPECT_EQ(model.bytes_h2d, chosen.model.bytes_h2d);
    EXPECT_EQ(r.bytes_h2d, model.bytes_h2d);
    EXPECT_LE(r.peak_device_bytes, budget);
    // An empty C needs no slots, whatever the budget.
    host_matrix<double> none(0, n);
    EXPECT_NO_THROW(gemm_on_tasks<double>(raw(open_devices("cpu@1KiB")), op::n, op::n, 2.0,
                                          host_matrix_view<const double>(a.view()).section(0, 0, 0, k), b.view(), 0.5,
                                          none.view(), t));
    try {
        detail::routines::choose_gemm_tasks(q, 512, false, device_rates{}, 1, {}, &t);
        ADD_FAILURE() << "512 bytes fit no tiling";
    } catch (const out_of_budget& e) {
        EXPECT_NE(std::string(e.what()).find("512 B"), std::string::npos) << e.what();
    }
}

// A device that runs out of memory part way through its slots (the first three allocations
// succeed, the rest fail): the store takes one slot of every class first, so the run goes on with
// those three, warns, and computes the product.
TEST(GemmOnTasks, ADeviceRefusingSlotsRunsWithOneOfEachClass) {
    const auto devs = open_devices("cpu@256KiB");
    fault_injection::faults f;
    f.allocations_before_failing = 3;
    f.fail_allocations = 1000;
    fault_injection::arm(*devs[0], f);
    gemm_tiling t;
    t.tile_m = 24;
    t.tile_n = 40;
    t.tile_k = 16;  // A 24 x 16, B 16 x 40, C 24 x 40: three classes, several slots each planned
    detail::engine::run_result r;
    EXPECT_LT(run_case<double>(raw(devs), op::n, op::n, 70, 90, 60, layout::row_major, 0.5, t, nullptr, &r), 1e-13);
    fault_injection::clear();
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("ran with 3 of"), std::string::npos) << r.warnings[0];
}

// The public GEMM on one device that copies (a budget, 2-D copies, no tile cache) runs on the task
// engine by default: every precision against the reference on odd shapes, the bytes and peak
// memory the plan predicts (the task model's), the plan's units done by the device; the other
// plans stay on the pipeline.
template <class T>
void default_runs_on_tasks(device& dev, index_t m, index_t n, index_t k, T beta, double tolerance) {
    host_matrix<T> a(k, m, layout::col_major), b(k, n), c(m, n, layout::col_major), c0(m, n, layout::col_major);
    fill_random(a.view(), 11);
    fill_random(b.view(), 12);
    fill_random(c0.view(), 13);
    if (beta != T(0)) std::memcpy(c.data(), c0.data(), sizeof(T) * std::size_t(c.size()));
    else fill_nan(c.view());
    gemm_options opt;
    opt.rates = device_rates{};  // declared: the plan does not depend on a probe
    const gemm_report rep = gemm<T>(dev, op::c, op::n, T(0.75), a.view(), b.view(), beta, c.view(), opt);
    SCOPED_TRACE(dev.id() + " " + std::string(to_string(dtype_of<T>())) + " " + std::string(to_string(rep.plan.strategy)));
    EXPECT_EQ(rep.plan.engine, gemm_engine::tasks);
    EXPECT_GT(rep.plan.units, 1u) << "the case must be out of core";
    EXPECT_LT(gemm_relative_error<T>(op::c, op::n, T(0.75), a.view(), b.view(), beta, c0.view(), c.view()), tolerance);
    EXPECT_EQ(rep.bytes_h2d, rep.plan.bytes_h2d);
    EXPECT_EQ(rep.bytes_d2h, rep.plan.bytes_d2h);
    EXPECT_EQ(rep.peak_device_bytes, rep.plan.peak_device_bytes);
    EXPECT_LE(rep.peak_device_bytes, dev.budget_for_runs());
    ASSERT_EQ(rep.devices.size(), 1u);
    EXPECT_EQ(rep.devices[0].units, rep.plan.units);
}

TEST(GemmOnTasks, OneCopyingDeviceRunsOnTasksByDefault) {
    for (const char* spec : {"cpu@96KiB", "opencl:0@96KiB"}) {
        const auto devs = open_devices(spec);
        device& d = *devs.front();
        default_runs_on_tasks<float>(d, 101, 77, 131, 0.0f, 1e-5);
        default_runs_on_tasks<double>(d, 93, 121, 67, -0.5, 1e-13);
        default_runs_on_tasks<c32>(d, 71, 57, 93, c32(0.5f, -1.0f), 1e-5);
        default_runs_on_tasks<c64>(d, 95, 79, 88, c64(0), 1e-13);
    }
    // Only the pipeline asked for runs there: several devices, pack transfers, the tile cache and
    // in place are adopted.
    gemm_problem p;
    p.type = dtype::f64;
    p.m = p.n = p.k = 300;
    const std::size_t budget = 256 * 1024;
    const auto engine_of = [&](auto&& set) {
        plan_options po;
        set(po);
        return plan_gemm(p, budget, device_rates{}, po).engine;
    };
    EXPECT_EQ(engine_of([](plan_options&) {}), gemm_engine::tasks);
    EXPECT_EQ(engine_of([](plan_options& o) { o.devices = 2; }), gemm_engine::tasks);
    EXPECT_EQ(engine_of([](plan_options& o) { o.cache = cache_mode::on; }), gemm_engine::tasks);
    // The automatic cache (the context's default) is what the task store does: such plans are adopted.
    const auto cached = [&](cache_mode c, gemm_engine e) {
        plan_options po;
        po.strategy = gemm_strategy::tiles_3d;
        po.tile_m = po.tile_n = po.tile_k = 50;
        po.cache = c;
        po.engine = e;
        return plan_gemm(p, 2 * budget, device_rates{}, po);
    };
    ASSERT_TRUE(cached(cache_mode::automatic, gemm_engine::pipeline).cache) << "the case must take the cache";
    const gemm_plan adopted = cached(cache_mode::automatic, gemm_engine::tasks);
    EXPECT_EQ(adopted.engine, gemm_engine::tasks);
    EXPECT_FALSE(adopted.cache);
    EXPECT_EQ(engine_of([](plan_options& o) { o.transfer = transfer_mode::pack; }), gemm_engine::tasks);
    EXPECT_EQ(engine_of([](plan_options& o) { o.engine = gemm_engine::pipeline; }), gemm_engine::pipeline);
    EXPECT_EQ(engine_of([](plan_options& o) { o.in_place = true; }), gemm_engine::tasks);
    EXPECT_EQ(engine_of([](plan_options& o) { o.in_place = true, o.devices = 3; }), gemm_engine::tasks);
    EXPECT_EQ(engine_of([](plan_options& o) { o.devices = 3, o.engine = gemm_engine::pipeline; }), gemm_engine::pipeline);
}

// The tile cache asked for (--cache on) on the task engine: the budget left after the panel goes to
// slots of the streamed operand (B's, rows of C in turn). Where they hold part of B, the device's
// preference for tasks whose tiles it holds starts each row of C from the end the last one ended
// (in order, the least recently used B tile would always be the next one read: no reuse at all).
// Fewer bytes than without it, the model's to the byte, within the budget, every precision
// against the reference; with room for all of B, B comes in once.
template <class T>
void cache_on_tasks(index_t m, index_t n, index_t k, std::size_t budget, bool all_of_b) {
    host_matrix<T> a(m, k), b(k, n), c(m, n), c0(m, n);
    fill_random(a.view(), 31);
    fill_random(b.view(), 32);
    fill_random(c0.view(), 33);
    const auto devs = open_devices("cpu@" + std::to_string(budget) + "B");
    device* d[] = {devs.front().get()};
    const gemm_problem p = describe_gemm<T>(op::n, op::n, T(1.5), a.view(), b.view(), T(-0.5), c.view());
    gemm_report reports[2];
    gemm_plan plans[2];
    for (int on = 0; on < 2; ++on) {
        plan_options po;
        po.strategy = gemm_strategy::c_block;
        po.tile_m = 16;
        po.tile_n = 24;
        po.tile_k = 20;
        po.cache = on ? cache_mode::on : cache_mode::off;
        plans[on] = plan_gemm(p, budget, device_rates{}, po);
        SCOPED_TRACE(std::string(to_string(dtype_of<T>())) + (on ? " cache on" : " cache off"));
        ASSERT_EQ(plans[on].engine, gemm_engine::tasks);
        EXPECT_EQ(plans[on].cache, on == 1);
        std::memcpy(c.data(), c0.data(), sizeof(T) * std::size_t(c.size()));
        reports[on] = execute_gemm<T>(plans[on], d, T(1.5), a.view(), b.view(), T(-0.5), c.view());
        EXPECT_LT(gemm_relative_error<T>(op::n, op::n, T(1.5), a.view(), b.view(), T(-0.5), c0.view(), c.view()),
                  gemm_tolerance(dtype_of<T>(), k));
        EXPECT_EQ(reports[on].bytes_h2d, plans[on].bytes_h2d);
        EXPECT_EQ(reports[on].peak_device_bytes, plans[on].peak_device_bytes);
        EXPECT_LE(reports[on].peak_device_bytes, budget);
    }
    EXPECT_GT(plans[1].cache_slots_b, 0);
    const index_t b_tiles = ((k + 19) / 20) * ((n + 23) / 24);
    if (all_of_b) EXPECT_EQ(plans[1].b_slots, b_tiles);
    else EXPECT_LT(plans[1].b_slots, b_tiles);
    EXPECT_EQ(plans[1].b_slots, plans[0].b_slots + plans[1].cache_slots_b);
    EXPECT_GT(plans[1].peak_device_bytes, plans[0].peak_device_bytes);
    EXPECT_LT(reports[1].bytes_h2d, reports[0].bytes_h2d);
    EXPECT_GT(reports[1].cache_hits, reports[0].cache_hits);
    const std::size_t es = sizeof(T);
    if (all_of_b) EXPECT_EQ(reports[1].bytes_h2d, std::size_t(m * k + k * n + m * n) * es);  // A, B and C once
}

TEST(GemmOnTasks, TheCacheAskedForFillsTheBudgetWithSlots) {
    // 61 x 75 x 83: 4 x 4 tiles of C, 5 k-steps (a ragged last one everywhere), 20 tiles of B;
    // room for 15 of them, then for all of them.
    cache_on_tasks<float>(61, 75, 83, 40 * 1024, false);
    cache_on_tasks<double>(61, 75, 83, 80 * 1024, false);
    cache_on_tasks<c32>(61, 75, 83, 80 * 1024, false);
    cache_on_tasks<c64>(61, 75, 83, 512 * 1024, true);
    cache_on_tasks<float>(61, 75, 83, 64 * 1024, true);
}

// Tile sizes searched by the task model: no tiles given, it ranks coarser tilings than the
// pipeline's in the same budget and takes the best by its model; on the host's cores k-steps
// cover a KC and A and B keep two slots each; on a device with memory of its own C keeps two as
// well; reproducible plans keep whole k-blocks; tiles given are run as given.
TEST(GemmOnTasks, TheTaskModelSearchesTilesInTheBudget) {
    gemm_problem q;
    q.type = dtype::f32;
    q.m = q.n = q.k = 4096;
    const std::size_t budget = std::size_t(48) << 20;  // a quarter of the operands
    device_rates host;
    host.h2d = host.d2h = 8e9;
    host.flops = 180e9;
    host.host_memory = true;
    device_rates gpu = host;
    gpu.host_memory = false;
    gpu.h2d = gpu.d2h = 25e9;
    gpu.flops = 50e12;
    for (const device_rates& r : {host, gpu}) {
        SCOPED_TRACE(r.host_memory ? "host cores" : "own memory");
        plan_options po;
        const gemm_plan searched = plan_gemm(q, budget, r, po);
        po.engine = gemm_engine::pipeline;
        const gemm_plan pipeline = plan_gemm(q, budget, r, po);
        ASSERT_EQ(searched.engine, gemm_engine::tasks);
        EXPECT_NE(searched.tile_choice.find("the task model's pick"), std::string::npos) << searched.tile_choice;
        EXPECT_NE(explain(searched).find("tile choice"), std::string::npos);
        EXPECT_TRUE(searched.tile_m != pipeline.tile_m || searched.tile_n != pipeline.tile_n ||
                    searched.tile_k != pipeline.tile_k);
        // On the host's cores copies add to the time: fewer bytes; elsewhere at most as many.
        if (r.host_memory) EXPECT_LT(searched.bytes_h2d, pipeline.bytes_h2d);
        else EXPECT_LE(searched.bytes_h2d, pipeline.bytes_h2d);
        EXPECT_LE(searched.peak_device_bytes, budget);
        EXPECT_GE(searched.a_slots, 2);
        EXPECT_GE(searched.b_slots, 2);
        if (r.host_memory) EXPECT_GE(searched.tile_k, reproducible_k_block(q.type));
        else EXPECT_GE(searched.c_slots, 2);
        // The same tiles through the task engine's own planner predict what the plan says.
        gemm_tiling t = detail::routines::tiling_of(searched);
        const auto again = detail::routines::plan_gemm_tasks(q, t, budget, false, r, 1);
        EXPECT_EQ(again.model.bytes_h2d, searched.bytes_h2d);
        // Reproducible plans step through k one k-block at a time: the search keeps the planned
        // k-tile, and the steps are the k-blocks of each C tile.
        plan_options repro;
        repro.reproducible = true;
        const gemm_plan rp = plan_gemm(q, budget, r, repro);
        repro.engine = gemm_engine::pipeline;
        const gemm_plan rp_pipeline = plan_gemm(q, budget, r, repro);
        ASSERT_GT(rp.k_block, 0);
        EXPECT_EQ(rp.tile_k, rp_pipeline.tile_k) << rp.tile_choice;
        EXPECT_EQ(rp.steps, std::size_t(rp.tiles_m * rp.tiles_n * ((q.k + rp.k_block - 1) / rp.k_block)));
        // A strategy given: its tiles as the pipeline plans them, no search.
        plan_options forced;
        forced.strategy = gemm_strategy::c_block;
        EXPECT_TRUE(plan_gemm(q, budget, r, forced).tile_choice.empty());
        // Tiles given: as given, no search.
        plan_options given;
        given.strategy = gemm_strategy::c_block;
        given.tile_m = 1024;
        given.tile_n = 1024;
        given.tile_k = 512;
        const gemm_plan g = plan_gemm(q, budget, r, given);
        EXPECT_EQ(g.engine, gemm_engine::tasks);
        EXPECT_TRUE(g.tile_choice.empty()) << g.tile_choice;
        EXPECT_EQ(g.tile_m, 1024);
        EXPECT_EQ(g.tile_n, 1024);
        EXPECT_EQ(g.tile_k, 512);
    }
}

// A context in place keeps the slots and the reservation a copying call left across an in-place
// call (which reserves nothing): the reservation once went with it while its slots stayed, so the
// device counted their bytes as free and freed them later through the lost reservation.
TEST(GemmOnTasks, AnInPlaceCallLeavesTheKeptSlotsAndTheirReservation) {
    context ctx("cpu");
    device& dev = *ctx.devices().front();
    host_matrix<double> a(150, 110), b(110, 170), c(150, 170);
    fill_random(a.view(), 41);
    fill_random(b.view(), 42);
    gemm_call_options copying;
    copying.strategy = gemm_strategy::c_block;
    copying.tile_m = copying.tile_n = copying.tile_k = 40;
    gemm_call_options in_place;
    in_place.strategy = gemm_strategy::zero_copy;
    in_place.tile_m = in_place.tile_n = in_place.tile_k = 64;
    const gemm_report first = ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), copying);
    ASSERT_EQ(first.plan.engine, gemm_engine::tasks);
    const std::size_t kept = dev.bytes_in_use();
    EXPECT_GT(kept, 0u);  // slots kept for the next call
    const gemm_report second = ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), in_place);
    ASSERT_EQ(second.plan.engine, gemm_engine::tasks);
    ASSERT_EQ(second.plan.strategy, gemm_strategy::zero_copy);
    EXPECT_EQ(dev.bytes_in_use(), kept);
    const gemm_report third = ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), copying);
    EXPECT_EQ(third.peak_device_bytes, first.peak_device_bytes);
    EXPECT_EQ(dev.bytes_in_use(), kept);
    host_matrix<double> c0(150, 170);  // beta = 0: not read
    EXPECT_LT(gemm_relative_error<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c0.view(), c.view()), 1e-13);
}

// Through a context: progress once per step (as the pipeline reports it), a cancel named as GEMM's,
// and a second call on the same shape reusing the slots the first one left (the same peak).
// A context keeps each device's streams between calls (tiles_kit). In place on one CPU device the
// compute stream runs on the calling thread; a copying run on the same context (a-panel asked for
// on an unbudgeted CPU) must get a stream served by its own thread, so copies and kernels overlap,
// and an in-place call after it the calling-thread one again. The first a-panel run had taken the
// calling-thread stream an earlier in-place run of the context had left: every step on the caller.
TEST(GemmOnTasks, CopyingAndInPlaceRunsOfOneContextEachGetTheirComputeStream) {
    context ctx("cpu");
    const std::thread::id caller = std::this_thread::get_id();
    host_matrix<double> a(150, 110), b(110, 170), c(150, 170), t(90, 90, layout::col_major), x(90, 7, layout::col_major);
    fill_random(a.view(), 31);
    fill_random(b.view(), 32);
    fill_random(t.view(), 33);
    for (index_t i = 0; i < 90; ++i) t.view()(i, i) = 90.0;
    for (int round = 0; round < 2; ++round) {
        std::vector<std::thread::id> steps;
        gemm_call_options call;
        call.strategy = gemm_strategy::a_panel;
        call.tile_m = call.tile_n = 40;
        call.run.on_step_done = [&](std::size_t) { steps.push_back(std::this_thread::get_id()); };
        fill_nan(c.view());
        const gemm_report r = ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), call);
        ASSERT_EQ(r.plan.engine, gemm_engine::tasks);
        EXPECT_GT(r.bytes_h2d, 0u) << "not a copying run";
        ASSERT_EQ(steps.size(), r.plan.steps);
        for (const std::thread::id& s : steps) EXPECT_NE(s, caller) << "round " << round << ": a copying run's step on the caller";
        host_matrix<double> c0(150, 170);
        fill_random(c0.view(), 34);
        EXPECT_LT(gemm_relative_error<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c0.view(), c.view()), 1e-13);

        std::vector<std::thread::id> tasks;
        blas3_call_options in_place;
        in_place.tile = 32;
        in_place.run.on_task_done = [&](std::size_t, std::size_t) { tasks.push_back(std::this_thread::get_id()); };
        fill_random(x.view(), 35);
        const blas3_report s = ctx.trsm<double>(side::left, uplo::lower, op::n, diag::non_unit, 1.0, t.view(), x.view(), in_place);
        ASSERT_EQ(tasks.size(), s.plan.tasks);
        for (const std::thread::id& id : tasks) EXPECT_EQ(id, caller) << "round " << round << ": an in-place task off the caller";
    }
}

TEST(GemmOnTasks, AContextCallReportsStepsCancelsAndReusesItsSlots) {
    context_options o;
    o.memory_budget = 128 * 1024;
    o.cpu_threads = 1;
    o.rates = device_rates{};
    context ctx("cpu", o);
    host_matrix<double> a(150, 110), b(110, 170), c(150, 170);
    fill_random(a.view(), 21);
    fill_random(b.view(), 22);
    fill_nan(c.view());
    std::size_t steps = 0, last_step = 0, units = 0;
    gemm_call_options call;
    call.strategy = gemm_strategy::tiles_3d;  // three k-steps a task
    call.tile_m = call.tile_n = call.tile_k = 40;
    call.run.on_step_done = [&](std::size_t s) {
        ++steps;
        last_step = s;
    };
    call.run.on_unit_done = [&](std::size_t u) { units = u; };
    const gemm_report first = ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), call);
    ASSERT_EQ(first.plan.engine, gemm_engine::tasks);
    EXPECT_GT(first.plan.steps, first.plan.units);
    EXPECT_EQ(steps, first.plan.steps);
    EXPECT_EQ(last_step, first.plan.steps);
    EXPECT_EQ(units, first.plan.units);
    host_matrix<double> c0(150, 170);  // beta = 0: not read
    fill_random(c0.view(), 23);
    EXPECT_LT(gemm_relative_error<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c0.view(), c.view()), 1e-13);

    // The second call allocates nothing: with the device refusing its next allocation it runs
    // without a warning (a new slot would be refused and the run would warn of fewer buffers).
    gemm_call_options again = call;
    again.run = {};
    fault_injection::faults refuse;
    refuse.fail_allocations = 1;
    fault_injection::arm(*ctx.devices().front(), refuse);
    const gemm_report second = ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), again);
    fault_injection::clear();
    EXPECT_TRUE(second.warnings.empty()) << second.warnings.front();
    EXPECT_EQ(second.peak_device_bytes, first.peak_device_bytes);
    EXPECT_EQ(second.bytes_h2d, first.bytes_h2d);

    std::atomic<bool> stop{false};
    gemm_call_options cancelling = again;
    cancelling.run.cancel = &stop;
    cancelling.run.on_step_done = [&](std::size_t s) {
        if (s >= 2) stop = true;
    };
    try {
        ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view(), cancelling);
        FAIL() << "a cancelled call returned";
    } catch (const cancelled& e) {
        EXPECT_EQ(std::string(e.what()).rfind("gemm: cancelled", 0), 0u) << e.what();
    }
    // The context is usable after a cancel.
    fill_nan(c.view());
    ctx.gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view());
    EXPECT_LT(gemm_relative_error<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c0.view(), c.view()), 1e-13);
}

// A device refusing a few allocations (memory others took): the store is made again with half as
// many slots, but never with fewer than a task holds at once (three: C, A and B), even when the
// tiles' classes merge into one (square tiles) and halving would leave two.
TEST(GemmOnTasks, RefusedSlotsAreRetriedWithFewerButNeverTooFew) {
    const auto devs = open_devices("cpu@256KiB");
    gemm_tiling t;
    t.tile_m = t.tile_n = t.tile_k = 24;  // one class of 4.5 KiB slots
    fault_injection::faults f;
    f.allocations_before_failing = 2;  // the first try: 2 slots, then a refusal (fewer than a task holds)
    f.fail_allocations = 2;            // and the second try's first slot; then the device has room again
    fault_injection::arm(*devs[0], f);
    detail::engine::run_result r;
    EXPECT_LT(run_case<double>(raw(devs), op::n, op::n, 70, 90, 60, layout::row_major, 0.5, t, nullptr, &r), 1e-13);
    fault_injection::clear();
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("ran with fewer buffers (3 of"), std::string::npos) << r.warnings[0];
    // A device that keeps refusing: the allocation's error, not a run stalled on too few slots.
    fault_injection::faults always;
    always.allocations_before_failing = 2;
    always.fail_allocations = 1000;
    fault_injection::arm(*devs[0], always);
    EXPECT_THROW(run_case<double>(raw(devs), op::n, op::n, 70, 90, 60, layout::row_major, 0.5, t), device_error);
    fault_injection::clear();
}

TEST(GemmOnTasks, SurvivesADeviceFault) {
    const auto devs = open_devices("cpu:3@48KiB");
    fault_injection::faults f;
    f.fail_after_units = 1;
    fault_injection::arm(*devs[1], f);
    const fault_injection::slowdown slow({{devs[0]->id(), 0.003}, {devs[2]->id(), 0.003}});
    gemm_tiling t;
    t.tile_m = t.tile_n = t.tile_k = 24;
    EXPECT_LT(run_case<double>(raw(devs), op::n, op::t, 97, 70, 50, layout::row_major, 0.5, t), 1e-13);
    fault_injection::clear();
}

TEST(GemmOnTasks, ReproducibleIsBitwiseTheGemmPipelines) {
    // The pipeline, reproducible, tiled kernel, on two budgeted devices.
    const index_t m = 130, n = 90, k = 700;
    host_matrix<double> a(m, k), b(k, n), c(m, n), d(m, n);
    fill_random(a.view(), 4);
    fill_random(b.view(), 5);
    const auto two = open_devices("cpu:2@256KiB");
    plan_options po;
    po.reproducible = true;
    po.kernel = gemm_kernel::tiled;
    po.devices = 2;
    const gemm_problem q = describe_gemm<double>(op::n, op::n, 1.0, a.view(), b.view(), 0.0, c.view());
    execute_gemm<double>(plan_gemm(q, two[0]->budget(), device_rates{}, po), raw(two), 1.0, a.view(), b.view(), 0.0,
                         c.view());
    // The task engine, the same kernel and k-blocks, other tiles, one and three devices.
    for (const char* spec : {"cpu", "cpu:3@512KiB"}) {
        const auto devs = open_devices(spec);
        gemm_tiling t;
        t.tile_m = 40;
        t.tile_n = 56;
        t.k_block = reproducible_k_block(dtype::f64);
        t.kernel = gemm_kernel::tiled;
        fill_nan(d.view());
        gemm_on_tasks<double>(raw(devs), op::n, op::n, 1.0, a.view(), b.view(), 0.0, d.view(), t);
        EXPECT_EQ(std::memcmp(c.data(), d.data(), sizeof(double) * std::size_t(c.size())), 0) << spec;
    }
}

}  // namespace
}  // namespace tilestream
