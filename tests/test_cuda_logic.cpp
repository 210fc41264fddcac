// The CUDA backend's host-side decisions, tested without a GPU: the gemm_call to column-major BLAS
// mapping (against cuBLAS's documented argument rules and by evaluating the mapped product),
// budgets and slices, pinning flags, peer fallback, launch configurations, and duplicate devices.
#include "backends/cuda/cuda_logic.hpp"
#include "backends/reference/reference_kernels.hpp"
#include "core/blas_mapping.hpp"
#include "core/device_identity.hpp"

#include <tilestream/devices.hpp>
#include <tilestream/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace tilestream {
namespace {

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// ------------------------------------------------------------------ BLAS mapping

// cuBLAS's cublas<t>gemm / cublasGemmEx documentation: CUBLAS_STATUS_INVALID_VALUE "if m < 0 or
// n < 0 or k < 0, or if transa, transb != CUBLAS_OP_N, CUBLAS_OP_C, CUBLAS_OP_T, or if
// lda < max(1, m) when transa == CUBLAS_OP_N and lda < max(1, k) otherwise, or if
// ldb < max(1, k) when transb == CUBLAS_OP_N and ldb < max(1, n) otherwise, or if ldc < max(1, m)".
// Written out here independently of the library's own check.
std::string cublas_refuses(const column_major_gemm& g) {
    const index_t m = g.rows, n = g.cols, k = g.k;
    std::ostringstream why;
    if (m < 0 || n < 0 || k < 0) why << "negative size ";
    if (g.ldx < std::max<index_t>(1, g.trans_x ? k : m)) why << "lda=" << g.ldx << " ";
    if (g.ldy < std::max<index_t>(1, g.trans_y ? n : k)) why << "ldb=" << g.ldy << " ";
    if (g.ldz < std::max<index_t>(1, m)) why << "ldc=" << g.ldz << " ";
    return why.str();
}

// A stored operand: exactly the elements a matrix of this shape, layout and ld spans (no slack
// after the last element), so a read past it is caught.
struct stored {
    index_t rows, cols, ld;
    layout l;
    std::vector<double> v;
    stored(index_t r, index_t c, layout lay, index_t pad, std::mt19937_64& rng) : rows(r), cols(c), l(lay) {
        const index_t outer = l == layout::row_major ? rows : cols;
        const index_t inner = l == layout::row_major ? cols : rows;
        ld = std::max<index_t>(1, inner) + pad;
        v.resize(std::size_t((outer - 1) * ld + inner));
        std::uniform_real_distribution<double> u(0.25, 1.0);
        for (auto& x : v) x = (rng() & 1 ? 1 : -1) * u(rng);  // non-zero
    }
};

// Reads element `index` of whichever operand `base` points into; a read outside it fails.
struct bounded_reader {
    const std::vector<const std::vector<double>*> buffers;
    bool out_of_bounds = false;
    double operator()(const void* base, index_t index) {
        for (const auto* b : buffers)
            if (base == b->data()) {
                if (index >= 0 && std::size_t(index) < b->size()) return (*b)[std::size_t(index)];
                out_of_bounds = true;
                return 0;
            }
        out_of_bounds = true;
        return 0;
    }
};

// The mapped call evaluated as a column-major BLAS would: Z <- alpha*opx(X)*opy(Y) + beta*Z.
void column_major_gemm_on_host(const column_major_gemm& g, double alpha, double beta,
                               std::vector<double>& z, bounded_reader& read) {
    for (index_t j = 0; j < g.cols; ++j)
        for (index_t i = 0; i < g.rows; ++i) {
            double acc = 0;
            for (index_t p = 0; p < g.k; ++p) {
                const double x = read(g.x, g.trans_x ? p + i * g.ldx : i + p * g.ldx);
                const double y = read(g.y, g.trans_y ? j + p * g.ldy : p + j * g.ldy);
                acc += x * y;
            }
            const std::size_t at = std::size_t(i + j * g.ldz);
            if (at >= z.size()) {
                read.out_of_bounds = true;
                continue;
            }
            z[at] = alpha * acc + beta * z[at];
        }
}

struct mapping_tally {
    int cases = 0, refused = 0, wrong = 0;
    std::string first_refused, first_wrong;
};

// Every op/layout combination (2 ops x 2 ops x 2^3 layouts = 32) for the given sizes and padding.
void check_mapping(const std::vector<index_t>& sizes, index_t pad, mapping_tally& t) {
    std::mt19937_64 rng(17 + pad);
    for (int ops = 0; ops < 4; ++ops)
        for (int layouts = 0; layouts < 8; ++layouts)
            for (index_t m : sizes)
                for (index_t n : sizes)
                    for (index_t k : sizes) {
                        gemm_call call;
                        call.type = dtype::f64;
                        call.op_a = ops & 1 ? op::t : op::n;
                        call.op_b = ops & 2 ? op::t : op::n;
                        call.layout_a = layouts & 1 ? layout::col_major : layout::row_major;
                        call.layout_b = layouts & 2 ? layout::col_major : layout::row_major;
                        call.layout_c = layouts & 4 ? layout::col_major : layout::row_major;
                        call.m = m, call.n = n, call.k = k, call.alpha = 1.25, call.beta = -0.5;
                        const bool ta = call.op_a == op::t, tb = call.op_b == op::t;
                        stored a(ta ? k : m, ta ? m : k, call.layout_a, pad, rng);
                        stored b(tb ? n : k, tb ? k : n, call.layout_b, pad, rng);
                        stored c(m, n, call.layout_c, pad, rng);
                        call.a = a.v.data(), call.lda = a.ld;
                        call.b = b.v.data(), call.ldb = b.ld;
                        call.ldc = c.ld;
                        std::ostringstream name;
                        name << to_string(call.op_a) << to_string(call.op_b) << " "
                             << (layouts & 1 ? 'C' : 'R') << (layouts & 2 ? 'C' : 'R')
                             << (layouts & 4 ? 'C' : 'R') << " " << m << "x" << n << "x" << k
                             << " lda " << a.ld << " ldb " << b.ld << " ldc " << c.ld;

                        std::vector<double> want = c.v, got = c.v;
                        call.c = want.data();
                        reference::gemm(call);
                        call.c = got.data();
                        const column_major_gemm g = as_column_major(call);
                        ++t.cases;
                        if (const std::string why = cublas_refuses(g); !why.empty()) {
                            if (t.refused++ == 0) t.first_refused = name.str() + ": " + why;
                            // The library's own check must agree with the documented rules.
                            EXPECT_FALSE(column_major_gemm_violation(g).empty()) << name.str();
                        } else {
                            EXPECT_EQ(column_major_gemm_violation(g), "") << name.str();
                        }
                        EXPECT_EQ(g.z, got.data()) << name.str();
                        bounded_reader read{{&a.v, &b.v}};
                        column_major_gemm_on_host(g, call.alpha.real(), call.beta.real(), got, read);
                        double worst = 0;
                        for (std::size_t i = 0; i < got.size(); ++i)
                            worst = std::max(worst, std::abs(got[i] - want[i]));
                        if (read.out_of_bounds || !(worst <= 1e-13 * double(k + 1))) {
                            if (t.wrong++ == 0)
                                t.first_wrong = name.str() + (read.out_of_bounds
                                                                  ? ": reads outside an operand"
                                                                  : ": wrong product");
                        }
                    }
}

TEST(blas_mapping, EveryMinimalLeadingDimensionIsLegalForCublasAndRight) {
    mapping_tally t;
    check_mapping({1, 2, 3}, 0, t);
    EXPECT_EQ(t.cases, 32 * 27);  // 864
    EXPECT_EQ(t.refused, 0) << t.refused << " of " << t.cases << " calls cuBLAS refuses; first "
                            << t.first_refused;
    EXPECT_EQ(t.wrong, 0) << t.first_wrong;
}

TEST(blas_mapping, LargerAndPaddedShapesAreLegalAndRight) {
    for (index_t pad : {index_t(0), index_t(1), index_t(5)}) {
        mapping_tally t;
        check_mapping({1, 4, 7}, pad, t);
        EXPECT_EQ(t.cases, 32 * 27);
        EXPECT_EQ(t.refused, 0) << "pad " << pad << ": " << t.refused << " refused; first "
                                << t.first_refused;
        EXPECT_EQ(t.wrong, 0) << "pad " << pad << ": " << t.first_wrong;
    }
}

TEST(blas_mapping, PaddedLeadingDimensionsArePassedThrough) {
    // Row-major C (m x n, ldc 40) is computed as C^T: ldz is C's ld, X is B, Y is A.
    gemm_call call;
    call.m = 5, call.n = 6, call.k = 7;
    call.lda = 30, call.ldb = 20, call.ldc = 40;  // all row-major, op n
    const column_major_gemm g = as_column_major(call);
    EXPECT_EQ(g.rows, 6);
    EXPECT_EQ(g.cols, 5);
    EXPECT_EQ(g.ldz, 40);
    EXPECT_FALSE(g.trans_x);  // op(B)^T (n x k) is column-major with ld = ldb
    EXPECT_EQ(g.ldx, 20);
    EXPECT_FALSE(g.trans_y);
    EXPECT_EQ(g.ldy, 30);
    // A single-column operand gets the minimal legal ld: row-major n = 1 B has ldb 1.
    call.n = 1, call.ldb = 1, call.ldc = 1;
    const column_major_gemm v = as_column_major(call);
    EXPECT_EQ(cublas_refuses(v), "");
}

// Complex operands with every op (n, t, c) and layout: the mapped call, evaluated as a
// column-major BLAS applies N, T and C (conjugating where the flag says so), equals the reference;
// a conjugate that is not transposed (op c on an operand stored in C's other layout), which cuBLAS
// and CLBlast cannot express, is sent to the tiled kernel instead. On real data op c maps as op t.
TEST(blas_mapping, ComplexOpsMapToNTOrCAndTheRestRunsTiled) {
    using z = std::complex<double>;
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u(-1, 1);
    const op ops[] = {op::n, op::t, op::c};
    int expressible = 0, tiled = 0;
    for (op oa : ops)
        for (op ob : ops)
            for (int lay = 0; lay < 8; ++lay)
                for (index_t pad : {index_t(0), index_t(3)}) {
                    const index_t m = 5, n = 3, k = 4;
                    const layout la = lay & 1 ? layout::col_major : layout::row_major;
                    const layout lb = lay & 2 ? layout::col_major : layout::row_major;
                    const layout lc = lay & 4 ? layout::col_major : layout::row_major;
                    gemm_call call;
                    call.type = dtype::c64;
                    call.op_a = oa, call.op_b = ob, call.m = m, call.n = n, call.k = k;
                    call.alpha = z(1.5, -0.5), call.beta = z(0.25, 1);
                    call.layout_a = la, call.layout_b = lb, call.layout_c = lc;
                    const operand_desc da = call.a_desc(), db = call.b_desc();
                    call.lda = (la == layout::row_major ? da.stored_cols() : da.stored_rows()) + pad;
                    call.ldb = (lb == layout::row_major ? db.stored_cols() : db.stored_rows()) + pad;
                    call.ldc = (lc == layout::row_major ? n : m) + pad;
                    std::vector<z> a(std::size_t(call.lda * 8)), b(std::size_t(call.ldb * 8)), c(std::size_t(call.ldc * 8));
                    for (auto* v : {&a, &b, &c})
                        for (z& e : *v) e = z(u(rng), u(rng));
                    call.a = a.data(), call.b = b.data();
                    std::vector<z> want = c, got = c;
                    call.c = want.data();
                    reference::gemm(call);
                    call.c = got.data();
                    call.kernel = gemm_kernel::vendor;
                    const column_major_gemm g = as_column_major(call);
                    if (!g.expressible()) {
                        ++tiled;
                        EXPECT_EQ(cuda::kernel_for_call(call), gemm_kernel::tiled);
                        continue;
                    }
                    ++expressible;
                    EXPECT_EQ(cuda::kernel_for_call(call), gemm_kernel::vendor);
                    EXPECT_EQ(column_major_gemm_violation(g), "");
                    const auto* x = static_cast<const z*>(g.x);
                    const auto* y = static_cast<const z*>(g.y);
                    auto* out = static_cast<z*>(g.z);
                    for (index_t j = 0; j < g.cols; ++j)
                        for (index_t i = 0; i < g.rows; ++i) {
                            z acc = 0;
                            for (index_t p = 0; p < g.k; ++p) {
                                z xe = g.trans_x ? x[p + i * g.ldx] : x[i + p * g.ldx];
                                z ye = g.trans_y ? y[j + p * g.ldy] : y[p + j * g.ldy];
                                if (g.conj_x) xe = std::conj(xe);
                                if (g.conj_y) ye = std::conj(ye);
                                acc += xe * ye;
                            }
                            z& e = out[i + j * g.ldz];
                            e = call.alpha * acc + call.beta * e;
                        }
                    for (std::size_t q = 0; q < got.size(); ++q)
                        ASSERT_LE(std::abs(got[q] - want[q]), 1e-13)
                            << to_string(oa) << to_string(ob) << " layouts " << lay << " element " << q;
                }
    EXPECT_GT(expressible, 0);
    EXPECT_GT(tiled, 0);
    // Real data: op c is op t, never a conjugate.
    gemm_call real;
    real.type = dtype::f64;
    real.op_a = real.op_b = op::c;
    real.m = real.n = real.k = 3;
    real.lda = real.ldb = real.ldc = 3;
    real.layout_a = layout::col_major;
    const column_major_gemm g = as_column_major(real);
    EXPECT_TRUE(g.expressible());
    EXPECT_FALSE(g.conj_x || g.conj_y);
}

TEST(blas_mapping, ViolationsNameTheArgument) {
    column_major_gemm g;
    g.rows = 3, g.cols = 2, g.k = 4, g.ldx = 3, g.ldy = 4, g.ldz = 3;
    EXPECT_EQ(column_major_gemm_violation(g), "");
    g.trans_x = true;  // a transposed X is k x rows: ld >= k = 4
    EXPECT_TRUE(contains(column_major_gemm_violation(g), "ldx = 3 is below 4")) << column_major_gemm_violation(g);
    g.trans_x = false, g.ldz = 2;
    EXPECT_TRUE(contains(column_major_gemm_violation(g), "ldz")) << column_major_gemm_violation(g);
}

// ------------------------------------------------------------------ discovery messages

TEST(cuda_logic, UnusableCudaIsOneLineSayingWhy) {
    using f = cuda::cuda_count_failure;
    EXPECT_EQ(cuda::cuda_version_string(13000), "13.0");
    EXPECT_EQ(cuda::cuda_version_string(12040), "12.4");
    EXPECT_EQ(cuda::cuda_failure_text(f::no_device, 13000, 13000, "no CUDA-capable device"),
              "no CUDA GPU present (driver 13.0, runtime 13.0)");
    EXPECT_EQ(cuda::cuda_failure_text(f::other, 0, 13000, "x"), "no CUDA driver found (runtime 13.0)");
    EXPECT_EQ(cuda::cuda_failure_text(f::insufficient_driver, 12040, 13000, "x"),
              "CUDA driver 12.4 is older than the runtime 13.0");
    EXPECT_EQ(cuda::cuda_failure_text(f::other, 13000, 13000, "initialization error"),
              "CUDA unusable: cudaGetDeviceCount failed: initialization error (driver 13.0, runtime 13.0)");
}

// ------------------------------------------------------------------ budgets and slices

TEST(cuda_logic, DefaultBudgetKeepsASmallReserve) {
    const std::size_t mib = std::size_t(1) << 20, gib = mib << 10;
    EXPECT_EQ(cuda::default_budget(80 * gib), 80 * gib - (256 * mib + 80 * gib / 100));
    EXPECT_EQ(cuda::default_budget(400 * mib), 300 * mib);  // never more than a quarter
    EXPECT_EQ(cuda::default_budget(0), 0u);
    for (std::size_t share : {mib, 3 * gib, 141 * gib}) {
        EXPECT_LT(cuda::default_budget(share), share);
        EXPECT_GE(cuda::default_budget(share), share - share / 4);
    }
}

TEST(cuda_logic, SlicesShareTheGpuAndBudgetsAreChecked) {
    const std::size_t gib = std::size_t(1) << 30;
    const auto whole = cuda::split_gpu_memory(0, 0, 1, 80 * gib, 79 * gib, std::nullopt);
    EXPECT_EQ(whole.memory_bytes, 80 * gib);
    EXPECT_EQ(whole.memory_free, 79 * gib);
    EXPECT_EQ(whole.budget_bytes, cuda::default_budget(79 * gib));
    const auto third = cuda::split_gpu_memory(1, 2, 3, 81 * gib, 78 * gib, std::nullopt);
    EXPECT_EQ(third.memory_bytes, 27 * gib);
    EXPECT_EQ(third.memory_free, 26 * gib);
    EXPECT_EQ(third.budget_bytes, cuda::default_budget(26 * gib));
    EXPECT_EQ(cuda::split_gpu_memory(0, 1, 2, 8 * gib, 8 * gib, 4 * gib).budget_bytes, 4 * gib);
    try {
        cuda::split_gpu_memory(0, 1, 2, 8 * gib, 6 * gib, 4 * gib);
        FAIL() << "a budget above the slice's share was accepted";
    } catch (const invalid_argument& e) {
        EXPECT_TRUE(contains(e.what(), "cuda:0.1")) << e.what();
        EXPECT_TRUE(contains(e.what(), "exceeds")) << e.what();
    }
    EXPECT_EQ(cuda::logical_device_id(3, 0, 1), "cuda:3");
    EXPECT_EQ(cuda::logical_device_id(3, 1, 4), "cuda:3.1");
    EXPECT_THROW(cuda::check_slice_request(0, 2, 2), invalid_argument);
    EXPECT_THROW(cuda::check_slice_request(0, 0, 0), invalid_argument);
    EXPECT_THROW(cuda::check_slice_request(0, -1, 2), invalid_argument);
    EXPECT_THROW(cuda::check_slice_request(-1, 0, 1), invalid_argument);
    EXPECT_NO_THROW(cuda::check_slice_request(2, 3, 4));
    EXPECT_EQ(cuda::missing_gpu_reason(1, 2), "");
    EXPECT_EQ(cuda::missing_gpu_reason(2, 2), "2 CUDA GPUs present");
    EXPECT_EQ(cuda::missing_gpu_reason(1, 1), "1 CUDA GPU present");
    EXPECT_EQ(cuda::missing_gpu_reason(0, 0), "no CUDA GPU present");
}

// ------------------------------------------------------------------ pinning

TEST(cuda_logic, ReadOnlyMemoryIsNeverPinnedAndSaysWhy) {
    const auto writable = cuda::choose_host_registration(false, false);
    EXPECT_TRUE(writable.pin);
    EXPECT_EQ(writable.flags, unsigned(cuda::host_register_portable));
    // Read-only memory is never pinned (cudaHostRegisterReadOnly hung on an H200), with a reason.
    const auto ro = cuda::choose_host_registration(true, true);
    EXPECT_FALSE(ro.pin);
    EXPECT_TRUE(contains(ro.reason, "read-only")) << ro.reason;
    EXPECT_TRUE(contains(ro.reason, "hung")) << ro.reason;
    const auto refused = cuda::choose_host_registration(true, false);
    EXPECT_FALSE(refused.pin);
    EXPECT_TRUE(contains(refused.reason, "read-only")) << refused.reason;
    // CUDA's values (cudaHostRegisterPortable, cudaHostRegisterReadOnly).
    EXPECT_EQ(unsigned(cuda::host_register_portable), 1u);
    EXPECT_EQ(unsigned(cuda::host_register_read_only), 8u);
}

TEST(cuda_logic, ProcMapsTellReadOnlyRanges) {
    const std::string maps =
        "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/prog\n"
        "7f0000000000-7f0000100000 r--p 00000000 08:02 42 /data/a.npy\n"
        "7f0000100000-7f0000200000 rw-p 00000000 00:00 0 \n"
        "garbage line\n"
        "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]";
    EXPECT_TRUE(cuda::maps_read_only(maps, 0x7f0000000000, 0x7f0000000100));
    EXPECT_FALSE(cuda::maps_read_only(maps, 0x7f0000100000, 0x7f0000200000));
    // A range reaching into a read-only mapping is read-only for the device.
    EXPECT_TRUE(cuda::maps_read_only(maps, 0x7f00000ff000, 0x7f0000101000));
    EXPECT_FALSE(cuda::maps_read_only(maps, 0x7ffc00000010, 0x7ffc00000020));
    EXPECT_FALSE(cuda::maps_read_only(maps, 0x10, 0x20)) << "unmapped is not read-only";
}

TEST(cuda_logic, ThisProcessesReadOnlyMappingIsSeen) {
    const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
    void* ro = mmap(nullptr, 4 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(ro, MAP_FAILED);
    std::vector<double> heap(1000, 1.0);
    EXPECT_TRUE(cuda::host_range_read_only(ro, 4 * page));
    EXPECT_TRUE(cuda::host_range_read_only(static_cast<char*>(ro) + page, 10));
    EXPECT_FALSE(cuda::host_range_read_only(heap.data(), heap.size() * sizeof(double)));
    munmap(ro, 4 * page);
}

// ------------------------------------------------------------------ peer access

TEST(cuda_logic, RefusedPeerAccessFallsBackToHostStaging) {
    using s = cuda::peer_enable_status;
    EXPECT_TRUE(cuda::use_peer_path(true, s::enabled));
    EXPECT_TRUE(cuda::use_peer_path(true, s::already_enabled));
    EXPECT_FALSE(cuda::use_peer_path(true, s::refused)) << "e.g. too many peers";
    EXPECT_FALSE(cuda::use_peer_path(true, s::context_lost));
    EXPECT_FALSE(cuda::use_peer_path(false, s::enabled));
}

// ------------------------------------------------------------------ argument checks

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const invalid_argument& e) {
        return e.what();
    }
    return {};
}

TEST(cuda_logic, GemmCallsAreCheckedBeforeAnyLaunch) {
    double x[64] = {1};
    gemm_call g;
    g.m = 4, g.n = 3, g.k = 2, g.a = g.b = g.c = x;
    g.lda = 2, g.ldb = 3, g.ldc = 3;  // row-major, op n: minimal
    EXPECT_EQ(cuda::check_gemm_call(g, "cuda:0"), cuda::gemm_work::product);
    g.alpha = 0;
    EXPECT_EQ(cuda::check_gemm_call(g, "cuda:0"), cuda::gemm_work::scale_c);
    g.a = nullptr;  // never read when alpha == 0
    EXPECT_EQ(cuda::check_gemm_call(g, "cuda:0"), cuda::gemm_work::scale_c);
    g.alpha = 1;
    EXPECT_TRUE(contains(error_of([&] { cuda::check_gemm_call(g, "cuda:1"); }), "cuda:1: A is null"));
    g.a = x, g.k = 0;
    EXPECT_EQ(cuda::check_gemm_call(g, "cuda:0"), cuda::gemm_work::scale_c);
    g.k = 2, g.m = 0, g.c = nullptr;
    EXPECT_EQ(cuda::check_gemm_call(g, "cuda:0"), cuda::gemm_work::none);
    g.m = 4, g.c = x, g.ldb = 2;
    const std::string e = error_of([&] { cuda::check_gemm_call(g, "cuda:0.1"); });
    EXPECT_TRUE(contains(e, "leading dimension 2 of B is too small for a 2x3 row-major matrix (needs at least 3)")) << e;
    g.ldb = 3, g.op_b = op::t, g.layout_b = layout::col_major;  // stored 3x2 column-major: ld >= 3
    EXPECT_EQ(cuda::check_gemm_call(g, "cuda:0"), cuda::gemm_work::product);
    g.kernel = gemm_kernel::reference;
    EXPECT_TRUE(contains(error_of([&] { cuda::check_gemm_call(g, "cuda:0"); }), "host only"));
    g.kernel = gemm_kernel::tiled, g.n = -1;
    EXPECT_TRUE(contains(error_of([&] { cuda::check_gemm_call(g, "cuda:0"); }), "negative size 4x-1x2"));
}

TEST(cuda_logic, JacobiCallsNeedAHaloAndTwoBuffers) {
    float in[4], out[4];
    jacobi_call j;
    j.in = in, j.out = out, j.ld = 64;
    j.row_begin = 1, j.row_end = 10, j.col_begin = 1, j.col_end = 63;
    EXPECT_TRUE(cuda::check_jacobi_call(j, "cuda:0"));
    j.col_end = 1;
    EXPECT_FALSE(cuda::check_jacobi_call(j, "cuda:0")) << "no points";
    j.col_end = 0;
    EXPECT_TRUE(contains(error_of([&] { cuda::check_jacobi_call(j, "cuda:0"); }), "reversed"));
    j.col_end = 64;
    EXPECT_TRUE(contains(error_of([&] { cuda::check_jacobi_call(j, "cuda:2"); }), "cuda:2: the swept points"));
    j.col_end = 63, j.row_begin = 0;
    EXPECT_TRUE(contains(error_of([&] { cuda::check_jacobi_call(j, "cuda:0"); }), "halo"));
    j.row_begin = 1, j.out = in;
    EXPECT_TRUE(contains(error_of([&] { cuda::check_jacobi_call(j, "cuda:0"); }), "distinct"));
}

TEST(cuda_logic, TwoDimensionalCopiesTakeTheCheapestRoute) {
    char buf[16];
    using route = cuda::copy_2d_route;
    const auto plan = [&](std::size_t dst_pitch, std::size_t src_pitch, std::size_t width,
                          std::size_t height, std::size_t max_pitch) {
        return cuda::plan_copy_2d({buf, dst_pitch, buf, src_pitch, width, height}, max_pitch, "copy");
    };
    EXPECT_EQ(plan(64, 64, 0, 5, 1024), route::nothing);
    EXPECT_EQ(plan(64, 64, 8, 0, 1024), route::nothing);
    EXPECT_EQ(plan(0, 0, 40, 1, 1024), route::one_copy) << "one row: pitches unused";
    EXPECT_EQ(plan(40, 40, 40, 7, 1024), route::one_copy) << "rows back to back";
    EXPECT_EQ(plan(64, 40, 40, 7, 1024), route::pitched);
    EXPECT_EQ(plan(2048, 40, 40, 7, 1024), route::row_by_row) << "pitch above cudaMemcpy2D's limit";
    const std::string e = error_of([&] { plan(32, 64, 40, 2, 1024); });
    EXPECT_TRUE(contains(e, "copy: rows of 40 bytes do not fit pitches of 64 (source) and 32 (destination)")) << e;
}

// ------------------------------------------------------------------ launch configurations

TEST(cuda_logic, GridStrideLoopsFillTheGpuWithinLimits) {
    EXPECT_EQ(cuda::grid_stride_blocks(0), 1u);
    EXPECT_EQ(cuda::grid_stride_blocks(1), 1u);
    EXPECT_EQ(cuda::grid_stride_blocks(256), 1u);
    EXPECT_EQ(cuda::grid_stride_blocks(257), 2u);
    EXPECT_EQ(cuda::grid_stride_blocks(index_t(1) << 40), 1u << 20);
}

gemm_call aligned_call(dtype t, index_t m, index_t n, index_t k, const void* base) {
    gemm_call c;
    c.type = t, c.m = m, c.n = n, c.k = k;
    c.a = c.b = base, c.c = const_cast<void*>(base);
    c.lda = k, c.ldb = n, c.ldc = n;  // all row-major
    return c;
}

TEST(cuda_logic, TiledLaunchPicksVectorLoadsOnlyWhenAlignedAndWhole) {
    alignas(16) static double storage[4];
    const char* base = reinterpret_cast<const char*>(storage);
    // f32: tiles of 128, vectors of 4 floats.
    auto l = cuda::plan_tiled_launch(aligned_call(dtype::f32, 257, 131, 64, base));
    EXPECT_EQ(l.error, "");
    EXPECT_EQ(l.blocks, 3u * 2u);
    EXPECT_TRUE(l.a_k_contiguous);   // row-major A, op n: unit stride along k
    EXPECT_FALSE(l.b_k_contiguous);  // row-major B: unit stride along n
    EXPECT_TRUE(l.c_row_major);
    EXPECT_FALSE(l.vector_ab) << "ldb 131 is not a multiple of 4";
    EXPECT_FALSE(l.vector_c);
    l = cuda::plan_tiled_launch(aligned_call(dtype::f32, 256, 128, 64, base));
    EXPECT_TRUE(l.vector_ab);
    EXPECT_TRUE(l.vector_c);
    EXPECT_EQ(l.blocks, 2u);
    l = cuda::plan_tiled_launch(aligned_call(dtype::f32, 256, 128, 64, base + 4));  // 4-byte offset
    EXPECT_FALSE(l.vector_ab);
    EXPECT_FALSE(l.vector_c);
    // f64: tiles of 64, vectors of 2 doubles; ld 130 is a multiple of 2.
    l = cuda::plan_tiled_launch(aligned_call(dtype::f64, 65, 130, 130, base));
    EXPECT_EQ(l.blocks, 2u * 3u);
    EXPECT_TRUE(l.vector_ab);
    // Column-major C, transposed A (col-major A^T: unit stride along k).
    gemm_call c = aligned_call(dtype::f32, 10, 10, 10, base);
    c.layout_c = layout::col_major, c.op_a = op::t, c.layout_a = layout::col_major;
    l = cuda::plan_tiled_launch(c);
    EXPECT_FALSE(l.c_row_major);
    EXPECT_TRUE(l.a_k_contiguous);
    // Grids beyond CUDA's 2^31 - 1 blocks, or beyond the kernel's int block order, are refused.
    l = cuda::plan_tiled_launch(aligned_call(dtype::f32, index_t(1) << 20, index_t(1) << 20, 1, base));
    EXPECT_EQ(l.blocks, 8192u * 8192u);
    l = cuda::plan_tiled_launch(aligned_call(dtype::f32, index_t(1) << 26, index_t(1) << 20, 1, base));
    EXPECT_TRUE(contains(l.error, "exceeds")) << "2^19 x 2^13 tiles";
    l = cuda::plan_tiled_launch(aligned_call(dtype::f32, 128, index_t(1) << 35, 1, base));
    EXPECT_TRUE(contains(l.error, "exceeds")) << "one tile row, 2^28 tile columns: 8x overflows int";
}

TEST(cuda_logic, JacobiLaunchCoversTheRangeInVectorGroups) {
    alignas(16) static float storage[8];
    jacobi_call j;
    j.type = dtype::f32, j.in = storage, j.out = storage + 4, j.ld = 136;
    j.row_begin = 1, j.row_end = 69, j.col_begin = 1, j.col_end = 129;
    auto l = cuda::plan_jacobi_launch(j);
    EXPECT_EQ(l.error, "");
    EXPECT_EQ(l.first_group, 0);
    EXPECT_EQ(l.groups, 33);  // columns 1..128 touch groups 0..32
    EXPECT_EQ(l.grid_x, 2u);
    EXPECT_EQ(l.grid_y, 9u);  // 68 rows in blocks of 8
    EXPECT_TRUE(l.vector);
    j.ld = 133;
    EXPECT_FALSE(cuda::plan_jacobi_launch(j).vector);
    j.type = dtype::f64, j.ld = 134, j.col_begin = 6, j.col_end = 7;
    l = cuda::plan_jacobi_launch(j);
    EXPECT_EQ(l.first_group, 3);
    EXPECT_EQ(l.groups, 1);
    EXPECT_TRUE(l.vector);
    j.row_end = 1 + (index_t(1) << 22);  // rows beyond 65535 blocks of 8: a grid-stride loop
    EXPECT_EQ(cuda::plan_jacobi_launch(j).grid_y, 65535u);
    j.col_begin = 1, j.col_end = (index_t(1) << 40);  // 2^34 blocks of columns
    EXPECT_TRUE(contains(cuda::plan_jacobi_launch(j).error, "exceeds"));
}

// ------------------------------------------------------------------ duplicate devices

std::vector<device_info> gpus(std::initializer_list<int> ordinals) {
    std::vector<device_info> out;
    for (int o : ordinals) {
        device_info g;
        g.id = "cuda:" + std::to_string(o);
        g.kind = device_kind::cuda;
        g.physical_index = o;
        out.push_back(g);
    }
    return out;
}

std::string duplicate_error(const std::string& spec, const std::vector<device_info>& present) {
    try {
        check_distinct_devices(parse_device_spec(spec), present);
    } catch (const invalid_argument& e) {
        return e.what();
    }
    return {};
}

TEST(device_identity, TheSameGpuTwiceIsAClearError) {
    const auto two = gpus({0, 1});
    for (const char* spec : {"cuda:0,cuda:0", "all,cuda:0x2", "cuda:1x2,cuda:1", "all,all",
                             "cuda:0@1GiB,cpu,cuda:0@2GiB"}) {
        const std::string e = duplicate_error(spec, two);
        EXPECT_TRUE(contains(e, "twice")) << spec << ": " << e;
        EXPECT_TRUE(contains(e, "cuda:")) << spec << ": " << e;
    }
    const std::string e = duplicate_error("cuda:0, cuda:1, cuda:0x2", two);
    EXPECT_TRUE(contains(e, "opens cuda:0 twice (items 'cuda:0' and 'cuda:0x2')")) << e;
    EXPECT_TRUE(contains(e, "cuda:0xK")) << e;
    for (const char* spec : {"cuda:0,cuda:1", "cuda:0x4", "all", "all,cpu", "cpu,cpu", "cpu:3,cpu@8KiB",
                             "cuda:1,cpu:2,cuda:0x2"})
        EXPECT_EQ(duplicate_error(spec, two), "") << spec;
}

TEST(device_identity, GpusAreFoundByOrdinalNotPosition) {
    // Discovery left cuda:1 out: cuda:2 is the second entry.
    const auto present = gpus({0, 2});
    ASSERT_NE(find_gpu(present, 2), nullptr);
    EXPECT_EQ(find_gpu(present, 2)->id, "cuda:2");
    EXPECT_EQ(find_gpu(present, 1), nullptr);
    EXPECT_EQ(find_gpu(present, 3), nullptr);
    // "all" opens the GPUs discovered, by ordinal.
    EXPECT_TRUE(contains(duplicate_error("all,cuda:2", present), "opens cuda:2 twice"));
    EXPECT_EQ(duplicate_error("all,cuda:1", present), "") << "cuda:1 is unknown, not a duplicate";
}

TEST(device_identity, CpuDevicesOfASpecSplitTheHostTogether) {
    EXPECT_EQ(count_cpu_devices(parse_device_spec("cpu")), 1);
    EXPECT_EQ(count_cpu_devices(parse_device_spec("cpu,cpu")), 2);
    EXPECT_EQ(count_cpu_devices(parse_device_spec("cpu:3,cpu@8KiB")), 4);
    EXPECT_EQ(count_cpu_devices(parse_device_spec("all,cpu:2")), 3);
    EXPECT_EQ(count_cpu_devices(parse_device_spec("cuda:0")), 0);
    // Opened: two CPU items share the cores like cpu:2 does, not two full sets of threads.
    const int cores = inventory().cpu_cores;
    auto devs = open_devices("cpu,cpu");
    ASSERT_EQ(devs.size(), 2u);
    EXPECT_EQ(devs[0]->id(), "cpu:0");
    EXPECT_EQ(devs[1]->id(), "cpu:1");
    EXPECT_EQ(devs[0]->info().threads + devs[1]->info().threads, std::max(cores, 2));
    EXPECT_EQ(devs[0]->info().memory_bytes, inventory().host_memory / 2);
}

TEST(device_identity, OpenDevicesRejectsTheSameGpuTwice) {
    // Checked before any device is opened, so also where no GPU is present.
    const auto& inv = inventory();
    const std::string gpu = inv.gpus.empty() ? "cuda:0" : inv.gpus.front().id;
    try {
        open_devices(gpu + "," + gpu);
        FAIL() << "no error";
    } catch (const invalid_argument& e) {
        EXPECT_TRUE(contains(e.what(), "opens " + gpu + " twice")) << e.what();
    }
}

TEST(device_identity, TheSameOpenCLDeviceTwiceIsAClearError) {
    // Checked before any device is opened, whatever OpenCL devices are present.
    for (const char* spec : {"opencl:0,opencl:0", "opencl:0x2,cpu,opencl:0@1MiB"}) {
        try {
            open_devices(spec);
            FAIL() << "no error for " << spec;
        } catch (const invalid_argument& e) {
            EXPECT_TRUE(contains(e.what(), "opens opencl:0 twice")) << e.what();
        }
    }
}

}  // namespace
}  // namespace tilestream
