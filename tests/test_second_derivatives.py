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
