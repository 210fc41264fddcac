// The context's direct path and the engine's step bound: small calls run on the calling thread
// with the host's kernel (no device work at all) and give the engine's bits for the same kernel;
// reproducible mode keeps its k-order on both routes; explain shows the crossover; budgeted CPU
// devices keep staging like accelerators; long in-place runs are cut into bounded steps that
// report progress and stop soon after a cancel, also on a fault-injected slow device.
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/trace.hpp>
#include <tilestream/verify.hpp>

#include "core/fault_injection.hpp"
#include "core/rate_probes.hpp"
#include "core/tick_clock.hpp"

#include <cblas.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <complex>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

// The cblas_?gemv calls libtilestream makes, counted: this test binary's definitions interpose
// OpenBLAS's (an executable's symbols come first) and forward to them.
namespace {
std::atomic<int> gemv_calls{0};
template <class F>
F next_symbol(F, const char* name) {
    return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}
}  // namespace

extern "C" {
void cblas_sgemv(const CBLAS_ORDER order, const CBLAS_TRANSPOSE trans, const blasint m, const blasint n,
                 const float alpha, const float* a, const blasint lda, const float* x, const blasint incx,
                 const float beta, float* y, const blasint incy) {
    static const auto f = next_symbol(&cblas_sgemv, "cblas_sgemv");
    ++gemv_calls;
    f(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void cblas_dgemv(const CBLAS_ORDER order, const CBLAS_TRANSPOSE trans, const blasint m, const blasint n,
                 const double alpha, const double* a, const blasint lda, const double* x, const blasint incx,
                 const double beta, double* y, const blasint incy) {
    static const auto f = next_symbol(&cblas_dgemv, "cblas_dgemv");
    ++gemv_calls;
    f(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void cblas_cgemv(const CBLAS_ORDER order, const CBLAS_TRANSPOSE trans, const blasint m, const blasint n,
                 const void* alpha, const void* a, const blasint lda, const void* x, const blasint incx,
                 const void* beta, void* y, const blasint incy) {
    static const auto f = next_symbol(&cblas_cgemv, "cblas_cgemv");
    ++gemv_calls;
    f(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void cblas_zgemv(const CBLAS_ORDER order, const CBLAS_TRANSPOSE trans, const blasint m, const blasint n,
                 const void* alpha, const void* a, const blasint lda, const void* x, const blasint incx,
                 const void* beta, void* y, const blasint incy) {
    static const auto f = next_symbol(&cblas_zgemv, "cblas_zgemv");
    ++gemv_calls;
    f(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
}

namespace tilestream {
namespace {

template <class T>
struct operands {
    op oa, ob;
    index_t m, n, k;
    host_matrix<T> a, b, c0;
    operands(op oa_, op ob_, index_t m_, index_t n_, index_t k_, layout lay, std::uint64_t seed)
        : oa(oa_), ob(ob_), m(m_), n(n_), k(k_), a(oa == op::n ? m : k, oa == op::n ? k : m, lay),
          b(ob == op::n ? k : n, ob == op::n ? n : k, lay), c0(m, n, lay) {
        fill_random(a.view(), seed);
        fill_random(b.view(), seed + 1);
        fill_random(c0.view(), seed + 2);
    }
    /// C poisoned (beta 0) or holding C0, then the call; returns C and the report.
    std::pair<host_matrix<T>, gemm_report> run(context& ctx, T alpha, T beta, const gemm_call_options& call = {}) {
        host_matrix<T> c(m, n, c0.view().layout());
        if (beta == T(0)) fill_nan(c.view());
        else std::memcpy(c.data(), c0.data(), sizeof(T) * std::size_t(m * n));
        gemm_report rep = ctx.gemm<T>(oa, ob, alpha, a.view(), b.view(), beta, c.view(), call);
        const auto r = check_gemm<T>(oa, ob, alpha, a.view(), b.view(), beta, c0.view(), c.view());
        EXPECT_TRUE(r.passed()) << m << "x" << n << "x" << k << " " << to_string(rep.plan.strategy) << ": " << r.summary();
        return {std::move(c), std::move(rep)};
    }
};

template <class T>
bool same_bits(const host_matrix<T>& x, const host_matrix<T>& y) {
    return std::memcmp(x.data(), y.data(), sizeof(T) * std::size_t(x.rows() * x.cols())) == 0;
}

template <class T>
void small_calls_are_direct_and_match_the_engine(context& ctx, bool bitwise = true) {
    // Spans of device work: a direct call has none.
    trace_recorder spans;
    for (device* d : ctx.devices()) d->set_trace_sink(&spans);
    int shape = 0;
    for (auto [m, n, k] : {std::array<index_t, 3>{1, 1, 1}, {7, 5, 3}, {33, 17, 29}, {64, 63, 65}, {1, 120, 90}})
        for (int ops = 0; ops < 4; ++ops)
            for (layout lay : {layout::row_major, layout::col_major}) {
                // Complex products cost four times the real ones: the largest shape may measure
                // faster through the engine, so complex takes the smaller shapes only.
                if (is_complex_v<T> && m * n * k > 20000) continue;
                constexpr op tr = is_complex_v<T> ? op::c : op::t;  // conjugate transposes on complex data
                const op oa = (ops & 1) ? tr : op::n, ob = (ops & 2) ? tr : op::n;
                operands<T> x(oa, ob, m, n, k, lay, 100 + std::uint64_t(++shape));
                const T beta = shape % 2 ? T(0) : T(0.5);
                // The first call of a precision and shape class may set up device work (streams,
                // and the kernels' probes in a context without declared rates).
                x.run(ctx, T(1.25), beta);
                const std::size_t before = spans.spans().size();
                auto [direct, rd] = x.run(ctx, T(1.25), beta);
                ASSERT_EQ(rd.plan.strategy, gemm_strategy::direct) << m << "x" << n << "x" << k;
                EXPECT_EQ(spans.spans().size(), before) << "a direct call made device work";
                // The same kernel through the engine (one unit in place): the same bits.
                gemm_call_options engine;
                engine.strategy = gemm_strategy::zero_copy;
                engine.kernel = rd.plan.kernel;
                auto [staged, re] = x.run(ctx, T(1.25), beta, engine);
                EXPECT_EQ(re.plan.strategy, gemm_strategy::zero_copy);
                EXPECT_GT(spans.spans().size(), before);
                if (bitwise)
                    EXPECT_TRUE(same_bits(direct, staged)) << m << "x" << n << "x" << k << " kernel " << to_string(rd.plan.kernel);
            }
    for (device* d : ctx.devices()) d->set_trace_sink(nullptr);
}

/// Declared rates: the route of a call is then decided without probes, so it does not depend on
/// the machine's load (under ASan on a busy CI machine the measured engine once won 33x17x29).
/// The measured choice has its own tests (KernelChoiceIsTheFastestItMeasured, the explain test).
context_options declared_rates() {
    context_options o;
    o.rates = device_rates{};
    o.rates->flops = 1e12;
    return o;
}

TEST(DirectPath, SmallCallsRunOnTheCallingThreadAndMatchTheEngineBitwise) {
    context ctx("cpu", declared_rates());
    small_calls_are_direct_and_match_the_engine<float>(ctx);
    small_calls_are_direct_and_match_the_engine<double>(ctx);
    small_calls_are_direct_and_match_the_engine<std::complex<float>>(ctx);
    small_calls_are_direct_and_match_the_engine<std::complex<double>>(ctx);
}

TEST(DirectPath, EveryKernelTheDirectPathRunsMatchesTheEngine) {
    // Two devices: the engine splits OpenBLAS's call over their workers (rows of C apart), so only
    // the tiled kernel, whose bits do not depend on the sub-problem, is compared bit for bit.
    for (gemm_kernel k : {gemm_kernel::vendor, gemm_kernel::tiled}) {
        context_options o = declared_rates();
        o.kernel = k;
        context ctx("cpu:2", o);
        small_calls_are_direct_and_match_the_engine<float>(ctx, k == gemm_kernel::tiled);
        small_calls_are_direct_and_match_the_engine<double>(ctx, k == gemm_kernel::tiled);
        small_calls_are_direct_and_match_the_engine<std::complex<double>>(ctx, k == gemm_kernel::tiled);
    }
}

/// A matrix of T with its own layout and a leading dimension 3 larger than needed, every element
/// (padding too) set: random non-zero magnitudes, or NaN.
template <class T>
struct padded {
    index_t rows, cols, ld;
    layout lay;
    std::vector<T> data;
    padded(index_t r, index_t c, layout l, std::uint64_t seed, bool nan = false)
        : rows(r), cols(c), ld((l == layout::row_major ? c : r) + 3), lay(l),
          data(std::size_t(ld * (l == layout::row_major ? r : c))) {
        const host_matrix_view<T> all(data.data(), l == layout::row_major ? r : ld, l == layout::row_major ? ld : c, l);
        if (nan) {
            fill_nan(all);
            return;
        }
        // Magnitudes only: a 1x1 result of random signs may cancel to nearly nothing, where a
        // relative error says nothing (a conjugation still flips a sign that shows).
        fill_random(all, seed);
        for (T& x : data) {
            if constexpr (is_complex_v<T>) x = T(std::abs(x.real()), std::abs(x.imag()));
            else x = std::abs(x);
        }
    }
    host_matrix_view<T> view() { return {data.data(), rows, cols, lay, ld}; }
};

/// C <- alpha op(A) op(B) + beta C with C a single column or row (and k == 1 among them), every
/// op on both operands, every layout of A, B and C, leading dimensions larger than needed: the
/// result against the reference, C's padding untouched, and whether cblas_?gemv ran (for
/// `expect_gemv`: n == 1 with op(B) not conjugated, or m == 1 with op(A) not; vendor kernel).
template <class T>
void single_line_products(context& ctx, const gemm_call_options& call, bool expect_gemv, const char* path) {
    constexpr bool cplx = is_complex_v<T>;
    {
        // The first call of the class measures its route (a 1x1x1 product timed on the way).
        host_matrix<T> a1(1, 1), b1(1, 1), c1(1, 1);
        fill_random(a1.view(), 5);
        fill_random(b1.view(), 6);
        ctx.gemm<T>(op::n, op::n, T(1), a1.view(), b1.view(), T(0), c1.view(), call);
    }
    int seed = 0;
    for (auto [m, n, k] : {std::array<index_t, 3>{1, 37, 29}, {41, 1, 23}, {1, 1, 31}, {1, 19, 1}, {17, 1, 1}, {1, 1, 1}})
        for (op oa : {op::n, op::t, op::c})
            for (op ob : {op::n, op::t, op::c})
                for (int lays = 0; lays < 8; ++lays) {
                    const layout la = lays & 1 ? layout::col_major : layout::row_major;
                    const layout lb = lays & 2 ? layout::col_major : layout::row_major;
                    const layout lc = lays & 4 ? layout::col_major : layout::row_major;
                    padded<T> a(oa == op::n ? m : k, oa == op::n ? k : m, la, std::uint64_t(++seed) * 3);
                    padded<T> b(ob == op::n ? k : n, ob == op::n ? n : k, lb, std::uint64_t(seed) * 3 + 1);
                    for (int scalars = 0; scalars < 3; ++scalars) {
                        // alpha != 0 with beta 0 (C poisoned) or beta != 0; alpha 0 (C scaled only).
                        const auto value = [](double re, double im) {
                            if constexpr (cplx) return T(re, im);
                            else return T(re);
                        };
                        const T alpha = scalars == 2 ? T(0) : value(1.25, -0.5);
                        const T beta = scalars == 0 ? T(0) : value(0.5, 0.25);
                        padded<T> c(m, n, lc, std::uint64_t(seed) * 3 + 2, beta == T(0));
                        const std::vector<T> c0 = c.data;
                        const int before = gemv_calls.load();
                        ctx.gemm<T>(oa, ob, alpha, a.view(), b.view(), beta, c.view(), call);
                        const bool conj_a = cplx && oa == op::c, conj_b = cplx && ob == op::c;
                        const bool gemv = expect_gemv && alpha != T(0) && ((n == 1 && !conj_b) || (m == 1 && !conj_a));
                        const std::string what = std::string(path) + " " + std::string(to_string(dtype_of<T>())) + " " + std::to_string(m) + "x" +
                                                 std::to_string(n) + "x" + std::to_string(k) + " op " +
                                                 std::string(to_string(oa)) + std::string(to_string(ob)) + " layouts " +
                                                 std::to_string(lays) + " scalars " + std::to_string(scalars);
                        EXPECT_EQ(gemv_calls.load() - before, gemv ? 1 : 0) << what;
                        padded<T> c_start = c;
                        c_start.data = c0;
                        const auto r = check_gemm<T>(oa, ob, alpha, host_matrix_view<const T>(a.view()),
                                                     host_matrix_view<const T>(b.view()), beta,
                                                     host_matrix_view<const T>(c_start.view()),
                                                     host_matrix_view<const T>(c.view()));
                        EXPECT_TRUE(r.passed()) << what << ": " << r.summary();
                        // The padding between C's lines is never written.
                        const index_t lines = lc == layout::row_major ? m : n, line = lc == layout::row_major ? n : m;
                        for (index_t l = 0; l < lines; ++l)
                            for (index_t i = line; i < c.ld; ++i) {
                                const std::size_t at = std::size_t(l * c.ld + i);
                                ASSERT_EQ(std::memcmp(&c.data[at], &c0[at], sizeof(T)), 0) << what << ": padding written";
                            }
                    }
                }
}

template <class T>
void single_line_products_on_every_path() {
    context_options o = declared_rates();
    o.kernel = gemm_kernel::vendor;
    context one("cpu", o);
    gemm_call_options direct;
    direct.strategy = gemm_strategy::direct;
    single_line_products<T>(one, direct, true, "direct");
    single_line_products<T>(one, {}, true, "automatic");  // the context's choice (direct here)
    gemm_call_options engine;
    engine.strategy = gemm_strategy::zero_copy;
    single_line_products<T>(one, engine, true, "engine");  // one device: OpenBLAS's threads, one call
    context two("cpu:2", o);
    single_line_products<T>(two, engine, true, "engine on two devices");  // two devices: a call on each device's part of C
    // The other kernels never call gemv (nor does reproducible mode, which runs tiled).
    gemm_call_options tiled;
    tiled.kernel = gemm_kernel::tiled;
    single_line_products<T>(one, tiled, false, "tiled");
    context_options ro = declared_rates();
    ro.reproducible = true;
    context reproducible("cpu", ro);
    single_line_products<T>(reproducible, {}, false, "reproducible");
}

// OpenBLAS's ?gemm is ~2.8x slower than its ?gemv for a row vector times a matrix (1x4096x4096
// f32), which numpy runs as gemv: the vendor kernel calls cblas_?gemv when C is a single line.
TEST(DirectPath, SingleLineProductsRunAsMatrixVectorProducts) {
    single_line_products_on_every_path<float>();
    single_line_products_on_every_path<double>();
    single_line_products_on_every_path<std::complex<float>>();
    single_line_products_on_every_path<std::complex<double>>();
}

// The direct path times its calls with detail::tick_clock (the TSC where the kernel keeps time with
// it, calibrated against steady_clock): its seconds are seconds.
TEST(DirectPath, TheCallClockMeasuresSeconds) {
    for (int i = 0; i < 3; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::uint64_t c0 = detail::tick_clock::now();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const std::uint64_t c1 = detail::tick_clock::now();
        const double outer = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double s = detail::tick_clock::seconds(c0, c1);
        EXPECT_GE(s, 0.0199);
        EXPECT_LE(s, outer * 1.001);
    }
    // A direct call's seconds lie inside the time around it.
    context ctx("cpu", declared_rates());
    operands<double> x(op::n, op::n, 100, 90, 80, layout::row_major, 11);
    x.run(ctx, 1.0, 0.0);
    const auto t0 = std::chrono::steady_clock::now();
    auto [c, rep] = x.run(ctx, 1.0, 0.0);
    const double outer = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(rep.plan.strategy, gemm_strategy::direct);
    EXPECT_GT(rep.seconds, 0.0);
    EXPECT_LE(rep.seconds, outer * 1.001);
}

// Deadlines on the call clock (a route's pending re-check, read on every call): at(t) is due from
// steady_clock time t on, never before; a past time is due at once; 0 is never a deadline.
TEST(DirectPath, TheCallClockKeepsSteadyClockDeadlines) {
    using clock = std::chrono::steady_clock;
    const std::uint64_t past = detail::tick_clock::at(clock::now() - std::chrono::seconds(5));
    EXPECT_NE(past, 0u);
    EXPECT_GE(detail::tick_clock::now(), past);
    EXPECT_GT(detail::tick_clock::at(clock::now() + std::chrono::hours(24 * 365 * 100)), detail::tick_clock::now() + 1000);
    for (int i = 0; i < 3; ++i) {
        const auto due = clock::now() + std::chrono::milliseconds(30);
        const std::uint64_t deadline = detail::tick_clock::at(due);
        // Polled until due on the call clock: steady_clock agrees it is time (the calibration's
        // error, ~1e-5 of 30 ms, is within the 50 us allowed), and it came within a few ms.
        while (detail::tick_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(100));
        const auto seen = clock::now();
        EXPECT_GE(seen, due - std::chrono::microseconds(50));
        EXPECT_LE(seen, due + std::chrono::milliseconds(20));
    }
}

TEST(DirectPath, ReproducibleModeGivesTheSameBitsOnBothRoutesAndAnyStepCut) {
    context_options o;
    o.reproducible = true;
    context ctx("cpu:2", o);
    for (auto [m, n, k] : {std::array<index_t, 3>{37, 29, 700}, {5, 61, 1025}}) {
        operands<double> x(op::t, op::n, m, n, k, layout::col_major, 7);
        gemm_call_options direct;
        direct.strategy = gemm_strategy::direct;
        auto [d, rd] = x.run(ctx, 0.75, 0.0, direct);
        EXPECT_EQ(rd.plan.strategy, gemm_strategy::direct);
        EXPECT_EQ(rd.plan.kernel, gemm_kernel::tiled);
        EXPECT_EQ(rd.plan.k_block, reproducible_k_block(dtype::f64));
        gemm_call_options engine;
        engine.strategy = gemm_strategy::zero_copy;
        engine.tile_k = 256;  // one k-block a step
        auto [e, re] = x.run(ctx, 0.75, 0.0, engine);
        EXPECT_GT(re.plan.steps, 1u);
        EXPECT_TRUE(same_bits(d, e)) << m << "x" << n << "x" << k;
        auto [f, rf] = x.run(ctx, 0.75, 0.0);  // whatever the context chooses
        EXPECT_TRUE(same_bits(d, f)) << to_string(rf.plan.strategy);
    }
}

TEST(DirectPath, ExplainShowsTheCrossoverAndTheKernelsMeasured) {
    context ctx("cpu");
    host_matrix<float> a(40, 30), b(30, 20), c(40, 20);
    const gemm_plan small = ctx.plan<float>(op::n, op::n, 1.0f, a.view(), b.view(), 0.0f, c.view());
    EXPECT_EQ(small.strategy, gemm_strategy::direct);
    const std::string text = ctx.explain(small);
    EXPECT_NE(text.find("direct"), std::string::npos) << text;
    EXPECT_NE(text.find("crossover"), std::string::npos) << text;
    EXPECT_NE(text.find("GFLOP/s at 64x64x64"), std::string::npos) << text;  // the small class's probe
    // A product far past the step bound (planned, not run), for a call that watches its steps (a
    // step callback or a cancel flag): to the engine, in bounded steps.
    host_matrix<float> big_a(1, 1), big_b(1, 1), big_c(1, 1);
    gemm_problem q = describe_gemm<float>(op::n, op::n, 1.0f, big_a.view(), big_b.view(), 0.0f, big_c.view());
    q.m = q.n = 8192;
    q.k = 8192;
    q.lda = q.ldb = q.ldc = 8192;
    gemm_call_options watched;
    watched.run.on_step_done = [](std::size_t) {};
    const gemm_plan big = ctx.plan(q, watched);
    EXPECT_EQ(big.strategy, gemm_strategy::zero_copy);
    EXPECT_NE(ctx.explain(big).find("over the crossover"), std::string::npos) << ctx.explain(big);
    EXPECT_GT(big.steps, 1u);
    const double step = 2.0 * double(big.tile_m) * double(big.tile_n) * double(big.tile_k) / big.rates.flops;
    EXPECT_LE(step, 0.2 * 1.05) << ctx.explain(big);
    EXPECT_EQ(big.tile_k % reproducible_k_block(dtype::f32), 0) << "steps cut k in whole k-blocks";
    std::atomic<bool> flag{false};
    gemm_call_options cancellable;
    cancellable.run.cancel = &flag;
    EXPECT_EQ(ctx.plan(q, cancellable).steps, big.steps) << "a cancel flag watches the steps too";
    // Unwatched, no step is worth its cost: one call, on the direct path where the engine runs the
    // host's kernel on the same cores (the crossover by rates alone), else one engine step.
    const gemm_plan whole = ctx.plan(q);
    EXPECT_EQ(whole.steps, 1u) << ctx.explain(whole);
    EXPECT_EQ(whole.tile_k, q.k) << ctx.explain(whole);
    EXPECT_NE(ctx.explain(whole).find("without them"), std::string::npos) << ctx.explain(whole);
}

TEST(DirectPath, BudgetedCpuDevicesStageLikeAccelerators) {
    context_options o;
    o.memory_budget = 1 << 20;
    context ctx("cpu", o);
    operands<float> x(op::n, op::n, 30, 20, 10, layout::row_major, 3);
    auto [c, rep] = x.run(ctx, 1.0f, 0.0f);
    EXPECT_NE(rep.plan.strategy, gemm_strategy::direct);
    EXPECT_GT(rep.bytes_h2d, 0u);
}

TEST(DirectPath, KernelChoiceIsTheFastestItMeasured) {
    auto devs = open_devices("cpu");
    for (dtype t : {dtype::f32, dtype::f64})
        for (shape_class c : all_shape_classes) {
            const kernel_choice k = choose_kernel(*devs.front(), t, c);
            ASSERT_TRUE(k.measured) << to_string(t) << " " << to_string(c);
            ASSERT_EQ(k.rates.size(), 2u);
            double vendor = 0, best = 0;
            gemm_kernel fastest = gemm_kernel::vendor;
            for (const kernel_rate& r : k.rates) {
                EXPECT_TRUE(r.measured) << to_string(r.kernel) << ": " << r.note;
                EXPECT_GT(r.flops, 0);
                if (r.kernel == gemm_kernel::vendor) vendor = r.flops;
                if (r.flops > best) best = r.flops, fastest = r.kernel;
            }
            EXPECT_EQ(k.kernel, vendor * 1.05 >= best ? gemm_kernel::vendor : fastest);
        }
    EXPECT_EQ(classify_gemm(16, 16, 16), shape_class::tiny);
    EXPECT_EQ(classify_gemm(17, 16, 16), shape_class::small);
    EXPECT_EQ(classify_gemm(4096, 4096, 16), shape_class::thin_k);
    EXPECT_EQ(classify_gemm(16, 16, 4096), shape_class::thin_m);
    EXPECT_EQ(classify_gemm(300, 200, 100), shape_class::square);
}

// m-thin and n-thin products are classed apart and probed with a thin side like theirs: the tiled
// kernel's register tile is not square (f32 AVX-512: 12 x 32), so 4096x16x4096 pads each 32-wide
// tile to half of it, which a probe of n = 32 hid (it chose tiled, 0.44x of OpenBLAS's sgemm).
TEST(KernelChoice, ThinShapesAreClassedAndProbedByTheirThinSide) {
    EXPECT_EQ(classify_gemm(4096, 16, 4096), shape_class::thin_n);
    EXPECT_EQ(classify_gemm(16, 4096, 4096), shape_class::thin_m);
    EXPECT_EQ(classify_gemm(1, 4096, 4096), shape_class::line);  // a single row of C: ?gemv
    EXPECT_EQ(classify_gemm(4096, 1, 4096), shape_class::line);
    EXPECT_EQ(classify_gemm(2, 4096, 4096), shape_class::thin_m);
    EXPECT_EQ(classify_gemm(63, 63, 4096), shape_class::thin_m);
    EXPECT_EQ(classify_gemm(4096, 4096, 16), shape_class::thin_k);
    EXPECT_EQ(classify_gemm(4096, 64, 4096), shape_class::square);
    EXPECT_EQ(classify_gemm(129, 128, 128), shape_class::square);
    EXPECT_EQ(classify_gemm(128, 128, 128), shape_class::small);
    std::vector<std::string> names;
    for (shape_class c : all_shape_classes) names.emplace_back(to_string(c));
    EXPECT_EQ(names, (std::vector<std::string>{"tiny", "line", "small", "thin-k", "thin-m", "thin-n", "square"}));

    const auto shape = [](shape_class c) {
        const detail::probe_shape p = detail::probe_of(c, 512);
        return std::vector<index_t>{p.m, p.n, p.k};
    };
    EXPECT_EQ(shape(shape_class::thin_m), (std::vector<index_t>{16, 512, 512}));
    EXPECT_EQ(shape(shape_class::thin_n), (std::vector<index_t>{512, 16, 512}));
    EXPECT_EQ(shape(shape_class::thin_k), (std::vector<index_t>{512, 512, 32}));
    EXPECT_EQ(shape(shape_class::square), (std::vector<index_t>{512, 512, 512}));
    EXPECT_EQ(shape(shape_class::small), (std::vector<index_t>{64, 64, 64}));
    EXPECT_EQ(shape(shape_class::tiny), (std::vector<index_t>{8, 8, 8}));
    EXPECT_EQ(shape(shape_class::line), (std::vector<index_t>{1, 512, 512}));
    // Each probe is of its own class.
    for (shape_class c : all_shape_classes) {
        const detail::probe_shape p = detail::probe_of(c, 512);
        EXPECT_EQ(classify_gemm(p.m, p.n, p.k), c) << to_string(c);
    }
}

kernel_choice synthetic(double vendor_gflops, double tiled_gflops) {
    kernel_choice c;
    for (auto [k, g] : {std::pair{gemm_kernel::vendor, vendor_gflops}, std::pair{gemm_kernel::tiled, tiled_gflops}}) {
        kernel_rate r;
        r.kernel = k;
        r.flops = g * 1e9;
        r.measured = g > 0;
        c.rates.push_back(r);
    }
    return c;
}

// Vendor stays unless another kernel is more than 5% faster; a square verdict against vendor is
// confirmed on a larger probe (the class's verdict applies to 4096^3 as to 512^3), other classes'
// and vendor's verdicts are not (the first call stays cheap).
TEST(KernelChoice, VendorIsDisplacedOnlyByAClearMarginAndSquareVerdictsAreConfirmed) {
    struct row {
        double vendor, tiled;
        gemm_kernel expected;
    };
    for (const row& r : {row{100, 104.9, gemm_kernel::vendor}, row{100, 105.1, gemm_kernel::tiled},
                         row{100, 50, gemm_kernel::vendor}, row{0, 50, gemm_kernel::tiled},
                         row{12.8, 88.9, gemm_kernel::tiled}}) {
        kernel_choice c = synthetic(r.vendor, r.tiled);
        detail::pick_fastest(c);
        EXPECT_TRUE(c.measured);
        EXPECT_EQ(c.kernel, r.expected) << r.vendor << " " << r.tiled;
        for (shape_class cls : all_shape_classes)
            EXPECT_EQ(detail::confirm_on_larger_probe(c, cls),
                      cls == shape_class::square && r.expected != gemm_kernel::vendor)
                << to_string(cls) << " " << r.vendor << " " << r.tiled;
    }
    kernel_choice none = synthetic(0, 0);
    detail::pick_fastest(none);
    EXPECT_FALSE(none.measured);
    EXPECT_EQ(none.kernel, gemm_kernel::vendor);
    EXPECT_FALSE(detail::confirm_on_larger_probe(none, shape_class::square));
}

/// Timings of one probe, vendor's then tiled's: runs around each kernel's fastest (the second run),
/// the others slower as a busy machine makes them.
detail::probe_timings timings(double vendor_seconds, double tiled_seconds) {
    detail::probe_timings p;
    for (double s : {vendor_seconds, tiled_seconds}) p.seconds.push_back({1.7 * s, s, 3 * s, 1.2 * s, 9 * s});
    p.notes.resize(2);
    return p;
}

// Scripted kernel probes (no re-check within the test) that keep where each ran and on which
// shape, as "host 8" or "cpu:0 512" (the probe's m).
class recorded_probes {
public:
    explicit recorded_probes(std::function<detail::probe_timings(const detail::scripted_kernel_probes::request&)> f)
        : hook_(
              [this, f = std::move(f)](const detail::scripted_kernel_probes::request& r) {
                  {
                      const std::lock_guard lock(mutex_);
                      asked_.push_back(r.where + " " + std::to_string(r.shape.m));
                  }
                  return f(r);
              },
              3600) {}
    bool asked(const std::string& where_and_m) const {
        const std::lock_guard lock(mutex_);
        return std::find(asked_.begin(), asked_.end(), where_and_m) != asked_.end();
    }

private:
    mutable std::mutex mutex_;
    std::vector<std::string> asked_;
    detail::scripted_kernel_probes hook_;  // last: set after what it records into, gone before it
};

double rate_of(const kernel_choice& c, gemm_kernel k) {
    for (const kernel_rate& r : c.rates)
        if (r.kernel == k && r.measured) return r.flops;
    return 0;
}

// A probe's rate is the fastest of its runs (load only ever adds time): here vendor's median is
// the slower one and its best the faster, and the other way round; a candidate without runs is
// not measured and says why. Every precision (complex products count four multiply-adds).
TEST(KernelChoice, ProbesTakeTheFastestOfTheirRuns) {
    const detail::probe_shape s{97, 61, 43};
    for (dtype t : all_dtypes) {
        const double f = double(dtype_traits(t).flops_per_multiply_add) * 97 * 61 * 43;
        detail::probe_timings p;
        p.seconds = {{3e-3, 1e-3, 2.5e-3, 9e-3, 4e-3}, {2e-3, 1.5e-3, 1.2e-3, 1.9e-3, 2.2e-3}};  // medians 3 and 1.9 ms
        kernel_choice c = detail::choice_from_timings(t, s, p);
        ASSERT_TRUE(c.measured);
        EXPECT_EQ(c.kernel, gemm_kernel::vendor) << to_string(t);
        EXPECT_DOUBLE_EQ(rate_of(c, gemm_kernel::vendor), f / 1e-3);
        EXPECT_DOUBLE_EQ(rate_of(c, gemm_kernel::tiled), f / 1.2e-3);
        EXPECT_EQ(std::vector<index_t>({c.m, c.n, c.k}), std::vector<index_t>({97, 61, 43}));
        p.seconds = {{1e-3, 1.1e-3, 0.99e-3}, {5e-3, 0.9e-3, 4e-3}};  // tiled's best is 10% ahead
        c = detail::choice_from_timings(t, s, p);
        EXPECT_EQ(c.kernel, gemm_kernel::tiled) << to_string(t);
        EXPECT_DOUBLE_EQ(rate_of(c, gemm_kernel::tiled), f / 0.9e-3);
        p.seconds = {{}, {2e-3}};
        p.notes = {"not on this device", ""};
        c = detail::choice_from_timings(t, s, p);
        EXPECT_EQ(c.kernel, gemm_kernel::tiled);
        EXPECT_FALSE(c.rates.front().measured);
        EXPECT_EQ(c.rates.front().note, "not on this device");
        EXPECT_FALSE(detail::displaces_vendor(c));  // nothing to displace
    }
}

/// A scripted probe source: the timings given, one probe after another, and the shapes asked.
struct script {
    std::vector<detail::probe_timings> replies;
    std::vector<std::vector<index_t>> asked;
    detail::probe_source source() {
        return [this](const detail::probe_shape& s) {
            asked.push_back({s.m, s.n, s.k});
            if (asked.size() > replies.size()) ADD_FAILURE() << "more probes than scripted";
            return asked.size() <= replies.size() ? replies[asked.size() - 1] : timings(1e-3, 1e-3);
        };
    }
};

// A verdict against vendor stands only if a second measurement agrees (a busy spell can slow
// OpenBLAS's threads in one measurement): the square class's probe of twice the side, other
// classes' probe once more; when the second disagrees vendor stays, with the second's rates
// (what `devices --kernels` shows agrees with the verdict). Vendor's verdicts take one probe, as before.
TEST(KernelChoice, AVerdictAgainstVendorNeedsASecondMeasurementThatAgrees) {
    const auto slow_vendor = timings(10e-3, 1e-3), fast_vendor = timings(1e-3, 1.2e-3), fast_tiled = timings(1e-3, 0.5e-3);
    const std::vector<index_t> thin{16, 512, 512}, square{512, 512, 512}, square2{1024, 1024, 1024};
    for (dtype t : all_dtypes) {
        const double mad = dtype_traits(t).flops_per_multiply_add;
        {  // seen once (a loaded OpenBLAS), not on the second measurement: vendor
            script s{{slow_vendor, fast_vendor}};
            const auto v = detail::decide_kernel(t, shape_class::thin_m, 512, true, s.source());
            EXPECT_EQ(v.choice.kernel, gemm_kernel::vendor);
            EXPECT_TRUE(v.complete);
            EXPECT_EQ(s.asked, (std::vector<std::vector<index_t>>{thin, thin}));
            EXPECT_DOUBLE_EQ(rate_of(v.choice, gemm_kernel::vendor), mad * 16 * 512 * 512 / 1e-3);
            EXPECT_EQ(std::vector<index_t>({v.first.m, v.first.n, v.first.k}), thin);
        }
        {  // seen twice: kept, with the second measurement's rates
            script s{{slow_vendor, fast_tiled}};
            const auto v = detail::decide_kernel(t, shape_class::thin_n, 512, true, s.source());
            EXPECT_EQ(v.choice.kernel, gemm_kernel::tiled);
            EXPECT_EQ(s.asked.size(), 2u);
            EXPECT_DOUBLE_EQ(rate_of(v.choice, gemm_kernel::tiled), mad * 512 * 16 * 512 / 0.5e-3);
        }
        {  // square: the second measurement is the probe of twice the side; it disagrees
            script s{{fast_tiled, fast_vendor}};
            const auto v = detail::decide_kernel(t, shape_class::square, 512, true, s.source());
            EXPECT_EQ(v.choice.kernel, gemm_kernel::vendor);
            EXPECT_EQ(s.asked, (std::vector<std::vector<index_t>>{square, square2}));
            EXPECT_EQ(v.choice.m, 1024);
        }
        {  // square, both agree: two probes, no third (the first call costs what it did)
            script s{{fast_tiled, fast_tiled}};
            const auto v = detail::decide_kernel(t, shape_class::square, 512, true, s.source());
            EXPECT_EQ(v.choice.kernel, gemm_kernel::tiled);
            EXPECT_EQ(s.asked, (std::vector<std::vector<index_t>>{square, square2}));
            EXPECT_DOUBLE_EQ(rate_of(v.choice, gemm_kernel::tiled), mad * 1024 * 1024 * 1024 / 0.5e-3);
        }
        {  // square whose larger probe does not fit: the same probe again
            script s{{fast_tiled, slow_vendor}};
            EXPECT_EQ(detail::decide_kernel(t, shape_class::square, 512, false, s.source()).choice.kernel, gemm_kernel::tiled);
            EXPECT_EQ(s.asked, (std::vector<std::vector<index_t>>{square, square}));
        }
        {  // vendor's verdict, and a margin under 5%: one probe
            for (const auto& first : {fast_vendor, timings(1e-3, 0.96e-3)}) {
                script s{{first}};
                EXPECT_EQ(detail::decide_kernel(t, shape_class::square, 512, true, s.source()).choice.kernel,
                          gemm_kernel::vendor);
                EXPECT_EQ(s.asked.size(), 1u);
            }
        }
        {  // the second measurement could not run (its probe did not fit): vendor, and not kept
            detail::probe_timings none;
            none.seconds.resize(2);
            none.notes.assign(2, "the probe does not fit the budget");
            none.complete = false;
            script s{{fast_tiled, none}};
            const auto v = detail::decide_kernel(t, shape_class::small, 512, true, s.source());
            EXPECT_EQ(v.choice.kernel, gemm_kernel::vendor);
            EXPECT_FALSE(v.complete);
        }
        {  // no vendor to measure against (no CLBlast): nothing to displace, the square verdict still
           // measured at twice the side
            detail::probe_timings tiled_only = fast_tiled;
            tiled_only.seconds.front().clear();
            tiled_only.notes.front() = "not on this device";
            script s{{tiled_only, tiled_only}};
            const auto v = detail::decide_kernel(t, shape_class::square, 512, true, s.source());
            EXPECT_EQ(v.choice.kernel, gemm_kernel::tiled);
            EXPECT_EQ(s.asked, (std::vector<std::vector<index_t>>{square, square2}));
        }
    }
}

/// Scripted timings for choose_kernel and choose_host_kernel: per place and precision, the first
/// `tiled_first` probes see vendor slowed down 20x, the later ones a quiet machine (vendor ahead).
struct busy_then_quiet {
    int tiled_first = 2;
    std::mutex m;
    std::map<std::pair<std::string, int>, int> probes;
    std::vector<std::vector<index_t>> asked;
    int count(const std::string& where, dtype t) {
        std::lock_guard lock(m);
        return probes[{where, int(t)}];
    }
    detail::probe_timings operator()(const detail::scripted_kernel_probes::request& r) {
        std::lock_guard lock(m);
        asked.push_back({r.shape.m, r.shape.n, r.shape.k});
        return ++probes[{r.where, int(r.type)}] <= tiled_first ? timings(20e-3, 1e-3) : timings(1e-3, 1.5e-3);
    }
};

// A process that starts on a busy machine: its verdict against vendor (seen on both measurements)
// is measured once more by the first call from its re-check time on, on the class's first probe;
// vendor returns when that disagrees; after it no probe runs again. Before its time, no probe runs.
TEST(KernelChoice, AVerdictAgainstVendorIsRecheckedOnceLater) {
    auto devs = open_devices("cpu");
    device& dev = *devs.front();
    for (dtype t : all_dtypes) {
        busy_then_quiet script;
        {
            const detail::scripted_kernel_probes hook([&](const auto& r) { return script(r); }, 3600);
            const detail::kept_choice first = detail::choose_kernel_kept(dev, t, shape_class::thin_m, math_mode::strict);
            EXPECT_EQ(first.choice.kernel, gemm_kernel::tiled);
            ASSERT_TRUE(first.recheck_at.has_value());
            for (int i = 0; i < 3; ++i) {  // an hour is not up: kept, no probe
                const detail::kept_choice again = detail::choose_kernel_kept(dev, t, shape_class::thin_m, math_mode::strict);
                EXPECT_EQ(again.choice.kernel, gemm_kernel::tiled);
                EXPECT_EQ(again.recheck_at, first.recheck_at);
            }
            EXPECT_EQ(script.count(dev.id(), t), 2);
        }
        busy_then_quiet later;
        const detail::scripted_kernel_probes hook([&](const auto& r) { return later(r); }, 0);  // due at once
        EXPECT_EQ(choose_kernel(dev, t, shape_class::thin_m).kernel, gemm_kernel::tiled);
        EXPECT_EQ(later.count(dev.id(), t), 2);
        const detail::kept_choice rechecked = detail::choose_kernel_kept(dev, t, shape_class::thin_m, math_mode::strict);
        EXPECT_EQ(rechecked.choice.kernel, gemm_kernel::vendor);
        EXPECT_FALSE(rechecked.recheck_at.has_value());
        EXPECT_EQ(later.count(dev.id(), t), 3);
        EXPECT_GT(rate_of(rechecked.choice, gemm_kernel::vendor), rate_of(rechecked.choice, gemm_kernel::tiled));
        for (int i = 0; i < 3; ++i) EXPECT_EQ(choose_kernel(dev, t, shape_class::thin_m).kernel, gemm_kernel::vendor);
        EXPECT_EQ(later.count(dev.id(), t), 3);  // final: no probe in steady state

        // The host's choice (the direct path's) the same way; a square verdict is re-checked on
        // its first probe (512^3, an eighth of the larger probe's cost).
        later.asked.clear();
        EXPECT_EQ(choose_host_kernel(t, shape_class::square, 2).kernel, gemm_kernel::tiled);
        EXPECT_EQ(choose_host_kernel(t, shape_class::square, 2).kernel, gemm_kernel::vendor);
        EXPECT_EQ(choose_host_kernel(t, shape_class::square, 2).kernel, gemm_kernel::vendor);
        EXPECT_EQ(later.asked, (std::vector<std::vector<index_t>>{{512, 512, 512}, {1024, 1024, 1024}, {512, 512, 512}}));
    }
    {
        // Calls from several threads when the re-check is due: one of them makes it (one probe);
        // the others keep the verdict meanwhile, asked back soon; all end on vendor.
        busy_then_quiet threads;
        const detail::scripted_kernel_probes hook([&](const auto& r) { return threads(r); }, 0);
        EXPECT_EQ(choose_kernel(dev, dtype::f32, shape_class::thin_k).kernel, gemm_kernel::tiled);
        std::vector<std::thread> callers;
        for (int i = 0; i < 4; ++i)
            callers.emplace_back([&] {
                for (int n = 0; n < 1000; ++n) {
                    const detail::kept_choice k = detail::choose_kernel_kept(dev, dtype::f32, shape_class::thin_k, math_mode::strict);
                    if (!k.recheck_at) {
                        EXPECT_EQ(k.choice.kernel, gemm_kernel::vendor);
                        return;
                    }
                    std::this_thread::sleep_for(std::chrono::microseconds(200));
                }
                ADD_FAILURE() << "the re-check never ended";
            });
        for (auto& t : callers) t.join();
        EXPECT_EQ(threads.count(dev.id(), dtype::f32), 3);
    }
    // A re-check that agrees keeps the verdict (and its rates) for good.
    busy_then_quiet busy;
    busy.tiled_first = 1000;
    const detail::scripted_kernel_probes hook([&](const auto& r) { return busy(r); }, 0);
    const kernel_choice first = choose_kernel(dev, dtype::f64, shape_class::small);
    EXPECT_EQ(first.kernel, gemm_kernel::tiled);
    for (int i = 0; i < 3; ++i) {
        const kernel_choice again = choose_kernel(dev, dtype::f64, shape_class::small);
        EXPECT_EQ(again.kernel, gemm_kernel::tiled);
        EXPECT_DOUBLE_EQ(rate_of(again, gemm_kernel::tiled), rate_of(first, gemm_kernel::tiled));
    }
    EXPECT_EQ(busy.count(dev.id(), dtype::f64), 3);
}

// A context's route follows the re-check: calls chose tiled (both measurements on a busy
// machine), the first call from the re-check time on measures again and vendor runs from then
// (the plans kept for the shape are dropped); results stay right throughout.
// Where a product is so small that the vendor library's entry cost is most of the call (no side
// above 16), the direct path's kernel is measured on a tiny probe of its own, on the calling thread:
// the kernel measured faster there runs those products; larger small products keep their own
// measurement. Either kernel can win (never a fixed preference).
TEST(KernelChoice, TinyProductsTakeTheKernelMeasuredFastestThere) {
    for (bool tiled_faster : {true, false}) {
        const recorded_probes probes([&](const detail::scripted_kernel_probes::request& r) {
            const bool tiny = std::max({r.shape.m, r.shape.n, r.shape.k}) <= 16;
            return tiny && tiled_faster ? timings(2e-6, 1e-6) : timings(1e-3, 2e-3);
        });
        context ctx("cpu");
        int seed = 0;
        for (auto [m, n, k] : {std::array<index_t, 3>{1, 1, 1}, {16, 16, 16}, {5, 16, 3}, {17, 16, 16}, {64, 64, 64}})
            for (dtype t : {dtype::f32, dtype::c64})
                visit_dtype(t, [&]<class T>() {
                    operands<T> x(op::n, op::t, m, n, k, layout::col_major, std::uint64_t(++seed));
                    auto [c, rep] = x.run(ctx, T(1.5), T(0));
                    const bool tiny = std::max({m, n, k}) <= 16;
                    EXPECT_EQ(rep.plan.strategy, gemm_strategy::direct) << ctx.explain(rep.plan);
                    EXPECT_EQ(rep.plan.kernel, tiny && tiled_faster ? gemm_kernel::tiled : gemm_kernel::vendor)
                        << m << "x" << n << "x" << k << "\n" << ctx.explain(rep.plan);
                });
        // The host's own probe measured the tiny class (a device's probe adds the engine's cost).
        EXPECT_TRUE(probes.asked("host 8"));
    }
}

// Small products (no side above 128, the 64^3 probe) take the direct path's kernel from the host's
// own probe on the calling thread, not from the device's probe with tiled's rate divided by its
// threads: at that size the device's hand-off is in its probe and hid a tiled kernel four times as
// fast as a misdetected OpenBLAS (an Emerald Rapids VM). Either kernel can win.
TEST(KernelChoice, SmallProductsTakeTheHostsOwnMeasurementForTheDirectPath) {
    for (bool host_tiled_faster : {true, false}) {
        const recorded_probes probes([&](const detail::scripted_kernel_probes::request& r) {
            // The device: vendor ahead (and tiled's rate halved again over its threads); the host:
            // as the case says, its faster kernel ahead of the device's vendor too, so the engine
            // is no faster and every small product goes direct.
            if (r.where != "host") return timings(1e-3, 1.5e-3);
            return host_tiled_faster ? timings(2e-3, 0.5e-3) : timings(0.5e-3, 2e-3);
        });
        context ctx("cpu");
        int seed = 0;
        for (auto [m, n, k] : {std::array<index_t, 3>{64, 64, 64}, {100, 17, 128}})
            for (dtype t : {dtype::f64, dtype::c32})
                visit_dtype(t, [&]<class T>() {
                    operands<T> x(op::n, op::t, m, n, k, layout::row_major, std::uint64_t(++seed));
                    auto [c, rep] = x.run(ctx, T(1.5), T(0));
                    EXPECT_EQ(rep.plan.strategy, gemm_strategy::direct) << ctx.explain(rep.plan);
                    EXPECT_EQ(rep.plan.kernel, host_tiled_faster ? gemm_kernel::tiled : gemm_kernel::vendor)
                        << m << "x" << n << "x" << k << "\n" << ctx.explain(rep.plan);
                });
        EXPECT_TRUE(probes.asked("host 64"));
    }
}

// A single row or column of C is a class of its own, measured on a probe of one row (1 x 512 x 512):
// the vendor kernel runs ?gemv there, which a thin probe of 16 rows does not measure.
TEST(KernelChoice, SingleLineProductsAreMeasuredOnALineProbe) {
    const detail::scripted_kernel_probes hook(
        [](const detail::scripted_kernel_probes::request& r) {
            // Off the line, tiled twice as fast as vendor even on one thread: the direct path's
            // choice (tiled's device rate over the threads) and the engine's agree, so the result
            // does not hang on the crossover, which moves with the engine's measured cost (large
            // under a sanitizer).
            return r.shape.m == 1 || r.shape.n == 1 ? timings(1e-3, 2e-3) : timings(4e-3, 1e-3);
        },
        3600);
    context ctx("cpu");
    int seed = 0;
    for (auto [m, n, k, line] : {std::array<index_t, 4>{1, 150, 200, 1}, {150, 1, 200, 1}, {16, 150, 200, 0}}) {
        operands<double> x(op::n, op::n, m, n, k, layout::row_major, std::uint64_t(++seed));
        auto [c, rep] = x.run(ctx, 1.5, 0.0);
        EXPECT_EQ(rep.plan.kernel, line ? gemm_kernel::vendor : gemm_kernel::tiled) << m << "x" << n << "x" << k << "\n"
                                                                                     << ctx.explain(rep.plan);
    }
}

TEST(KernelChoice, AContextsCallsRunVendorAfterTheRecheckDisagrees) {
    busy_then_quiet script;
    const detail::scripted_kernel_probes hook([&](const auto& r) { return script(r); }, 0);
    context ctx("cpu");
    const auto calls = [&]<class T>(index_t m, index_t n, const gemm_call_options& call) {
        operands<T> x(op::n, op::t, m, n, 140, layout::row_major, std::uint64_t(m + n));
        auto [c1, r1] = x.run(ctx, T(1.5), T(0), call);
        EXPECT_EQ(r1.plan.kernel, gemm_kernel::tiled) << ctx.explain(r1.plan);
        auto [c2, r2] = x.run(ctx, T(1.5), T(0), call);  // the same problem: its plan was kept
        EXPECT_EQ(r2.plan.kernel, gemm_kernel::vendor) << ctx.explain(r2.plan);
        const std::size_t probes = script.asked.size();
        auto [c3, r3] = x.run(ctx, T(1.5), T(0.5), call);
        EXPECT_EQ(r3.plan.kernel, gemm_kernel::vendor) << ctx.explain(r3.plan);
        EXPECT_EQ(script.asked.size(), probes);
        return r3.plan.strategy;
    };
    // Thin-m f64 under the crossover (direct); thin-n f32 through the engine, whose plan for the
    // shape was kept from the first call. The direct product is small (13440 flops) so that it
    // stays under the busy route's crossover (tiled on one thread against tiled on the device) for
    // any engine cost above 1.7 us: a product near the crossover went through the engine when the
    // engine's measured cost came out low, and the engine's route re-measured at once (the
    // re-check is due at once here), so the first call already ran vendor (a flake in CI).
    EXPECT_EQ(calls.operator()<double>(2, 24, {}), gemm_strategy::direct);
    gemm_call_options engine;
    engine.strategy = gemm_strategy::zero_copy;
    EXPECT_EQ(calls.operator()<float>(24, 2, engine), gemm_strategy::zero_copy);
}

// A context's route with a pending re-check is measured again from its time on, not before (the
// call clock reads the deadline).
TEST(KernelChoice, AContextsRouteIsRecheckedFromItsTimeOnNotBefore) {
    busy_then_quiet script;
    const double recheck = 0.4;
    const detail::scripted_kernel_probes hook([&](const auto& r) { return script(r); }, recheck);
    context ctx("cpu");
    operands<double> x(op::n, op::t, 2, 150, 140, layout::row_major, 3);
    auto [c1, r1] = x.run(ctx, 1.5, 0.0);
    const auto verdict = std::chrono::steady_clock::now();
    EXPECT_EQ(r1.plan.kernel, gemm_kernel::tiled) << ctx.explain(r1.plan);
    const std::size_t probes = script.asked.size();
    auto [c2, r2] = x.run(ctx, 1.5, 0.0);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - verdict).count() < 0.8 * recheck) {
        EXPECT_EQ(r2.plan.kernel, gemm_kernel::tiled) << ctx.explain(r2.plan);
        EXPECT_EQ(script.asked.size(), probes);  // not due: no probe
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(recheck + 0.05));
    auto [c3, r3] = x.run(ctx, 1.5, 0.0);
    EXPECT_EQ(r3.plan.kernel, gemm_kernel::vendor) << ctx.explain(r3.plan);
    EXPECT_GT(script.asked.size(), probes);
}

// Declared rates, so the steps are known: 64 x 64 x 256 f64 is 2.1 MFLOP, 2.1 ms at a declared
// 1 GFLOP/s, so a bound of 2.5 ms makes one k-block (256) a step. The route is measured by a first
// call before the device is slowed down.
context_options slow_options() {
    context_options o;
    o.rates = device_rates{};
    o.rates->flops = 1e9;
    o.step_seconds = 0.0025;
    return o;
}

TEST(Granularity, LongInPlaceRunsReportProgressStepByStepOnASlowDevice) {
    context ctx("cpu", slow_options());
    operands<double> x(op::n, op::n, 64, 64, 2048, layout::row_major, 5);
    x.run(ctx, 1.0, 0.0);
    const fault_injection::slowdown slow({{ctx.devices().front()->id(), 0.05}});
    gemm_call_options call;
    std::vector<std::size_t> steps;
    std::mutex m;
    call.run.on_step_done = [&](std::size_t s) {
        std::lock_guard lock(m);
        steps.push_back(s);
    };
    auto [c, rep] = x.run(ctx, 1.0, 0.0, call);
    EXPECT_EQ(rep.plan.strategy, gemm_strategy::zero_copy);
    EXPECT_EQ(rep.plan.steps, 8u) << ctx.explain(rep.plan);
    ASSERT_EQ(steps.size(), rep.plan.steps);
    for (std::size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], i + 1);
}

TEST(Granularity, CancelEndsALongRunWithinAStep) {
    context ctx("cpu", slow_options());
    operands<double> x(op::n, op::n, 64, 64, 4096, layout::row_major, 6);  // 16 steps, 1.6 s with the slowdown
    x.run(ctx, 1.0, 0.0);
    const fault_injection::slowdown slow({{ctx.devices().front()->id(), 0.1}});
    std::atomic<bool> cancel{false};
    gemm_call_options call;
    call.run.cancel = &cancel;
    host_matrix<double> c(64, 64);
    std::thread stopper([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        cancel = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(ctx.gemm<double>(op::n, op::n, 1.0, x.a.view(), x.b.view(), 0.0, c.view(), call), cancelled);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stopper.join();
    EXPECT_LT(seconds, 0.25 + 0.5) << "a cancel must end the run within 0.5 s";
}

}  // namespace
}  // namespace tilestream
