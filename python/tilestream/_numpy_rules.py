"""numpy.matmul's conventions, applied around tilestream's computation: the result dtype is
numpy's, computed in the dtype one table gives (or refused with a TypeError saying what to do);
out= is checked as numpy checks it and cast with casting='same_kind', written through when
tilestream cannot write into it directly; subclasses come back as numpy returns them (np.matrix
stays np.matrix, np.memmap gives an ndarray), and those numpy's matmul treats in its own way
(masked arrays, __array_ufunc__ overrides) are refused. Never a silent change of type."""

import numpy as np

from ._checks import kind_of

SIGNATURE = "(n?,k),(k,m?)->(n?,m?)"

#: numpy's result dtype -> the dtype tilestream's kernels compute it in. A result dtype not listed
#: is refused. float16 is summed in float32 and rounded once, as numpy's own float16 matmul loop
#: does. Complex results (numpy's promotion: float32 with complex64 gives complex64, float64 or an
#: integer with complex64 gives complex128) run on the complex kernels, a real operand converted.
COMPUTE_DTYPE = {
    np.dtype(np.float16): np.dtype(np.float32),
    np.dtype(np.float32): np.dtype(np.float32),
    np.dtype(np.float64): np.dtype(np.float64),
    np.dtype(np.complex64): np.dtype(np.complex64),
    np.dtype(np.complex128): np.dtype(np.complex128),
}


def operand(x, name):
    """x as an ndarray, without copying arrays (np.memmap included) or their views."""
    if x is None:
        raise TypeError(f"{name} must be an array (a numpy array or nested lists of numbers), got None")
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"tilestream.matmul: {name} is a masked array; tilestream does not apply masks (numpy's "
                        f"matmul would multiply the masked values too): pass {name}.filled(0) to multiply masked "
                        f"entries as zeros")
    override = getattr(type(x), "__array_ufunc__", np.ndarray.__array_ufunc__)
    if override is not np.ndarray.__array_ufunc__:
        raise TypeError(f"tilestream.matmul: {name} is a {type(x).__name__}, which defines its own numpy ufuncs "
                        f"(__array_ufunc__), so tilestream cannot know what matmul means for it: pass "
                        f"np.asarray({name}) to multiply its values")
    return np.asarray(x)


def check_numeric(x, name):
    if x.dtype.kind not in "biufc":
        raise TypeError(f"tilestream: {name} has dtype {x.dtype}, not a number type")


def result_dtypes(a, b):
    """(numpy's result dtype of a @ b, the dtype tilestream computes it in)."""
    check_numeric(a, "a")
    check_numeric(b, "b")
    dt = np.result_type(a.dtype, b.dtype)
    if dt.kind in "biu":
        raise TypeError(f"tilestream.matmul: numpy's matmul of {a.dtype} and {b.dtype} gives exact {dt} "
                        f"products, and tilestream multiplies floating-point matrices: convert the operands "
                        f"(a.astype(np.float64)) to get a float64 result, or use numpy.matmul")
    if dt not in COMPUTE_DTYPE:
        to = "complex128 or complex64" if dt.kind == "c" else "float64 or float32"
        raise TypeError(f"tilestream.matmul: the result would be {dt} (numpy's promotion of {a.dtype} and "
                        f"{b.dtype}), which tilestream has no kernel for: convert the operands to {to} first")
    return dt, COMPUTE_DTYPE[dt]


def check_scalar(value, name, compute):
    """alpha or beta must fit the dtype the product is computed in (never a silent infinity), and
    be real when the product is (its imaginary part is never dropped). Returns it as a float for a
    real product (1+0j is 1.0), a complex for a complex one."""
    if value.imag != 0 and compute.kind != "c":
        raise TypeError(f"matmul: {name} = {value} is complex and the result is real ({compute}): pass complex "
                        f"operands (a.astype(np.complex128)) for a complex result, or a real {name}")
    largest = float(np.finfo(compute).max)
    for part in (value.real, value.imag):
        if np.isfinite(part) and abs(part) > largest:
            wider = "complex128" if compute.kind == "c" else "float64"
            raise ValueError(f"matmul: {name} = {value:g} is beyond the range of {compute} (largest {largest:g}), the "
                             f"type the product is computed in: use a smaller {name} or {wider} operands")
    return complex(value) if compute.kind == "c" else float(value.real)


def check_out(out, shape, dtype):
    """out= as numpy's matmul checks it: an ndarray of the result's shape, writable, to which the
    result dtype casts with casting='same_kind'."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"return arrays must be of ArrayType (out is {kind_of(out)})")
    if out.ndim < len(shape):
        raise ValueError(f"matmul: Output operand 0 does not have enough dimensions (has {out.ndim}, gufunc core "
                         f"with signature {SIGNATURE} requires {len(shape)})")
    if out.ndim > len(shape):
        raise ValueError(f"matmul: Output operand 0 has {out.ndim} dimensions, the result {len(shape)}: stacks of "
                         f"matrices are not supported yet (tilestream does not broadcast)")
    for i, (have, want) in enumerate(zip(out.shape, shape)):
        if have != want:
            raise ValueError(f"matmul: Output operand 0 has a mismatch in its core dimension {i}, with gufunc "
                             f"signature {SIGNATURE} (size {have} is different from {want})")
    if not np.can_cast(dtype, out.dtype, casting="same_kind"):
        raise TypeError(f"Cannot cast ufunc 'matmul' output from {dtype!r} to {out.dtype!r} with casting rule "
                        f"'same_kind'")
    if not out.flags.writeable:
        raise ValueError("output array is read-only")


def wrap(result, inputs):
    """The result as numpy's ufuncs return it: through __array_wrap__ of the input subclass with
    the highest __array_priority__ (the first on ties), and a 0-d result as a scalar."""
    best = None
    for x in inputs:
        if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
            if best is None or x.__array_priority__ > best.__array_priority__:
                best = x
    if best is not None:
        result = best.__array_wrap__(result, (np.matmul, tuple(inputs), 0))
    if isinstance(result, np.ndarray) and result.ndim == 0:
        return result[()]
    return result
