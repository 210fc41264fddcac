// The memory of large results (stacks and big matrices that matmul returns): numpy arrays that own
// their data as numpy's own do (OWNDATA, no base), allocated through a numpy memory handler
// (NEP 49) named "tilestream_result" that maps them on 2 MiB boundaries with transparent huge
// pages asked for, and keeps the last one freed (one buffer, bounded) for the next result. A fresh
// result of 164 MB otherwise costs its 40,000 page faults (zeroing included) on every call, about
// as long as the products of a stack of 10,000 64x64 float32 matrices themselves.
#pragma once

#ifndef NPY_NO_DEPRECATED_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#endif
#include <Python.h>
#include <numpy/ndarraytypes.h>

namespace tilestream::python {

/// Results of at least this many bytes take the handler; smaller ones numpy's (its small cache).
inline constexpr std::size_t large_result_bytes = std::size_t(4) << 20;

/// A new C-ordered array (numpy's np.empty) for a result: through the handler when it is large and
/// this numpy has handlers (1.22 and later), else numpy's own allocator. nullptr with a Python error
/// set when it cannot be made.
PyObject* empty_result(int nd, const npy_intp* dims, int type_num);

/// The freed buffer kept for the next result (0 when none): what the process holds beyond its arrays.
std::size_t kept_result_bytes();

/// Gives the kept buffer back to the system (tilestream.release_memory()).
void release_kept_result();

/// os.register_at_fork's before / after: the handler's lock is not held across a fork.
void result_memory_fork_prepare();
void result_memory_fork_after();

}  // namespace tilestream::python
