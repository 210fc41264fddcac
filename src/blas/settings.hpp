// The BLAS drop-in's settings: environment variables over an optional `key = value` file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tilestream::blas {

/// GEMMs with m*n*k at or above this go to tilestream: 512^3, where the context's fixed cost per call
/// (about 0.2 ms on the 2-core VM) is a few percent of the GEMM (docs/blas.md has the measurement).
inline constexpr std::uint64_t default_threshold = 512ull * 512 * 512;

struct settings {
    std::string devices = "auto";              ///< TILESTREAM_DEVICES (the CLI's --devices grammar)
    std::optional<std::size_t> memory_budget;  ///< TILESTREAM_MEMORY_BUDGET ("512MiB")
    std::uint64_t threshold = default_threshold;  ///< TILESTREAM_BLAS_THRESHOLD (m*n*k, or "N^3")
    std::string log_path;                      ///< TILESTREAM_BLAS_LOG: one line per GEMM call
    std::string system_blas;                   ///< TILESTREAM_BLAS_LIB: the BLAS small calls go to
    std::string system_lapack;                 ///< TILESTREAM_LAPACK_LIB: the LAPACK small ?potrf_... go to
    /// Settings that were not understood, one sentence each (printed once on stderr, then ignored).
    std::vector<std::string> problems;
};

/// Reads TILESTREAM_BLAS_CONFIG (when set) and then the environment, which wins. Never throws:
/// what it cannot use lands in `problems` and the default stays.
settings read_settings();

}  // namespace tilestream::blas
