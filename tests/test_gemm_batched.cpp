// Batched GEMM through a context: strided and pointer-array stacks, broadcast A or B, odd sizes
// and zero-size dimensions, every op and layout, every precision (conjugates on complex data), against a loop of single calls (bit
// for bit with the same kernel in place) and the reference; staged through budgets smaller than the
// stack (out of core) on one and two CPU devices, and on an OpenCL device.
#include "test_support.hpp"

#include <tilestream/context.hpp>
#include <tilestream/verify.hpp>

#include <complex>
#include <cstring>
#include <string>
#include <vector>

namespace tilestream {
namespace {

/// A stack of `count` matrices, each rows x cols in `lay`, with `pad` elements between them.
template <class T>
struct stack {
    index_t count, rows, cols, pad;
    layout lay;
    std::vector<T> data;
    stack(index_t count_, index_t rows_, index_t cols_, layout lay_, index_t pad_, std::uint64_t seed)
        : count(count_), rows(rows_), cols(cols_), pad(pad_), lay(lay_),
          data(std::size_t(std::max<index_t>(1, count * stride()))) {
        for (index_t i = 0; i < count; ++i) fill_random(matrix(i), seed + std::uint64_t(i));
    }
    index_t stride() const { return rows * cols + pad; }
    host_matrix_view<T> matrix(index_t i) { return host_matrix_view<T>(data.data() + i * stride(), rows, cols, lay); }
    host_batch_view<T> strided() { return host_batch_view<T>::strided(matrix(0), stride(), count); }
    /// Pointer array, matrices in reverse order (so no stride could describe them).
    std::vector<T*> pointers;
    host_batch_view<T> listed() {
        pointers.clear();
        for (index_t i = count - 1; i >= 0; --i) pointers.push_back(data.data() + i * stride());
        return host_batch_view<T>::pointers(matrix(0), std::span<T* const>(pointers));
    }
    /// Matrix i as the listed view orders them.
    host_matrix_view<T> listed_matrix(index_t i) { return matrix(count - 1 - i); }
};

template <class T>
bool same_bits(host_matrix_view<const T> x, host_matrix_view<const T> y) {
    for (index_t i = 0; i < x.rows(); ++i)
        for (index_t j = 0; j < x.cols(); ++j)
            if (std::memcmp(&x(i, j), &y(i, j), sizeof(T)) != 0) return false;
    return true;
}

/// Runs every variant of one shape on ctx and compares with single calls (bitwise when `bitwise`).
template <class T>
void batched_matches_single_calls(context& ctx, index_t batch, index_t m, index_t n, index_t k, bool bitwise) {
    int variant = 0;
    for (int ops = 0; ops < 4; ++ops)
        for (layout lay : {layout::row_major, layout::col_major})
            for (int form = 0; form < 4; ++form) {  // strided, listed, A broadcast, B broadcast
                ++variant;
                constexpr op tr = is_complex_v<T> ? op::c : op::t;  // conjugate transposes on complex data
                const op oa = (ops & 1) ? tr : op::n, ob = (ops & 2) ? tr : op::n;
                const bool a_one = form == 2, b_one = form == 3, listed = form == 1;
                stack<T> a(a_one ? 1 : batch, oa == op::n ? m : k, oa == op::n ? k : m, lay, 3, 11 + variant);
                stack<T> b(b_one ? 1 : batch, ob == op::n ? k : n, ob == op::n ? n : k, lay, 0, 101 + variant);
                stack<T> c0(batch, m, n, lay, 2, 1001 + variant), c(batch, m, n, lay, 2, 0), single(batch, m, n, lay, 2, 0);
                const T alpha = T(0.75), beta = variant % 3 ? T(0) : T(-1.5);
                c.data = c0.data;
                if (beta == T(0))
                    for (index_t i = 0; i < batch; ++i) fill_nan(c.matrix(i));
                single.data = c.data;
                const auto av = listed ? a.listed() : a.strided(), bv = listed ? b.listed() : b.strided();
                const auto cv = listed ? c.listed() : c.strided();
                const gemm_report rep = ctx.gemm_batched<T>(oa, ob, alpha, av, bv, beta, cv);
                EXPECT_EQ(rep.plan.batch, batch);
                for (index_t i = 0; i < batch; ++i) {
                    const auto ai = listed ? a.listed_matrix(i) : a.matrix(a_one ? 0 : i);
                    const auto bi = listed ? b.listed_matrix(i) : b.matrix(b_one ? 0 : i);
                    const auto ci = listed ? c.listed_matrix(i) : c.matrix(i);
                    const auto c0i = listed ? c0.listed_matrix(i) : c0.matrix(i);
                    const auto si = listed ? single.listed_matrix(i) : single.matrix(i);
                    ctx.gemm<T>(oa, ob, alpha, ai, bi, beta, si);
                    const auto r = check_gemm<T>(oa, ob, alpha, ai, bi, beta, c0i, ci);
                    EXPECT_TRUE(r.passed()) << "product " << i << " of " << batch << ", variant " << variant << ": " << r.summary();
                    if (bitwise)
                        EXPECT_TRUE(same_bits<T>(ci, si)) << "product " << i << ", variant " << variant << " ("
                                                          << to_string(rep.plan.strategy) << ")";
                }
            }
}

TEST(GemmBatched, StacksInPlaceGiveTheBitsOfALoopOfSingleCalls) {
    for (gemm_kernel kernel : {gemm_kernel::vendor, gemm_kernel::tiled}) {
        context_options o;
        o.kernel = kernel;
        context ctx("cpu", o);
        batched_matches_single_calls<float>(ctx, 9, 13, 7, 9, true);
        batched_matches_single_calls<double>(ctx, 37, 1, 31, 5, true);
        batched_matches_single_calls<double>(ctx, 3, 65, 64, 3, true);
        batched_matches_single_calls<std::complex<float>>(ctx, 7, 5, 9, 6, true);
        batched_matches_single_calls<std::complex<double>>(ctx, 5, 3, 1, 8, true);
    }
}

// A stack of small products well under a step (0.2 s) runs as one group per CPU device: groups
// come from the time per product measured on stacks, not from the shape class's single-call rate
// (fixed cost included), which cut 10,000 16x16 products into 16 hand-offs. Default options (the
// stack kernel measured), odd sizes, every precision, results against the reference, C poisoned.
TEST(GemmBatched, SmallProductsWellUnderAStepRunAsOneGroupPerDevice) {
    context ctx("cpu");
    const auto one = [&]<class T>(T) {
        SCOPED_TRACE(std::string(to_string(dtype_of<T>())));
        const index_t batch = 3001, m = 13, n = 11, k = 9;
        stack<T> a(batch, m, k, layout::row_major, 0, 5), b(batch, k, n, layout::row_major, 0, 6), c(batch, m, n, layout::row_major, 0, 7);
        for (index_t i = 0; i < batch; ++i) fill_nan(c.matrix(i));
        const gemm_report rep = ctx.gemm_batched<T>(op::n, op::n, T(1), a.strided(), b.strided(), T(0), c.strided());
        if (rep.plan.strategy != gemm_strategy::direct) {
            EXPECT_EQ(rep.plan.units, std::size_t(1)) << to_string(rep.plan.strategy) << ", groups of " << rep.plan.batch_group;
            EXPECT_EQ(rep.plan.batch_group, batch);
        }
        std::vector<T> zero(std::size_t(m * n), T(0));
        for (index_t i = 0; i < batch; i += 97) {
            const auto r = check_gemm<T>(op::n, op::n, T(1), a.matrix(i), b.matrix(i), T(0), host_matrix_view<T>(zero.data(), m, n), c.matrix(i));
            EXPECT_TRUE(r.passed()) << "product " << i << ": " << r.summary();
        }
    };
    one(float{});
    one(double{});
    one(std::complex<float>{});
    one(std::complex<double>{});
}

TEST(GemmBatched, StacksStreamThroughBudgetsSmallerThanTheStack) {
    for (const char* spec : {"cpu", "cpu:2"}) {
        SCOPED_TRACE(spec);
        context_options o;
        o.memory_budget = 16 * 1024;  // a few products per group: many groups, two sets of buffers
        o.cpu_threads = 1;
        o.kernel = gemm_kernel::tiled;  // bits independent of the leading dimensions staging changes
        context ctx(spec, o);
        batched_matches_single_calls<float>(ctx, 41, 17, 11, 13, true);
        batched_matches_single_calls<double>(ctx, 23, 9, 19, 7, true);
        batched_matches_single_calls<std::complex<double>>(ctx, 13, 7, 5, 9, true);
        // The stack (41 x (13 x 17 + 13 x 11 + 17 x 11) floats, 82 KiB) exceeds the budget.
        stack<float> a(41, 17, 13, layout::row_major, 0, 1), b(41, 13, 11, layout::row_major, 0, 2),
            c(41, 17, 11, layout::row_major, 0, 3);
        const gemm_report rep = ctx.gemm_batched<float>(op::n, op::n, 1.0f, a.strided(), b.strided(), 0.0f, c.strided());
        EXPECT_GT(rep.plan.units, 2u);
        EXPECT_LE(rep.peak_device_bytes, 16u * 1024);
        EXPECT_EQ(rep.bytes_h2d, sizeof(float) * 41 * (17 * 13 + 13 * 11));
        EXPECT_NE(ctx.explain(rep.plan).find("41 products in"), std::string::npos) << ctx.explain(rep.plan);
    }
}

TEST(GemmBatched, AProductLargerThanTheBudgetRunsOnItsOwn) {
    context_options o;
    o.memory_budget = 16 * 1024;
    o.cpu_threads = 1;
    context ctx("cpu", o);
    batched_matches_single_calls<double>(ctx, 2, 70, 60, 50, false);
}

TEST(GemmBatched, ZeroSizesAndZeroAlpha) {
    context ctx("cpu");
    for (auto [batch, m, n, k] : {std::array<index_t, 4>{0, 3, 4, 5}, {3, 0, 4, 5}, {3, 4, 0, 5}, {3, 4, 5, 0}}) {
        stack<double> a(batch, m, k, layout::row_major, 0, 1), b(batch, k, n, layout::row_major, 0, 2),
            c0(batch, m, n, layout::row_major, 0, 3), c(batch, m, n, layout::row_major, 0, 3);
        ctx.gemm_batched<double>(op::n, op::n, 1.0, a.strided(), b.strided(), 0.5, c.strided());
        for (index_t i = 0; i < batch; ++i)
            for (index_t r = 0; r < m; ++r)
                for (index_t j = 0; j < n; ++j) EXPECT_EQ(c.matrix(i)(r, j), 0.5 * c0.matrix(i)(r, j));  // k = 0
    }
    stack<float> a(5, 6, 7, layout::row_major, 0, 1), b(5, 7, 8, layout::row_major, 0, 2), c(5, 6, 8, layout::row_major, 0, 3);
    for (index_t i = 0; i < 5; ++i) fill_nan(a.matrix(i));  // alpha = 0 never reads A or B
    ctx.gemm_batched<float>(op::n, op::n, 0.0f, a.strided(), b.strided(), 0.0f, c.strided());
    for (index_t i = 0; i < 5; ++i)
        for (index_t r = 0; r < 6; ++r)
            for (index_t j = 0; j < 8; ++j) EXPECT_EQ(c.matrix(i)(r, j), 0.0f);
}

TEST(GemmBatched, CountsThatDoNotMatchAreAClearError) {
    context ctx("cpu");
    stack<float> a(3, 4, 5, layout::row_major, 0, 1), b(2, 5, 6, layout::row_major, 0, 2), c(3, 4, 6, layout::row_major, 0, 3);
    try {
        ctx.gemm_batched<float>(op::n, op::n, 1.0f, a.strided(), b.strided(), 0.0f, c.strided());
        FAIL() << "no error";
    } catch (const dimension_mismatch& e) {
        EXPECT_NE(std::string(e.what()).find("B 2, C 3"), std::string::npos) << e.what();
    }
}

TEST(GemmBatched, OpenClDevicesRunStacksThroughTheirBatchedKernels) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (gemm_kernel kernel : {gemm_kernel::tiled, gemm_kernel::vendor}) {
        context_options o;
        o.kernel = kernel;
        o.memory_budget = 64 * 1024;
        context ctx("opencl:0", o);
        batched_matches_single_calls<float>(ctx, 19, 11, 9, 7, false);
        batched_matches_single_calls<std::complex<float>>(ctx, 6, 5, 7, 3, false);
    }
}

// cuBLAS's strided-batched GEMM (vendor) and the loop of the other kernels, every precision, in
// core and streamed through a budget smaller than the stack (scripts/gpu-check.sh runs it).
TEST(GemmBatched, CudaDevicesRunStacksThroughCublasStridedBatched) {
    TILESTREAM_SKIP_WITHOUT_GPU("cuda:0");
    for (gemm_kernel kernel : {gemm_kernel::vendor, gemm_kernel::tiled})
        for (const char* spec : {"cuda:0", "cuda:0@96KiB"}) {
            SCOPED_TRACE(spec);
            context_options o;
            o.kernel = kernel;
            context ctx(spec, o);
            batched_matches_single_calls<float>(ctx, 21, 13, 9, 11, false);
            batched_matches_single_calls<double>(ctx, 9, 7, 16, 5, false);
            batched_matches_single_calls<std::complex<float>>(ctx, 6, 5, 7, 3, false);
            batched_matches_single_calls<std::complex<double>>(ctx, 5, 9, 4, 6, false);
        }
}

}  // namespace
}  // namespace tilestream
