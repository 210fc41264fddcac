// Library-private knobs of check_gemm: forcing a method (the tests run every method on the same
// data) and the blocked reference's workspace. Not installed.
#pragma once

#include <tilestream/verify.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace tilestream::detail {

struct gemm_check_options {
    /// Forced method; empty: choose_gemm_check.
    std::optional<gemm_check_method> method;
    /// blas: the upcast blocks of all threads together stay within this (each at least 64 x 64).
    std::size_t workspace_bytes = std::size_t(64) << 20;
    /// blas and freivalds: worker threads (0: the hardware threads).
    int threads = 0;
    /// freivalds: seed of the random +-1 vectors.
    std::uint64_t seed = 0x7f4a7c15;
};

template <class T>
gemm_check_result check_gemm_with(const gemm_check_options& opt, op op_a, op op_b, T alpha,
                                  host_matrix_view<const T> a, host_matrix_view<const T> b, T beta,
                                  host_matrix_view<const T> c0, host_matrix_view<const T> c,
                                  math_mode m = math_mode::strict);

}  // namespace tilestream::detail
