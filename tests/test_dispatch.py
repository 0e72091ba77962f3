"""The eager fast path of the public boundary (``jaxmg._dispatch``): an eager call on concrete
arrays is planned and traced once per key (the function and its static arguments, each array's
shape, dtype, weak type, sharding and commitment, JAX's configuration and the mesh in context);
a later call with the same key goes straight to the compiled program. A changed key plans and
traces again and gives the right answer; bad input raises every time; statuses are each call's."""

from __future__ import annotations

import contextlib
import gc
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import make_mesh, put
from jaxmg import _context, _dispatch

N = 8


@pytest.fixture
def counts(monkeypatch):
    """Counts the calls planned (each reads its context once) and the bodies traced, from fresh
    caches."""
    _dispatch._compiled.cache_clear()
    found = {"planned": 0, "traced": 0}
    of, traced = _context.of, _dispatch._traced

    def planning(*args, **kwargs):
        found["planned"] += 1
        return of(*args, **kwargs)

    def tracing(*args, **kwargs):
        fn = traced(*args, **kwargs)

        def counted(*inner):
            found["traced"] += 1
            return fn(*inner)

        return counted

    monkeypatch.setattr(_context, "of", planning)
    monkeypatch.setattr(_dispatch, "_traced", tracing)
    yield found
    _dispatch._compiled.cache_clear()


def _system(dtype=jnp.float64, n=N):
    a = jnp.asarray(np.eye(n) * 4 + np.ones((n, n)), dtype)
    return a, jnp.arange(1.0, n + 1, dtype=dtype)


def _solved(a, b, x) -> bool:
    a, b, x = (np.asarray(v, np.float64) for v in (a, b, x))
    return np.linalg.norm(a @ x - b) <= 30 * N * 1e-6 * np.linalg.norm(a) * np.linalg.norm(x)


CALLS = {
    "potrs": lambda a, b: jaxmg.potrs(a, b),
    "numpy solve": lambda a, b: la.solve(a, b),
    "Cholesky.solve": lambda a, b: jaxmg.Cholesky(a).solve(b),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_repeated_eager_calls_are_planned_and_traced_once(counts, call):
    a, b = _system()
    first = CALLS[call](a, b)
    planned, traced = counts["planned"], counts["traced"]
    assert planned >= 1 and traced >= 1
    for k in range(3):
        x = CALLS[call](a * (k + 2), b)  # new values, the same key
        assert _solved(a * (k + 2), b, x)
    assert (counts["planned"], counts["traced"]) == (planned, traced)
    assert _solved(a, b, first)


def test_a_module_method_is_planned_once(counts):
    a, b = _system()
    module = jaxmg.Cholesky(a)
    module.solve(b), module.logdet()
    planned = counts["planned"]
    for _ in range(3):
        assert _solved(a, b, module.solve(b))
    assert np.isclose(float(module.logdet()), np.linalg.slogdet(np.asarray(a))[1])
    assert counts["planned"] == planned


def _auto():
    return make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)


def _explicit():
    return make_mesh((4, 2), ("x", "y"))


#: potrs(a, b) with one part of its key changed: each gives (a, b, keywords, context).
CHANGES = {
    "dtype": lambda a, b: (a.astype(jnp.float32), b.astype(jnp.float32), {}, None),
    "shape": lambda a, b: (jnp.eye(2 * N) * 3.0, jnp.ones(2 * N), {}, None),
    "matrix of right-hand sides": lambda a, b: (a, b[:, None], {}, None),
    "weak type": lambda a, b: (a, jnp.full(N, 1.0), {}, None),
    "weak type of another dtype": lambda a, b: (a.astype(jnp.float32), jnp.full(N, 1.0), {}, None),
    "Auto sharding": lambda a, b: (put(a, _auto(), P("x", "y")), put(b, _auto(), P("x")), {}, None),
    "Explicit sharding": lambda a, b: (put(a, _explicit(), P("x", "y")), put(b, _explicit(), P("x")), {}, None),
    "committed": lambda a, b: (jax.device_put(a, jax.devices()[0]), b, {}, None),
    "static option": lambda a, b: (a, b, {"return_logdet": True}, None),
    "promotion mode": lambda a, b: (a, b, {}, jax.numpy_dtype_promotion("strict")),
    "mesh in context": lambda a, b: (a, b, {}, jax.set_mesh(_auto())),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_key_is_planned_again(counts, change):
    a, b = _system()
    jaxmg.potrs(a, b), jaxmg.potrs(a, b)
    planned, traced = counts["planned"], counts["traced"]
    a2, b2, keywords, context = CHANGES[change](a, b)
    with context if context is not None else contextlib.nullcontext():
        out = jaxmg.potrs(a2, b2, **keywords)
        again = jaxmg.potrs(a2, b2, **keywords)
    assert counts["planned"] == planned + 1, "a changed key reuses a stale plan"
    # one trace at most (none where only the commitment changed: the same program), never a second
    assert counts["traced"] <= traced + 1, "the second call of the changed key runs on other arrays than the first"
    x = out[0] if keywords else out
    assert x.dtype == a2.dtype and (again[0] if keywords else again).dtype == a2.dtype
    assert _solved(a2, b2, x) and np.allclose(np.asarray(x), np.asarray(again[0] if keywords else again))
    if change.endswith("sharding"):
        assert x.sharding.spec == b2.sharding.spec  # the solution keeps b's layout on the fast path too
    if change == "committed":
        assert x.committed
    elif change in ("dtype", "shape", "static option"):
        assert not x.committed and not (again[0] if keywords else again).committed


def test_a_static_option_of_another_type_is_checked_again(counts, library_errors):
    """``T_A=2.0`` equals ``T_A=2`` as a Python value: the key holds each option's type, so the
    check that refuses a float tile still runs on the call after a good one."""
    a, b = _system()
    jaxmg.potrs(a, b, T_A=2), jaxmg.potrs(a, b, T_A=2)
    for _ in range(2):
        with pytest.raises(TypeError, match="T_A must be a positive int"):
            jaxmg.potrs(a, b, T_A=2.0)


def test_bad_input_raises_every_time(counts, library_errors):
    a, b = _system()
    jaxmg.potrs(a, b)
    for _ in range(2):
        with pytest.raises(ValueError, match="b has 7 rows but a has 8"):
            jaxmg.potrs(a, b[:7])


def test_statuses_are_each_calls_own():
    """The fast path reuses the program, never a result: a matrix that is not positive definite
    after a good one of the same key gives its own status and NaN."""
    a, b = _system()
    jaxmg.potrs(a, b, return_status=True)
    x, status = jaxmg.potrs(-a, b, return_status=True)
    assert int(status) != 0 and np.isnan(np.asarray(x)).all()
    x, status = jaxmg.potrs(a, b, return_status=True)
    assert int(status) == 0 and _solved(a, b, x)


def test_donate_false_keeps_the_arguments():
    a, b = _system()
    for _ in range(3):
        jaxmg.potrs(a, b), jaxmg.Cholesky(a)
    assert not a.is_deleted() and not b.is_deleted()


def test_numpy_inputs_and_lists_after_arrays_of_the_same_key():
    """NumPy arrays and nested lists are converted as ``jnp.asarray`` converts them, on every
    call, also after JAX arrays of the same shape and dtype were planned."""
    a, b = _system()
    jaxmg.potrs(a, b), jaxmg.potrs(a, b)
    for a2, b2 in [(np.asarray(a), np.asarray(b)), (np.asarray(a).tolist(), np.asarray(b).tolist())]:
        x = jaxmg.potrs(a2, b2)
        assert isinstance(x, jax.Array) and _solved(a, b, x)


def test_a_method_on_a_mesh_moves_a_right_hand_side_from_one_device(counts):
    """A module on a mesh solving a b committed to one device: b is moved to the mesh on every
    call, as the first call of the key moved it, and planned once."""
    a, b = _system()
    b = jax.device_put(b, jax.devices()[0])
    mesh = _auto()
    module = jaxmg.Cholesky(put(a, mesh, P("x", "y")))
    module.solve(b)
    planned = counts["planned"]
    for k in range(3):
        x = module.solve(b * (k + 1))
        assert _solved(a, b * (k + 1), x) and set(x.sharding.device_set) == set(mesh.devices.flat)
    assert counts["planned"] == planned


# --- The modules: construction and methods, on one matrix and on a stack made under jax.vmap ---


def test_a_method_binds_as_a_pytree_of_its_module():
    """``module.solve`` is a plain bound method (no Equinox module made on each read, which cost
    more than the eager call) that is still a pytree of the module: ``jax.jit`` of a function of
    it traces the module's arrays."""
    a, b = _system()
    module = jaxmg.Cholesky(a)
    bound = module.solve
    assert not isinstance(bound, eqx.Module)
    assert bound == module.solve and bound != jaxmg.Cholesky(a).solve
    assert jax.tree.leaves(bound) == jax.tree.leaves(module)
    x = jax.jit(lambda solve, b: solve(b))(bound, b)
    assert np.array_equal(np.asarray(x), np.asarray(bound(b)))
    assert jaxmg.Cholesky.solve.__doc__ == bound.__doc__ and bound.__name__ == "solve"


FACTORISATIONS = ("Cholesky", "LU", "QR")


def _modules(stacked: bool, k: float) -> dict:
    """The modules of a (times k), or of a stack of 3 such matrices made under ``jax.vmap``."""
    a, _ = _system()
    if not stacked:
        return {name: getattr(jaxmg, name)(a * k) for name in FACTORISATIONS}
    stack = a * k * jnp.arange(1.0, 4.0)[:, None, None]
    return {name: jax.vmap(getattr(jaxmg, name))(stack) for name in FACTORISATIONS}


#: a method of one of the modules (:func:`_modules`) on a right-hand side b
METHODS = {
    "Cholesky.solve": lambda m, b: m["Cholesky"].solve(b),
    "Cholesky.logdet": lambda m, b: m["Cholesky"].logdet(),
    "Cholesky.inverse": lambda m, b: m["Cholesky"].inverse(),
    "LU.solve": lambda m, b: m["LU"].solve(b),
    "LU.transpose_solve": lambda m, b: m["LU"].transpose_solve(b),
    "LU.slogdet": lambda m, b: m["LU"].slogdet(),
    "QR.solve": lambda m, b: m["QR"].solve(b),
    "QR.rank_status": lambda m, b: m["QR"].rank_status(),
}

_jitted_method = jax.jit(lambda m, b, call: METHODS[call](m, b), static_argnums=2)


@pytest.mark.parametrize("stacked", [False, True], ids=["one matrix", "stack made under vmap"])
def test_repeated_module_methods_are_planned_and_traced_once(counts, stacked):
    """Every method of the modules, called again on modules of the same key and new values,
    plans and traces nothing and gives exactly what ``jax.jit`` of the same call gives; so does
    the modules' construction on one matrix. A stack's modules made under ``jax.vmap`` (which
    plans and traces on every call: a user's transformation) run a method over the stack as one
    program."""
    _, b = _system()
    modules = {k: _modules(stacked, k) for k in (1.0, 2.0, 3.0)}
    for call in METHODS:  # the first eager call of each key, and the reference's compilation
        METHODS[call](modules[1.0], b), _jitted_method(modules[1.0], b, call)
    planned, traced = counts["planned"], counts["traced"]
    for k in (2.0, 3.0):
        if not stacked:
            modules[k] = _modules(stacked, k)
        for call, method in METHODS.items():
            out, reference = method(modules[k], b * k), _jitted_method(modules[k], b * k, call)
            for x, y in zip(jax.tree.leaves(out), jax.tree.leaves(reference), strict=True):
                assert x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y)), call
    assert (counts["planned"], counts["traced"]) == (planned, traced), "a repeated call planned or traced again"
    a, _ = _system()
    x = METHODS["Cholesky.solve"](modules[2.0], b)
    assert _solved(a * 2, b, x[0] if stacked else x)


#: LU(a).solve(b) with one part of its key changed: each gives (a, b, keywords, context), the
#: context made when entered (``jax.set_mesh`` sets the mesh when called)
METHOD_CHANGES = {
    "right-hand side's shape": lambda a, b: (a, b[:, None], {}, None),
    "right-hand side's weak type": lambda a, b: (a, jnp.full(N, 1.0), {}, None),
    "right-hand side committed": lambda a, b: (a, jax.device_put(b, jax.devices()[0]), {}, None),
    "module's shape": lambda a, b: (jnp.eye(2 * N) * 3.0, jnp.ones(2 * N), {}, None),
    "module's dtype": lambda a, b: (a.astype(jnp.float32), b.astype(jnp.float32), {}, None),
    "static option": lambda a, b: (a, b, {"trans": "T"}, None),
    "promotion mode": lambda a, b: (a, b, {}, lambda: jax.numpy_dtype_promotion("strict")),
    "mesh in context": lambda a, b: (a, b, {}, lambda: jax.set_mesh(_auto())),
}


#: (change, stacked): a stack's module made on one device is not used inside another mesh (its
#: one-device plan cannot run under a mesh of 8 devices, inside jax.jit neither)
CHANGED_METHODS = [(c, s) for c in METHOD_CHANGES for s in (False, True) if not (s and c == "mesh in context")]


@pytest.mark.parametrize(("change", "stacked"), CHANGED_METHODS)
def test_a_method_of_a_changed_key_is_planned_again(counts, change, stacked):
    """A method's key holds the module's structure, shapes, dtypes and shardings, the method's
    arguments and static options, and JAX's configuration: a change of any plans again (once:
    the second call of the new key plans nothing) and gives that key's own answer, on one matrix
    and on a stack's modules made under ``jax.vmap``."""
    a, b = _system()
    a2, b2, keywords, context = METHOD_CHANGES[change](a, b)
    made = (lambda m: jax.vmap(jaxmg.LU)(jnp.stack([m, 2 * m]))) if stacked else jaxmg.LU  # noqa: E731
    module, changed = made(a), made(a2)
    module.solve(b), module.solve(b)
    planned = counts["planned"]
    with context() if context is not None else contextlib.nullcontext():
        out = changed.solve(b2, **keywords)
        assert counts["planned"] > planned, "a changed key reuses a stale plan"
        planned = counts["planned"]
        again = changed.solve(b2, **keywords)
        assert counts["planned"] == planned, "the second call of the changed key planned again"
    x = out[0] if stacked else out
    assert x.dtype == a2.dtype and np.array_equal(np.asarray(out), np.asarray(again))
    op = a2.T if keywords else a2
    assert _solved(op, b2[:, 0] if b2.ndim == 2 else b2, x[:, 0] if b2.ndim == 2 else x)


def _cholesky(stacked: bool, *matrices):
    return jax.vmap(jaxmg.Cholesky)(jnp.stack(matrices)) if stacked else jaxmg.Cholesky(matrices[0])


@pytest.mark.parametrize("stacked", [False, True], ids=["one matrix", "stack made under vmap"])
def test_a_method_checks_its_input_and_gives_its_own_statuses_on_every_call(counts, library_errors, stacked):
    """The fast path reuses a method's program, never a result or a check: a b of the wrong
    shape raises on every call, and a module of a matrix that is not positive definite, of the
    key of a good one, gives NaN for it (a stack: for its own matrices only)."""
    a, b = _system()
    good, bad = _cholesky(stacked, a, -a), _cholesky(stacked, -a, a)
    for _ in range(2):
        good.solve(b)
        with pytest.raises(ValueError, match="b has 7 rows but a has 8"):
            good.solve(b[:7])
    x, y = np.asarray(good.solve(b)), np.asarray(bad.solve(b))
    if stacked:
        assert _solved(a, b, x[0]) and np.isnan(x[1]).all() and np.isnan(y[0]).all() and _solved(a, b, y[1])
    else:
        assert _solved(a, b, x) and np.isnan(y).all()


def test_a_method_under_a_users_transformation_is_planned_on_every_call(counts):
    """A method called inside a user's eager ``jax.vmap`` or ``jax.grad`` (its arguments tracers)
    is planned on every call and keeps nothing for a key, as before; its result is jax.jit's."""
    a, b = _system()
    stacked = _cholesky(True, a, a * 2)
    calls = {
        "vmap": lambda: jax.vmap(lambda m: m.solve(b))(stacked),
        "grad": lambda: jax.grad(lambda a: jaxmg.Cholesky(a).logdet())(a),
    }
    for name, call in calls.items():
        call()
        kept, planned = len(_dispatch._compiled._planned), counts["planned"]
        out = call()
        assert counts["planned"] > planned and len(_dispatch._compiled._planned) == kept, name
        assert np.array_equal(np.asarray(out), np.asarray(jax.jit(call)())), name


@pytest.mark.parametrize("stacked", [False, True], ids=["one matrix", "stack made under vmap"])
def test_a_planned_method_keeps_no_array(stacked):
    """What an eager call keeps for its key holds no array: a module and a right-hand side given
    to its methods are freed with the caller's last reference."""
    a, b = _system()
    module, b = _cholesky(stacked, a * 2, a * 3), b * 2
    module.solve(b), module.solve(b), module.logdet()
    refs = [weakref.ref(x) for x in (*jax.tree.leaves(module), b)]
    del module, b
    gc.collect()
    assert all(ref() is None for ref in refs), "the cache keeps an argument of a planned call alive"


# --- The drop-ins: a repeated eager call on a stack, or with JAX operations around jaxmg's, is one program ---


def _stack(k: int = 1):
    g = np.random.default_rng(k).standard_normal((4, N, N))
    return jnp.asarray(g @ g.transpose(0, 2, 1) / N + np.eye(N) * k), jnp.asarray(np.ones((4, N, 2)))


#: a stack's placements (docs/routes.md): (mesh, a's spec, b's spec, whether the mesh is set)
STACK_PLACES = {
    "device": (None, None, None, False),
    "batch-split Explicit": (_explicit, P("x"), P("x"), False),
    "batch-split Explicit, set": (_explicit, P("x"), P("x"), True),
    "split inside Explicit": (_explicit, P(None, "x", "y"), P(None, "x"), False),
    "batch-split Auto": (_auto, P("x"), P("x"), False),
    "split inside Auto, set": (_auto, P(None, "x", "y"), P(None, "x"), True),
    "replicated Auto": (_auto, P(), P(), False),
}

#: drop-ins on a stack (a, b), each with JAX operations around jaxmg's calls; ``eager``: each drop-in
#: as it runs without its compiled program (``jaxmg._dispatch.drop_in``'s ``__wrapped__``)
DROP_INS = {
    "numpy solve": lambda a, b, eager=False: _own(la.solve, eager)(a, b),
    "numpy eigh": lambda a, b, eager=False: _own(la.eigh, eager)(a),
    "numpy cholesky": lambda a, b, eager=False: _own(la.cholesky, eager)(a),
}


def _own(fn, eager: bool):
    return fn.__wrapped__ if eager else fn


def _placed_stack(place: str, k: int = 1):
    mesh, a_spec, b_spec, _ = STACK_PLACES[place]
    a, b = _stack(k)
    if mesh is None:
        return a, b
    mesh = mesh()
    return put(a, mesh, a_spec), put(b, mesh, b_spec)


def _signature(out) -> tuple:
    leaves = jax.tree.leaves(out)
    return tuple((x.aval, x.sharding, x.committed) for x in leaves), [np.asarray(x) for x in leaves]


@pytest.mark.parametrize("place", list(STACK_PLACES))
@pytest.mark.parametrize("call", list(DROP_INS))
def test_a_repeated_eager_drop_in_call_on_a_stack_is_one_program(counts, call, place):
    """The second call of a key plans and traces nothing (neither the drop-in nor jaxmg's calls in
    it) and gives what the eager call gives: the same outputs, shardings and commitment, on every
    stack placement, with and without the mesh in context."""
    with jax.set_mesh(STACK_PLACES[place][0]()) if STACK_PLACES[place][3] else contextlib.nullcontext():
        DROP_INS[call](*_placed_stack(place))
        planned = counts["planned"]
        assert planned >= 1
        outs = [DROP_INS[call](*_placed_stack(place, k)) for k in (2, 3)]
        assert counts["planned"] == planned, "a repeated call planned and traced again"
        for k, out in zip((2, 3), outs):
            (mine, values), (eager, expected) = (
                _signature(out),
                _signature(DROP_INS[call](*_placed_stack(place, k), True)),
            )
            assert mine == eager
            for x, y in zip(values, expected):
                np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("change", [c for c in CHANGES if c != "static option"])
def test_a_drop_in_call_of_a_changed_key_is_planned_again(counts, change):
    """numpy solve (a promotion, a stack's vmap and jaxmg's LU in one program) with one part of its
    key changed: planned and traced again, with the right answer, then one program again."""
    a, b = _system()
    la.solve(a, b), la.solve(a, b)
    planned = counts["planned"]
    a2, b2, _, context = CHANGES[change](a, b)
    with context if context is not None else contextlib.nullcontext():
        out = la.solve(a2, b2)
        changed = counts["planned"]
        again = la.solve(a2, b2)
    assert changed > planned, "a changed key reuses a stale program"
    assert counts["planned"] == changed, "the second call of the changed key planned again"
    assert _solved(a2, b2, out) and np.array_equal(np.asarray(out), np.asarray(again))
    assert out.dtype == again.dtype == a2.dtype and out.sharding == again.sharding


def test_a_drop_in_error_is_raised_every_time(counts):
    a, b = _system()
    la.solve(a, b), la.solve(a, b)
    for _ in range(2):
        with pytest.raises(ValueError, match="solve: b must be"):
            la.solve(a, b[:7])


#: one matrix's placements: (mesh, a's spec, b's spec, whether the mesh is set)
MATRIX_PLACES = {
    "device": (None, None, None, False),
    "Explicit": (_explicit, P("x", "y"), P("x"), False),
    "Auto": (_auto, P("x", "y"), P("x"), False),
    "Auto, set": (_auto, P("x", "y"), P("x"), True),
}

#: drop-ins that run JAX operations around jaxmg's calls on one matrix (a, b)
AROUND = {
    "numpy eigh": lambda a, b, eager=False: _own(la.eigh, eager)(a),
    "numpy cholesky upper": lambda a, b, eager=False: _own(la.cholesky, eager)(a, upper=True),
    "scipy cho_solve": lambda a, b, eager=False: _own(sla.cho_solve, eager)(
        _own(sla.cho_factor, eager)(a, lower=True), b.astype(jnp.float32)
    ),
}


def _counted(monkeypatch, name: str) -> dict:
    """Counts the calls of ``jaxmg._dispatch``'s function ``name`` (in the returned dict's "calls")."""
    found = {"calls": 0}
    original = getattr(_dispatch, name)

    def counted(*args, **kwargs):
        found["calls"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(_dispatch, name, counted)
    return found


@pytest.mark.parametrize("place", list(MATRIX_PLACES))
@pytest.mark.parametrize("call", list(AROUND))
def test_a_repeated_eager_drop_in_call_is_one_program(monkeypatch, call, place):
    """The JAX operations a drop-in runs around jaxmg's calls (symmetrising, a transpose, a
    promotion, a module's construction) are in its one program: a repeated call runs nothing
    eagerly and gives what the eager call gives (values, shapes, dtypes, types, shardings,
    commitment)."""
    _dispatch._compiled.cache_clear()
    eager = _counted(monkeypatch, "_eager_drop_in")
    mesh, a_spec, b_spec, set_mesh = MATRIX_PLACES[place]
    mesh = mesh() if mesh is not None else None
    a, b = _system()
    if mesh is not None:
        a, b = put(a, mesh, a_spec), put(b, mesh, b_spec)
    with jax.set_mesh(mesh) if set_mesh else contextlib.nullcontext():
        AROUND[call](a, b)
        first = eager["calls"]
        outs = [AROUND[call](a * k, b) for k in (2, 3)]
        assert eager["calls"] == first, "a repeated call ran eagerly"
        for k, out in zip((2, 3), outs):
            expected = AROUND[call](a * k, b, True)
            mine, theirs = jax.tree.leaves(out), jax.tree.leaves(expected)
            assert _context.concrete_signature(mine) == _context.concrete_signature(theirs)
            for x, y in zip(mine, theirs):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_drop_in_warning_is_given_on_every_call_at_the_callers_line():
    """A key whose call warns (rank promotion under ``"warn"``) keeps running eagerly: every call
    warns, at the line that called the drop-in."""
    a, b = jnp.stack([jnp.eye(N) * 2.0] * 3), jnp.ones((N, 1))
    with jax.numpy_rank_promotion("warn"):
        for _ in range(3):
            with pytest.warns(UserWarning, match="rank promotion") as found:
                x = la.solve(a, b)
            assert [w.filename for w in found] == [__file__]
            np.testing.assert_allclose(np.asarray(x), 0.5)


def test_a_large_drop_in_call_runs_once_and_eagerly(monkeypatch, counts):
    """Above ``PROGRAM_MAX_BYTES`` of arguments a drop-in call is not compiled a second time as
    one program: its first call runs once (no second run, no read-back of its outputs) and the
    key runs eagerly from then on, with the right answer."""
    compiled = _counted(monkeypatch, "_program")
    a, b = _system()
    monkeypatch.setattr(_dispatch, "PROGRAM_MAX_BYTES", a.nbytes + b.nbytes - 1)
    outs = [la.solve(a * k, b) for k in (1, 2)]
    assert compiled["calls"] == 0, "a large call was run again as one program"
    for k, out in zip((1, 2), outs):
        assert _solved(a * k, b, out)
    monkeypatch.setattr(_dispatch, "PROGRAM_MAX_BYTES", a.nbytes + b.nbytes)
    la.solve(a[:-1, :-1], b[:-1])
    assert compiled["calls"] == 1, "a small call's key was not compiled as one program"


def test_uncommitted_calls_release_nothing_on_each_call(monkeypatch):
    """An eager call on uncommitted arrays of one device (a drop-in, a module, a method, potrs)
    gives uncommitted outputs, as JAX's own calls do, from a compiled call that returns them so:
    a repeated call never runs the release (``jaxmg._context.uncommitted``)."""
    rng = np.random.default_rng(0)
    g = rng.standard_normal((N, N))
    a, b = jnp.asarray(g @ g.T + N * np.eye(N)), jnp.asarray(rng.standard_normal(N))
    module = jaxmg.Cholesky(a)
    calls = {
        "numpy.solve": lambda: la.solve(a, b),
        "numpy.eigh": lambda: la.eigh(a),
        "Cholesky": lambda: jaxmg.Cholesky(a).status,
        "Cholesky.solve": lambda: module.solve(b),
        "potrs": lambda: jaxmg.potrs(a, b),
    }
    released = []
    for name, call in calls.items():
        call(), call()  # planned (and, for a drop-in, its program compiled and compared)
        monkeypatch.setattr(_context, "uncommitted", lambda tree: released.append(tree) or tree)
        out = jax.tree.leaves(call())
        monkeypatch.undo()
        assert not released, name
        assert out and not any(x.committed for x in out), name
