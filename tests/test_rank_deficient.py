"""Rank-deficient least squares is flagged, never a finite wrong answer with status 0.

``jaxmg.least_squares``, ``QR(a).solve`` and ``jaxmg.lineax.QR`` test R's diagonal against
``rcond * max|R_ii|`` (default ``max(M, N) * eps``): a numerically rank-deficient ``a`` gives
the 1-based index of the first small entry as its status and NaN outputs, on the local and
batch routes here (the distributed route: tests/gpu/test_qr_emulated.py). Full-rank inputs keep
LAPACK's least-squares test ratio and their derivatives; ``jaxmg.numpy.linalg.lstsq`` stays
the minimum-norm solution of any rank, as ``jnp.linalg.lstsq``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
from helpers import eps, make_mesh, put, random_matrix

M, N = 64, 32
MESHES = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}


def _low_rank(dtype, m=M, n=N, rank=4, seed=0):
    """A product of (m, rank) and (rank, n) random factors: rank ``rank``, not exactly (rounding)."""
    rng = np.random.default_rng(seed)
    return (random_matrix(rng, (m, rank), dtype) @ random_matrix(rng, (rank, n), dtype)).astype(dtype)


def _dependent_column(dtype, k, seed=1):
    """A full-rank (M, N) matrix whose column ``k`` (0-based) is a combination of the first three."""
    rng = np.random.default_rng(seed)
    a = random_matrix(rng, (M, N), dtype)
    a[:, k] = a[:, :3] @ random_matrix(rng, (3,), dtype)
    return a


def _lstsq_ratio(a, x, b) -> float:
    """LAPACK's least-squares test ratio (dqrt17): ||a^H (a x - b)|| / (||a|| ||b|| max(M, N) eps)."""
    a, x, b = (np.asarray(v, np.complex128) for v in (a, x, b))
    r = a.conj().T @ (a @ x - b)
    return np.linalg.norm(r) / (
        np.linalg.norm(a, 2) ** 2 * np.linalg.norm(x) * max(a.shape) * eps(np.float64)
        + np.linalg.norm(a, 2) * np.linalg.norm(b) * max(a.shape) * eps(np.float64)
    )


@functools.cache
def _solvers(axis_type):
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    solve = lambda a, b: jaxmg.least_squares(a, b, return_status=True)  # noqa: E731
    return mesh, solve, jax.jit(solve)


@pytest.mark.parametrize("mesh_kind", MESHES)
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_low_rank_least_squares_is_flagged(mesh_kind, dtype):
    """The issue's case: rank 4 of 32 on a (4, 2) mesh, eagerly and in jit, tall and wide: a
    non-zero status and NaN, where only exact zeros were flagged (status 0, |x| ~ 1e15)."""
    mesh, solve, jitted = _solvers(MESHES[mesh_kind])
    a = _low_rank(dtype)
    b = random_matrix(np.random.default_rng(2), (M,), dtype)
    for run in (solve, jitted):
        x, status = run(put(a, mesh, P("x", "y")), b)
        assert int(status) > 0 and np.isnan(np.asarray(x)).all(), (run, int(status))
        x, status = run(put(a.T.copy(), mesh, P("x", "y")), b[:N])  # wide: through a^H
        assert int(status) > 0 and np.isnan(np.asarray(x)).all(), (run, int(status))


@pytest.mark.parametrize("k", [3, 17, N - 1])
def test_status_is_the_first_small_diagonal_entry(k):
    """Column k depends on columns 0-2: R_kk is at rounding level, so the status is k + 1, on the
    functional call, the module's solve and its rank_status; rcond=0 flags exact zeros only."""
    a = _dependent_column(np.float64, k)
    b = np.ones(M)
    x, status = jaxmg.least_squares(a, b, return_status=True)
    assert int(status) == k + 1 and np.isnan(np.asarray(x)).all()
    module = jaxmg.QR(a)
    assert int(module.status) == 0  # the factorisation itself succeeded
    assert int(module.rank_status()) == k + 1 and int(module.rank_status(rcond=0.0)) == 0
    assert np.isnan(np.asarray(module.solve(b))).all()
    assert np.isfinite(np.asarray(module.solve(b, rcond=0.0))).all()
    # negative: eps, as jnp.linalg.lstsq; a threshold of 1e-8 flags it too
    assert int(module.rank_status(rcond=-1.0)) == int(module.rank_status(rcond=eps(np.float64)))
    assert int(module.rank_status(rcond=1e-8)) == k + 1


def test_rcond_sets_the_threshold():
    """Singular values from 1 to 1e-6: passes the default test, fails rcond=1e-3."""
    from helpers import conditioned

    a = conditioned(M, N, 1e6, np.float64, seed=3)
    b = np.ones(M)
    x, status = jaxmg.least_squares(a, b, return_status=True)
    assert int(status) == 0 and _lstsq_ratio(a, x, b) <= 30
    _, status = jaxmg.least_squares(a, b, rcond=1e-3, return_status=True)
    assert int(status) > 0


def test_full_rank_keeps_lapack_ratio_and_derivatives():
    """Full rank: status 0 and LAPACK's test ratio, and check_grads of the solution in a and b."""
    rng = np.random.default_rng(4)
    a, b = random_matrix(rng, (16, 8), np.float64), random_matrix(rng, (16,), np.float64)
    x, status = jaxmg.least_squares(a, b, return_status=True)
    assert int(status) == 0 and _lstsq_ratio(a, x, b) <= 30
    check_grads(jax.jit(lambda a, b: jaxmg.least_squares(a, b)), (a, b), order=1, modes=("fwd", "rev"))


def test_stack_flags_each_rank_deficient_matrix():
    """Under jax.vmap on a mesh (the batch route) only the rank-deficient matrix is flagged."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    rng = np.random.default_rng(5)
    stack = random_matrix(rng, (8, 16, 8), np.float64)
    stack[5] = _low_rank(np.float64, 16, 8, rank=2)
    with jax.set_mesh(mesh):
        xs, status = jax.jit(jax.vmap(lambda a: jaxmg.least_squares(a, jnp.ones(16), return_status=True)))(
            put(stack, mesh, P(("x", "y")))
        )
    bad = np.isnan(np.asarray(xs)).any(axis=1)
    assert list(np.nonzero(np.asarray(status))[0]) == [5] and list(np.nonzero(bad)[0]) == [5]


def test_rcond_must_be_known_when_traced():
    a = _dependent_column(np.float64, 3)
    with pytest.raises(TypeError, match="rcond must be None or a Python float"):
        jax.jit(lambda a, r: jaxmg.least_squares(a, jnp.ones(M), rcond=r))(a, 1e-3)


@pytest.mark.parametrize("rcond", [None, 1e-3, -1.0])
def test_numpy_lstsq_stays_minimum_norm(rcond):
    """jaxmg.numpy.linalg.lstsq on the rank-4 matrix is jnp.linalg.lstsq's minimum-norm solution."""
    mesh = make_mesh((4, 2), ("x", "y"))
    a = _low_rank(np.float64)
    b = np.random.default_rng(6).standard_normal(M)
    x, resid, rank, s = jaxmg.numpy.linalg.lstsq(put(a, mesh, P("x", "y")), b, rcond=rcond)
    xj, _, rank_j, _ = jnp.linalg.lstsq(a, b, rcond=rcond)
    assert int(rank) == int(rank_j) == 4
    np.testing.assert_allclose(np.asarray(x), np.asarray(xj), rtol=1e-8, atol=1e-10)


def test_lineax_qr_reports_rank_deficiency():
    """jaxmg.lineax.QR: RESULTS.singular and NaN with throw=False (tall and wide), an error with
    throw=True; successful on a full-rank matrix."""
    lx = pytest.importorskip("lineax")
    import jaxmg.lineax as jl

    a = _low_rank(np.float64)
    for matrix, b in ((a, np.ones(M)), (a.T.copy(), np.ones(N))):
        sol = lx.linear_solve(lx.MatrixLinearOperator(jnp.asarray(matrix)), jnp.asarray(b), solver=jl.QR(), throw=False)
        assert sol.result == lx.RESULTS.singular and np.isnan(np.asarray(sol.value)).all()
    with pytest.raises(Exception, match="non-finite|singular"):
        lx.linear_solve(lx.MatrixLinearOperator(jnp.asarray(a)), jnp.ones(M), solver=jl.QR())
    full = random_matrix(np.random.default_rng(7), (M, N), np.float64)
    sol = lx.linear_solve(lx.MatrixLinearOperator(jnp.asarray(full)), jnp.ones(M), solver=jl.QR(rcond=0.0), throw=False)
    assert sol.result == lx.RESULTS.successful and _lstsq_ratio(full, sol.value, np.ones(M)) <= 30


def test_per_shard_least_squares_is_flagged():
    """jaxmg.ops.local.least_squares inside the caller's shard_map (the local route on the
    gathered matrix): the same status and NaN rows."""
    mesh = make_mesh((4, 2), ("x", "y"))
    grid = jaxmg.Grid.from_spec(mesh, P("x", "y"))

    @jax.jit
    @functools.partial(
        jax.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("x")), out_specs=(P("x"), P()), check_vma=False
    )
    def step(a_block, b_rows):
        return jaxmg.ops.local.least_squares(a_block, b_rows, grid=grid)

    b = put(np.ones(M), mesh, P("x"))
    x, status = step(put(_dependent_column(np.float64, 17), mesh, P("x", "y")), b)
    assert int(status) == 18 and np.isnan(np.asarray(x)).all()
    full = random_matrix(np.random.default_rng(8), (M, N), np.float64)
    x, status = step(put(full, mesh, P("x", "y")), b)
    assert int(status) == 0 and _lstsq_ratio(full, x, np.ones(M)) <= 30
