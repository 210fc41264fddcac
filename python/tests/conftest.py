"""Shared fixtures of the Python module's tests: contexts opened once per session and a checker
comparing a result with numpy's float64 product within the standard BLAS error bound."""

import numpy as np
import pytest

import tilestream


@pytest.fixture(scope="session")
def in_place():
    """One CPU device without a budget: computes on the operands where they lie (zero-copy)."""
    return tilestream.Context("cpu", cpu_threads=1)


@pytest.fixture(scope="session")
def out_of_core():
    """Two CPU devices with 64 KiB each: every operand below streams through them in tiles."""
    return tilestream.Context("cpu:2", memory_budget="64KiB", cpu_threads=1)


@pytest.fixture(scope="module")
def leave_the_context_cache_as_found():
    """The module-level calls' contexts a test file opens are closed after it (other files count the
    cache's entries): pytestmark = pytest.mark.usefixtures("leave_the_context_cache_as_found")."""
    before = set(tilestream._contexts)
    yield
    with tilestream._contexts_lock:
        for key in [k for k in tilestream._contexts if k not in before]:
            del tilestream._contexts[key]


# The BLAS/LAPACK prefixes (scipy.linalg.blas and .lapack names) and each one's tolerance.
PREFIXES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
TOL = {"s": 2e-4, "d": 1e-11, "c": 2e-4, "z": 1e-11}


@pytest.fixture
def rng():
    return np.random.default_rng(20261123)


def random(rng, shape, dtype=np.float64, order="C"):
    """Uniform in [-1, 1), no zeros."""
    x = rng.uniform(-1, 1, size=shape)
    x[x == 0] = 0.5
    return np.asarray(x, dtype=dtype, order=order)


def wide(x):
    """x in float64, or complex128 when it is complex."""
    return np.asarray(x, np.complex128 if np.iscomplexobj(x) else np.float64)


def expected(a, b, alpha=1.0, beta=0.0, c=None):
    """alpha a @ b + beta c in float64 (complex128 for complex data), and the elementwise bound
    |alpha||a||b| + |beta||c|."""
    a64, b64 = wide(a), wide(b)
    ref = alpha * (a64 @ b64)
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if beta != 0:
        c64 = wide(c)
        ref = ref + beta * c64
        scale = scale + abs(beta) * np.abs(c64)
    return ref, scale


def check(result, a, b, alpha=1.0, beta=0.0, c=None, dtype=None):
    """Every element written (no NaN left from the poison) and within 2 k u of the reference (4 k u
    for complex: each term is a complex multiply-add), relative to |alpha||a||b| + |beta||c|
    elementwise (the standard GEMM error bound)."""
    ref, scale = expected(a, b, alpha, beta, c)
    assert result.shape == ref.shape
    if dtype is not None:
        assert result.dtype == dtype
    assert np.isfinite(result).all(), "unwritten (NaN) or non-finite elements"
    k = np.shape(a)[-1]
    u = np.finfo(result.dtype).eps * (2 if np.iscomplexobj(result) else 1)
    err = np.abs(wide(result) - ref)
    assert (err <= 2 * max(k, 1) * u * scale + np.finfo(np.float64).tiny).all(), f"max error {err.max():.3e}"
    if ref.size:
        assert np.abs(ref).max() > 0, "vacuous: the reference is all zeros"
