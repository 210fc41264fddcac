"""Factorizations with the names, arguments and return values of scipy.linalg.lapack, run by
tilestream (all devices, out of core when the matrix does not fit):

    from tilestream import lapack
    c, info = lapack.dpotrf(a, lower=1)              # a = c @ c.T, c lower triangular (info 0)
    x, info = lapack.dpotrs(c, b, lower=1)           # solves a x = b with that factor
    c, x, info = lapack.zposv(a, b)                  # both (upper triangle of a by default)
    x = lapack.cho_solve(lapack.cho_factor(a), b)    # scipy.linalg.cho_factor / cho_solve

Functions (s, d: float32, float64; c, z: complex64, complex128):
    ?potrf(a, lower=0, clean=1, overwrite_a=0) -> (c, info)
    ?potrs(c, b, lower=0, overwrite_b=0) -> (x, info)
    ?posv(a, b, lower=0, overwrite_a=0, overwrite_b=0) -> (c, x, info)
and cho_factor(a, lower=False, overwrite_a=False, check_finite=True) -> (c, lower),
cho_solve((c, lower), b, overwrite_b=False, check_finite=True) -> x.
LU with partial pivoting (LAPACK's pivots, piv 0-based int32 as scipy returns it):
    ?getrf(a, overwrite_a=0) -> (lu, piv, info)       (info > 0: U[info-1, info-1] is exactly zero)
    ?getrs(lu, piv, b, trans=0, overwrite_b=0) -> (x, info)
    ?gesv(a, b, overwrite_a=0, overwrite_b=0) -> (lu, piv, x, info)
and lu_factor(a, overwrite_a=False, check_finite=True) -> (lu, piv), lu_solve((lu, piv), b, trans=0,
overwrite_b=False, check_finite=True) -> x.

As scipy's: lower=0 means the upper triangle (a = U^H U); only that triangle of a is read. info > 0
is LAPACK's: the leading minor of that order is not positive definite (the factor is incomplete);
cho_factor raises numpy.linalg.LinAlgError then. clean=1 zeros the other triangle of c; clean=0
leaves a's values there. The result is a new Fortran-ordered array, or a (b) itself when
overwrite_a (overwrite_b) is set and it already is a writable 2-D array of the dtype with one
unit-stride axis. b may be 1-D (one right-hand side), as scipy allows.

Keyword-only extras: devices (default 'auto': the GPUs, else the CPU), memory_budget (bytes or '8MiB'), kernel ('auto', the
default: GEMM tiles on the fastest measured GEMM kernel, the other tiles on 'vendor'; or 'vendor', 'tiled', 'naive',
'reference'): the settings of tilestream.matmul's contexts, shared with it.
"""

import numpy as np

from . import _context, _wait
from .blas import _DTYPES, _flag, _matrix, _output, _run

__all__ = ["cho_factor", "cho_solve", "lu_factor", "lu_solve"]

_EXTRAS = ("devices", "memory_budget", "kernel")


def _per_precision(doc):
    """Makes ?<stem> for s, d, c and z, a family written once: make(dtype, fname) returns the
    function, which gets the name fname, doc as its docstring ({fname} and {prefix} filled in), and
    a place in the module and __all__. The stem is make's name without its leading underscore."""
    def register(make):
        for prefix in "sdcz":
            fname = prefix + make.__name__.lstrip("_")
            f = make(_DTYPES[prefix], fname)
            f.__name__ = f.__qualname__ = fname
            f.__doc__ = doc.format(fname=fname, prefix=prefix)
            globals()[fname] = f
            __all__.append(fname)
        return make
    return register


def _square(a, dtype, name, fname):
    m = _matrix(a, dtype, name, fname)
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"{fname}: {name} must be square, got shape {m.shape}")
    return m


def _factor(c, lower, devices, memory_budget, kernel):
    """Runs potrf on c (written in place) and returns LAPACK's info."""
    ctx = _context(devices, memory_budget, kernel)
    run = ctx._native.start_blas3("potrf", "left", "lower" if lower else "upper", "n", "non-unit", 1.0, 0.0,
                                  None, None, c)
    return int(_wait(run, None)["info"])


def _rhs(b, n, dtype, overwrite, fname):
    """B as the 2-D array the solves write, and whether the caller gave a 1-D one."""
    b_arr = np.asarray(b)
    if b_arr.ndim not in (1, 2):
        raise ValueError(f"{fname}: b must be 1-D or 2-D, got shape {b_arr.shape}")
    if b_arr.shape[0] != n:
        raise ValueError(f"{fname}: b has {b_arr.shape[0]} rows but the matrix is of order {n}")
    if b_arr.ndim == 1:
        return _output(b_arr.reshape(n, 1), (n, 1), dtype, False, "b", fname), True
    return _output(b, b_arr.shape, dtype, overwrite, "b", fname), False


def _solve(c, x, lower, extras):
    # a = L L^H: L y = b, then L^H x = y. a = U^H U: U^H y = b, then U x = y.
    first, second = (0, 2) if lower else (2, 0)
    for trans in (first, second):
        _run("trsm", 1.0, c, None, x, lower=lower, trans=trans, **extras)
    return x


@_per_precision("Cholesky factor of a Hermitian positive definite a: (c, info) with a = c^H c (lower=0) or "
                "c c^H (lower=1); scipy.linalg.lapack.{fname}(a, lower=0, clean=1, overwrite_a=0).")
def _potrf(dtype, fname):
    def potrf(a, lower=0, clean=1, overwrite_a=0, *, devices="auto", memory_budget=None, kernel="auto"):
        m = _square(a, dtype, "a", fname)
        c = _output(a, m.shape, dtype, overwrite_a, "a", fname)
        lower = bool(lower)
        info = _factor(c, lower, devices, memory_budget, kernel)
        if clean:
            n = c.shape[0]
            c[np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)] = 0
        return c, info

    return potrf


@_per_precision("Solves a x = b from a's Cholesky factor c: (x, info); scipy.linalg.lapack.{fname}(c, b, lower=0, "
                "overwrite_b=0).")
def _potrs(dtype, fname):
    def potrs(c, b, lower=0, overwrite_b=0, *, devices="auto", memory_budget=None, kernel="auto"):
        cm = _square(c, dtype, "c", fname)
        x, one = _rhs(b, cm.shape[0], dtype, overwrite_b, fname)
        _solve(cm, x, bool(lower), dict(devices=devices, memory_budget=memory_budget, kernel=kernel))
        return (x[:, 0] if one else x), 0

    return potrs


@_per_precision("Solves a x = b, a Hermitian positive definite, through its Cholesky factor: (c, x, info); "
                "scipy.linalg.lapack.{fname}(a, b, lower=0, overwrite_a=0, overwrite_b=0).")
def _posv(dtype, fname):
    def posv(a, b, lower=0, overwrite_a=0, overwrite_b=0, *, devices="auto", memory_budget=None, kernel="auto"):
        m = _square(a, dtype, "a", fname)
        x, one = _rhs(b, m.shape[0], dtype, overwrite_b, fname)
        c = _output(a, m.shape, dtype, overwrite_a, "a", fname)
        lower = bool(lower)
        info = _factor(c, lower, devices, memory_budget, kernel)
        if info == 0:
            _solve(c, x, lower, dict(devices=devices, memory_budget=memory_budget, kernel=kernel))
        return c, (x[:, 0] if one else x), info

    return posv


def _prefix_of(*arrays):
    """The LAPACK prefix scipy's find_best_lapack_type picks: s, d, c or z (integers: d)."""
    t = np.result_type(*[np.asarray(x).dtype for x in arrays], np.float32)
    if t == np.float32:
        return "s"
    if t == np.complex64:
        return "c"
    return "z" if np.issubdtype(t, np.complexfloating) else "d"


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True, **extras):
    """scipy.linalg.cho_factor: (c, lower), c holding the factor in its `lower` triangle (the other
    triangle keeps a's values); numpy.linalg.LinAlgError when a is not positive definite."""
    a = np.asarray_chkfinite(a) if check_finite else np.asarray(a)
    c, info = globals()[_prefix_of(a) + "potrf"](a, lower=lower, clean=0, overwrite_a=overwrite_a, **extras)
    if info > 0:
        raise np.linalg.LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    return c, lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True, **extras):
    """scipy.linalg.cho_solve: x with a x = b, from cho_factor's (c, lower)."""
    c, lower = c_and_lower
    if check_finite:
        c, b = np.asarray_chkfinite(c), np.asarray_chkfinite(b)
    x, _ = globals()[_prefix_of(c, b) + "potrs"](c, b, lower=lower, overwrite_b=overwrite_b, **extras)
    return x


# ---- LU: ?getrf, ?getrs, ?gesv (the native start_getrf / start_getrs: tilestream's getrf and getrs) ----

def _pivots_in(piv, n, fname):
    """scipy's 0-based pivots as the library's 1-based int64 ones, checked."""
    p = np.asarray(piv)
    if p.ndim != 1 or p.shape[0] < n or not np.issubdtype(p.dtype, np.integer):
        raise ValueError(f"{fname}: piv must be a 1-D integer array of {n} entries (0-based, as ?getrf returns)")
    p = p[:n].astype(np.int64) + 1
    if n and (p.min() < 1 or p.max() > n):
        raise ValueError(f"{fname}: piv holds a row outside 0..{n - 1}")
    return np.ascontiguousarray(p)


def _getrf_into(lu, ipiv, devices, memory_budget, kernel):
    """Factors lu in place (ipiv: int64, 1-based) and returns LAPACK's info."""
    if lu.size == 0:
        return 0
    ctx = _context(devices, memory_budget, kernel)
    return int(_wait(ctx._native.start_getrf(lu, ipiv), None)["info"])


@_per_precision("a = P L U with partial pivoting: (lu, piv, info), piv 0-based, info > 0 when U[info-1, info-1] "
                "is exactly zero (the factorization is complete); scipy.linalg.lapack.{fname}(a, overwrite_a=0).")
def _getrf(dtype, fname):
    def getrf(a, overwrite_a=0, *, devices="auto", memory_budget=None, kernel="auto"):
        m = _matrix(a, dtype, "a", fname)
        lu = _output(a, m.shape, dtype, overwrite_a, "a", fname)
        ipiv = np.zeros(min(lu.shape), dtype=np.int64)
        info = _getrf_into(lu, ipiv, devices, memory_budget, kernel)
        return lu, (ipiv - 1).astype(np.int32), info

    return getrf


@_per_precision("Solves op(a) x = b (trans 0: a, 1: a^T, 2: a^H) with {prefix}getrf's lu and piv: (x, info); "
                "scipy.linalg.lapack.{fname}(lu, piv, b, trans=0, overwrite_b=0).")
def _getrs(dtype, fname):
    def getrs(lu, piv, b, trans=0, overwrite_b=0, *, devices="auto", memory_budget=None, kernel="auto"):
        trans = _flag(trans, "trans", (0, 1, 2), fname)
        lu_m = _square(lu, dtype, "lu", fname)
        n = lu_m.shape[0]
        ipiv = _pivots_in(piv, n, fname)
        x, one = _rhs(b, n, dtype, overwrite_b, fname)
        if x.size:
            ctx = _context(devices, memory_budget, kernel)
            _wait(ctx._native.start_getrs("ntc"[trans], lu_m, ipiv, x), None)
        return (x[:, 0] if one else x), 0

    return getrs


@_per_precision("Solves a x = b through a = P L U: (lu, piv, x, info), x not solved when info > 0; "
                "scipy.linalg.lapack.{fname}(a, b, overwrite_a=0, overwrite_b=0).")
def _gesv(dtype, fname):
    def gesv(a, b, overwrite_a=0, overwrite_b=0, *, devices="auto", memory_budget=None, kernel="auto"):
        m = _square(a, dtype, "a", fname)
        x, one = _rhs(b, m.shape[0], dtype, overwrite_b, fname)
        lu = _output(a, m.shape, dtype, overwrite_a, "a", fname)
        ipiv = np.zeros(m.shape[0], dtype=np.int64)
        info = _getrf_into(lu, ipiv, devices, memory_budget, kernel)
        if info == 0 and x.size:
            ctx = _context(devices, memory_budget, kernel)
            _wait(ctx._native.start_getrs("n", lu, ipiv, x), None)
        return lu, (ipiv - 1).astype(np.int32), (x[:, 0] if one else x), info

    return gesv


def lu_factor(a, overwrite_a=False, check_finite=True, **extras):
    """scipy.linalg.lu_factor: (lu, piv); a RuntimeWarning (scipy: LinAlgWarning) when U has an exactly
    zero diagonal element."""
    a = np.asarray_chkfinite(a) if check_finite else np.asarray(a)
    lu, piv, info = globals()[_prefix_of(a) + "getrf"](a, overwrite_a=overwrite_a, **extras)
    if info > 0:
        import warnings
        warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.", RuntimeWarning, stacklevel=2)
    return lu, piv


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True, **extras):
    """scipy.linalg.lu_solve: x with op(a) x = b from lu_factor's (lu, piv)."""
    lu, piv = lu_and_piv
    if check_finite:
        lu, b = np.asarray_chkfinite(lu), np.asarray_chkfinite(b)
    x, _ = globals()[_prefix_of(lu, b) + "getrs"](lu, piv, b, trans=trans, overwrite_b=overwrite_b, **extras)
    return x
