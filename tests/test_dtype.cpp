// The precision table (dtype_traits), op::c, and the operand descriptor that derives every stride,
// stored block and BLAS flag from op and layout.
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "backends/reference/reference_kernels.hpp"

#include <tilestream/error.hpp>
#include <tilestream/kernels.hpp>
#include <tilestream/plan.hpp>
#include <tilestream/types.hpp>
#include <tilestream/verify.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace tilestream {
namespace {

TEST(DtypeTable, EveryRowIsItsOwnAndNamesRoundTrip) {
    for (dtype t : all_dtypes) {
        const dtype_info& d = dtype_traits(t);
        EXPECT_EQ(d.type, t);
        EXPECT_EQ(parse_dtype(d.name), t) << d.name;
        EXPECT_EQ(parse_dtype(d.numpy_name), t) << d.numpy_name;
        dtype from_npy = dtype::f32;
        EXPECT_TRUE(dtype_from_npy_descr(d.npy_descr, from_npy));
        EXPECT_EQ(from_npy, t);
        EXPECT_EQ(to_string(t), d.name);
        EXPECT_EQ(size_of(t), d.is_complex ? 2 * size_of(d.real) : size_of(d.real));
        EXPECT_FALSE(is_complex(d.real));
        EXPECT_EQ(d.flops_per_multiply_add, d.is_complex ? 8 : 2);
        EXPECT_EQ(reproducible_k_block(t), d.reproducible_k_block);
        // A complex k-block is half its parts' (the 1m kernel runs the real micro-kernel over 2k).
        EXPECT_EQ(d.reproducible_k_block * (d.is_complex ? 2 : 1), dtype_traits(d.real).reproducible_k_block)
            << d.name;
    }
    EXPECT_EQ(parse_dtype("COMPLEX64"), dtype::c32);
    EXPECT_EQ(parse_dtype("float"), dtype::f32);
    EXPECT_EQ(parse_dtype("double"), dtype::f64);
    try {
        parse_dtype("f16");
        FAIL() << "f16 parsed";
    } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("c64/complex128"), std::string::npos) << e.what();
    }
    dtype out = dtype::f32;
    EXPECT_FALSE(dtype_from_npy_descr(">c8", out));
    EXPECT_FALSE(dtype_from_npy_descr("<c32", out));
}

TEST(DtypeTable, ValueTypesMapBothWays) {
    static_assert(dtype_of<float>() == dtype::f32 && dtype_of<double>() == dtype::f64);
    static_assert(dtype_of<std::complex<float>>() == dtype::c32 && dtype_of<std::complex<double>>() == dtype::c64);
    static_assert(std::is_same_v<value_type_of<dtype::c64>::type, std::complex<double>>);
    static_assert(std::is_same_v<real_type_t<std::complex<float>>, float> && std::is_same_v<real_type_t<double>, double>);
    static_assert(is_complex_v<std::complex<double>> && !is_complex_v<float>);
    for (dtype t : all_dtypes) {
        const std::size_t bytes = visit_dtype(t, []<class T>() { return sizeof(T); });
        EXPECT_EQ(bytes, size_of(t));
        const dtype back = visit_dtype(t, []<class T>() { return dtype_of<T>(); });
        EXPECT_EQ(back, t);
    }
    EXPECT_EQ(visit_real_dtype(dtype::f64, "x", []<class T>() { return sizeof(T); }), 8u);
    try {
        visit_real_dtype(dtype::c32, "jacobi", []<class T>() { return 0; });
        FAIL() << "complex visited as real";
    } catch (const invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "jacobi: c32 is complex; only f32 and f64 are supported");
    }
}

TEST(Scalars, ParseAndFormatComplexNumbersAsPythonDoes) {
    const std::pair<const char*, scalar> cases[] = {
        {"2", {2, 0}},        {"-1.5e3", {-1500, 0}}, {"1.5-2j", {1.5, -2}}, {"1.5+2i", {1.5, 2}},
        {"2j", {0, 2}},       {"-j", {0, -1}},        {"+J", {0, 1}},        {"(1+2j)", {1, 2}},
        {"-0.25e-1-3e2j", {-0.025, -300}}, {"1e3j", {0, 1000}}, {"inf", {INFINITY, 0}}, {"nanj", {0, NAN}},
    };
    for (const auto& [text, want] : cases) {
        SCOPED_TRACE(text);
        const scalar got = parse_scalar(text);
        if (std::isnan(want.imag())) {
            EXPECT_TRUE(std::isnan(got.imag()));
        } else {
            EXPECT_EQ(got, want);
            EXPECT_EQ(parse_scalar(format_scalar(got)), got) << format_scalar(got);
        }
    }
    EXPECT_EQ(format_scalar({1.5, -2}), "1.5-2j");
    EXPECT_EQ(format_scalar({0, 2}), "2j");
    EXPECT_EQ(format_scalar({-3, 0}), "-3");
    for (const char* bad : {"", "j1", "1+", "1.5-2", "1+2j+3", "(1+2j", "1 + 2j", "abc", "1jj", "--1"}) {
        SCOPED_TRACE(bad);
        EXPECT_THROW(parse_scalar(bad), invalid_argument);
    }
}

TEST(Ops, ConjugateTransposeParsesAndIsATranspose) {
    EXPECT_EQ(parse_op("c"), op::c);
    EXPECT_EQ(parse_op("C"), op::c);
    EXPECT_EQ(to_string(op::c), "c");
    EXPECT_TRUE(is_transposed(op::c) && is_conjugated(op::c));
    EXPECT_TRUE(is_transposed(op::t) && !is_conjugated(op::t));
    EXPECT_FALSE(is_transposed(op::n) || is_conjugated(op::n));
    EXPECT_THROW(parse_op("h"), invalid_argument);
    // On real data op::c is op::t.
    EXPECT_EQ(operand_op(dtype::f32, op::c), op::t);
    EXPECT_EQ(operand_op(dtype::f64, op::c), op::t);
    EXPECT_EQ(operand_op(dtype::c32, op::c), op::c);
    EXPECT_EQ(operand_op(dtype::c64, op::t), op::t);
}

// op(X)(i, j) through the descriptor against the definition, for every op and layout: stored
// element (i, j) of op n, (j, i) of a transpose.
TEST(OperandDesc, StridesAndBlocksFollowOpAndLayout) {
    const index_t rows = 5, cols = 3;
    for (op o : {op::n, op::t, op::c})
        for (layout l : {layout::row_major, layout::col_major}) {
            SCOPED_TRACE(std::string(to_string(o)) + " " + std::string(to_string(l)));
            const index_t sr = is_transposed(o) ? cols : rows, sc = is_transposed(o) ? rows : cols;
            const index_t ld = (l == layout::row_major ? sc : sr) + 2;
            const operand_desc d{o, l, ld, rows, cols};
            EXPECT_EQ(d.stored_rows(), sr);
            EXPECT_EQ(d.stored_cols(), sc);
            EXPECT_EQ(d.conjugated(), o == op::c);
            for (index_t i = 0; i < rows; ++i)
                for (index_t j = 0; j < cols; ++j) {
                    const index_t si = is_transposed(o) ? j : i, sj = is_transposed(o) ? i : j;
                    const index_t want = l == layout::row_major ? si * ld + sj : si + sj * ld;
                    EXPECT_EQ(d.offset(i, j), want);
                }
            const operand_desc::stored_rect b = d.stored_block(1, 2, 3, 1);
            EXPECT_EQ(b.row, is_transposed(o) ? 2 : 1);
            EXPECT_EQ(b.col, is_transposed(o) ? 1 : 2);
            EXPECT_EQ(b.rows, is_transposed(o) ? 1 : 3);
            EXPECT_EQ(b.cols, is_transposed(o) ? 3 : 1);
            // op(X) lies in memory in op_layout(): unit stride along its lines.
            if (d.op_layout() == layout::row_major)
                EXPECT_EQ(d.col_stride(), 1);
            else
                EXPECT_EQ(d.row_stride(), 1);
        }
}

TEST(OperandDesc, BlasFlagsTransposeAcrossLayoutsAndConjugateForC) {
    for (op o : {op::n, op::t, op::c})
        for (layout stored : {layout::row_major, layout::col_major})
            for (layout order : {layout::row_major, layout::col_major}) {
                const operand_desc d{o, stored, 9, 4, 7};
                const blas_trans t = d.for_blas(order).trans;
                const bool flip = d.op_layout() != order;
                const blas_trans want = flip ? (o == op::c ? blas_trans::conj_trans : blas_trans::trans)
                                             : (o == op::c ? blas_trans::conj_none : blas_trans::none);
                EXPECT_EQ(t, want) << to_string(o) << " " << to_string(stored) << " in " << to_string(order);
                EXPECT_EQ(d.for_blas(order).ld, 9);
            }
    // One line: ld never steps, and gets the least value BLAS accepts.
    const operand_desc row{op::n, layout::row_major, 1, 1, 6};
    EXPECT_EQ(row.for_blas(layout::row_major).ld, 6);
    EXPECT_EQ(row.for_blas(layout::row_major).min_ld, 6);
}

// On real data op::c must give exactly what op::t gives, in every CPU kernel.
TEST(Ops, ConjugateTransposeOfRealDataIsTheTransposeInEveryCpuKernel) {
    cpu::thread_pool pool(2);
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(-1, 1);
    visit_real_dtype(dtype::f64, "test", [&]<class T>() {
        const index_t m = 13, n = 9, k = 11;
        std::vector<T> a(std::size_t(m * k)), b(std::size_t(k * n)), c0(std::size_t(m * n));
        for (auto* v : {&a, &b, &c0})
            for (T& x : *v) x = T(u(rng));
        for (gemm_kernel kernel : {gemm_kernel::reference, gemm_kernel::naive, gemm_kernel::tiled, gemm_kernel::vendor}) {
            std::vector<T> ct = c0, cc = c0;
            gemm_call call;
            call.type = dtype_of<T>();
            call.m = m, call.n = n, call.k = k;
            call.alpha = 1.5, call.beta = -0.5;
            call.a = a.data(), call.lda = m, call.layout_a = layout::row_major;  // A is k x m: op(A) = A^T
            call.b = b.data(), call.ldb = k, call.layout_b = layout::row_major;  // B is n x k
            call.ldc = n;
            for (auto [o, out] : {std::pair{op::t, &ct}, std::pair{op::c, &cc}}) {
                call.op_a = call.op_b = o;
                call.c = out->data();
                switch (kernel) {
                    case gemm_kernel::reference: reference::gemm(call); break;
                    case gemm_kernel::naive: cpu::gemm_naive(call, pool); break;
                    case gemm_kernel::tiled: cpu::gemm_tiled(call, pool); break;
                    case gemm_kernel::vendor: cpu::gemm_vendor(call, pool); break;
                }
            }
            EXPECT_EQ(std::memcmp(ct.data(), cc.data(), ct.size() * sizeof(T)), 0) << to_string(kernel);
            EXPECT_NE(std::memcmp(ct.data(), c0.data(), ct.size() * sizeof(T)), 0) << to_string(kernel);
        }
    });
}

}  // namespace
}  // namespace tilestream
