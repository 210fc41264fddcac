"""tilestream.jacobi against a numpy Jacobi sweep (bitwise: the library adds (N+S)+(W+E) and scales
by 0.25 in the field's type, so numpy's float arithmetic gives the same bits) and against the
command-line tool's field, for several decompositions and device counts."""

import os
import subprocess

import numpy as np
import pytest

import tilestream


def numpy_jacobi(start, iters):
    u = start.copy()
    quarter = u.dtype.type(0.25)
    for _ in range(iters):
        v = u.copy()
        v[1:-1, 1:-1] = quarter * ((u[:-2, 1:-1] + u[2:, 1:-1]) + (u[1:-1, :-2] + u[1:-1, 2:]))
        u = v
    return u


@pytest.fixture(scope="module")
def three_devices():
    return tilestream.Context("cpu:3", cpu_threads=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("decomposition", ["rows", "cols", "tiles:3x1", "auto"])
def test_random_start_matches_numpy_bitwise(three_devices, dtype, decomposition):
    rng = np.random.default_rng(7)
    ny, nx, iters = 37, 53, 9
    start = rng.uniform(-1, 1, size=(ny, nx)).astype(dtype)
    field = three_devices.jacobi(nx, ny, dtype=dtype, iters=iters, decomposition=decomposition, start=start)
    assert field.dtype == dtype and field.shape == (ny, nx) and field.flags.c_contiguous
    ref = numpy_jacobi(start, iters)
    assert np.array_equal(field, ref), f"max difference {np.abs(field - ref).max()}"
    assert not np.array_equal(field, start)


def test_default_start_matches_numpy_bitwise_and_the_sine_boundary():
    ny, nx, iters = 41, 29, 12
    field = tilestream.jacobi(nx, ny, dtype=np.float64, iters=iters, devices="cpu:2", decomposition="rows")
    i = np.arange(ny)
    sine = np.sin(2 * np.pi * i / (ny - 1))
    np.testing.assert_allclose(field[:, 0], sine, atol=1e-15)
    np.testing.assert_allclose(field[:, -1], sine, atol=1e-15)
    start = np.zeros_like(field)
    start[:, 0], start[:, -1] = field[:, 0], field[:, -1]  # the boundary never changes
    assert np.array_equal(field, numpy_jacobi(start, iters))


@pytest.mark.skipif(not os.environ.get("TILESTREAM_CLI"), reason="TILESTREAM_CLI (the tool's path) not set")
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_field_matches_the_command_line_tool(tmp_path, dtype):
    path = tmp_path / "field.npy"
    subprocess.run([os.environ["TILESTREAM_CLI"], "jacobi", "--nx", "67", "--ny", "45", "--iters", "30", "--dtype",
                    dtype, "--devices", "cpu:2", "--decomp", "cols", "--out", str(path), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    tool = np.load(path)
    field = tilestream.jacobi(67, 45, dtype=dtype, iters=30, devices="cpu:2", decomposition="tiles")
    assert field.dtype == tool.dtype and np.array_equal(field, tool)


def test_default_dtype_is_the_clis_or_starts():
    assert tilestream.jacobi(12, 10, iters=2, devices="cpu").dtype == np.float32  # the CLI's --dtype default
    for dtype in (np.float32, np.float64):
        assert tilestream.jacobi(12, 10, iters=2, devices="cpu", start=np.zeros((10, 12), dtype)).dtype == dtype
    assert tilestream.jacobi(12, 10, iters=2, devices="cpu", dtype="f64", start=np.zeros((10, 12), int)).dtype == \
        np.float64  # converted when asked
    with pytest.raises(TypeError, match="start has dtype int64.*pass dtype=np.float32 or np.float64"):
        tilestream.jacobi(12, 10, iters=2, devices="cpu", start=np.zeros((10, 12), np.int64))


@pytest.mark.skipif(not os.environ.get("TILESTREAM_CLI"), reason="TILESTREAM_CLI (the tool's path) not set")
def test_default_field_is_the_tools_default_field(tmp_path):
    path = tmp_path / "field.npy"
    subprocess.run([os.environ["TILESTREAM_CLI"], "jacobi", "--nx", "40", "--ny", "33", "--iters", "25", "--devices",
                    "cpu", "--out", str(path), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    tool = np.load(path)
    field = tilestream.jacobi(40, 33, iters=25, devices="cpu")
    assert field.dtype == tool.dtype and np.array_equal(field, tool)


def test_tolerance_explain_and_progress():
    calls = []
    field, text = tilestream.jacobi(24, 20, iters=5000, tol=1e-6, check_every=5, devices="cpu", explain=True,
                                    progress=lambda done, total: calls.append((done, total)))
    assert "converged at iteration" in text and "residual" in text and "part 0" in text
    iterations = int(text.split("measured: ")[1].split()[0])
    assert 0 < iterations < 5000
    assert calls and calls[-1] == (iterations, 5000)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    assert np.isfinite(field).all()
