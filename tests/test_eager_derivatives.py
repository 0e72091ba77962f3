"""Derivatives as users write them: every JAX entry point outside jit, on Auto and Explicit
meshes, with and without jax.set_mesh, with respect to a, b or both; tangents and cotangents
in other shardings; single-device arrays with no mesh anywhere; eager check_grads.

potrs reads a's lower triangle: its derivatives are those of jnp.linalg.solve at
``lower_read(a)`` (with respect to a: zero above the diagonal, the two mirrored entries summed
below it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import lower_read, make_mesh, put, spd_matrix

#: Long (eager derivatives of every operation on meshes): CI runs these with tests/run.sh --slow.
pytestmark = pytest.mark.slow

N = 8
RNG = np.random.default_rng(20)
A = spd_matrix(RNG, N, np.float64) + 2 * np.eye(N)
B = RNG.standard_normal(N)
TA = spd_matrix(RNG, N, np.float64)  # a symmetric tangent direction for a
TB = RNG.standard_normal(N)


def _solve(a, b):
    return jnp.linalg.solve(a, b)


def _potrs_reference(a, b):
    """What potrs computes: the solve with the Hermitian matrix read from a's lower triangle."""
    return jnp.linalg.solve(lower_read(a), b)


def _fold(g):
    """The cotangent of a for a function of lower_read(a) whose cotangent is g (real)."""
    return np.tril(g, -1) + np.tril(g.T, -1) + np.diag(np.diag(g))


#: entry point -> f(fn, a, b, wrt) for fn(a, b) -> x; wrt is a tuple of argument indices.
def _restrict(fn, a, b, wrt):
    """fn of the arguments in ``wrt`` only (the others are closed over), and those arguments."""
    args = (a, b)

    def g(*chosen):
        full = list(args)
        for k, x in zip(wrt, chosen):
            full[k] = x
        return fn(*full)

    return g, tuple(args[k] for k in wrt)


def _loss(fn):
    return lambda *xs: jnp.sum(fn(*xs) ** 2)


def _pull(out, pullback):
    """The pullback of a cotangent in the output's sharding (JAX's vjp requires that on
    Explicit axes; on Auto axes any sharding works: test_cotangents_in_other_shardings)."""
    ct = np.arange(1.0, N + 1)
    return pullback(jax.device_put(ct, out.sharding) if hasattr(out, "sharding") else ct)


def _tangents(wrt, a, b):
    # tangents built inline: on one device, not in the primal's sharding
    return tuple(jnp.asarray(TA) if k == 0 else jnp.asarray(TB) for k in wrt)


ENTRY = {
    "grad": lambda fn, a, b, wrt: jax.grad(_loss(_restrict(fn, a, b, wrt)[0]), argnums=tuple(range(len(wrt))))(
        *_restrict(fn, a, b, wrt)[1]
    ),
    "value_and_grad": lambda fn, a, b, wrt: jax.value_and_grad(
        _loss(_restrict(fn, a, b, wrt)[0]), argnums=tuple(range(len(wrt)))
    )(*_restrict(fn, a, b, wrt)[1]),
    "vjp": lambda fn, a, b, wrt: _pull(*jax.vjp(_restrict(fn, a, b, wrt)[0], *_restrict(fn, a, b, wrt)[1])),
    "jvp": lambda fn, a, b, wrt: jax.jvp(
        _restrict(fn, a, b, wrt)[0], _restrict(fn, a, b, wrt)[1], _tangents(wrt, a, b)
    ),
    # JAX's linearize requires tangents of the primal's type (on Explicit axes, its sharding)
    "linearize": lambda fn, a, b, wrt: jax.linearize(_restrict(fn, a, b, wrt)[0], *_restrict(fn, a, b, wrt)[1])[1](
        *[
            jax.device_put(t, x.sharding) if hasattr(x, "sharding") else t
            for t, x in zip(_tangents(wrt, a, b), _restrict(fn, a, b, wrt)[1])
        ]
    ),
    "jacfwd": lambda fn, a, b, wrt: jax.jacfwd(_restrict(fn, a, b, wrt)[0], argnums=tuple(range(len(wrt))))(
        *_restrict(fn, a, b, wrt)[1]
    ),
    "jacrev": lambda fn, a, b, wrt: jax.jacrev(_restrict(fn, a, b, wrt)[0], argnums=tuple(range(len(wrt))))(
        *_restrict(fn, a, b, wrt)[1]
    ),
    "hessian": lambda fn, a, b, wrt: jax.hessian(_loss(_restrict(fn, a, b, wrt)[0]), argnums=tuple(range(len(wrt))))(
        *_restrict(fn, a, b, wrt)[1]
    ),
}
WRT = {"a": (0,), "b": (1,), "ab": (0, 1)}


def _close(got, want):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-10)


def _run(entry, fn, a, b, wrt, mesh=None):
    if mesh is None:
        return ENTRY[entry](fn, a, b, wrt)
    with jax.set_mesh(mesh):
        return ENTRY[entry](fn, a, b, wrt)


def _mesh(kind):
    return make_mesh((4, 2), ("x", "y"), axis_types=kind)


def _inputs(mesh):
    return put(A, mesh, P("x", "y")), put(B, mesh, P("x"))


@pytest.mark.parametrize("entry", list(ENTRY))
@pytest.mark.parametrize("wrt", list(WRT))
@pytest.mark.parametrize(
    "kind,set_mesh", [(AxisType.Auto, False), (AxisType.Explicit, True)], ids=["auto", "explicit-set_mesh"]
)
def test_every_entry_point_eagerly(entry, wrt, kind, set_mesh):
    mesh = _mesh(kind)
    a, b = _inputs(mesh)
    got = _run(entry, jaxmg.potrs, a, b, WRT[wrt], mesh if set_mesh else None)
    _close(got, ENTRY[entry](_potrs_reference, A, B, WRT[wrt]))
    if entry == "hessian" and "a" in wrt:
        # also of the Hermitian part of a (on Explicit axes through _sym's workaround)
        fn = lambda a, b: jaxmg.potrs(_sym(a), b)  # noqa: E731
        got = _run(entry, fn, a, b, WRT[wrt], mesh if set_mesh else None)
        _close(got, ENTRY[entry](lambda a, b: _solve((a + a.T) / 2, b), A, B, WRT[wrt]))


@pytest.mark.parametrize("entry", ["grad", "jvp", "vjp"])
@pytest.mark.parametrize("wrt", list(WRT))
@pytest.mark.parametrize(
    "kind,set_mesh",
    [(AxisType.Auto, True), (AxisType.Explicit, True), (AxisType.Auto, False)],
    ids=["auto-set_mesh", "explicit", "auto"],
)
def test_lu_solve_eagerly(entry, wrt, kind, set_mesh):
    mesh = _mesh(kind)
    a, b = _inputs(mesh)
    got = _run(entry, jaxmg.lu_solve, a, b, WRT[wrt], mesh if set_mesh else None)
    _close(got, ENTRY[entry](_solve, A, B, WRT[wrt]))


@pytest.mark.parametrize("entry", ["jvp", "linearize"])
@pytest.mark.parametrize("fn", [jaxmg.potrs, jaxmg.lu_solve], ids=["potrs", "lu_solve"])
def test_forward_mode_on_explicit_mesh_without_set_mesh(entry, fn):
    a, b = _inputs(_mesh(AxisType.Explicit))
    _close(ENTRY[entry](fn, a, b, (0, 1)), ENTRY[entry](_solve, A, B, (0, 1)))


def test_reverse_mode_on_explicit_mesh_needs_set_mesh_as_in_jax():
    """JAX itself refuses an eager grad of a reduction of an Explicit-sharded array outside
    jax.set_mesh; the README's workaround (set the mesh) is what makes jaxmg's work."""
    mesh = _mesh(AxisType.Explicit)
    a, b = _inputs(mesh)
    with pytest.raises(ValueError, match="mesh"):
        jax.grad(lambda a: jnp.sum(a * 2))(a)
    with jax.set_mesh(mesh):
        g = jax.grad(lambda a: jnp.sum(jaxmg.potrs(a, b)))(a)
    assert g.sharding.spec == a.sharding.spec


@pytest.mark.parametrize("kind", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_b_built_inline_and_grad_of_b_alone(kind):
    mesh = _mesh(kind)
    a, b = _inputs(mesh)
    with jax.set_mesh(mesh):
        g_a = jax.grad(lambda a: jnp.sum(jaxmg.potrs(a, jnp.ones(N))))(a)
        g_b = jax.grad(lambda b: jnp.sum(jaxmg.potrs(a, b)))(b)
        g_lu = jax.grad(lambda b: jnp.sum(jaxmg.lu_solve(a, b)))(b)
    x = np.linalg.solve(A, np.ones(N))
    w = np.linalg.solve(A, np.ones(N))
    _close(g_a, _fold(-np.outer(w, x)))
    _close(g_b, w)
    _close(g_lu, w)
    assert g_a.sharding.spec == a.sharding.spec and g_b.sharding.spec == b.sharding.spec


@pytest.mark.parametrize("kind", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_tangents_in_other_shardings_eagerly_and_in_jit(kind):
    mesh = _mesh(kind)
    a, b = _inputs(mesh)
    want = jax.jvp(_solve, (A, B), (TA, TB))
    tangents = {
        "replicated": (put(TA, mesh, P()), put(TB, mesh, P())),
        "one device": (jax.device_put(TA, jax.devices()[3]), jax.device_put(TB, jax.devices()[5])),
        "other spec": (put(TA, mesh, P("y", "x")), put(TB, mesh, P("y"))),
        "columns": (put(TA, mesh, P(None, "x")), put(TB, mesh, P())),
    }
    f = lambda a, b: jaxmg.potrs(a, b)  # noqa: E731
    for name, (ta, tb) in tangents.items():
        with jax.set_mesh(mesh):
            _close(jax.jvp(f, (a, b), (ta, tb)), want)
            if name != "one device":  # jax.jit itself refuses arguments committed to other devices
                _close(jax.jit(lambda a, b, ta, tb: jax.jvp(f, (a, b), (ta, tb)))(a, b, ta, tb), want)


def test_cotangents_in_other_shardings_keep_the_primal_sharding():
    """Auto axes: any cotangent sharding. (On Explicit axes JAX's own vjp requires the
    cotangent in the output's type, for jaxmg as for jnp: see the next test.)"""
    mesh = _mesh(AxisType.Auto)
    a, b = _inputs(mesh)
    x = np.linalg.solve(A, B)
    # replicated, on one device (uncommitted: JAX refuses one committed elsewhere, with jnp too)
    # and in another spec
    for ct in (put(np.arange(1.0, N + 1), mesh, P()), jnp.arange(1.0, N + 1), put(np.arange(1.0, N + 1), mesh, P("y"))):
        with jax.set_mesh(mesh):
            _, pullback = jax.vjp(jaxmg.potrs, a, b)
            g_a, g_b = pullback(ct)
        w = np.linalg.solve(A, np.arange(1.0, N + 1))
        _close((g_a, g_b), (_fold(-np.outer(w, x)), w))
        assert g_a.sharding.spec == a.sharding.spec and g_b.sharding.spec == b.sharding.spec


def test_explicit_vjp_cotangent_type_is_jax_rule():
    mesh = _mesh(AxisType.Explicit)
    a, b = _inputs(mesh)
    with jax.set_mesh(mesh):
        _, jax_pullback = jax.vjp(lambda b: b * 2.0, b)
        _, pullback = jax.vjp(jaxmg.potrs, a, b)
        with pytest.raises(ValueError, match="unexpected JAX type"):
            jax_pullback(jnp.ones(N))
        with pytest.raises(ValueError, match="unexpected JAX type"):
            pullback(jnp.ones(N))
        g_a, g_b = pullback(put(np.ones(N), mesh, P("x")))
    w = np.linalg.solve(A, np.ones(N))
    _close((g_a, g_b), (_fold(-np.outer(w, np.linalg.solve(A, B))), w))


def test_symbolic_zero_tangents():
    mesh = _mesh(AxisType.Auto)
    a, b = _inputs(mesh)
    # b's tangent is a symbolic zero inside JAX: only a is differentiated
    out, tangent = jax.jvp(lambda a: jaxmg.potrs(a, b), (a,), (jnp.asarray(TA),))
    _close((out, tangent), jax.jvp(lambda a: _solve(a, B), (A,), (TA,)))
    _, tangent = jax.jvp(lambda a: jaxmg.Cholesky(a).logdet(), (a,), (jnp.zeros((N, N)),))
    assert float(tangent) == 0.0


def _sym(a):
    """The Hermitian part, kept in a's layout.

    On Explicit axes JAX refuses ``a + a.T`` of differently sharded operands (for jnp as for
    jaxmg), and its second-order reverse mode of ``reshard(a.T, spec)`` fails ("Expected
    cotangent type float64[8@y,8@x] but got float64[8,8]", plain JAX alone:
    test_jax_refuses_order2_reverse_of_resharded_transpose). Symmetrising a replicated copy
    and resharding the result works at every order."""
    if not _explicit(a):
        return (a + a.T) / 2
    whole = jax.sharding.reshard(a, P())
    return jax.sharding.reshard((whole + whole.T) / 2, jax.typeof(a).sharding.spec)


def _explicit(a) -> bool:
    mesh = jax.typeof(a).sharding.mesh
    return not mesh.empty and AxisType.Explicit in tuple(mesh.axis_types)


def test_jax_refuses_order2_reverse_of_resharded_transpose():
    """Plain JAX, no jaxmg: on Explicit axes the second-order reverse mode of
    ``reshard(a.T, a's spec)`` fails (JAX 0.12). The README's derivative section gives the
    workaround (symmetrise a replicated copy, as _sym does), with which jaxmg passes."""
    mesh = _mesh(AxisType.Explicit)
    a, b = _inputs(mesh)

    def f(a, b):
        return jnp.sum(jax.sharding.reshard(a.T, jax.typeof(a).sharding.spec) ** 2) * b

    with jax.set_mesh(mesh):
        check_grads(f, (a, b), order=1, modes=("rev",))
        try:
            check_grads(f, (a, b), order=2, modes=("rev",))
        except ValueError as e:
            assert "Expected cotangent type" in str(e)
        else:
            pytest.skip(f"JAX {jax.__version__} accepts it: the README's workaround is no longer needed")
        check_grads(lambda a, b: jnp.sum(_sym(a) ** 2) * b, (a, b), order=2, modes=("rev",))


@pytest.mark.parametrize("symmetrise", [True, False], ids=["sym", "as-is"])
@pytest.mark.parametrize("kind", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_check_grads_order2_eagerly_potrs(kind, symmetrise):
    """jax.test_util.check_grads, fwd and rev, order 2, outside jit, with Hermitian inputs, and
    with a as given (finite differences along directions that are not Hermitian)."""
    mesh = _mesh(kind)
    a, b = _inputs(mesh)
    prepare = _sym if symmetrise else (lambda a: a)
    with jax.set_mesh(mesh):
        check_grads(lambda a, b: jaxmg.potrs(prepare(a), b), (a, b), order=2, modes=("fwd", "rev"))


WIDE = RNG.standard_normal((N, 2 * N))
TRANSPOSING_DROP_INS = {
    "numpy.eigvalsh": (lambda a: jnp.sum(la.eigvalsh(a) ** 3), (A,)),
    "numpy.eigh": (lambda a: (lambda w, v: jnp.sum(jnp.abs(v) ** 2 * w))(*la.eigh(a)), (A,)),
    "numpy.cholesky": (lambda a: jnp.sum(jnp.sin(la.cholesky(a))), (A,)),
    "scipy.cho_factor(lower=False)": (lambda a: jnp.sum(jnp.sin(sla.cho_factor(a, lower=False)[0])), (A,)),
    "scipy.eigh(a, b)": (lambda a, b: jnp.sum(sla.eigh(a, b, eigvals_only=True) ** 2), (A, A + 4 * np.eye(N))),
    "scipy.polar(side='left')": (lambda a: jnp.sum(jnp.sin(sla.polar(a, side="left")[1])), (WIDE,)),
    "numpy.lstsq(wide)": (lambda a: jnp.sum(la.lstsq(a, jnp.arange(float(N)))[0] ** 2), (WIDE,)),
}


@pytest.mark.parametrize("name", list(TRANSPOSING_DROP_INS))
def test_check_grads_order2_eagerly_of_drop_ins_that_transpose_on_explicit_axes(name):
    """The drop-ins that symmetrise or transpose a matrix themselves, on Explicit axes, eager
    check_grads of order 2 in reverse mode: its random cotangent of no mesh reaches their resharded
    transposes in the argument's type (each had failed with "Expected cotangent type
    float64[8@y,8@x] but got float64[8,8]", which a caller could not avoid)."""
    mesh = _mesh(AxisType.Explicit)
    fn, matrices = TRANSPOSING_DROP_INS[name]
    with jax.set_mesh(mesh):
        check_grads(fn, tuple(put(m, mesh, P("x", "y")) for m in matrices), order=2, modes=("rev",))


CHECKED = {
    "cholesky": (lambda a, b: jaxmg.cholesky(_sym(a)), (0,)),
    "logdet": (lambda a, b: jaxmg.Cholesky(_sym(a)).logdet(), (0,)),
    "lu_solve": (lambda a, b: jaxmg.lu_solve(a, b), (0, 1)),
    "logdet-as-is": (lambda a, b: jaxmg.Cholesky(a).logdet(), (0,)),
}


@pytest.mark.parametrize("name", list(CHECKED))
def test_check_grads_order2_eagerly(name):
    """The same for cholesky, logdet and lu_solve (Auto axes)."""
    mesh = _mesh(AxisType.Auto)
    a, b = _inputs(mesh)
    fn, wrt = CHECKED[name]
    with jax.set_mesh(mesh):
        check_grads(*_restrict(fn, a, b, wrt), order=2, modes=("fwd", "rev"))


#: module solve -> (jaxmg function, jnp.linalg reference)
MODULE_SOLVES = {
    "Cholesky.solve": (lambda a, b: jaxmg.Cholesky(_sym(a)).solve(b), lambda a, b: _solve((a + a.T) / 2, b)),
    "LU.solve-T": (lambda a, b: jaxmg.LU(a).solve(b, trans="T"), lambda a, b: _solve(a.T, b)),
}


@pytest.mark.slow  # eager order 2: `bash tests/run.sh --slow` (CI runs it); in jit: test_autodiff.py
@pytest.mark.parametrize("name", list(MODULE_SOLVES))
def test_module_solves_order2_eagerly(name):
    """The modules' solves outside jit (Auto axes): check_grads of order 1, fwd and rev, then the
    exact second derivatives of a loss (reverse over reverse, forward over reverse, forward over
    forward) against jnp.linalg's. (check_grads of order 2 compares the same derivatives with
    finite differences, but re-traces each eager module call at every point: 3-5 minutes each.)"""
    mesh = _mesh(AxisType.Auto)
    a, b = _inputs(mesh)
    fn, reference = MODULE_SOLVES[name]
    g, args = _restrict(fn, a, b, (0, 1))
    ref, ref_args = _restrict(reference, A, B, (0, 1))
    loss, ref_loss = _loss(g), _loss(ref)
    both = (0, 1)
    with jax.set_mesh(mesh):
        check_grads(g, args, order=1, modes=("fwd", "rev"))
        got = [
            jax.hessian(loss, argnums=both)(*args),
            jax.jacfwd(jax.grad(loss, argnums=both), argnums=both)(*args),
            jax.jacfwd(jax.jacfwd(loss, argnums=both), argnums=both)(*args),
        ]
    want = jax.hessian(ref_loss, argnums=both)(*ref_args)
    for second in got:
        _close(second, want)


# --- No mesh anywhere: the arrays' device, as a 1 x 1 grid ------------------------------------


def test_single_device_arrays_without_a_mesh():
    device = jax.devices()[5]
    a, b = jax.device_put(A, device), jax.device_put(B, device)
    x = jaxmg.potrs(a, b)
    assert x.sharding.device_set == {device}
    _close(x, np.linalg.solve(A, B))
    _close(jaxmg.lu_solve(jnp.asarray(A), jnp.asarray(B)), np.linalg.solve(A, B))
    _close(jaxmg.cholesky(A), np.linalg.cholesky(A))
    _close(jaxmg.syevd(A)[0], np.linalg.eigvalsh(A))
    g = jax.grad(lambda a, b: jnp.sum(jaxmg.potrs(a, b) ** 2), argnums=(0, 1))(a, b)
    _close(g, jax.grad(lambda a, b: jnp.sum(_potrs_reference(a, b) ** 2), argnums=(0, 1))(A, B))
    assert g[0].sharding.device_set == {device}
    _close(
        jax.jit(jax.grad(lambda a: jnp.sum(jaxmg.potrs(a, jnp.ones(N)))))(jnp.asarray(A)),
        jax.grad(lambda a: jnp.sum(_potrs_reference(a, jnp.ones(N))))(A),
    )
    check_grads(lambda a, b: jaxmg.potrs((a + a.T) / 2, b), (A, B), order=2, modes=("fwd", "rev"))
    check_grads(jaxmg.potrs, (A, B), order=2, modes=("fwd", "rev"))


# --- Eager derivatives are compiled calls ------------------------------------------------------


def test_eager_grad_reuses_its_compiled_calls():
    """After the first call, an eager grad compiles nothing new (timing: benchmarks/)."""
    mesh = _mesh(AxisType.Auto)
    a, b = _inputs(mesh)
    grad = jax.grad(lambda a, b: jnp.sum(jaxmg.potrs(a, b)), argnums=(0, 1))
    jax.block_until_ready(grad(a, b))
    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kw: compiled.append(event) if "backend_compile" in event else None
    )
    try:
        jax.block_until_ready(grad(a, b))
    finally:
        jax.monitoring.clear_event_listeners()
    assert compiled == []


# --- The backward pass reuses the saved factor ----------------------------------------------


def _count(jaxpr, name: str) -> int:
    """Factorisations ``name`` ("potrf", "getrf") in a jaxpr and every jaxpr nested in it: the
    device solver's handler calls (``jaxmg.kernels.ffi.solver``), counted by their LAPACK branch (each
    call has one branch per platform)."""
    total = 0
    for eqn in jaxpr.eqns:
        target = str(eqn.params.get("target_name", eqn.params.get("target", "")))
        total += (
            eqn.primitive.name in ("ffi_call", "jaxmg_per_matrix_call")
            and target.startswith("lapack_")
            and name in target
        )
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += _count(inner, name)
    return total


@pytest.mark.parametrize("kind", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_backward_pass_has_one_factorisation_in_its_jaxpr(kind):
    mesh = _mesh(kind)
    a, b = _inputs(mesh)
    with jax.set_mesh(mesh):
        cases = {
            ("potrf", "potrs"): lambda a, b: jnp.sum(jaxmg.potrs(a, b) ** 2),
            ("potrf", "potrs+logdet"): lambda a, b: (
                jnp.sum(jnp.stack(jaxmg.potrs(a, b, return_logdet=True)[:1])) + jaxmg.Cholesky(a).logdet()
            ),
            ("getrf", "lu_solve"): lambda a, b: jnp.sum(jaxmg.lu_solve(a, b) ** 2),
        }
        for (primitive, name), loss in cases.items():
            jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(a, b).jaxpr
            expected = 2 if name == "potrs+logdet" else 1  # potrs and Cholesky(a): two factorisations
            assert _count(jaxpr, primitive) == expected, name
