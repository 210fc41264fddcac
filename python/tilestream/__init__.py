"""tilestream: dense matrix multiplication and 2-D Jacobi solves on all your devices (CPUs, CUDA and
OpenCL GPUs), including problems larger than a device's memory, from numpy.

    import numpy as np, tilestream
    a, b = np.random.rand(3000, 2000), np.random.rand(2000, 1000)
    c = tilestream.matmul(a, b, memory_budget="8MiB")        # out-of-core through 8 MiB per device
    ctx = tilestream.Context("cpu:2", memory_budget="64MiB")  # devices opened once, reused
    field = ctx.jacobi(512, 512, iters=200)

This package translates arguments and errors; the work is tilestream::context's (C++).

matmul follows numpy.matmul: the result dtype is numpy's (float16, float32, float64, complex64 or
complex128; float16 is summed in float32 as numpy's own loop does; a real operand times a complex
one gives numpy's complex result, the real one converted), out= is checked as numpy checks it and
the result cast into it with casting='same_kind', np.matrix inputs give an np.matrix. alpha and
beta may be Python complex numbers when the result is complex. What tilestream cannot do as numpy
does raises TypeError saying what to do instead: integer and bool results (numpy's are exact integer
products), longdouble and clongdouble, masked arrays, objects that override numpy's ufuncs, a complex
alpha or beta with a real result. Stacks of matrices (more than 2 dimensions) broadcast as numpy's:
(b, m, k) @ (b, k, n), (m, k) @ (b, k, n), any leading axes, zero-size ones included; they run as
one batched call (context::gemm_batched).

a @ b with nothing else given (two float32 or two float64 arrays, 1-D or 2-D, used where they lie)
runs on the calling thread when the library's measured rates say the host's kernel is faster than
handing it to the engine: a few hundred nanoseconds above the BLAS call itself.

Operands are used where they lie (no copy) when they are BLAS operands: C- or Fortran-ordered
aligned arrays, and views with one unit-stride axis such as transposes (a column-major view of the
base: op = T without a copy) and row or column slices. np.memmap operands are read from disk tile
by tile, never copied whole. A view with no unit-stride axis (a[::2, ::3]), an unaligned array, a
dtype other than the computed one, or an input that overlaps `out` is copied first; an `out` of
another dtype or with no unit-stride axis gets the result through a temporary (`explain=True` lists
what was copied).

Errors: tilestream's own messages, as the command-line tool prints them, or one sentence naming
the argument. Bad values -> ValueError; wrong types -> TypeError; operands that fit no device
budget -> MemoryError; file errors -> OSError; device failures -> RuntimeError.

Processes: a child made with os.fork() (multiprocessing's 'fork' start method) may use tilestream,
its module-level calls and the parent's Contexts of CPU devices: the library starts its threads
again in the child. os.fork() waits for calls in flight on other threads first.
"""

import collections
import os
import sys
import threading

import numpy as np


def _native_missing(error):
    """The ImportError to raise when the native part cannot be imported: the reason in words."""
    import importlib.machinery
    import pathlib

    here = pathlib.Path(__file__).resolve().parent
    built = sorted(p.name for p in here.glob("_tilestream*") if p.suffix in (".so", ".pyd"))
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not built:
        return ImportError(
            f"tilestream's native part (_tilestream{suffix}) is not built next to {here}: this looks like the "
            f"source tree. Build the extension first: `python3 -m pip install --no-build-isolation ./python` "
            f"(installs it for this Python), or `cmake -S . -B build && cmake --build build` and then "
            f"PYTHONPATH=build/python (see README.md)")
    if not any("_tilestream" + s in built for s in importlib.machinery.EXTENSION_SUFFIXES):
        return ImportError(
            f"tilestream's native part in {here} ({', '.join(built)}) was built for another Python, not this "
            f"one ({sys.executable}, Python {version}, which loads _tilestream{suffix}): rebuild it for this "
            f"interpreter (`{sys.executable} -m pip install --no-build-isolation ./python`, or CMake with "
            f"-DPython3_EXECUTABLE={sys.executable})")
    return ImportError(f"tilestream's native part in {here} failed to load: {error}")


try:
    from . import _tilestream as _native
except ImportError as _error:
    raise _native_missing(_error) from None

from . import _checks, _numpy_rules  # noqa: E402  (after the native part: its message comes first)

__all__ = ["Context", "matmul", "jacobi", "devices", "parse_bytes", "cancel_supported", "MAX_CONTEXTS",
           "release_memory"]

#: The version of the library and module (CMake's project version).
__version__ = _native.version

#: Whether Ctrl-C stops a run at once (this build's library has run cancellation). Without it a
#: Ctrl-C still raises KeyboardInterrupt, once the run has finished.
cancel_supported = bool(_native.cancel_supported)

#: How often the waiting thread wakes to deliver Ctrl-C and progress (seconds).
POLL_SECONDS = 0.05

#: How many contexts the module-level calls keep open (the most recently used settings); each holds
#: its devices' threads and buffers. Use a Context to keep one for as long as you like.
MAX_CONTEXTS = 4


def parse_bytes(text):
    """Bytes in '512MiB', '1.5GiB', '64KB' or '4096': the CLI's --memory-budget grammar."""
    return _native.parse_bytes(_checks.text(text, "parse_bytes's text", "'512MiB'"))


def devices():
    """The devices present ('all'), one dict each: id, kind, name, memory_bytes, threads..."""
    return _native.devices()


def release_memory():
    """Gives back to the system the buffer of the last large result freed (4 MiB or more), which
    matmul keeps to reuse for its next large result: a fresh one costs its page faults on every
    call. One buffer at most, of at most an eighth of physical memory (1 GiB); returns its bytes."""
    kept = _native.kept_result_bytes()
    _native.release_memory()
    return kept


def _budget(memory_budget):
    return _checks.budget(memory_budget, _native.parse_bytes)


def _as_operand(x, dtype, name, copied):
    """x (a matrix, or a stack of them) as BLAS operands of `dtype`: itself when its matrices are, else
    a compact aligned copy (noted)."""
    if x.dtype != dtype:
        copied.append(f"{name}: converted from {x.dtype} to {dtype}")
        x = x.astype(dtype)
    if _native.stack_layout(x) is None:
        why = ("is not aligned to its element size" if not x.flags.aligned
               else f"strides {x.strides} have no unit-stride axis")
        copied.append(f"{name}: {why}, copied to C order")
        x = np.array(x, order="C")  # a new, aligned array
    return x


def _same_array(x, y):
    return (x.__array_interface__["data"][0] == y.__array_interface__["data"][0] and x.shape == y.shape
            and x.strides == y.strides and x.dtype == y.dtype)


def _matrix_view(result, a_ndim, b_ndim):
    """The result as the m x n matrices the library writes (a view: vectors get their axis back)."""
    if a_ndim == 1:
        result = np.expand_dims(result, -2 if b_ndim > 1 else -1)
    if b_ndim == 1:
        result = np.expand_dims(result, -1)
    return result


class _ProgressBar:
    """progress=True: one line on stderr, redrawn as units (or iterations) finish."""

    def __init__(self, what, stream=None):
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.shown = -1

    def __call__(self, done, total):
        percent = 100 * done // total if total else 100
        if percent == self.shown:
            return
        self.shown = percent
        filled = percent * 30 // 100
        self.stream.write(f"\rtilestream {self.what}: [{'#' * filled}{' ' * (30 - filled)}] {percent:3d}% "
                          f"({done}/{total})" + ("\n" if done >= total else ""))
        self.stream.flush()



# a @ a.T (and a.T @ a) below this many multiply-adds stay on GEMM: the direct path's fixed cost is
# smaller than the engine's, and halving the flops does not pay for it (gram_form in
# tilestream_py.cpp has the same bound). Under load on the 2-core VM, f64: 256^3 SYRK 1.3 ms
# against GEMM 0.8 ms, 384^3 even, 1024^3 68 against 80 ms, 2048^3 385 against 650 ms.
_GRAM_MIN_MNK = 400 ** 3


def _gram_operand(a, b):
    """x when b is x.T, as numpy tells an a @ a.T product (which it gives to ?syrk): two 2-D arrays
    of one BLAS dtype, on the same data, b's shape and strides a's reversed; else None."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    if a.dtype != b.dtype or a.dtype.char not in "fdFD" or not a.dtype.isnative:
        return None
    if b.shape != a.shape[::-1] or b.strides != a.strides[::-1]:
        return None
    if a.__array_interface__["data"][0] != b.__array_interface__["data"][0]:
        return None
    n, k = a.shape
    if n * n * k < _GRAM_MIN_MNK or _native.operand_layout(a) is None:
        return None
    return a


def _mirror_lower(c, block=512):
    """Copies the lower triangle of the square array c into its upper one, a block row at a time."""
    n = c.shape[0]
    for j0 in range(0, n, block):
        j1 = min(n, j0 + block)
        d = c[j0:j1, j0:j1]
        upper = np.triu_indices(j1 - j0, 1)
        d[upper] = d.T[upper]
        if j1 < n:
            c[j0:j1, j1:] = c[j1:, j0:j1].T


def _wait(run, progress):
    """Waits for a run with the GIL released, POLL_SECONDS at a time, so that Ctrl-C (raised by
    Python between waits) and progress calls happen on this thread. On KeyboardInterrupt, or an
    error from the progress callable, the run is cancelled and joined before the error goes on:
    the run writes into arrays the caller owns."""
    shown = None
    try:
        while not run.wait(POLL_SECONDS):
            if progress is not None:
                now = run.progress()
                if now != shown and now[1]:
                    shown = now
                    progress(*now)
    except BaseException:
        run.cancel()
        try:
            run.result()
        except Exception:  # tilestream::cancelled, or whatever the run met: the interrupt wins
            pass
        raise
    report = run.result()
    if progress is not None:
        now = run.progress()
        if now != shown and now[1]:
            progress(*now)
    return report


class Kept:
    """A promise made with Context.keep; usable as a context manager."""

    def __init__(self, native):
        self._native = native

    def changed(self):
        """The array's values changed: tiles of it read before are not used again."""
        self._native.changed()

    def release(self):
        """Ends the promise (and the reuse)."""
        self._native.release()

    @property
    def active(self):
        return self._native.active

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class Context:
    """Devices opened once (the CLI's spec grammar: 'auto' (the default: the GPUs, else the CPU),
    'all', 'cpu', 'cpu:2', 'cuda:0,cpu@4GiB', 'opencl:0x2'...), their rates measured once, and every
    call planned for all of them: tilestream::context. Safe to use from several threads; runs queue.

    memory_budget: bytes (int) or a string such as '8MiB', for each device without '@budget' in
    the spec. A budget on a CPU device makes it stage tiles like an accelerator (out-of-core);
    without one CPU devices compute on the operands where they lie.
    kernel: 'auto' (the default: on each device the fastest kernel measured for the call's precision
    and shape), 'vendor' (OpenBLAS, cuBLAS, CLBlast), 'tiled', 'naive' or 'reference'.
    cpu_threads (0: split the cores), math ('strict' or 'tf32'), cache ('auto', 'on', 'off') and
    reproducible (fixed k-order) are the CLI's --cpu-threads, --math, --cache and --reproducible.
    """

    def __init__(self, devices="auto", memory_budget=None, kernel="auto", *, cpu_threads=0, math="strict",
                 cache="auto", reproducible=False):
        self._native = _native.Context(
            _checks.spec(devices), _budget(memory_budget),
            _checks.text(kernel, "kernel", "'auto', 'vendor', 'tiled', 'naive' or 'reference'"),
            _checks.integer(cpu_threads, "cpu_threads", _checks.INT_MIN, _checks.INT_MAX),
            _checks.text(math, "math", "'strict' or 'tf32'"), _checks.text(cache, "cache", "'auto', 'on' or 'off'"),
            bool(reproducible))
        # matmul(a, b) with nothing else given: straight to the native direct call (matmul_direct).
        self._direct = self._native.direct_handle

    @property
    def devices(self):
        """The context's devices, one dict each (as tilestream.devices())."""
        return self._native.devices

    @property
    def device_names(self):
        """The device ids, comma-separated ('cpu:0,cpu:1')."""
        return self._native.device_names

    @property
    def memory_budget(self):
        """The smallest budget a run may use on every device, in bytes (what the planner plans for)."""
        return self._native.budget

    def __repr__(self):
        return f"tilestream.Context({self.device_names!r}, memory_budget={self.memory_budget})"

    # -- GEMM ------------------------------------------------------------------------------------

    def _start_gemm(self, a, b, out, alpha, beta, c, strategy, tile, kernel, plan_only):
        """Checks and converts the arguments as numpy.matmul would, starts the run; returns the
        run, a function giving the call's result once the run has ended, and what was copied."""
        alpha = _checks.number(alpha, "alpha")
        beta = _checks.number(beta, "beta")
        strategy = _checks.text(strategy, "strategy", "'auto', 'in-core' or 'tiles-3d'")
        if kernel is not None:
            kernel = _checks.text(kernel, "kernel", "'auto', 'vendor', 'tiled', 'naive' or 'reference'")
        if tile is None:
            tiles = (0, 0, 0)
        elif isinstance(tile, (tuple, list)) and len(tile) == 3:
            tiles = tuple(_checks.integer(t, "tile") for t in tile)
        else:
            tiles = (_checks.integer(tile, "tile"),) * 3
        given = (a, b)
        a = _numpy_rules.operand(a, "a")  # an np.memmap (or any ndarray) stays the same buffer: no copy
        b = _numpy_rules.operand(b, "b")
        for x, i in ((a, 0), (b, 1)):
            if x.ndim == 0:
                raise ValueError(f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc core "
                                 f"with signature {_numpy_rules.SIGNATURE} requires 1)")
        dtype, compute = _numpy_rules.result_dtypes(a, b)
        alpha = _numpy_rules.check_scalar(alpha, "alpha", compute)
        beta = _numpy_rules.check_scalar(beta, "beta", compute)
        a2 = np.expand_dims(a, 0) if a.ndim == 1 else a  # numpy's vector rules: (k,) @ B, A @ (k,)
        b2 = np.expand_dims(b, -1) if b.ndim == 1 else b
        # Stacks (numpy's broadcasting of the leading axes): a batched run over matrices of one shape.
        batched = a2.ndim > 2 or b2.ndim > 2
        lead = _numpy_rules.stack_shape(a2, b2) if batched else ()
        if batched and (strategy != "auto" or tile is not None):
            raise ValueError("matmul: stacks of matrices run as a batch, planned per group of matrices: strategy and "
                             "tile do not apply (leave them at their defaults)")
        shape = lead + a2.shape[-2:-1] * (a.ndim > 1) + b2.shape[-1:] * (b.ndim > 1)
        copied = []
        # The array the library writes: out itself where it can (the computed dtype, one unit-stride
        # axis, aligned), else a C-ordered temporary that the result is then cast and copied from.
        direct = False
        if out is not None:
            _numpy_rules.check_out(out, shape, dtype)
            direct = out.dtype == compute and _native.stack_layout(_matrix_view(out, a.ndim, b.ndim)) is not None
            if not direct:
                why = (f"dtype {out.dtype}" if out.dtype != compute
                       else "not aligned" if not out.flags.aligned else f"strides {out.strides}")
                copied.append(f"out: {why}: the result is computed into a {compute} temporary and copied into out "
                              f"(casting='same_kind', as numpy does)")
        elif compute != dtype:
            copied.append(f"result: computed in {compute}, returned as {dtype} (numpy's {dtype} matmul sums in "
                          f"{compute} too)")
        # C order, like numpy's; a large one on huge pages, reusing the last large result freed.
        target = out if direct else _native.empty_result(shape, np.dtype(compute))
        target2 = _matrix_view(target, a.ndim, b.ndim)
        if direct:
            for name in ("a", "b"):
                x2 = a2 if name == "a" else b2
                if np.may_share_memory(out, x2):  # numpy's semantics: as if the inputs were read first
                    copied.append(f"{name}: overlaps out, copied")
                    if name == "a":
                        a2 = x2.copy()
                    else:
                        b2 = x2.copy()
        a2 = _as_operand(a2, compute, "a", copied)
        b2 = _as_operand(b2, compute, "b", copied)
        if batched:
            # Every operand with the result's leading axes: broadcast ones get a stride of 0 (no copy).
            a2 = np.broadcast_to(a2, lead + a2.shape[-2:])
            b2 = np.broadcast_to(b2, lead + b2.shape[-2:])
        if beta != 0:
            if c is None:
                raise ValueError(f"matmul: beta is {beta:g} but no c was given (pass c=..., which may be out "
                                 f"itself)")
            c = _numpy_rules.operand(c, "c")
            _numpy_rules.check_numeric(c, "c")
            if not (direct and _same_array(c, out)) and not plan_only:
                np.copyto(target, c)  # broadcasts like numpy (a row of biases, a scalar...)
        elif c is not None:
            raise ValueError("matmul: c was given but beta is 0, so c would not be read; pass beta (beta=1 adds c)")
        if batched:
            run = self._native.start_gemm_batched(a2, b2, target2, complex(alpha), complex(beta), kernel, plan_only)
        else:
            run = self._native.start_gemm(a2, b2, target2, complex(alpha), complex(beta), strategy, *tiles, kernel,
                                          plan_only)

        def finish():
            if out is not None:
                if not direct:
                    np.copyto(out, target, casting="same_kind")
                return out
            return _numpy_rules.wrap(target if compute == dtype else target.astype(dtype), given)

        return run, finish, copied

    def matmul(self, a, b, out=None, *, alpha=1, beta=0, c=None, strategy="auto", tile=None, kernel=None,
               explain=False, progress=None):
        """alpha * a @ b + beta * c on all the context's devices, out-of-core when the operands do
        not fit the budget. See tilestream.matmul."""
        plain = (out is None and c is None and kernel is None and tile is None and not explain
                 and strategy == "auto" and type(alpha) is int and alpha == 1 and type(beta) is int and beta == 0)
        if plain and progress is None:
            result = _native.matmul_direct(self._direct, a, b)
            if result is not None:
                return result
        progress = _checks.progress_callable(progress, lambda: _ProgressBar("matmul"))
        if plain:
            x = _gram_operand(a, b)
            if x is not None:
                return self._gram(x, progress)
        run, finish, copied = self._start_gemm(a, b, out, alpha, beta, c, strategy, tile, kernel, False)
        report = _wait(run, progress)
        result = finish()
        if not explain:
            return result
        lines = [report["text"].rstrip("\n")]
        lines += [f"python: {what}" for what in copied] or ["python: every operand used where it lies (no copy)"]
        lines.append(f"measured: {report['seconds']:.4f} s (predicted {report['predicted_seconds']:.4f} s), bytes "
                     f"h2d {report['measured_bytes_h2d']} (predicted {report['bytes_h2d']}), d2h "
                     f"{report['measured_bytes_d2h']} (predicted {report['bytes_d2h']}), peak device memory "
                     f"{report['measured_peak_device_bytes']} (predicted {report['peak_device_bytes']})")
        if report["kept_hits"]:
            lines.append(f"kept: {report['kept_hits']} tiles of kept operands reused from earlier calls "
                         f"({report['kept_bytes_saved']} bytes not copied)")
        lines += [f"warning: {w}" for w in report["warnings"]]
        return result, "\n".join(lines) + "\n"

    def _gram(self, x, progress):
        """x @ x.T as numpy computes it: SYRK on the lower triangle (half GEMM's flops), the upper
        one copied from it, so the result is exactly symmetric."""
        n = x.shape[0]
        c = np.empty((n, n), x.dtype)
        _wait(self._native.start_blas3("syrk", "left", "lower", "n", "non-unit", 1, 0, x, None, c), progress)
        _mirror_lower(c)
        return c

    def keep(self, a):
        """Promises that array `a` (2-D float32/float64/complex64/complex128, read in place by matmul) keeps its values
        while the returned handle is active: tiles of it a call leaves on the devices are used by
        later calls instead of being copied again. Call handle.changed() after writing into `a`;
        handle.release() (or leaving a `with` block) ends the promise. Arrays not kept are copied
        every call."""
        x = _numpy_rules.operand(a, "a")
        if x.ndim != 2 or x.dtype not in (np.float32, np.float64, np.complex64, np.complex128):
            raise TypeError(f"Context.keep: the array must be a 2-D float32, float64, complex64 or complex128 array "
                            f"(as matmul reads it in place), got a {x.ndim}-D {x.dtype} one")
        if not x.flags.aligned:
            raise ValueError("Context.keep: the array is not aligned to its element size, so matmul copies it every "
                             "call: keep an aligned copy (np.array(a)) and multiply that copy")
        return Kept(self._native.keep(x))

    def plan(self, a, b, out=None, *, alpha=1, beta=0, c=None, strategy="auto", tile=None, kernel=None):
        """The plan matmul would run, without running it: a dict with 'text' (explain's lines),
        'strategy', 'tile', 'tiles', 'units', 'bytes_h2d', 'peak_device_bytes', 'predicted_seconds'...
        and 'copied' (the operands matmul would copy first, and why)."""
        run, _, copied = self._start_gemm(a, b, out, alpha, beta, c, strategy, tile, kernel, True)
        plan = _wait(run, None)
        plan["copied"] = copied
        return plan

    def explain(self, a, b, out=None, **options):
        """The plan matmul would run, in a few lines (strategy and why, tiles, traffic, time)."""
        return self.plan(a, b, out, **options)["text"]

    # -- Jacobi ----------------------------------------------------------------------------------

    def jacobi(self, nx, ny, *, dtype=None, iters=1000, tol=0.0, check_every=10, decomposition="auto",
               overlap=True, start=None, explain=False, progress=None):
        """The 2-D Laplace equation by Jacobi iterations on all the context's devices; returns the
        final field (ny x nx, C order). See tilestream.jacobi."""
        progress = _checks.progress_callable(progress, lambda: _ProgressBar("jacobi"))
        args = _native.JacobiArgs()
        args.nx = _checks.integer(nx, "nx")
        args.ny = _checks.integer(ny, "ny")
        args.iters = _checks.integer(iters, "iters")
        args.check_every = _checks.integer(check_every, "check_every")
        args.tol = _checks.real(tol, "tol")
        args.decomposition = _checks.text(decomposition, "decomposition",
                                          "'auto', 'rows', 'cols', 'tiles' or 'tiles:PxQ'")
        args.overlap = bool(overlap)
        if start is not None:
            start = np.asarray(start)
            _numpy_rules.check_numeric(start, "start")
            if start.dtype.kind == "c":
                raise TypeError(f"jacobi: start is complex ({start.dtype}); the field is real (float32 or float64)")
        field_dtype = _jacobi_dtype(dtype, start)
        args.dtype = _JACOBI_DTYPES[field_dtype]
        if start is not None:
            if start.shape != (args.ny, args.nx):
                raise ValueError(f"jacobi: start has shape {start.shape}, the field is ({args.ny}, {args.nx}) "
                                 f"(ny, nx)")
            start = np.require(start, dtype=field_dtype, requirements=["C", "A"])  # aligned, C order
        run = self._native.start_jacobi(args, start)
        report = _wait(run, progress)
        field = run.output
        if not explain:
            return field
        status = (f"converged at iteration {report['converged_at']}" if report["converged"]
                  else "not converged" if args.tol > 0 else "no tolerance")
        text = (report["text"].rstrip("\n") + "\n" +
                f"measured: {report['iterations']} iterations in {report['seconds']:.4f} s "
                f"({report['glups']:.3f} GLUP/s, {report['gbps']:.2f} GB/s), residual {report['residual']:.6e}, "
                f"{status}\n")
        return field, text


#: The field dtypes of Jacobi, with the library's names for them.
_JACOBI_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def _jacobi_dtype(dtype, start):
    """The field's dtype: `dtype` when given, else start's, else float32 (the CLI's and the
    library's default, a bandwidth-bound sweep moving half the bytes of float64)."""
    if dtype is None:
        if start is None:
            return np.dtype(np.float32)
        if start.dtype not in _JACOBI_DTYPES:
            raise TypeError(f"jacobi: start has dtype {start.dtype} and the field is float32 or float64: pass "
                            f"dtype=np.float32 or np.float64 (start is converted to it)")
        return start.dtype
    try:
        dt = np.dtype({"f32": "float32", "f64": "float64"}.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    except TypeError:
        raise TypeError(f"jacobi: dtype must be float32 or float64 (a numpy dtype, type or name), got "
                        f"{dtype!r}") from None
    if dt.kind == "c":
        raise TypeError(f"jacobi: dtype {dt} is complex; the field is float32 or float64")
    if dt not in _JACOBI_DTYPES:
        raise ValueError(f"jacobi: dtype {dt} has no Jacobi kernel; the field is float32 (f32) or float64 (f64)")
    return dt


_contexts = collections.OrderedDict()  # settings -> Context, the most recently used last
_contexts_lock = threading.Lock()


def _context(devices, memory_budget, kernel):
    """The context for these settings: one of the MAX_CONTEXTS used last, or opened now (the one
    used longest ago is then closed once no call uses it)."""
    key = (_checks.spec(devices), _budget(memory_budget),
           _checks.text(kernel, "kernel", "'auto', 'vendor', 'tiled', 'naive' or 'reference'"))
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is not None:
            _contexts.move_to_end(key)
            return ctx
    ctx = Context(*key)  # opened outside the lock: opening devices may take a while
    with _contexts_lock:
        ctx = _contexts.setdefault(key, ctx)  # another thread may have opened one first
        _contexts.move_to_end(key)
        while len(_contexts) > MAX_CONTEXTS:
            _contexts.popitem(last=False)  # calls still running on it keep it alive until they end
        global _default_context
        _default_context = _contexts.get(_DEFAULT_KEY)  # matmul's shortcut follows the cache
        return ctx


def _after_fork_in_child():
    global _contexts_lock
    _contexts_lock = threading.Lock()  # another thread of the parent may have held it
    _native.fork_after()


# A fork waits for runs in flight on other threads, so that no context is copied in the middle of
# one; the library starts its threads again in the child on first use.
os.register_at_fork(before=_native.fork_prepare, after_in_parent=_native.fork_after,
                    after_in_child=_after_fork_in_child)


#: The settings of matmul's defaults, and their context once opened: a call with nothing but a and b
#: goes straight to it (a dictionary lookup and argument checks cost microseconds).
_DEFAULT_KEY = ("auto", None, "auto")
_default_context = None


def matmul(a, b, out=None, *, alpha=1, beta=0, c=None, devices="auto", memory_budget=None, kernel="auto",
           strategy="auto", explain=False, progress=None):
    """alpha * a @ b + beta * c, on `devices` (by default "auto": every GPU present, else the CPU),
    out-of-core when the operands do not fit `memory_budget` (bytes, or a string such as '8MiB').

    a, b: arrays as numpy's matmul takes them, memmaps included: matrices, vectors (1-D) and stacks
    of matrices (more axes, broadcast as numpy does: one batched run). The result dtype is numpy's:
    float32 x float64 -> float64, int x float32 -> float32 (numpy's promotion), float16 -> float16
    (summed in float32, as numpy's own loop does), complex64 x float32 -> complex64, complex64 x
    float64 -> complex128 (the real operand is converted). Results numpy would give as integers or
    bools, longdouble, clongdouble and masked arrays raise TypeError or ValueError saying what to do.
    np.matrix operands give an np.matrix, as numpy's.
    out: where to write the result, checked as numpy checks it (shape, writable) and cast into with
    casting='same_kind' (a float64 result into a float32 out is fine, into an int out a TypeError);
    written in place when it has the computed dtype and one unit-stride axis, else through a
    temporary. Returned. Default: a new C-ordered array.
    alpha, beta: numbers that fit the computed dtype (1e39 with float32 operands is an error);
    complex (1.5-2j) only when the result is complex.
    beta != 0 adds beta * c (c broadcasts to the result's shape; it may be out itself, the BLAS
    in-place update). c without beta is an error (it would not be read).
    strategy: 'auto' or a CLI --strategy (in-core, tiles-3d, a-panel, ..., zero-copy, direct: the
    host's kernel on the calling thread).
    kernel: 'auto' (on each device the fastest measured for the precision and shape), or a kernel.
    explain: True returns (result, text): the plan, the operands copied, measured against predicted.
    a @ a.T-style products (b is a.T on the same data, numpy's test; a.T @ a too) with nothing else
    given run SYRK on one triangle and copy it to the other, as numpy's ?syrk call does: half the
    flops and an exactly symmetric result (from 400^3 multiply-adds; smaller ones stay GEMM).
    progress: a callable (done_steps, total_steps), called on this thread, or True for a bar on stderr
    (a step is at most about 0.2 s of work).

    Devices are opened once per (devices, memory_budget, kernel) and kept for the MAX_CONTEXTS
    settings used last (see Context). The run releases the GIL; Ctrl-C raises KeyboardInterrupt
    (cancelling the run where the library supports it, see cancel_supported).
    """
    ctx = _default_context
    if (ctx is not None and out is None and c is None and devices == "auto" and memory_budget is None
            and kernel == "auto" and strategy == "auto" and not explain and progress is None
            and type(alpha) is int and alpha == 1 and type(beta) is int and beta == 0):
        result = _native.matmul_direct(ctx._direct, a, b)
        if result is not None:
            return result
    return _context(devices, memory_budget, kernel).matmul(a, b, out, alpha=alpha, beta=beta, c=c, strategy=strategy,
                                                           explain=explain, progress=progress)


def jacobi(nx, ny, *, dtype=None, iters=1000, tol=0.0, check_every=10, devices="auto", decomposition="auto",
           overlap=True, memory_budget=None, start=None, explain=False, progress=None):
    """The 2-D Laplace equation on an ny x nx grid (boundary included, fixed) by Jacobi iterations,
    cut over `devices`; returns the final field (ny x nx, C order).

    dtype: float32 or float64 (or 'f32', 'f64'). Default: start's dtype when start is given, else
    float32, as the CLI's --dtype and the C++ library (the sweep is bound by memory bandwidth, and
    float32 moves half the bytes).
    start: the starting field (ny x nx; its boundary stays fixed). Default: sin(2*pi*i/(ny-1)) on
    columns 0 and nx-1, 0 elsewhere (the CLI's). iters: most iterations; tol: stop once the
    residual norm, examined every check_every iterations, is below it (0: never).
    decomposition: 'auto' (least halo bytes), 'rows', 'cols', 'tiles' or 'tiles:PxQ'; every
    decomposition gives a bitwise identical field. overlap: boundary strips and halos first.
    explain: True returns (field, text): the parts and halos, iterations, residual, time.
    progress: a callable (iteration, iterations) or True, as for matmul.
    """
    return _context(devices, memory_budget, "auto").jacobi(
        nx, ny, dtype=dtype, iters=iters, tol=tol, check_every=check_every, decomposition=decomposition,
        overlap=overlap, start=start, explain=explain, progress=progress)


# scipy.linalg.blas-named Level 3 routines (tilestream.blas.dsyrk, ...): after the names they use.
from . import blas  # noqa: E402
