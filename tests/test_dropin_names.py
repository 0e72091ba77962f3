"""Every name of jax.numpy.linalg and jax.scipy.linalg in jaxmg's modules, JAX's return
conventions (lu_factor's arrays, qr's modes, slogdet's methods), and the distributed
solve_triangular and lu against JAX's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as mla
import jaxmg.scipy.linalg as msla
from helpers import eps, make_mesh, put, random_matrix, same_spec
from jaxmg.kernels import triangular

# jaxmg's names beyond JAX's: SciPy's lstsq (JAX has none) and the list of JAX's own functions
EXTRA_NUMPY: set = set()
EXTRA_SCIPY = {"lstsq", "JAX_OWN"}


def _public(module) -> set:
    return {n for n in dir(module) if not n.startswith("_")}


@pytest.mark.parametrize("ours,theirs,extra", [(mla, jnp.linalg, EXTRA_NUMPY), (msla, jsl, EXTRA_SCIPY)])
def test_names_are_jaxs(ours, theirs, extra):
    """The installed JAX's public names, exactly, plus jaxmg's listed extras (and JAX's result
    types in jaxmg.numpy.linalg); each one present."""
    results = {n for n in ours.__all__ if n.endswith("Result")}
    assert set(ours.__all__) - extra - results == _public(theirs)
    assert all(hasattr(ours, n) for n in ours.__all__)
    assert _public(ours) == set(ours.__all__)  # dir() lists them, not the module's imports


def test_jaxs_own_functions_are_jaxs():
    for name in msla.JAX_OWN:
        assert getattr(msla, name) is getattr(jsl, name), name
    assert mla.eig is jnp.linalg.eig and mla.eigvals is jnp.linalg.eigvals


def _triangular(rng, n, dtype, graded=True):
    """A triangular test matrix with a graded diagonal (condition number about 1e6)."""
    a = random_matrix(rng, (n, n), dtype) / np.sqrt(n)
    d = np.logspace(0, -6 if graded else 0, n)
    return (a + np.diag(d + 1.0 * (not graded))).astype(dtype)


def _ratio(t, x, b, dtype):
    """LAPACK's test ratio ||op(T) x - b|| / (N eps ||T|| ||x||) with op(T) given whole."""
    t, x, b = (np.asarray(v, dtype=np.complex128) for v in (t, x, b))
    x2, b2 = (v[:, None] if v.ndim == 1 else v for v in (x, b))
    return np.linalg.norm(t @ x2 - b2, 1) / (t.shape[0] * eps(dtype) * np.linalg.norm(t, 1) * np.linalg.norm(x2, 1))


def _op(a, lower, trans, unit):
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t = t - np.diag(np.diag(t)) + np.eye(len(t))
    return {0: t, 1: t.T, 2: t.conj().T}[trans]


@pytest.mark.parametrize("axis_type,dtype", [(AxisType.Explicit, np.float64), (AxisType.Auto, np.complex64)])
def test_solve_triangular_against_lapack_ratio(monkeypatch, axis_type, dtype):
    """Lower and upper, trans 0/1/2, unit diagonal, vector and matrix b, on a sharded graded
    matrix, through the recursion (diagonal blocks of 8 rows): test ratio <= 30, x in b's layout."""
    monkeypatch.setattr(triangular, "BASE", 8)
    rng = np.random.default_rng(0)
    n = 32
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    a = _triangular(rng, n, dtype)
    b = random_matrix(rng, (n, 3), dtype)
    a_s, b_s = put(a, mesh, P("x", "y")), put(b, mesh, P("x"))
    for lower in (True, False):
        for trans in (0, 1, 2):
            for unit in (False, True):
                x = msla.solve_triangular(a_s, b_s, trans=trans, lower=lower, unit_diagonal=unit)
                assert x.shape == b.shape
                assert _ratio(_op(a, lower, trans, unit), x, b, dtype) <= 30, (lower, trans, unit)
    if axis_type == AxisType.Explicit:
        assert tuple(x.sharding.spec)[:1] == ("x",)
    with jax.set_mesh(mesh):
        xj = jax.jit(lambda a, b: msla.solve_triangular(a, b, trans="C", lower=True))(a_s, b_s[:, 0])
    assert _ratio(_op(a, True, 2, False), xj, b[:, 0], dtype) <= 30


def test_solve_triangular_batched_and_jax_conventions(monkeypatch):
    """A batch of matrices split over the mesh, and of right-hand sides, under the recursion
    equals JAX's solve; so does one matrix on one device for every right-hand side."""
    monkeypatch.setattr(triangular, "BASE", 4)
    rng = np.random.default_rng(1)
    mesh = make_mesh((4, 2), ("x", "y"))
    a = np.stack([_triangular(rng, 16, np.float64, graded=False) for _ in range(3)])
    b = random_matrix(rng, (3, 16, 2), np.float64)
    for lower, trans in ((True, 0), (True, 1), (False, 0)):
        ours = msla.solve_triangular(put(a, mesh, P(None, "x", "y")), b, lower=lower, trans=trans)
        np.testing.assert_allclose(ours, jsl.solve_triangular(a, b, lower=lower, trans=trans), rtol=1e-11, atol=1e-12)
    shared = msla.solve_triangular(a[0], b, lower=True)  # one matrix for every right-hand side
    np.testing.assert_allclose(shared, jsl.solve_triangular(a[0][None], b, lower=True), rtol=1e-11)
    with pytest.raises(ValueError, match="trans"):
        msla.solve_triangular(a[0], b[0], trans=3)
    with pytest.raises(ValueError, match="b must be"):
        msla.solve_triangular(a[0], np.ones(5))


def test_solve_triangular_derivatives(monkeypatch):
    """Forward and reverse derivatives of the recursion in a and b (the other triangle gets
    none, as JAX's), and the gradient of a sharded solve equals JAX's."""
    monkeypatch.setattr(triangular, "BASE", 4)
    rng = np.random.default_rng(2)
    a = _triangular(rng, 12, np.complex128, graded=False)
    b = random_matrix(rng, (12, 2), np.complex128)
    for lower, adj, unit in ((True, False, False), (False, True, True), (True, True, False)):

        def f(a, b, lower=lower, adj=adj, unit=unit):  # check_grads passes NumPy arrays
            return triangular.trsm(triangular.Tri(jnp.asarray(a), lower=lower, adj=adj, unit=unit), jnp.asarray(b))

        check_grads(f, (a, b), order=1, modes=("fwd", "rev"))
    check_grads(lambda a, b: msla.solve_triangular(a, b, trans=1), (a, b), order=1, modes=("fwd", "rev"))
    mesh = make_mesh((4, 2), ("x", "y"))
    a_s = put(a, mesh, P("x", "y"))
    for lower, trans, unit in ((True, 0, False), (False, 2, True), (True, 1, False)):

        def loss(a, solve=msla.solve_triangular, lower=lower, trans=trans, unit=unit):
            return jnp.sum(jnp.abs(solve(a, b, lower=lower, trans=trans, unit_diagonal=unit)) ** 2)

        with jax.set_mesh(mesh):
            g = jax.jit(jax.grad(loss))(a_s)
        np.testing.assert_allclose(g, jax.grad(loss)(a, jsl.solve_triangular), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("axis_type,dtype", [(AxisType.Explicit, np.float64), (AxisType.Auto, np.complex128)])
def test_lu_factor_and_lu_are_jaxs_arrays(axis_type, dtype):
    """lu_factor returns JAX's packed (lu, piv) (np.tril of it works); lu's p @ l @ u = a, in
    a's layout, batched, with JAX's dtypes (p real for a complex a)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    rng = np.random.default_rng(3)
    a = random_matrix(rng, (8, 8), dtype)
    a_s = put(a, mesh, P("x", "y"))
    lu, piv = msla.lu_factor(a_s)
    ref_lu, ref_piv = jsl.lu_factor(a)
    assert isinstance(lu, jax.Array) and piv.dtype == ref_piv.dtype
    np.testing.assert_array_equal(piv, ref_piv)
    np.testing.assert_allclose(np.tril(np.asarray(lu), -1), np.tril(ref_lu, -1), rtol=1e-12, atol=1e-13)
    b = random_matrix(rng, (8, 2), dtype)
    for trans in (0, 1, 2):  # with the sharded packed factor, against JAX's with its own
        np.testing.assert_allclose(
            msla.lu_solve((lu, piv), b, trans=trans),
            jsl.lu_solve((ref_lu, ref_piv), b, trans=trans),
            rtol=1e-11,
            atol=1e-12,
        )
    np.testing.assert_allclose(msla.lu_solve((lu, piv), a[:, 0]), np.eye(8)[:, 0], atol=1e-11)
    p, l, u = msla.lu(a_s)
    for x, y in zip((p, l, u), jsl.lu(a)):
        assert x.dtype == y.dtype  # p real for a complex a, as JAX's
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(p) @ np.asarray(l) @ np.asarray(u), a, atol=1e-13)
    pl, u2 = msla.lu(a_s, permute_l=True)
    np.testing.assert_allclose(np.asarray(pl) @ np.asarray(u2), a, atol=1e-13)
    if axis_type == AxisType.Explicit:
        assert tuple(l.sharding.spec) == ("x", "y")
    batch = random_matrix(rng, (3, 8, 8), dtype)
    p, l, u = msla.lu(batch)
    assert p.dtype == jsl.lu(batch)[0].dtype
    np.testing.assert_allclose(np.asarray(p) @ np.asarray(l) @ np.asarray(u), batch, atol=1e-13)
    lu, piv = msla.lu_factor(batch)
    assert lu.shape == (3, 8, 8) and piv.shape == (3, 8)
    rect = random_matrix(rng, (6, 4), dtype)  # rectangular: JAX's own
    for x, y in zip(msla.lu(rect), jsl.lu(rect)):
        np.testing.assert_allclose(x, y)


def test_row_swaps_are_lapacks():
    """The row swaps that bring rows into an order are LAPACK's (lu_factor's piv from a
    distributed factor): JAX's own pivots from JAX's own permutation, and back."""
    from jaxmg.scipy._lu import row_swaps

    rng = np.random.default_rng(8)
    for n in (1, 2, 7, 33):
        _, want, order = jax.lax.linalg.lu(jnp.asarray(random_matrix(rng, (n, n), np.float64)))
        np.testing.assert_array_equal(row_swaps(order), want)
        order = jnp.asarray(rng.permutation(n), jnp.int32)
        np.testing.assert_array_equal(jax.lax.linalg.lu_pivots_to_permutation(row_swaps(order), n), order)


def test_lu_derivatives_equal_jaxs():
    rng = np.random.default_rng(4)
    a = random_matrix(rng, (6, 6), np.float64) + 3 * np.eye(6)
    check_grads(lambda a: msla.lu(a)[1:], (a,), order=1, modes=("fwd", "rev"))
    check_grads(lambda a: msla.lu_factor(a)[0], (a,), order=1, modes=("fwd", "rev"))
    w = random_matrix(rng, (6, 6), np.float64)
    g = jax.grad(lambda a: jnp.sum(w * msla.lu(a)[2]) + jnp.sum(w.T * msla.lu(a)[1]))(a)
    g_ref = jax.grad(lambda a: jnp.sum(w * jsl.lu(a)[2]) + jnp.sum(w.T * jsl.lu(a)[1]))(a)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)


def test_lu_solve_takes_a_distributed_factor():
    a = np.eye(8) * 2.0
    factor = jaxmg.LU(a)
    np.testing.assert_allclose(msla.lu_solve((factor, None), np.ones(8)), np.full(8, 0.5))


def test_qr_modes_and_slogdet_methods_as_jaxs():
    rng = np.random.default_rng(5)
    tall = random_matrix(rng, (8, 4), np.float64)
    h, tau = mla.qr(tall, mode="raw")
    h_ref, tau_ref = jnp.linalg.qr(tall, mode="raw")
    np.testing.assert_allclose(h, h_ref)
    np.testing.assert_allclose(tau, tau_ref)
    q, r = mla.qr(tall, mode="full")  # NumPy's alias of "reduced"
    assert q.shape == (8, 4) and r.shape == (4, 4)
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), tall, atol=1e-13)
    q, r = mla.qr(np.ones((3, 0)), mode="complete")  # no columns: Q is the identity, as JAX's
    np.testing.assert_array_equal(q, np.eye(3))
    assert r.shape == (3, 0)
    q, r = msla.qr(tall)  # SciPy's "full": the square Q
    assert q.shape == (8, 8) and r.shape == (8, 4)
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), tall, atol=1e-13)
    q, r, p = msla.qr(tall.T, pivoting=True)
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), tall.T[:, np.asarray(p)], atol=1e-13)
    r, p = msla.qr(tall, mode="r", pivoting=True)
    assert r.shape == (8, 4) and p.shape == (4,)
    with pytest.raises(ValueError, match="mode"):
        msla.qr(tall, mode="raw")
    with pytest.raises(ValueError, match="mode"):
        mla.qr(tall, mode="other")
    sq = random_matrix(rng, (6, 6), np.float64)  # JAX's "qr" is real only
    for method in (None, "lu", "qr"):
        sign, logdet = mla.slogdet(sq, method=method)
        ref = jnp.linalg.slogdet(sq, method=method)
        np.testing.assert_allclose(sign, ref.sign, rtol=1e-12)
        np.testing.assert_allclose(logdet, ref.logabsdet, rtol=1e-12)
    check_grads(lambda a: mla.slogdet(a, method="qr")[1], (sq,), order=1, modes=("rev",))
    with pytest.raises(ValueError, match="method"):
        mla.slogdet(sq, method="cholesky")


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_complete_qr_is_jaxs_where_one_device_factors(dtype):
    """mode="complete" of tall matrices on the local and batch routes (one matrix, a stack, one
    split over a mesh without the native backend): Q's last M - N columns are LAPACK's
    Householder completion, as JAX's (whose tests compare all M columns with NumPy's)."""
    rng = np.random.default_rng(9)
    stack = random_matrix(rng, (4, 16, 5), dtype)
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for a in (stack, stack[0], put(stack[0], mesh, P("x"))):
        want = jnp.linalg.qr(np.asarray(a), mode="complete")
        for got in (mla.qr(a, mode="complete"), msla.qr(a)):
            for x, y in zip(got, want):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


def test_scipy_qr_r_of_a_tall_matrix_forms_no_square_q():
    """scipy qr(mode="r") of a tall (M, N) matrix is JAX's full R (M, N), its last M - N rows zero,
    from the reduced factorisation: no M x M array is made (the complete Q, or on the
    distributed route the QR of an M x M matrix), eagerly, batched and in a's layout."""
    rng = np.random.default_rng(11)
    stack = random_matrix(rng, (4, 32, 4), np.float64)
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    for a, spec in ((stack, None), (stack[0], None), (put(stack[0], mesh, P("x", "y")), P("x", "y"))):
        (got,), (want,) = msla.qr(a, mode="r"), jsl.qr(np.asarray(a), mode="r")
        assert got.shape == want.shape
        np.testing.assert_allclose(np.abs(np.asarray(got)), np.abs(np.asarray(want)), atol=1e-12)
        assert spec is None or same_spec(got, spec)
        assert "[32,32]" not in str(jax.make_jaxpr(lambda a: msla.qr(a, mode="r"))(a))


def test_lu_and_triangular_solves_under_jaxs_test_configuration(monkeypatch):
    """Strict dtype promotion and rank promotion raising (JAX's own test configuration), with
    64-bit integers the default: lu, lu_factor, lu_solve and solve_triangular (the recursion too)."""
    monkeypatch.setattr(triangular, "BASE", 4)
    mesh = make_mesh((4, 2), ("x", "y"))
    a = np.arange(64.0).reshape(8, 8) % 7 + 8 * np.eye(8)
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        p, l, u = msla.lu(a)
        lu, piv = msla.lu_factor(put(a, mesh, P("x", "y")))
        x = msla.lu_solve((lu, piv), np.ones(8), trans=1)
        y = msla.solve_triangular(put(a, mesh, P("x", "y")), np.ones((8, 2)), lower=True, trans=2)
    np.testing.assert_allclose(np.asarray(p) @ np.asarray(l) @ np.asarray(u), a, atol=1e-12)
    np.testing.assert_allclose(a.T @ np.asarray(x), np.ones(8), atol=1e-12)
    np.testing.assert_allclose(np.tril(a).T @ np.asarray(y), np.ones((8, 2)), atol=1e-12)


# JAX's own wording (its tests match it) and jaxmg's: the argument and the conversion
FLOAT16 = {
    "lu": (mla.inv, msla.inv, mla.det, lambda a: mla.solve(a, a), msla.lu_factor, msla.lu),
    "cholesky": (mla.cholesky, msla.cholesky, lambda a: msla.cho_factor(a)),
    "eigh": (mla.eigh, mla.eigvalsh, msla.eigh),
    "svd": (mla.svd, mla.svdvals, mla.pinv),
    "qr": (mla.qr, msla.qr),
}


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision_determinants_jax_writes_out_are_jaxs(dtype):
    """JAX computes det of 2 x 2 and 3 x 3 matrices and slogdet of 1 x 1 and 2 x 2 ones from their
    entries, in float16 and bfloat16 too (stacks included); so does jaxmg, in the same dtype,
    where its LU refuses the dtype (larger orders: JAX's LU refuses it too)."""
    rng = np.random.default_rng(4)
    for n in (1, 2, 3):
        a = jnp.asarray(rng.standard_normal((2, n, n)) + 2 * np.eye(n), dtype)
        for ours, theirs, orders in ((mla.det, jnp.linalg.det, (2, 3)), (mla.slogdet, jnp.linalg.slogdet, (1, 2))):
            if n not in orders:
                continue
            for x in (a, a[0]):
                got, want = ours(x), theirs(x)
                assert jax.tree.map(lambda v: v.dtype, got) == jax.tree.map(lambda v: v.dtype, want)
                for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                    np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


@pytest.mark.parametrize("family", sorted(FLOAT16))
def test_float16_errors_say_what_jax_and_jaxmg_say(family):
    """A float16 matrix is refused with JAX's "<operation> does not accept dtype float16" and the
    argument with its conversion; so are jaxmg's own functions. (4 x 4: JAX writes the
    determinants of smaller matrices out, in float16 too.)"""
    x = jnp.ones((4, 4), jnp.float16)
    for fn in FLOAT16[family]:
        with pytest.raises(TypeError, match=f"{family} does not accept dtype float16") as error:
            fn(x)
        assert "(argument a)" in str(error.value) and "a.astype(jnp.float32)" in str(error.value)
    with pytest.raises(TypeError, match=r"cholesky does not accept dtype float16 \(argument a\); convert it"):
        jaxmg.cholesky(x)
