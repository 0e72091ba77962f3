"""R alone (``qr(mode="r")``) on the distributed route, cuSOLVERMp emulated on CPU: one geqrf and
no orgqr (no Q formed) in the undifferentiated call, eager and compiled, through the drop-ins and
the functional QR; Q formed once where the derivative needs it; R and its derivatives those of
JAX's (LAPACK's) factor. A wide matrix's R on this route comes with the M x M Q of its first M
columns (cuSOLVERMp's geqrf is taken of M >= N only). Runs with 4 of the simulated devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from _emulation import mesh as _mesh
from jaxmg import _dispatch

#: R alone through each public call
CALLS = {
    "numpy": lambda a: la.qr(a, mode="r"),
    "scipy": lambda a: sla.qr(a, mode="r")[0],
    "functional": lambda a: jaxmg.qr(a, mode="r"),
}


def _split(x):
    return jax.device_put(x, NamedSharding(_mesh((2, 2)), P("x", "y")))


def _handlers(emulator, fn, *args) -> list[str]:
    """The handlers that ``fn(*args)`` traces (the calls compiled afresh)."""
    _dispatch._compiled.cache_clear()
    jax.clear_caches()
    emulator.calls.clear()
    jax.block_until_ready(fn(*args))
    return [call[0] for call in emulator.calls]


@pytest.mark.parametrize("name", CALLS)
def test_r_alone_runs_geqrf_without_orgqr(native_backend, name):
    """A tall (24 x 8) matrix split over a 2 x 2 mesh: eagerly and in jax.jit, geqrf and no orgqr;
    R in a's layout, within LAPACK's ratio of JAX's R (||R - R_jax|| / (N eps ||A||) <= 30, the
    same Householder factorisation); its gradient forms Q once."""
    x = np.random.default_rng(3).standard_normal((24, 8))
    a, fn = _split(x), CALLS[name]
    for run in (fn, jax.jit(fn)):
        handlers = _handlers(native_backend, run, a)
        assert "geqrf" in handlers and "orgqr" not in handlers, handlers
        r = run(a)
        assert r.sharding.spec == P("x", "y")
        want = np.zeros(r.shape)  # scipy's R is the full one: zero rows below JAX's
        want[:8] = np.asarray(jnp.linalg.qr(x, mode="r"))
        assert np.linalg.norm(np.asarray(r) - want) / (24 * np.finfo(np.float64).eps * np.linalg.norm(x)) <= 30
    if name == "numpy":
        handlers = _handlers(native_backend, jax.grad(lambda a: jnp.sum(fn(a) ** 3)), a)
        assert handlers.count("orgqr") == 1, handlers


@pytest.mark.slow
def test_r_alone_derivatives_on_the_distributed_route(native_backend):
    """check_grads of order 2, forward and reverse, of R alone of a complex 16 x 8 matrix split
    over the grid."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 8)) + 1j * rng.standard_normal((16, 8))
    check_grads(CALLS["numpy"], (_split(x),), order=2, modes=("fwd", "rev"))


def test_the_qr_modules_r_forms_no_q(native_backend):
    """jaxmg.QR(a).r of a tall matrix on the grid reads R from the saved factor: no handler runs
    (no orgqr), and R is JAX's within LAPACK's ratio."""
    x = np.random.default_rng(5).standard_normal((24, 8))
    r = jaxmg.QR(_split(x)).r
    assert _handlers(native_backend, lambda: jaxmg.QR(_split(x)).r) == ["geqrf"]
    assert np.linalg.norm(np.asarray(r) - np.asarray(jnp.linalg.qr(x, mode="r"))) <= 30 * 24 * 2.2e-16 * np.linalg.norm(
        x
    )
