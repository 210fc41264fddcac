"""Stacks of matrices with numpy's matmul broadcasting: every broadcasting case and odd sizes,
zero-size axes as numpy allows, out= and c= on stacks, views used where they lie, in place and
staged through a small budget (out of core), against numpy and against a loop of single calls."""

import numpy as np
import pytest

import tilestream
from conftest import check, random

CASES = [
    ((3, 7, 5), (3, 5, 4)),          # (b, m, k) @ (b, k, n)
    ((7, 5), (3, 5, 4)),             # (m, k) @ (b, k, n): A for every product
    ((3, 7, 5), (5, 4)),             # (b, m, k) @ (k, n)
    ((2, 1, 7, 5), (1, 3, 5, 4)),    # leading axes broadcast both ways
    ((4, 2, 3, 9, 2), (3, 2, 11)),   # more leading axes on one side
    ((5,), (3, 5, 4)),               # vector @ stack -> (b, n)
    ((3, 7, 5), (5,)),               # stack @ vector -> (b, m)
    ((1, 1, 1), (1, 1, 1)),
]
ZERO = [
    ((0, 7, 5), (0, 5, 4)),
    ((3, 0, 5), (3, 5, 4)),
    ((3, 7, 0), (3, 0, 4)),          # k = 0: zeros
    ((1, 7, 5), (0, 5, 4)),          # 1 and 0 broadcast to 0
    ((2, 7, 5), (2, 5, 0)),
]


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_broadcasting_case_matches_numpy(request, rng, where, dtype):
    ctx = request.getfixturevalue(where)
    for sa, sb in CASES:
        a, b = random(rng, sa, dtype), random(rng, sb, dtype)
        r = ctx.matmul(a, b)
        assert r.shape == np.matmul(a, b).shape, (sa, sb)
        check(r, a, b, dtype=dtype)


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_stacks_match_numpy(request, rng, where, dtype):
    ctx = request.getfixturevalue(where)
    for sa, sb in CASES:
        a = (random(rng, sa) + 1j * random(rng, sa)).astype(dtype)
        b = (random(rng, sb) + 1j * random(rng, sb)).astype(dtype)
        r = ctx.matmul(a, b, alpha=1.5 - 0.5j)
        assert r.shape == np.matmul(a, b).shape, (sa, sb)
        check(r, a, b, alpha=1.5 - 0.5j, dtype=dtype)
    # A real stack times a complex one: numpy's complex result, the real one converted.
    a, b = random(rng, (3, 7, 5), np.float32), (random(rng, (5, 4)) + 1j * random(rng, (5, 4))).astype(dtype)
    check(ctx.matmul(a, b), a, b, dtype=dtype)


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
def test_zero_size_axes_as_numpy(request, rng, where):
    ctx = request.getfixturevalue(where)
    for sa, sb in ZERO:
        a, b = random(rng, sa), random(rng, sb)
        r = ctx.matmul(a, b)
        want = np.matmul(a, b)
        assert r.shape == want.shape and r.dtype == want.dtype, (sa, sb)
        assert np.array_equal(r, want), (sa, sb)  # empty, or exact zeros (k = 0)


def test_a_batch_gives_the_bits_of_a_loop_of_single_calls(rng):
    """The same kernel for each product: a stack and a loop of calls agree bit for bit."""
    for kernel in ("vendor", "tiled"):
        ctx = tilestream.Context("cpu", kernel=kernel)
        for dtype in (np.float32, np.float64):
            a, b = random(rng, (6, 33, 17), dtype), random(rng, (6, 17, 29), dtype)
            stacked = ctx.matmul(a, b)
            looped = np.stack([ctx.matmul(a[i], b[i]) for i in range(6)])
            assert np.array_equal(stacked, looped), (kernel, dtype)


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
def test_out_alpha_beta_and_c_on_stacks(request, rng, where):
    ctx = request.getfixturevalue(where)
    a, b = random(rng, (4, 9, 6)), random(rng, (6, 8))
    c = random(rng, (8,))  # a row of biases, broadcast to every product
    out = np.full((4, 9, 8), np.nan)
    assert ctx.matmul(a, b, out, alpha=-0.5, beta=2.0, c=c) is out
    check(out, a, b, alpha=-0.5, beta=2.0, c=np.broadcast_to(c, (4, 9, 8)))
    # out with column-major matrices (a transposed view): written in place.
    out_t = np.full((4, 8, 9), np.nan).swapaxes(-1, -2)
    ctx.matmul(a, b, out_t)
    check(out_t, a, b)
    # out of another dtype: through a temporary, cast as numpy casts.
    out32 = np.full((4, 9, 8), np.nan, np.float32)
    ctx.matmul(a, b, out32)
    check(out32, a, b, dtype=np.float32)


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
def test_views_of_stacks_are_used_where_they_lie_or_copied(request, rng, where):
    ctx = request.getfixturevalue(where)
    base = random(rng, (5, 20, 30))
    a = base.swapaxes(-1, -2)[:, 3:17, :11]  # column-major matrices, strided leading axis
    b = random(rng, (5, 11, 6))[::-1]        # negative leading stride: a pointer per matrix
    check(ctx.matmul(a, b), a, b)
    assert ctx.plan(a, b)["copied"] == []
    odd = base[:, ::2, ::3]                  # no unit-stride axis in the matrices: copied
    bb = random(rng, (5, 10, 4))
    check(ctx.matmul(odd, bb), odd, bb)
    assert any("copied" in c for c in ctx.plan(odd, bb)["copied"])


def test_stacks_larger_than_the_budget_stream_through_it(rng):
    ctx = tilestream.Context("cpu:2", memory_budget="64KiB", cpu_threads=1)
    a, b = random(rng, (300, 12, 10)), random(rng, (300, 10, 9))  # 606 KiB of operands
    r, text = ctx.matmul(a, b, explain=True)
    check(r, a, b)
    assert "300 products in" in text and "measured:" in text


def test_a_product_larger_than_the_budget_runs_on_its_own(rng):
    ctx = tilestream.Context("cpu", memory_budget="64KiB", cpu_threads=1)
    a, b = random(rng, (2, 90, 80)), random(rng, (2, 80, 70))  # each product alone exceeds the budget
    check(ctx.matmul(a, b), a, b)


def test_many_small_matrices(rng):
    a, b = random(rng, (10000, 4, 4)), random(rng, (10000, 4, 4))
    check(tilestream.matmul(a, b), a, b)


def test_broadcast_errors_are_numpys(in_place):
    with pytest.raises(ValueError, match="could not be broadcast"):
        in_place.matmul(np.ones((2, 3, 4)), np.ones((3, 4, 5)))
    with pytest.raises(ValueError, match="mismatch in its core dimension 0"):
        in_place.matmul(np.ones((2, 3, 4)), np.ones((2, 5, 5)))
    with pytest.raises(ValueError, match="strategy and tile do not apply"):
        in_place.matmul(np.ones((2, 3, 4)), np.ones((2, 4, 5)), strategy="tiles-3d")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_small_stacks_on_the_direct_call_give_the_bits_of_the_general_path(rng, dtype):
    """matmul(a, b) with nothing else given takes stacks straight to the library's batched call
    (argument checks once per stack); the general path (out= given) runs the same products, so the
    bits agree, for every broadcasting case, views of stacks and every precision."""
    ctx = tilestream.Context("cpu")
    cases = CASES + [((6, 4, 4), (6, 4, 4)), ((10, 3, 5), (1, 5, 2))]
    for sa, sb in cases:
        a, b = random(rng, sa), random(rng, sb)
        if np.dtype(dtype).kind == "c":
            a = a + 1j * random(rng, sa)
            b = b + 1j * random(rng, sb)
        a, b = a.astype(dtype), b.astype(dtype)
        pairs = [(a, b)]
        if a.ndim >= 2:
            pairs.append((a.swapaxes(-1, -2).copy().swapaxes(-1, -2), b))  # column-major matrices of A
        for x, y in pairs:
            fast = ctx.matmul(x, y)
            out = np.full(np.matmul(x, y).shape, np.nan, dtype)
            ctx.matmul(x, y, out)
            assert fast.shape == out.shape and fast.dtype == out.dtype, (sa, sb)
            check(fast, x, y, dtype=dtype)
            assert np.array_equal(fast, out), (sa, sb)


def handler_name(x):
    """numpy's name for the memory handler of x's data (numpy 1.22 and later: NEP 49)."""
    multiarray = (getattr(np, "_core", None) or np.core).multiarray
    if not hasattr(multiarray, "get_handler_name"):
        pytest.skip("this numpy has no memory handlers (1.22 and later have them)")
    return multiarray.get_handler_name(x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_large_results_reuse_the_last_freed_buffer_and_own_it(rng, dtype):
    """A result of 4 MiB or more comes from the module's memory handler: an array that owns its
    data as numpy's do, whose buffer, once freed, is the next large result's (poisoned here first:
    every element must be written again), on the direct call and the general path alike."""
    def stack(shape):
        x = random(rng, shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * random(rng, shape)
        return x.astype(dtype)

    ctx = tilestream.Context("cpu")
    a, b = stack((1200, 33, 7)), stack((1200, 7, 29))  # 4.6 MB of float32 results, 18 MB of complex128
    tilestream.release_memory()
    first = ctx.matmul(a, b)
    assert handler_name(first) == "tilestream_result"
    assert first.flags.owndata and first.base is None and first.flags.c_contiguous
    check(first, a, b, dtype=dtype)
    for general in (False, True):
        where = first.ctypes.data
        first[...] = np.nan
        del first
        assert tilestream._native.kept_result_bytes() > 0
        a, b = stack((1200, 33, 7)), stack((1, 7, 29))
        # alpha=1.0 (not the int 1) takes the general path, whose result comes from the same handler.
        first = ctx.matmul(a, b, alpha=1.0) if general else ctx.matmul(a, b)
        assert first.ctypes.data == where, general
        check(first, a, b, dtype=dtype)
    del first
    assert tilestream.release_memory() > 0 and tilestream.release_memory() == 0


def test_large_matrix_results_and_resize_through_the_handler(rng):
    """A large 2-D result takes the handler too; ndarray.resize (numpy's realloc through it) keeps
    the values; small results stay numpy's."""
    a, b = random(rng, (1100, 3)), random(rng, (3, 1000))
    r = tilestream.matmul(a, b, alpha=1.0)
    assert handler_name(r) == "tilestream_result"
    check(r, a, b)
    keep = r.copy()
    r.resize((2200, 1000), refcheck=False)
    assert np.array_equal(r[:1100], keep)
    small = tilestream.matmul(a[:10], b[:, :10], alpha=1.0)
    assert handler_name(small) == handler_name(np.empty(3))
