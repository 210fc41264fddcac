// CPU GEMM and Jacobi kernels called directly on host memory and compared with the reference kernels.
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "backends/reference/reference_kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace tilestream {
namespace {

using kernel_fn = void (*)(const gemm_call&, cpu::thread_pool&);

kernel_fn cpu_kernel(gemm_kernel k) {
    switch (k) {
        case gemm_kernel::naive: return cpu::gemm_naive;
        case gemm_kernel::tiled: return cpu::gemm_tiled;
        default: return cpu::gemm_vendor;
    }
}

// Uniform in [-1, 1] without values near zero, so every product contributes and a kernel that
// skips or zeroes a term cannot pass by accident.
template <class T>
T random_value(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (;;) {
        const double v = u(rng);
        if (std::abs(v) >= 1.0 / 64) return static_cast<T>(v);
    }
}

template <class T>
constexpr T poison = std::numeric_limits<T>::quiet_NaN();
// Written into C's padding between columns/rows; a kernel that writes outside C changes it.
template <class T>
constexpr T padding_sentinel = T(12345.0);

// A matrix as a kernel sees it: rows x cols stored with layout and ld, padding included.
template <class T>
struct stored_matrix {
    index_t rows = 0, cols = 0, ld = 1;
    layout lay = layout::row_major;
    std::vector<T> data;

    stored_matrix() = default;
    stored_matrix(index_t r, index_t c, layout l, index_t pad, T fill) : rows(r), cols(c), lay(l) {
        const index_t len = l == layout::row_major ? c : r;
        const index_t lines = l == layout::row_major ? r : c;
        ld = std::max<index_t>(1, len + pad);
        data.assign(static_cast<std::size_t>(std::max<index_t>(1, lines * ld)), fill);
    }
    T& at(index_t i, index_t j) { return data[lay == layout::row_major ? i * ld + j : i + j * ld]; }
    T at(index_t i, index_t j) const {
        return data[lay == layout::row_major ? i * ld + j : i + j * ld];
    }
};

struct gemm_case {
    index_t m, n, k;
    layout la, lb, lc;
    op oa, ob;
    double alpha, beta;
    index_t pad;  // extra leading-dimension elements, filled with NaN (A, B) or a sentinel (C)

    std::string describe() const {
        std::ostringstream s;
        s << m << "x" << n << "x" << k << " A:" << to_string(la) << "/" << to_string(oa)
          << " B:" << to_string(lb) << "/" << to_string(ob) << " C:" << to_string(lc)
          << " alpha=" << alpha << " beta=" << beta << " pad=" << pad;
        return s.str();
    }
};

// Every layout/op combination for small shapes and one larger than a block; for the larger
// shapes a subset in which each of the five flags takes both values. 257x263x269 spans several
// MC blocks of the tiled kernel (and KC for f64); 97x2100x400 spans its NC and KC blocks.
std::vector<gemm_case> gemm_cases() {
    struct shape {
        index_t m, n, k;
        int combos;  // 32: every layout/op combination; fewer: the first of `subset`
    };
    const shape shapes[] = {{1, 1, 1, 32},    {7, 13, 5, 32},     {300, 1, 77, 32},
                            {1, 500, 3, 32},  {131, 67, 257, 32}, {257, 263, 269, 8},
                            {33, 47, 1, 32},  {2, 3, 511, 32},    {97, 2100, 400, 2}};
    const std::pair<double, double> scalars[] = {{1.0, 0.0}, {-1.25, 0.5}, {0.5, 1.0}, {2.0, -1.5}};
    const unsigned subset[] = {0b00000, 0b11111, 0b10101, 0b01010, 0b00111, 0b11000, 0b01101,
                               0b10010};
    std::vector<gemm_case> cases;
    for (const shape& s : shapes) {
        std::vector<unsigned> combos;
        if (s.combos == 32)
            for (unsigned f = 0; f < 32; ++f) combos.push_back(f);
        else
            combos.assign(std::begin(subset), std::begin(subset) + s.combos);
        for (unsigned f : combos) {
            const std::size_t idx = cases.size();
            gemm_case c{};
            c.m = s.m;
            c.n = s.n;
            c.k = s.k;
            c.la = (f & 1) ? layout::col_major : layout::row_major;
            c.lb = (f & 2) ? layout::col_major : layout::row_major;
            c.lc = (f & 4) ? layout::col_major : layout::row_major;
            c.oa = (f & 8) ? op::t : op::n;
            c.ob = (f & 16) ? op::t : op::n;
            c.alpha = scalars[idx % 4].first;
            c.beta = scalars[idx % 4].second;
            c.pad = (idx % 3 == 0) ? 3 : 0;
            cases.push_back(c);
        }
    }
    return cases;
}

// Operands of one case with the reference result and an elementwise error bound; built once per
// value type and case and shared by every kernel and pool size.
template <class T>
struct case_data {
    stored_matrix<T> a, b, c0;
    std::vector<T> expected;    // reference C (padding included)
    std::vector<double> bound;  // |alpha| * sum |a||b| + |beta| |c|, per element of C
};

template <class T>
stored_matrix<T> random_operand(index_t rows, index_t cols, layout l, index_t pad,
                                std::mt19937_64& rng) {
    stored_matrix<T> x(rows, cols, l, pad, poison<T>);
    for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) x.at(i, j) = random_value<T>(rng);
    return x;
}

template <class T>
gemm_call make_call(const gemm_case& gc, const stored_matrix<T>& a, const stored_matrix<T>& b,
                    stored_matrix<T>& c) {
    gemm_call call;
    call.type = dtype_of<T>();
    call.op_a = gc.oa;
    call.op_b = gc.ob;
    call.m = gc.m;
    call.n = gc.n;
    call.k = gc.k;
    call.alpha = gc.alpha;
    call.beta = gc.beta;
    call.a = a.data.data();
    call.lda = a.ld;
    call.layout_a = a.lay;
    call.b = b.data.data();
    call.ldb = b.ld;
    call.layout_b = b.lay;
    call.c = c.data.data();
    call.ldc = c.ld;
    call.layout_c = c.lay;
    return call;
}

template <class T>
const case_data<T>& prepared_case(std::size_t index, const gemm_case& gc) {
    static std::map<std::size_t, case_data<T>> cache;
    auto it = cache.find(index);
    if (it != cache.end()) return it->second;
    std::mt19937_64 rng(1000 + index);
    case_data<T> d;
    const bool ta = gc.oa == op::t, tb = gc.ob == op::t;
    d.a = random_operand<T>(ta ? gc.k : gc.m, ta ? gc.m : gc.k, gc.la, gc.pad, rng);
    d.b = random_operand<T>(tb ? gc.n : gc.k, tb ? gc.k : gc.n, gc.lb, gc.pad, rng);
    d.c0 = stored_matrix<T>(gc.m, gc.n, gc.lc, gc.pad, padding_sentinel<T>);
    for (index_t i = 0; i < gc.m; ++i)
        for (index_t j = 0; j < gc.n; ++j)
            d.c0.at(i, j) = gc.beta == 0.0 ? poison<T> : random_value<T>(rng);

    stored_matrix<T> ref = d.c0;
    gemm_call call = make_call(gc, d.a, d.b, ref);
    reference::gemm(call);
    d.expected = ref.data;
    d.bound.assign(static_cast<std::size_t>(gc.m * gc.n), 0.0);
    auto op_a = [&](index_t i, index_t p) { return ta ? d.a.at(p, i) : d.a.at(i, p); };
    auto op_b = [&](index_t p, index_t j) { return tb ? d.b.at(j, p) : d.b.at(p, j); };
    for (index_t i = 0; i < gc.m; ++i)
        for (index_t j = 0; j < gc.n; ++j) {
            double s = 0.0;
            for (index_t p = 0; p < gc.k; ++p) s += std::abs(double(op_a(i, p)) * op_b(p, j));
            const double c = gc.beta == 0.0 ? 0.0 : std::abs(double(d.c0.at(i, j)));
            d.bound[i * gc.n + j] = std::abs(gc.alpha) * s + std::abs(gc.beta) * c;
        }
    return cache.emplace(index, std::move(d)).first->second;
}

template <class T>
void write_matrix(std::ostream& os, const char* name, const stored_matrix<T>& x) {
    os << name << " " << x.rows << "x" << x.cols << " " << to_string(x.lay) << " ld=" << x.ld
       << "\n";
    for (index_t i = 0; i < x.rows; ++i) {
        for (index_t j = 0; j < x.cols; ++j) os << x.at(i, j) << (j + 1 < x.cols ? " " : "\n");
    }
}

// Writes the operands of a failing case next to the test's temporaries and returns the path.
template <class T>
std::string dump_failure(const std::string& tag, const gemm_case& gc, const case_data<T>& d,
                         const stored_matrix<T>& got) {
    const std::string path = ::testing::TempDir() + "tilestream_gemm_failure_" + tag + ".txt";
    std::ofstream os(path);
    os.precision(std::numeric_limits<T>::max_digits10);
    os << gc.describe() << "\n";
    write_matrix(os, "A", d.a);
    write_matrix(os, "B", d.b);
    write_matrix(os, "C0", d.c0);
    write_matrix(os, "C", got);
    return path;
}

template <class T>
void check_case(gemm_kernel kernel, cpu::thread_pool& pool, std::size_t index,
                const gemm_case& gc) {
    const case_data<T>& d = prepared_case<T>(index, gc);
    stored_matrix<T> c = d.c0;
    const gemm_call call = make_call(gc, d.a, d.b, c);
    cpu_kernel(kernel)(call, pool);

    const double eps = std::numeric_limits<T>::epsilon();
    const double scale = 2.0 * double(gc.k + 2) * eps;
    int reported = 0;
    bool failed = false;
    for (index_t i = 0; i < gc.m; ++i)
        for (index_t j = 0; j < gc.n; ++j) {
            const double got = c.at(i, j);
            const std::size_t pos = &c.at(i, j) - c.data.data();
            const double want = d.expected[pos];
            const double tol = scale * d.bound[i * gc.n + j];
            if (!(std::abs(got - want) <= tol)) {
                failed = true;
                if (reported++ < 5)
                    ADD_FAILURE() << gc.describe() << ": C(" << i << "," << j << ") = " << got
                                  << ", reference " << want << ", tolerance " << tol;
            }
        }
    // Padding of C must be untouched.
    for (std::size_t p = 0; p < c.data.size(); ++p)
        if (d.c0.data[p] == padding_sentinel<T> && c.data[p] != padding_sentinel<T>) {
            failed = true;
            ADD_FAILURE() << gc.describe() << ": element " << p << " outside C was written";
            break;
        }
    if (failed) {
        const std::string tag = std::string(to_string(kernel)) + "_" +
                                std::string(to_string(dtype_of<T>())) + "_" + std::to_string(index);
        ADD_FAILURE() << "operands written to " << dump_failure(tag, gc, d, c);
    }
}

// ---- GEMM: kernel x value type x pool size ----

using gemm_param = std::tuple<gemm_kernel, dtype, int>;

class CpuGemm : public ::testing::TestWithParam<gemm_param> {
protected:
    gemm_kernel kernel() const { return std::get<0>(GetParam()); }
    dtype type() const { return std::get<1>(GetParam()); }
    int threads() const { return std::get<2>(GetParam()); }
};

TEST_P(CpuGemm, MatchesReference) {
    cpu::thread_pool pool(threads());
    const std::vector<gemm_case> cases = gemm_cases();
    for (std::size_t idx = 0; idx < cases.size(); ++idx) {
        SCOPED_TRACE(cases[idx].describe());
        visit_real_dtype(type(), "test", [&]<class T>() { check_case<T>(kernel(), pool, idx, cases[idx]); });
        if (HasFailure()) break;  // one failing case with its dump is enough to debug
    }
}

TEST_P(CpuGemm, InputsAreNonZero) {
    // Guards the test above against passing vacuously on all-zero operands.
    const std::vector<gemm_case> cases = gemm_cases();
    visit_real_dtype(type(), "test", [&]<class T>() {
        const case_data<T>& d = prepared_case<T>(5, cases[5]);
        double na = 0, nb = 0;
        for (T v : d.a.data) na += std::isnan(v) ? 0.0 : double(v) * v;
        for (T v : d.b.data) nb += std::isnan(v) ? 0.0 : double(v) * v;
        EXPECT_GT(na, 0.0);
        EXPECT_GT(nb, 0.0);
    });
}

TEST_P(CpuGemm, AlphaZeroDoesNotReadAOrB) {
    cpu::thread_pool pool(threads());
    visit_real_dtype(type(), "test", [&]<class T>() {
        for (double beta : {0.0, 0.5, -3.0}) {
            SCOPED_TRACE("beta=" + std::to_string(beta));
            const index_t m = 37, n = 41, k = 29;
            stored_matrix<T> a(m, k, layout::row_major, 0, poison<T>);
            stored_matrix<T> b(k, n, layout::col_major, 0, poison<T>);
            stored_matrix<T> c(m, n, layout::row_major, 0, T(0));
            std::mt19937_64 rng(7);
            for (T& v : c.data) v = beta == 0.0 ? poison<T> : random_value<T>(rng);
            const stored_matrix<T> c0 = c;
            gemm_case gc{m, n, k, layout::row_major, layout::col_major, layout::row_major,
                         op::n, op::n, 0.0, beta, 0};
            cpu_kernel(kernel())(make_call(gc, a, b, c), pool);
            for (std::size_t p = 0; p < c.data.size(); ++p) {
                // beta * c is exact in T for these betas, so every kernel must agree exactly.
                const T want = beta == 0.0 ? T(0) : static_cast<T>(beta * double(c0.data[p]));
                ASSERT_EQ(c.data[p], want) << "element " << p;
            }
        }
    });
}

TEST_P(CpuGemm, BetaZeroOverwritesNaNInC) {
    cpu::thread_pool pool(threads());
    visit_real_dtype(type(), "test", [&]<class T>() {
        const index_t m = 19, n = 45, k = 23;
        std::mt19937_64 rng(11);
        stored_matrix<T> a = random_operand<T>(m, k, layout::col_major, 0, rng);
        stored_matrix<T> b = random_operand<T>(k, n, layout::row_major, 0, rng);
        for (layout lc : {layout::row_major, layout::col_major}) {
            stored_matrix<T> c(m, n, lc, 0, poison<T>);
            gemm_case gc{m, n, k, layout::col_major, layout::row_major, lc, op::n, op::n, 1.0, 0.0,
                         0};
            cpu_kernel(kernel())(make_call(gc, a, b, c), pool);
            for (T v : c.data) ASSERT_FALSE(std::isnan(v));
        }
    });
}

TEST_P(CpuGemm, EmptyInnerDimensionScalesC) {
    cpu::thread_pool pool(threads());
    visit_real_dtype(type(), "test", [&]<class T>() {
        for (double beta : {0.0, -2.0}) {
            const index_t m = 9, n = 14;
            stored_matrix<T> c(m, n, layout::col_major, 2, padding_sentinel<T>);
            std::mt19937_64 rng(3);
            for (index_t i = 0; i < m; ++i)
                for (index_t j = 0; j < n; ++j)
                    c.at(i, j) = beta == 0.0 ? poison<T> : random_value<T>(rng);
            const stored_matrix<T> c0 = c;
            gemm_call call;
            call.type = dtype_of<T>();
            call.m = m;
            call.n = n;
            call.k = 0;  // A and B are empty: no pointer to read through
            call.alpha = 1.5;
            call.beta = beta;
            call.c = c.data.data();
            call.ldc = c.ld;
            call.layout_c = c.lay;
            cpu_kernel(kernel())(call, pool);
            for (index_t i = 0; i < m; ++i)
                for (index_t j = 0; j < n; ++j)
                    ASSERT_EQ(c.at(i, j), beta == 0.0 ? T(0) : T(beta * double(c0.at(i, j))));
            for (std::size_t p = 0; p < c.data.size(); ++p)
                if (c0.data[p] == padding_sentinel<T>) {
                    ASSERT_EQ(c.data[p], padding_sentinel<T>);
                }
        }
    });
}

TEST_P(CpuGemm, EmptyOutputTouchesNothing) {
    cpu::thread_pool pool(threads());
    visit_real_dtype(type(), "test", [&]<class T>() {
        std::vector<T> sentinel(16, padding_sentinel<T>);
        for (auto [m, n] : {std::pair<index_t, index_t>{0, 5}, {5, 0}, {0, 0}}) {
            gemm_call call;
            call.type = dtype_of<T>();
            call.m = m;
            call.n = n;
            call.k = 4;
            call.a = sentinel.data();
            call.b = sentinel.data();
            call.c = sentinel.data();
            call.lda = call.ldb = call.ldc = 4;
            cpu_kernel(kernel())(call, pool);
            for (T v : sentinel) ASSERT_EQ(v, padding_sentinel<T>);
        }
    });
}

std::string gemm_param_name(const ::testing::TestParamInfo<gemm_param>& info) {
    return std::string(to_string(std::get<0>(info.param))) + "_" +
           std::string(to_string(std::get<1>(info.param))) + "_" +
           std::to_string(std::get<2>(info.param)) + "threads";
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuGemm,
                         ::testing::Combine(::testing::Values(gemm_kernel::naive,
                                                              gemm_kernel::tiled,
                                                              gemm_kernel::vendor),
                                            ::testing::Values(dtype::f32, dtype::f64),
                                            ::testing::Values(2, 3)),
                         gemm_param_name);

// ---- Jacobi: value type x pool size ----

using jacobi_param = std::tuple<dtype, int>;

class CpuJacobi : public ::testing::TestWithParam<jacobi_param> {};

TEST_P(CpuJacobi, MatchesReferenceBitwise) {
    const auto [type, threads] = GetParam();
    cpu::thread_pool pool(threads);
    struct region {
        index_t rows, cols, ld, r0, r1, c0, c1;
    };
    // Odd grids (halo included), whole interiors, sub-regions, a single row or column, and an
    // empty sweep; ld > cols leaves a poisoned gap the stencil must not read into the result.
    const region regions[] = {{37, 53, 53, 1, 36, 1, 52}, {37, 53, 61, 5, 20, 3, 50},
                              {37, 53, 53, 17, 18, 1, 52}, {37, 53, 53, 1, 36, 26, 27},
                              {3, 3, 3, 1, 2, 1, 2},       {101, 67, 70, 1, 100, 1, 66},
                              {37, 53, 53, 4, 4, 1, 52}};
    visit_real_dtype(type, "test", [&]<class T>() {
        std::mt19937_64 rng(99);
        for (const region& r : regions) {
            SCOPED_TRACE(std::to_string(r.rows) + "x" + std::to_string(r.cols) + " rows [" +
                         std::to_string(r.r0) + "," + std::to_string(r.r1) + ") cols [" +
                         std::to_string(r.c0) + "," + std::to_string(r.c1) + ")");
            std::vector<T> in(static_cast<std::size_t>(r.rows * r.ld), poison<T>);
            for (index_t i = 0; i < r.rows; ++i)
                for (index_t j = 0; j < r.cols; ++j) in[i * r.ld + j] = random_value<T>(rng);
            std::vector<T> out_ref(in.size(), poison<T>), out_cpu(in.size(), poison<T>);
            double res_ref = 0.5, res_cpu = 0.5;  // the sweep adds to what is there
            jacobi_call call;
            call.type = dtype_of<T>();
            call.in = in.data();
            call.ld = r.ld;
            call.row_begin = r.r0;
            call.row_end = r.r1;
            call.col_begin = r.c0;
            call.col_end = r.c1;
            call.out = out_ref.data();
            call.residual = &res_ref;
            reference::jacobi_sweep(call);
            call.out = out_cpu.data();
            call.residual = &res_cpu;
            cpu::jacobi_sweep(call, pool);
            ASSERT_EQ(std::memcmp(out_ref.data(), out_cpu.data(), in.size() * sizeof(T)), 0);
            EXPECT_NEAR(res_cpu, res_ref, 1e-12 * std::abs(res_ref));
            if (r.r0 < r.r1) {
                EXPECT_GT(res_ref, 0.5);  // the residual really was accumulated
            }

            // Without a residual pointer the sweep writes the same points.
            std::vector<T> out_plain(in.size(), poison<T>);
            call.out = out_plain.data();
            call.residual = nullptr;
            cpu::jacobi_sweep(call, pool);
            ASSERT_EQ(std::memcmp(out_ref.data(), out_plain.data(), in.size() * sizeof(T)), 0);
        }
    });
}

TEST_P(CpuJacobi, ResidualIsDeterministic) {
    const auto [type, threads] = GetParam();
    cpu::thread_pool pool(threads);
    visit_real_dtype(type, "test", [&]<class T>() {
        const index_t rows = 211, cols = 97;
        std::mt19937_64 rng(5);
        std::vector<T> in(static_cast<std::size_t>(rows * cols)), out(in.size());
        for (T& v : in) v = random_value<T>(rng);
        jacobi_call call;
        call.type = dtype_of<T>();
        call.in = in.data();
        call.out = out.data();
        call.ld = cols;
        call.row_begin = 1;
        call.row_end = rows - 1;
        call.col_begin = 1;
        call.col_end = cols - 1;
        double first = 0.0;
        call.residual = &first;
        cpu::jacobi_sweep(call, pool);
        for (int rep = 0; rep < 5; ++rep) {
            double again = 0.0;
            call.residual = &again;
            cpu::jacobi_sweep(call, pool);
            ASSERT_EQ(again, first);
        }
    });
}

std::string jacobi_param_name(const ::testing::TestParamInfo<jacobi_param>& info) {
    return std::string(to_string(std::get<0>(info.param))) + "_" +
           std::to_string(std::get<1>(info.param)) + "threads";
}

INSTANTIATE_TEST_SUITE_P(Kernels, CpuJacobi,
                         ::testing::Combine(::testing::Values(dtype::f32, dtype::f64),
                                            ::testing::Values(1, 2, 3)),
                         jacobi_param_name);

}  // namespace
}  // namespace tilestream
