"""tilestream.lapack: scipy.linalg.lapack's Cholesky names, arguments and (c, info) returns, against
numpy.linalg.cholesky on random Hermitian positive definite matrices (complex with both parts
non-zero), odd orders, every precision, both triangles, in place and out of core; the triangle not
named is never read (NaN there) and LAPACK's info for a matrix that is not positive definite."""

import numpy as np
import pytest

from tilestream import lapack

from conftest import PREFIXES, TOL

pytestmark = pytest.mark.usefixtures("leave_the_context_cache_as_found")


def spd(n, prefix, rng, bad=None):
    """L D L^H with L unit lower (small entries) and D in [1, 2] (D[bad] = -0.5: not positive definite,
    info bad + 1)."""
    l = np.tril(rng.uniform(-1, 1, (n, n)), -1) / np.sqrt(n)
    if prefix in "cz":
        l = l + 1j * np.tril(rng.uniform(-1, 1, (n, n)), -1) / np.sqrt(n)
    l = l + np.eye(n)
    d = rng.uniform(1, 2, n)
    if bad is not None:
        d[bad] = -0.5
    return (l * d) @ l.conj().T


def poisoned(a, lower, prefix, order):
    """a's `lower` (or upper) triangle, NaN in the other one."""
    x = np.array(a, dtype=PREFIXES[prefix], order=order)
    x[np.triu_indices(len(a), 1) if lower else np.tril_indices(len(a), -1)] = np.nan
    return x


@pytest.mark.parametrize("prefix", "sdcz")
@pytest.mark.parametrize("lower", [0, 1])
@pytest.mark.parametrize("where", ["in place", "out of core"])
def test_potrf_matches_numpy_cholesky(prefix, lower, where):
    rng = np.random.default_rng(7 + lower)
    n = 71
    a = spd(n, prefix, rng)
    extras = {"devices": "cpu"} if where == "in place" else {"devices": "cpu:2", "memory_budget": "48KiB"}
    fn = getattr(lapack, prefix + "potrf")
    x = poisoned(a, lower, prefix, "F" if lower else "C")
    c, info = fn(x, lower=lower, **extras)
    assert info == 0
    want = np.linalg.cholesky(a)
    if not lower:
        want = want.conj().T
    assert c.dtype == PREFIXES[prefix]
    scale = float(np.max(np.abs(want)))
    assert np.max(np.abs(c - want)) <= TOL[prefix] * scale  # clean=1: zeros in the other triangle
    assert np.isnan(x[np.triu_indices(n, 1) if lower else np.tril_indices(n, -1)]).all()  # a untouched


@pytest.mark.parametrize("prefix", "dz")
def test_info_and_clean_as_lapack(prefix):
    rng = np.random.default_rng(3)
    a = spd(40, prefix, rng, bad=17)
    c, info = getattr(lapack, prefix + "potrf")(a, lower=1, clean=0, devices="cpu:3")
    assert info == 18
    with pytest.raises(np.linalg.LinAlgError, match="18-th leading minor"):
        lapack.cho_factor(a, devices="cpu")
    good = spd(40, prefix, rng)
    c, info = getattr(lapack, prefix + "potrf")(good, lower=0, clean=0)
    assert info == 0
    np.testing.assert_array_equal(np.tril(c, -1), np.tril(good, -1))  # clean=0 leaves a's values


@pytest.mark.parametrize("prefix", "sdcz")
def test_posv_potrs_and_cho_solve(prefix):
    rng = np.random.default_rng(11)
    n = 53
    a = spd(n, prefix, rng)
    b = rng.uniform(-1, 1, (n, 4)).astype(PREFIXES[prefix])
    c, x, info = getattr(lapack, prefix + "posv")(a, b, lower=1, devices="cpu:2", memory_budget="40KiB")
    assert info == 0
    want = np.linalg.solve(a, b)
    tol = 50 * TOL[prefix]
    assert np.max(np.abs(x - want)) <= tol * max(1.0, float(np.max(np.abs(want))))
    x2, info = getattr(lapack, prefix + "potrs")(c, b[:, 0], lower=1)
    assert info == 0 and x2.shape == (n,)
    assert np.max(np.abs(x2 - want[:, 0])) <= tol * max(1.0, float(np.max(np.abs(want))))
    x3 = lapack.cho_solve(lapack.cho_factor(a.astype(PREFIXES[prefix])), b)
    assert np.max(np.abs(x3 - want)) <= tol * max(1.0, float(np.max(np.abs(want))))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="dpotrf: a must be square"):
        lapack.dpotrf(np.ones((3, 4)))
    with pytest.raises(ValueError, match="dposv: b has 2 rows"):
        lapack.dposv(np.eye(3), np.ones((2, 1)))
    with pytest.raises(TypeError, match="complex"):
        lapack.dpotrf(np.eye(3) * 1j)


# ---- LU: ?getrf, ?getrs, ?gesv, lu_factor, lu_solve against scipy.linalg.lapack (OpenBLAS) ----

def known_pivots(m, n, prefix, rng):
    """P0 L0 U0 with |L0| <= 1/2 (|re| + |im| for complex): partial pivoting picks P0's rows with a
    margin of 2 whatever the rounding, so piv is compared exactly."""
    k = min(m, n)
    lm, um = min(0.5, 4 / np.sqrt(m)), min(1.0, 4 / np.sqrt(n))  # small: both factors well conditioned
    l = np.tril(rng.uniform(-lm, lm, (m, k)), -1)
    u = np.triu(rng.uniform(-um, um, (k, n)))
    if prefix in "cz":
        l = np.tril(rng.uniform(-lm / 2, lm / 2, (m, k)) + 1j * rng.uniform(-lm / 2, lm / 2, (m, k)), -1)
        u = np.triu(u + 1j * rng.uniform(-um, um, (k, n)))
    l[np.arange(k), np.arange(k)] = 1
    u[np.arange(k), np.arange(k)] += np.where(u.real[np.arange(k), np.arange(k)] < 0, -1.5, 1.5)
    return (l @ u)[rng.permutation(m)].astype(PREFIXES[prefix])


@pytest.mark.parametrize("prefix", "sdcz")
@pytest.mark.parametrize("shape", [(97, 97), (130, 71), (53, 120)])
@pytest.mark.parametrize("where", ["in place", "out of core"])
def test_getrf_matches_scipy(prefix, shape, where):
    scipy_lapack = pytest.importorskip("scipy.linalg.lapack")
    rng = np.random.default_rng(sum(shape))
    a = known_pivots(*shape, prefix, rng)
    extras = {"devices": "cpu"} if where == "in place" else {"devices": "cpu:2", "memory_budget": "160KiB"}
    order = "F" if shape[0] % 2 else "C"
    x = np.array(a, order=order)
    lu, piv, info = getattr(lapack, prefix + "getrf")(x, **extras)
    want_lu, want_piv, want_info = getattr(scipy_lapack, prefix + "getrf")(a)
    assert info == want_info == 0
    assert piv.dtype == want_piv.dtype and np.array_equal(piv, want_piv)
    assert np.array_equal(x, a), "a changed without overwrite_a"
    assert np.allclose(lu, want_lu, rtol=0, atol=TOL[prefix] * 10)


@pytest.mark.parametrize("prefix", "sdcz")
def test_getrf_singular_gives_lapacks_info_and_overwrites_in_place(prefix):
    scipy_lapack = pytest.importorskip("scipy.linalg.lapack")
    rng = np.random.default_rng(3)
    a = known_pivots(60, 60, prefix, rng)
    a[:, 17] = 0
    x = np.asfortranarray(a)
    lu, piv, info = getattr(lapack, prefix + "getrf")(x, overwrite_a=1, devices="cpu")
    assert lu is x
    _, want_piv, want_info = getattr(scipy_lapack, prefix + "getrf")(a)
    assert info == want_info == 18
    assert np.array_equal(piv, want_piv)


@pytest.mark.parametrize("prefix", "sdcz")
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_getrs_gesv_lu_solve_solve(prefix, trans):
    rng = np.random.default_rng(11 + trans)
    n = 83
    a = known_pivots(n, n, prefix, rng)
    b = np.asarray(rng.uniform(-1, 1, (n, 5)), dtype=PREFIXES[prefix])
    extras = {"devices": "cpu:2", "memory_budget": "128KiB"}
    lu, piv, info = getattr(lapack, prefix + "getrf")(a, **extras)
    x, info2 = getattr(lapack, prefix + "getrs")(lu, piv, b, trans=trans, **extras)
    assert info == info2 == 0
    op = a if trans == 0 else a.T if trans == 1 else a.conj().T
    assert np.allclose(op @ x, b, rtol=0, atol=TOL[prefix] * 50)
    lu2, piv2, x2, info3 = getattr(lapack, prefix + "gesv")(a, b[:, 0], **extras)
    assert info3 == 0 and x2.shape == (n,)
    assert np.allclose(a @ x2, b[:, 0], rtol=0, atol=TOL[prefix] * 50)
    x3 = lapack.lu_solve(lapack.lu_factor(a, **extras), b, trans=trans, **extras)
    assert x3.dtype == PREFIXES[prefix]
    assert np.allclose(op @ x3, b, rtol=0, atol=TOL[prefix] * 50)


def test_gesv_singular_solves_nothing_and_lu_factor_warns():
    a = np.eye(4)
    a[2, 2] = 0
    b = np.ones((4, 1))
    lu, piv, x, info = lapack.dgesv(a, b, devices="cpu")
    assert info == 3
    assert np.array_equal(x, b)
    with pytest.warns(RuntimeWarning, match="Diagonal number 3 is exactly zero"):
        lapack.lu_factor(a, devices="cpu")
    with pytest.raises(ValueError, match="piv"):
        lapack.dgetrs(lu, np.array([0, 1]), b)
