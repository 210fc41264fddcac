// The real BLAS libraries behind the drop-in, opened by path and searched by handle, so that no
// call the drop-in forwards can resolve back to the drop-in itself.
#pragma once

#include "blas_routines.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tilestream::blas {

/// The entry points of one real library, by routine (nullptr where it lacks one).
struct blas_library {
    std::string path;
    std::string lapack_path;  ///< the file its LAPACK rows come from (system: once add_lapack ran)
    void* entry[routine_count] = {};
};

/// The libraries a call can be forwarded to, and the code from which calls are forwarded without a
/// decision.
///
/// Why by caller address: once libtilestream is loaded (privately, by the bridge), its own
/// cblas_?gemm calls (the CPU vendor kernel, from any of its worker threads or from OpenBLAS's) bind
/// to the drop-in too, and must not come back into tilestream. A call whose return address lies in
/// libtilestream's code goes to the BLAS libtilestream itself links (the one whose thread count it
/// sets); a call from inside a real BLAS (a reference cblas_dgemm calls dgemm_ through the PLT) goes
/// back to it. No flag to set and clear: it holds on every thread, tilestream's or OpenBLAS's.
class real_blas {
public:
    /// Opens `requested` (TILESTREAM_BLAS_LIB), or the system BLAS found at build time when it is
    /// empty or cannot be opened. Never throws; what went wrong is appended to `problems`.
    /// `self` is any address inside the drop-in (a symbol resolving there is refused).
    real_blas(const std::string& requested, const void* self, std::vector<std::string>& problems);

    /// Where small calls and fallbacks go. Its LAPACK rows are empty until add_lapack.
    const blas_library& system() const { return system_; }
    /// Opens the system LAPACK (`requested`, TILESTREAM_LAPACK_LIB, else the liblapack.so.3 found at
    /// build time) and fills the system entries of the LAPACK rows from it (else from the system
    /// BLAS, which is OpenBLAS's LAPACK too when OpenBLAS is the BLAS). Once per process, on the first
    /// LAPACK call (a program that never calls LAPACK through the drop-in never has it opened by the
    /// drop-in); a LAPACK row's entry may be read only after this returned. False when it had already run.
    bool add_lapack(const std::string& requested, std::vector<std::string>& problems);
    /// The BLAS libtilestream links; empty until add_tilestream.
    const blas_library& tilestream() const { return tilestream_; }
    /// Called once, when the bridge has loaded libtilestream (file `path`): from then on calls from
    /// its code, or from the BLAS it links, go to that BLAS.
    void add_tilestream(const char* path, std::vector<std::string>& problems);
    /// The target for a call made from `caller` when that code is tilestream's or a real BLAS's
    /// own; nullptr for every other caller (the client's calls, routed by size).
    const blas_library* internal_target(const void* caller) const;

private:
    struct code_range {
        std::uintptr_t begin, end;
        const blas_library* target;
    };
    void add_code_of(void* handle, const blas_library* target);

    const void* self_;
    void* system_handle_ = nullptr;
    std::once_flag lapack_once_;
    blas_library system_;
    blas_library tilestream_;
    // Appended while other threads read: each range is written before the count that publishes it.
    static constexpr int max_ranges = 32;
    code_range ranges_[max_ranges] = {};
    std::atomic<int> range_count_{0};
};

}  // namespace tilestream::blas
