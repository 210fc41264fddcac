"""complex64 and complex128 under numpy.matmul's rules, as the real dtypes: odd shapes, C and F
order, transposed and strided views, memmaps, out= (poisoned with NaN), complex alpha and beta as
Python complex numbers, numpy's promotion of mixed real and complex operands, in place and out of
core. Results against numpy's complex128 product within the GEMM error bound (conftest.check)."""

import numpy as np
import pytest

import tilestream
from conftest import check, random

COMPLEX = (np.complex64, np.complex128)


def crandom(rng, shape, dtype=np.complex128, order="C"):
    """Both parts uniform in [-1, 1), never 0."""
    return np.asarray(random(rng, shape) + 1j * random(rng, shape), dtype=dtype, order=order)


def poisoned(shape, dtype, order="C"):
    return np.full(shape, complex(np.nan, np.nan), dtype=dtype, order=order)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("order_a, order_b", [("C", "C"), ("F", "C"), ("C", "F"), ("F", "F")])
def test_orders(in_place, rng, dtype, order_a, order_b):
    a, b = crandom(rng, (37, 29), dtype, order_a), crandom(rng, (29, 23), dtype, order_b)
    r, text = in_place.matmul(a, b, explain=True)
    check(r, a, b, dtype=dtype)
    assert "every operand used where it lies" in text


@pytest.mark.parametrize("dtype", COMPLEX)
def test_views_and_out_of_core(in_place, out_of_core, rng, dtype):
    base_a, base_b = crandom(rng, (31, 50), dtype), crandom(rng, (44, 27), dtype)
    a = base_a[:, 3:44].T  # 41 x 31, column-major view with a leading dimension of 50
    b = base_b[5:36, 2:20]  # 31 x 18, rows 27 elements apart
    for ctx in (in_place, out_of_core):
        r, text = ctx.matmul(a, b, explain=True)
        check(r, a, b, dtype=dtype)
        assert "no copy" in text or "where it lies" in text
    # no unit-stride axis: copied (said), still right
    c_view = base_a[::2, ::3]  # 16 x 17
    d = crandom(rng, (17, 9), dtype)
    r, text = in_place.matmul(c_view, d, explain=True)
    check(r, c_view, d, dtype=dtype)
    assert "a: strides" in text


@pytest.mark.parametrize("dtype", COMPLEX)
def test_alpha_beta_and_out(in_place, out_of_core, rng, dtype):
    a, b, c = crandom(rng, (19, 33), dtype), crandom(rng, (33, 21), dtype), crandom(rng, (19, 21), dtype)
    alpha, beta = 1.5 - 0.75j, -0.5 + 2j
    for ctx in (in_place, out_of_core):
        out = poisoned((19, 21), dtype, "F")
        assert ctx.matmul(a, b, out, alpha=alpha, beta=beta, c=c) is out
        check(out, a, b, alpha, beta, c, dtype=dtype)
        # the BLAS in-place update: c is out
        acc = c.copy()
        ctx.matmul(a, b, acc, alpha=2j, beta=1j, c=acc)
        check(acc, a, b, 2j, 1j, c, dtype=dtype)
        # numpy complex scalars and a real alpha work too
        r = ctx.matmul(a, b, alpha=np.complex64(0.5 + 0.5j))
        check(r, a, b, 0.5 + 0.5j, dtype=dtype)
    # alpha == 0: C = beta C, A and B never read
    nan_a = np.full((19, 33), complex(np.nan, np.nan), dtype)
    r = in_place.matmul(nan_a, b, alpha=0, beta=1 - 1j, c=c)
    np.testing.assert_allclose(r, (1 - 1j) * c.astype(np.complex128), rtol=4 * np.finfo(dtype).eps)


def test_out_dtypes_like_numpy(in_place, rng):
    a, b = crandom(rng, (13, 11)), crandom(rng, (11, 7))
    out = poisoned((13, 7), np.complex64)  # complex128 result into complex64: same_kind, through a temporary
    r, text = in_place.matmul(a, b, out, explain=True)
    assert r is out and "out: dtype complex64" in text
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    for bad in (np.empty((13, 7)), np.empty((13, 7), np.float32)):
        with pytest.raises(TypeError, match=r"Cannot cast ufunc 'matmul' output from dtype\('complex128'\)"):
            in_place.matmul(a, b, bad)
        with pytest.raises(TypeError, match="same_kind"):
            np.matmul(a, b, out=bad)  # numpy refuses the same
    # a real product into a complex out is fine (numpy too)
    x, y = random(rng, (13, 11)), random(rng, (11, 7))
    out = poisoned((13, 7), np.complex128)
    in_place.matmul(x, y, out)
    np.testing.assert_allclose(out, np.matmul(x, y), rtol=1e-12)


@pytest.mark.parametrize("ta, tb", [(np.float32, np.complex64), (np.complex64, np.float64), (np.int32, np.complex64),
                                    (np.complex64, np.complex128), (np.float16, np.complex128)])
def test_mixed_real_and_complex_promote_as_numpy(in_place, rng, ta, tb):
    a = random(rng, (23, 17)).astype(ta) if np.dtype(ta).kind != "c" else crandom(rng, (23, 17), ta)
    if np.dtype(ta).kind == "i":
        a = rng.integers(-9, 10, (23, 17)).astype(ta)
    b = crandom(rng, (17, 15), tb) if np.dtype(tb).kind == "c" else random(rng, (17, 15)).astype(tb)
    want = np.matmul(a, b)
    r, text = in_place.matmul(a, b, explain=True)
    assert r.dtype == want.dtype
    assert "converted from" in text
    check(r, a, b, dtype=want.dtype)


def test_memmap_lists_vectors_and_keep(in_place, out_of_core, rng, tmp_path):
    a = np.memmap(tmp_path / "a.c16", np.complex128, "w+", shape=(27, 25), order="F")
    a[:] = crandom(rng, (27, 25))
    b = crandom(rng, (25, 9))
    r, text = out_of_core.matmul(a, b, explain=True)
    assert type(r) is np.ndarray
    check(r, a, b, dtype=np.complex128)
    assert "where it lies" in text
    # Python lists of complex numbers: numpy's complex128
    r = tilestream.matmul([[1 + 2j, 3], [4j, -1]], [[2], [1 - 1j]], devices="cpu")
    np.testing.assert_allclose(r, np.matmul([[1 + 2j, 3], [4j, -1]], [[2], [1 - 1j]]), rtol=1e-15)
    v = crandom(rng, (25,), np.complex64)
    rv = in_place.matmul(b.T.astype(np.complex64), v)
    assert rv.shape == (9,) and rv.dtype == np.complex64
    np.testing.assert_allclose(rv, np.matmul(b.T.astype(np.complex64), v), rtol=1e-4)
    with out_of_core.keep(np.asarray(a)) as kept:
        assert kept.active
        check(out_of_core.matmul(a, b), a, b)
        check(out_of_core.matmul(a, b), a, b)


def test_complex_scalars_with_real_results_refused(in_place, rng):
    a, b = random(rng, (5, 4)), random(rng, (4, 3))
    with pytest.raises(TypeError, match=r"beta = \(1\+1j\) is complex and the result is real"):
        in_place.matmul(a, b, beta=1 + 1j, c=np.ones((5, 3)))
    check(in_place.matmul(a, b, alpha=2 + 0j), a, b, 2.0)  # a zero imaginary part is a real alpha
