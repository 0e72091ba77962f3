"""What a call reports is what it compiles to, and its outputs keep the caller's layout.

* The batch route (``jax.vmap`` over a stack split over its batch axis) compiles to a program
  with no all-gather, all-to-all or collective-permute: each device solves the matrices it holds,
  with or without ``jax.set_mesh``, with the stack placed beforehand or placed by
  ``in_shardings``, on Auto and Explicit axes; the local route over a mesh gathers the matrix
  (an all-gather), as it reports. The stack's outputs keep its batch layout.
* Outputs keep the caller's layout eagerly and inside ``jax.jit`` (docs/usage.md, "Layout
  rules"): solutions b's, matrix outputs a's, eigenvalues, singular values and scalars
  replicated; on one-device, (8,) and (4, 2) meshes, Auto and Explicit axes.

Matrices are tiny (order 8, stacks of 16): the checks are about placement, not arithmetic.
"""

import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import AXES, AXES_EXPLICIT_SLOW, make_mesh, random_matrix, spd_matrix
from test_memory_grid import opaque_native  # noqa: F401 (a fixture)

N, STACK = 8, 16
RNG = np.random.default_rng(44)
SPD, GEN, TALL = (
    np.stack([make() for _ in range(STACK)])
    for make in (
        lambda: spd_matrix(RNG, N, np.float64),
        lambda: random_matrix(RNG, (N, N), np.float64) + N * np.eye(N),
        lambda: random_matrix(RNG, (2 * N, N), np.float64),
    )
)
RHS, RHS_TALL = RNG.standard_normal((STACK, N)), RNG.standard_normal((STACK, 2 * N))
MOVES = ("all-gather", "all-to-all", "collective-permute")
MESHES = [pytest.param(((8,), ("x",)), id="8"), pytest.param(((4, 2), ("x", "y")), id="4x2")]


def _moves(fn, *args) -> set:
    return {m for m in MOVES if m in fn.lower(*args).compile().as_text()}


def _normal(spec, mesh) -> tuple:
    """A spec without trailing Nones; on Auto axes without the axes of one device (XLA reports
    ``P()`` for them, as for JAX's own functions: the placement is the same)."""
    entries = list(spec)
    if not all(t == AxisType.Explicit for t in mesh.axis_types):

        def drop(e):
            kept = tuple(a for a in ((e,) if isinstance(e, str) else e or ()) if mesh.shape[a] > 1)
            return None if not kept else kept[0] if len(kept) == 1 else kept

        entries = [drop(e) for e in entries]
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(tuple(e) if isinstance(e, list) else e for e in entries)


# --- the batch route compiles to what it reports ---

STACKED = {
    "potrs": (jaxmg.potrs, (SPD, RHS)),
    "lu_solve": (jaxmg.lu_solve, (GEN, RHS)),
    "least_squares": (jaxmg.least_squares, (TALL, RHS_TALL)),
    "qr": (jaxmg.qr, (TALL,)),
    "syevd": (jaxmg.syevd, (SPD,)),
    "sygvd": (jaxmg.sygvd, (SPD, SPD + np.eye(N))),
    "Eigh": (lambda a: jaxmg.Eigh(a).w, (SPD,)),
    "Cholesky": (lambda a, b: jaxmg.Cholesky(a).solve(b), (SPD, RHS)),
    "LU": (lambda a, b: jaxmg.LU(a).solve(b), (GEN, RHS)),
}


@pytest.mark.parametrize("placed", [True, False], ids=["placed", "inline"])
@pytest.mark.parametrize(
    "set_mesh", [pytest.param(False, id="no-set-mesh"), pytest.param(True, id="set-mesh", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("axis_type", AXES)
@pytest.mark.parametrize("shape", MESHES)
def test_batch_route_moves_nothing_and_keeps_the_stack_layout(shape, axis_type, set_mesh, placed):
    """jax.jit(jax.vmap(op), in_shardings=...) over a stack split over its batch axis: no
    collective in the compiled program, the route reported is "batch", and every output (a
    module's leaves too) keeps the stack's batch layout.

    Under jax.set_mesh on Explicit axes JAX types a NumPy argument as replicated whatever
    in_shardings says (JAX's own cho_solve then gathers it too): there only the route is
    checked."""
    mesh = make_mesh(*shape, axis_types=axis_type)
    stack = NamedSharding(mesh, P("x"))
    typed_replicated = axis_type == AxisType.Explicit and set_mesh and not placed
    routes = []

    def module(a):
        m = jaxmg.Cholesky(a)
        routes.append(m.route)
        return m

    with jax.set_mesh(mesh) if set_mesh else contextlib.nullcontext():
        for name, (op, args) in list(STACKED.items()) + [("Cholesky module", (module, (SPD,)))]:
            args = tuple(jax.device_put(x, stack) for x in args) if placed else args
            fn = jax.jit(jax.vmap(op), in_shardings=(stack,) * len(args))
            outs = jax.tree.leaves(fn(*args))
            if typed_replicated:
                continue
            assert _moves(fn, *args) == set(), name
            for leaf in outs:
                assert _normal(leaf.sharding.spec, mesh)[:1] == ("x",), (name, leaf.sharding)
    assert routes and set(routes) == {"batch"} == {jaxmg.route("Cholesky", (N, N), "float64", mesh, stacked=STACK)}


#: Losses of one matrix whose gradients are summed over a stack: (loss, arguments).
GRADIENTS = {
    "potrs": (lambda a, b: jnp.sum(jaxmg.potrs(a, b) ** 2), (SPD, RHS)),
    "Cholesky.logdet": (lambda a: jaxmg.Cholesky(a).logdet(), (SPD,)),
    "syevd": (lambda a: jnp.sum(jaxmg.syevd(a)[1] ** 3), (SPD,)),
}


@pytest.mark.parametrize("axis_type", AXES)
def test_gradient_over_a_stack_split_on_some_mesh_axes_moves_nothing(axis_type):
    """jax.grad of a loss summed over jax.vmap(op) on a stack split over "x" of a (4, 2) mesh (the
    two devices along "y" hold the same matrices): the gradient keeps the stack's layout,
    and the compiled program has no collective at all (no all-reduce of the gradient over "y");
    the gradient is that of the same call on the unsharded NumPy stack."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    stack = NamedSharding(mesh, P("x"))
    for name, (loss, args) in GRADIENTS.items():
        placed = tuple(jax.device_put(x, stack) for x in args)
        fn = jax.jit(jax.grad(lambda *xs, loss=loss: jnp.sum(jax.vmap(loss)(*xs))))
        text = fn.lower(*placed).compile().as_text()
        assert {m for m in MOVES + ("all-reduce", "reduce-scatter") if m in text} == set(), name
        grad = fn(*placed)
        want = fn(*args)
        np.testing.assert_allclose(np.asarray(grad), np.asarray(want), rtol=1e-10, atol=1e-12, err_msg=name)
        assert _normal(grad.sharding.spec, mesh)[:1] == ("x",), (name, grad.sharding)


def test_eager_gradient_over_a_replicated_stack_keeps_its_layout():
    """An eager jax.grad of a loss summed over jax.vmap(op) on a replicated stack on Auto mesh
    axes: the stack is spread over the mesh to be solved and the outputs return to its layout;
    the gradient returns to it too (replicated, as JAX's own gradient is), with the values of
    the same call on the NumPy stack."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    for name, (loss, args) in GRADIENTS.items():
        placed = tuple(jax.device_put(x, NamedSharding(mesh, P())) for x in args)
        fn = jax.grad(lambda *xs, loss=loss: jnp.sum(jax.vmap(loss)(*xs)))
        grad = fn(*placed)
        np.testing.assert_allclose(np.asarray(grad), np.asarray(fn(*args)), rtol=1e-10, atol=1e-12, err_msg=name)
        assert _normal(grad.sharding.spec, mesh) == (), (name, grad.sharding)


#: Nested jax.vmap over a (4, 4, N, N) stack split over its outer axis: (op, inputs, NumPy's answer).
NESTED = {
    "potrs": (jaxmg.potrs, (SPD, RHS), lambda a, b: np.linalg.solve(a, b[..., None])[..., 0]),
    "la.solve": (la.solve, (GEN, RHS), lambda a, b: np.linalg.solve(a, b[..., None])[..., 0]),
    "la.eigvalsh": (la.eigvalsh, (SPD,), np.linalg.eigvalsh),
    "la.svd": (lambda a: la.svd(a, compute_uv=False), (GEN,), lambda a: np.linalg.svd(a, compute_uv=False)),
    "least_squares": (jaxmg.least_squares, (TALL, RHS_TALL), lambda a, b: np.linalg.pinv(a) @ b[..., None]),
}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("axis_type", AXES)
def test_nested_vmap_over_a_stack_split_on_its_outer_axis(axis_type, jit):
    """jax.vmap(jax.vmap(op)) over a stack split over its outer batch axis: each inner stack is
    one member of the outer one (its own layout, not the outer axis's), the values are NumPy's,
    nothing moves between devices and the outputs keep the outer split."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    with jax.set_mesh(mesh):
        for name, (op, args, want) in NESTED.items():
            nested = tuple(jax.device_put(x.reshape(4, 4, *x.shape[1:]), NamedSharding(mesh, P("x"))) for x in args)
            fn = jax.vmap(jax.vmap(op))
            out = (jax.jit(fn) if jit else fn)(*nested)
            if jit:
                assert _moves(jax.jit(fn), *nested) == set(), name
            expected = np.reshape(want(*(np.asarray(x) for x in nested)), out.shape)
            np.testing.assert_allclose(np.asarray(out), expected, rtol=0, atol=1e-10, err_msg=name)
            assert _normal(out.sharding.spec, mesh)[:1] == ("x",), (name, out.sharding)


#: The drop-ins on a stack (..., N, N) and right-hand sides (..., N, 2), as users call them.
RHS2 = np.stack([RHS, 2 * RHS], axis=-1)
DROPINS_STACKED = {
    "la.solve": (la.solve, (GEN, RHS2)),
    "la.inv": (la.inv, (GEN,)),
    "la.slogdet": (la.slogdet, (GEN,)),
    "la.cholesky": (la.cholesky, (SPD,)),
    "sla.solve(pos)": (lambda a, b: sla.solve(a, b, assume_a="pos"), (SPD, RHS2)),
    "sla.lu_solve": (lambda a, b: sla.lu_solve(sla.lu_factor(a), b), (GEN, RHS2)),
    "sla.solve_triangular": (lambda a, b: sla.solve_triangular(a, b, lower=True), (SPD, RHS2)),
}


@pytest.mark.parametrize("set_mesh", [False, True], ids=["no-set-mesh", "set-mesh"])
def test_dropins_on_a_stack_move_nothing(set_mesh):
    """jax.jit(f, in_shardings=...) of jaxmg.numpy / jaxmg.scipy functions over a stack split over
    its batch axis on Auto mesh axes: no collective, and the outputs keep the batch layout
    (solve(assume_a="pos") included, whose product and solves run in a custom_linear_solve)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    stack = NamedSharding(mesh, P(("x", "y")))
    with jax.set_mesh(mesh) if set_mesh else contextlib.nullcontext():
        for name, (op, args) in DROPINS_STACKED.items():
            fn = jax.jit(op, in_shardings=(stack,) * len(args))
            assert _moves(fn, *args) == set(), name
            for leaf in jax.tree.leaves(fn(*args)):
                assert _normal(leaf.sharding.spec, mesh)[:1] == (("x", "y"),), (name, leaf.sharding)


def _gathered(fn, *args) -> list:
    """The shapes that the compiled program's all-gathers produce."""
    text = fn.lower(*args).compile().as_text()
    return [
        tuple(int(d) for d in dims.split(",") if d) for dims in re.findall(r"= \w+\[([\d,]*)\][^ ]* all-gather\(", text)
    ]


@pytest.mark.parametrize("set_mesh", [False, True], ids=["no-set-mesh", "set-mesh"])
@pytest.mark.parametrize("axis_type", AXES)
@pytest.mark.usefixtures("opaque_native")
def test_one_matrix_routes_compile_to_what_they_report(axis_type, set_mesh):
    """One matrix split over a (4, 2) mesh: the local route (backend="portable") gathers it
    whole onto each device's solver; the distributed route (backend="native", its handlers
    opaque) never gathers it, only the right-hand side. The solution keeps b's layout."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    a = jax.device_put(SPD[0], NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(RHS[0], NamedSharding(mesh, P("x")))
    with jax.set_mesh(mesh) if set_mesh else contextlib.nullcontext():
        local = jax.jit(lambda a, b: jaxmg.potrs(a, b, backend="portable"))
        native = jax.jit(lambda a, b: jaxmg.potrs(a, b, backend="native", T_A=2))
        assert jaxmg.Cholesky(a, backend="portable").route == "local"
        assert jaxmg.Cholesky(a, backend="native", T_A=2).route == "distributed"
        assert (N, N) in _gathered(local, a, b)
        assert (N, N) not in _gathered(native, a, b)
        assert _normal(local(a, b).sharding.spec, mesh) == ("x",)


@pytest.mark.parametrize("axis_type", AXES)
def test_lu_factor_of_a_split_matrix_comes_from_the_distributed_lu(axis_type, request):
    """jax.scipy.linalg.lu_factor (and lu) of one matrix split over a (4, 2) mesh: on the local
    route (no native backend here) the matrix is gathered whole onto each device's getrf; where
    jaxmg.LU takes the distributed route (the native backend, its handlers opaque) the arrays come
    from that factor, and the matrix is never gathered."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    a = jax.device_put(GEN[0], NamedSharding(mesh, P("x", "y")))
    with jax.set_mesh(mesh):
        assert jaxmg.route("LU", (N, N), "float64", mesh) == "local"
        assert (N, N) in _gathered(jax.jit(lambda a: sla.lu_factor(a)), a)
        request.getfixturevalue("opaque_native")
        assert jaxmg.route("LU", (N, N), "float64", mesh) == "distributed"
        for fn in (lambda a: sla.lu_factor(a), lambda a: sla.lu(a)):
            assert (N, N) not in _gathered(jax.jit(fn), a)


# --- outputs keep the caller's layout ---


def _cases(a, g, t, s, b, bt, w):
    """(name, function, arguments, expected specs of its outputs as 'a', 'b' or 'r' for a's
    layout, b's layout or replicated)."""
    return [
        ("potrs", jaxmg.potrs, (a, b), "b"),
        ("lu_solve", jaxmg.lu_solve, (g, b), "b"),
        ("least_squares", jaxmg.least_squares, (t, bt), "b"),
        ("cholesky", jaxmg.cholesky, (a,), "a"),
        ("qr", jaxmg.qr, (t,), "aa"),
        ("syevd", jaxmg.syevd, (a,), "ra"),
        ("sygvd", jaxmg.sygvd, (a, s), "ra"),
        ("gesvd", jaxmg.gesvd, (t,), "ara"),
        ("polar", jaxmg.polar, (t,), "aa"),
        ("Cholesky.solve", lambda a, b: jaxmg.Cholesky(a).solve(b), (a, b), "b"),
        ("LU.solve", lambda a, b: jaxmg.LU(a).solve(b), (g, b), "b"),
        ("LU.lu", lambda g: jaxmg.LU(g).lu, (g,), "a"),
        ("Cholesky.factor", lambda a: jaxmg.Cholesky(a).factor, (a,), "a"),
        ("QR.solve", lambda t, b: jaxmg.QR(t).solve(b), (t, bt), "b"),
        ("la.solve", la.solve, (g, b), "b"),
        ("la.inv", la.inv, (g,), "a"),
        ("la.cholesky", la.cholesky, (a,), "a"),
        ("la.eigh", la.eigh, (a,), "ra"),
        ("la.svd", lambda t: la.svd(t, full_matrices=False), (t,), "ara"),
        ("la.det", la.det, (g,), "r"),
        ("la.cholesky upper", lambda a: la.cholesky(a, upper=True), (a,), "a"),
        ("la.pinv", la.pinv, (t,), "a"),
        ("sla.cholesky", sla.cholesky, (a,), "a"),
        ("sla.lu_factor", sla.lu_factor, (g,), "ar"),
        ("sla.lu", sla.lu, (g,), "aaa"),
        ("sla.cho_solve", lambda a, b: sla.cho_solve(sla.cho_factor(a, lower=True), b), (a, b), "b"),
        ("sla.lu_solve", lambda g, b: sla.lu_solve(sla.lu_factor(g), b), (g, b), "b"),
        ("sla.polar", sla.polar, (t,), "aa"),
        ("sla.polar left", lambda w: sla.polar(w, side="left"), (w,), "aa"),
        ("la.lstsq", lambda t, b: la.lstsq(t, b)[0], (t, bt), "b"),
        ("sla.lstsq", lambda t, b: sla.lstsq(t, b)[0], (t, bt), "b"),
    ]


@pytest.mark.parametrize("axis_type", AXES_EXPLICIT_SLOW)
@pytest.mark.parametrize("shape", [pytest.param(((1,), ("r",)), id="1")] + MESHES)
def test_outputs_keep_the_callers_layout_eager_and_jitted(shape, axis_type):
    mesh = make_mesh(*shape, axis_types=axis_type)
    names = shape[1]
    matrix, rows = NamedSharding(mesh, P(*names)), NamedSharding(mesh, P(names[0]))
    put = lambda x, s: jax.device_put(x, s)  # noqa: E731
    a, g, t, s = (put(x, matrix) for x in (SPD[0], GEN[0], TALL[0], SPD[1]))
    b, bt = put(RHS[0], rows), put(RHS_TALL[0], rows)
    want = {"a": _normal(matrix.spec, mesh), "b": _normal(rows.spec, mesh), "r": ()}
    w = put(np.ascontiguousarray(TALL[1].T), matrix)
    for name, fn, args, kinds in _cases(a, g, t, s, b, bt, w):
        for how, run in (("eager", fn), ("jit", jax.jit(fn))):
            outs = run(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            got = tuple(_normal(x.sharding.spec, mesh) for x in outs)
            assert got == tuple(want[k] for k in kinds), (name, how, got)


SOLVES = {
    "potrs": jaxmg.potrs,
    "la.solve": la.solve,
    "sla.solve pos": lambda a, b: sla.solve(a, b, assume_a="pos"),
    "sla.solve_triangular": lambda a, b: sla.solve_triangular(a, b, lower=True),
    "sla.cho_solve": lambda a, b: sla.cho_solve(sla.cho_factor(a, lower=True), b),
    "sla.lu_solve": lambda a, b: sla.lu_solve(sla.lu_factor(a), b),
}


@pytest.mark.parametrize("b_spec", [P("y"), P(("x", "y")), P()], ids=str)
@pytest.mark.parametrize("name", SOLVES)
def test_eager_solution_has_b_layout_where_it_differs_from_a_rows(name, b_spec):
    """Eagerly on Auto axes a solution comes back in b's layout, also where b's rows are not
    split as a's (XLA's placement of the last step is a's rows, or replicated)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    a = jax.device_put(SPD[0], NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(RHS[0], NamedSharding(mesh, b_spec))
    x = SOLVES[name](a, b)
    assert _normal(x.sharding.spec, mesh) == _normal(b_spec, mesh), x.sharding.spec


def test_a_right_hand_side_on_no_mesh_stays_whole_on_explicit_axes_eager_and_jitted():
    """A matrix split over Explicit mesh axes and a right-hand side on no mesh (an uncommitted
    array, or one made inside jax.jit), no jax.set_mesh: the solution is whole, its type and
    sharding the same eagerly and inside jax.jit (on Explicit axes a type names every split, so b
    is known to be whole there too; a matrix of right-hand sides is not split as a matrix)."""
    mesh = make_mesh((4, 2), ("x", "y"))
    a, b = jax.device_put(SPD[0], NamedSharding(mesh, P("x", "y"))), jnp.asarray(RHS2[0])
    for name, solve in SOLVES.items():
        made_inside = jax.jit(lambda a, solve=solve: solve(a, jnp.ones(b.shape)))
        for how, x in (("eager", solve(a, b)), ("jit", jax.jit(solve)(a, b)), ("inside", made_inside(a))):
            assert _normal(x.sharding.spec, mesh) == (), (name, how, x.sharding)
            assert _normal(jax.typeof(x).sharding.spec, mesh) == (), (name, how, jax.typeof(x))


def test_stack_split_inside_its_matrices_keeps_its_layout_eager_and_jitted():
    """A stack split over its batch axis and inside its matrices (Explicit ``P("x", None, "y")``,
    no ``jax.set_mesh``): matrix outputs come back in its layout and solutions in b's, eagerly as
    inside ``jax.jit``, and a solve with JAX's array factor runs eagerly too."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    a = jax.device_put(SPD[:8], NamedSharding(mesh, P("x", None, "y")))
    c = jax.device_put(np.linalg.cholesky(SPD[:8]), a.sharding)
    b = jax.device_put(RHS[:8, :, None], NamedSharding(mesh, P("x")))
    cases = {
        "la.inv": (la.inv, (a,), P("x", None, "y")),
        "la.eigh": (lambda a: la.eigh(a)[1], (a,), P("x", None, "y")),
        "sla.cho_solve": (lambda c, b: sla.cho_solve((c, True), b), (c, b), P("x")),
    }
    want_x = np.linalg.solve(SPD[:8], RHS[:8, :, None])
    for name, (fn, args, spec) in cases.items():
        for how, run in (("eager", fn), ("jit", jax.jit(fn))):
            out = run(*args)
            assert _normal(out.sharding.spec, mesh) == _normal(spec, mesh), (name, how, out.sharding.spec)
            if name == "sla.cho_solve":
                np.testing.assert_allclose(np.asarray(out), want_x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis_type", AXES)
def test_nested_vmap_over_a_stack_split_on_two_batch_axes(axis_type):
    """``jax.vmap(jax.vmap(potrs))`` of a (2, 4, N, N) stack split ``P("y", "x")`` over Explicit
    or Auto axes: each level's batch axis is read from its own stacked value (the inner one's from
    the inner value, not from the array beneath both), so the batch route moves nothing and x
    keeps both axes' split, eagerly (where the outer vmap would otherwise map the inner level's
    shard_map unsplit) and inside ``jax.jit``."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    a = jax.device_put(SPD[:8].reshape(2, 4, N, N), NamedSharding(mesh, P("y", "x")))
    b = jax.device_put(RHS[:8].reshape(2, 4, N), NamedSharding(mesh, P("y", "x")))
    fn = jax.vmap(jax.vmap(jaxmg.potrs))
    want = np.linalg.solve(SPD[:8], RHS[:8, :, None])[..., 0].reshape(2, 4, N)
    for x in (fn(a, b), jax.jit(fn)(a, b)):
        assert _normal(x.sharding.spec, mesh) == ("y", "x"), x.sharding.spec
        np.testing.assert_allclose(np.asarray(x), want, rtol=1e-12, atol=1e-12)
    assert not _moves(jax.jit(fn), a, b)


#: Functions of one matrix (and b) vmapped over a stack split inside its matrices: (function,
#: arguments, what each output is: "a" a matrix in the stack's layout, "b" a solution in b's,
#: "batch" by the batch axis alone).
INSIDE = {
    "potrs": (jaxmg.potrs, ("spd", "b"), ("b",)),
    "cholesky": (jaxmg.cholesky, ("spd",), ("a",)),
    "syevd": (jaxmg.syevd, ("spd",), ("batch", "a")),
    "gesvd": (jaxmg.gesvd, ("gen",), ("a", "batch", "a")),
    "LU.inverse": (lambda a: jaxmg.LU(a).inverse(), ("gen",), ("a",)),
    "Cholesky.solve": (lambda a, b: jaxmg.Cholesky(a).solve(b), ("spd", "b"), ("b",)),
    "QR.solve": (lambda a, b: jaxmg.QR(a).solve(b), ("gen", "b"), ("b",)),
    "la.inv": (la.inv, ("gen",), ("a",)),
}


def _inside_stack(axis_type):
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    stack = NamedSharding(mesh, P(None, "x", "y"))
    args = {
        "spd": jax.device_put(SPD[:8], stack),
        "gen": jax.device_put(GEN[:8], stack),
        "b": jax.device_put(RHS[:8, :, None].repeat(2, axis=2), NamedSharding(mesh, P(None, "x"))),
    }
    return mesh, args, {"a": (None, "x", "y"), "b": (None, "x"), "batch": ()}


@pytest.mark.parametrize("axis_type", AXES)
def test_stack_split_inside_its_matrices_returns_every_output_to_its_layout(axis_type):
    """jax.vmap of every family (functions, modules and their methods, a drop-in) over a stack split
    ``P(None, "x", "y")`` of a (4, 2) mesh: matrix outputs come back in the stack's layout,
    solutions in b's and eigenvalues/singular values by the batch axis (not every output whole on
    every device), eagerly on Auto and Explicit axes and inside ``jax.jit`` on Explicit ones (on
    Auto ones the layout is not known there: as JAX's own functions, XLA places them); the values
    are those of the same call on the NumPy stack."""
    mesh, args, want = _inside_stack(axis_type)
    runs = [("eager", lambda f: f)] + ([("jit", jax.jit)] if axis_type == AxisType.Explicit else [])
    for name, (fn, names, kinds) in INSIDE.items():
        given = tuple(args[n] for n in names)
        expected = jax.tree.leaves(jax.vmap(fn)(*(np.asarray(x) for x in given)))
        for how, wrap in runs:
            outs = jax.tree.leaves(wrap(jax.vmap(fn))(*given))
            for out, kind, ref in zip(outs, kinds, expected):
                got = _normal(out.sharding.spec, mesh)
                assert got == _normal(P(*want[kind]), mesh), (name, how, kind, out.sharding.spec)
                np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-10, atol=1e-10)


def test_stack_split_inside_its_matrices_moves_by_all_to_alls():
    """The batch route spreads a stack split inside its matrices over the mesh and returns its
    outputs one mesh axis at a time: the compiled program has all-to-alls and gathers no matrix
    (XLA gathers the whole stack onto every device for a move of several axes at once; LU's
    pivots, vectors by the batch axis, are gathered)."""
    _, args, _ = _inside_stack(AxisType.Explicit)
    for name in ("cholesky", "LU.inverse"):
        fn, names, _ = INSIDE[name]
        text = jax.jit(jax.vmap(fn)).lower(*(args[n] for n in names)).compile().as_text()
        assert "all-to-all" in text, name
        assert not re.search(r"= f64\[\d+,\d+,\d+\]\S* all-gather\(", text), name


#: Nested jax.vmap over a stack split inside its matrices: (function, arguments, what each output
#: is, as in INSIDE).
NESTED_INSIDE = {
    "cholesky": (jaxmg.cholesky, ("spd",), ("a",)),
    "potrs": (jaxmg.potrs, ("spd", "b"), ("b",)),
    "syevd": (jaxmg.syevd, ("spd",), ("batch", "a")),
    "Cholesky": (jaxmg.Cholesky, ("spd",), ("a", "batch", "a")),
    "la.inv": (la.inv, ("gen",), ("a",)),
    "la.solve": (la.solve, ("gen", "b"), ("b",)),
}
#: (stack shape, the stack's layout, b's layout): split inside the matrices only, a stack of 3
#: (which no mesh axis divides), and over the outer batch axis and the matrices' rows.
NESTED_LAYOUTS = [
    pytest.param((2, 3), P(None, None, "x", "y"), P(None, None, "x"), id="inside"),
    pytest.param((4, 2), P("x", None, "y", None), P("x", None, "y"), id="outer-and-rows"),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("axis_type", AXES)
@pytest.mark.parametrize("shape, spec, b_spec", NESTED_LAYOUTS)
def test_nested_vmap_over_a_stack_split_inside_its_matrices_keeps_its_layout(shape, spec, b_spec, axis_type, jit):
    """jax.vmap(jax.vmap(f)) over a stack split inside its matrices (and over its outer batch axis)
    returns its outputs as jax.vmap(f) does over one stack: matrices in the stack's layout,
    solutions in b's, eigenvalues and statuses by the batch axes, with the values of the same call
    on the NumPy stack; under jax.set_mesh, inside jax.jit on Explicit axes too (on Auto axes the
    layout is not known there, and XLA places the outputs)."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=axis_type)
    count = int(np.prod(shape))
    args = {
        "spd": jax.device_put(SPD[:count].reshape(*shape, N, N), NamedSharding(mesh, spec)),
        "gen": jax.device_put(GEN[:count].reshape(*shape, N, N), NamedSharding(mesh, spec)),
        "b": jax.device_put(RHS[:count].reshape(*shape, N), NamedSharding(mesh, b_spec)),
    }
    want = {"a": spec, "b": b_spec, "batch": P(*tuple(spec)[:2])}
    checked = not jit or axis_type == AxisType.Explicit
    for name, (fn, names, kinds) in NESTED_INSIDE.items():
        given = tuple(args[n] for n in names)
        nested = jax.vmap(jax.vmap(fn))
        with jax.set_mesh(mesh):
            outs = jax.tree.leaves((jax.jit(nested) if jit else nested)(*given))
        expected = jax.tree.leaves(nested(*(np.asarray(x) for x in given)))
        for out, kind, ref in zip(outs, kinds, expected, strict=True):
            np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-10, atol=1e-10, err_msg=name)
            if checked:
                got = _normal(out.sharding.spec, mesh)
                assert got == _normal(want[kind], mesh), (name, kind, out.sharding.spec)


def _gathered_elements(text: str) -> int:
    """The most elements that one all-gather of a compiled program gathers onto a device."""
    shapes = re.findall(r"= f64\[([\d,]+)\]\S* all-gather\(", text)
    return max((int(np.prod([int(d) for d in s.split(",")])) for s in shapes), default=0)


@pytest.mark.parametrize("name", ["cholesky", "la.inv", "Cholesky"])
def test_nested_vmap_over_a_stack_split_inside_its_matrices_gathers_no_stack(name):
    """Compiled, jax.vmap(jax.vmap(f)) over a (2, 4) stack split ``P(None, None, "x", "y")`` on
    Explicit axes spreads its matrices over the mesh by all-to-alls and returns them the same way:
    no all-gather brings more than the device's own two matrices together, neither on the way in
    nor on the way out."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Explicit)
    fn, names, _ = NESTED_INSIDE[name]
    a = jax.device_put(SPD[:8].reshape(2, 4, N, N), NamedSharding(mesh, P(None, None, "x", "y")))
    text = jax.jit(jax.vmap(jax.vmap(fn))).lower(a).compile().as_text()
    assert "all-to-all" in text, name
    assert _gathered_elements(text) <= 2 * N * N, name


@pytest.mark.parametrize("name", ["cholesky", "syevd", "LU.inverse"])
def test_per_matrix_gradients_of_a_stack_split_inside_its_matrices(name):
    """``jax.vmap(jax.grad(f))`` over a stack split ``P(None, "x", "y")`` on Explicit axes (JAX
    batches the body, whose derivative rules then compute on whole matrices): each matrix's
    gradient, in the stack's layout, is that of the sum over the stack."""
    mesh, args, _ = _inside_stack(AxisType.Explicit)
    fn, names, _ = INSIDE[name]
    a = args[names[0]]
    loss = lambda x: jnp.sum(jnp.sin(jax.tree.leaves(fn(x))[-1]))  # noqa: E731
    with jax.set_mesh(mesh):
        per = jax.jit(jax.vmap(jax.grad(loss)))(a)
    want = jax.grad(lambda x: jnp.sum(jax.vmap(loss)(x)))(np.asarray(a))
    assert _normal(per.sharding.spec, mesh) == (None, "x", "y"), per.sharding.spec
    np.testing.assert_allclose(np.asarray(per), np.asarray(want), rtol=1e-10, atol=1e-10)


def test_eager_gradient_over_a_stack_split_inside_its_matrices_keeps_its_layout():
    """An eager ``jax.grad`` through ``jax.vmap(potrs)`` over a stack split ``P(None, "x", "y")`` on
    Auto axes (whose types do not carry the layout): a's gradient comes back in the stack's layout
    and b's in its own, with JAX's values."""
    mesh, args, want = _inside_stack(AxisType.Auto)
    a, b = args["spd"], args["b"]
    loss = lambda a, b: jnp.sum(jnp.sin(jax.vmap(jaxmg.potrs)(a, b)))  # noqa: E731
    ga, gb = jax.grad(loss, argnums=(0, 1))(a, b)
    assert _normal(ga.sharding.spec, mesh) == _normal(P(*want["a"]), mesh), ga.sharding.spec
    assert _normal(gb.sharding.spec, mesh) == _normal(P(*want["b"]), mesh), gb.sharding.spec
    reference = lambda a, b: jnp.sum(jnp.sin(jnp.linalg.solve(jnp.tril(a) + jnp.tril(a, -1).mT, b)))  # noqa: E731
    for got, ref in zip((ga, gb), jax.grad(reference, argnums=(0, 1))(np.asarray(a), np.asarray(b))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-9, atol=1e-9)
