// HER2K against the reference (c32, c64; complex alpha, real beta): both triangles, trans n and c,
// layouts, beta = 0 (C's triangle NaN-poisoned) and not, alpha = 0; the other triangle of C must
// stay untouched. In place on one and three CPU devices, out of core, on OpenCL.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_complex_option;

TEST(Her2k, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_complex_option(ctx, blas3_routine::her2k, 0, 43, 29, {}, true, 0.75, 0.0);
    every_complex_option(ctx, blas3_routine::her2k, 0, 31, 50, {}, false, -0.5, 1.5);
}

TEST(Her2k, OutOfCoreAndTilesOnThreeDevicesMatchReference) {
    blas3_call_options call;
    call.tile = 16;
    call.tile_k = 20;
    for (const char* spec : {"cpu:3", "cpu:3@48KiB"}) {
        context ctx(spec);
        every_complex_option(ctx, blas3_routine::her2k, 0, 49, 35, call, false, 0.75, 0.0);
        every_complex_option(ctx, blas3_routine::her2k, 0, 42, 27, {}, false, 0.75, -1.0);
    }
}

TEST(Her2k, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    context ctx("opencl:0@256KiB");
    blas3_call_options call;
    call.tile = 24;
    every_complex_option(ctx, blas3_routine::her2k, 0, 46, 31, call, false, 0.75, 2.0);
}

TEST(Her2k, AlphaZeroScalesTheTriangleOnly) {
    for (const char* spec : {"cpu", "cpu:2@64KiB"}) {
        context ctx(spec);
        every_complex_option(ctx, blas3_routine::her2k, 0, 33, 20, {}, false, 0.0, 0.5);
        every_complex_option(ctx, blas3_routine::her2k, 0, 33, 20, {}, false, 0.0, 0.0);
    }
}

}  // namespace
}  // namespace tilestream
