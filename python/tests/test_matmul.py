"""tilestream.matmul against numpy on random non-zero data: odd non-square shapes, float32 and
float64, C and Fortran order, transposed and sliced views (used where they lie), out= poisoned with
NaN, alpha/beta/c, numpy's type promotion and vector rules, memmap operands out-of-core."""

import itertools

import numpy as np
import pytest

import tilestream
from conftest import check, random

SHAPES = [(131, 77, 95), (67, 143, 89), (1, 53, 40), (45, 1, 70), (33, 29, 1)]


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_order_of_a_b_and_out_matches_numpy(request, rng, where, dtype):
    ctx = request.getfixturevalue(where)
    m, n, k = SHAPES[0] if dtype == np.float32 else SHAPES[1]
    for oa, ob, oc in itertools.product("CF", repeat=3):
        a = random(rng, (m, k), dtype, oa)
        b = random(rng, (k, n), dtype, ob)
        out = np.full((m, n), np.nan, dtype, order=oc)
        assert ctx.matmul(a, b, out) is out
        check(out, a, b, dtype=dtype)
        assert ctx.plan(a, b, out)["copied"] == []


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_odd_shapes_out_of_core_match_numpy(out_of_core, rng, m, n, k):
    for dtype in (np.float32, np.float64):
        a, b = random(rng, (m, k), dtype), random(rng, (k, n), dtype)
        check(out_of_core.matmul(a, b), a, b, dtype=dtype)


def test_out_of_core_plan_streams_through_the_budget(out_of_core, rng):
    a, b = random(rng, (200, 170)), random(rng, (170, 150))
    plan = out_of_core.plan(a, b)
    assert plan["strategy"] not in ("in-core", "zero-copy")
    assert plan["peak_device_bytes"] <= 64 * 1024
    assert plan["units"] > 1
    result, text = out_of_core.matmul(a, b, explain=True)
    check(result, a, b)
    assert plan["strategy"] in text and "measured:" in text and "no copy" in text


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
def test_views_are_used_where_they_lie(request, rng, where):
    ctx = request.getfixturevalue(where)
    base_a = random(rng, (160, 150))
    base_b = random(rng, (140, 130))
    views = {
        "transposed": (base_a.T[:97, :61], base_b.T[:61, :53]),     # column-major views of the bases
        "column slices": (base_a[:, 7:68], base_b[3:64, 11:90]),  # row-major, leading dimension > cols
        "row steps": (base_a[1::2, :61], base_b[:61:1, 5:70]),     # every other row: ld = 2 x 150
        "fortran slices": (np.asfortranarray(base_a)[5:90, :61], np.asfortranarray(base_b)[:61, 1:40]),
    }
    for name, (a, b) in views.items():
        plan = ctx.plan(a, b)
        assert plan["copied"] == [], name
        out = np.full((a.shape[0], b.shape[1]), np.nan)
        ctx.matmul(a, b, out)
        check(out, a, b)
        assert base_a.flags.writeable and np.isfinite(base_a).all()  # the inputs were only read


def test_views_with_no_unit_stride_axis_are_copied(in_place, rng):
    base = random(rng, (90, 120))
    a = base[::2, ::3]           # no unit-stride axis: copied
    b = random(rng, (40, 30))[::-1]  # negative stride: copied
    plan = in_place.plan(a, b)
    assert [c.split(":")[0] for c in plan["copied"]] == ["a", "b"]
    check(in_place.matmul(a, b), a, b)


def test_out_may_be_a_view_and_is_written_only_there(in_place, rng):
    a, b = random(rng, (37, 23)), random(rng, (23, 41))
    big = np.full((50, 60), -7.0)
    view = big[5:42, 10:51]
    in_place.matmul(a, b, view)
    check(view, a, b)
    mask = np.ones(big.shape, bool)
    mask[5:42, 10:51] = False
    assert (big[mask] == -7.0).all()
    fortran = np.full((60, 50), -7.0, order="F")
    in_place.matmul(a, b, fortran[3:40, 2:43])
    check(fortran[3:40, 2:43], a, b)
    transposed = np.full((41, 37), np.nan)
    in_place.matmul(a, b, transposed.T)
    check(transposed.T, a, b)


@pytest.mark.parametrize("where", ["in_place", "out_of_core"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_alpha_beta_and_c(request, rng, where, dtype):
    ctx = request.getfixturevalue(where)
    a, b = random(rng, (59, 71), dtype), random(rng, (71, 47), dtype, "F")
    c = random(rng, (59, 47), dtype)
    check(ctx.matmul(a, b, alpha=-1.5, beta=0.75, c=c), a, b, -1.5, 0.75, c, dtype)
    # c is out: the BLAS in-place update
    out = c.copy()
    assert ctx.matmul(a, b, out, alpha=2, beta=-1, c=out) is out
    check(out, a, b, 2.0, -1.0, c, dtype)
    # c broadcast (a row of biases) into a fresh result; c of another dtype is cast
    row = random(rng, (47,), np.float64)
    check(ctx.matmul(a, b, beta=1, c=row), a, b, 1.0, 1.0, np.broadcast_to(row, (59, 47)), dtype)
    # alpha = 0 with beta: only beta c
    check(ctx.matmul(a, b, alpha=0, beta=2, c=c), a, b, 0.0, 2.0, c, dtype)


def test_numpy_type_promotion(in_place, rng):
    f32, f64 = random(rng, (31, 29), np.float32), random(rng, (29, 23), np.float64)
    assert in_place.matmul(f32, f64).dtype == np.float64
    assert in_place.matmul(f32, f64.astype(np.float32)).dtype == np.float32
    ints = rng.integers(-9, 10, size=(29, 23)).astype(np.int32)
    ints[ints == 0] = 3
    r = in_place.matmul(f32, ints)  # float32 x int32 -> float64 (numpy's result_type)
    assert r.dtype == np.float64
    check(r, f32, ints)
    assert [c.split(":")[0] for c in in_place.plan(f32, ints)["copied"]] == ["a", "b"]  # converted
    assert in_place.matmul([[1.0, 2], [3, 4]], [[5], [6]]).tolist() == [[17.0], [39.0]]  # lists too
    # integer and bool results (numpy's are exact) and the rest: test_numpy_conventions.py


def test_vectors_follow_numpy(in_place, rng):
    a, v, w = random(rng, (13, 11)), random(rng, (11,)), random(rng, (13,))
    for x, y in ((a, v), (w, a), (v, v)):
        r = in_place.matmul(x, y)
        ref = x @ y
        assert np.shape(r) == np.shape(ref) and type(r) is type(ref)
        np.testing.assert_allclose(r, ref, rtol=1e-12)
    out = np.full(13, np.nan)
    assert in_place.matmul(a, v, out) is out
    np.testing.assert_allclose(out, a @ v, rtol=1e-12)


def test_empty_dimensions(in_place, out_of_core):
    for ctx in (in_place, out_of_core):
        assert ctx.matmul(np.ones((0, 5)), np.ones((5, 3))).shape == (0, 3)
        assert ctx.matmul(np.ones((4, 5)), np.ones((5, 0))).shape == (4, 0)
        r = ctx.matmul(np.ones((4, 0)), np.ones((0, 3)))  # k = 0: zeros, as numpy
        assert r.shape == (4, 3) and (r == 0).all()


def test_inputs_overlapping_out_are_read_first(in_place, rng):
    a = random(rng, (40, 40))
    a0 = a.copy()
    plan = in_place.plan(a, a, a)
    assert any("overlaps out" in c for c in plan["copied"])
    in_place.matmul(a, a, a)  # a <- a @ a, as numpy's np.matmul(a, a, out=a)
    check(a, a0, a0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("order", ["C", "F"])
def test_memmap_operands_stream_from_disk(tmp_path, rng, dtype, order):
    """Operands and the result as files on disk, a 64 KiB budget: read tile by tile, not copied."""
    m, n, k = 301, 203, 257
    a = np.memmap(tmp_path / "a.bin", dtype, "w+", shape=(m, k), order=order)
    b = np.memmap(tmp_path / "b.bin", dtype, "w+", shape=(k, n), order=order)
    a[:] = random(rng, (m, k), dtype)
    b[:] = random(rng, (k, n), dtype)
    a.flush()
    b.flush()
    del a, b
    a = np.memmap(tmp_path / "a.bin", dtype, "r", shape=(m, k), order=order)  # read-only maps
    b = np.memmap(tmp_path / "b.bin", dtype, "r", shape=(k, n), order=order)
    c = np.memmap(tmp_path / "c.bin", dtype, "w+", shape=(m, n), order=order)
    c[:] = np.nan
    ctx = tilestream.Context("cpu", memory_budget="64KiB", cpu_threads=1)
    plan = ctx.plan(a, b.T.T, c)
    assert plan["copied"] == [] and plan["peak_device_bytes"] <= 64 * 1024 and plan["units"] > 1
    assert ctx.matmul(a, b, c) is c
    c.flush()
    check(np.fromfile(tmp_path / "c.bin", dtype).reshape((m, n), order=order), np.array(a), np.array(b), dtype=dtype)
    # the module-level call with a budget string: out-of-core, a new array
    check(tilestream.matmul(a, b, memory_budget="64KiB", devices="cpu"), np.array(a), np.array(b), dtype=dtype)
