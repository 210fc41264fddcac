"""Every way to call the module wrongly raises ValueError, TypeError or MemoryError with a message
naming what is wrong (tilestream's own text, as the CLI prints it, where the library decides), and
leaves the context usable."""

import numpy as np
import pytest

import tilestream
from conftest import check, random


def raises(exc, match, f, *args, **kwargs):
    with pytest.raises(exc, match=match):
        f(*args, **kwargs)


def test_operand_errors(in_place, rng):
    a, b = random(rng, (5, 4)), random(rng, (4, 3))
    mm = in_place.matmul
    raises(TypeError, "not a number type", mm, np.array([["x", "y"]]), b)
    raises(TypeError, "not a number type", mm, a, np.empty((4, 3), object))
    raises(TypeError, "longdouble|float128", mm, a.astype(np.longdouble), b)
    raises(TypeError, "clongdouble|complex256.*complex128 or complex64", mm, a.astype(np.clongdouble), b)
    raises(ValueError, "Input operand 0 does not have enough dimensions", mm, np.float64(2.0), b)
    raises(ValueError, "operand b has 3 dimensions", mm, a, np.ones((2, 4, 3)))
    raises(ValueError, r"gemm: inner dimensions differ: op\(A\) is 5x4, op\(B\) is 3x3", mm, a, random(rng, (3, 3)))
    raises(TypeError, r"alpha = 1j is complex and the result is real \(float64\)", mm, a, b, alpha=1j)
    raises(TypeError, "beta must be a number .real or complex., got str", mm, a, b, beta="1")
    raises(ValueError, "alpha = .* beyond the range of complex64", mm, a.astype(np.complex64),
           b.astype(np.complex64), alpha=complex(1, 1e39))


def test_out_errors_like_numpy(in_place, rng):
    a, b = random(rng, (5, 4)), random(rng, (4, 3))
    mm = in_place.matmul
    raises(TypeError, "return arrays must be of ArrayType", mm, a, b, [[0.0] * 3] * 5)
    raises(ValueError, r"core dimension 1, with gufunc signature \(n\?,k\),\(k,m\?\)->\(n\?,m\?\) \(size 4 is "
                       r"different from 3\)", mm, a, b, np.empty((5, 4)))
    raises(ValueError, "core dimension 0", mm, a, b, np.empty((6, 3)))
    raises(ValueError, "Output operand 0 does not have enough dimensions", mm, a, b, np.empty(15))
    raises(ValueError, "does not broadcast", mm, a, b, np.empty((1, 5, 3)))
    raises(TypeError, r"Cannot cast ufunc 'matmul' output from dtype\('float64'\) to dtype\('int64'\) with casting "
                      r"rule 'same_kind'", mm, a, b, np.empty((5, 3), np.int64))
    ro = np.empty((5, 3))
    ro.flags.writeable = False
    raises(ValueError, "output array is read-only", mm, a, b, ro)
    # the failed calls wrote nothing and the context still works
    out = np.full((5, 3), np.nan)
    check(mm(a, b, out), a, b)


def test_c_and_beta_errors(in_place, rng):
    a, b, c = random(rng, (5, 4)), random(rng, (4, 3)), random(rng, (5, 3))
    mm = in_place.matmul
    raises(ValueError, "beta is 2 but no c was given", mm, a, b, beta=2)
    raises(ValueError, "c was given but beta is 0", mm, a, b, c=c)
    raises(ValueError, "could not broadcast", mm, a, b, beta=1, c=np.ones((4, 3)))
    raises(TypeError, "Cannot cast .*complex128.* to .*float64", mm, a, b, beta=1, c=c.astype(complex))


def test_option_errors(in_place, rng):
    a, b = random(rng, (5, 4)), random(rng, (4, 3))
    mm = tilestream.matmul
    raises(ValueError, "lots", mm, a, b, memory_budget="lots")  # parse_bytes names the text
    raises(ValueError, "at least 1 byte", mm, a, b, memory_budget=0)
    raises(ValueError, "at least 1 byte", mm, a, b, memory_budget=-5)
    raises(TypeError, "memory_budget must be a number of bytes", mm, a, b, memory_budget=1.5)
    raises(TypeError, "memory_budget must be a number of bytes", mm, a, b, memory_budget=True)
    raises(ValueError, "gpu:7", mm, a, b, devices="gpu:7")
    raises(TypeError, "devices must be a spec string", mm, a, b, devices=3)
    raises(ValueError, "fast", mm, a, b, kernel="fast")
    raises(ValueError, "sideways", mm, a, b, strategy="sideways")
    raises(TypeError, "progress must be a callable", mm, a, b, progress=5)
    raises(TypeError, "tile must be an integer", in_place.matmul, a, b, strategy="tiles-3d", tile=2.5)
    raises(TypeError, "cpu_threads must be an integer", tilestream.Context, "cpu", cpu_threads="2")
    raises(ValueError, "math", tilestream.Context, "cpu", math="sloppy")
    raises(ValueError, "cache", tilestream.Context, "cpu", cache="maybe")


def test_a_problem_that_fits_no_budget_is_a_memory_error(rng):
    a, b = random(rng, (30, 20)), random(rng, (20, 10))
    with pytest.raises(MemoryError, match=r"cpu:0: gemm: no plan fits the device budget of 64 B.*smallest budget"):
        tilestream.matmul(a, b, devices="cpu", memory_budget=64)


def test_devices_not_present_name_the_devices_present():
    present = {d["kind"] for d in tilestream.devices()}
    if "cuda" not in present:
        raises(ValueError, "unknown device 'cuda:0': devices present: cpu", tilestream.Context, "cuda:0")
    raises(ValueError, "cpu:0x2|cpu", tilestream.Context, "cpu:0x2")


def test_jacobi_errors():
    j = tilestream.jacobi
    raises(ValueError, "3x3|smaller", j, 2, 10, iters=1, devices="cpu")
    raises(ValueError, "diagonal", j, 10, 10, iters=1, devices="cpu", decomposition="diagonal")
    raises(TypeError, "decomposition must be a string", j, 10, 10, iters=1, devices="cpu", decomposition=2)
    raises(ValueError, "float16|f16", j, 10, 10, iters=1, devices="cpu", dtype="float16")
    raises(TypeError, "complex", j, 10, 10, iters=1, devices="cpu", dtype=np.complex64)
    raises(TypeError, "iters must be an integer", j, 10, 10, iters=1.5, devices="cpu")
    raises(TypeError, "nx must be an integer", j, "10", 10, devices="cpu")
    raises(ValueError, "check.every", j, 10, 10, iters=5, check_every=0, devices="cpu")
    raises(ValueError, r"start has shape \(3, 3\), the field is \(10, 12\)", j, 12, 10, iters=1, devices="cpu",
           start=np.zeros((3, 3)))
    raises(TypeError, "start is complex", j, 12, 10, iters=1, devices="cpu", start=np.zeros((10, 12), complex))


def test_an_error_in_the_progress_callable_stops_the_call(in_place, rng):
    a, b = random(rng, (300, 200)), random(rng, (200, 100))

    def boom(done, total):
        raise RuntimeError("progress says no")

    ctx = tilestream.Context("cpu", memory_budget="64KiB", cpu_threads=1)
    raises(RuntimeError, "progress says no", ctx.matmul, a, b, progress=boom)
    check(ctx.matmul(a, b), a, b)  # and the context is usable after
