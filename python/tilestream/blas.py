"""Level 3 BLAS with the names and arguments of scipy.linalg.blas, run by tilestream (all devices,
out of core when the operands do not fit):

    from tilestream import blas
    c = blas.dsyrk(1.0, a)                           # upper triangle of a @ a.T (the rest zeros)
    x = blas.dtrsm(2.0, t, b, lower=1)               # solves t @ x = 2 b, t lower triangular
    c = blas.zherk(1.0, a, trans=2, lower=1)         # lower triangle of a^H @ a

Functions (s, d: float32, float64; c, z: complex64, complex128):
    ?symm(alpha, a, b, beta=0, c=None, side=0, lower=0, overwrite_c=0)   c, z also ?hemm
    ?syrk(alpha, a, beta=0, c=None, trans=0, lower=0, overwrite_c=0)     c, z also ?herk
    ?syr2k(alpha, a, b, beta=0, c=None, trans=0, lower=0, overwrite_c=0) c, z also ?her2k
    ?trmm(alpha, a, b, overwrite_b=0, lower=0, trans_a=0, side=0, diag=0)
    ?trsm(alpha, a, b, overwrite_b=0, lower=0, trans_a=0, side=0, diag=0)

As scipy's: lower=0 means the upper triangle (of A; of C for the rank-k updates), side=0 left,
trans/trans_a 0 'N', 1 'T', 2 'C' (herk and her2k take 0 or 2; complex syrk and syr2k 0 or 1),
diag=0 non-unit. The operands are converted to the function's dtype (a complex operand of a real
function is a TypeError). The result is a new Fortran-ordered array, or c (b for trmm and trsm)
itself when overwrite_c (overwrite_b) is set and it already is a writable 2-D array of the dtype
with one unit-stride axis (C or Fortran order). With c=None, C starts as zeros, so a rank-k update
returns the named triangle and zeros elsewhere, as scipy's does. beta = 0 never reads c, alpha = 0
never reads a or b (BLAS's semantics).

Keyword-only extras: devices (default 'auto': the GPUs, else the CPU), memory_budget (bytes or '8MiB'), kernel ('auto', the
default: GEMM tiles on the fastest measured GEMM kernel, the other tiles on 'vendor'; or 'vendor', 'tiled', 'naive',
'reference'): the settings of tilestream.matmul's contexts, shared with it.
"""

import numpy as np

from . import _as_operand, _checks, _context, _wait

__all__ = []

_DTYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}


def _flag(value, name, allowed, fname):
    v = _checks.integer(value, name)
    if v not in allowed:
        raise ValueError(f"{fname}: {name}={v} is not one of {', '.join(str(a) for a in allowed)}")
    return v


def _matrix(x, dtype, name, fname):
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{fname}: {name} must be 2-D, got shape {x.shape}")
    if np.iscomplexobj(x) and not np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"{fname}: {name} is complex ({x.dtype}) but {fname} computes in {np.dtype(dtype).name}; "
                        f"use the c or z function")
    return _as_operand(x, np.dtype(dtype), name, [])


def _scalar(value, name, fname, real):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, complex, np.number)):
        raise TypeError(f"{fname}: {name} must be a number, got {type(value).__name__}")
    value = complex(value)
    if real and value.imag != 0:
        raise ValueError(f"{fname}: {name} must be real, got {value}")
    return value


def _output(c, shape, dtype, overwrite, name, fname):
    """The array the routine writes: c itself when it may be overwritten and is a BLAS operand of
    the dtype, else a Fortran-ordered copy (zeros when c is None)."""
    if c is None:
        return np.zeros(shape, dtype, order="F")
    c_arr = np.asarray(c)
    if c_arr.shape != tuple(shape):
        raise ValueError(f"{fname}: {name} has shape {c_arr.shape}, expected {tuple(shape)}")
    if np.iscomplexobj(c_arr) and not np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"{fname}: {name} is complex ({c_arr.dtype}) but {fname} computes in {np.dtype(dtype).name}")
    from . import _native
    if (overwrite and c_arr is c and c_arr.dtype == dtype and c_arr.flags.writeable
            and _native.operand_layout(c_arr) is not None):
        return c_arr
    return np.array(c_arr, dtype=dtype, order="F")


def _run(routine, alpha, a, b, c, beta=0, side=0, lower=0, trans=0, diag=0, devices="auto", memory_budget=None,
         kernel="auto"):
    ctx = _context(devices, memory_budget, kernel)
    run = ctx._native.start_blas3(routine, "right" if side else "left", "lower" if lower else "upper",
                                  "ntc"[trans], "unit" if diag else "non-unit", alpha, beta, a, b, c)
    _wait(run, None)
    return c


def _make_mm(prefix, routine):
    dtype = _DTYPES[prefix]
    fname = prefix + routine

    def mm(alpha, a, b, beta=0, c=None, side=0, lower=0, overwrite_c=0, *, devices="auto", memory_budget=None,
           kernel="auto"):
        alpha = _scalar(alpha, "alpha", fname, prefix in "sd")
        beta = _scalar(beta, "beta", fname, prefix in "sd")
        side = _flag(side, "side", (0, 1), fname)
        a = _matrix(a, dtype, "a", fname)
        b = _matrix(b, dtype, "b", fname)
        out = _output(c, b.shape, dtype, overwrite_c, "c", fname)
        return _run(routine, alpha, a, b, out, beta, side=side, lower=bool(lower), devices=devices,
                    memory_budget=memory_budget, kernel=kernel)

    mm.__name__ = mm.__qualname__ = fname
    mm.__doc__ = (f"c = alpha*a@b + beta*c (side=0) or alpha*b@a + beta*c (side=1), a "
                  f"{'Hermitian' if routine == 'hemm' else 'symmetric'} (its lower or upper triangle read); "
                  f"scipy.linalg.blas.{fname}'s arguments.")
    return mm


def _make_rk(prefix, routine):
    dtype = _DTYPES[prefix]
    fname = prefix + routine
    two = routine.endswith("2k")
    hermitian = routine.startswith("her")
    allowed = (0, 2) if hermitian else (0, 1) if prefix in "cz" else (0, 1, 2)

    def rk(alpha, a, *args, **kwargs):
        if two:
            if not args and "b" not in kwargs:
                raise TypeError(f"{fname}() missing required argument 'b'")
            b = args[0] if args else kwargs.pop("b")
            args = args[1:]
        names = ("beta", "c", "trans", "lower", "overwrite_c")
        if len(args) > len(names):
            raise TypeError(f"{fname}() takes at most {len(names) + 2 + two} positional arguments")
        opts = dict(zip(names, args))
        for k in kwargs:
            if k in opts:
                raise TypeError(f"{fname}() got multiple values for argument '{k}'")
        opts.update(kwargs)
        known = set(names) | {"devices", "memory_budget", "kernel"}
        for k in opts:
            if k not in known:
                raise TypeError(f"{fname}() got an unexpected keyword argument '{k}'")
        al = _scalar(alpha, "alpha", fname, prefix in "sd" or routine == "herk")
        be = _scalar(opts.get("beta", 0), "beta", fname, prefix in "sd" or hermitian)
        trans = _flag(opts.get("trans", 0), "trans", allowed, fname)
        a_m = _matrix(a, dtype, "a", fname)
        b_m = _matrix(b, dtype, "b", fname) if two else None
        n = a_m.shape[0] if trans == 0 else a_m.shape[1]
        out = _output(opts.get("c"), (n, n), dtype, opts.get("overwrite_c", 0), "c", fname)
        if prefix in "sd" and trans == 2:
            trans = 1  # 'C' on real data is 'T'
        return _run(routine, al, a_m, b_m, out, be, lower=bool(opts.get("lower", 0)), trans=trans,
                    devices=opts.get("devices", "auto"), memory_budget=opts.get("memory_budget"),
                    kernel=opts.get("kernel", "auto"))

    what = "a@a^H" if hermitian and not two else "a@b^H + b@a^H" if two and hermitian else \
        "a@b^T + b@a^T" if two else "a@a^T"
    rk.__name__ = rk.__qualname__ = fname
    rk.__doc__ = (f"c = alpha*{what} + beta*c (trans=0; the transposed products for trans != 0) on the named "
                  f"triangle of c; scipy.linalg.blas.{fname}({'alpha, a, b' if two else 'alpha, a'}, beta=0, c=None, "
                  f"trans=0, lower=0, overwrite_c=0).")
    return rk


def _make_tr(prefix, routine):
    dtype = _DTYPES[prefix]
    fname = prefix + routine

    def tr(alpha, a, b, overwrite_b=0, lower=0, trans_a=0, side=0, diag=0, *, devices="auto", memory_budget=None,
           kernel="auto"):
        alpha = _scalar(alpha, "alpha", fname, prefix in "sd")
        trans = _flag(trans_a, "trans_a", (0, 1, 2), fname)
        if prefix in "sd" and trans == 2:
            trans = 1
        side = _flag(side, "side", (0, 1), fname)
        diag = _flag(diag, "diag", (0, 1), fname)
        a = _matrix(a, dtype, "a", fname)
        b_arr = np.asarray(b)
        if b_arr.ndim != 2:
            raise ValueError(f"{fname}: b must be 2-D, got shape {b_arr.shape}")
        out = _output(b, b_arr.shape, dtype, overwrite_b, "b", fname)
        return _run(routine, alpha, a, None, out, side=side, lower=bool(lower), trans=trans, diag=diag,
                    devices=devices, memory_budget=memory_budget, kernel=kernel)

    tr.__name__ = tr.__qualname__ = fname
    tr.__doc__ = ("b = alpha*op(a)@b (side=0) or alpha*b@op(a) (side=1), a triangular" if routine == "trmm" else
                  "x with op(a)@x = alpha*b (side=0) or x@op(a) = alpha*b (side=1), a triangular") + \
        f"; scipy.linalg.blas.{fname}'s arguments."
    return tr


for _p in "sdcz":
    for _r in ("symm", "syrk", "syr2k", "trmm", "trsm") + (("hemm", "herk", "her2k") if _p in "cz" else ()):
        _f = (_make_mm if _r.endswith("mm") and _r not in ("trmm",) else
              _make_rk if _r in ("syrk", "herk", "syr2k", "her2k") else _make_tr)(_p, _r)
        globals()[_f.__name__] = _f
        __all__.append(_f.__name__)
del _p, _r, _f
