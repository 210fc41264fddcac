"""tilestream: dense matrix multiplication and 2-D Jacobi solves on all your devices (CPUs, CUDA and
OpenCL GPUs), including problems larger than a device's memory, from numpy.

    import numpy as np, tilestream
    a, b = np.random.rand(3000, 2000), np.random.rand(2000, 1000)
    c = tilestream.matmul(a, b, memory_budget="8MiB")        # out-of-core through 8 MiB per device
    ctx = tilestream.Context("cpu:2", memory_budget="64MiB")  # devices opened once, reused
    field = ctx.jacobi(512, 512, iters=200)

This package translates arguments and errors; the work is tilestream::context's (C++). Operands are
used where they lie (no copy) when they are BLAS operands: C- or Fortran-ordered arrays, and views
with one unit-stride axis such as transposes (a column-major view of the base: op = T without a
copy) and row or column slices. np.memmap operands are read from disk tile by tile, never copied
whole. A view with no unit-stride axis (a[::2, ::3]), a dtype other than the result's, or an input
that overlaps `out` is copied first (`explain=True` lists what was copied).

Errors: tilestream's own messages, as the command-line tool prints them. Bad values ->
ValueError; wrong types (complex, strings, objects) -> TypeError; operands that fit no device
budget -> MemoryError; file errors -> OSError; device failures -> RuntimeError.
"""

import numbers
import operator
import sys
import threading

import numpy as np

from . import _tilestream as _native

__all__ = ["Context", "matmul", "jacobi", "devices", "parse_bytes", "cancel_supported"]

#: Whether Ctrl-C stops a run at once (this build's library has run cancellation). Without it a
#: Ctrl-C still raises KeyboardInterrupt, once the run has finished.
cancel_supported = bool(_native.cancel_supported)

#: How often the waiting thread wakes to deliver Ctrl-C and progress (seconds).
POLL_SECONDS = 0.05

_SIGNATURE = "(n?,k),(k,m?)->(n?,m?)"


def parse_bytes(text):
    """Bytes in '512MiB', '1.5GiB', '64KB' or '4096': the CLI's --memory-budget grammar."""
    return _native.parse_bytes(text)


def devices():
    """The devices present ('all'), one dict each: id, kind, name, memory_bytes, threads..."""
    return _native.devices()


def _spec(devices):
    if isinstance(devices, str):
        return devices
    if isinstance(devices, (list, tuple)) and devices and all(isinstance(d, str) for d in devices):
        return ",".join(devices)
    raise TypeError(f"devices must be a spec string such as 'all', 'cpu:2' or 'cuda:0,cpu' (or a list of "
                    f"such items), got {type(devices).__name__}")


def _budget(memory_budget):
    if memory_budget is None:
        return None
    if isinstance(memory_budget, str):
        memory_budget = _native.parse_bytes(memory_budget)
    elif isinstance(memory_budget, (bool, np.bool_)) or not isinstance(memory_budget, numbers.Integral):
        raise TypeError(f"memory_budget must be a number of bytes (int) or a string such as '8MiB', "
                        f"got {type(memory_budget).__name__}")
    if memory_budget < 1:
        raise ValueError(f"memory_budget must be at least 1 byte, got {memory_budget}")
    return int(memory_budget)


def _real(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _integer(value, name):
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None


def _check_numeric(x, name):
    if x.dtype.kind == "c":
        raise TypeError(f"tilestream: {name} is complex ({x.dtype}); tilestream multiplies real float32 and "
                        f"float64 matrices")
    if x.dtype.kind not in "biuf":
        raise TypeError(f"tilestream: {name} has dtype {x.dtype}, not a real number type")


def _result_dtype(a, b):
    """numpy's promotion of a and b, made a float type tilestream computes in: float32 stays (and
    float16 becomes float32), float64 stays, integers and bools become float64 (numpy's matmul
    would keep integers, tilestream multiplies floats), longdouble is refused."""
    _check_numeric(a, "a")
    _check_numeric(b, "b")
    dt = np.result_type(a.dtype, b.dtype)
    if dt.kind in "biu":
        return np.dtype(np.float64)
    if dt.itemsize <= 4:
        return np.dtype(np.float32)
    if dt.itemsize == 8:
        return np.dtype(np.float64)
    raise TypeError(f"tilestream: {dt} has no tilestream kernel (float32 and float64 only)")


def _as_operand(x, dtype, name, copied):
    """x as a BLAS operand of `dtype`: itself when it is one, else a compact copy (noted)."""
    if x.dtype != dtype:
        copied.append(f"{name}: converted from {x.dtype} to {dtype}")
        x = x.astype(dtype)
    if _native.operand_layout(x) is None:
        copied.append(f"{name}: strides {x.strides} have no unit-stride axis, copied to C order")
        x = np.ascontiguousarray(x)
    return x


def _same_array(x, y):
    return (x.__array_interface__["data"][0] == y.__array_interface__["data"][0] and x.shape == y.shape
            and x.strides == y.strides and x.dtype == y.dtype)


def _check_out(out, shape, dtype):
    if not isinstance(out, np.ndarray):
        raise TypeError("return arrays must be of ArrayType")
    if out.ndim < len(shape):
        raise ValueError(f"matmul: Output operand 0 does not have enough dimensions (has {out.ndim}, gufunc core "
                         f"with signature {_SIGNATURE} requires {len(shape)})")
    if out.ndim > len(shape):
        raise ValueError(f"matmul: Output operand 0 has {out.ndim} dimensions, the result {len(shape)} "
                         f"(tilestream does not broadcast)")
    for i, (have, want) in enumerate(zip(out.shape, shape)):
        if have != want:
            raise ValueError(f"matmul: Output operand 0 has a mismatch in its core dimension {i}, with gufunc "
                             f"signature {_SIGNATURE} (size {have} is different from {want})")
    if out.dtype != dtype:
        raise TypeError(f"Cannot cast ufunc 'matmul' output from {dtype!r} to {out.dtype!r}: tilestream writes "
                        f"into out without casting, so out must have dtype {dtype}")
    if not out.flags.writeable:
        raise ValueError("output array is read-only")


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


def _progress_callable(progress, what):
    if progress is None or progress is False:
        return None
    if progress is True:
        return _ProgressBar(what)
    if not callable(progress):
        raise TypeError(f"progress must be a callable (done, total), True or None, got {type(progress).__name__}")
    return progress


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
    """Devices opened once (the CLI's spec grammar: 'all', 'cpu', 'cpu:2', 'cuda:0,cpu@4GiB',
    'opencl:0x2'...), their rates measured once, and every call planned for all of them:
    tilestream::context. Safe to use from several threads; runs queue.

    memory_budget: bytes (int) or a string such as '8MiB', for each device without '@budget' in
    the spec. A budget on a CPU device makes it stage tiles like an accelerator (out-of-core);
    without one CPU devices compute on the operands where they lie.
    kernel: 'vendor' (OpenBLAS, cuBLAS, CLBlast), 'tiled', 'naive' or 'reference'.
    cpu_threads (0: split the cores), math ('strict' or 'tf32'), cache ('auto', 'on', 'off') and
    reproducible (fixed k-order) are the CLI's --cpu-threads, --math, --cache and --reproducible.
    """

    def __init__(self, devices="all", memory_budget=None, kernel="vendor", *, cpu_threads=0, math="strict",
                 cache="auto", reproducible=False):
        self._native = _native.Context(_spec(devices), _budget(memory_budget), str(kernel),
                                       _integer(cpu_threads, "cpu_threads"), str(math), str(cache),
                                       bool(reproducible))

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
        alpha = _real(alpha, "alpha")
        beta = _real(beta, "beta")
        a = np.asarray(a)  # an np.memmap (or any ndarray) stays the same buffer: no copy
        b = np.asarray(b)
        for x, i in ((a, 0), (b, 1)):
            if x.ndim == 0:
                raise ValueError(f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc core "
                                 f"with signature {_SIGNATURE} requires 1)")
            if x.ndim > 2:
                raise ValueError(f"tilestream.matmul multiplies matrices (and vectors, as numpy does): operand "
                                 f"{'ab'[i]} has {x.ndim} dimensions {x.shape}; call it per matrix of the stack")
        dtype = _result_dtype(a, b)
        a2 = a[np.newaxis, :] if a.ndim == 1 else a  # numpy's vector rules: (k,) @ B, A @ (k,)
        b2 = b[:, np.newaxis] if b.ndim == 1 else b
        shape = a2.shape[:1] * (a.ndim == 2) + b2.shape[1:] * (b.ndim == 2)
        copied = []
        if out is None:
            result = np.empty(shape, dtype)  # C order, like numpy's
        else:
            _check_out(out, shape, dtype)
            result = out
        # The result as the m x n matrix the library writes (a view: vectors get their axis back).
        if result.ndim == 2:
            result2 = result
        elif a.ndim == 1 and b.ndim == 1:
            result2 = result.reshape(1, 1)
        else:
            result2 = result[np.newaxis, :] if a.ndim == 1 else result[:, np.newaxis]
        if out is not None:
            if _native.operand_layout(result2) is None:
                raise ValueError(f"output array is not acceptable: tilestream writes the result into out in "
                                 f"place, so one axis of out must have unit stride (C or Fortran order, or a row "
                                 f"or column slice of such an array); out has strides {out.strides}")
            for name in ("a", "b"):
                x2 = a2 if name == "a" else b2
                if np.may_share_memory(out, x2):  # numpy's semantics: as if the inputs were read first
                    copied.append(f"{name}: overlaps out, copied")
                    if name == "a":
                        a2 = x2.copy()
                    else:
                        b2 = x2.copy()
        a2 = _as_operand(a2, dtype, "a", copied)
        b2 = _as_operand(b2, dtype, "b", copied)
        if beta != 0:
            if c is None:
                raise ValueError(f"matmul: beta is {beta:g} but no c was given (pass c=..., which may be out "
                                 f"itself)")
            c = np.asarray(c)
            _check_numeric(c, "c")
            if not _same_array(c, result) and not plan_only:
                np.copyto(result, c)  # broadcasts like numpy (a row of biases, a scalar...)
        elif c is not None:
            raise ValueError("matmul: c was given but beta is 0, so c would not be read; pass beta (beta=1 adds c)")
        if tile is None:
            tiles = (0, 0, 0)
        elif isinstance(tile, (tuple, list)) and len(tile) == 3:
            tiles = tuple(_integer(t, "tile") for t in tile)
        else:
            tiles = (_integer(tile, "tile"),) * 3
        run = self._native.start_gemm(a2, b2, result2, alpha, beta, str(strategy), *tiles,
                                      None if kernel is None else str(kernel), plan_only)
        return run, result, copied

    def matmul(self, a, b, out=None, *, alpha=1, beta=0, c=None, strategy="auto", tile=None, kernel=None,
               explain=False, progress=None):
        """alpha * a @ b + beta * c on all the context's devices, out-of-core when the operands do
        not fit the budget. See tilestream.matmul."""
        progress = _progress_callable(progress, "matmul")
        run, result, copied = self._start_gemm(a, b, out, alpha, beta, c, strategy, tile, kernel, False)
        report = _wait(run, progress)
        if out is None and result.ndim == 0:
            result = result[()]  # vector @ vector: a scalar, as numpy's
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

    def keep(self, a):
        """Promises that array `a` (2-D float32/float64, read in place by matmul) keeps its values
        while the returned handle is active: tiles of it a call leaves on the devices are used by
        later calls instead of being copied again. Call handle.changed() after writing into `a`;
        handle.release() (or leaving a `with` block) ends the promise. Arrays not kept are copied
        every call."""
        return Kept(self._native.keep(np.asarray(a)))

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

    def jacobi(self, nx, ny, *, dtype="float64", iters=1000, tol=0.0, check_every=10, decomposition="auto",
               overlap=True, start=None, explain=False, progress=None):
        """The 2-D Laplace equation by Jacobi iterations on all the context's devices; returns the
        final field (ny x nx, C order). See tilestream.jacobi."""
        progress = _progress_callable(progress, "jacobi")
        args = _native.JacobiArgs()
        args.nx = _integer(nx, "nx")
        args.ny = _integer(ny, "ny")
        if isinstance(dtype, str):
            args.dtype = dtype
        else:
            dt = np.dtype(dtype)
            if dt.kind == "c":
                raise TypeError(f"jacobi: dtype {dt} is complex; the field is float32 or float64")
            args.dtype = dt.name
        args.iters = _integer(iters, "iters")
        args.check_every = _integer(check_every, "check_every")
        args.tol = _real(tol, "tol")
        if not isinstance(decomposition, str):
            raise TypeError(f"decomposition must be a string ('auto', 'rows', 'cols', 'tiles' or 'tiles:PxQ'), "
                            f"got {type(decomposition).__name__}")
        args.decomposition = decomposition
        args.overlap = bool(overlap)
        if start is not None:
            field_dtype = np.float32 if args.dtype in ("f32", "float32", "float") else np.float64
            start = np.asarray(start)
            _check_numeric(start, "start")
            if start.shape != (args.ny, args.nx):
                raise ValueError(f"jacobi: start has shape {start.shape}, the field is ({args.ny}, {args.nx}) "
                                 f"(ny, nx)")
            start = np.ascontiguousarray(start, dtype=field_dtype)
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


_contexts = {}
_contexts_lock = threading.Lock()


def _context(devices, memory_budget, kernel):
    """The context for these settings, opened on first use and kept for the process."""
    key = (_spec(devices), _budget(memory_budget), str(kernel))
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = Context(*key)
            _contexts[key] = ctx
        return ctx


def matmul(a, b, out=None, *, alpha=1, beta=0, c=None, devices="all", memory_budget=None, kernel="vendor",
           strategy="auto", explain=False, progress=None):
    """alpha * a @ b + beta * c, on `devices` (all of them by default), out-of-core when the
    operands do not fit `memory_budget` (bytes, or a string such as '8MiB').

    a, b: 2-D (or 1-D, as numpy's matmul) arrays, memmaps included. The result dtype is numpy's
    promotion of a and b, as a float type: float32 x float64 -> float64, integers and bools ->
    float64, float16 -> float32; complex raises TypeError.
    out: where to write the result, checked like numpy's (shape, exactly the result dtype, writable,
    one unit-stride axis); returned. Default: a new C-ordered array.
    beta, c: beta != 0 adds beta * c (c broadcasts to the result's shape; it may be out itself, the
    BLAS in-place update). c without beta is an error (it would not be read).
    strategy: 'auto' or a CLI --strategy (in-core, tiles-3d, a-panel, ..., zero-copy).
    explain: True returns (result, text): the plan, the operands copied, measured against predicted.
    progress: a callable (done_units, total_units), called on this thread, or True for a bar on stderr.

    Devices are opened once per (devices, memory_budget, kernel) and kept (see Context). The
    run releases the GIL; Ctrl-C raises KeyboardInterrupt (cancelling the run where the library
    supports it, see cancel_supported).
    """
    return _context(devices, memory_budget, kernel).matmul(a, b, out, alpha=alpha, beta=beta, c=c, strategy=strategy,
                                                           explain=explain, progress=progress)


def jacobi(nx, ny, *, dtype="float64", iters=1000, tol=0.0, check_every=10, devices="all", decomposition="auto",
           overlap=True, memory_budget=None, start=None, explain=False, progress=None):
    """The 2-D Laplace equation on an ny x nx grid (boundary included, fixed) by Jacobi iterations,
    cut over `devices`; returns the final field (ny x nx, C order, `dtype` float32 or float64).

    start: the starting field (ny x nx; its boundary stays fixed). Default: sin(2*pi*i/(ny-1)) on
    columns 0 and nx-1, 0 elsewhere (the CLI's). iters: most iterations; tol: stop once the
    residual norm, examined every check_every iterations, is below it (0: never).
    decomposition: 'auto' (least halo bytes), 'rows', 'cols', 'tiles' or 'tiles:PxQ'; every
    decomposition gives a bitwise identical field. overlap: boundary strips and halos first.
    explain: True returns (field, text): the parts and halos, iterations, residual, time.
    progress: a callable (iteration, iterations) or True, as for matmul.
    """
    return _context(devices, memory_budget, "vendor").jacobi(
        nx, ny, dtype=dtype, iters=iters, tol=tol, check_every=check_every, decomposition=decomposition,
        overlap=overlap, start=start, explain=explain, progress=progress)
