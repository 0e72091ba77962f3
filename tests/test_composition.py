"""jaxmg composes with JAX's transformations as jnp.linalg does (docs/routes.md).

* inside a user's ``jax.shard_map`` (Manual axes) every function, module and jaxmg.numpy/scipy
  function runs on the device's own arrays, with ``jax.grad`` through it;
* stacks under ``jax.vmap`` and ``(..., M, N)`` inputs split over the batch (Explicit and Auto
  axes, eagerly and in jit) run where they lie, with ``check_grads``; a compiled batch-split
  solve moves nothing between devices;
* gradients keep the input's layout on a (4, 2) mesh, Auto and Explicit axes, eagerly and in jit;
* ``jax.jit`` with ``in_shardings`` and no ``jax.set_mesh`` works;
* the route reported (``jaxmg.route``, a module's ``.route``) is the route taken.

Matrices are tiny (order 8): the checks are about composition, not arithmetic.
"""

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import AXES, AXES_EXPLICIT_SLOW, lower_read, make_mesh, put, random_matrix, spd_matrix

N = 8
B = 8  # stack size: one matrix per device
RNG = np.random.default_rng(21)
SPD = np.stack([spd_matrix(RNG, N, np.float64) for _ in range(B)])
GEN = np.stack([random_matrix(RNG, (N, N), np.float64) + N * np.eye(N) for _ in range(B)])
TALL = np.stack([random_matrix(RNG, (2 * N, N), np.float64) for _ in range(B)])
RHS = RNG.standard_normal((B, N))
RHS_TALL = RNG.standard_normal((B, 2 * N))
TOL = dict(rtol=1e-9, atol=1e-10)


def _close(got, want, tol=TOL):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **tol)


# Scalar losses of one matrix (and its right-hand side): each is invariant to the gauges of
# eigen- and singular vectors, so its gradient is defined.
FUNCTIONS = {
    "potrs": (lambda a, b: jaxmg.potrs(a, b, return_logdet=True)[1] + jnp.sum(jaxmg.potrs(a, b)), "spd"),
    "cholesky": (lambda a, b: jnp.sum(jaxmg.cholesky(a) ** 2), "spd"),
    "lu_solve": (lambda a, b: jnp.sum(jaxmg.lu_solve(a, b) ** 2), "gen"),
    "least_squares": (lambda a, b: jnp.sum(jaxmg.least_squares(a, b) ** 2), "tall"),
    "qr": (lambda a, b: jnp.sum(jnp.abs(jaxmg.qr(a)[1])), "tall"),
    "syevd": (lambda a, b: jnp.sum(jaxmg.syevd(a, return_eigenvectors=False) ** 2), "spd"),
    "sygvd": (lambda a, b: jnp.sum(jaxmg.sygvd(a, a + 2 * jnp.eye(N), return_eigenvectors=False)), "spd"),
    "gesvd": (lambda a, b: jnp.sum(jaxmg.gesvd(a, compute_u=False, compute_vh=False)), "tall"),
    "polar": (lambda a, b: jnp.sum(jaxmg.polar(a)[1] ** 2), "tall"),
    "Cholesky": (
        lambda a, b: (
            jaxmg.Cholesky(a).logdet() + jnp.sum(jaxmg.Cholesky(a).solve(b)) + jnp.sum(jaxmg.Cholesky(a).inverse())
        ),
        "spd",
    ),
    "LU": (lambda a, b: jaxmg.LU(a).slogdet()[1] + jnp.sum(jaxmg.LU(a).solve(b, trans="T")), "gen"),
    "QR": (lambda a, b: jnp.sum(jaxmg.QR(a).solve(b) ** 2), "tall"),
    "Eigh": (lambda a, b: jnp.sum(jaxmg.Eigh(a).w), "spd"),
    "SVD": (lambda a, b: jnp.sum(jaxmg.SVD(a).s), "tall"),
    "Polar": (lambda a, b: jnp.sum(jaxmg.Polar(a).h), "tall"),
    "la.solve": (lambda a, b: jnp.sum(la.solve(a, b)), "gen"),
    "la.inv": (lambda a, b: jnp.sum(la.inv(a)), "gen"),
    "la.slogdet": (lambda a, b: la.slogdet(a)[1], "gen"),
    "la.det": (lambda a, b: la.det(a), "gen"),
    "la.cholesky": (lambda a, b: jnp.sum(la.cholesky(a)), "spd"),
    "la.eigh": (lambda a, b: jnp.sum(la.eigh(a)[0]), "spd"),
    "la.eigvalsh": (lambda a, b: jnp.sum(la.eigvalsh(a) ** 2), "spd"),
    "la.svd": (lambda a, b: jnp.sum(la.svd(a, compute_uv=False)), "tall"),
    "la.svdvals": (lambda a, b: jnp.sum(la.svdvals(a)), "tall"),
    "la.qr": (lambda a, b: jnp.sum(jnp.abs(la.qr(a, mode="r"))), "tall"),
    "la.lstsq": (lambda a, b: jnp.sum(la.lstsq(a, b)[0]), "tall"),
    "la.pinv": (lambda a, b: jnp.sum(la.pinv(a)), "tall"),
    "la.norm": (lambda a, b: la.norm(a, 2), "tall"),
    "la.cond": (lambda a, b: la.cond(a), "gen"),
    "sla.cho_solve": (lambda a, b: jnp.sum(sla.cho_solve(sla.cho_factor(a, lower=True), b)), "spd"),
    "sla.lu_solve": (lambda a, b: jnp.sum(sla.lu_solve(sla.lu_factor(a), b)), "gen"),
    "sla.solve": (lambda a, b: jnp.sum(sla.solve(a, b, assume_a="pos")), "spd"),
    "sla.eigh": (lambda a, b: jnp.sum(sla.eigh(a, eigvals_only=True)), "spd"),
    "sla.polar": (lambda a, b: jnp.sum(sla.polar(a)[1]), "tall"),
}
#: References: the same losses with JAX's own functions (of the Hermitian matrix read from the
#: lower triangle where jaxmg reads only that).
REFERENCES = {
    "potrs": lambda a, b: jnp.linalg.slogdet(lower_read(a))[1] + jnp.sum(jnp.linalg.solve(lower_read(a), b)),
    "lu_solve": lambda a, b: jnp.sum(jnp.linalg.solve(a, b) ** 2),
    "least_squares": lambda a, b: jnp.sum(jnp.linalg.lstsq(a, b)[0] ** 2),
    "gesvd": lambda a, b: jnp.sum(jnp.linalg.svd(a, compute_uv=False)),
    "la.inv": lambda a, b: jnp.sum(jnp.linalg.inv(a)),
    "la.eigh": lambda a, b: jnp.sum(jnp.linalg.eigh(a)[0]),
}
DATA = {"spd": (SPD, RHS), "gen": (GEN, RHS), "tall": (TALL, RHS_TALL)}


def _value_and_grad(name):
    loss, _ = FUNCTIONS[name]
    return jax.value_and_grad(loss, argnums=(0, 1))


GROUPS = {
    "functions": [k for k in FUNCTIONS if "." not in k and k[0].islower()],
    "modules": [k for k in FUNCTIONS if k[0].isupper()],
    "numpy": [k for k in FUNCTIONS if k.startswith("la.")],
    "scipy": [k for k in FUNCTIONS if k.startswith("sla.")],
}


@pytest.fixture(scope="module")
def per_matrix():
    """Every loss's value and gradient on each matrix alone (one device, no mesh), jitted once."""
    out = {}
    for name, (_, kind) in FUNCTIONS.items():
        a, b = DATA[kind]
        fn = jax.jit(_value_and_grad(name))
        out[name] = [fn(a[k], b[k]) for k in range(2)]
    return out


def test_per_matrix_values_match_jax(per_matrix):
    for name, reference in REFERENCES.items():
        a, b = DATA[FUNCTIONS[name][1]]
        want = jax.value_and_grad(reference, argnums=(0, 1))(a[0], b[0])
        _close(per_matrix[name][0], want, dict(rtol=1e-8, atol=1e-9))


@pytest.mark.parametrize("group", list(GROUPS))
def test_inside_shard_map_with_grad(group, per_matrix):
    """In a jax.shard_map body (check_vma on, as a user writes it) each device solves its own
    matrix with the device's solver; values and gradients are those of the matrix alone."""
    mesh = jax.make_mesh((B,), ("d",))
    names = GROUPS[group]

    def body(spd, gen, tall, rhs, rhs_tall):
        data = {"spd": (spd[0], rhs[0]), "gen": (gen[0], rhs[0]), "tall": (tall[0], rhs_tall[0])}
        out = {}
        for name in names:
            value, grads = _value_and_grad(name)(*data[FUNCTIONS[name][1]])
            out[name] = (value[None], tuple(g[None] for g in grads))
        return out

    specs = (P("d"),) * 5
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P("d")))
    got = fn(*(put(x, mesh, P("d")) for x in (SPD, GEN, TALL, RHS, RHS_TALL)))
    for name in names:
        for k in range(2):
            _close(jax.tree.map(lambda x, k=k: np.asarray(x)[k], got[name]), per_matrix[name][k])


#: The losses that take a right-hand side.
SOLVES = [
    "potrs",
    "lu_solve",
    "least_squares",
    "Cholesky",
    "LU",
    "QR",
    "la.solve",
    "la.lstsq",
    "sla.cho_solve",
    "sla.lu_solve",
    "sla.solve",
]


def test_inside_shard_map_with_a_shared_right_hand_side():
    """In a shard_map body, each device's own matrix against one right-hand side that every
    device shares (a constant the body closes over, invariant over the mesh axis): the gradient
    with respect to the matrix is that of the matrix alone."""
    mesh = jax.make_mesh((B,), ("d",))
    shared = {"spd": RHS[0], "gen": RHS[0], "tall": RHS_TALL[0]}

    def body(spd, gen, tall):
        own = {"spd": spd[0], "gen": gen[0], "tall": tall[0]}
        return {
            name: jax.grad(FUNCTIONS[name][0])(own[FUNCTIONS[name][1]], shared[FUNCTIONS[name][1]])[None]
            for name in SOLVES
        }

    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("d"),) * 3, out_specs=P("d")))
    got = fn(*(put(x, mesh, P("d")) for x in (SPD, GEN, TALL)))
    for name in SOLVES:
        loss, kind = FUNCTIONS[name]
        grad = jax.jit(jax.grad(loss))
        for k in range(2):
            _close(np.asarray(got[name])[k], grad(DATA[kind][0][k], shared[kind]))


#: The solves of a matrix shared by every device (the drop-ins among them included), for
#: test_inside_shard_map_with_a_shared_matrix: the SOLVES and the triangular and positive solves.
SHARED_MATRIX_SOLVES = [
    *SOLVES,
    "sla.solve_triangular",
    "sla.solve(pos)",
]
FUNCTIONS["sla.solve_triangular"] = (lambda a, b: jnp.sum(sla.solve_triangular(a, b, lower=True) ** 2), "gen")
FUNCTIONS["sla.solve(pos)"] = (lambda a, b: jnp.sum(sla.solve(a, b, assume_a="pos") ** 2), "spd")


def test_inside_shard_map_with_a_shared_matrix():
    """In a shard_map body (check_vma on), one matrix shared by every device (passed in
    replicated) against each device's own right-hand side, as a user solves one system for a
    batch of right-hand sides split over the devices: each device's value and gradient with
    respect to its right-hand side are those of the matrix alone, and the gradient with respect
    to the shared matrix is their sum over the devices."""
    mesh = jax.make_mesh((B,), ("d",))
    names = SHARED_MATRIX_SOLVES

    def body(matrices, rhs):
        return {name: FUNCTIONS[name][0](matrices[name], rhs[name][0])[None] for name in names}

    specs = ({name: P() for name in names}, {name: P("d") for name in names})
    mapped = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P("d"))
    total = lambda matrices, rhs: sum(jnp.sum(v) for v in mapped(matrices, rhs).values())  # noqa: E731
    matrices = {name: put(DATA[FUNCTIONS[name][1]][0][0], mesh, P()) for name in names}
    rhs = {name: put(DATA[FUNCTIONS[name][1]][1], mesh, P("d")) for name in names}
    values = jax.jit(mapped)(matrices, rhs)
    matrix_grads, rhs_grads = jax.jit(jax.grad(total, argnums=(0, 1)))(matrices, rhs)
    for name in names:
        loss, kind = FUNCTIONS[name]
        a, b = DATA[kind][0][0], DATA[kind][1]
        value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        own = [value_and_grad(a, b[k]) for k in range(B)]
        _close(values[name], np.array([v for v, _ in own]))
        _close(rhs_grads[name], np.stack([g[1] for _, g in own]))
        _close(matrix_grads[name], sum(np.asarray(g[0]) for _, g in own))


@pytest.mark.parametrize("axis_type", AXES)
def test_a_module_made_outside_a_shard_map_solves_inside(axis_type):
    """A factorisation made eagerly of a matrix replicated over a mesh (the local route over the
    mesh), passed into a jax.shard_map replicated: each device solves its own right-hand side
    with it (its method runs on the device's own arrays, not on the module's mesh), as with
    jax.scipy.linalg.lu_factor's result; its other methods too."""
    mesh = make_mesh((B,), ("d",), axis_types=axis_type)
    modules = {
        "Cholesky": (jaxmg.Cholesky, SPD[0], RHS, lambda m: m.logdet()),
        "LU": (jaxmg.LU, GEN[0], RHS, lambda m: m.slogdet()[1]),
        "QR": (jaxmg.QR, TALL[0], RHS_TALL, lambda m: m.rank_status()),
    }
    for name, (module, a, b, other) in modules.items():
        made = module(put(a, mesh, P()))
        assert made.plan.mesh is not None, name  # on the mesh, not on the devices' own arrays

        def body(m, b, other=other):
            return m.solve(b[0])[None], m.inverse()[None] if hasattr(m, "inverse") else b, other(m)

        mapped = jax.shard_map(body, mesh=mesh, in_specs=(P(), P("d")), out_specs=(P("d"), P("d"), P()))
        x, inverse, value = jax.jit(mapped)(made, put(b, mesh, P("d")))
        want = np.linalg.lstsq(a, b.T)[0].T
        _close(x, want)
        if hasattr(made, "inverse"):
            _close(np.asarray(inverse)[0], np.linalg.inv(a))
        _close(value, other(module(a)))


def test_a_distributed_factorisation_inside_a_shard_map_is_refused():
    """A factorisation of the distributed route (cuSOLVERMp's grid layout) cannot be used on a
    device's own arrays: its plan there is refused with an error that says what to do."""
    from jaxmg import _plan, _routes

    plan = dataclasses.replace(jaxmg.LU(GEN[0]).plan, route=_routes.DISTRIBUTED)
    with pytest.raises(ValueError, match="inside the jax.shard_map body"):
        _plan.on_own_arrays(plan, [GEN[0]])


def test_inside_a_shard_map_over_some_axes():
    """A jax.shard_map over "x" alone of a (4, 2) Explicit mesh, each matrix split over the free
    "y" axis: the solves gather it there (the device's solver takes whole matrices) and give
    JAX's answers; the derivatives of the LU and Cholesky solves too."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    rng = np.random.default_rng(7)
    gen = np.stack([random_matrix(rng, (8, 8), np.float64) + 8 * np.eye(8) for _ in range(4)])
    spd = np.stack([spd_matrix(rng, 8, np.float64) for _ in range(4)])
    rhs = rng.standard_normal((4, 8, 2))
    solves = {
        "lu_solve": (jaxmg.lu_solve, gen, True),
        "potrs": (jaxmg.potrs, spd, True),
        "la.solve": (la.solve, gen, True),
        "sla.solve(pos)": (lambda a, b: sla.solve(a, b, assume_a="pos"), spd, True),
        "sla.lu_solve": (lambda a, b: sla.lu_solve(sla.lu_factor(a), b), gen, False),
        "least_squares": (jaxmg.least_squares, gen, False),
    }
    b = put(rhs, mesh, P("x"))
    with jax.set_mesh(mesh):
        for name, (solve, a, differentiated) in solves.items():
            mapped = _mapped_over_x(solve, mesh)
            a_split = put(a, mesh, P("x", None, "y"))
            np.testing.assert_allclose(
                np.asarray(jax.jit(mapped)(a_split, b)), np.linalg.solve(a, rhs), rtol=1e-10, err_msg=name
            )
            if differentiated:
                got = jax.jit(jax.grad(functools.partial(_squares, mapped, a_split)))(b)
                want = jax.grad(functools.partial(_squares, jnp.linalg.solve, a))(rhs)
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, err_msg=name)


#: Losses of one matrix (and a right-hand side) whose derivatives with respect to the matrix
#: failed inside a shard_map over some axes when the matrix was split over a free Explicit axis.
SPLIT_LOSSES = {
    "cholesky": (lambda a, b: jnp.sum(jnp.sin(jaxmg.cholesky(a))), "spd"),
    "least_squares": (lambda a, b: jnp.sum(jnp.sin(jaxmg.least_squares(a, b))), "gen"),
    "la.eigvalsh": (lambda a, b: jnp.sum(jnp.sin(la.eigvalsh(a))), "spd"),
    "sygvd": (lambda a, b: jnp.sum(jnp.sin(jaxmg.sygvd(a, a + 2 * jnp.eye(N), return_eigenvectors=False))), "spd"),
    "Eigh.v": (lambda a, b: jnp.sum(jnp.abs(jaxmg.Eigh(a).v) ** 2 * jnp.arange(N)), "spd"),
    "sla.cholesky": (lambda a, b: jnp.sum(jnp.sin(sla.cholesky(a, lower=True))), "spd"),
    "sla.solve_triangular": (lambda a, b: jnp.sum(jnp.sin(sla.solve_triangular(a, b, lower=True))), "gen"),
    "sla.lu_solve": (lambda a, b: jnp.sum(jnp.sin(sla.lu_solve(sla.lu_factor(a), b))), "gen"),
}


@pytest.mark.parametrize("name", list(SPLIT_LOSSES))
def test_derivatives_inside_a_shard_map_over_some_axes(name):
    """A jax.shard_map over "x" alone of a (4, 2) Explicit mesh, each matrix split over the free
    "y" axis: the gradient of the whole loss (taken outside the shard_map) with respect to the
    matrices and the right-hand sides is each matrix's own, in the matrices' layout."""
    loss, kind = SPLIT_LOSSES[name]
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    a, b = DATA[kind][0][:4], DATA[kind][1][:4]
    body = lambda a, b: loss(a[0], b[0])[None]  # noqa: E731
    mapped = jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), axis_names={"x"})
    grad = jax.jit(jax.grad(lambda a, b: jnp.sum(mapped(a, b)), argnums=(0, 1)))
    with jax.set_mesh(mesh):
        got = grad(put(a, mesh, P("x", None, "y")), put(b, mesh, P("x")))
    assert got[0].sharding.spec == P("x", None, "y")
    own = jax.jit(jax.grad(loss, argnums=(0, 1)))
    for k in range(4):
        _close(jax.tree.map(lambda g, k=k: np.asarray(g)[k], got), own(a[k], b[k]))


def _mapped_over_x(solve, mesh):
    """``solve`` of each matrix of a stack in a jax.shard_map over the mesh's "x" axis alone."""
    body = lambda a, b: solve(a[0], b[0])[None]  # noqa: E731
    return jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), axis_names={"x"})


def _squares(solve, a, b):
    return jnp.sum(solve(a, b) ** 2)


STACKS = {"batch": P(("x", "y")), "batch-x": P("x"), "replicated": P(), "matrices": P(None, "x", "y")}


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("axis_type", AXES)
def test_vmap_of_a_stack_eager_and_jit(axis_type, stack, per_matrix):
    """jax.vmap over a stack in any layout: the values are each matrix's own, the results come
    back in the stack's layout (Explicit axes), eagerly and inside jit."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    spec = STACKS[stack]
    a, b = put(SPD, mesh, spec), put(RHS, mesh, P((tuple(spec) + (None,))[0]))
    fns = {
        "potrs": jax.vmap(jaxmg.potrs),
        "la.cholesky": la.cholesky,
        "Cholesky": jax.vmap(lambda a, b: jaxmg.Cholesky(a).solve(b)),
    }
    want_x = np.linalg.solve(SPD, RHS[..., None])[..., 0]
    want_l = np.linalg.cholesky(SPD)
    for name, fn in fns.items():
        for run in (fn, jax.jit(fn)):
            with jax.set_mesh(mesh):
                out = run(a) if name == "la.cholesky" else run(a, b)
            _close(out, want_l if name == "la.cholesky" else want_x)
            if axis_type == AxisType.Explicit:
                assert (tuple(out.sharding.spec) + (None,))[0] == (tuple(spec) + (None,))[0], (name, out.sharding)


@pytest.mark.parametrize("axis_type", AXES)
def test_check_grads_of_stacks_split_over_the_batch(axis_type):
    """check_grads (forward and reverse) of vmapped solves, log-determinants and decompositions of
    a stack split over the batch axis."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    a, b = put(SPD, mesh, P(("x", "y"))), put(RHS, mesh, P(("x", "y")))
    t = put(TALL, mesh, P(("x", "y")))
    with jax.set_mesh(mesh):
        check_grads(jax.vmap(lambda a, b: jaxmg.potrs(a, b, return_logdet=True)), (a, b), order=1, modes=("fwd", "rev"))
        check_grads(
            jax.vmap(lambda a: jnp.sum(jaxmg.syevd(a, return_eigenvectors=False))), (a,), order=1, modes=("fwd", "rev")
        )
        check_grads(lambda t: la.pinv(t), (t,), order=1, modes=("fwd", "rev"))
        check_grads(jax.vmap(lambda a, b: jaxmg.LU(a).solve(b)), (a, b), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("group", list(GROUPS))
@pytest.mark.parametrize("axis_type", AXES_EXPLICIT_SLOW)
def test_gradients_keep_the_input_layout(axis_type, group):
    """Every loss's gradient with respect to a matrix split P("x", "y") over a (4, 2) mesh comes
    back in that layout, eagerly and inside jax.jit, on Auto axes (where XLA would otherwise
    choose it: replicated, or transposed) as on Explicit ones (docs/derivatives.md). An eager
    gradient on Explicit axes needs the mesh set (JAX's own do too)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    explicit = axis_type == AxisType.Explicit
    for name in GROUPS[group]:
        loss, kind = FUNCTIONS[name]
        a, b = put(DATA[kind][0][0], mesh, P("x", "y")), put(DATA[kind][1][0], mesh, P("x"))
        grad = jax.grad(loss)
        for how, run in (("eager", grad), ("jit", jax.jit(grad))):
            with jax.set_mesh(mesh) if explicit else contextlib.nullcontext():
                got = run(a, b)
            assert got.sharding.spec == P("x", "y"), (name, how, got.sharding)


def test_vmap_of_grad_and_grad_of_vmap_agree(per_matrix):
    """Both orders of jax.vmap and jax.grad on a stack split over the batch (the batching rule is
    bound only where vmap is the innermost transformation; JAX batches the rest)."""
    mesh = make_mesh((4, 2), ("x", "y"))
    a, b = put(SPD, mesh, P(("x", "y"))), put(RHS, mesh, P(("x", "y")))
    loss = FUNCTIONS["potrs"][0]
    with jax.set_mesh(mesh):
        inner = jax.jit(jax.vmap(jax.grad(loss)))(a, b)
        outer = jax.jit(jax.grad(lambda a, b: jnp.sum(jax.vmap(loss)(a, b))))(a, b)
    _close(inner, outer)
    _close(np.asarray(inner)[0], per_matrix["potrs"][0][1][0])


@pytest.mark.parametrize("axis_type", AXES)
def test_batch_split_solve_moves_nothing(axis_type):
    """A compiled vmapped potrs (and the jnp-shaped cholesky of a stack) on a stack split over the
    batch holds no all-gather or all-to-all: each device solves its own matrices."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    a, b = put(SPD, mesh, P(("x", "y"))), put(RHS, mesh, P(("x", "y")))
    with jax.set_mesh(mesh):
        texts = [
            jax.jit(jax.vmap(jaxmg.potrs)).lower(a, b).compile().as_text(),
            jax.jit(la.cholesky).lower(a).compile().as_text(),
        ]
    for text in texts:
        assert "all-gather" not in text and "all-to-all" not in text


def test_jit_with_in_shardings_and_no_set_mesh():
    """As jnp.linalg.solve: inside jit, without jax.set_mesh, the arrays' mesh is not known; the
    call runs the device's own solver where XLA places it."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    replicated = NamedSharding(mesh, P())
    a, b = SPD[0], RHS[0]
    for fn in (jaxmg.potrs, la.solve, lambda a, b: jaxmg.Cholesky(a).solve(b)):
        x = jax.jit(fn, in_shardings=(replicated, replicated))(a, b)
        _close(x, np.linalg.solve(a, b))
    rows = NamedSharding(mesh, P("x", "y"))
    _close(jax.jit(jaxmg.cholesky, in_shardings=(rows,))(SPD[0]), np.linalg.cholesky(SPD[0]))


def test_info_runs_as_a_module_without_runpy_warning():
    """python -m jaxmg.info: importing jaxmg does not import jaxmg.info, so runpy does not warn
    that it was found in sys.modules before it ran."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(
        os.environ,
        PYTHONWARNINGS="error::RuntimeWarning",
        JAXMG_NVIDIA_GPU="0",
        PYTHONPATH=os.pathsep.join([str(Path(jaxmg.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]),
    )
    done = subprocess.run(
        [sys.executable, "-m", "jaxmg.info", "--n", "64"], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0 and "RuntimeWarning" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.startswith("jaxmg ") and "potrs" in done.stdout


def test_reported_route_is_the_route_taken():
    """jaxmg.route (and python -m jaxmg.info, which reads it) says what a call does."""
    explicit = make_mesh((4, 2), ("x", "y"))
    auto = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    one = SPD[0]
    for mesh in (explicit, auto):
        m = jaxmg.Cholesky(put(one, mesh, P("x", "y")))
        assert m.route == jaxmg.route("Cholesky", one.shape, one.dtype, mesh) == "local"
    routes = []
    jax.vmap(lambda a: routes.append(jaxmg.Cholesky(a).route) or a)(put(SPD, explicit, P(("x", "y"))))
    assert routes == [jaxmg.route("Cholesky", (N, N), "float64", explicit, stacked=B)] == ["batch"]
    inside, devices = [], jax.make_mesh((B,), ("d",))
    jax.shard_map(
        lambda a: inside.append(jaxmg.Cholesky(a[0]).route) or a, mesh=devices, in_specs=P("d"), out_specs=P("d")
    )(put(SPD, devices, P("d")))
    assert inside == ["local"]
    assert jaxmg.Cholesky(one).route == jaxmg.route("potrs", one.shape, one.dtype, None) == "local"


@pytest.mark.parametrize("group", list(GROUPS))
def test_vmap_of_derivatives_on_an_explicit_stack_without_set_mesh(group, per_matrix):
    """jax.jit of jax.vmap of a derivative (grad, jvp) over a stack split over Explicit axes, with
    no jax.set_mesh (as jnp.linalg.solve runs there), the right-hand side mapped or one array for
    the whole stack (made in the caller's function, of no mesh): each matrix's value and gradient
    are its own. Before, JAX's batching of the derivative refused the status's select ("Resource
    axis: x ... not found in mesh: ()") or the product of a split stack with a whole right-hand
    side."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    for name in GROUPS[group]:
        loss, kind = FUNCTIONS[name]
        data, rhs = DATA[kind]
        a, b = put(data, mesh, P(("x", "y"))), put(rhs, mesh, P(("x", "y")))
        mapped = jax.jit(jax.vmap(_value_and_grad(name)))(a, b)
        for k in range(2):
            _close(jax.tree.map(lambda x, k=k: np.asarray(x)[k], mapped), per_matrix[name][k])
        shared = functools.partial(_with_one_rhs, loss, rhs[0])  # b made in the function, of no mesh
        one = jax.jit(jax.vmap(jax.value_and_grad(shared)))(a)
        _close(jax.tree.map(lambda x: np.asarray(x)[0], one), (per_matrix[name][0][0], per_matrix[name][0][1][0]))
        tangent = put(np.ones_like(data), mesh, P(("x", "y")))
        _, slope = jax.jit(jax.vmap(lambda a, t, f=shared: jax.jvp(f, (a,), (t,))))(a, tangent)
        _close(np.asarray(slope)[0], np.sum(np.asarray(per_matrix[name][0][1][0])))


def _with_one_rhs(loss, rhs, a):
    return loss(a, jnp.asarray(rhs))


CLOSED_OVER = {
    "la.inv": (lambda a, b: la.inv(a), lambda a, b: jnp.linalg.inv(a)),
    "la.solve": (lambda a, b: la.solve(a, b), lambda a, b: jnp.linalg.solve(a, b)),
    "la.slogdet": (lambda a, b: la.slogdet(a)[1], lambda a, b: jnp.linalg.slogdet(a)[1]),
    "la.svdvals": (lambda a, b: la.svdvals(a), lambda a, b: jnp.linalg.svdvals(a)),
    "la.qr r": (lambda a, b: jnp.abs(la.qr(a, mode="r")), lambda a, b: jnp.abs(jnp.linalg.qr(a, mode="r"))),
    "la.norm 2": (lambda a, b: la.norm(a, 2), lambda a, b: jnp.linalg.norm(a, 2)),
    "sla.polar": (lambda a, b: sla.polar(a)[1], lambda a, b: jax.scipy.linalg.polar(a)[1]),
    "potrs": (lambda a, b: jaxmg.potrs(a, b), lambda a, b: jnp.linalg.solve(a, b)),
    "Cholesky.solve": (lambda a, b: jaxmg.Cholesky(a).solve(b), lambda a, b: jnp.linalg.solve(a, b)),
}


@pytest.mark.parametrize("name", list(CLOSED_OVER))
def test_concrete_arrays_closed_over_by_a_traced_function(name):
    """A JAX array made outside (uncommitted, no mesh) and closed over by a function that
    jax.jit, jax.lax.cond, jax.lax.scan or jax.eval_shape traces is a constant of that program, as
    for jnp.linalg (it ran the eager path inside the trace: ConcretizationTypeError)."""
    fn, reference = CLOSED_OVER[name]
    a, b = jnp.asarray(SPD[0]), jnp.asarray(RHS[0])
    want = np.asarray(reference(a, b))
    runs = {
        "jit": lambda: jax.jit(lambda t: t * fn(a, b))(1.0),
        "cond": lambda: jax.lax.cond(True, lambda: fn(a, b), lambda: jnp.zeros_like(want)),
        "scan": lambda: jax.lax.scan(lambda c, _: (c, fn(a, b)), 0.0, None, length=2)[1][1],
    }
    for run in runs.values():
        _close(run(), want, dict(rtol=1e-9, atol=1e-10))
    assert jax.eval_shape(lambda: fn(a, b)).shape == want.shape
