// SYR2K (and HER2K) as tile tasks: C <- alpha op(A) op(B)^T + alpha op(B) op(A)^T + beta C on the
// `uplo` triangle of C: the SYRK family's tiling (syrk_plan.cpp) with two GEMMs per k-step off the
// diagonal and the rank-2k kernel on diagonal tiles.
#include "core/routines/routines.hpp"

namespace tilestream::detail::routines {

engine::task_graph build_syr2k(const blas3_problem& p, const build_settings& s) { return build_rank_k(p, s, true); }

}  // namespace tilestream::detail::routines
