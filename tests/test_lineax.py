"""jaxmg.lineax: the jaxmg solvers inside lineax.linear_solve, used the way Lineax users use them.

Lineax is in the ``test`` extra, so CI runs these. 8 simulated CPU devices (conftest).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import jaxmg
import jaxmg.lineax as jl
from helpers import make_mesh, put, random_matrix, spd_matrix

N = 16
PSD = lx.positive_semidefinite_tag


def _auto_mesh(shape=(4, 2), names=("x", "y")):
    return make_mesh(shape, names, axis_types=AxisType.Auto)


def _close(x, want, dtype=np.float64, factor=1e3):
    tol = factor * np.finfo(dtype).eps
    np.testing.assert_allclose(np.asarray(x), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("solver", [jl.Cholesky(), jl.LU(), jl.QR(), jl.Auto()], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_sharded_solve_eager_and_jit(solver, dtype):
    rng = np.random.default_rng(0)
    A, b = spd_matrix(rng, N, dtype), random_matrix(rng, (N,), dtype)
    mesh = _auto_mesh()
    a, bs = put(A, mesh, P("x", "y")), put(b, mesh, P("x"))
    want = np.linalg.solve(A, b)

    sol = lx.linear_solve(lx.MatrixLinearOperator(a, PSD), bs, solver=solver)
    assert sol.result == lx.RESULTS.successful
    _close(sol.value, want, dtype)

    solve = jax.jit(lambda a, b: lx.linear_solve(lx.MatrixLinearOperator(a, PSD), b, solver=solver).value)
    _close(solve(a, bs), want, dtype)


def test_sharded_matrix_runs_over_its_mesh():
    """The factorisation runs over a's 8-device mesh (on CPUs the local route: the matrix gathered
    there, not moved to one device), as jaxmg's own call of it does."""
    rng = np.random.default_rng(1)
    mesh = _auto_mesh()
    a, b = put(spd_matrix(rng, N, np.float64), mesh, P("x", "y")), jnp.ones(N)
    solve = lambda a, b: lx.linear_solve(lx.MatrixLinearOperator(a, PSD), b, solver=jl.Auto()).value  # noqa: E731
    text = str(jax.make_jaxpr(solve)(a, b))
    assert "'x': 4" in text and "'y': 2" in text
    assert jaxmg.Cholesky(a).route == jaxmg.route("Cholesky", a.shape, a.dtype, mesh) == "local"


def test_auto_picks_by_tags_and_shape():
    auto = jl.Auto(T_A=4, backend="portable")
    square, tall, wide = jnp.eye(4), jnp.ones((6, 4)), jnp.ones((4, 6))
    assert type(auto.select(lx.MatrixLinearOperator(square, PSD))) is jl.Cholesky
    assert type(auto.select(lx.MatrixLinearOperator(square, lx.negative_semidefinite_tag))) is jl.Cholesky
    assert type(auto.select(lx.MatrixLinearOperator(square, lx.symmetric_tag))) is jl.LU
    assert type(auto.select(lx.MatrixLinearOperator(square))) is jl.LU
    assert type(auto.select(lx.MatrixLinearOperator(tall))) is jl.QR
    assert type(auto.select(lx.MatrixLinearOperator(wide))) is jl.QR
    assert auto.select(lx.MatrixLinearOperator(tall)) == jl.QR(T_A=4, backend="portable")  # options carried


def test_unsharded_inputs_and_single_device_arrays():
    """Inputs built inline, no mesh anywhere: one device, as Lineax's own solvers."""
    rng = np.random.default_rng(2)
    A = spd_matrix(rng, N, np.float64)
    for solver in (jl.Auto(), jl.LU(), jl.QR()):
        x = lx.linear_solve(lx.MatrixLinearOperator(jnp.asarray(A), PSD), jnp.ones(N), solver=solver).value
        _close(x, np.linalg.solve(A, np.ones(N)))


def test_explicit_mesh_with_unsharded_vector():
    """On an Explicit mesh Lineax compares the vector's sharding with the operator's
    (unsharded) out-structure, so the vector is passed unsharded; a stays sharded."""
    rng = np.random.default_rng(3)
    A = spd_matrix(rng, N, np.float64)
    mesh = make_mesh((8,), ("i",))
    a = put(A, mesh, P("i"))
    x = lx.linear_solve(lx.MatrixLinearOperator(a, PSD), jnp.ones(N), solver=jl.Auto()).value
    _close(x, np.linalg.solve(A, np.ones(N)))
    W = random_matrix(np.random.default_rng(13), (N, 2 * N), np.float64)  # wide: minimum norm from Q, R
    x = lx.linear_solve(lx.MatrixLinearOperator(put(W, mesh, P(None, "i"))), jnp.ones(N), solver=jl.QR()).value
    _close(x, np.linalg.lstsq(W, np.ones(N), rcond=None)[0])


def test_context_mesh_inside_jit():
    rng = np.random.default_rng(4)
    A, b = random_matrix(rng, (N, N), np.float64) + N * np.eye(N), np.ones(N)
    mesh = _auto_mesh((8,), ("i",))
    with jax.set_mesh(mesh):
        x = jax.jit(lambda a, b: lx.linear_solve(lx.MatrixLinearOperator(a), b, solver=jl.LU()).value)(A, b)
    _close(x, np.linalg.solve(A, b))


def test_negative_definite_operator():
    rng = np.random.default_rng(5)
    A = -spd_matrix(rng, N, np.float64)
    x = lx.linear_solve(
        lx.MatrixLinearOperator(jnp.asarray(A), lx.negative_semidefinite_tag), jnp.ones(N), solver=jl.Cholesky()
    ).value
    _close(x, np.linalg.solve(A, np.ones(N)))


@pytest.mark.parametrize("shape", [(24, 16), (16, 24)], ids=["tall", "wide"])
def test_qr_least_squares_and_minimum_norm(shape):
    rng = np.random.default_rng(6)
    A, b = random_matrix(rng, shape, np.float64), random_matrix(rng, (shape[0],), np.float64)
    mesh = _auto_mesh((8,), ("i",))
    a = put(A, mesh, P("i") if shape[0] > shape[1] else P(None, "i"))
    for solver in (jl.QR(), jl.Auto()):
        x = lx.linear_solve(lx.MatrixLinearOperator(a), jnp.asarray(b), solver=solver).value
        _close(x, np.linalg.lstsq(A, b, rcond=None)[0])  # lstsq is the minimum-norm solution when wide


@pytest.mark.parametrize("solver", [jl.Cholesky(), jl.LU(), jl.QR()], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_state_reuse_transpose_and_conj(solver, dtype):
    """init once; then solve with the operator, its transpose and its conjugate from that one state."""
    rng = np.random.default_rng(7)
    A = spd_matrix(rng, N, dtype)
    if not isinstance(solver, jl.Cholesky):
        A = A + random_matrix(rng, (N, N), dtype) / N  # not Hermitian
    b1, b2 = random_matrix(rng, (N,), dtype), random_matrix(rng, (N,), dtype)
    mesh = _auto_mesh()
    op = lx.MatrixLinearOperator(put(A, mesh, P("x", "y")), PSD if isinstance(solver, jl.Cholesky) else ())
    state = solver.init(op, {})
    for b in (b1, b2):
        _close(lx.linear_solve(op, jnp.asarray(b), solver, state=state).value, np.linalg.solve(A, b), dtype)
    t_state, t_options = solver.transpose(state, {})
    assert t_options == {}
    _close(lx.linear_solve(op.T, jnp.asarray(b1), solver, state=t_state).value, np.linalg.solve(A.T, b1), dtype)
    c_state, _ = solver.conj(state, {})
    _close(
        lx.linear_solve(lx.conj(op), jnp.asarray(b1), solver, state=c_state).value, np.linalg.solve(A.conj(), b1), dtype
    )
    ct_state, _ = solver.transpose(c_state, {})
    _close(
        lx.linear_solve(lx.conj(op).T, jnp.asarray(b1), solver, state=ct_state).value,
        np.linalg.solve(A.conj().T, b1),
        dtype,
    )


def test_wide_qr_transpose_is_least_squares():
    rng = np.random.default_rng(8)
    A, b = random_matrix(rng, (12, 20), np.float64), random_matrix(rng, (20,), np.float64)
    op = lx.MatrixLinearOperator(jnp.asarray(A))
    state, _ = jl.QR().transpose(jl.QR().init(op, {}), {})
    x = lx.linear_solve(op.T, jnp.asarray(b), jl.QR(), state=state).value
    _close(x, np.linalg.lstsq(A.T, b, rcond=None)[0])


def test_tall_qr_transpose_is_minimum_norm_and_differentiable():
    """The transposed tall operator (Lineax's reverse mode) gets the minimum-norm solution from the
    saved factor, complex and sharded, and the derivative of a least-squares loss through it."""
    rng = np.random.default_rng(9)
    A, b = random_matrix(rng, (20, 12), np.complex128), random_matrix(rng, (12,), np.complex128)
    op = lx.MatrixLinearOperator(put(A, _auto_mesh(), P("x", "y")))
    state, _ = jl.QR().transpose(jl.QR().init(op, {}), {})
    x = lx.linear_solve(op.T, jnp.asarray(b), jl.QR(), state=state).value
    _close(x, np.linalg.lstsq(A.T, b, rcond=None)[0], np.complex128)

    def loss(a, c):
        y = lx.linear_solve(lx.MatrixLinearOperator(a), c, jl.QR()).value
        return jnp.sum(jnp.abs(y) ** 2)

    def plain(a, c):
        return jnp.sum(jnp.abs(jnp.linalg.lstsq(a, c)[0]) ** 2)

    c = random_matrix(rng, (20,), np.complex128)
    got = jax.grad(loss, argnums=(0, 1))(jnp.asarray(A), jnp.asarray(c))
    want = jax.grad(plain, argnums=(0, 1))(jnp.asarray(A), jnp.asarray(c))
    for g, w in zip(got, want):
        _close(g, w, np.complex128)


@pytest.mark.parametrize(
    "solver, matrix",
    [
        (jl.LU(), np.ones((N, N))),  # singular: zero pivot
        (jl.Auto(), np.ones((N, N))),
        (jl.Cholesky(), np.diag(np.r_[np.ones(N - 1), -1.0])),  # not positive definite
        (jl.QR(), np.c_[np.ones((N + 4, 1)), np.zeros((N + 4, 1))]),  # rank deficient
    ],
    ids=["lu", "auto", "cholesky", "qr"],
)
def test_failure_is_a_result_not_silent_nan(solver, matrix):
    tags = PSD if isinstance(solver, jl.Cholesky) else ()
    op = lx.MatrixLinearOperator(jnp.asarray(matrix), tags)
    b = jnp.ones(matrix.shape[0])
    sol = lx.linear_solve(op, b, solver=solver, throw=False)
    assert sol.result == lx.RESULTS.singular
    state = solver.init(op, {})
    _, result, _ = solver.compute(state, b, {})
    assert result == lx.RESULTS.singular  # from jaxmg's status, not from Lineax's NaN check
    with pytest.raises(Exception, match="non-finite"):
        lx.linear_solve(op, b, solver=solver, throw=True).value.block_until_ready()


def test_success_result_inside_jit_and_vmap():
    """result is per system under vmap: one failing operator does not fail the others."""
    good, bad = np.eye(4) * 2.0, np.ones((4, 4))
    solve = jax.jit(jax.vmap(lambda a, b: lx.linear_solve(lx.MatrixLinearOperator(a), b, solver=jl.LU(), throw=False)))
    sol = solve(jnp.stack([good, bad]), jnp.ones((2, 4)))
    assert list(np.asarray(sol.result._value)) == [lx.RESULTS.successful._value, lx.RESULTS.singular._value]
    _close(sol.value[0], np.full(4, 0.5))


@pytest.mark.parametrize("solver", [jl.Cholesky(), jl.LU(), jl.Auto()], ids=lambda s: type(s).__name__)
def test_grad_through_linear_solve(solver):
    """jax.grad outside jit, w.r.t. the sharded matrix and the vector, against jnp.linalg.solve."""
    rng = np.random.default_rng(9)
    A, b = spd_matrix(rng, N, np.float64), random_matrix(rng, (N,), np.float64)
    mesh = _auto_mesh()
    a, bs = put(A, mesh, P("x", "y")), put(b, mesh, P("x"))

    def loss(a, b):
        x = lx.linear_solve(lx.MatrixLinearOperator(a, PSD), b, solver=solver).value
        return jnp.sum(jnp.sin(x))

    ga, gb = jax.grad(loss, argnums=(0, 1))(a, bs)
    want_a, want_b = jax.grad(lambda a, b: jnp.sum(jnp.sin(jnp.linalg.solve(a, b))), argnums=(0, 1))(A, b)
    _close(gb, want_b)
    if isinstance(solver, jl.LU):
        _close(ga, want_a)
    else:  # Cholesky: a is taken symmetric (Lineax's convention); compare the symmetric part
        _close((ga + ga.T) / 2, (want_a + want_a.T) / 2)


def test_grad_of_least_squares_and_jvp():
    rng = np.random.default_rng(10)
    A, b = random_matrix(rng, (20, 12), np.float64), random_matrix(rng, (20,), np.float64)

    def ours(a, b):
        return lx.linear_solve(lx.MatrixLinearOperator(a), b, solver=jl.QR()).value

    def reference(a, b):
        return jnp.linalg.lstsq(a, b)[0]

    loss = lambda f: lambda a, b: jnp.sum(f(a, b) ** 2)  # noqa: E731
    got, want = jax.grad(loss(ours), argnums=(0, 1))(A, b), jax.grad(loss(reference), argnums=(0, 1))(A, b)
    for g, w in zip(got, want):
        _close(g, w, factor=1e5)
    da, db = random_matrix(rng, A.shape, np.float64), random_matrix(rng, b.shape, np.float64)
    _, t_ours = jax.jvp(ours, (jnp.asarray(A), jnp.asarray(b)), (jnp.asarray(da), jnp.asarray(db)))
    _, t_ref = jax.jvp(reference, (jnp.asarray(A), jnp.asarray(b)), (jnp.asarray(da), jnp.asarray(db)))
    _close(t_ours, t_ref, factor=1e5)


def _rank_deficient(rng, shape, rank, dtype):
    return random_matrix(rng, (shape[0], rank), dtype) @ random_matrix(rng, (rank, shape[1]), dtype)


#: (dtype, shape): a real square and a complex wide operator in the quick run, the others with --slow
SVD_QUICK = {("square", np.float64), ("wide", np.complex128)}
SVD_CASES = [
    pytest.param(d, shape, id=f"{np.dtype(d).name}-{name}", marks=[] if (name, d) in SVD_QUICK else [pytest.mark.slow])
    for name, shape in {"square": (12, 12), "tall": (20, 12), "wide": (12, 20)}.items()
    for d in (np.float64, np.complex128)
]


@pytest.mark.parametrize("dtype,shape", SVD_CASES)
def test_svd_solves_any_rank_as_lineax_svd(dtype, shape):
    """jaxmg.lineax.SVD (and Auto(well_posed=False)) on rank-deficient operators, sharded over an
    Auto mesh: the pseudo-inverse solution and a successful result, as lineax.SVD; the transposed
    and conjugated operators from the same state; the derivatives with respect to the matrix and
    the vector (Lineax's, of an operator of not full rank) as lineax.SVD's."""
    rng = np.random.default_rng(12)
    A, b = _rank_deficient(rng, shape, 5, dtype), random_matrix(rng, (shape[0],), dtype)
    a = put(A, _auto_mesh(), P("x", "y"))

    def solve(a, b, solver, transform=lambda op: op, state=None):
        op = transform(lx.MatrixLinearOperator(a))
        return lx.linear_solve(op, b, solver=solver, **({} if state is None else {"state": state}))

    want = solve(A, b, lx.SVD())
    for solver in (jl.SVD(), jl.Auto(well_posed=False)):
        sol = solve(a, b, solver)
        assert sol.result == lx.RESULTS.successful and not solver.assume_full_rank()
        _close(sol.value, want.value, dtype)
    state = jl.SVD().init(lx.MatrixLinearOperator(a), {})
    c = random_matrix(rng, (shape[1],), dtype)
    transposed, _ = jl.SVD().transpose(state, {})
    _close(
        solve(a, c, jl.SVD(), lambda op: op.T, transposed).value, solve(A, c, lx.SVD(), lambda op: op.T).value, dtype
    )
    conjugated, _ = jl.SVD().conj(state, {})
    _close(solve(a, b, jl.SVD(), lx.conj, conjugated).value, solve(A, b, lx.SVD(), lx.conj).value, dtype)

    def loss(a, b, solver):
        return jnp.real(jnp.sum(jnp.sin(solve(a, b, solver).value)))

    got = jax.grad(loss, argnums=(0, 1))(a, jnp.asarray(b), jl.SVD())
    for g, w in zip(got, jax.grad(loss, argnums=(0, 1))(jnp.asarray(A), jnp.asarray(b), lx.SVD())):
        _close(g, w, dtype, factor=1e4)


def test_svd_rcond_and_failure_as_lineax_svd():
    """rcond reads as lineax.SVD's (singular values at or below rcond * s[0] dropped); a
    non-finite operator is RESULTS.singular (a NaN value) where Lineax's SVD gives NaN too."""
    a, b = jnp.diag(jnp.array([1.0, 1e-3, 1e-9])), jnp.ones(3)
    for rcond in (None, 1e-6, 1e-2, -1.0):
        got = lx.linear_solve(lx.MatrixLinearOperator(a), b, jl.SVD(rcond=rcond)).value
        _close(got, lx.linear_solve(lx.MatrixLinearOperator(a), b, lx.SVD(rcond=rcond)).value)
    with pytest.raises(TypeError, match="rcond"):  # named by the type check where it runs, else by the solve
        lx.linear_solve(lx.MatrixLinearOperator(a), b, jl.SVD(rcond="small"))
    bad = lx.linear_solve(lx.MatrixLinearOperator(jnp.full((3, 3), jnp.nan)), b, jl.SVD(), throw=False)
    assert bad.result == lx.RESULTS.singular and np.isnan(np.asarray(bad.value)).all()


def test_vmap_over_operators_and_vectors():
    rng = np.random.default_rng(11)
    As = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(3)])
    bs = rng.standard_normal((3, 8))
    for solver in (jl.Auto(), jl.LU()):
        solve = jax.vmap(
            lambda a, b, solver=solver: lx.linear_solve(lx.MatrixLinearOperator(a, PSD), b, solver=solver).value
        )
        _close(solve(As, bs), np.linalg.solve(As, bs[..., None])[..., 0])
        _close(jax.jit(solve)(As, bs), np.linalg.solve(As, bs[..., None])[..., 0])
    # vmap over vectors with one operator, and grad of a vmapped solve
    op = lx.MatrixLinearOperator(jnp.asarray(As[0]), PSD)
    xs = jax.vmap(lambda b: lx.linear_solve(op, b, solver=jl.Cholesky()).value)(bs)
    _close(xs, np.linalg.solve(As[0], bs.T).T)
    g = jax.grad(
        lambda A: jnp.sum(
            jax.vmap(lambda a, b: lx.linear_solve(lx.MatrixLinearOperator(a), b, solver=jl.LU()).value)(A, bs)
        )
    )(As)
    _close(g, jax.grad(lambda A: jnp.sum(jnp.linalg.solve(A, bs[..., None])))(As))


STACK_SOLVERS = [jl.LU(), jl.Cholesky(), jl.QR(), jl.SVD(), jl.Auto()]


def _stack_of_operators(rng, solver):
    """Four operators of order 8 (positive definite, tagged so, for Cholesky), the tag and b."""
    mats = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(4)])
    return mats, (PSD if isinstance(solver, jl.Cholesky) else ()), rng.standard_normal(8)


@pytest.mark.parametrize("solver", STACK_SOLVERS, ids=lambda s: type(s).__name__)
def test_vmap_over_a_stack_split_on_explicit_axes(solver):
    """jax.vmap over a stack split over its batch axis by an Explicit mesh axis (Lineax traces the
    solve one matrix at a time and JAX batches it), with throw=False: eagerly, in jax.jit and
    under jax.set_mesh, each matrix's solution as a loop's, and a result code per matrix (a zero
    matrix in the stack fails alone; SVD solves it, as lx.SVD). A solver left at throw=True
    refuses, naming throw=False: a failure raised there would stop only some devices."""
    rng = np.random.default_rng(21)
    mats, tag, b = _stack_of_operators(rng, solver)
    mesh = make_mesh((4, 2), ("x", "y"))
    quiet = type(solver)(throw=False)

    def solve(m, solver=quiet):
        return lx.linear_solve(lx.MatrixLinearOperator(m, tag), jnp.asarray(b), solver=solver, throw=False)

    want = np.stack([np.linalg.solve(m, b) for m in mats])
    a = put(mats, mesh, P("x"))
    _close(jax.vmap(solve)(a).value, want)
    _close(jax.jit(jax.vmap(solve))(a).value, want)
    with jax.set_mesh(mesh):
        _close(jax.jit(jax.vmap(solve))(a).value, want)
    with pytest.raises(ValueError, match="throw=False"):
        jax.vmap(lambda m: solve(m, solver))(a)
    mats[2] = 0.0
    sols = jax.vmap(solve)(put(mats, mesh, P("x")))
    failed = np.asarray(sols.result._value) != lx.RESULTS.successful._value
    svd = isinstance(solver, jl.SVD)
    np.testing.assert_array_equal(failed, [False, False, not svd, False])
    _close(np.asarray(sols.value)[[0, 1, 3]], want[[0, 1, 3]])
    assert np.isnan(np.asarray(sols.value)[2]).all() != svd


@pytest.mark.parametrize("solver", [jl.LU(), jl.Cholesky(), jl.QR()], ids=lambda s: type(s).__name__)
def test_vmap_over_a_stack_split_on_auto_axes_and_its_gradients(solver):
    """The same stack on Auto axes: values, and the gradients with respect to every operator and
    the shared vector, in jax.jit, as those of jnp.linalg.solve."""
    rng = np.random.default_rng(22)
    mats, tag, b = _stack_of_operators(rng, solver)
    mesh = _auto_mesh()
    a = put(mats, mesh, P("x"))

    def loss(m, v, solve):
        return jnp.sum(jax.vmap(solve, in_axes=(0, None))(m, v) ** 2)

    ours = lambda m, v: lx.linear_solve(lx.MatrixLinearOperator(m, tag), v, solver=solver).value  # noqa: E731
    ga, gb = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(a, jnp.asarray(b), ours)
    wa, wb = jax.grad(loss, argnums=(0, 1))(jnp.asarray(mats), jnp.asarray(b), jnp.linalg.solve)
    if tag:  # only the lower triangle is read: compare the symmetric parts
        ga, wa = ga + jnp.swapaxes(ga, -1, -2), wa + jnp.swapaxes(wa, -1, -2)
    _close(ga, wa)
    _close(gb, wb)


def test_pytree_operator():
    """Operators on pytrees of vectors: the vector is flattened and the solution unflattened."""
    rng = np.random.default_rng(12)
    A = spd_matrix(rng, 6, np.float64)
    structure = (jax.ShapeDtypeStruct((2,), jnp.float64), jax.ShapeDtypeStruct((4,), jnp.float64))
    op = lx.MatrixLinearOperator(jnp.asarray(A))
    fn = lambda v: (lambda y: (y[:2], y[2:]))(op.mv(jnp.concatenate(v)))  # noqa: E731
    pytree_op = lx.FunctionLinearOperator(fn, structure)
    b = (jnp.ones(2), jnp.arange(4.0))
    x = lx.linear_solve(pytree_op, b, solver=jl.LU()).value
    assert isinstance(x, tuple) and x[0].shape == (2,) and x[1].shape == (4,)
    _close(jnp.concatenate(x), np.linalg.solve(A, np.r_[np.ones(2), np.arange(4.0)]))


def test_solvers_are_lineax_solvers_and_hashable():
    for solver in (jl.Cholesky(), jl.LU(), jl.QR(), jl.SVD(), jl.Auto(T_A=8, backend="portable")):
        assert isinstance(solver, lx.AbstractLinearSolver)
        assert solver.assume_full_rank() is not isinstance(solver, jl.SVD)
        hash(solver)
        assert eqx.tree_equal(
            solver, type(solver)(**{f: getattr(solver, f) for f in ("T_A", "mesh", "matrix_specs", "backend")})
        )


def test_bad_operators_name_the_fix():
    with pytest.raises(ValueError, match="positive_semidefinite_tag"):
        jl.Cholesky().init(lx.MatrixLinearOperator(jnp.eye(4)), {})
    with pytest.raises(ValueError, match="QR"):
        jl.LU().init(lx.MatrixLinearOperator(jnp.ones((6, 4))), {})
    with pytest.raises(TypeError, match="lineax linear operator|parameter 'operator'"):
        jl.LU().init(jnp.eye(4), {})
    with pytest.raises(ValueError, match="backend"):
        lx.linear_solve(lx.MatrixLinearOperator(jnp.eye(4)), jnp.ones(4), solver=jl.LU(backend="fast"))


def test_lazy_attribute_on_the_package():
    assert jaxmg.lineax is jl
