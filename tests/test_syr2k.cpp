// SYR2K against the reference: both triangles and transposes, layouts, f32 and f64, beta = 0 (C's
// triangle NaN-poisoned) and not, alpha = 0; the other triangle of C must stay untouched. In place
// on one and three CPU devices, out of core, on OpenCL.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_option;

TEST(Syr2k, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_option(ctx, blas3_routine::syr2k, 0, 47, 36, {}, true, 0.75, 0.0);
    every_option(ctx, blas3_routine::syr2k, 0, 39, 61, {}, true, -0.5, 1.5);
}

TEST(Syr2k, TilesOnThreeDevicesMatchReference) {
    context ctx("cpu:3");
    blas3_call_options call;
    call.tile = 16;
    call.tile_k = 20;
    every_option(ctx, blas3_routine::syr2k, 0, 53, 41, call, false, 0.75, 0.0);
    every_option(ctx, blas3_routine::syr2k, 0, 53, 41, call, false, 0.75, 0.5);
}

TEST(Syr2k, ComplexInPlaceAndOutOfCoreMatchReference) {
    for (const char* spec : {"cpu", "cpu:3@64KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        if (std::string(spec) != "cpu") call.tile = 20;
        testing::every_complex_option(ctx, blas3_routine::syr2k, 0, 37, 31, call, false, 0.75, 0.0);
    }
}

TEST(Syr2k, OutOfCoreOnThreeDevicesMatchesReference) {
    context ctx("cpu:3", {.memory_budget = std::size_t(40) << 10});
    blas3_call_options call;
    call.tile = 20;
    call.tile_k = 16;
    every_option(ctx, blas3_routine::syr2k, 0, 59, 42, call, false, 0.75, 0.0);
    every_option(ctx, blas3_routine::syr2k, 0, 66, 31, {}, false, 0.75, -1.0);
}

TEST(Syr2k, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (gemm_kernel k : {gemm_kernel::tiled, gemm_kernel::vendor}) {
        context ctx("opencl:0@192KiB", {.kernel = k});
        blas3_call_options call;
        call.tile = 24;
        every_option(ctx, blas3_routine::syr2k, 0, 49, 33, call, false, 0.75, 0.0);
        every_option(ctx, blas3_routine::syr2k, 0, 49, 33, call, false, 0.75, 2.0);
    }
}

TEST(Syr2k, AlphaZeroScalesTheTriangleOnly) {
    for (const char* spec : {"cpu", "cpu:2@64KiB"}) {
        context ctx(spec);
        every_option(ctx, blas3_routine::syr2k, 0, 35, 20, {}, false, 0.0, 0.5);
        every_option(ctx, blas3_routine::syr2k, 0, 35, 20, {}, false, 0.0, 0.0);
    }
}

}  // namespace
}  // namespace tilestream
