"""Derivatives: check_grads (forward and reverse, order 1, and order 2 where defined), sharded
cotangents, and the backward pass reusing the saved factor."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
from helpers import (
    ORDERS,
    SCALED_NORMS,
    assert_scale_free_derivatives,
    hermitian_matrix,
    lower_read,
    make_mesh,
    put,
    random_matrix,
    spd_matrix,
)
from jaxmg.kernels import local

N = 16
M = 32
DTYPES = [np.float64, np.complex128]
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)


@pytest.fixture
def auto_mesh():
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    with jax.set_mesh(mesh):
        yield mesh


def check(f, args, order, modes):
    """check_grads on the jitted function (each derivative then compiles once)."""
    check_grads(jax.jit(f), args, order=order, modes=modes)


def herm(x):
    """The Hermitian part: derivatives are checked along Hermitian directions (and along any
    direction, with an input that is not Hermitian, in test_grads_of_non_hermitian_inputs)."""
    return (x + jnp.conj(x).T) / 2


def spd(rng, dtype):
    return spd_matrix(rng, N, dtype) + 2 * np.eye(N, dtype=dtype)


def junk_above(rng, a):
    """``a`` with random entries above the diagonal (and, complex, an imaginary diagonal): the
    operations that read a's lower triangle see ``lower_read(a)`` unchanged."""
    junk = random_matrix(rng, a.shape, a.dtype)
    upper = np.triu(junk, 1)
    if np.iscomplexobj(a):
        upper = upper + 1j * np.diag(np.imag(np.diag(junk)))
    return (a + upper).astype(a.dtype)


def fold(g):
    """The cotangent of ``a`` for a function of ``lower_read(a)`` whose cotangent is ``g`` (real):
    zero above the diagonal, the two mirrored entries summed below it."""
    return np.tril(g, -1) + np.tril(g.T, -1) + np.diag(np.diag(g))


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"order{o}")
@dtypes
def test_potrs_solve_grads_fwd_rev_order2(auto_mesh, dtype, order):
    rng = np.random.default_rng(0)
    A, B = spd(rng, dtype), random_matrix(rng, (N,), dtype)
    check(lambda a, b: jaxmg.potrs(herm(a), b), (A, B), order=order, modes=("fwd", "rev"))
    check(
        lambda a, b: jaxmg.Cholesky(herm(a)).solve(b),
        (A, B[:, None] * np.ones(2, dtype)),
        order=order,
        modes=("fwd", "rev"),
    )


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: f"order{o}")
@dtypes
def test_cholesky_grads_fwd_rev_order2(auto_mesh, dtype, order):
    A = spd(np.random.default_rng(14), dtype)
    check(lambda a: jaxmg.cholesky(herm(a)), (A,), order=order, modes=("fwd", "rev"))
    weights = np.arange(1.0, N * N + 1).reshape(N, N)  # sum |L|^2 alone is tr(a): its gradient is I
    reference = jax.grad(lambda a: jnp.sum(jnp.abs(jnp.linalg.cholesky(lower_read(a))) ** 2 * weights))(A)
    ours = jax.grad(lambda a: jnp.sum(jnp.abs(jaxmg.cholesky(a)) ** 2 * weights))(A)
    assert np.allclose(np.asarray(ours), np.asarray(reference), atol=1e-10)


@dtypes
def test_logdet_grads_fwd_rev_order2(auto_mesh, dtype):
    A = spd(np.random.default_rng(1), dtype)
    check(lambda a: jaxmg.Cholesky(herm(a)).logdet(), (A,), order=2, modes=("fwd", "rev"))
    check(
        lambda a, b: jaxmg.potrs(herm(a), b, return_logdet=True)[1],
        (A, np.ones(N, dtype)),
        order=1,
        modes=("fwd", "rev"),
    )


@pytest.mark.slow
@dtypes
@pytest.mark.parametrize("trans", ["N", "T", "C"])
def test_lu_solve_grads_fwd_rev_order2(auto_mesh, dtype, trans):
    rng = np.random.default_rng(2)
    A = random_matrix(rng, (N, N), dtype) + N * np.eye(N, dtype=dtype) / 2
    B = random_matrix(rng, (N,), dtype)
    check(lambda a, b: jaxmg.LU(a).solve(b, trans=trans), (A, B), order=2, modes=("fwd", "rev"))


def test_lu_solve_matches_numpy_for_each_trans(auto_mesh):
    rng = np.random.default_rng(3)
    A = random_matrix(rng, (N, N), np.complex128) + N * np.eye(N)
    B = random_matrix(rng, (N,), np.complex128)
    lu = jaxmg.LU(A)
    assert np.allclose(np.asarray(lu.solve(B)), np.linalg.solve(A, B))
    assert np.allclose(np.asarray(lu.solve(B, trans="T")), np.linalg.solve(A.T, B))
    assert np.allclose(np.asarray(lu.solve(B, trans="C")), np.linalg.solve(A.conj().T, B))
    assert np.allclose(np.asarray(lu.transpose_solve(B)), np.linalg.solve(A.T, B))


@dtypes
def test_lu_packed_factor_derivatives(dtype):
    """``LU(a).lu`` (LAPACK's packed factor on the local and batch routes) moves with ``a`` as
    ``jax.scipy.linalg.lu_factor``'s factor does: check_grads of order 2, forward and reverse, and
    JAX's tangent along a random direction, for one matrix and for a stack under ``jax.vmap``."""
    rng = np.random.default_rng(16)
    a = jnp.asarray(random_matrix(rng, (2, 6, 6), dtype))
    t = jnp.asarray(random_matrix(rng, a.shape, dtype))
    packed = jax.jit(lambda a: jaxmg.LU(a).lu)
    check_grads(packed, (a[0],), order=2, modes=("fwd", "rev"))
    for ours in (packed, jax.vmap(packed)):
        x = a if ours is not packed else a[0]
        dx = t if ours is not packed else t[0]
        got = jax.jvp(ours, (x,), (dx,))[1]
        want = jax.jvp(lambda x: jax.scipy.linalg.lu_factor(x)[0], (x,), (dx,))[1]
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


@dtypes
def test_least_squares_grads_fwd_rev(auto_mesh, dtype):
    rng = np.random.default_rng(4)
    A, B = random_matrix(rng, (M, N), dtype), random_matrix(rng, (M,), dtype)
    check(lambda a, b: jaxmg.least_squares(a, b), (A, B), order=1, modes=("fwd", "rev"))
    ref = jax.grad(lambda a, b: jnp.sum(jnp.abs(jnp.linalg.lstsq(a, b)[0]) ** 2), argnums=(0, 1))(A, B)
    got = jax.grad(lambda a, b: jnp.sum(jnp.abs(jaxmg.least_squares(a, b)) ** 2), argnums=(0, 1))(A, B)
    for r, g in zip(ref, got):
        assert np.allclose(np.asarray(g), np.asarray(r), atol=1e-8)


_TALL_SOLVES = {
    "least_squares": lambda a, b: jaxmg.least_squares(a, b),
    "QR.solve": lambda a, b: jaxmg.QR(a).solve(b),
    "wide": lambda a, b: jaxmg.least_squares(a.T, b[: a.shape[1]]),
}


@pytest.mark.parametrize("route", ["local", "batch"])
@pytest.mark.parametrize("op", list(_TALL_SOLVES))
@SCALED_NORMS
def test_least_squares_derivatives_at_any_norm(route, op, dtype, scale):
    """Least squares' derivatives at matrices of norm 1e+-20 in float32 (64-bit mode off) and
    1e+-150 in float64 (a's and the mixed second derivative too) are those at norm 1 undone by
    the scale: no (A^H A)^-1 x_bar ~ x_bar / ||A||^2 is formed (it left float32's range: b's
    gradient was 0 or NaN)."""
    rng = np.random.default_rng(7)
    a0 = (random_matrix(rng, (2, 16, 8), np.float64) + 3 * np.eye(16, 8)).astype(dtype)
    b0 = random_matrix(rng, (2, 16), np.float64).astype(dtype)
    fn = _TALL_SOLVES[op] if route == "local" else jax.vmap(_TALL_SOLVES[op])
    a, b = (a0[0], b0[0]) if route == "local" else (a0, b0)
    assert_scale_free_derivatives(fn, a, b, scale)


def test_gradients_match_jax_numpy(auto_mesh):
    """potrs reads a's lower triangle: its derivatives are jnp's at lower_read(a) (zero above
    the diagonal), also for an ``a`` whose upper triangle is not the mirror of the lower."""
    rng = np.random.default_rng(5)
    A, B = spd(rng, np.float64), random_matrix(rng, (N,), np.float64)

    def ours(a, b):
        x, logdet = jaxmg.potrs(a, b, return_logdet=True)
        return jnp.sum(x**2) + logdet

    def reference(a, b):
        return jnp.sum(jnp.linalg.solve(lower_read(a), b) ** 2) + jnp.linalg.slogdet(lower_read(a))[1]

    for a in (A, junk_above(rng, A)):
        for g, r in zip(jax.grad(ours, argnums=(0, 1))(a, B), jax.grad(reference, argnums=(0, 1))(a, B)):
            assert np.allclose(np.asarray(g), np.asarray(r), atol=1e-10)
        assert not np.any(np.triu(np.asarray(jax.grad(ours)(a, B)), 1))


@pytest.mark.parametrize(
    "shape,spec", [((4, 2), P("x", "y")), ((8,), P("x", None)), ((8,), P(None, "x"))], ids=["4x2", "rows", "cols"]
)
def test_cotangents_keep_the_primal_sharding(shape, spec):
    mesh = make_mesh(shape, ("x", "y")[: len(shape)])
    rng = np.random.default_rng(6)
    a = put(spd(rng, np.float64), mesh, spec)
    rows = P(tuple(spec)[0] or tuple(spec)[1])
    b = put(random_matrix(rng, (N,), np.float64), mesh, rows)
    grad_a, grad_b = jax.jit(jax.grad(lambda a, b: jnp.sum(jaxmg.potrs(a, b)), argnums=(0, 1)))(a, b)
    assert grad_a.sharding.spec == a.sharding.spec
    assert grad_b.sharding.spec == b.sharding.spec
    x = np.linalg.solve(np.asarray(a), np.asarray(b))
    b_bar = np.linalg.solve(np.asarray(a).T, np.ones(N))
    assert np.allclose(np.asarray(grad_b), b_bar)
    assert np.allclose(np.asarray(grad_a), fold(-np.outer(b_bar, x)))


def _count_factorisations(monkeypatch):
    """Counts the traces of the local Cholesky factorisation, from a fresh trace: the compiled
    calls that other tests in this process cached would otherwise be reused without tracing."""
    from jaxmg import _dispatch

    _dispatch._compiled.cache_clear()
    jax.clear_caches()
    calls = {"n": 0}
    original = local.Cholesky.factor

    def counting(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(local.Cholesky, "factor", counting)
    return calls


def test_backward_pass_reuses_the_factor(auto_mesh, monkeypatch):
    calls = _count_factorisations(monkeypatch)
    A, B = spd(np.random.default_rng(7), np.float64), np.ones(N)
    jax.jit(jax.grad(lambda a, b: jnp.sum(jaxmg.potrs(a, b)), argnums=(0, 1))).lower(A, B)
    assert calls["n"] == 1


def test_module_solves_many_without_refactoring(auto_mesh, monkeypatch):
    calls = _count_factorisations(monkeypatch)
    A = spd(np.random.default_rng(8), np.float64)
    chol = jaxmg.Cholesky(A)
    rng = np.random.default_rng(9)
    for _ in range(3):
        b = rng.standard_normal(N)
        assert np.allclose(np.asarray(chol.solve(b)), np.linalg.solve(A, b))
    assert calls["n"] == 1


def test_module_is_a_pytree_that_crosses_jit(auto_mesh):
    A = spd(np.random.default_rng(10), np.float64)
    chol = jax.jit(jaxmg.Cholesky)(A)
    b = np.arange(N, dtype=np.float64)
    assert np.allclose(np.asarray(jax.jit(lambda m, b: m.solve(b))(chol, b)), np.linalg.solve(A, b))
    assert np.isclose(float(chol.logdet()), np.linalg.slogdet(A)[1])
    assert np.allclose(np.asarray(chol.factor), np.linalg.cholesky(A))
    leaves = jax.tree_util.tree_leaves(chol)
    assert all(isinstance(leaf, jax.Array) for leaf in leaves)


def test_donated_module_still_differentiates_b():
    mesh = make_mesh((4, 2), ("x", "y"))
    A = spd(np.random.default_rng(11), np.float64)
    chol = jaxmg.Cholesky(put(A, mesh, P("x", "y")), donate=True)
    assert chol.operator is None
    with jax.set_mesh(mesh):  # JAX's eager grad of Explicit-sharded arrays needs the mesh set
        g = jax.grad(lambda b: jnp.sum(chol.solve(b)))(put(np.ones(N), mesh, P("x")))
    assert np.allclose(np.asarray(g), np.linalg.solve(A, np.ones(N)))


# --- Decompositions: forward mode, and reverse mode by JAX's transposition (inside jit; eagerly
# and at order 2 in test_forward_mode.py) ------------------------------------------------------


def _gauge_free_eig(w, v):
    """A loss that does not depend on the eigenvectors' phases."""
    return jnp.sum(w * jnp.arange(1.0, N + 1)) + jnp.sum(jnp.abs(v[:3]) ** 2 * jnp.arange(1.0, N + 1))


@dtypes
def test_decomposition_grads_fwd_rev(auto_mesh, dtype):
    rng = np.random.default_rng(12)
    A_spd, A_her = spd(rng, dtype), hermitian_matrix(rng, N, dtype)
    A_tall = random_matrix(rng, (M, N), dtype)
    weights = np.arange(1.0, N + 1)

    check(lambda a: jaxmg.Cholesky(herm(a)).factor, (A_spd,), order=1, modes=("fwd", "rev"))
    check(lambda a: jaxmg.qr(a), (A_tall,), order=1, modes=("fwd", "rev"))
    check(lambda a: _gauge_free_eig(*jaxmg.syevd(herm(a))), (A_her,), order=1, modes=("fwd", "rev"))
    check(lambda a, b: _gauge_free_eig(*jaxmg.sygvd(herm(a), herm(b))), (A_her, A_spd), order=1, modes=("fwd", "rev"))
    check(
        lambda a: jnp.sum(jaxmg.gesvd(a, compute_u=False, compute_vh=False) * weights),
        (A_tall,),
        order=1,
        modes=("fwd", "rev"),
    )
    check(lambda a: jnp.sum(jnp.abs(jaxmg.gesvd(a)[0][:3]) ** 2), (A_tall,), order=1, modes=("fwd", "rev"))
    check(lambda a: jaxmg.polar(a), (A_tall,), order=1, modes=("fwd", "rev"))


@dtypes
def test_grads_of_non_hermitian_inputs(auto_mesh, dtype):
    """Without symmetrising: at an input with junk above the diagonal and along directions that
    are not Hermitian, the derivatives are those of the functions of lower_read(a)."""
    rng = np.random.default_rng(15)
    A, A_her = junk_above(rng, spd(rng, dtype)), junk_above(rng, hermitian_matrix(rng, N, dtype))
    B = random_matrix(rng, (N,), dtype)
    check(lambda a, b: jaxmg.potrs(a, b, return_logdet=True), (A, B), order=1, modes=("fwd", "rev"))
    # a few columns take the elementwise transposed product, more than 16 the matrix products
    for columns in (3, N + 1):
        check(
            lambda a, b: jaxmg.Cholesky(a).solve(b),
            (A, random_matrix(rng, (N, columns), dtype)),
            order=1,
            modes=("fwd", "rev"),
        )
    check(lambda a: jaxmg.cholesky(a), (A,), order=1, modes=("fwd", "rev"))
    check(lambda a: _gauge_free_eig(*jaxmg.syevd(a)), (A_her,), order=1, modes=("fwd", "rev"))
    check(lambda a, b: _gauge_free_eig(*jaxmg.sygvd(a, b)), (A_her, A), order=1, modes=("fwd", "rev"))
    loss = lambda f: lambda a, b: jnp.sum(jnp.abs(f(a, b)) ** 2)  # noqa: E731
    pairs = [
        (lambda a, b: jaxmg.potrs(a, b), lambda a, b: jnp.linalg.solve(lower_read(a), b)),
        (lambda a, b: jaxmg.cholesky(a) @ b, lambda a, b: jnp.linalg.cholesky(lower_read(a)) @ b),
    ]
    for ours, theirs in pairs:
        for g, r in zip(jax.grad(loss(ours), argnums=(0, 1))(A, B), jax.grad(loss(theirs), argnums=(0, 1))(A, B)):
            assert np.allclose(np.asarray(g), np.asarray(r), atol=1e-10)


def test_decomposition_cotangents_keep_the_primal_sharding():
    mesh = make_mesh((4, 2), ("x", "y"))
    rng = np.random.default_rng(13)
    a = put(hermitian_matrix(rng, N, np.float64), mesh, P("x", "y"))
    tall = put(random_matrix(rng, (M, N), np.float64), mesh, P("x", "y"))
    with jax.set_mesh(mesh):
        g_eig = jax.jit(jax.grad(lambda a: jnp.sum(jaxmg.syevd(a, return_eigenvectors=False) * 2.0)))(a)
        g_svd = jax.jit(jax.grad(lambda a: jnp.sum(jaxmg.gesvd(a, compute_u=False, compute_vh=False))))(tall)
        spd_a = put(spd(rng, np.float64), mesh, P("x", "y"))
        g_chol = jax.jit(jax.grad(lambda a: jnp.sum(jaxmg.cholesky(a) ** 2)))(spd_a)
    assert g_eig.sharding.spec == a.sharding.spec and g_svd.sharding.spec == tall.sharding.spec
    assert g_chol.sharding.spec == spd_a.sharding.spec
    assert np.allclose(
        np.asarray(g_chol),
        np.asarray(jax.grad(lambda a: jnp.sum(jnp.linalg.cholesky(lower_read(a)) ** 2))(np.asarray(spd_a))),
    )
    assert np.allclose(np.asarray(g_eig), 2 * np.eye(N))
    u, _, vh = np.linalg.svd(np.asarray(tall), full_matrices=False)
    assert np.allclose(np.asarray(g_svd), u @ vh)
