// The Level 3 routines on CUDA devices (cuBLAS diagonal blocks, GEMM tiles on every kernel), in core
// and out of core, against the reference; skipped without a GPU (scripts/gpu-check.sh runs them).
#include "blas3_support.hpp"

namespace tilestream {
namespace {

using testing::every_option;

TEST(Blas3Cuda, EveryRoutineMatchesReferenceOutOfCore) {
    TILESTREAM_SKIP_WITHOUT_GPU("cuda:0");
    for (gemm_kernel k : {gemm_kernel::vendor, gemm_kernel::tiled}) {
        context ctx("cuda:0@256KiB", {.kernel = k});
        blas3_call_options call;
        call.tile = 32;
        call.tile_free = 48;
        call.tile_k = 40;
        every_option(ctx, blas3_routine::trsm, 97, 61, 0, call, false);
        every_option(ctx, blas3_routine::trmm, 83, 70, 0, call, false);
        every_option(ctx, blas3_routine::symm, 75, 66, 0, call, false, 0.75, 0.0);
        every_option(ctx, blas3_routine::syrk, 0, 90, 57, call, false, 0.75, 0.5);
        every_option(ctx, blas3_routine::syr2k, 0, 77, 45, call, false, -1.0, 0.0);
    }
}

TEST(Blas3Cuda, InCoreOnLogicalSlicesMatchesReference) {
    TILESTREAM_SKIP_WITHOUT_GPU("cuda:0");
    context ctx("cuda:0x2");
    every_option(ctx, blas3_routine::trsm, 300, 257, 0, {}, false);
    every_option(ctx, blas3_routine::syrk, 0, 301, 129, {}, false, 0.75, 0.0);
}

}  // namespace
}  // namespace tilestream
