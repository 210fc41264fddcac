// HERK against the reference (c32, c64; real alpha and beta): both triangles, trans n and c,
// layouts, beta = 0 (C's triangle NaN-poisoned) and not, alpha = 0 and k = 0 (C scaled, its
// diagonal's imaginary parts zeroed); the other triangle of C must stay untouched. In place on one
// and three CPU devices, out of core, on OpenCL.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_complex_option;

TEST(Herk, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_complex_option(ctx, blas3_routine::herk, 0, 47, 31, {}, true, 0.75, 0.0);
    every_complex_option(ctx, blas3_routine::herk, 0, 33, 58, {}, false, -0.5, 1.5);
}

TEST(Herk, OutOfCoreAndTilesOnThreeDevicesMatchReference) {
    blas3_call_options call;
    call.tile = 16;
    call.tile_k = 20;
    for (const char* spec : {"cpu:3", "cpu:3@40KiB"}) {
        context ctx(spec);
        every_complex_option(ctx, blas3_routine::herk, 0, 51, 37, call, false, 0.75, 0.0);
        every_complex_option(ctx, blas3_routine::herk, 0, 44, 29, {}, false, 0.75, -1.0);
    }
}

TEST(Herk, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    context ctx("opencl:0@256KiB");
    blas3_call_options call;
    call.tile = 24;
    every_complex_option(ctx, blas3_routine::herk, 0, 50, 35, call, false, 0.75, 2.0);
}

TEST(Herk, AlphaZeroAndEmptyKScaleTheTriangleAndZeroTheDiagonalsImaginaryParts) {
    blas3_call_options call;
    call.tile = 16;
    for (const char* spec : {"cpu", "cpu:2@64KiB"}) {
        context ctx(spec);
        every_complex_option(ctx, blas3_routine::herk, 0, 37, 20, call, false, 0.0, 0.5);
        every_complex_option(ctx, blas3_routine::herk, 0, 37, 0, call, false, 0.75, -2.0);
    }
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    context ctx("opencl:0@128KiB");
    every_complex_option(ctx, blas3_routine::herk, 0, 30, 20, call, false, 0.0, 0.5);
}

}  // namespace
}  // namespace tilestream
