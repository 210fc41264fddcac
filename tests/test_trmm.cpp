// TRMM against the reference: every side, uplo, trans and diag, layouts, f32 and f64, odd sizes;
// in place on one and three CPU devices, out of core (a chain of in-place tile tasks per column
// of tiles), on OpenCL, alpha = 0.
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_option;

TEST(Trmm, EveryOptionInPlaceMatchesReference) {
    context ctx("cpu");
    every_option(ctx, blas3_routine::trmm, 59, 44, 0, {}, true);
}

TEST(Trmm, TilesOnThreeDevicesMatchReference) {
    context ctx("cpu:3");
    blas3_call_options call;
    call.tile = 16;
    call.tile_free = 20;
    every_option(ctx, blas3_routine::trmm, 51, 67, 0, call, false);
}

TEST(Trmm, ComplexInPlaceAndOutOfCoreMatchReference) {
    for (const char* spec : {"cpu", "cpu:3@64KiB"}) {
        context ctx(spec);
        blas3_call_options call;
        if (std::string(spec) != "cpu") call.tile = 20;
        testing::every_complex_option(ctx, blas3_routine::trmm, 43, 37, 0, call, false);
    }
}

TEST(Trmm, OutOfCoreOnThreeDevicesMatchesReference) {
    context ctx("cpu:3", {.memory_budget = std::size_t(40) << 10});
    blas3_call_options call;
    call.tile = 24;
    call.tile_free = 16;
    every_option(ctx, blas3_routine::trmm, 73, 40, 0, call, false);
    every_option(ctx, blas3_routine::trmm, 45, 90, 0, {}, false);
}

TEST(Trmm, OnOpenCLMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("opencl:0");
    for (gemm_kernel k : {gemm_kernel::tiled, gemm_kernel::vendor}) {
        context ctx("opencl:0@192KiB", {.kernel = k});
        blas3_call_options call;
        call.tile = 32;
        every_option(ctx, blas3_routine::trmm, 70, 37, 0, call, false);
    }
}

TEST(Trmm, AlphaZeroOverwritesBWithZeros) {
    for (const char* spec : {"cpu", "cpu:2@64KiB"}) {
        context ctx(spec);
        every_option(ctx, blas3_routine::trmm, 30, 21, 0, {}, false, 0.0);
    }
}

}  // namespace
}  // namespace tilestream
