// The CPU GEMM micro-kernel of every instruction set this CPU supports against the reference, the
// block sizes each gets from the cache sizes, the choice of instruction set and its override, and
// bitwise-equal results whatever the sub-problem, tiling or thread count.
#include "backends/cpu/cpu_isa.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace tilestream {
namespace {

using cpu::cache_sizes;
using cpu::isa;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

std::string supported_list() {
    std::string out;
    for (isa s : cpu::supported_isas()) out += (out.empty() ? "" : ", ") + std::string(to_string(s));
    return out;
}

// The registry entries compiled into this build (the x86 ones only on x86-64).
std::vector<isa> compiled_isas() {
#if defined(__x86_64__)
    return {isa::generic, isa::avx2, isa::avx512};
#else
    return {isa::generic};
#endif
}

bool supported(isa s) {
    const auto all = cpu::supported_isas();
    return std::find(all.begin(), all.end(), s) != all.end();
}

#define SKIP_WITHOUT_ISA(s)                                                                    \
    do {                                                                                       \
        if (!supported(s))                                                                     \
            GTEST_SKIP() << "this CPU lacks " << to_string(s) << " (it supports "             \
                         << supported_list() << "); the kernel is compiled but cannot run here"; \
    } while (0)

// The caches of this machine class (Zen 3: 32 KiB L1, 512 KiB L2, 16 MiB of L3 per core) and a
// tiny set whose blocks are a few micro-tiles, so small shapes cross every KC, MC and NC edge.
const cache_sizes zen3_caches{32 * KiB, 512 * KiB, 16 * MiB};
const cache_sizes tiny_caches{4 * KiB, 16 * KiB, 64 * KiB};

// Uniform in [-1, 1] away from zero: every product counts, so a skipped term cannot pass.
template <class T>
T random_entry(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (;;)
        if (const double v = u(rng); std::abs(v) >= 1.0 / 64) return static_cast<T>(v);
}

constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double outside_c = 777.0;  // in C's leading-dimension padding; must survive every call

// One problem: op(A) m x k, op(B) k x n, C m x n, each stored with its layout and one padding
// element per line (A and B padded with NaN, so a read outside the operands shows in C).
template <class T>
struct problem {
    index_t m, n, k;
    layout la, lb, lc;
    op oa, ob;
    double alpha, beta;
    index_t lda, ldb, ldc;
    std::vector<T> a, b, c0, expected;
    std::vector<double> bound;  // |alpha| sum |a||b| + |beta||c| per element of C (row-major)

    std::string describe() const {
        std::ostringstream s;
        s << m << "x" << n << "x" << k << " A " << to_string(la) << "/" << to_string(oa) << " B "
          << to_string(lb) << "/" << to_string(ob) << " C " << to_string(lc) << " alpha=" << alpha
          << " beta=" << beta;
        return s.str();
    }
    index_t c_index(index_t i, index_t j) const { return lc == layout::row_major ? i * ldc + j : i + j * ldc; }
    gemm_call call(T* c) const {
        gemm_call g;
        g.type = dtype_of<T>();
        g.op_a = oa;
        g.op_b = ob;
        g.m = m;
        g.n = n;
        g.k = k;
        g.alpha = alpha;
        g.beta = beta;
        g.a = a.data();
        g.lda = lda;
        g.layout_a = la;
        g.b = b.data();
        g.ldb = ldb;
        g.layout_b = lb;
        g.c = c;
        g.ldc = ldc;
        g.layout_c = lc;
        return g;
    }
};

// A stored operand of rows x cols with random entries and NaN padding; returns its ld.
template <class T>
index_t fill_operand(std::vector<T>& x, index_t rows, index_t cols, layout l, std::mt19937_64& rng) {
    const index_t ld = (l == layout::row_major ? cols : rows) + 1;
    const index_t lines = l == layout::row_major ? rows : cols;
    x.assign(static_cast<std::size_t>(lines * ld), T(nan_value));
    for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) x[l == layout::row_major ? i * ld + j : i + j * ld] = random_entry<T>(rng);
    return ld;
}

template <class T>
problem<T> make_problem(index_t m, index_t n, index_t k, unsigned combo, int seed) {
    const std::pair<double, double> scalars[] = {{1.0, 0.0}, {-1.25, 0.5}, {0.5, 1.0}, {2.0, -1.5}, {0.75, 0.0}};
    problem<T> p{m, n, k};
    p.la = combo & 1 ? layout::col_major : layout::row_major;
    p.lb = combo & 2 ? layout::col_major : layout::row_major;
    p.lc = combo & 4 ? layout::col_major : layout::row_major;
    p.oa = combo & 8 ? op::t : op::n;
    p.ob = combo & 16 ? op::t : op::n;
    std::tie(p.alpha, p.beta) = scalars[(combo + unsigned(seed)) % 5];
    std::mt19937_64 rng(std::uint64_t(seed) * 131 + combo);
    const bool ta = p.oa == op::t, tb = p.ob == op::t;
    p.lda = fill_operand(p.a, ta ? k : m, ta ? m : k, p.la, rng);
    p.ldb = fill_operand(p.b, tb ? n : k, tb ? k : n, p.lb, rng);
    p.ldc = (p.lc == layout::row_major ? n : m) + 1;
    p.c0.assign(static_cast<std::size_t>((p.lc == layout::row_major ? m : n) * p.ldc), T(outside_c));
    // beta == 0 must never read C: it starts as NaN and any read shows in the result.
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) p.c0[p.c_index(i, j)] = p.beta == 0.0 ? T(nan_value) : random_entry<T>(rng);

    p.expected = p.c0;
    reference::gemm(p.call(p.expected.data()));
    const auto at = [](const std::vector<T>& x, layout l, index_t ld, index_t i, index_t j) {
        return double(x[l == layout::row_major ? i * ld + j : i + j * ld]);
    };
    p.bound.assign(static_cast<std::size_t>(m * n), 0.0);
    for (index_t i = 0; i < m; ++i)
        for (index_t j = 0; j < n; ++j) {
            double s = 0;
            for (index_t q = 0; q < k; ++q)
                s += std::abs((ta ? at(p.a, p.la, p.lda, q, i) : at(p.a, p.la, p.lda, i, q)) *
                              (tb ? at(p.b, p.lb, p.ldb, j, q) : at(p.b, p.lb, p.ldb, q, j)));
            const double c = p.beta == 0.0 ? 0.0 : std::abs(double(p.c0[p.c_index(i, j)]));
            p.bound[i * n + j] = std::abs(p.alpha) * s + std::abs(p.beta) * c;
        }
    return p;
}

// Problems are built once per value type and shared by every variant that runs them.
template <class T>
const problem<T>& shared_problem(index_t m, index_t n, index_t k, unsigned combo, int seed) {
    static std::map<std::tuple<index_t, index_t, index_t, unsigned, int>, problem<T>> built;
    const auto key = std::make_tuple(m, n, k, combo, seed);
    auto it = built.find(key);
    if (it == built.end()) it = built.emplace(key, make_problem<T>(m, n, k, combo, seed)).first;
    return it->second;
}

// Runs the tiled GEMM of `s` on p and reports each element outside the error bound of a
// k-term sum in T, and any write into C's padding.
template <class T>
void expect_matches_reference(isa s, const cache_sizes& caches, const problem<T>& p, cpu::thread_pool& pool) {
    std::vector<T> c = p.c0;
    cpu::gemm_tiled_with(s, caches, p.call(c.data()), pool);
    const double scale = 2.0 * double(p.k + 2) * std::numeric_limits<T>::epsilon();
    int reported = 0;
    for (index_t i = 0; i < p.m; ++i)
        for (index_t j = 0; j < p.n; ++j) {
            const std::size_t at = static_cast<std::size_t>(p.c_index(i, j));
            const double got = c[at], want = p.expected[at], tol = scale * p.bound[i * p.n + j];
            if (!(std::abs(got - want) <= tol) && reported++ < 5)
                ADD_FAILURE() << p.describe() << ": C(" << i << "," << j << ") = " << got << ", reference "
                              << want << ", tolerance " << tol;
        }
    for (std::size_t q = 0; q < c.size(); ++q)
        if (p.c0[q] == T(outside_c) && c[q] != T(outside_c)) {
            ADD_FAILURE() << p.describe() << ": element " << q << " outside C was written";
            break;
        }
}

// Shapes for a register tile MR x NR: each side one short of, equal to and one past a
// micro-tile and two, with k of 1 and of a few steps.
std::vector<std::tuple<index_t, index_t, index_t>> micro_tile_edges(int mr, int nr) {
    std::vector<std::tuple<index_t, index_t, index_t>> shapes;
    for (index_t m : {mr - 1, mr, mr + 1, 2 * mr + 1})
        for (index_t n : {nr - 1, nr, nr + 1, 2 * nr - 1})
            shapes.emplace_back(std::max<index_t>(m, 1), std::max<index_t>(n, 1), (m + n) % 2 ? 1 : 9);
    return shapes;
}

using isa_param = std::tuple<isa, dtype>;

class CpuIsaGemm : public ::testing::TestWithParam<isa_param> {
protected:
    isa set() const { return std::get<0>(GetParam()); }
    dtype type() const { return std::get<1>(GetParam()); }
};

TEST_P(CpuIsaGemm, MatchesReferenceOnRaggedShapes) {
    SKIP_WITHOUT_ISA(set());
    cpu::thread_pool pool(2);
    const std::tuple<index_t, index_t, index_t> shapes[] = {
        {1, 1, 1}, {7, 13, 5}, {131, 67, 257}, {300, 257, 129}, {2, 3, 600}, {65, 1, 33}, {1, 70, 17}};
    visit_real_dtype(type(), "test", [&]<class T>() {
        for (const auto& [m, n, k] : shapes)
            for (unsigned combo = 0; combo < 32; ++combo) {
                // Every op/layout combination on the host's blocking; the two large shapes also on
                // tiny blocks, which split them into many KC, MC and NC blocks.
                const problem<T>& p = shared_problem<T>(m, n, k, combo, int(m + n));
                expect_matches_reference(set(), cpu::host_cache_sizes(), p, pool);
                if (m * n >= 8000) expect_matches_reference(set(), tiny_caches, p, pool);
                if (HasFailure()) return;
            }
    });
}

TEST_P(CpuIsaGemm, MatchesReferenceOnEveryMicroTileEdge) {
    SKIP_WITHOUT_ISA(set());
    cpu::thread_pool pool(3);
    const cpu::block_sizes bl = cpu::derive_block_sizes(cpu::config_for(set()), type(), tiny_caches);
    visit_real_dtype(type(), "test", [&]<class T>() {
        for (const auto& [m, n, k] : micro_tile_edges(bl.mr, bl.nr))
            for (unsigned combo : {0u, 5u, 10u, 19u, 31u}) {
                const problem<T>& p = shared_problem<T>(m, n, k, combo, 3);
                expect_matches_reference(set(), tiny_caches, p, pool);
                expect_matches_reference(set(), zen3_caches, p, pool);
                if (HasFailure()) return;
            }
        // Edges of the cache blocks themselves: one past KC, MC and NC of the tiny blocking.
        const problem<T>& p = shared_problem<T>(bl.mc + 1, bl.nc + 1, bl.kc + 1, 0, 4);
        expect_matches_reference(set(), tiny_caches, p, pool);
    });
}

TEST_P(CpuIsaGemm, BetaZeroOverwritesNaNAndAlphaZeroOnlyScales) {
    SKIP_WITHOUT_ISA(set());
    cpu::thread_pool pool(2);
    visit_real_dtype(type(), "test", [&]<class T>() {
        problem<T> p = make_problem<T>(29, 37, 19, 6, 4);  // beta == 0: C starts as NaN
        ASSERT_EQ(p.beta, 0.0);
        std::vector<T> c = p.c0;
        cpu::gemm_tiled_with(set(), cpu::host_cache_sizes(), p.call(c.data()), pool);
        for (index_t i = 0; i < p.m; ++i)
            for (index_t j = 0; j < p.n; ++j) ASSERT_FALSE(std::isnan(c[p.c_index(i, j)])) << i << "," << j;

        // alpha == 0: C = beta * C exactly, A and B (NaN-filled here) never read.
        std::fill(p.a.begin(), p.a.end(), T(nan_value));
        std::fill(p.b.begin(), p.b.end(), T(nan_value));
        p.alpha = 0.0;
        p.beta = -2.0;
        std::vector<T> scaled = c;
        cpu::gemm_tiled_with(set(), cpu::host_cache_sizes(), p.call(scaled.data()), pool);
        for (index_t i = 0; i < p.m; ++i)
            for (index_t j = 0; j < p.n; ++j)
                ASSERT_EQ(scaled[p.c_index(i, j)], T(-2) * c[p.c_index(i, j)]) << i << "," << j;
    });
}

TEST_P(CpuIsaGemm, InputsAreNonZero) {
    // Guards the comparisons above against passing on all-zero operands.
    visit_real_dtype(type(), "test", [&]<class T>() {
        const problem<T>& p = shared_problem<T>(131, 67, 257, 0, 1);
        double na = 0, nb = 0;
        for (T v : p.a) na += std::isnan(v) ? 0.0 : double(v) * v;
        for (T v : p.b) nb += std::isnan(v) ? 0.0 : double(v) * v;
        EXPECT_GT(na, 1.0);
        EXPECT_GT(nb, 1.0);
    });
}

// The bitwise contract the multi-device reproducibility relies on: an element of C gets the
// same bits whether it is computed in the whole problem or in any sub-problem of rows and
// columns, on any number of threads, with any MC and NC, and with C in either layout.
TEST_P(CpuIsaGemm, RowsAreBitwiseEqualInEverySubProblem) {
    SKIP_WITHOUT_ISA(set());
    // Same L1 (so the same KC) but different L2 and L3: different MC and NC.
    const cache_sizes small_blocks{32 * KiB, 40 * KiB, 256 * KiB};
    ASSERT_EQ(cpu::derive_block_sizes(cpu::config_for(set()), type(), small_blocks).kc,
              cpu::derive_block_sizes(cpu::config_for(set()), type(), zen3_caches).kc);
    visit_real_dtype(type(), "test", [&]<class T>() {
        // k spans several KC blocks, so the order in which the blocks reach C is exercised too.
        const index_t m = 97, n = 83, k = 700;
        problem<T> whole = shared_problem<T>(m, n, k, 0, 1);  // row-major A, B, C
        ASSERT_NE(whole.beta, 0.0);  // C starts as numbers, not NaN, so equal bits mean something
        // Scalars whose products round, so a fused and an unfused update differ in the last bit.
        whole.alpha = 0.7;
        whole.beta = -0.3;
        std::vector<T> full = whole.c0;
        cpu::thread_pool one(1);
        cpu::gemm_tiled_with(set(), zen3_caches, whole.call(full.data()), one);
        for (index_t i = 0; i < m; ++i)
            for (index_t j = 0; j < n; ++j) ASSERT_TRUE(std::isfinite(full[whole.c_index(i, j)]));

        struct part {
            index_t r0, r1, c0, c1;
            int threads;
            bool small;
            layout lc;
        };
        const part parts[] = {{0, m, 0, n, 3, true, layout::row_major},  {5, 18, 0, n, 2, false, layout::row_major},
                              {1, 2, 3, 80, 1, true, layout::row_major},  {40, 97, 7, 8, 2, true, layout::row_major},
                              {13, 61, 11, 50, 3, false, layout::col_major}, {0, m, 0, n, 2, false, layout::col_major},
                              // Small sub-problems: the small-product kernel, no packed A (gemm_small).
                              {2, 9, 4, 8, 1, false, layout::row_major},     {2, 9, 4, 8, 2, true, layout::col_major},
                              {90, 97, 80, 83, 1, false, layout::row_major}};
        for (const part& q : parts) {
            SCOPED_TRACE("rows [" + std::to_string(q.r0) + "," + std::to_string(q.r1) + ") cols [" +
                         std::to_string(q.c0) + "," + std::to_string(q.c1) + ") threads " + std::to_string(q.threads));
            const index_t rows = q.r1 - q.r0, cols = q.c1 - q.c0;
            // The sub-problem reads A's rows and B's columns in place; its C starts as the same
            // values, stored in q.lc.
            std::vector<T> sub(static_cast<std::size_t>(rows * cols));
            const auto at = [&](index_t i, index_t j) -> T& {
                return sub[q.lc == layout::row_major ? i * cols + j : i + j * rows];
            };
            for (index_t i = 0; i < rows; ++i)
                for (index_t j = 0; j < cols; ++j) at(i, j) = whole.c0[whole.c_index(q.r0 + i, q.c0 + j)];
            gemm_call g = whole.call(sub.data());
            g.m = rows;
            g.n = cols;
            g.a = whole.a.data() + q.r0 * whole.lda;
            g.b = whole.b.data() + q.c0;
            g.layout_c = q.lc;
            g.ldc = q.lc == layout::row_major ? cols : rows;
            cpu::thread_pool pool(q.threads);
            cpu::gemm_tiled_with(set(), q.small ? small_blocks : zen3_caches, g, pool);
            for (index_t i = 0; i < rows; ++i)
                for (index_t j = 0; j < cols; ++j) {
                    const T want = full[whole.c_index(q.r0 + i, q.c0 + j)];
                    ASSERT_EQ(std::memcmp(&at(i, j), &want, sizeof(T)), 0)
                        << "C(" << q.r0 + i << "," << q.c0 + j << ") = " << at(i, j) << " in the sub-problem, "
                        << want << " in the whole";
                }
        }
    });
}

std::string isa_param_name(const ::testing::TestParamInfo<isa_param>& info) {
    return std::string(to_string(std::get<0>(info.param))) + "_" + std::string(to_string(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Variants, CpuIsaGemm,
                         ::testing::Combine(::testing::Values(isa::generic, isa::avx2, isa::avx512),
                                            ::testing::Values(dtype::f32, dtype::f64)),
                         isa_param_name);

// ---- block sizes, choice, override ----

TEST(CpuIsaBlocking, BlockSizesRespectTheCacheSizesGiven) {
    const cache_sizes machines[] = {zen3_caches,
                                    {48 * KiB, 1 * MiB, 4 * MiB},       // Zen 5
                                    {32 * KiB, 1 * MiB, 1408 * KiB},    // Skylake-SP
                                    {48 * KiB, 2 * MiB, 1920 * KiB},    // Sapphire Rapids
                                    {64 * KiB, 4 * MiB, 8 * MiB},       // Apple-like, large
                                    {16 * KiB, 128 * KiB, 512 * KiB}};  // small
    for (isa s : compiled_isas()) {
        const cpu::isa_config& cfg = cpu::config_for(s);
        ASSERT_EQ(cfg.set, s) << to_string(s) << " is missing from the registry";
        for (dtype t : {dtype::f32, dtype::f64})
            for (cache_sizes c : machines)
                for (bool intel : {false, true}) {
                    c.intel = intel;
                    SCOPED_TRACE(std::string(to_string(s)) + " " + std::string(to_string(t)) + " L1 " +
                                 std::to_string(c.l1d) + " L2 " + std::to_string(c.l2) + " L3 " + std::to_string(c.l3) +
                                 (intel ? " Intel" : ""));
                    const cpu::block_sizes b = cpu::derive_block_sizes(cfg, t, c);
                    const double e = t == dtype::f32 ? 4 : 8;
                    const bool intel_shares = intel && cfg.intel_l1_share > 0;
                    const double l1_share = intel_shares ? cfg.intel_l1_share : t == dtype::f32 ? cfg.l1_share_f32 : cfg.l1_share_f64;
                    const double l2_share = intel_shares ? cfg.intel_l2_share : cfg.l2_share;
                    EXPECT_EQ(b.mr, t == dtype::f32 ? cfg.mr_f32 : cfg.mr_f64);
                    EXPECT_EQ(b.nr, t == dtype::f32 ? cfg.nr_f32 : cfg.nr_f64);
                    EXPECT_LE(double(b.kc) * b.nr * e, double(c.l1d) * l1_share);  // B micro-panel
                    EXPECT_LE(double(b.mc) * b.kc * e, double(c.l2) * l2_share);   // A block in L2
                    EXPECT_LE(double(b.kc) * b.nc * e, double(c.l3) * cfg.l3_share);   // B block in L3
                    EXPECT_EQ(b.mc % b.mr, 0);
                    EXPECT_EQ(b.nc % b.nr, 0);
                    EXPECT_GE(b.kc, 64);  // no machine above is small enough to starve the micro-kernel
                    EXPECT_GE(b.mc, b.mr);
                    EXPECT_GE(b.nc, b.nr);
                    // Filling: doubling a cache never shrinks the block it sizes.
                    cache_sizes bigger = c;
                    bigger.l2 *= 2;
                    EXPECT_GE(cpu::derive_block_sizes(cfg, t, bigger).mc, b.mc);
                    EXPECT_GT(double(b.mc + b.mr) * b.kc * e, double(c.l2) * l2_share * 0.5);
                }
    }
#if defined(__x86_64__)
    // The AVX2 blocking of this machine class: BLIS's Haswell/Zen register tile for f32 with KC 512
    // (the B micro-panel the size of L1, as measured on Zen 4), and 4x12 for f64 with KC 256 (three
    // quarters of L1, as measured on Zen 3).
    const cpu::block_sizes avx2_f32 = cpu::derive_block_sizes(cpu::config_for(isa::avx2), dtype::f32, zen3_caches);
    EXPECT_EQ(avx2_f32.mr, 6);
    EXPECT_EQ(avx2_f32.nr, 16);
    EXPECT_EQ(avx2_f32.kc, 512);
    const cpu::block_sizes avx2_f64 = cpu::derive_block_sizes(cpu::config_for(isa::avx2), dtype::f64, zen3_caches);
    EXPECT_EQ(avx2_f64.mr, 4);
    EXPECT_EQ(avx2_f64.nr, 12);
    EXPECT_EQ(avx2_f64.kc, 256);
    // AVX-512 on Sapphire/Emerald Rapids caches: the Zen 4 shares (KC 1024 capped / 768) unless the
    // CPU is Intel's, whose shares (1.5 L1s, half of L2) were measured there: KC 576 / 384, MC 444 / 336.
    // The AVX2 entry has no Intel shares: the same blocks either way.
    cache_sizes spr{48 * KiB, 2 * MiB, 1920 * KiB};
    const cpu::isa_config& avx512 = cpu::config_for(isa::avx512);
    EXPECT_EQ(cpu::derive_block_sizes(avx512, dtype::f32, spr).kc, 1024);
    EXPECT_EQ(cpu::derive_block_sizes(avx512, dtype::f64, spr).kc, 768);
    const cpu::block_sizes avx2_amd = cpu::derive_block_sizes(cpu::config_for(isa::avx2), dtype::f64, spr);
    spr.intel = true;
    EXPECT_EQ(cpu::derive_block_sizes(avx512, dtype::f32, spr).kc, 576);
    EXPECT_EQ(cpu::derive_block_sizes(avx512, dtype::f32, spr).mc, 444);
    EXPECT_EQ(cpu::derive_block_sizes(avx512, dtype::f64, spr).kc, 384);
    EXPECT_EQ(cpu::derive_block_sizes(avx512, dtype::f64, spr).mc, 336);
    const cpu::block_sizes avx2_intel = cpu::derive_block_sizes(cpu::config_for(isa::avx2), dtype::f64, spr);
    EXPECT_EQ(avx2_intel.kc, avx2_amd.kc);
    EXPECT_EQ(avx2_intel.mc, avx2_amd.mc);
#endif
}

TEST(CpuIsaBlocking, AbsurdCacheReportsStillGiveWorkingBlocks) {
    for (isa s : compiled_isas())
        for (const cache_sizes& c : {cache_sizes{1, 1, 1}, cache_sizes{std::size_t(1) << 40, std::size_t(1) << 40,
                                                                        std::size_t(1) << 40}}) {
            const cpu::block_sizes b = cpu::derive_block_sizes(cpu::config_for(s), dtype::f64, c);
            EXPECT_GE(b.kc, 16);
            EXPECT_LE(b.kc, 1024);
            EXPECT_GE(b.mc, b.mr);
            EXPECT_LE(b.mc, 1024);
            EXPECT_GE(b.nc, b.nr);
            EXPECT_LE(b.nc, 8192);
        }
}

TEST(CpuIsaBlocking, HostCacheSizesArePlausible) {
    const cache_sizes c = cpu::host_cache_sizes();
    EXPECT_GE(c.l1d, 4 * KiB);
    EXPECT_GE(c.l2, c.l1d);
    EXPECT_GE(c.l3, 64 * KiB);
}

TEST(CpuIsaChoice, WidestSupportedSetUnlessOverridden) {
    const std::vector<isa> avx2_cpu{isa::generic, isa::avx2};
    EXPECT_EQ(cpu::choose_isa(nullptr, avx2_cpu), isa::avx2);
    EXPECT_EQ(cpu::choose_isa("", avx2_cpu), isa::avx2);
    EXPECT_EQ(cpu::choose_isa("generic", avx2_cpu), isa::generic);
    EXPECT_EQ(cpu::choose_isa("avx2", avx2_cpu), isa::avx2);
    EXPECT_EQ(cpu::choose_isa(nullptr, {isa::generic}), isa::generic);
    try {
        cpu::choose_isa("avx512", avx2_cpu);
        ADD_FAILURE() << "avx512 accepted on a CPU without it";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("does not support avx512; it supports generic, avx2"), std::string::npos)
            << e.what();
    }
    try {
        cpu::choose_isa("sse9", avx2_cpu);
        ADD_FAILURE() << "an unknown instruction set accepted";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("'sse9' (expected generic, avx2 or avx512)"), std::string::npos)
            << e.what();
    }
}

TEST(CpuIsaChoice, SupportedSetsAgreeWithTheCompilersDetection) {
    const auto sets = cpu::supported_isas();
    ASSERT_FALSE(sets.empty());
    EXPECT_EQ(sets.front(), isa::generic);
#if defined(__x86_64__)
    // GCC's own detector also checks that the OS saves the registers.
    EXPECT_EQ(supported(isa::avx2), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
    EXPECT_EQ(supported(isa::avx512), __builtin_cpu_supports("avx512f") && supported(isa::avx2));
#endif
}

TEST(CpuIsaChoice, DevicesShowTheChosenSetAndItsBlocking) {
    const auto r = testing::run_cli("devices --json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::string widest(to_string(cpu::supported_isas().back()));
    EXPECT_NE(r.out.find("\"isa\": \"" + widest + "\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(cpu::describe_blocking(cpu::supported_isas().back(), cpu::host_cache_sizes())),
              std::string::npos)
        << r.out;

    const auto text = testing::run_cli_raw("TILESTREAM_CPU_ISA=generic " + std::string(TILESTREAM_CLI_PATH) + " devices");
    EXPECT_NE(text.find("isa generic, tiled GEMM blocking f32 6x8 kc="), std::string::npos) << text;
}

TEST(CpuIsaChoice, CliRejectsASetTheCpuLacks) {
    const auto bad = testing::run_cli_raw("TILESTREAM_CPU_ISA=avx3 " + std::string(TILESTREAM_CLI_PATH) +
                                          " devices 2>&1; echo exit=$?");
    EXPECT_NE(bad.find("unknown CPU instruction set 'avx3'"), std::string::npos) << bad;
    EXPECT_NE(bad.find("exit=2"), std::string::npos) << bad;
    if (supported(isa::avx512)) GTEST_SKIP() << "this CPU supports every instruction set tilestream has";
    const auto r = testing::run_cli_raw("TILESTREAM_CPU_ISA=avx512 " + std::string(TILESTREAM_CLI_PATH) +
                                        " gemm --m 8 --n 8 --k 8 --kernel tiled 2>&1; echo exit=$?");
    EXPECT_NE(r.find("does not support avx512; it supports " + supported_list()), std::string::npos) << r;
    EXPECT_NE(r.find("exit=2"), std::string::npos) << r;
}

}  // namespace
}  // namespace tilestream
