"""Platforms with no LAPACK or GPU solver handler (a TPU): the local and batch routes factor with
JAX's own solvers (``jax.lax.linalg``), with jaxmg's derivative rules and statuses.

Checked here on CPUs in two ways: every operation lowers for a TPU (``jax.export``, which lowers
for a platform this machine does not have), and the operations run with the platform's branch
forced to JAX's own solvers, compared with LAPACK's branch and with numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as mla
from helpers import eps, make_mesh, norm, put, scaled, spd_matrix
from jaxmg.kernels.ffi import solver

N = 12
RNG = np.random.default_rng(45)
A = spd_matrix(RNG, N, np.float64)
G = RNG.standard_normal((N, N)) + np.eye(N) * 3  # general, not Hermitian
B = RNG.standard_normal((N, 2))
WIDE = RNG.standard_normal((N, N - 4))

# Each case: (name, function of (a, g, b, w)); all lowered for a TPU, none run there.
CASES = {
    "potrs": lambda a, g, b, w: jaxmg.potrs(a, b, return_logdet=True, return_status=True),
    "potrs_grad": lambda a, g, b, w: jax.grad(lambda a: jnp.sum(jaxmg.potrs(a, b)))(a),
    "cholesky": lambda a, g, b, w: jaxmg.cholesky(a, return_status=True),
    "lu_solve": lambda a, g, b, w: jaxmg.lu_solve(g, b, return_status=True),
    "lu_solve_vmap": lambda a, g, b, w: jax.vmap(jaxmg.lu_solve)(jnp.stack([g, g.T]), jnp.stack([b, b])),
    "least_squares": lambda a, g, b, w: jaxmg.least_squares(w, b),
    "qr": lambda a, g, b, w: jaxmg.qr(g),
    "syevd": lambda a, g, b, w: jaxmg.syevd(a),
    "sygvd": lambda a, g, b, w: jaxmg.sygvd(g + g.T, a),
    "gesvd": lambda a, g, b, w: jaxmg.gesvd(w),
    "numpy": lambda a, g, b, w: (
        mla.solve(g, b),
        mla.inv(g),
        mla.det(g),
        mla.slogdet(g),
        mla.cholesky(a),
        mla.eigh(a),
        mla.svd(w),
    ),
    "slogdet_grad": lambda a, g, b, w: jax.grad(lambda g: mla.slogdet(g)[1])(g),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowers_for_a_platform_without_lapack_or_gpu_solver(name):
    jax.export.export(jax.jit(CASES[name]), platforms=["tpu"])(A, G, B, WIDE)


@pytest.fixture
def own_solvers(monkeypatch):
    """Every platform's branch replaced by the default one (JAX's own solvers), as a TPU runs
    it; the caches that hold LAPACK's branch are cleared on the way in and out."""
    taken = []

    def default_only(x, *, default, **_):
        taken.append(default.__name__)
        return default(x)

    jax.clear_caches()
    monkeypatch.setattr(solver, "by_platform", default_only)
    yield taken
    jax.clear_caches()


def _failing_at(k: int) -> np.ndarray:
    """A Hermitian matrix whose leading minors of order < k are positive definite and whose
    minor of order k is not (LAPACK's potrf info is k)."""
    a = A.copy()
    a[k - 1, k - 1] = -1.0
    return a


def test_own_potrf_matches_lapack_and_reports_failure():
    stack = np.stack([A, np.diag(np.geomspace(1, 1e-12, N)) + 1e-14 * A])  # graded too
    factor, info = jax.jit(solver.potrf)(stack)
    own, own_info = jax.jit(solver.own_potrf)(stack)
    np.testing.assert_array_equal(info, [0, 0])
    np.testing.assert_array_equal(own_info, [0, 0])
    for f, o, a in zip(factor, own, stack):
        low = np.tril(o)
        assert scaled(norm(low @ low.T - a), norm(a), N, np.float64) <= 30
        np.testing.assert_allclose(low, np.tril(f), rtol=1e-10, atol=1e-12 * norm(a))
    bad = np.stack([_failing_at(5), _failing_at(1)])
    _, info = jax.jit(solver.potrf)(bad)
    _, own_info = jax.jit(solver.own_potrf)(bad)
    np.testing.assert_array_equal(info, [5, 1])
    assert np.all((own_info >= 1) & (own_info <= info)), (own_info, info)


def test_own_getrf_matches_lapack():
    singular = G.copy()
    singular[:, 3] = 0.0  # U's pivot 4 is exactly zero
    stack = np.stack([G, singular])
    lu, pivots = jax.jit(solver.getrf)(stack)
    own_lu, own_pivots, own_info = jax.jit(solver.own_getrf)(stack)
    np.testing.assert_array_equal(own_pivots - 1, pivots)
    np.testing.assert_allclose(own_lu, lu, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(own_info, [0, 4])


def test_operations_on_own_solvers(own_solvers):
    x, logdet, status = jaxmg.potrs(A, B, return_logdet=True, return_status=True)
    assert int(status) == 0
    assert scaled(norm(A @ x - B), norm(A) * norm(x), N, np.float64) <= 30
    np.testing.assert_allclose(logdet, np.linalg.slogdet(A)[1], rtol=1e-12)
    x, status = jax.jit(lambda a, b: jaxmg.potrs(a, b, return_status=True))(_failing_at(5), B)
    assert 1 <= int(status) <= 5 and np.all(np.isnan(x))
    x, status = jaxmg.lu_solve(G, B, return_status=True)
    assert int(status) == 0 and scaled(norm(G @ x - B), norm(G) * norm(x), N, np.float64) <= 30
    singular = G.copy()
    singular[:, 3] = 0.0
    x, status = jax.jit(lambda a, b: jaxmg.lu_solve(a, b, return_status=True))(singular, B)
    assert int(status) == 4 and np.all(np.isnan(x))
    stack = jnp.stack([G, G.T])
    xs = jax.vmap(mla.solve)(stack, jnp.stack([B, B]))  # the batch route
    for a, x in zip(stack, xs):
        assert scaled(norm(a @ x - B), norm(a) * norm(x), N, np.float64) <= 30
    mesh = make_mesh((4,), ("x",))
    stack = put(np.stack([A, 2 * A, A + np.eye(N), 3 * A]), mesh, P("x"))
    with jax.set_mesh(mesh):  # the batch route: a shard_map over the stack's axis
        assert jaxmg.route("potrs", (N, N), "float64", mesh, stacked=4) == "batch"
        xs = jax.jit(jax.vmap(jaxmg.potrs))(stack, put(np.stack([B] * 4), mesh, P("x")))
    for a, x in zip(np.asarray(stack), np.asarray(xs)):
        assert scaled(norm(a @ x - B), norm(a) * norm(x), N, np.float64) <= 30
    sign, logabs = jax.jit(mla.slogdet)(G)
    np.testing.assert_allclose(sign * np.exp(logabs), np.linalg.det(G), rtol=1e-10)
    np.testing.assert_allclose(mla.inv(G) @ G, np.eye(N), atol=30 * N * eps(np.float64) * np.linalg.cond(G))
    low = mla.cholesky(A)
    assert scaled(norm(low @ low.T - A), norm(A), N, np.float64) <= 30
    w, v = jaxmg.sygvd(G + G.T, A)
    assert scaled(norm((G + G.T) @ v - A @ v * w), norm(G + G.T) * norm(v), N, np.float64) <= 30
    check_grads(lambda a, b: jaxmg.potrs(a, b), (A, B), order=1, modes=("fwd", "rev"))
    check_grads(lambda g: mla.slogdet(g)[1], (G,), order=1, modes=("rev",))
    assert {"own_potrf", "own_getrf"} <= set(own_solvers)
