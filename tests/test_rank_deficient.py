"""Rank-deficient least squares is flagged, never a finite wrong answer with status 0.

``jaxmg.least_squares``, ``QR(a).solve`` and ``jaxmg.lineax.QR`` test R's diagonal against
``rcond * max|R_ii|`` (default ``max(M, N) * eps``): a numerically rank-deficient ``a`` gives
the 1-based index of the first small entry as its status and NaN outputs, on the local and
batch routes here (the distributed route: tests/gpu/test_qr_emulated.py). Full-rank inputs keep
LAPACK's least-squares test ratio and their derivatives; ``jaxmg.numpy.linalg.lstsq`` stays
the minimum-norm solution of any rank, as ``jnp.linalg.lstsq``. Wide matrices of full row rank
are solved, not flagged, however ill-conditioned (up to the rank test): their minimum-norm
solutions ``x = Q R^-H b`` (``a^H = Q R``) keep LAPACK's ratios at condition numbers 1e2 to 1e12.
Empty matrices give ``jnp.linalg.lstsq``'s empty or zero solutions with status 0.
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


def test_rcond_that_is_not_a_number_is_named(library_errors):
    """A string rcond is refused with rcond's name, not with float()'s own message."""
    module = jaxmg.QR(_dependent_column(np.float64, 3))
    for call in (lambda: module.solve(np.ones(M), rcond="small"), lambda: module.rank_status(rcond="tiny")):
        with pytest.raises(TypeError, match="rcond must be None or a Python float"):
            call()


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


@pytest.mark.parametrize("shape", [(6, 4), (4, 6)], ids=["tall", "wide"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_numpy_lstsq_derivatives_where_rcond_truncates(shape, dtype):
    """A full-rank ``a`` whose smaller singular values fall below ``rcond * s[0]``: x is the
    truncated SVD's solution, and its derivatives (forward and reverse, tall and wide) are those
    of that function, as ``jnp.linalg.lstsq``'s (whose SVD couples the kept singular vectors to
    the dropped ones), in ``a`` and in ``b``."""
    rng = np.random.default_rng(7)
    u = np.linalg.qr(random_matrix(rng, (shape[0], shape[0]), dtype))[0]
    v = np.linalg.qr(random_matrix(rng, (shape[1], shape[1]), dtype))[0]
    s = np.array([3.0, 2.0, 0.9, 0.5])  # rcond 0.4: two kept, two dropped (not zero)
    a = jnp.asarray((u[:, :4] * s) @ v[:4])
    b = jnp.asarray(random_matrix(rng, (shape[0], 2), dtype))
    t, tb = (jnp.asarray(random_matrix(rng, x.shape, dtype)) for x in (a, b))
    fns = [la.lstsq for la in (jaxmg.numpy.linalg, jnp.linalg)]
    got, want = (jax.jvp(lambda a, b, f=f: f(a, b, rcond=0.4)[:2], (a, b), (t, tb)) for f in fns)
    assert int(jaxmg.numpy.linalg.lstsq(a, b, rcond=0.4)[2]) == 2
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-9, atol=1e-10)
    check_grads(lambda a, b: jaxmg.numpy.linalg.lstsq(a, b, rcond=0.4)[0], (a, b), order=1, modes=("fwd", "rev"))


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


# --- wide matrices of full row rank: the minimum-norm solution, at any condition number ---------

#: condition numbers of the wide problems, per dtype (float32's eps is 1.2e-7)
WIDE_CONDS = {np.float64: (1e2, 1e8, 1e12), np.complex128: (1e2, 1e8, 1e12), np.float32: (1e3, 1e5)}


def _wide(m, n, cond, dtype, seed):
    """(a, b, v): a = U diag(s) V^H (m < n) with s geometric from 1 to 1 / cond (full row rank,
    not graded by rows or columns), b (m,) random, v (n, m) an orthonormal basis of a's row space."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(random_matrix(rng, (m, m), np.complex128 if np.iscomplexobj(dtype(0)) else np.float64))[0]
    v = np.linalg.qr(random_matrix(rng, (n, m), np.complex128 if np.iscomplexobj(dtype(0)) else np.float64))[0]
    a = (u * np.geomspace(1.0, 1.0 / cond, m)) @ np.conj(v).T
    return a.astype(dtype), random_matrix(rng, (m,), dtype), v


def _wide_ratios(a, x, b, v, cond, dtype) -> dict:
    """LAPACK's ratios of a wide problem's x (each at most 30 for a correct x): the residual
    ||a x - b|| / (N eps ||a|| ||x||), the normal-equation residual ||a^H (a x - b)|| / (||a||
    (||a|| ||x|| + ||b||) N eps), and x's distance from a's row space, ||(I - V V^H) x|| /
    (cond N eps ||x||) (a backward-stable x lies in the row space of a matrix within eps ||a||
    of a, which is within cond eps of a's own)."""
    a, x, b = (np.asarray(t, np.complex128) for t in (a, x, b))
    n, e = a.shape[1], eps(dtype)
    na, nx, nb = np.linalg.norm(a, 2), np.linalg.norm(x), np.linalg.norm(b)
    r = a @ x - b
    return {
        "residual": np.linalg.norm(r) / (n * e * na * nx),
        "normal": np.linalg.norm(a.conj().T @ r) / (na * (na * nx + nb) * n * e),
        "row space": np.linalg.norm(x - v @ (v.conj().T @ x)) / (cond * n * e * nx),
    }


@functools.cache
def _wide_solvers():
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    solve = lambda a, b: jaxmg.least_squares(a, b, return_status=True)  # noqa: E731
    module = lambda a, b: (jaxmg.QR(a).solve(b), jaxmg.QR(a).rank_status())  # noqa: E731
    return mesh, solve, jax.jit(module), jax.jit(jax.vmap(solve)), jax.jit(solve)


@pytest.mark.parametrize("m,n", [(16, 40), (24, 36)])
@pytest.mark.parametrize("dtype", list(WIDE_CONDS))
def test_wide_ill_conditioned_minimum_norm(m, n, dtype):
    """Full row rank, condition 1e2 to 1e12 (float32: 1e3, 1e5): status 0 and every ratio of
    :func:`_wide_ratios` at most 30, eagerly, QR(a).solve in jit, a stack under vmap and on an
    Explicit (4, 2) mesh (where the corrected semi-normal equations gave NaN and status -1 from
    cond 1e11 in float64)."""
    mesh, solve, module, stacked, jitted = _wide_solvers()
    cases = [_wide(m, n, cond, dtype, seed) for seed, cond in enumerate(WIDE_CONDS[dtype])]
    xs, statuses = stacked(np.stack([a for a, _, _ in cases]), np.stack([b for _, b, _ in cases]))
    for k, ((a, b, v), cond) in enumerate(zip(cases, WIDE_CONDS[dtype])):
        runs = {
            "eager": solve(a, b),
            "QR(a).solve in jit": module(a, b),
            "vmap": (xs[k], statuses[k]),
            "mesh": jitted(put(a, mesh, P("x", "y")), put(b, mesh, P("x"))),
        }
        for how, (x, status) in runs.items():
            ratios = _wide_ratios(a, x, b, v, cond, dtype)
            assert int(status) == 0 and max(ratios.values()) <= 30, (how, cond, int(status), ratios)


def test_wrong_wide_solution_is_check_failed(monkeypatch):
    """The wide solution's backward check reaches the caller as CHECK_FAILED (-2) with NaN, not
    as NOT_FINITE (-1) from the NaN it masks: a kernel made to return 2 x fails it."""
    from jaxmg.kernels import local, status as codes

    right = local.QR.minimum_norm
    monkeypatch.setattr(local.QR, "minimum_norm", lambda self, state, b, spec=None: 2 * right(self, state, b, spec))
    a, b, _ = _wide(6, 10, 2.0, np.float64, seed=10)
    x, status = jaxmg.least_squares(a, b, return_status=True)
    assert int(status) == codes.CHECK_FAILED and np.isnan(np.asarray(x)).all()


def test_wide_minimum_norm_derivatives():
    """The wide solution's derivatives (forward and reverse, order 2) in a and b, and reverse
    mode equal to jnp.linalg.lstsq's, on a matrix of condition 2."""
    a, b, _ = _wide(6, 10, 2.0, np.float64, seed=9)
    check_grads(jax.jit(lambda a, b: jaxmg.least_squares(a, b)), (a, b), order=2, modes=("fwd", "rev"))

    def loss(solver):
        return lambda a, b: jnp.sum(jnp.sin(solver(a, b)))

    got = jax.grad(loss(jaxmg.least_squares), argnums=(0, 1))(a, b)
    ref = jax.grad(loss(lambda a, b: jnp.linalg.lstsq(a, b)[0]), argnums=(0, 1))(a, b)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-7, atol=1e-7 * np.abs(r).max())


# --- empty matrices: jnp.linalg.lstsq's answers, status 0 ---------------------------------------


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0)])
@pytest.mark.parametrize("rhs", [(), (2,)])
def test_empty_least_squares(shape, rhs):
    """x of shape (N,) or (N, K), zeros (jnp.linalg.lstsq's), and status 0 from least_squares
    (eagerly and in jit), QR(a).solve and rank_status, jaxmg.lineax.QR,
    jaxmg.numpy.linalg.lstsq and pinv (where a reduction over R's empty diagonal raised)."""
    a, b = jnp.zeros(shape), jnp.ones(shape[:1] + rhs)
    expected = np.zeros(shape[1:] + rhs)
    solve = lambda a, b: jaxmg.least_squares(a, b, return_status=True)  # noqa: E731
    for x, status in (solve(a, b), jax.jit(solve)(a, b)):
        assert int(status) == 0
        np.testing.assert_array_equal(np.asarray(x), expected)
    module = jaxmg.QR(a)
    assert int(module.status) == 0 and int(module.rank_status()) == 0
    np.testing.assert_array_equal(np.asarray(module.solve(b)), expected)
    x, _, rank, s = jaxmg.numpy.linalg.lstsq(a, b)
    np.testing.assert_array_equal(np.asarray(x), expected)
    assert int(rank) == 0 and s.shape == (0,)
    assert jaxmg.numpy.linalg.pinv(a).shape == shape[::-1]
    if not rhs:
        lx = pytest.importorskip("lineax")
        import jaxmg.lineax as jl

        sol = lx.linear_solve(lx.MatrixLinearOperator(a), b, solver=jl.QR(), throw=False)
        assert sol.result == lx.RESULTS.successful
        np.testing.assert_array_equal(np.asarray(sol.value), expected)


def _exactly_rank_deficient(shape) -> dict:
    """Matrices whose Householder R has an exactly zero diagonal entry: a zero column, the zero
    matrix, and a wide matrix of full row rank whose first M columns are singular."""
    tall = np.random.default_rng(9).standard_normal(shape)
    tall[:, 1] = 0.0
    wide = np.zeros((4, 8))
    wide[0, 5], wide[1, 1], wide[2, 6], wide[3, 7] = 1.0, 2.0, 3.0, 4.0
    return {"zero column": tall, "zero": np.zeros(shape), "wide": wide}


@pytest.mark.parametrize("mesh_kind", MESHES)
def test_qr_of_an_exactly_rank_deficient_matrix(mesh_kind):
    """A QR factorisation exists for every finite matrix: jaxmg.qr (status 0), QR(a).q and .r, and
    the drop-ins' qr give Q with orthonormal columns and R with a = Q R, as JAX's (not NaN); a
    least-squares solve of a tall one is still flagged, the wide one (full row rank) is solved."""
    import jaxmg.numpy.linalg as la
    import jaxmg.scipy.linalg as sla

    mesh = make_mesh((4, 2), ("x", "y"), axis_types=MESHES[mesh_kind])
    for name, a in _exactly_rank_deficient((8, 4)).items():
        sharded = put(a, mesh, P("x", "y"))
        q, r, status = jax.jit(lambda a: jaxmg.qr(a, return_status=True))(sharded)
        assert int(status) == 0, name
        results = {
            "jaxmg.qr": (q, r),
            "QR": (jaxmg.QR(sharded).q, jaxmg.QR(sharded).r),
            "la.qr": tuple(la.qr(sharded)),
            "sla.qr": sla.qr(sharded, mode="economic"),
        }
        for where, (q, r) in results.items():
            q, r = np.asarray(q), np.asarray(r)
            k = min(a.shape)
            assert np.allclose(q.T @ q, np.eye(k), atol=1e-14) and np.allclose(q @ r, a, atol=1e-14), (name, where)
            assert np.allclose(np.abs(r), np.abs(np.asarray(jnp.linalg.qr(a)[1])), atol=1e-14), (name, where)
        x, status = jaxmg.least_squares(sharded, put(np.ones(a.shape[0]), mesh, P("x")), return_status=True)
        if name == "wide":
            assert int(status) == 0 and np.allclose(np.asarray(x), np.linalg.pinv(a) @ np.ones(4), atol=1e-14)
        else:
            assert int(status) > 0 and np.isnan(np.asarray(x)).all(), name
