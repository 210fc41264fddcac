// The CPU tiled kernel's workers sharing packed B panels (gemm_tiled.cpp, shared_panel): several
// workers, k over at least four KC blocks (a panel buffer used again), fewer B micro-panels than
// workers, blocks from tiny caches (many panels per call), every precision. A worker's rows must be
// bitwise those of the kernel on one thread (the same operations per element whatever the split)
// and match a float64 reference. Small enough to run under TSan (.ci/run's TSan stage), where a
// missing wait shows as a race.
#include "backends/cpu/cpu_isa.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "test_support.hpp"

#include <tilestream/dtype_traits.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tilestream {
namespace {

template <class T>
T random_value(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    if constexpr (is_complex_v<T>) {
        using R = real_type_t<T>;
        return T(R(u(rng)), R(u(rng)));
    } else {
        return T(u(rng));
    }
}

struct shape {
    index_t m, n, k;
    op op_a, op_b;
    layout lay;
};

/// C (m x n) = A (m x k) B (k x n) on the tiled kernel, f64, row-major and packed; C set by the caller.
gemm_call tiled_f64_call(const double* a, const double* b, index_t m, index_t n, index_t k) {
    gemm_call call;
    call.type = dtype::f64;
    call.kernel = gemm_kernel::tiled;
    call.m = m;
    call.n = n;
    call.k = k;
    call.alpha = 1.0;
    call.beta = 0.0;
    call.a = a;
    call.lda = k;
    call.b = b;
    call.ldb = call.ldc = n;
    return call;
}

// caches: blocks from these cache sizes instead of the host's (one thread against `threads`, both
// with them).
template <class T>
void check_shape(const shape& s, int threads, const cpu::cache_sizes* caches = nullptr) {
    using W = std::conditional_t<is_complex_v<T>, std::complex<double>, double>;
    std::mt19937_64 rng(std::uint64_t(s.m * 131 + s.n * 7 + s.k));
    // op(A) m x k, op(B) k x n; stored as op says, in s.lay.
    const bool ta = s.op_a != op::n, tb = s.op_b != op::n;
    const index_t ar = ta ? s.k : s.m, ac = ta ? s.m : s.k, br = tb ? s.n : s.k, bc = tb ? s.k : s.n;
    const bool row = s.lay == layout::row_major;
    std::vector<T> a(std::size_t(ar * ac)), b(std::size_t(br * bc));
    for (T& x : a) x = random_value<T>(rng);
    for (T& x : b) x = random_value<T>(rng);
    const T alpha = is_complex_v<T> ? T(0.75) * random_value<T>(rng) + T(0.5) : T(0.75);
    gemm_call call;
    call.type = dtype_of<T>();
    call.kernel = gemm_kernel::tiled;
    call.op_a = s.op_a;
    call.op_b = s.op_b;
    call.m = s.m;
    call.n = s.n;
    call.k = s.k;
    call.alpha = scalar(alpha);
    call.beta = 0.0;
    call.a = a.data();
    call.lda = row ? ac : ar;
    call.layout_a = s.lay;
    call.b = b.data();
    call.ldb = row ? bc : br;
    call.layout_b = s.lay;
    call.ldc = row ? s.n : s.m;
    call.layout_c = s.lay;
    const auto at = [&](const std::vector<T>& v, index_t rows, index_t cols, index_t i, index_t j) {
        (void)cols;
        return row ? v[std::size_t(i * (row ? cols : rows) + j)] : v[std::size_t(i + j * rows)];
    };
    const auto c_at = [&](index_t i, index_t j) { return std::size_t(row ? i * s.n + j : i + j * s.m); };

    // Poisoned outputs: beta = 0 must overwrite every element.
    const T poison = T(std::numeric_limits<real_type_t<T>>::quiet_NaN());
    std::vector<T> one(std::size_t(s.m * s.n), poison), many(one);
    call.c = one.data();
    cpu::thread_pool pool(threads);
    if (caches) {
        cpu::thread_pool single(1);
        cpu::gemm_tiled_with(cpu::selected_isa(), *caches, call, single);
        call.c = many.data();
        cpu::gemm_tiled_with(cpu::selected_isa(), *caches, call, pool);
    } else {
        cpu::gemm_tiled_serial(call);
        call.c = many.data();
        cpu::gemm_tiled(call, pool);
    }
    const std::string what = std::string(to_string(dtype_of<T>())) + " " + std::to_string(s.m) + "x" +
                             std::to_string(s.n) + "x" + std::to_string(s.k) + " " + std::to_string(threads) + " threads" +
                             (caches ? " (tiny cache blocks)" : "");
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(T)), 0) << what << ": not bitwise the one-thread result";

    // Against float64 on a sample of rows and columns (the first and last of each, every 7th).
    double worst = 0;
    const double u = double(std::numeric_limits<real_type_t<T>>::epsilon());
    const auto sample = [](index_t extent) {
        std::vector<index_t> v;
        for (index_t i = 0; i < extent; i += 7) v.push_back(i);
        if (v.back() != extent - 1) v.push_back(extent - 1);
        return v;
    };
    for (index_t i : sample(s.m))
        for (index_t j : sample(s.n)) {
            W sum(0);
            for (index_t p = 0; p < s.k; ++p) {
                W x = W(ta ? at(a, ar, ac, p, i) : at(a, ar, ac, i, p));
                W y = W(tb ? at(b, br, bc, j, p) : at(b, br, bc, p, j));
                if constexpr (is_complex_v<T>) {
                    if (s.op_a == op::c) x = std::conj(x);
                    if (s.op_b == op::c) y = std::conj(y);
                }
                sum += x * y;
            }
            sum *= W(alpha);
            const double err = std::abs(W(many[c_at(i, j)]) - sum);
            worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : std::max(worst, err);
        }
    // |a|, |b| <= sqrt(2): each product at most 2, the sum's rounding within k u of sum |x y|.
    EXPECT_LE(worst, 4.0 * double(s.k) * u * 2.0 * std::abs(W(alpha)) + 1e-300) << what;
}

template <class T>
void every_shape() {
    // k = 3300: at least four KC blocks on every instruction set (KC <= 1024), so one of the three
    // rotating panel buffers is packed again; n = 30: one to fifteen B micro-panels (by type and
    // instruction set) for three workers, fewer than the workers for f32 on AVX2 and AVX-512.
    // Under the sanitizers k = 1100, two to five KC blocks by type and instruction set, so the
    // rotating buffers may not be reused there; the tiny-cache shape below (ten or more panel
    // iterations in every type) is what reuses them under TSan and ASan. TSan's instrumented
    // kernels took 58 s for this test at k = 3300, the Release build 1.6 s.
    const index_t deep = testing::sanitized ? 1100 : 3300, tiny_k = testing::sanitized ? 260 : 700;
    const std::vector<shape> shapes = {
        {301, 203, deep, op::n, op::n, layout::row_major},
        {157, 30, deep, op::t, op::n, layout::row_major},
        {211, 97, 1100, op::n, op::c, layout::col_major},
    };
    for (const shape& s : shapes)
        for (int threads : {2, 3}) check_shape<T>(s, threads);
    // Blocks from tiny caches (KC 16-96, NC a few micro-panels) on a C taller than wide (split by
    // rows, so the workers share B): dozens of k-blocks (at least three under the sanitizers, whose
    // k is 260) and several blocks of n, so every one of the three rotating panels is packed many
    // times, and workers that run ahead wait for the others' shares and for the last reader of the
    // panel they refill.
    const cpu::cache_sizes tiny{4 << 10, 16 << 10, 64 << 10, false};
    for (int threads : {2, 3}) check_shape<T>({400, 203, tiny_k, op::n, op::t, layout::row_major}, threads, &tiny);
}

TEST(TiledThreads, AFailedPackingAllocationLeavesTheWorkersUsable) {
    // A GEMM whose packing buffers cannot be had fails (std::bad_alloc) and leaves no worker
    // waiting; the threads stay usable: a smaller GEMM on the same workers is again bitwise the
    // one-thread result (a slot left null with its old capacity was written through).
    using T = double;
    // Blocked (packed) path, split by rows so that the workers share B panels (the calling
    // thread's buffers) as the larger call below does.
    const index_t m0 = 240, n0 = 100, k0 = 200;
    std::mt19937_64 rng(7);
    std::vector<T> a(std::size_t(m0 * k0)), b(std::size_t(k0 * n0));
    for (T& x : a) x = random_value<T>(rng);
    for (T& x : b) x = random_value<T>(rng);
    gemm_call call = tiled_f64_call(a.data(), b.data(), m0, n0, k0);
    std::vector<T> one(std::size_t(m0 * n0)), before(one.size(), T(std::nan("")));
    call.c = one.data();
    cpu::gemm_tiled_serial(call);
    cpu::thread_pool pool(2);
    call.c = before.data();
    cpu::gemm_tiled(call, pool);  // the baseline: workers without any failure
    EXPECT_EQ(std::memcmp(one.data(), before.data(), one.size() * sizeof(T)), 0);

    // A larger call whose buffers are refused by thread (the hook), not by size: a threshold such
    // as 512 KiB refused nothing on a Zen 3 with the AVX2 blocks (KC 234, MC 252 for f64 then).
    const index_t m = 301, nn = 203, k = 2100;
    std::vector<T> a2(std::size_t(m * k), T(1)), b2(std::size_t(k * nn), T(1)), c2(std::size_t(m * nn));
    gemm_call big = call;
    big.m = m;
    big.n = nn;
    big.k = k;
    big.a = a2.data();
    big.lda = k;
    big.b = b2.data();
    big.ldb = nn;
    big.c = c2.data();
    big.ldc = nn;
    // Refused everywhere (the calling thread's shared panels fail before any worker starts), on
    // every worker (the calling thread gets its shared panels; both workers fail getting their own
    // A blocks), and on one worker only (its first allocation: the other worker gets its buffers
    // and must leave at the first meeting instead of waiting for shares that never come). Each
    // round calls from a new thread into a new pool: a thread keeps the buffers it got, so every
    // thread of a round allocates at these sizes whatever ran before in this process. After each,
    // the smaller call on the same pool is again bitwise the one-thread result.
    for (const char* where : {"everywhere", "the workers", "one worker"}) {
        const std::string_view w = where;
        cpu::thread_pool round_pool(2);
        std::thread([&] {
            const std::thread::id caller = std::this_thread::get_id();
            std::atomic<int> calls{0}, refused{0};
            std::atomic<bool> caller_refused{false};
            cpu::detail::packing_allocation_hook = [&](std::size_t) {
                ++calls;
                if (std::this_thread::get_id() == caller) {
                    if (w != "everywhere") return true;
                    caller_refused = true;
                } else if (w == "one worker") {
                    int none = 0;
                    return !refused.compare_exchange_strong(none, 1);  // the first worker to ask is refused
                }
                ++refused;
                return false;
            };
            EXPECT_THROW(cpu::gemm_tiled(big, round_pool), std::bad_alloc) << where;
            cpu::detail::packing_allocation_hook = nullptr;
            if (w == "everywhere") {
                EXPECT_TRUE(caller_refused.load()) << "the shared panels were not refused";
                EXPECT_EQ(refused.load(), 1) << "a worker asked after the calling thread had failed";
            } else if (w == "the workers") {
                EXPECT_EQ(refused.load(), 2) << "both workers fail getting their own buffers";
            } else {
                EXPECT_EQ(refused.load(), 1);
                EXPECT_GE(calls.load(), 2) << "the other worker got its buffers";
            }
            std::vector<T> again(one.size(), T(std::nan("")));
            gemm_call small = call;
            small.c = again.data();
            cpu::gemm_tiled(small, round_pool);
            EXPECT_EQ(std::memcmp(one.data(), again.data(), one.size() * sizeof(T)), 0)
                << "after a failed allocation on " << where;
        }).join();
    }
}

// Whether a call's workers shared packed B panels: the calling thread allocates them (a new thread,
// so that it holds no buffer yet), the workers only their own.
bool shares_b_panels(const gemm_call& call) {
    bool caller_allocated = false;
    cpu::thread_pool pool(2);
    std::thread([&] {
        const std::thread::id caller = std::this_thread::get_id();
        cpu::detail::packing_allocation_hook = [&](std::size_t) {
            if (std::this_thread::get_id() == caller) caller_allocated = true;
            return true;
        };
        cpu::gemm_tiled(call, pool);
        cpu::detail::packing_allocation_hook = nullptr;
    }).join();
    return caller_allocated;
}

TEST(TiledThreads, ASquareCIsSplitByRowsWhateverItsTileRounding) {
    // The workers split C along its longer side, a square C by rows (sharing B). The sides are
    // compared as they are: rounded up to whole micro-tiles, a square C with n just past a multiple
    // of NR (NR > MR: AVX2's 4x12, AVX-512's 8x24 for f64) counted as wider than tall and was split
    // by columns, each worker packing all of A.
    using T = double;
    const cpu::block_sizes bl =
        cpu::derive_block_sizes(cpu::config_for(cpu::selected_isa()), dtype::f64, cpu::host_cache_sizes());
    const index_t n = 10 * bl.nr + 1, k = 64;
    std::mt19937_64 rng(11);
    std::vector<T> a(std::size_t(n * k)), b(std::size_t(k * (n + 1))), c(std::size_t(n * (n + 1)));
    for (T& x : a) x = random_value<T>(rng);
    for (T& x : b) x = random_value<T>(rng);
    gemm_call call = tiled_f64_call(a.data(), b.data(), n, n, k);
    call.c = c.data();
    EXPECT_TRUE(shares_b_panels(call)) << n << " x " << n << ", tile " << bl.mr << "x" << bl.nr;
    // The observation tells the splits apart: a C one column wider is split by columns.
    call.n = call.ldb = call.ldc = n + 1;
    EXPECT_FALSE(shares_b_panels(call)) << n << " x " << n + 1;
}

TEST(TiledThreads, WorkersSharingBPanelsMatchOneThreadBitwise) {
    every_shape<float>();
    every_shape<double>();
    every_shape<std::complex<float>>();
    every_shape<std::complex<double>>();
}

}  // namespace
}  // namespace tilestream
