"""matmul follows numpy.matmul's conventions or says why not: numpy's result dtypes (float16
included), out= cast with casting='same_kind' and written through when strided or unaligned,
np.matrix kept, integer/bool results, masked arrays, ufunc overrides and stacks refused with a
TypeError or ValueError saying what to do; unaligned operands copied; alpha and beta within the
computed type's range; and every wrong argument of every public call answered with one sentence."""

import numpy as np
import pytest

import tilestream
from conftest import check, random


def unaligned(x):
    """A copy of x whose data starts one byte past an element boundary (C order)."""
    raw = bytearray(x.nbytes + 1)
    y = np.frombuffer(raw, x.dtype, x.size, offset=1).reshape(x.shape)
    y[...] = x
    assert not y.flags.aligned
    return y


@pytest.mark.parametrize("ta, tb", [(np.float32, np.float32), (np.float32, np.float64), (np.float16, np.float16),
                                    (np.float16, np.float32), (np.int8, np.float32), (np.int32, np.float32),
                                    (np.int64, np.float16), (np.bool_, np.float32), (np.uint16, np.float64)])
def test_result_dtype_is_numpys(in_place, rng, ta, tb):
    a = random(rng, (23, 19), np.float64) * (9 if np.dtype(ta).kind in "iu" else 1)
    b = random(rng, (19, 11), np.float64)
    a, b = a.astype(ta), b.astype(tb)
    if np.dtype(ta).kind in "iu":
        a[a == 0] = 1
    r = in_place.matmul(a, b)
    ref = np.matmul(a, b)
    assert type(r) is np.ndarray and r.dtype == ref.dtype
    check(r, a, b)
    if r.dtype == np.float16:  # summed in float32 and rounded once, as numpy's float16 loop
        np.testing.assert_allclose(r.astype(np.float64), ref.astype(np.float64), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("ta, tb", [(np.int64, np.int64), (np.int8, np.uint8), (np.bool_, np.bool_),
                                    (np.int32, np.bool_)])
def test_integer_and_bool_results_are_refused(in_place, ta, tb):
    a, b = np.ones((3, 4), ta), np.ones((4, 2), tb)
    with pytest.raises(TypeError, match=r"exact .* products.*astype\(np.float64\)"):
        in_place.matmul(a, b)
    with pytest.raises(TypeError, match="exact int64"):
        tilestream.matmul([[1, 2], [3, 4]], [[5], [6]], devices="cpu")  # lists of ints: numpy gives int64


def test_longdouble_and_clongdouble_are_refused(in_place):
    a = np.ones((3, 3))
    with pytest.raises(TypeError, match="longdouble|float128"):
        in_place.matmul(a.astype(np.longdouble), a)
    with pytest.raises(TypeError, match="clongdouble|complex256"):
        in_place.matmul(a.astype(np.clongdouble), a)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_np_matrix_stays_a_matrix(in_place, rng):
    a, b = np.matrix(random(rng, (7, 5))), np.matrix(random(rng, (5, 3)))
    r = in_place.matmul(a, b)
    ref = np.matmul(a, b)
    assert type(r) is np.matrix and r.shape == ref.shape
    check(np.asarray(r), np.asarray(a), np.asarray(b))
    v = random(rng, (5,))
    rv, refv = in_place.matmul(a, v), np.matmul(a, v)
    assert type(rv) is type(refv) and rv.shape == refv.shape  # numpy: a (1, 7) matrix
    np.testing.assert_allclose(rv, refv, rtol=1e-12)


def test_memmap_result_is_an_ndarray_as_numpys(in_place, rng, tmp_path):
    a = np.memmap(tmp_path / "a.dat", np.float64, "w+", shape=(6, 5))
    a[:] = random(rng, (6, 5))
    b = random(rng, (5, 4))
    assert type(in_place.matmul(a, b)) is type(np.matmul(a, b)) is np.ndarray


def test_masked_arrays_and_ufunc_overrides_are_refused(in_place):
    masked = np.ma.array(np.ones((3, 3)), mask=np.eye(3, dtype=bool))
    with pytest.raises(TypeError, match=r"masked array.*filled\(0\)"):
        in_place.matmul(masked, np.ones((3, 3)))

    class Units(np.ndarray):
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return NotImplemented

    with pytest.raises(TypeError, match=r"defines its own numpy ufuncs.*np.asarray\(b\)"):
        in_place.matmul(np.ones((3, 3)), np.ones((3, 3)).view(Units))


def test_stacks_of_matrices_are_refused(in_place):
    with pytest.raises(ValueError, match="stack of matrices.*per matrix of the stack"):
        in_place.matmul(np.ones((2, 3, 4)), np.ones((2, 4, 5)))
    with pytest.raises(ValueError, match="stacks of matrices are not supported"):
        in_place.matmul(np.ones((3, 4)), np.ones((4, 5)), out=np.empty((1, 3, 5)))


@pytest.mark.parametrize("result, out_dtype", [(np.float64, np.float32), (np.float64, np.float16),
                                               (np.float32, np.float64), (np.float64, np.complex128),
                                               (np.float16, np.float64)])
def test_out_of_another_dtype_is_cast_same_kind(request, rng, result, out_dtype):
    ctx = request.getfixturevalue("in_place")
    a, b = random(rng, (21, 17)).astype(result), random(rng, (17, 9)).astype(result)
    out = np.full((21, 9), np.nan, out_dtype)
    ref = np.matmul(a, b, out=np.full((21, 9), np.nan, out_dtype))
    r, text = ctx.matmul(a, b, out, explain=True)
    assert r is out and out.dtype == out_dtype
    assert f"out: dtype {np.dtype(out_dtype)}" in text and "casting='same_kind'" in text
    tol = 2e-3 if np.float16 in (result, out_dtype) else 1e-5 if np.float32 in (result, out_dtype) else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def test_out_casts_refused_as_numpy_refuses(in_place, rng):
    a, b = random(rng, (5, 4)), random(rng, (4, 3))
    for out in (np.empty((5, 3), np.int64), np.empty((5, 3), bool)):
        with pytest.raises(TypeError, match=r"Cannot cast ufunc 'matmul' output from dtype\('float64'\) to .* "
                                            r"with casting rule 'same_kind'"):
            in_place.matmul(a, b, out)
        with pytest.raises(TypeError, match="same_kind"):
            np.matmul(a, b, out=out)  # numpy says the same


def test_strided_and_unaligned_out_are_written_through(in_place, out_of_core, rng):
    a, b = random(rng, (13, 11)), random(rng, (11, 7))
    for ctx in (in_place, out_of_core):
        base = np.full((26, 21), np.nan)
        out = base[::2, ::3]  # no unit-stride axis: numpy writes through
        assert ctx.matmul(a, b, out) is out
        check(out, a, b)
        rest = base.copy()
        rest[::2, ::3] = 0
        assert np.isnan(rest).sum() == base.size - out.size  # nothing else written
        u = unaligned(np.full((13, 7), np.nan))
        assert ctx.matmul(a, b, u) is u
        check(u, a, b)
    # beta with c = out through the temporary: out's values are c
    c = random(rng, (13, 7)).astype(np.float32)
    out = c.copy()
    r = in_place.matmul(a, b, out, beta=2.0, c=out)
    assert r is out and r.dtype == np.float32
    check(r, a, b, beta=2.0, c=c)


def test_unaligned_operands_are_copied(in_place, out_of_core, rng):
    for dtype in (np.float32, np.float64):
        a, b = random(rng, (17, 12), dtype), random(rng, (12, 9), dtype)
        ua, ub = unaligned(a), unaligned(b)
        for ctx in (in_place, out_of_core):
            r, text = ctx.matmul(ua, ub, explain=True)
            check(r, a, b, dtype=dtype)
            assert "a: is not aligned to its element size, copied" in text
        r = in_place.matmul(ua.T, unaligned(np.ascontiguousarray(a)))  # a transposed unaligned view
        check(r, a.T, a)
    start = unaligned(random(rng, (9, 8)))
    field = tilestream.jacobi(8, 9, iters=3, devices="cpu", start=start)
    assert field.dtype == np.float64 and np.isfinite(field).all()


def test_alpha_and_beta_must_fit_the_computed_type(in_place, rng):
    a32, b32 = random(rng, (5, 4), np.float32), random(rng, (4, 3), np.float32)
    with pytest.raises(ValueError, match=r"alpha = 1e\+39 is beyond the range of float32.*float64 operands"):
        in_place.matmul(a32, b32, alpha=1e39)
    with pytest.raises(ValueError, match="beta = -1e\\+39 is beyond the range of float32"):
        in_place.matmul(a32, b32, beta=-1e39, c=np.ones((5, 3), np.float32))
    with pytest.raises(ValueError, match="alpha = 1000.* is beyond the range of a float"):
        in_place.matmul(a32, b32, alpha=10**400)
    r = in_place.matmul(a32.astype(np.float64), b32, alpha=1e39)  # fits float64
    check(r, a32, b32, alpha=1e39)
    check(in_place.matmul(a32, b32, alpha=1e37), a32, b32, alpha=1e37)  # within float32's range


BAD = [None, 2**63, -(2**63) - 1, 2**64, 10**400, "x", object(), [1, 2], 1.5, True]


def one_clear_sentence(f, *args, **kwargs):
    """f(...) either works or raises TypeError/ValueError/MemoryError with one line of text that
    is not a pybind11 signature dump nor an internal message."""
    try:
        f(*args, **kwargs)
    except (TypeError, ValueError, MemoryError) as e:
        text = str(e)
        assert text and "\n" not in text, repr(text)
        for dump in ("incompatible function arguments", "Invoked with", "internal:", "_tilestream"):
            assert dump not in text, text


@pytest.mark.parametrize("bad", BAD, ids=["None", "2^63", "-2^63-1", "2^64", "10^400", "str", "object", "list", "float",
                                         "bool"])
def test_wrong_arguments_get_one_clear_sentence(in_place, rng, bad):
    a, b = random(rng, (5, 4)), random(rng, (4, 3))
    for name in ("a", "b"):
        one_clear_sentence(tilestream.matmul, **{"a": a, "b": b, "devices": "cpu", name: bad})
    for name in ("out", "alpha", "beta", "c", "devices", "memory_budget", "kernel", "strategy", "progress"):
        kwargs = {"devices": "cpu", "beta": 1 if name == "c" else 0, name: bad}
        one_clear_sentence(tilestream.matmul, a, b, **kwargs)
    for name in ("devices", "memory_budget", "kernel", "cpu_threads", "math", "cache"):
        one_clear_sentence(tilestream.Context, **{"devices": "cpu", name: bad})
    one_clear_sentence(in_place.matmul, a, b, strategy="tiles-3d", tile=bad)
    one_clear_sentence(in_place.matmul, a, b, strategy="tiles-3d", tile=(4, bad, 4))
    one_clear_sentence(in_place.keep, bad)
    one_clear_sentence(in_place.plan, a, b, kernel=bad)
    for name in ("nx", "ny", "dtype", "iters", "tol", "check_every", "devices", "decomposition", "memory_budget",
                 "start"):
        kwargs = {"nx": 10, "ny": 9, "iters": 2, "devices": "cpu", name: bad}
        one_clear_sentence(tilestream.jacobi, **kwargs)
    one_clear_sentence(tilestream.parse_bytes, bad)
