// The AVX-512F GEMM micro-kernels (32 zmm registers): f32 12x32 and f64 8x24, 24 accumulators each.
#include "cpu_isa.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

// Everything below is compiled for AVX-512F; the library itself stays baseline x86-64.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

namespace tilestream::cpu {
namespace {

struct avx512_f32 {
    using value = float;
    using reg = __m512;
    static constexpr int width = 16;
    static reg zero() { return _mm512_setzero_ps(); }
    static reg load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, reg r) { _mm512_storeu_ps(p, r); }
    static void stream(float* p, reg r) { _mm512_stream_ps(p, r); }  // p on a vector boundary
    static void fence() { _mm_sfence(); }
    static reg broadcast(const float* p) { return _mm512_set1_ps(*p); }
    static reg mul(reg x, reg y) { return _mm512_mul_ps(x, y); }
    static reg fma(reg x, reg y, reg z) { return _mm512_fmadd_ps(x, y, z); }
    static reg load_part(const float* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p); }
    static void store_part(float* p, reg r, int n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), r); }
};

struct avx512_f64 {
    using value = double;
    using reg = __m512d;
    static constexpr int width = 8;
    static reg zero() { return _mm512_setzero_pd(); }
    static reg load(const double* p) { return _mm512_loadu_pd(p); }
    static void store(double* p, reg r) { _mm512_storeu_pd(p, r); }
    static void stream(double* p, reg r) { _mm512_stream_pd(p, r); }
    static void fence() { _mm_sfence(); }  // streamed stores before what follows
    static reg broadcast(const double* p) { return _mm512_set1_pd(*p); }
    static reg mul(reg x, reg y) { return _mm512_mul_pd(x, y); }
    static reg fma(reg x, reg y, reg z) { return _mm512_fmadd_pd(x, y, z); }
    static reg load_part(const double* p, int n) { return _mm512_maskz_loadu_pd(__mmask8((1u << n) - 1), p); }
    static void store_part(double* p, reg r, int n) { _mm512_mask_storeu_pd(p, __mmask8((1u << n) - 1), r); }
};

}  // namespace
}  // namespace tilestream::cpu

#include "gemm_micro_kernel.hpp"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace tilestream::cpu {
namespace {
// The register tiles measured fastest on Zen 5 before the registry existed: f32 12x32, f64 8x24.
// Cache shares re-measured on Zen 4 (32 KiB L1, 1 MiB L2; one thread, CPU time against OpenBLAS's
// Cooperlake kernels at 2048^3, 2026-11-26): a B micro-panel of three L1s (KC 768 f32 / 512 f64,
// streamed from L2) and an A block filling L2 ran f32 1.07x, f64 0.96x, c32 1.02x and c64 1.00x of
// OpenBLAS, against 0.96x, 0.88x, 0.92x and 0.92x with the old shares (one L1, an eighth of L2):
// with 24 accumulators the L2 stream keeps up, and each k-block costs a pass over C.
// Intel's cores run AVX-512 on full-width units and took shorter blocks: on an Emerald Rapids VM
// (Xeon model 207, 48 KiB L1, 2 MiB L2, 2 threads, OpenBLAS's SkylakeX kernels as the anchor,
// 2048^3, alternating, 2026-11-26) a B micro-panel of 1.5 L1s and an A block of half of L2 (KC 576
// f32 / 384 f64, MC 444 / 336) ran f64 0.91-0.93x against 0.83-0.88x with the Zen 4 shares (KC 1024
// / 768, MC 504 / 336), f32 0.97-0.99x against 0.96x; c32 and c64 within the noise (0.85-0.88x).
constexpr int mr_f32 = 12, nv_f32 = 2, mr_f64 = 8, nv_f64 = 3;
}  // namespace

constinit const isa_config avx512_config{
    isa::avx512,
    &micro::kernel<avx512_f32, mr_f32, nv_f32>, mr_f32, nv_f32 * avx512_f32::width,
    &micro::kernel<avx512_f64, mr_f64, nv_f64>, mr_f64, nv_f64 * avx512_f64::width,
    /*l1_share_f32=*/3.0, /*l1_share_f64=*/3.0, /*l2_share=*/1.0, /*l3_share=*/0.5,
    4 * avx512_f32::width, 4 * avx512_f64::width,
    &micro::stack_kernel<avx512_f32>, &micro::stack_kernel<avx512_f64>,
    /*intel_l1_share=*/1.5, /*intel_l2_share=*/0.5};

}  // namespace tilestream::cpu
#endif
