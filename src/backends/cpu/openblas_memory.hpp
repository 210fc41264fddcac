// Address space for OpenBLAS's buffers. OpenBLAS takes a buffer of 128 MiB (its BUFFER_SIZE on
// x86-64) for each thread the first time that thread computes, keeps it, and retries forever when the
// address space cannot hold one (under `ulimit -v` a call then spins instead of failing). Every
// OpenBLAS call tilestream makes is therefore announced with an openblas_call first.
#pragma once

namespace tilestream::cpu {

/// One thread about to call OpenBLAS with `threads` OpenBLAS threads. Counts, process-wide, the
/// buffers OpenBLAS may hold (its worker threads' and those of threads calling at once) and, when
/// this call may need more and an address-space limit is set, throws device_error naming the limit
/// unless the address space left holds them.
class openblas_call {
public:
    explicit openblas_call(int threads);
    ~openblas_call();
    openblas_call(const openblas_call&) = delete;
    openblas_call& operator=(const openblas_call&) = delete;
};

}  // namespace tilestream::cpu
