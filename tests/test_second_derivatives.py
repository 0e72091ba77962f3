"""Second derivatives along directions that are not Hermitian (found by a user-style sweep).

potrs and log det read only ``a``'s lower triangle: they compute with the Hermitian matrix
``lower_read(a) = tril(a, -1) + tril(a, -1)^H + Re diag(a)``, and their derivatives are exactly
those of what they compute, the functions jnp.linalg.solve and slogdet of ``lower_read(a)``, to
any order: the derivative of the gradient along a non-Hermitian direction must match JAX's.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import jaxmg
from helpers import lower_read, make_mesh, put, random_matrix, spd_matrix

N = 8
FUNCTIONS = {
    "potrs": (
        lambda a, b: jnp.sum(jnp.abs(jaxmg.potrs(a, b)) ** 2),
        lambda a, b: jnp.sum(jnp.abs(jnp.linalg.solve(lower_read(a), b)) ** 2),
    ),
    "Cholesky.solve": (
        lambda a, b: jnp.sum(jnp.abs(jaxmg.Cholesky(a).solve(b)) ** 2),
        lambda a, b: jnp.sum(jnp.abs(jnp.linalg.solve(lower_read(a), b)) ** 2),
    ),
    "logdet": (
        lambda a, b: jaxmg.Cholesky(a).logdet() * jnp.sum(jnp.abs(b)),
        lambda a, b: jnp.linalg.slogdet(lower_read(a))[1] * jnp.sum(jnp.abs(b)),
    ),
}


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["d", "z"])
@pytest.mark.parametrize("layout", ["single", "mesh"])
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "Cholesky.solve" else n for n in FUNCTIONS]
)  # Cholesky.solve: potrs's rule; --slow runs it
def test_derivative_of_the_gradient_along_any_direction(name, layout, dtype):
    ours, theirs = FUNCTIONS[name]
    rng = np.random.default_rng(7)
    a0, b0 = spd_matrix(rng, N, dtype), random_matrix(rng, (N,), dtype)
    da, db = random_matrix(rng, (N, N), dtype), random_matrix(rng, (N,), dtype)  # da is not Hermitian
    if layout == "mesh":
        mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
        args = (put(a0, mesh, P("x", "y")), put(b0, mesh, P("x")))
    else:
        args = (jnp.asarray(a0), jnp.asarray(b0))
    tangents = (jnp.asarray(da), jnp.asarray(db))
    got = jax.jvp(jax.grad(ours, argnums=(0, 1)), args, tangents)[1]
    want = jax.jvp(jax.grad(theirs, argnums=(0, 1)), (jnp.asarray(a0), jnp.asarray(b0)), tangents)[1]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-12 * float(np.abs(w).max()))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128], ids=["d", "z"])
def test_second_derivative_of_det_at_a_numerically_singular_matrix(dtype):
    """det of a rank-3 product of 4 x 3 and 3 x 4 factors (det ~ 1e-16, a^-1 ~ 1e16, no pivot
    exactly zero): the derivative of the gradient along a direction is jnp.linalg.det's, the exact
    one of the polynomial det (an adjugate formed as det(a) a^-1 cancels its terms of 1e16 there)."""
    rng = np.random.default_rng(8)
    a = jnp.asarray(random_matrix(rng, (4, 3), dtype) @ random_matrix(rng, (3, 4), dtype))
    t, w = (jnp.asarray(random_matrix(rng, s, dtype)) for s in ((4, 4), ()))
    loss = lambda det: lambda a: jnp.real(w * det(a))  # noqa: E731
    got, want = (jax.jvp(jax.grad(loss(det)), (a,), (t,))[1] for det in (jaxmg.numpy.linalg.det, jnp.linalg.det))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-8, atol=1e-10 * float(np.abs(want).max()))
