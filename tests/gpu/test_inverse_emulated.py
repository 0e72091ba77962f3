"""The distributed inverse of the native Cholesky and LU modules, and the log-determinant
gradients that use it, on Explicit mesh axes (``jax.make_mesh``'s default) and on Auto axes,
eagerly and in jit, through the native backend with its FFI handlers emulated on CPU
(tests/gpu/_emulation.py).

The Cholesky inverse runs its triangular recursion in the cyclic order of
``jaxmg.kernels.cyclic`` (on whole matrices, ``jaxmg._sharded.whole``), where every block of the
recursion is local to each process; the LU inverse runs the recursion in the natural order.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from _emulation import hermitian_with_junk, require_cpu_devices
from jaxmg import _layout
from jaxmg.kernels import cyclic

#: Long (inverses and log-determinant gradients on the emulated native grid): CI runs these with tests/run.sh --slow.
pytestmark = pytest.mark.slow

require_cpu_devices(8)

N, TILE = 64, 8

#: (mesh shape, axis names, a's spec, axis type)
MESHES = [
    pytest.param((4, 2), ("x", "y"), P("x", "y"), AxisType.Explicit, id="4x2-explicit"),
    pytest.param((8,), ("x",), P("x", None), AxisType.Explicit, id="8-explicit"),
    pytest.param((4, 2), ("x", "y"), P("x", "y"), AxisType.Auto, id="4x2-auto"),
]


def _general(n: int) -> np.ndarray:
    """A nonsymmetric, well-conditioned (n, n) matrix (LU with pivoting)."""
    rng = np.random.default_rng(3)
    return rng.standard_normal((n, n)) + n**0.5 * np.eye(n)


def _fold(g: np.ndarray) -> np.ndarray:
    """The cotangent of a, for a function of the Hermitian matrix read from a's lower triangle
    whose cotangent is ``g``: zero above the diagonal, mirrored entries summed below it."""
    return np.tril(g, -1) + np.tril(g.T, -1) + np.diag(np.diag(g))


def _inverse_ratio(a: np.ndarray, x) -> float:
    """LAPACK's test ratio of an inverse, ||a x - I|| / (N eps ||a|| ||x||)."""
    x = np.asarray(x)
    n = a.shape[0]
    return np.linalg.norm(a @ x - np.eye(n), 1) / (
        n * np.finfo(a.dtype).eps * np.linalg.norm(a, 1) * np.linalg.norm(x, 1)
    )


@pytest.mark.parametrize("shape, names, spec, kind", MESHES)
def test_inverse_and_logdet_gradient(shape, names, spec, kind, native_backend):
    import jaxmg

    mesh = jax.make_mesh(shape, names, axis_types=(kind,) * len(shape), devices=jax.devices()[:8])
    grid = _layout.Grid.from_spec(mesh, spec)
    assert cyclic.on_grid(grid, N) is not None, "the Cholesky inverse does not take the cyclic order"
    a_in, a = hermitian_with_junk(N, np.float64)
    g = _general(N)
    sharding = NamedSharding(mesh, spec)
    a_in, g_in = jax.device_put(a_in, sharding), jax.device_put(g, sharding)
    modules = dict(T_A=TILE, mesh=mesh, backend="native")

    def inverses(m, h):
        return jaxmg.Cholesky(m, **modules).inverse(), jaxmg.LU(h, **modules).inverse()

    def gradients(m, h):
        return (
            jax.grad(lambda m: jaxmg.Cholesky(m, **modules).logdet())(m),
            jax.grad(lambda h: jaxmg.LU(h, **modules).slogdet()[1])(h),
        )

    for how, run in (("eager", inverses), ("jit", jax.jit(inverses))):
        chol_inv, lu_inv = run(a_in, g_in)
        assert _inverse_ratio(a, chol_inv) <= 30, how
        assert _inverse_ratio(g, lu_inv) <= 30, how
        assert chol_inv.sharding.spec == spec and lu_inv.sharding.spec == spec, how
    # (JAX differentiates eagerly on Explicit axes only with the mesh set)
    with jax.set_mesh(mesh):
        for how, grad in (("eager", gradients), ("jit", jax.jit(gradients))):
            chol_grad, lu_grad = grad(a_in, g_in)
            # d log det a / d a = a^-T (folded onto the lower triangle that Cholesky reads)
            np.testing.assert_allclose(
                np.asarray(chol_grad), _fold(np.linalg.inv(a).T), rtol=1e-9, atol=1e-11, err_msg=how
            )
            np.testing.assert_allclose(np.asarray(lu_grad), np.linalg.inv(g).T, rtol=1e-9, atol=1e-11, err_msg=how)
    assert {call[0] for call in native_backend.calls} >= {"potrf", "getrf"}, "the native kernels were not used"
