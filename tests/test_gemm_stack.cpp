// The tiled kernel's stacks of small products (cpu::gemm_tiled_items_with: the stack kernel for
// real types, the small and blocked paths set up once per stack for complex ones), on every
// instruction set this CPU supports, in every precision: each product against the reference and
// bit for bit against a single tiled call of the same product (the bits reproducible mode and the
// direct path rely on), over odd and non-square sizes 1..17 and the widest panel, ops n/t/c, both
// layouts, strided and listed stacks, alpha/beta (beta = 0 on NaN-poisoned C), k across k-blocks.
#include "backends/cpu/cpu_isa.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "core/rate_probes.hpp"
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tilestream {
namespace {

using cpu::isa;

constexpr double poison = std::numeric_limits<double>::quiet_NaN();
constexpr double outside = 777.0;  // C's padding: must survive

template <class T>
T entry(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(0.1, 1.0), s(0.0, 1.0);
    const auto one = [&] { return (s(rng) < 0.5 ? -1.0 : 1.0) * u(rng); };
    if constexpr (is_complex_v<T>)
        return T(real_type_t<T>(one()), real_type_t<T>(one()));
    else
        return T(one());
}

/// One stack: `count` products of one shape, each operand stored with one padding element per line
/// (A and B padded with NaN, so a read past an operand shows in C; C with `outside`).
template <class T>
struct stack_case {
    index_t count, m, n, k;
    op oa, ob;
    layout lay_a, lay_b, lay_c;
    T alpha, beta;
    index_t lda, ldb, ldc, size_a, size_b, size_c;
    std::vector<T> a, b, c0;

    stack_case(index_t count_, index_t m_, index_t n_, index_t k_, unsigned combo, std::uint64_t seed)
        : count(count_), m(m_), n(n_), k(k_) {
        constexpr op tr = is_complex_v<T> ? op::c : op::t;
        const op ops[] = {op::n, op::t, tr};
        oa = ops[combo % 3];
        ob = ops[(combo / 3) % 3];
        lay_a = combo & 8 ? layout::col_major : layout::row_major;
        lay_b = combo & 16 ? layout::col_major : layout::row_major;
        lay_c = combo & 32 ? layout::col_major : layout::row_major;
        const double scalars[][2] = {{1.0, 0.0}, {-1.25, 0.5}, {0.7, -0.3}, {2.0, 1.0}, {0.75, 0.0}};
        const auto& sc = scalars[(combo + seed) % 5];
        alpha = T(real_type_t<T>(sc[0]));
        beta = T(real_type_t<T>(sc[1]));
        if constexpr (is_complex_v<T>)
            if (combo % 2) alpha = T(real_type_t<T>(sc[0]), real_type_t<T>(0.5));  // a complex alpha too
        std::mt19937_64 rng(seed * 7919 + combo);
        const auto fill = [&](std::vector<T>& x, index_t rows, index_t cols, layout l, index_t& ld, index_t& size,
                              T pad) {
            ld = (l == layout::row_major ? cols : rows) + 1;
            size = (l == layout::row_major ? rows : cols) * ld;
            x.assign(std::size_t(count * size), pad);
            for (index_t q = 0; q < count; ++q)
                for (index_t i = 0; i < rows; ++i)
                    for (index_t j = 0; j < cols; ++j)
                        x[std::size_t(q * size + (l == layout::row_major ? i * ld + j : i + j * ld))] = entry<T>(rng);
        };
        fill(a, oa == op::n ? m : k, oa == op::n ? k : m, lay_a, lda, size_a, T(real_type_t<T>(poison)));
        fill(b, ob == op::n ? k : n, ob == op::n ? n : k, lay_b, ldb, size_b, T(real_type_t<T>(poison)));
        fill(c0, m, n, lay_c, ldc, size_c, T(real_type_t<T>(outside)));
        // beta == 0 must never read C: it starts as NaN, and any read shows in the result.
        if (beta == T(0))
            for (index_t q = 0; q < count; ++q)
                for (index_t i = 0; i < m; ++i)
                    for (index_t j = 0; j < n; ++j) c0[std::size_t(q * size_c + c_index(i, j))] = T(real_type_t<T>(poison));
    }
    index_t c_index(index_t i, index_t j) const { return lay_c == layout::row_major ? i * ldc + j : i + j * ldc; }
    gemm_call call(const T* pa, const T* pb, T* pc) const {
        return gemm_call{.type = dtype_of<T>(), .op_a = oa, .op_b = ob, .m = m, .n = n, .k = k, .alpha = alpha,
                         .beta = beta, .a = pa, .lda = lda, .layout_a = lay_a, .b = pb, .ldb = ldb, .layout_b = lay_b,
                         .c = pc, .ldc = ldc, .layout_c = lay_c, .kernel = gemm_kernel::tiled};
    }
    std::string describe() const {
        std::ostringstream s;
        s << count << " of " << m << "x" << n << "x" << k << " A " << to_string(lay_a) << "/" << to_string(oa) << " B "
          << to_string(lay_b) << "/" << to_string(ob) << " C " << to_string(lay_c) << " alpha " << alpha << " beta "
          << beta;
        return s.str();
    }
};

/// Runs one stack through gemm_tiled_items_with (strided, or listed in reverse order) and checks
/// every product against the reference and against a single tiled call, bit for bit.
template <class T>
void check_stack(isa s, const cpu::cache_sizes& caches, const stack_case<T>& p, bool listed) {
    SCOPED_TRACE(p.describe() + (listed ? " listed" : " strided") + " on " + std::string(to_string(s)));
    std::vector<T> c = p.c0, single = p.c0;
    gemm_batched_call g;
    g.call = p.call(p.a.data(), p.b.data(), c.data());
    g.count = p.count;
    std::vector<const void*> al, bl;
    std::vector<void*> cl;
    if (listed) {
        for (index_t q = p.count - 1; q >= 0; --q) {
            al.push_back(p.a.data() + q * p.size_a);
            bl.push_back(p.b.data() + q * p.size_b);
            cl.push_back(c.data() + q * p.size_c);
        }
        g.a_list = al.data();
        g.b_list = bl.data();
        g.c_list = cl.data();
    } else {
        g.stride_a = p.size_a;
        g.stride_b = p.size_b;
        g.stride_c = p.size_c;
    }
    // Two ranges, as the workers of a device split a stack.
    const index_t half = p.count / 2;
    cpu::gemm_tiled_items_with(s, caches, g, 0, half);
    cpu::gemm_tiled_items_with(s, caches, g, half, p.count);

    cpu::thread_pool one(1);
    using R = real_type_t<T>;
    const double eps = std::numeric_limits<R>::epsilon();
    int reported = 0;
    for (index_t q = 0; q < p.count; ++q) {
        const T* a = p.a.data() + q * p.size_a;
        const T* b = p.b.data() + q * p.size_b;
        cpu::gemm_tiled_with(s, caches, p.call(a, b, single.data() + q * p.size_c), one);
        std::vector<T> want(p.c0.begin() + q * p.size_c, p.c0.begin() + (q + 1) * p.size_c);
        reference::gemm(p.call(a, b, want.data()));
        for (index_t i = 0; i < p.m; ++i)
            for (index_t j = 0; j < p.n; ++j) {
                const std::size_t at = std::size_t(q * p.size_c + p.c_index(i, j));
                const T got = c[at], w = want[std::size_t(p.c_index(i, j))];
                // Bound: |alpha| k max|a||b| + |beta||c|, entries under 1 in magnitude (times 2 for complex).
                const double bound = std::abs(p.alpha) * 2.0 * double(p.k) + (p.beta == T(0) ? 0.0 : std::abs(p.beta) * 2.0);
                if (!(std::abs(got - w) <= 4.0 * double(p.k + 2) * eps * bound) && reported++ < 3)
                    ADD_FAILURE() << "product " << q << " C(" << i << "," << j << ") = " << got << ", reference " << w;
                if (std::memcmp(&got, &single[at], sizeof(T)) != 0 && reported++ < 3)
                    ADD_FAILURE() << "product " << q << " C(" << i << "," << j << ") = " << got
                                  << ", a single tiled call gives " << single[at];
            }
    }
    for (std::size_t x = 0; x < c.size(); ++x)
        if (p.c0[x] == T(R(outside)) && !(c[x] == T(R(outside)))) {
            ADD_FAILURE() << "element " << x << " outside the products' C was written";
            break;
        }
}

std::vector<isa> sets() { return cpu::supported_isas(); }

template <class T>
void odd_sizes_on_every_set() {
    // Every ISA's panel widths: 1..17 crosses 1, 2 and 3 vectors of every set for both real types
    // (and of the 1m panels for complex ones), non-square throughout.
    const index_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17};
    unsigned combo = 0;
    for (isa s : sets())
        for (index_t m : sizes)
            for (index_t n : {index_t(1), index_t(3), index_t(4), index_t(8), index_t(13), index_t(16), index_t(17)}) {
                const index_t k = sizes[(m + n + combo) % std::size(sizes)];
                const stack_case<T> p(3, m, n, k, combo, std::uint64_t(m * 31 + n));
                check_stack(s, cpu::host_cache_sizes(), p, combo % 4 == 1);
                combo = (combo + 7) % 64;  // walks every op, layout and scalar combination
            }
}

TEST(GemmStack, OddSizesMatchTheReferenceAndSingleTiledCallsF32) { odd_sizes_on_every_set<float>(); }
TEST(GemmStack, OddSizesMatchTheReferenceAndSingleTiledCallsF64) { odd_sizes_on_every_set<double>(); }
TEST(GemmStack, OddSizesMatchTheReferenceAndSingleTiledCallsC32) { odd_sizes_on_every_set<std::complex<float>>(); }
TEST(GemmStack, OddSizesMatchTheReferenceAndSingleTiledCallsC64) { odd_sizes_on_every_set<std::complex<double>>(); }

template <class T>
void every_combination_and_wide_panels() {
    for (isa s : sets()) {
        using R = real_type_t<T>;
        // The widest panel the stack kernel takes (4 vectors) and one past it (the blocked path).
        const int widest = cpu::small_cols_of<R>(cpu::config_for(s)) / (is_complex_v<T> ? 2 : 1);
        for (unsigned combo = 0; combo < 64; ++combo) {
            const index_t n = combo % 3 == 0 ? widest : combo % 3 == 1 ? widest - 1 : widest + 1;
            const stack_case<T> p(2, 5 + combo % 4, n, 3 + combo % 5, combo, combo);
            check_stack(s, cpu::host_cache_sizes(), p, combo % 2 == 1);
        }
        // Past the single call's small path (m n k over 32^3) but within the stack kernel's: the
        // single call runs the blocked path (packed panels, MR x NR tiles), so equal bits compare
        // the stack kernel with the micro-kernel itself.
        if constexpr (!is_complex_v<T>)
            for (unsigned combo : {0u, 5u, 22u, 33u, 47u})
                check_stack(s, cpu::host_cache_sizes(), stack_case<T>(2, 40, 17, 60, combo, 9), combo % 2 == 1);
        // k across several k-blocks (small caches: KC of a few tens), and alpha = 0 (C scaled only).
        const cpu::cache_sizes tiny{4 * 1024, 16 * 1024, 64 * 1024};
        for (unsigned combo : {0u, 2u, 13u, 37u, 63u}) {
            check_stack(s, tiny, stack_case<T>(3, 6, 9, 75, combo, 5), false);
            stack_case<T> zero(3, 4, 7, 5, combo, 6);
            zero.alpha = T(0);
            check_stack(s, tiny, zero, true);
        }
    }
}

TEST(GemmStack, EveryOpLayoutAndScalarWithTheWidestPanelsF32) { every_combination_and_wide_panels<float>(); }
TEST(GemmStack, EveryOpLayoutAndScalarWithTheWidestPanelsF64) { every_combination_and_wide_panels<double>(); }
TEST(GemmStack, EveryOpLayoutAndScalarWithTheWidestPanelsC32) { every_combination_and_wide_panels<std::complex<float>>(); }
TEST(GemmStack, EveryOpLayoutAndScalarWithTheWidestPanelsC64) { every_combination_and_wide_panels<std::complex<double>>(); }

/// A stack too large for the caches (here: caches of 1 byte) stores C with streaming stores where
/// its rows lie on vector boundaries: the same bits as stored normally (caches that hold it) and
/// the reference's values; C NaN-poisoned (beta = 0 never reads it), rows on and off vector
/// boundaries, a C one element past a boundary (no streaming), beta != 0 (no streaming), the
/// element past the last product untouched.
template <class T>
void streamed_stacks_match_stored_ones() {
    const cpu::cache_sizes none{1, 1, 1}, all{std::size_t(1) << 40, std::size_t(1) << 40, std::size_t(1) << 40};
    std::mt19937_64 rng(27);
    for (isa s : sets())
        for (index_t n : {index_t(4), index_t(8), index_t(13), index_t(16)})
            for (index_t m : {index_t(1), index_t(5), index_t(16)})
                for (index_t k : {index_t(1), index_t(7), index_t(16)})
                    for (index_t offset : {index_t(0), index_t(1)})
                        for (T beta : {T(0), T(0.5)}) {
                            SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " offset " +
                                         std::to_string(offset) + " beta " + std::to_string(double(beta)) + " on " +
                                         std::string(to_string(s)));
                            const index_t count = 7;
                            std::vector<T> a(std::size_t(count * m * k)), b(std::size_t(count * k * n)), c0(std::size_t(count * m * n));
                            for (auto* x : {&a, &b, &c0})
                                for (T& v : *x) v = entry<T>(rng);
                            if (beta == T(0)) std::fill(c0.begin(), c0.end(), T(poison));
                            // C on a 64-byte boundary (plus `offset` elements) with a sentinel after it.
                            const std::size_t len = c0.size() + std::size_t(offset) + 1 + 64 / sizeof(T);
                            std::vector<T> streamed_mem(len), stored_mem(len);
                            const auto aligned = [&](std::vector<T>& mem) {
                                void* p = mem.data();
                                std::size_t room = mem.size() * sizeof(T);
                                return static_cast<T*>(std::align(64, c0.size() * sizeof(T), p, room)) + offset;
                            };
                            T* streamed = aligned(streamed_mem);
                            T* stored = aligned(stored_mem);
                            for (T* c : {streamed, stored}) {
                                std::copy(c0.begin(), c0.end(), c);
                                c[c0.size()] = T(outside);
                            }
                            const auto run = [&](T* c, const cpu::cache_sizes& caches) {
                                gemm_batched_call g;
                                g.call = gemm_call{.type = dtype_of<T>(), .m = m, .n = n, .k = k, .alpha = T(1.25), .beta = beta,
                                                   .a = a.data(), .lda = k, .b = b.data(), .ldb = n, .c = c, .ldc = n,
                                                   .kernel = gemm_kernel::tiled};
                                g.count = count;
                                g.stride_a = m * k;
                                g.stride_b = k * n;
                                g.stride_c = m * n;
                                cpu::gemm_tiled_items_with(s, caches, g, 0, 3);  // two ranges, as workers split it
                                cpu::gemm_tiled_items_with(s, caches, g, 3, count);
                            };
                            run(streamed, none);
                            run(stored, all);
                            EXPECT_EQ(std::memcmp(streamed, stored, c0.size() * sizeof(T)), 0);
                            EXPECT_EQ(streamed[c0.size()], T(outside));
                            std::vector<T> want = c0;
                            if (beta == T(0)) std::fill(want.begin(), want.end(), T(0));
                            for (index_t q = 0; q < count; ++q)
                                reference::gemm(gemm_call{.type = dtype_of<T>(), .m = m, .n = n, .k = k, .alpha = T(1.25), .beta = beta,
                                                          .a = a.data() + q * m * k, .lda = k, .b = b.data() + q * k * n, .ldb = n,
                                                          .c = want.data() + q * m * n, .ldc = n, .kernel = gemm_kernel::reference});
                            const double eps = std::numeric_limits<T>::epsilon();
                            for (std::size_t x = 0; x < want.size(); ++x)
                                if (!(std::abs(double(streamed[x]) - double(want[x])) <= 8.0 * double(k + 2) * eps * (2.5 * double(k) + 1.0))) {
                                    ADD_FAILURE() << "element " << x << " = " << streamed[x] << ", reference " << want[x];
                                    break;
                                }
                        }
}

TEST(GemmStack, StreamedStoresOfStacksLargerThanTheCachesGiveTheSameBitsF32) { streamed_stacks_match_stored_ones<float>(); }
TEST(GemmStack, StreamedStoresOfStacksLargerThanTheCachesGiveTheSameBitsF64) { streamed_stacks_match_stored_ones<double>(); }

/// Scripted probe timings: vendor `vendor` seconds and tiled `tiled` (five repetitions each).
detail::probe_timings timings(double vendor, double tiled) {
    detail::probe_timings p;
    for (double x : {vendor, tiled}) p.seconds.push_back({1.3 * x, x, 2 * x, 1.1 * x, 4 * x});
    p.notes.resize(2);
    return p;
}

/// One default-options stack of 3x5x4 products (bucket 4x8x4) on a fresh context: the plan's kernel,
/// after checking the products against the reference.
template <class T>
gemm_kernel stack_kernel_chosen(const context_options& o = {}) {
    context ctx("cpu", o);
    const index_t count = 6, m = 3, n = 5, k = 4;
    std::vector<T> a(std::size_t(count * m * k)), b(std::size_t(count * k * n)), c(std::size_t(count * m * n));
    fill_random(host_matrix_view<T>(a.data(), count * m, k), 1);
    fill_random(host_matrix_view<T>(b.data(), count * k, n), 2);
    fill_nan(host_matrix_view<T>(c.data(), count * m, n));
    const auto av = host_batch_view<const T>::strided(host_matrix_view<const T>(a.data(), m, k), m * k, count);
    const auto bv = host_batch_view<const T>::strided(host_matrix_view<const T>(b.data(), k, n), k * n, count);
    const auto cv = host_batch_view<T>::strided(host_matrix_view<T>(c.data(), m, n), m * n, count);
    const gemm_report rep = ctx.gemm_batched<T>(op::n, op::n, T(1), av, bv, T(0), cv);
    for (index_t i = 0; i < count; ++i) {
        std::vector<T> want(std::size_t(m * n), T(0));  // C0 (beta = 0: C itself was NaN)
        const host_matrix_view<T> w(want.data(), m, n);
        const auto r = check_gemm<T>(op::n, op::n, T(1), av[i], bv[i], T(0), w, cv[i]);
        EXPECT_TRUE(r.passed()) << "product " << i << ": " << r.summary();
    }
    return rep.plan.kernel;
}

// The kernel of a stack is the one measured on stacks of its products' size, not the single-call
// choice of the small class (a 64^3 probe): scripted so that the class probes see vendor ahead
// and the stack probes ("host-stack", bucket 4x8x4) the other way, or within the 5% rule.
TEST(GemmStack, TheKernelOfAStackIsTheOneMeasuredOnStacksOfItsSize) {
    for (dtype t : all_dtypes) {
        SCOPED_TRACE(std::string(to_string(t)));
        for (const auto& [stack_vendor, stack_tiled, want] :
             {std::tuple{3e-6, 1e-6, gemm_kernel::tiled}, std::tuple{1e-6, 3e-6, gemm_kernel::vendor},
              std::tuple{1.03e-6, 1e-6, gemm_kernel::vendor}}) {
            std::mutex mu;
            std::vector<std::string> stack_shapes;
            const detail::scripted_kernel_probes hook(
                [&](const detail::scripted_kernel_probes::request& r) {
                    if (r.where != "host-stack") return timings(1e-3, 2e-3);  // single calls: vendor ahead
                    std::lock_guard lock(mu);
                    stack_shapes.push_back(std::to_string(r.shape.m) + "x" + std::to_string(r.shape.n) + "x" +
                                           std::to_string(r.shape.k));
                    return timings(stack_vendor, stack_tiled);
                },
                3600);
            visit_dtype(t, [&]<class T>() {
                EXPECT_EQ(stack_kernel_chosen<T>(), want) << "stack probes: vendor " << stack_vendor << " s, tiled "
                                                          << stack_tiled << " s";
                // Asked for, or reproducible: the route's kernel, no stack probe.
                const std::size_t probes = stack_shapes.size();
                context_options asked;
                asked.kernel = gemm_kernel::vendor;
                EXPECT_EQ(stack_kernel_chosen<T>(asked), gemm_kernel::vendor);
                context_options reproducible;
                reproducible.reproducible = true;
                EXPECT_EQ(stack_kernel_chosen<T>(reproducible), gemm_kernel::tiled);
                EXPECT_EQ(stack_shapes.size(), probes);
            });
            ASSERT_FALSE(stack_shapes.empty());
            for (const std::string& shape : stack_shapes) EXPECT_EQ(shape, "4x8x4");
            // A verdict against vendor is measured twice (the second must agree), otherwise once.
            EXPECT_EQ(stack_shapes.size(), want == gemm_kernel::tiled ? 2u : 1u);
        }
    }
}

}  // namespace
}  // namespace tilestream
