// SYRK against the reference: both triangles and transposes, layouts, f32 and f64, beta = 0 (C's
// triangle NaN-poisoned), beta != 0, alpha = 0, k = 0; the other triangle of C (a sentinel) must
// stay untouched. In place on one and three CPU devices, out of core, on OpenCL.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_option;

TEST(Syrk, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_option(ctx, blas3_routine::syrk, 0, 53, 39, {}, true, 0.75, 0.0);
    every_option(ctx, blas3_routine::syrk, 0, 41, 70, {}, true, -0.5, 1.5);
}

TEST(Syrk, TilesOnThreeDevicesMatchReference) {
    context ctx("cpu:3");
    blas3_call_options call;
    call.tile = 16;
    call.tile_k = 24;
    every_option(ctx, blas3_routine::syrk, 0, 57, 43, call, false, 0.75, 0.0);
    every_option(ctx, blas3_routine::syrk, 0, 57, 43, call, false, 0.75, 0.5);
}

TEST(Syrk, ComplexInPlaceAndOutOfCoreMatchReference) {
    for (const char* spec : {"cpu", "cpu:3@64KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        if (std::string(spec) != "cpu") call.tile = 20;
        testing::every_complex_option(ctx, blas3_routine::syrk, 0, 41, 33, call, false, 0.75, 0.5);
    }
}

TEST(Syrk, OutOfCoreOnThreeDevicesMatchesReference) {
    context ctx("cpu:3", {.memory_budget = std::size_t(40) << 10});
    blas3_call_options call;
    call.tile = 20;
    call.tile_k = 16;
    every_option(ctx, blas3_routine::syrk, 0, 61, 45, call, false, 0.75, 0.0);
    every_option(ctx, blas3_routine::syrk, 0, 70, 33, {}, false, 0.75, -1.0);
}

TEST(Syrk, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (gemm_kernel k : {gemm_kernel::tiled, gemm_kernel::vendor}) {
        context ctx("opencl:0@192KiB", {.kernel = k});
        blas3_call_options call;
        call.tile = 24;
        every_option(ctx, blas3_routine::syrk, 0, 50, 35, call, false, 0.75, 0.0);
        every_option(ctx, blas3_routine::syrk, 0, 50, 35, call, false, 0.75, 2.0);
    }
}

TEST(Syrk, AlphaZeroAndEmptyKScaleTheTriangleOnly) {
    for (const char* spec : {"cpu", "cpu:2", "cpu:2@64KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        call.tile = 16;
        every_option(ctx, blas3_routine::syrk, 0, 37, 20, call, false, 0.0, 0.5);
        every_option(ctx, blas3_routine::syrk, 0, 37, 20, call, false, 0.0, 0.0);
        every_option(ctx, blas3_routine::syrk, 0, 37, 0, call, false, 0.75, -2.0);
    }
}

}  // namespace
}  // namespace tilestream
