// SYMM against the reference: both sides and triangles (the other one NaN, never read), layouts,
// f32 and f64, beta = 0 (C NaN-poisoned), beta != 0, alpha = 0; in place on one and three CPU
// devices, out of core, on OpenCL.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_option;

TEST(Symm, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_option(ctx, blas3_routine::symm, 61, 47, 0, {}, true, 0.75, 0.0);
    every_option(ctx, blas3_routine::symm, 33, 58, 0, {}, true, -1.25, 0.5);
}

TEST(Symm, TilesOnThreeDevicesMatchReference) {
    context ctx("cpu:3");
    blas3_call_options call;
    call.tile = 16;
    call.tile_free = 24;
    every_option(ctx, blas3_routine::symm, 57, 41, 0, call, false, 0.75, 0.0);
    every_option(ctx, blas3_routine::symm, 57, 41, 0, call, false, 0.75, 2.0);
}

TEST(Symm, ComplexInPlaceAndOutOfCoreMatchReference) {
    for (const char* spec : {"cpu", "cpu:3@64KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        if (std::string(spec) != "cpu") call.tile = 20;
        testing::every_complex_option(ctx, blas3_routine::symm, 39, 45, 0, call, false, 0.75, 0.0);
    }
}

TEST(Symm, OutOfCoreOnThreeDevicesMatchesReference) {
    context ctx("cpu:3", {.memory_budget = std::size_t(40) << 10});
    blas3_call_options call;
    call.tile = 20;
    call.tile_free = 24;
    every_option(ctx, blas3_routine::symm, 63, 49, 0, call, false, 0.75, 0.0);
    every_option(ctx, blas3_routine::symm, 50, 70, 0, {}, false, 0.75, -0.5);
}

TEST(Symm, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (gemm_kernel k : {gemm_kernel::tiled, gemm_kernel::vendor}) {
        context ctx("opencl:0@192KiB", {.kernel = k});
        blas3_call_options call;
        call.tile = 32;
        every_option(ctx, blas3_routine::symm, 45, 66, 0, call, false, 0.75, 0.0);
        every_option(ctx, blas3_routine::symm, 45, 66, 0, call, false, 0.75, 1.5);
    }
}

TEST(Symm, AlphaZeroScalesCWithoutReadingAB) {
    for (const char* spec : {"cpu", "cpu:2@64KiB"}) {
        context ctx(spec);
        every_option(ctx, blas3_routine::symm, 30, 21, 0, {}, false, 0.0, 0.5);
        every_option(ctx, blas3_routine::symm, 30, 21, 0, {}, false, 0.0, 0.0);
    }
}

}  // namespace
}  // namespace tilestream
