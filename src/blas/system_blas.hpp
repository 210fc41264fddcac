// The real BLAS libraries behind the drop-in, opened by path and searched by handle, so that no
// call the drop-in forwards can resolve back to the drop-in itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tilestream::blas {

using sgemm_fn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                          const int*, const float*, const int*, const float*, float*, const int*, std::size_t,
                          std::size_t);
using dgemm_fn = void (*)(const char*, const char*, const int*, const int*, const int*, const double*,
                          const double*, const int*, const double*, const int*, const double*, double*, const int*,
                          std::size_t, std::size_t);
using cblas_sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                                float*, int);
using cblas_dgemm_fn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int,
                                double, double*, int);

/// The four GEMM entry points of one real library.
struct gemm_entries {
    std::string path;
    sgemm_fn sgemm = nullptr;
    dgemm_fn dgemm = nullptr;
    cblas_sgemm_fn cblas_sgemm = nullptr;
    cblas_dgemm_fn cblas_dgemm = nullptr;
};

/// The libraries a call can be forwarded to, and the code from which calls are forwarded without a
/// decision.
///
/// Why by caller address: when the drop-in is preloaded, libtilestream's own cblas_?gemm calls (the
/// CPU vendor kernel, from any of its worker threads or from OpenBLAS's) bind to the drop-in too,
/// and must not come back into tilestream. A call whose return address lies in libtilestream's code
/// goes to the BLAS libtilestream itself links (the one whose thread count it sets); a call from
/// inside a real BLAS (a reference cblas_dgemm calls dgemm_ through the PLT) goes back to it.
/// No flag to set and clear: it holds on every thread, tilestream's or OpenBLAS's.
class real_blas {
public:
    /// Opens `requested` (TILESTREAM_BLAS_LIB), or the system BLAS found at build time when it is
    /// empty or cannot be opened. Never throws; what went wrong is appended to `problems`.
    /// `self` is any address inside the drop-in (a symbol resolving there is refused).
    real_blas(const std::string& requested, const void* self, std::vector<std::string>& problems);

    /// Where small calls and fallbacks go (entries the system BLAS lacks come from tilestream's).
    const gemm_entries& system() const { return system_; }
    /// The target for a call made from `caller` when that code is tilestream's or a real BLAS's
    /// own; nullptr for every other caller (the client's calls, routed by size).
    const gemm_entries* internal_target(const void* caller) const;

private:
    struct code_range {
        std::uintptr_t begin, end;
        const gemm_entries* target;
    };
    void add_code_of(void* handle, const gemm_entries* target);

    gemm_entries system_;
    gemm_entries tilestream_;  ///< what libtilestream links (OpenBLAS)
    std::vector<code_range> ranges_;
};

}  // namespace tilestream::blas
