"""Modules across transformation boundaries, as users call them (found by a user-style sweep):

* a module returned from ``jax.jit`` (its static call then holds the abstract mesh of the trace)
  solves eagerly afterwards, on Auto and Explicit meshes;
* module solves under an eager ``jax.vmap`` (outside ``jax.jit`` and ``jax.set_mesh``) on
  Explicit axes, where each solve's placements need a compiled program;
* ``donate=True`` modules under an eager ``jax.grad``/``jax.jvp`` with respect to ``a``: the
  caller's buffer is the tangent's primal, needed by the derivative, so it is not consumed;
* a module that consumed its ``a`` (``donate=True`` on a concrete array) still differentiates
  its solves with respect to ``b``, QR's too (it rebuilds ``a = Q R`` from its factor for them);
* every module (made under ``jax.vmap`` too) and a ``jaxmg.lineax`` state pickle, their meshes kept
  as device ids, and solve as before once loaded.
"""

import contextlib
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
from helpers import make_mesh, put, spd_matrix

N = 16
A = spd_matrix(np.random.default_rng(3), N, np.float64)
TALL = np.random.default_rng(4).standard_normal((2 * N, N // 2))
B = np.arange(1.0, N + 1)
B_TALL = np.arange(1.0, 2 * N + 1)


def _expected(name):
    if name == "QR":
        return np.linalg.lstsq(TALL, B_TALL, rcond=None)[0]
    if name == "LU.T":
        return np.linalg.solve(A.T, B)
    return np.linalg.solve(A, B)


SOLVES = {
    "Cholesky": (lambda a, t: jaxmg.Cholesky(a), lambda m, b, bt: m.solve(b)),
    "LU": (lambda a, t: jaxmg.LU(a), lambda m, b, bt: m.solve(b)),
    "LU.T": (lambda a, t: jaxmg.LU(a), lambda m, b, bt: m.solve(b, "T")),
    "QR": (lambda a, t: jaxmg.QR(t), lambda m, b, bt: m.solve(bt)),
}


@pytest.mark.parametrize("axis_types", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
@pytest.mark.parametrize("name", list(SOLVES))
def test_module_made_in_jit_solves_eagerly(name, axis_types):
    make, solve = SOLVES[name]
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_types)
    a, t = put(A, mesh, P("x", "y")), put(TALL, mesh, P("x", "y"))
    module = jax.jit(make)(a, t)
    x = solve(module, jnp.asarray(B), jnp.asarray(B_TALL))
    np.testing.assert_allclose(np.asarray(x), _expected(name), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", list(SOLVES))
def test_module_solves_under_eager_vmap_on_explicit_axes(name):
    make, solve = SOLVES[name]
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    stack = lambda x: np.stack([x, 2 * x])  # noqa: E731
    a, t = put(stack(A), mesh, P(None, "x", "y")), put(stack(TALL), mesh, P(None, "x", "y"))
    b, bt = jnp.asarray(np.stack([B, B])), jnp.asarray(np.stack([B_TALL, B_TALL]))
    x = np.asarray(jax.vmap(lambda a, t, b, bt: solve(make(a, t), b, bt))(a, t, b, bt))
    np.testing.assert_allclose(x[0], _expected(name), rtol=1e-9, atol=1e-12)
    # a second call reuses the compiled solve (no new jitted function, no new trace)
    from jaxmg import _dispatch

    before = _dispatch._compiled.cache_info()
    again = np.asarray(jax.vmap(lambda a, t, b, bt: solve(make(a, t), b, bt))(a, t, b, bt))
    after = _dispatch._compiled.cache_info()
    np.testing.assert_array_equal(again, x)
    assert after.currsize == before.currsize and after.hits > before.hits
    np.testing.assert_allclose(x[1], _expected(name) / 2, rtol=1e-9, atol=1e-12)


DONATED = {
    "Cholesky": (lambda a: jaxmg.Cholesky(a, donate=True), A, B, lambda a, b: np.linalg.solve(a, b)),
    "LU": (lambda a: jaxmg.LU(a, donate=True), A, B, lambda a, b: np.linalg.solve(a, b)),
    "QR": (lambda a: jaxmg.QR(a, donate=True), TALL, B_TALL, lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0]),
}


@pytest.mark.parametrize("axis_types", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
@pytest.mark.parametrize("name", list(DONATED))
def test_donated_module_differentiates_eagerly_and_keeps_the_callers_array(name, axis_types):
    make, matrix, rhs, reference = DONATED[name]
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_types)
    a = put(matrix, mesh, P("x", "y"))
    b = jnp.asarray(rhs)
    direction = np.random.default_rng(5).standard_normal(matrix.shape)
    if name == "Cholesky":
        direction = direction + direction.T
    loss = lambda a: jnp.sum(make(a).solve(b))  # noqa: E731
    # plain JAX's own eager grad of a sum over Explicit axes needs the mesh entered (README)
    with jax.set_mesh(mesh) if axis_types == AxisType.Explicit else contextlib.nullcontext():
        grad = jax.grad(loss)(a)
        _, tangent = jax.jvp(loss, (a,), (put(direction, mesh, P("x", "y")),))
    assert not a.is_deleted()
    eps = 1e-6
    numeric = (np.sum(reference(matrix + eps * direction, rhs)) - np.sum(reference(matrix - eps * direction, rhs))) / (
        2 * eps
    )
    np.testing.assert_allclose(float(tangent), numeric, rtol=1e-6)
    np.testing.assert_allclose(float(np.sum(np.asarray(grad) * direction)), numeric, rtol=1e-6)
    consumed = put(matrix, mesh, P("x", "y"))
    np.testing.assert_allclose(np.asarray(make(consumed).solve(b)), reference(matrix, rhs), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("axis_types", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
@pytest.mark.parametrize("name", list(DONATED))
def test_module_that_consumed_a_differentiates_in_b(name, axis_types):
    make, matrix, rhs, reference = DONATED[name]
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_types)
    module = make(put(matrix, mesh, P("x", "y")))
    assert module.operator is None
    b = jnp.asarray(rhs)
    with jax.set_mesh(mesh) if axis_types == AxisType.Explicit else contextlib.nullcontext():
        check_grads(module.solve, (b,), order=1, modes=("fwd", "rev"))
        grad = jax.grad(lambda b: jnp.sum(module.solve(b)))(b)
    # x = A^+ b is linear in b: the gradient of sum(x) is (A^+)^T 1
    np.testing.assert_allclose(np.asarray(grad), np.linalg.pinv(matrix).T @ np.ones(matrix.shape[1]), rtol=1e-9)


@pytest.mark.parametrize("on_mesh", [False, True], ids=["one-device", "explicit-mesh"])
def test_modules_and_lineax_states_pickle(on_mesh):
    """pickle.dumps of a module failed on the jax Mesh its plan holds (a device does not pickle);
    the plan now keeps its meshes as device ids, so a loaded module has the same plan (the same
    compiled calls) and the same results."""
    import lineax as lx

    import jaxmg.lineax as jl

    mesh = make_mesh((4, 2), ("x", "y")) if on_mesh else None
    a, t = (put(A, mesh, P("x", "y")), put(TALL, mesh, P("x", "y"))) if on_mesh else (A, TALL)
    modules = [jaxmg.Cholesky(a), jaxmg.LU(a), jaxmg.QR(t), jaxmg.Eigh(a), jaxmg.SVD(t), jaxmg.Polar(t)]
    for module in modules + [jax.vmap(jaxmg.Cholesky)(jnp.stack([jnp.asarray(a)] * 2))]:
        loaded = pickle.loads(pickle.dumps(module))
        assert loaded.plan == module.plan and hash(loaded.plan) == hash(module.plan)
        for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(module)):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_allclose(pickle.loads(pickle.dumps(modules[0])).solve(jnp.asarray(B)), _expected("LU"), rtol=1e-9)
    op = lx.MatrixLinearOperator(jnp.asarray(a))
    state = pickle.loads(pickle.dumps(jl.LU().init(op, {})))
    np.testing.assert_allclose(
        lx.linear_solve(op, jnp.asarray(B), jl.LU(), state=state).value, _expected("LU"), rtol=1e-9
    )


@pytest.mark.parametrize("axis_types", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_modules_of_concrete_and_traced_matrices_share_a_structure(axis_types):
    """A module made from a concrete sharded array held the concrete mesh in its plan, one made
    from a traced array (inside ``jax.lax.cond``, a ``jax.lax.scan`` body) the abstract one: their
    pytree structures differed, so ``cond`` could not return a module from branches closing over a
    concrete array and computing one, nor ``scan`` refactor a module carried from outside it. The
    plans are now equal (meshes compared as the trace sees them) and both work."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_types)
    a, b = put(A, mesh, P("x", "y")), jnp.asarray(B)
    module = jax.lax.cond(False, lambda: jaxmg.Cholesky(a), lambda: jaxmg.Cholesky(2 * a))
    np.testing.assert_allclose(np.asarray(module.solve(b)), np.linalg.solve(2 * A, B), rtol=1e-9)

    def step(module, scale):
        return jaxmg.Cholesky(scale * a), module.logdet()

    last, logdets = jax.lax.scan(step, jaxmg.Cholesky(a), jnp.array([2.0, 3.0]))
    np.testing.assert_allclose(np.asarray(logdets), [np.linalg.slogdet(s * A)[1] for s in (1, 2)], rtol=1e-9)
    np.testing.assert_allclose(np.asarray(last.solve(b)), np.linalg.solve(3 * A, B), rtol=1e-9)
    assert jaxmg.Cholesky(a).plan == jax.jit(jaxmg.Cholesky)(a).plan


def test_module_whose_arrays_were_cast_is_refused_by_name(library_errors):
    """A module cast with jax.tree.map (x.astype(float32) on its inexact leaves, as a mixed-precision
    model casts its fields) kept its plan for float64: a float64 b was solved to float32 accuracy
    and returned as float64, a float32 b was refused as if a were float64. Its methods now refuse
    it with a TypeError that says what the arrays are and how to make the module instead."""
    import equinox as eqx

    for module in (jaxmg.Cholesky(jnp.asarray(A)), jaxmg.LU(jnp.asarray(A)), jaxmg.QR(jnp.asarray(TALL))):
        cast = jax.tree.map(lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x, module)
        b = jnp.asarray(B_TALL if isinstance(module, jaxmg.QR) else B)
        for rhs in (b, b.astype(jnp.float32)):
            with pytest.raises(TypeError, match=r"made for float64.*float32.*astype"):
                cast.solve(rhs)
        want = _expected("QR" if isinstance(module, jaxmg.QR) else "LU")
        np.testing.assert_allclose(np.asarray(module.solve(b)), want, rtol=1e-9)
