"""Several meshes used alternately in one program each keep working (portable backend).

a program that alternates between meshes of different shapes, for example (8, 1),
(4, 2) and (2, 4) over the same 8 devices, gets correct results on each, eagerly and in jit,
and a factorisation made on one mesh still solves after calls on the others. The two-process
version, (2, 1) and (1, 2) through jaxmg.launch, is tests/launch_scripts/two_meshes.py.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import hermitian_matrix, make_mesh, put, random_matrix, spd_matrix

N = 16
SHAPES = [(8, 1), (4, 2), (2, 4)]


MIXED = {
    "potrs": (lambda a, b: jaxmg.potrs(a, b), lambda a, b: np.linalg.solve(a, b), "spd"),
    "cholesky": (lambda a, b: jaxmg.cholesky(a), lambda a, b: np.linalg.cholesky(a), "spd"),
    "qr.r": (lambda a, b: abs(jaxmg.qr(a)[1]), lambda a, b: abs(np.linalg.qr(a)[1]), "gen"),
    "la.inv": (lambda a, b: la.inv(a), lambda a, b: np.linalg.inv(a), "gen"),
    "la.eigvalsh": (lambda a, b: la.eigvalsh(a), lambda a, b: np.linalg.eigvalsh(a), "spd"),
    "sla.lu_solve": (lambda a, b: sla.lu_solve(sla.lu_factor(a), b), lambda a, b: np.linalg.solve(a, b), "gen"),
    "grad la.inv": (
        lambda a, b: jax.grad(lambda a: (la.inv(a) ** 2).sum())(a),
        lambda a, b: -2 * np.linalg.inv(a).T @ np.linalg.inv(a) @ np.linalg.inv(a).T,
        "gen",
    ),
}


@pytest.mark.parametrize("types", [(AxisType.Explicit, AxisType.Auto), (AxisType.Auto, AxisType.Explicit)])
@pytest.mark.parametrize("name", list(MIXED))
def test_a_mesh_of_explicit_and_auto_axes(name, types):
    """On a mesh with one Explicit and one Auto axis (a's layout naming both), jitted calls under
    jax.set_mesh give NumPy's answers, and a gradient comes back in a's layout."""
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=types)
    rng = np.random.default_rng(3)
    data = {"spd": spd_matrix(rng, 8, np.float64), "gen": random_matrix(rng, (8, 8), np.float64) + 8 * np.eye(8)}
    fn, want, kind = MIXED[name]
    a, b = put(data[kind], mesh, P("x", "y")), put(np.arange(8.0), mesh, P("x"))
    with jax.set_mesh(mesh):
        got = jax.jit(fn)(a, b)
    np.testing.assert_allclose(np.asarray(got), want(data[kind], np.arange(8.0)), rtol=1e-9, atol=1e-12)
    if name.startswith("grad"):
        assert got.sharding.is_equivalent_to(a.sharding, 2)


MIXED_TYPES = (AxisType.Explicit, AxisType.Auto)

#: Eager losses of jaxmg.numpy functions and JAX's own, for their gradients on a mesh of both kinds of axes.
EAGER_LOSSES = {
    "la.inv": (lambda a: (la.inv(a) ** 2).sum(), lambda a: (jnp.linalg.inv(a) ** 2).sum()),
    "la.solve": (
        lambda a: (la.solve(a, jnp.arange(8.0)) ** 2).sum(),
        lambda a: (jnp.linalg.solve(a, jnp.arange(8.0)) ** 2).sum(),
    ),
    "la.slogdet": (lambda a: la.slogdet(a)[1], lambda a: jnp.linalg.slogdet(a)[1]),
}


@pytest.mark.parametrize("types", [(AxisType.Explicit, AxisType.Auto), (AxisType.Auto, AxisType.Explicit)])
@pytest.mark.parametrize("name", list(EAGER_LOSSES))
def test_eager_gradients_on_a_mesh_of_explicit_and_auto_axes(name, types):
    """An eager jax.grad (and derivatives to second order) under jax.set_mesh of a jaxmg.numpy function of a
    matrix laid out over both kinds of axes: JAX's values, in a's layout, a itself unchanged."""
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=types)
    a_np = random_matrix(np.random.default_rng(5), (8, 8), np.float64) + 8 * np.eye(8)
    loss, own = EAGER_LOSSES[name]
    a = put(a_np, mesh, P("x", "y"))
    with jax.set_mesh(mesh):
        grad = jax.grad(loss)(a)
        check_grads(loss, (a,), order=1, modes=("fwd", "rev"))
        check_grads(loss, (a,), order=2, modes=("fwd",))  # its rev-over-rev draws cotangents untyped by "x"
    np.testing.assert_allclose(np.asarray(grad), np.asarray(jax.grad(own)(a_np)), rtol=1e-10, atol=1e-13)
    assert grad.sharding.is_equivalent_to(a.sharding, 2), grad.sharding
    np.testing.assert_array_equal(np.asarray(a), a_np)


@pytest.mark.parametrize("types", [(AxisType.Explicit, AxisType.Auto), (AxisType.Auto, AxisType.Explicit)])
def test_eager_gradient_of_a_stack_split_inside_its_matrices_on_explicit_and_auto_axes(types):
    """An eager jax.grad under jax.set_mesh of la.inv of a stack split inside its matrices over both
    kinds of axes (solved spread over the batch, its cotangents returned on the Auto axes): JAX's
    values, in the stack's layout."""
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=types)
    a_np = random_matrix(np.random.default_rng(6), (4, 8, 8), np.float64) + 8 * np.eye(8)
    a = put(a_np, mesh, P(None, "x", "y"))
    with jax.set_mesh(mesh):
        grad = jax.grad(EAGER_LOSSES["la.inv"][0])(a)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(jax.grad(EAGER_LOSSES["la.inv"][1])(a_np)), rtol=1e-10)
    assert grad.sharding.is_equivalent_to(a.sharding, 3), grad.sharding


def test_eager_gradient_on_a_mesh_of_explicit_and_auto_axes_names_set_mesh():
    """Without jax.set_mesh (which JAX's own functions on such a mesh need too), an eager jax.grad
    there of a jaxmg.numpy function or of jaxmg's own says to set the mesh, instead of JAX's
    lowering error."""
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=MIXED_TYPES)
    a = put(random_matrix(np.random.default_rng(5), (8, 8), np.float64) + 8 * np.eye(8), mesh, P("x", "y"))
    b = put(np.arange(8.0), mesh, P("x"))
    for loss in (lambda a: la.inv(a).sum(), lambda a: jaxmg.cholesky(a).sum(), lambda a: jaxmg.potrs(a, b).sum()):
        with pytest.raises(ValueError, match=r"jax\.set_mesh\(mesh\)"):
            jax.grad(loss)(a)


#: Losses of a stack (..., 8, 8), jaxmg.numpy's and JAX's own (JAX's of the NumPy stack), and the
#: stack they take ("spd": Hermitian positive definite, "gen": general).
STACK_LOSSES = {
    "slogdet": (lambda la: lambda a: la.slogdet(a)[1].sum(), "gen"),
    "cholesky": (lambda la: lambda a: (la.cholesky(a) ** 2).sum(), "spd"),
    "eigh": (lambda la: lambda a: (la.eigh(a)[0] ** 2).sum(), "spd"),
    "solve": (lambda la: lambda a: (la.solve(a, jnp.ones(a.shape[:-1])[..., None]) ** 2).sum(), "gen"),
    "inv": (lambda la: lambda a: (la.inv(a) ** 2).sum(), "gen"),
    "svd": (lambda la: lambda a: (la.svd(a, compute_uv=False) ** 2).sum(), "gen"),
}


@pytest.mark.parametrize("name", list(STACK_LOSSES))
@pytest.mark.parametrize("types", [(AxisType.Explicit, AxisType.Auto), (AxisType.Auto, AxisType.Explicit)])
def test_jitted_gradients_of_stacks_split_inside_their_matrices_on_explicit_and_auto_axes(types, name):
    """Inside jax.jit (with and without jax.set_mesh) on a mesh of Explicit and Auto axes, the
    gradient of a loss of a stack split inside its matrices, ``P(None, "x", "y")`` and, under
    nested jax.vmap, ``P(None, None, "x", "y")``, comes back in the stack's layout (its type names
    the Explicit axis alone: the matrices take rule 4's layout, which it agrees with), with the
    values of JAX's own function of the NumPy stack."""
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=types)
    make, kind = STACK_LOSSES[name]
    rng = np.random.default_rng(7)
    stack = {
        "gen": lambda: random_matrix(rng, (2, 2, 8, 8), np.float64) + 8 * np.eye(8),
        "spd": lambda: np.stack([spd_matrix(rng, 8, np.float64) for _ in range(4)]).reshape(2, 2, 8, 8),
    }[kind]()
    loss, own = make(la), make(jnp.linalg)
    nested = lambda a: jax.vmap(jax.vmap(loss))(a).sum()  # noqa: E731
    cases = [
        (loss, stack[0], P(None, "x", "y"), True),
        (loss, stack[0], P(None, "x", "y"), False),
        (nested, stack, P(None, None, "x", "y"), True),
    ]
    for fn, value, spec, set_mesh in cases:
        a = put(value, mesh, spec)
        with jax.set_mesh(mesh) if set_mesh else contextlib.nullcontext():
            grad = jax.jit(jax.grad(fn))(a)
        np.testing.assert_allclose(np.asarray(grad), np.asarray(jax.grad(own)(value)), rtol=1e-9, atol=1e-12)
        assert grad.sharding.is_equivalent_to(a.sharding, a.ndim), (spec, set_mesh, grad.sharding)


@pytest.mark.parametrize("types", [(AxisType.Explicit, AxisType.Auto), (AxisType.Auto, AxisType.Explicit)])
@pytest.mark.parametrize("spec", [P(None, "x", "y"), P(("x", "y"))], ids=["matrices-split", "batch-split"])
def test_stacks_on_a_mesh_of_explicit_and_auto_axes(spec, types):
    """A stack under jax.vmap on a mesh with one Explicit and one Auto axis, split inside its
    matrices or over its batch axis: each matrix's solve and its gradient, as NumPy's."""
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ("x", "y"), axis_types=types)
    rng = np.random.default_rng(4)
    spd = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(8)])
    rhs = rng.standard_normal((8, 8))
    grad = jax.vmap(jax.grad(lambda a, b: (jaxmg.potrs(a, b) ** 2).sum(), argnums=1))
    with jax.set_mesh(mesh):
        a, b = put(spd, mesh, spec), put(rhs, mesh, P(tuple(spec)[0]))
        x, g = jax.jit(jax.vmap(jaxmg.potrs))(a, b), jax.jit(grad)(a, b)
    want = np.linalg.solve(spd, rhs[..., None])[..., 0]
    np.testing.assert_allclose(np.asarray(x), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(g), 2 * np.linalg.solve(spd, want[..., None])[..., 0], rtol=1e-9)


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
def test_meshes_used_alternately(axis_type):
    rng = np.random.default_rng(0)
    spd, her = spd_matrix(rng, N, np.float64), hermitian_matrix(rng, N, np.float64)
    g, rhs = random_matrix(rng, (N, N), np.float64), rng.standard_normal(N)
    meshes = [make_mesh(shape, ("x", "y"), axis_types=axis_type) for shape in SHAPES]
    potrs_jit = jax.jit(lambda a, b: jaxmg.potrs(a, b, backend="portable"))
    kept = {}  # one Cholesky module per mesh, made in the first pass, solved in every pass
    for pass_ in range(2):
        for shape, mesh in zip(SHAPES, meshes):
            where = f"pass {pass_}, mesh {shape}"
            a, b = put(spd, mesh, P("x", "y")), put(rhs, mesh, P("x"))
            x, logdet = jaxmg.potrs(a, b, return_logdet=True, backend="portable")
            np.testing.assert_allclose(x, np.linalg.solve(spd, rhs), rtol=1e-10, err_msg=where)
            np.testing.assert_allclose(logdet, np.linalg.slogdet(spd)[1], rtol=1e-12)
            assert x.sharding.mesh.shape == mesh.shape, where
            np.testing.assert_allclose(potrs_jit(a, b), np.linalg.solve(spd, rhs), rtol=1e-10, err_msg=where)
            x = jaxmg.lu_solve(put(g, mesh, P("x", "y")), b, backend="portable")
            np.testing.assert_allclose(x, np.linalg.solve(g, rhs), rtol=1e-9, err_msg=where)
            w = jaxmg.syevd(put(her, mesh, P("x", "y")), return_eigenvectors=False, backend="portable")
            np.testing.assert_allclose(w, np.linalg.eigvalsh(her), atol=1e-12, err_msg=where)
            if pass_ == 0:
                kept[shape] = jaxmg.Cholesky(a, backend="portable")
        for shape, mesh in zip(SHAPES, meshes):
            x = kept[shape].solve(put(rhs, mesh, P("x")))
            np.testing.assert_allclose(
                x, np.linalg.solve(spd, rhs), rtol=1e-10, err_msg=f"pass {pass_}, kept module of mesh {shape}"
            )


def test_right_hand_side_on_the_same_devices_with_other_axis_types():
    """b on a mesh of a's devices and axes whose axis types differ (Auto against Explicit) is read
    on a's mesh, eagerly as inside jax.jit (eagerly it reached a product on the other mesh)."""
    rng = np.random.default_rng(1)
    spd, rhs = spd_matrix(rng, N, np.float64), rng.standard_normal(N)
    explicit, auto = (make_mesh((4, 2), ("x", "y"), axis_types=t) for t in (AxisType.Explicit, AxisType.Auto))
    for a_mesh, b_mesh in ((explicit, auto), (auto, explicit)):
        a, b = put(spd, a_mesh, P("x", "y")), put(rhs, b_mesh, P("x"))
        for x in (jaxmg.potrs(a, b), jaxmg.Cholesky(a).solve(b), jaxmg.numpy.linalg.solve(a, b)):
            np.testing.assert_allclose(x, np.linalg.solve(spd, rhs), rtol=1e-10)


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
def test_mesh_argument_other_than_the_arrays_mesh(axis_type):
    """``mesh=`` a (2, 4) mesh for a matrix on the (4, 2) mesh of the same devices: every call lays
    a out on the mesh it was given and returns its results there, eagerly (on Explicit axes the
    solves had reached the status's select with a on one mesh and the result on the other)."""
    rng = np.random.default_rng(2)
    spd, g, rhs = spd_matrix(rng, N, np.float64), random_matrix(rng, (N, N), np.float64), rng.standard_normal(N)
    given, own = (make_mesh(shape, ("x", "y"), axis_types=axis_type) for shape in ((2, 4), (4, 2)))
    a, g_own = put(spd, own, P("x", "y")), put(g + N * np.eye(N), own, P("x", "y"))
    b = jnp.asarray(rhs)
    calls = {
        "potrs": (lambda: jaxmg.potrs(a, b, None, given), spd),
        "lu_solve": (lambda: jaxmg.lu_solve(g_own, b, None, given), g + N * np.eye(N)),
        "least_squares": (lambda: jaxmg.least_squares(g_own, b, None, given), g + N * np.eye(N)),
        "Cholesky.solve": (lambda: jaxmg.Cholesky(a, None, given).solve(b), spd),
        "LU.solve": (lambda: jaxmg.LU(g_own, None, given).solve(b), g + N * np.eye(N)),
        "QR.solve": (lambda: jaxmg.QR(g_own, None, given).solve(b), g + N * np.eye(N)),
    }
    for name, (call, matrix) in calls.items():
        x = call()
        np.testing.assert_allclose(x, np.linalg.solve(matrix, rhs), rtol=1e-9, err_msg=name)
        assert x.sharding.mesh.shape == given.shape, name
    assert jaxmg.qr(g_own, None, given)[1].sharding.mesh.shape == given.shape


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
def test_mesh_argument_inside_jit_on_arrays_of_one_device(axis_type):
    """``mesh=`` inside a ``jax.jit`` with no mesh in context, on arrays of one device (the way
    Lineax calls a solver given ``mesh=``: it jits): every function, module and Lineax solver
    returns the solution, also under ``jax.vmap`` and for the gradient (on Explicit axes each
    had failed with JAX's "Length of device assignment 1 is not equal to the size of the mesh 8")."""
    lineax = pytest.importorskip("lineax")
    import jaxmg.lineax

    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    rng = np.random.default_rng(3)
    spd, g, rhs = (
        spd_matrix(rng, N, np.float64),
        random_matrix(rng, (N, N), np.float64) + N * np.eye(N),
        rng.standard_normal(N),
    )
    a, m, b = jnp.asarray(spd), jnp.asarray(g), jnp.asarray(rhs)
    solves = {
        "potrs": (lambda a, b: jaxmg.potrs(a, b, mesh=mesh), spd),
        "lu_solve": (lambda a, b: jaxmg.lu_solve(a, b, mesh=mesh), g),
        "least_squares": (lambda a, b: jaxmg.least_squares(a, b, mesh=mesh), g),
        "Cholesky.solve": (lambda a, b: jaxmg.Cholesky(a, mesh=mesh).solve(b), spd),
        "LU.solve": (lambda a, b: jaxmg.LU(a, mesh=mesh).solve(b), g),
        "QR.solve": (lambda a, b: jaxmg.QR(a, mesh=mesh).solve(b), g),
    }
    for name, (solve, matrix) in solves.items():
        operand = a if matrix is spd else m
        expected = np.linalg.solve(matrix, rhs)
        np.testing.assert_allclose(jax.jit(solve)(operand, b), expected, rtol=1e-9, err_msg=name)
        stacked = jax.jit(jax.vmap(solve, in_axes=(0, None)))(jnp.stack([operand, operand]), b)
        np.testing.assert_allclose(stacked[1], expected, rtol=1e-9, err_msg=name)
        gradient = jax.jit(jax.grad(lambda b, s=solve, o=operand: jnp.sum(s(o, b))))(b)
        np.testing.assert_allclose(gradient, np.linalg.solve(matrix.T, np.ones(N)), rtol=1e-9, err_msg=name)
    w = jax.jit(lambda a: jaxmg.syevd(a, mesh=mesh)[0])(a)
    np.testing.assert_allclose(np.sort(np.asarray(w)), np.linalg.eigvalsh(spd), rtol=1e-10)
    for solver, operator, matrix in (
        (jaxmg.lineax.Cholesky(mesh=mesh), lineax.MatrixLinearOperator(a, lineax.positive_semidefinite_tag), spd),
        (jaxmg.lineax.LU(mesh=mesh), lineax.MatrixLinearOperator(m), g),
    ):
        x = lineax.linear_solve(operator, b, solver).value
        np.testing.assert_allclose(x, np.linalg.solve(matrix, rhs), rtol=1e-9, err_msg=type(solver).__name__)


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto])
def test_module_stack_made_inside_a_shard_map_used_outside_it(axis_type):
    """``jax.vmap(jaxmg.Cholesky)`` (and LU, QR) run inside a ``jax.shard_map`` on each device's
    matrices and returned from it: every method, read outside it eagerly, in jit and under vmap,
    with one right-hand side of no mesh for the whole stack, and the gradient through it in jit
    (on Explicit axes the solves had failed with "Resource axis: i ... is not found in mesh: ()"
    and the inverses with a triangular_solve ShardingTypeError)."""
    mesh = make_mesh((8,), ("i",), axis_types=axis_type)
    rng = np.random.default_rng(4)
    stack = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(8)])
    expected = np.linalg.solve(stack, np.ones((8, 8, 1)))[..., 0]
    st = put(stack, mesh, P("i"))
    for kind in (jaxmg.Cholesky, jaxmg.LU, jaxmg.QR):
        make = jax.shard_map(jax.vmap(kind), mesh=mesh, in_specs=P("i"), out_specs=P("i"))
        m = make(st)
        ones = jnp.ones(8)
        for x in (
            m.solve(ones),
            jax.jit(lambda m: m.solve(jnp.ones(8)))(m),
            jax.vmap(lambda m: m.solve(jnp.ones(8)))(m),
            jax.vmap(lambda m, b: m.solve(b))(m, put(np.ones((8, 8)), mesh, P("i"))),
        ):
            np.testing.assert_allclose(x, expected, rtol=1e-10, err_msg=kind.__name__)
        if kind is not jaxmg.QR:
            np.testing.assert_allclose(m.inverse(), np.linalg.inv(stack), rtol=1e-10, err_msg=kind.__name__)
        loss = jax.jit(jax.grad(lambda s, make=make: jnp.sum(make(s).solve(jnp.ones(8)))))
        gradient = -np.einsum(
            "bi,bj->bij", np.linalg.solve(np.swapaxes(stack, 1, 2), np.ones((8, 8, 1)))[..., 0], expected
        )
        if kind is jaxmg.Cholesky:  # the derivative along the lower triangle it reads
            gradient = np.tril(gradient + np.swapaxes(gradient, 1, 2), -1) + gradient * np.eye(8)
        np.testing.assert_allclose(loss(st), gradient, rtol=1e-9, atol=1e-12, err_msg=kind.__name__)
    logdet = jax.shard_map(jax.vmap(jaxmg.Cholesky), mesh=mesh, in_specs=P("i"), out_specs=P("i"))(st).logdet()
    np.testing.assert_allclose(logdet, np.linalg.slogdet(stack)[1], rtol=1e-12)


PER_MATRIX = {
    "LU.solve": (lambda a, b: jaxmg.LU(a).solve(b), lambda a: a + 8 * np.eye(8)),
    "QR.solve": (lambda a, b: jaxmg.QR(a).solve(b), lambda a: a + 8 * np.eye(8)),
    "la.solve": (lambda a, b: la.solve(a, b), lambda a: a + 8 * np.eye(8)),
    "Cholesky.solve": (lambda a, b: jaxmg.Cholesky(a).solve(b), lambda a: a @ a.T + 8 * np.eye(8)),
}


@pytest.mark.parametrize("shared_b", [True, False], ids=["b-shared", "b-stacked"])
@pytest.mark.parametrize("name", list(PER_MATRIX))
def test_a_jitted_body_under_vmap_of_a_stack_split_on_explicit_axes(name, shared_b):
    """jax.vmap(jax.jit(f)) over a stack split over its batch axis by an Explicit axis: JAX traces
    the body one matrix at a time and then batches it (as it does Lineax's solves). Each
    matrix's solve, and the gradients with respect to the stack and b, as a loop over the
    matrices."""
    mesh = make_mesh((4, 2), ("x", "y"))
    rng = np.random.default_rng(5)
    fn, shaped = PER_MATRIX[name]
    stack = np.stack([shaped(random_matrix(rng, (8, 8), np.float64)) for _ in range(4)])
    rhs = random_matrix(rng, (8,) if shared_b else (4, 8), np.float64)
    a = put(stack, mesh, P("x"))
    b = jax.numpy.asarray(rhs) if shared_b else put(rhs, mesh, P("x"))
    in_axes = (0, None) if shared_b else (0, 0)
    got = jax.vmap(jax.jit(fn), in_axes=in_axes)(a, b)
    want = np.stack([np.linalg.solve(stack[i], rhs if shared_b else rhs[i]) for i in range(4)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)
    assert got.sharding.spec[0] == "x"
    with jax.set_mesh(mesh):  # an eager gradient on Explicit axes needs the mesh set
        ga, gb = jax.grad(lambda a, b: jax.vmap(jax.jit(fn), in_axes=in_axes)(a, b).sum(), argnums=(0, 1))(a, b)
    inv = np.linalg.inv(stack)
    want_gb = np.einsum("bij,bi->bj", inv, np.ones((4, 8)))  # A^-T 1 per matrix
    np.testing.assert_allclose(np.asarray(gb), want_gb.sum(0) if shared_b else want_gb, rtol=1e-9, atol=1e-12)
    if name != "Cholesky.solve":  # a Hermitian operator's gradient is symmetrised
        np.testing.assert_allclose(np.asarray(ga), -np.einsum("bi,bj->bij", want_gb, want), rtol=1e-9, atol=1e-12)
