// The AVX2+FMA GEMM micro-kernels (16 ymm registers): f32 6x16 and f64 4x12, 12 accumulators each.
#include "cpu_isa.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

// Everything below is compiled for AVX2+FMA; the library itself stays baseline x86-64.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace tilestream::cpu {
namespace {

struct avx2_f32 {
    using value = float;
    using reg = __m256;
    static constexpr int width = 8;
    static reg zero() { return _mm256_setzero_ps(); }
    static reg load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, reg r) { _mm256_storeu_ps(p, r); }
    static void stream(float* p, reg r) { _mm256_stream_ps(p, r); }  // p on a vector boundary
    static void fence() { _mm_sfence(); }
    static reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
    static reg mul(reg x, reg y) { return _mm256_mul_ps(x, y); }
    static reg fma(reg x, reg y, reg z) { return _mm256_fmadd_ps(x, y, z); }
    static __m256i mask(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
    static reg load_part(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
    static void store_part(float* p, reg r, int n) { _mm256_maskstore_ps(p, mask(n), r); }
};

struct avx2_f64 {
    using value = double;
    using reg = __m256d;
    static constexpr int width = 4;
    static reg zero() { return _mm256_setzero_pd(); }
    static reg load(const double* p) { return _mm256_loadu_pd(p); }
    static void store(double* p, reg r) { _mm256_storeu_pd(p, r); }
    static void stream(double* p, reg r) { _mm256_stream_pd(p, r); }
    static void fence() { _mm_sfence(); }  // streamed stores before what follows
    static reg broadcast(const double* p) { return _mm256_broadcast_sd(p); }
    static reg mul(reg x, reg y) { return _mm256_mul_pd(x, y); }
    static reg fma(reg x, reg y, reg z) { return _mm256_fmadd_pd(x, y, z); }
    static __m256i mask(int n) { return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3)); }
    static reg load_part(const double* p, int n) { return _mm256_maskload_pd(p, mask(n)); }
    static void store_part(double* p, reg r, int n) { _mm256_maskstore_pd(p, mask(n), r); }
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
// f32: BLIS's Haswell/Zen register tile, 6x16. f64: 4x12 (also c64's, by the 1m method), not BLIS's
// 6x8: the same 12 accumulators fed by 7 loads a step instead of 8 (3 vectors of B, 4 broadcasts of
// A). On Zen 3 (2026-11-29, bench/results/tiled-avx2-4x12-ab-zen3-2026-11-29.json, ratios to OpenBLAS
// alternated, two workers, medians of 5 rounds; with the even MC and the row-wise packing of B) it
// took c64 2048^3 from 0.92 to 1.00, f64 from 0.96 to 0.97 (2048^3) and 0.99 to 1.02 (4096^3);
// one worker, f64 1536^3 1.00 -> 0.985 and c64 1200^3 0.91 -> 0.95. (Those two-worker runs split a
// square C by columns, an accident of the 12-wide tile since undone: see gemm_tiled_typed.)
// An A block filling L2 (MC 510/252 at 512 KiB for f32/f64 with 6x8 then; 256 with 4x12) measured
// 3-5% faster on Zen 3 than half of it (BLIS's rule), and again on Zen 4. The B micro-panel: all of
// L1 for f32 (KC 512: f32 1.01x, c32 0.97x of OpenBLAS's Haswell kernels against 0.98x, 0.94x at KC
// 256, Zen 4, one thread), three quarters of it for f64 (KC 256 with the 12-wide panel; half of L1,
// KC 168, was slower in 5 of the 6 rows, up to 8% for c64 2048^3).
constexpr int mr_f32 = 6, nv_f32 = 2, mr_f64 = 4, nv_f64 = 3;
}  // namespace

constinit const isa_config avx2_config{isa::avx2,
                             &micro::kernel<avx2_f32, mr_f32, nv_f32>, mr_f32, nv_f32 * avx2_f32::width,
                             &micro::kernel<avx2_f64, mr_f64, nv_f64>, mr_f64, nv_f64 * avx2_f64::width,
                             /*l1_share_f32=*/1.0, /*l1_share_f64=*/0.75, /*l2_share=*/1.0, /*l3_share=*/0.5,
    4 * avx2_f32::width, 4 * avx2_f64::width,
    &micro::stack_kernel<avx2_f32>, &micro::stack_kernel<avx2_f64>};

}  // namespace tilestream::cpu
#endif
