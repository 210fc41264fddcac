// HEMM against the reference (c32, c64, complex scalars, both parts of every element non-zero):
// both sides and triangles (the other one NaN, the diagonal's imaginary parts never read), layouts,
// beta = 0 (C NaN-poisoned) and not, alpha = 0; in place on one and three CPU devices, out of
// core, on OpenCL.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_complex_option;

TEST(Hemm, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_complex_option(ctx, blas3_routine::hemm, 45, 38, 0, {}, true, 0.75, 0.0);
    every_complex_option(ctx, blas3_routine::hemm, 29, 51, 0, {}, false, -1.25, 0.5);
}

TEST(Hemm, OutOfCoreAndTilesOnThreeDevicesMatchReference) {
    blas3_call_options call;
    call.tile = 16;
    call.tile_free = 20;
    for (const char* spec : {"cpu:3", "cpu:3@48KiB"}) {
        context ctx(spec);
        every_complex_option(ctx, blas3_routine::hemm, 53, 37, 0, call, false, 0.75, 0.0);
        every_complex_option(ctx, blas3_routine::hemm, 41, 50, 0, {}, false, 0.5, 2.0);
    }
}

TEST(Hemm, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    context ctx("opencl:0@256KiB");
    blas3_call_options call;
    call.tile = 24;
    every_complex_option(ctx, blas3_routine::hemm, 40, 53, 0, call, false, 0.75, 1.5);
}

TEST(Hemm, AlphaZeroScalesCWithoutReadingAB) {
    for (const char* spec : {"cpu", "cpu:2@64KiB"}) {
        context ctx(spec);
        every_complex_option(ctx, blas3_routine::hemm, 22, 17, 0, {}, false, 0.0, 0.5);
        every_complex_option(ctx, blas3_routine::hemm, 22, 17, 0, {}, false, 0.0, 0.0);
    }
}

}  // namespace
}  // namespace tilestream
