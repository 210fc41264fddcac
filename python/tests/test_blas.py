"""tilestream.blas: scipy.linalg.blas's Level 3 names and arguments, against numpy references on random
non-zero data (complex with both parts non-zero), odd shapes, both storage orders, every precision and
flag; outputs poisoned where BLAS must not read them."""

import itertools

import numpy as np
import pytest

import tilestream
from tilestream import blas

from conftest import PREFIXES, TOL

pytestmark = pytest.mark.usefixtures("leave_the_context_cache_as_found")


def rand(shape, prefix, rng, order="C"):
    x = rng.uniform(-1, 1, shape)
    if prefix in "cz":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return np.asarray(x, dtype=PREFIXES[prefix], order=order)


def close(got, want, prefix):
    scale = max(1.0, float(np.max(np.abs(want))))
    assert np.max(np.abs(got - want)) <= TOL[prefix] * scale, np.max(np.abs(got - want))


def full_from_triangle(a, lower, hermitian):
    t = np.tril(a) if lower else np.triu(a)
    strict = np.tril(a, -1) if lower else np.triu(a, 1)
    mirror = strict.conj().T if hermitian else strict.T
    full = t + mirror
    if hermitian:
        full[np.diag_indices_from(full)] = np.real(np.diag(a))
    return full


def op(x, trans):
    return x if trans == 0 else x.T if trans == 1 else x.conj().T


def keep_triangle(new, old, lower):
    mask = np.tril(np.ones(new.shape, bool)) if lower else np.triu(np.ones(new.shape, bool))
    return np.where(mask, new, old)


@pytest.mark.parametrize("prefix,routine,side,lower,order", [
    (p, r, s, lo, o) for p in "sdcz" for r in (("symm", "hemm") if p in "cz" else ("symm",))
    for s, lo, o in [(0, 0, "C"), (1, 1, "F"), (0, 1, "F"), (1, 0, "C")]])
def test_symm_hemm(prefix, routine, side, lower, order):
    rng = np.random.default_rng(hash((prefix, routine, side, lower)) % 2**32)
    m, n = 13, 7
    ka = m if side == 0 else n
    a, b, c = rand((ka, ka), prefix, rng, order), rand((m, n), prefix, rng, order), rand((m, n), prefix, rng, order)
    alpha, beta = (0.75 - 0.5j, 1.25 + 0.25j) if prefix in "cz" else (0.75, 1.25)
    full = full_from_triangle(a, lower, routine == "hemm")
    want = alpha * (full @ b if side == 0 else b @ full) + beta * c
    got = getattr(blas, prefix + routine)(alpha, a, b, beta, c, side=side, lower=lower)
    close(got, want, prefix)
    assert got.dtype == PREFIXES[prefix] and got is not c


@pytest.mark.parametrize("prefix,routine,trans,lower,order", [
    (p, r, t, lo, o) for p in "sdcz"
    for r in (("syrk", "herk", "syr2k", "her2k") if p in "cz" else ("syrk", "syr2k"))
    for t, lo, o in [(0, 0, "C"), ((2 if r.startswith("her") else 1), 1, "F"), (0, 1, "F")]])
def test_rank_k(prefix, routine, trans, lower, order):
    rng = np.random.default_rng(hash((prefix, routine, trans, lower)) % 2**32)
    n, k = 11, 6
    shape = (n, k) if trans == 0 else (k, n)
    a, b, c = rand(shape, prefix, rng, order), rand(shape, prefix, rng, order), rand((n, n), prefix, rng, order)
    hermitian = routine.startswith("her")
    two = routine.endswith("2k")
    alpha = 0.75 if prefix in "sd" or routine == "herk" else 0.75 - 0.5j
    beta = 1.25 if prefix in "sd" or hermitian else 1.25 + 0.25j
    if hermitian:
        c = (c + c.conj().T) / 2  # BLAS reads C's triangle as Hermitian (its diagonal real)
    oa, ob = op(a, trans), op(b, trans)
    tr = (lambda x: x.conj().T) if hermitian else (lambda x: x.T)
    prod = alpha * oa @ tr(ob) + np.conj(alpha) * ob @ tr(oa) if two and hermitian else \
        alpha * (oa @ tr(ob) + ob @ tr(oa)) if two else alpha * oa @ tr(oa)
    want = keep_triangle(prod + beta * c, c, lower)
    if hermitian:
        want[np.diag_indices(n)] = np.real(np.diag(want))
    f = getattr(blas, prefix + routine)
    got = f(alpha, a, b, beta, c, trans=trans, lower=lower) if two else f(alpha, a, beta, c, trans=trans, lower=lower)
    close(got, want, prefix)
    # c=None: C starts as zeros, the other triangle stays zero (scipy's result).
    got0 = f(alpha, a, b, trans=trans, lower=lower) if two else f(alpha, a, trans=trans, lower=lower)
    want0 = keep_triangle(prod, np.zeros_like(c), lower)
    if hermitian:
        want0[np.diag_indices(n)] = np.real(np.diag(want0))
    close(got0, want0, prefix)
    assert got0.flags.f_contiguous


@pytest.mark.parametrize("prefix,routine", [(p, r) for p in "sdcz" for r in ("trmm", "trsm")])
def test_trmm_trsm_every_flag(prefix, routine):
    rng = np.random.default_rng(hash((prefix, routine)) % 2**32)
    m, n = 9, 5
    alpha = 1.5 - 0.5j if prefix in "cz" else 1.5
    for side, lower, trans, diag in itertools.product((0, 1), (0, 1), (0, 1, 2), (0, 1)):
        ka = m if side == 0 else n
        a = rand((ka, ka), prefix, rng, "F" if lower else "C")
        a[np.diag_indices(ka)] += 3  # well conditioned
        b = rand((m, n), prefix, rng, "C" if trans else "F")
        t = np.tril(a) if lower else np.triu(a)
        if diag:
            t[np.diag_indices(ka)] = 1
        ot = op(t, trans) if prefix in "cz" or trans < 2 else t.T
        if routine == "trmm":
            want = alpha * (ot @ b if side == 0 else b @ ot)
        else:
            want = np.linalg.solve(ot, alpha * b) if side == 0 else np.linalg.solve(ot.T, (alpha * b).T).T
        got = getattr(blas, prefix + routine)(alpha, a, b, lower=lower, trans_a=trans, side=side, diag=diag)
        close(got, want, prefix)


def test_overwrite_in_place_and_copies():
    rng = np.random.default_rng(5)
    a = rand((8, 8), "d", rng)
    a[np.diag_indices(8)] += 3
    b = rand((8, 3), "d", rng)
    b0 = b.copy()
    x = blas.dtrsm(1.0, a, b, overwrite_b=1, lower=1)
    assert x is b  # a C-ordered float64 b is written where it lies
    close(np.tril(a) @ x, b0, "d")
    b32 = b0.astype(np.float32)
    x2 = blas.dtrsm(1.0, a, b32, overwrite_b=1, lower=1)  # another dtype: a copy, b left alone
    assert x2 is not b32 and x2.dtype == np.float64
    np.testing.assert_array_equal(b32, b0.astype(np.float32))
    c = rand((8, 8), "d", rng)
    c_view = c[:, :]
    got = blas.dsyrk(1.0, a, 1.0, c, overwrite_c=0)
    assert got is not c
    assert np.all(c_view == c)


def test_beta_zero_never_reads_c_and_alpha_zero_never_reads_a():
    rng = np.random.default_rng(6)
    a, b = rand((10, 4), "z", rng), rand((10, 4), "z", rng)
    c = np.full((10, 10), np.nan + 1j * np.nan, np.complex128)
    got = blas.zsyr2k(0.5 + 0.5j, a, b, 0, c, lower=1)
    assert np.all(np.isfinite(np.tril(got)))
    nan_a = np.full((10, 10), np.nan)
    bm = rand((10, 3), "d", rng)
    got = blas.dtrmm(0.0, nan_a, bm)
    np.testing.assert_array_equal(got, np.zeros((10, 3)))


def test_out_of_core_on_two_devices():
    rng = np.random.default_rng(7)
    a = rand((150, 150), "d", rng, "F")
    a[np.diag_indices(150)] += 4
    b = rand((150, 70), "d", rng)
    want = np.linalg.solve(np.triu(a), 2.0 * b)
    got = blas.dtrsm(2.0, a, b, devices="cpu:2", memory_budget="64KiB")
    close(got, want, "d")


def test_errors_name_the_argument():
    rng = np.random.default_rng(8)
    a, b = rand((5, 5), "d", rng), rand((6, 2), "d", rng)
    with pytest.raises(ValueError, match="5x5|5 x 5|A is|rows"):
        blas.dtrsm(1.0, a, b)
    with pytest.raises(ValueError, match="alpha must be real"):
        blas.dsyrk(1j, a)
    with pytest.raises(ValueError, match="alpha must be real"):
        blas.zherk(1j, a.astype(complex))
    with pytest.raises(TypeError, match="complex"):
        blas.dsymm(1.0, a.astype(complex), a)
    with pytest.raises(ValueError, match="trans=1"):
        blas.zherk(1.0, a.astype(complex), trans=1)
    with pytest.raises(ValueError, match="2-D"):
        blas.strmm(1.0, a, np.ones(5))
    with pytest.raises(TypeError, match="unexpected keyword"):
        blas.ssyrk(1.0, a, transpose=1)
    assert "dtrsm" in blas.__all__ and "zher2k" in blas.__all__ and "dherk" not in blas.__all__
    assert tilestream.blas is blas


@pytest.mark.parametrize("prefix", "sdcz")
def test_matmul_of_a_and_its_transpose_runs_syrk_as_numpy_does(prefix, monkeypatch):
    """tilestream.matmul(a, a.T) and (a.T, a): SYRK on one triangle, the other copied (as numpy's
    a @ a.T is ?syrk), equal to numpy's product and exactly symmetric; other products stay GEMM."""
    calls = []
    gram = tilestream.Context._gram

    def counted(self, x, progress):
        calls.append(x.shape)
        return gram(self, x, progress)

    monkeypatch.setattr(tilestream.Context, "_gram", counted)
    rng = np.random.default_rng(11)
    for shape, order in (((431, 401), "C"), ((409, 450), "F"), ((650, 420), "C")):
        a = rand(shape, prefix, rng, order)
        for x in (a, a.T):
            calls.clear()
            got = tilestream.matmul(x, x.T)
            assert calls == [x.shape]
            assert got.dtype == x.dtype and got.shape == (x.shape[0], x.shape[0])
            assert got.flags.c_contiguous
            assert np.array_equal(got, got.T)  # symmetric (not Hermitian), bit for bit
            close(got, np.asarray(x, np.complex128 if prefix in "cz" else np.float64)
                  @ np.asarray(x.T, np.complex128 if prefix in "cz" else np.float64), prefix)
    # Not the same data, a copy, or below the size where SYRK pays: GEMM.
    a = rand((301, 277), prefix, rng)
    calls.clear()
    tilestream.matmul(a, a.T.copy())
    tilestream.matmul(a, rand((277, 301), prefix, rng))
    tilestream.matmul(a[:40, :40], a[:40, :40].T)
    tilestream.matmul(a, a.T)  # 301 x 301 x 277: below _GRAM_MIN_MNK
    assert calls == []
