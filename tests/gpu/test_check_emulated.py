"""The distributed route's result check (jaxmg.modules.check), on CPU through the emulated
native backend: a wrong result that the engine returns with status 0 is flagged
(``CHECK_FAILED``, NaN outputs), correct results on hard matrices are not, ``check=False`` and
``JAXMG_RESULT_CHECK=0`` turn it off, and it works eagerly, under ``jax.jit`` and ``jax.vmap``
(one status per matrix) without changing derivatives."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxmg
from jaxmg.kernels import native, status as _status
from jaxmg.modules import check as _check

from _emulation import mesh as _mesh, require_cpu_devices

require_cpu_devices(4)

N = 32
TILE = 8
FAILED = _status.CHECK_FAILED


def _orthogonal(n, rng):
    return np.linalg.qr(rng.standard_normal((n, n)))[0]


def _with_singular_values(sv, rng, m=None):
    """m x n (m default n) with singular values ``sv`` (random singular vectors)."""
    n = len(sv)
    m = n if m is None else m
    u = np.linalg.qr(rng.standard_normal((m, n)))[0]
    return (u * sv) @ _orthogonal(n, rng).T


def matrices(kind, n=N, m=None, seed=0):
    """Hard but valid inputs: "spd" (condition 1e10, clustered at both ends), "graded" (SPD with
    rows and columns graded over 10 orders), "general" (condition 1e10, geometric), "well" (SPD
    with eigenvalues in [1, 5]: a relative error in a result is a residual of its size)."""
    rng = np.random.default_rng(seed)
    if kind == "spd":
        w = np.concatenate([np.full(n // 2, 1e-10), np.ones(n - n // 2)]) * (1 + 1e-3 * rng.random(n))
        q = _orthogonal(n, rng)
        return (q * w) @ q.T
    if kind == "well":  # well conditioned: SPD, and used as a general matrix too
        g = rng.standard_normal((n, n))
        return g @ g.T / n + np.eye(n)
    if kind == "graded":
        d = np.logspace(0, -5, n)
        g = rng.standard_normal((n, n))
        return d[:, None] * (g @ g.T / n + np.eye(n)) * d[None, :]
    return _with_singular_values(np.logspace(0, -10, n), rng, m)


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
        "sygvd": lambda a, b, a2: jaxmg.sygvd(a2 @ a2.T, a + jnp.eye(N), return_status=True, **kw),
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
    "potrs": ("Cholesky", "solve"), "cholesky": ("Cholesky", "lower"), "Cholesky": ("Cholesky", "solve"),
    "lu_solve": ("LU", "solve"), "LU": ("LU", "solve"),
    "least_squares": ("QR", "solve"), "qr": ("QR", "r"), "QR": ("QR", "normal_solve"),
    "syevd": ("Decompositions", "syevd"), "sygvd": ("Decompositions", "sygvd"), "Eigh": ("Decompositions", "syevd"),
    "gesvd": ("Decompositions", "gesvd"), "SVD": ("Decompositions", "gesvd"),
    "polar": ("Decompositions", "polar"), "Polar": ("Decompositions", "polar"),
}


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
            return out[:k] + (wrong(out[k]),) + out[k + 1:]
        return wrong(out)

    monkeypatch.setattr(cls, method, perturbed)


def _status_and_outputs(out):
    *values, status = jax.tree.leaves(out)
    return int(status), [np.asarray(v) for v in values if jnp.issubdtype(v.dtype, jnp.inexact)]


@pytest.fixture(scope="module")
def grid_mesh():
    return _mesh((2, 2))


def _inputs(mesh, kind_sym="spd", kind_general="general"):
    a = _placed(mesh, matrices(kind_sym), P("x", "y"))
    a2 = _placed(mesh, matrices(kind_general, seed=1), P("x", "y"))
    b = _placed(mesh, np.random.default_rng(2).standard_normal(N), P("x"))
    return a, b, a2


@pytest.mark.parametrize("op", list(INJECT))
def test_wrong_result_is_flagged(op, grid_mesh, native_backend, monkeypatch):
    """A result off by one part in a million with status 0 from the engine: status -2, NaN."""
    _inject(monkeypatch, op)
    status, values = _status_and_outputs(_calls(grid_mesh)[op](*_inputs(grid_mesh, "well", "well")))
    assert status == FAILED
    assert all(np.isnan(v).all() for v in values)


@pytest.mark.parametrize("op", list(INJECT))
@pytest.mark.parametrize("kinds", [("spd", "general"), ("graded", "general")])
def test_hard_valid_results_pass(op, kinds, grid_mesh, native_backend):
    """Correct results on condition-1e10 and graded matrices are not flagged."""
    status, values = _status_and_outputs(_calls(grid_mesh)[op](*_inputs(grid_mesh, *kinds)))
    assert status == 0
    assert all(np.isfinite(v).all() for v in values)
