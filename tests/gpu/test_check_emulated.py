"""The distributed route's result check (jaxmg.modules.check), on CPU through the emulated
native backend: a wrong result that the engine returns with status 0 is flagged
(``CHECK_FAILED``, NaN outputs), correct results on hard matrices are not, it is on by default
(donated matrices too: its products are made before the factorisation), ``check=False`` and
``JAXMG_RESULT_CHECK=0`` turn it off, and it works eagerly, under ``jax.jit`` and ``jax.vmap``
(one status per matrix) without changing derivatives."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
from _emulation import mesh as _mesh, require_cpu_devices
from jaxmg import _dispatch
from jaxmg.kernels import native, status as _status
from jaxmg.modules import check as _check

require_cpu_devices(4)

N = 32
TILE = 8
FAILED = _status.CHECK_FAILED


def _gaussian(rng, shape, dtype):
    g = rng.standard_normal(shape)
    return g + 1j * rng.standard_normal(shape) if np.issubdtype(dtype, np.complexfloating) else g


def _orthonormal(m, n, rng, dtype):
    return np.linalg.qr(_gaussian(rng, (m, n), dtype))[0]


def matrices(kind, n=N, seed=0, dtype=np.float64, cond=1e10):
    """Hard but valid inputs of ``dtype``: "spd" (Hermitian positive definite of condition
    ``cond``, its eigenvalues clustered at both ends), "graded" (Hermitian positive definite
    with rows and columns graded over 10 orders), "general" (condition ``cond``, geometric
    singular values), "well" (Hermitian positive definite with eigenvalues in [1, 5]: a
    relative error in a result is a residual of its size)."""
    rng = np.random.default_rng(seed)
    if kind == "well":
        g = _gaussian(rng, (n, n), dtype)
        return (g @ g.conj().T / n + np.eye(n)).astype(dtype)
    if kind == "spd":
        w = np.concatenate([np.full(n // 2, 1 / cond), np.ones(n - n // 2)]) * (1 + 1e-3 * rng.random(n))
        q = _orthonormal(n, n, rng, dtype)
        return ((q * w) @ q.conj().T).astype(dtype)
    if kind == "graded":
        d = np.logspace(0, -5, n)
        g = _gaussian(rng, (n, n), dtype)
        return (d[:, None] * (g @ g.conj().T / n + np.eye(n)) * d[None, :]).astype(dtype)
    u, v = _orthonormal(n, n, rng, dtype), _orthonormal(n, n, rng, dtype)
    return ((u * np.logspace(0, -np.log10(cond), n)) @ v.conj().T).astype(dtype)


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    """Every call here runs with the default (checked) unless it says otherwise."""
    monkeypatch.delenv(_check.ENVIRONMENT, raising=False)


def _placed(mesh, x, spec):
    return jax.device_put(jnp.asarray(x), NamedSharding(mesh, spec))


def _calls(mesh, check=None):
    """op name -> (function of (a, b, a2), the index of the status in its outputs)."""
    kw = dict(T_A=TILE, mesh=mesh, backend="native", check=check)
    return {
        "potrs": lambda a, b, a2: jaxmg.potrs(a, b, return_status=True, **kw),
        "cholesky": lambda a, b, a2: jaxmg.cholesky(a, return_status=True, **kw),
        "lu_solve": lambda a, b, a2: jaxmg.lu_solve(a2, b, return_status=True, **kw),
        "least_squares": lambda a, b, a2: jaxmg.least_squares(a2, b, return_status=True, **kw),
        "qr": lambda a, b, a2: jaxmg.qr(a2, return_status=True, **kw),
        "syevd": lambda a, b, a2: jaxmg.syevd(a, return_status=True, **kw),
        "sygvd": lambda a, b, a2: jaxmg.sygvd(a, a + jnp.eye(N, dtype=a.dtype), return_status=True, **kw),
        "gesvd": lambda a, b, a2: jaxmg.gesvd(a2, return_status=True, **kw),
        "polar": lambda a, b, a2: jaxmg.polar(a2, return_status=True, **kw),
        "Cholesky": lambda a, b, a2: _module(jaxmg.Cholesky(a, **kw), "factor"),
        "LU": lambda a, b, a2: _module(jaxmg.LU(a2, **kw), "lu"),
        "QR": lambda a, b, a2: _module(jaxmg.QR(a2, **kw), "r"),
        "Eigh": lambda a, b, a2: _module(jaxmg.Eigh(a, **kw), "v"),
        "SVD": lambda a, b, a2: _module(jaxmg.SVD(a2, **kw), "u"),
        "Polar": lambda a, b, a2: _module(jaxmg.Polar(a2, **kw), "u_p"),
    }


def _module(m, attribute):
    out = m.solve(jnp.ones(m.shape[0], m.dtype)) if hasattr(m, "solve") else getattr(m, attribute)
    return out, m.status


#: Where a wrong result is injected for each operation: (native family class, method).
INJECT = {
    "potrs": ("Cholesky", "solve"),
    "cholesky": ("Cholesky", "lower"),
    "Cholesky": ("Cholesky", "solve"),
    "lu_solve": ("LU", "solve"),
    "LU": ("LU", "solve"),
    "least_squares": ("QR", "solve"),
    "qr": ("QR", "r"),
    "QR": ("QR", "normal_solve"),
    "syevd": ("Decompositions", "syevd"),
    "sygvd": ("Decompositions", "sygvd"),
    "Eigh": ("Decompositions", "syevd"),
    "gesvd": ("Decompositions", "gesvd"),
    "SVD": ("Decompositions", "gesvd"),
    "polar": ("Decompositions", "polar"),
    "Polar": ("Decompositions", "polar"),
}


@pytest.fixture(autouse=True)
def _fresh_calls():
    """Eager calls compiled with an injected wrong kernel are not reused by the next test."""
    _dispatch._compiled.cache_clear()
    yield
    _dispatch._compiled.cache_clear()


def _inject(monkeypatch, op, size=1e-6):
    """Make the native family's method return its result with a relative error ``size`` in its
    first floating output, its status unchanged (a silently wrong engine)."""
    cls_name, method = INJECT[op]
    cls = getattr(native, cls_name)
    original = getattr(cls, method)

    def wrong(x):
        return x * (1 + size) if jnp.issubdtype(x.dtype, jnp.inexact) else x

    @functools.wraps(original)
    def perturbed(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if isinstance(out, tuple):
            k = next(i for i, x in enumerate(out) if getattr(x, "ndim", 0) == 2)
            return out[:k] + (wrong(out[k]),) + out[k + 1 :]
        return wrong(out)

    monkeypatch.setattr(cls, method, perturbed)


def _status_and_outputs(out):
    *values, status = jax.tree.leaves(out)
    return int(status), [np.asarray(v) for v in values if jnp.issubdtype(v.dtype, jnp.inexact)]


@pytest.fixture(scope="module")
def grid_mesh():
    return _mesh((2, 2))


def _inputs(mesh, kind_sym="spd", kind_general="general", dtype=np.float64, cond=1e10):
    a = _placed(mesh, matrices(kind_sym, dtype=dtype, cond=cond), P("x", "y"))
    a2 = _placed(mesh, matrices(kind_general, seed=1, dtype=dtype, cond=cond), P("x", "y"))
    b = _placed(mesh, _gaussian(np.random.default_rng(2), (N,), dtype).astype(dtype), P("x"))
    return a, b, a2


@pytest.mark.parametrize("op", list(INJECT))
def test_wrong_result_is_flagged(op, grid_mesh, native_backend, monkeypatch):
    """A result off by one part in a million with status 0 from the engine: status -2, NaN."""
    _inject(monkeypatch, op)
    status, values = _status_and_outputs(_calls(grid_mesh)[op](*_inputs(grid_mesh, "well", "well")))
    assert status == FAILED
    assert all(np.isnan(v).all() for v in values)


@pytest.mark.parametrize(
    "op,kinds",
    [(op, ("spd", "general")) for op in INJECT]
    + [(op, ("graded", "general")) for op in ("potrs", "cholesky", "Cholesky", "syevd", "sygvd")],
)
def test_hard_valid_results_pass(op, kinds, grid_mesh, native_backend):
    """Correct results on condition-1e12 and graded matrices are not flagged."""
    status, values = _status_and_outputs(_calls(grid_mesh)[op](*_inputs(grid_mesh, *kinds, cond=1e12)))
    assert status == 0
    assert all(np.isfinite(v).all() for v in values)


@pytest.mark.parametrize(
    "op,dtype,cond",
    [(op, np.complex128, 1e12) for op in ("potrs", "lu_solve", "least_squares", "Eigh", "gesvd", "polar")]
    + [(op, np.float32, 1e5) for op in ("potrs", "LU", "syevd")]
    + [(op, np.complex64, 1e5) for op in ("QR", "SVD")]
    + [("sygvd", np.complex64, 1e3)],
)
def test_hard_valid_results_pass_every_dtype(op, dtype, cond, native_backend):
    """Correct complex and single-precision results on ill-conditioned matrices are not flagged
    (on Explicit mesh axes)."""
    mesh = _mesh((2, 2), explicit=True)
    status, values = _status_and_outputs(_calls(mesh)[op](*_inputs(mesh, "spd", "general", dtype, cond)))
    assert status == 0
    assert all(np.isfinite(v).all() for v in values)


SCALES = pytest.mark.parametrize("scale", [1e-30, 1e30], ids=["norm-1e-30", "norm-1e30"])


def _scaled_single(op, scale):
    """(status, floating outputs) of ``op`` on float32 inputs scaled by ``scale``, with 64-bit
    mode off (as most users run)."""
    mesh = _mesh((2, 2), explicit=True)
    with jax.enable_x64(False):
        a, b, a2 = _inputs(mesh, "well", "well", np.float32)
        return _status_and_outputs(_calls(mesh)[op](a * scale, b, a2 * scale))


@SCALES
@pytest.mark.parametrize("op", ["potrs", "LU", "least_squares", "QR"])
def test_valid_results_of_any_norm_pass_in_single_precision(op, scale, native_backend):
    """Correct float32 results on matrices of norm 1e-30 and 1e30 are not flagged: the check's
    norms are taken without squares that underflow or overflow (float32 squares leave its range
    beyond 1e19), and the normal equations' products (least squares, the QR module) are divided
    by ||A||."""
    status, values = _scaled_single(op, scale)
    assert status == 0
    assert all(np.isfinite(v).all() for v in values)


@SCALES
def test_wrong_results_of_any_norm_are_flagged_in_single_precision(scale, native_backend, monkeypatch):
    """A returned Cholesky factor off by one part in a hundred (far above float32's bound,
    30 N eps) is flagged at norms 1e-30 and 1e30 too (squared norms of 0 or inf passed it)."""
    _inject(monkeypatch, "cholesky", size=1e-2)
    status, values = _scaled_single("cholesky", scale)
    assert status == FAILED
    assert all(np.isnan(v).all() for v in values)


@pytest.mark.parametrize("zero", ["column", "matrix"])
def test_qr_module_of_an_exactly_rank_deficient_matrix_is_not_flagged(zero, grid_mesh, native_backend):
    """A zero column (or a zero matrix) has an exact QR factor with zeros on R's diagonal: the
    module's status is 0 and its factors finite, as on the local route, and its solve is flagged by
    the rank test (the check's normal solve with R^H R, singular there, tests nothing)."""
    a = matrices("general", seed=1, cond=1e3)
    a = np.zeros_like(a) if zero == "matrix" else np.where(np.arange(N) == 3, 0.0, a)
    m = jaxmg.QR(_placed(grid_mesh, a, P("x", "y")), T_A=TILE, backend="native")
    assert int(m.status) == 0 and np.isfinite(np.asarray(m.r)).all() and np.isfinite(np.asarray(m.q)).all()
    assert int(m.rank_status()) == (1 if zero == "matrix" else 4)


@pytest.mark.parametrize("op", ["potrs", "Eigh"])
@pytest.mark.parametrize("how", ["keyword", "environment"])
def test_check_can_be_turned_off(op, how, grid_mesh, native_backend, monkeypatch):
    """check=False, or JAXMG_RESULT_CHECK=0 where a call does not say: the wrong result is
    returned as the engine gave it (status 0, finite)."""
    _inject(monkeypatch, op)
    if how == "environment":
        monkeypatch.setenv(_check.ENVIRONMENT, "0")
    call = _calls(grid_mesh, check=False if how == "keyword" else None)[op]
    status, values = _status_and_outputs(call(*_inputs(grid_mesh, "well", "well")))
    assert status == 0
    assert all(np.isfinite(v).all() for v in values)


def test_check_is_on_by_default(grid_mesh, native_backend, monkeypatch):
    """Without check= and without JAXMG_RESULT_CHECK the distributed route's result is checked
    ("1" says the same)."""
    _inject(monkeypatch, "potrs")
    assert _check.enabled(None) is True and _check.enabled(False) is False
    for value in (None, "1"):
        if value is not None:
            monkeypatch.setenv(_check.ENVIRONMENT, value)
        status, values = _status_and_outputs(_calls(grid_mesh)["potrs"](*_inputs(grid_mesh, "well", "well")))
        assert status == FAILED and all(np.isnan(v).all() for v in values)


def test_environment_value_is_checked(monkeypatch):
    monkeypatch.setenv(_check.ENVIRONMENT, "maybe")
    with pytest.raises(ValueError, match="JAXMG_RESULT_CHECK='maybe': set it to 0"):
        _check.enabled(None)


@pytest.mark.parametrize("op", ["potrs", "lu_solve", "cholesky", "Cholesky", "syevd"])
def test_donated_matrix_is_checked(op, grid_mesh, native_backend, monkeypatch):
    """A donated matrix is checked too: the check's products are made before the factorisation
    takes the matrix's buffer (a wrong result flagged, a correct one not)."""
    kw = dict(T_A=TILE, mesh=grid_mesh, backend="native", donate=True)
    calls = {
        "potrs": lambda a, b: jaxmg.potrs(a, b, return_status=True, **kw),
        "lu_solve": lambda a, b: jaxmg.lu_solve(a, b, return_status=True, **kw),
        "cholesky": lambda a, b: jaxmg.cholesky(a, return_status=True, **kw),
        "Cholesky": lambda a, b: _module(jaxmg.Cholesky(a, **kw), "factor"),
        "syevd": lambda a, b: jaxmg.syevd(a, return_status=True, **kw),
    }
    a, b, _ = _inputs(grid_mesh, "well", "well")
    assert _status_and_outputs(calls[op](jnp.copy(a), b))[0] == 0
    _inject(monkeypatch, op)
    _dispatch._compiled.cache_clear()
    status, values = _status_and_outputs(calls[op](jnp.copy(a), b))
    assert status == FAILED and all(np.isnan(v).all() for v in values)


def test_check_argument_is_checked(grid_mesh):
    with pytest.raises(TypeError, match="check must be True, False or None|parameter 'check'"):
        jaxmg.potrs(jnp.eye(4), jnp.ones(4), check="yes")


def test_check_in_jit_and_under_vmap(grid_mesh, native_backend, monkeypatch):
    """Under jax.jit the flag is the same; under jax.vmap each matrix gets its own status: the
    wrong result (injected for right-hand sides whose first entry is positive) is flagged in
    its matrix only."""
    original = native.LU.solve

    def perturbed(self, state, b, spec, *args):
        x = original(self, state, b, spec, *args)
        return x * (1 + 1e-6 * (jnp.real(b[0]) > 0))

    monkeypatch.setattr(native.LU, "solve", perturbed)
    a = np.stack([matrices("well", seed=k) for k in range(3)])
    b = np.stack([np.full(N, -1.0), np.full(N, 1.0), np.full(N, -2.0)])
    solve = functools.partial(jaxmg.lu_solve, T_A=TILE, mesh=grid_mesh, backend="native", return_status=True)
    x, status = jax.jit(jax.vmap(solve))(jnp.asarray(a), jnp.asarray(b))
    assert np.asarray(status).tolist() == [0, FAILED, 0]
    x = np.asarray(x)
    assert np.isnan(x[1]).all() and np.isfinite(x[[0, 2]]).all()
    np.testing.assert_allclose(x[0], np.linalg.solve(a[0], b[0]), rtol=1e-10)
    x, status = jax.jit(solve)(_placed(grid_mesh, a[1], P("x", "y")), jnp.asarray(b[1]))
    assert int(status) == FAILED and np.isnan(np.asarray(x)).all()


#: The checked solves, each a function of (a, b, keyword arguments) to a differentiable output.
SOLVES = {
    "lu_solve": lambda a, b, kw: jaxmg.lu_solve(a, b, **kw),
    "potrs": lambda a, b, kw: jaxmg.potrs(a @ a.T / N + jnp.eye(N), b, return_logdet=True, **kw),
    "least_squares": lambda a, b, kw: jaxmg.least_squares(a[:, : N // 2], b, **kw),
}


@pytest.mark.parametrize("op", list(SOLVES))
def test_derivatives_are_unchanged(op, grid_mesh, native_backend):
    """The check is not differentiated: the gradient with it is the gradient without it, and
    it is the exact derivative to second order, forward and reverse (check_grads)."""
    a = _placed(grid_mesh, matrices("well"), P("x", "y"))
    b = jnp.asarray(np.random.default_rng(3).standard_normal(N))

    def loss(check):
        kw = dict(T_A=TILE, mesh=grid_mesh, backend="native", check=check)
        return jax.jit(lambda a, b: sum(jnp.sum(jnp.sin(y)) for y in jax.tree.leaves(SOLVES[op](a, b, kw))))

    with_check = jax.grad(loss(True), argnums=(0, 1))(a, b)
    without = jax.grad(loss(False), argnums=(0, 1))(a, b)
    for g, h in zip(with_check, without):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(h))
    check_grads(loss(True), (a, b), order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_solution_test_is_a_projection_of_the_whole_residual(dtype):
    """The solve test measures the residual's projection on orthonormal probes: never above the
    whole residual ||A x - b|| (so it flags nothing the whole-residual test passes), and about
    sqrt(k / N) of it for a residual that does not favour the probes (k = SOLUTION_PROBES)."""
    import types

    plan = types.SimpleNamespace(mesh=None)
    rng = np.random.default_rng(4)
    n = 256
    a = jnp.asarray(_gaussian(rng, (n, n), dtype))
    op = _check._operator(plan, a, a.shape, hermitian=False, norm_axis=0)
    probes = _check.solution_probes(op)
    q = np.asarray(probes.vectors[0])
    np.testing.assert_allclose(q.conj().T @ q, np.eye(_check.SOLUTION_PROBES), atol=1e-12)
    ratios = []
    for seed in range(20):
        draw = np.random.default_rng(10 + seed)
        x, b = (jnp.asarray(_gaussian(draw, (n,), dtype)) for _ in range(2))
        ((residual, _),) = _check.solution(plan, probes, x, b)
        whole = np.linalg.norm(np.asarray(a) @ np.asarray(x) - np.asarray(b))
        assert 0 < float(residual) <= whole * (1 + 1e-12)
        ratios.append(float(residual) / whole)
    assert 0.3 * np.sqrt(_check.SOLUTION_PROBES / n) < np.median(ratios) < 3 * np.sqrt(_check.SOLUTION_PROBES / n)


#: The arguments (a, b, a2) each operation reads, whose gradients must be NaN.
READS = {
    "potrs": (0, 1),
    "potrs-logdet": (0,),
    "lu_solve": (1, 2),
    "least_squares": (1, 2),
    "syevd": (0,),
    "gesvd": (2,),
    "Cholesky": (0,),
    "LU": (2,),
}


@pytest.mark.parametrize("op", list(READS))
def test_derivatives_of_a_result_the_check_flags_are_nan(op, grid_mesh, native_backend, monkeypatch):
    """A result that only the check flags (status -2, its factorisation's status 0) has NaN
    tangents and gradients as well as NaN values, forward and reverse (potrs's log det too)."""
    _inject(monkeypatch, op.split("-")[0])
    if op == "potrs-logdet":
        kw = dict(T_A=TILE, mesh=grid_mesh, backend="native", return_logdet=True)
        call = lambda a, b, a2: (jaxmg.potrs(a, b, **kw)[1], 0)  # noqa: E731
    else:
        call = _calls(grid_mesh)[op]
    a, b, a2 = _inputs(grid_mesh, "well", "well")

    def loss(a, b, a2):
        *values, _ = jax.tree.leaves(call(a, b, a2))
        return sum(jnp.sum(jnp.real(v)) for v in values if jnp.issubdtype(v.dtype, jnp.inexact))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(a, b, a2)
    _, tangent = jax.jit(lambda *xs: jax.jvp(loss, xs, xs))(a, b, a2)
    used = READS[op]
    assert all(np.isnan(np.asarray(grads[i])).all() for i in used), op
    assert np.isnan(float(tangent)), op
