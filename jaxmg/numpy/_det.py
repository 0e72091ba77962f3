"""The determinant of one square matrix from jaxmg's LU factor, with the derivative JAX defines.

``det(a)`` is ``sign * exp(log|det a|)`` of the LU factor's diagonal and pivots: a zero pivot is
not a failure but a singular matrix, whose determinant is 0 (``slogdet`` gives (0, -inf)).

Its derivative is ``d det(a) = tr(adj(a) a')`` with the adjugate ``adj(a)``, which is defined
(and smooth) for every matrix, singular ones included, as ``jnp.linalg.det``'s is:

* where no pivot is exactly zero, ``adj(a) = det(a) a^-1`` from the same factor (one inverse from
  the saved factor: :meth:`jaxmg.LU.inverse`), differentiable again (second derivatives);
* where a pivot is exactly zero (an exactly singular matrix, e.g. the zero matrix), the
  cofactor matrix from the packed factor ``P a = L U``: ``adj(a) = U~^-1 D L^-1 P`` with U's last
  diagonal entry replaced by the inverse of the product of the others and
  ``D = diag(det a, ..., det a, 1)``, which is exact when the zero pivot is the last one
  (corank one); where another pivot is zero the adjugate is 0 (corank two or more), as in JAX.
  The packed factor is in the natural layout on the local and batch routes; on the distributed
  route (cuSOLVERMp's permuted factor) an exactly singular matrix's derivative is NaN;
* a 1 x 1 matrix's adjugate is 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from .._routes import DISTRIBUTED
from ..modules import LU


def _value(factor: LU) -> jax.Array:
    sign, logabsdet = factor.slogdet()
    return sign * jnp.exp(logabsdet).astype(sign.dtype)


@jax.custom_jvp
def det(a: jax.Array) -> jax.Array:
    """The determinant of square ``a`` (N, N), a scalar of a's dtype (1 for N = 0)."""
    return _value(LU(a))


@det.defjvp
def _det_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    value, adjugate = _value_and_adjugate(a)
    return value, jnp.sum(jnp.swapaxes(adjugate, -1, -2) * a_dot)  # tr(adj(a) a')


def _value_and_adjugate(a):
    """(det a, adj a): adj a = det(a) a^-1 from a's LU factor, or the cofactor matrix where a
    pivot is exactly zero (module docstring)."""
    n = a.shape[-1]
    if n <= 1:
        return det(a), jnp.ones_like(a)
    factor = LU(a)
    value = _value(factor)  # from the same factor; its own derivative is slogdet's
    regular = jnp.asarray(value, a.dtype) * factor.inverse()
    if factor.route == DISTRIBUTED:
        return value, regular
    singular = jnp.any(jnp.diagonal(factor.lu) == 0)
    cofactor = _cofactor(jax.lax.stop_gradient(factor.lu), factor.pivots)
    return value, jnp.where(singular, cofactor, regular)


def _cofactor(lu: jax.Array, pivots: jax.Array) -> jax.Array:
    """adj(a) from a's packed LU factor (L's strict lower triangle, U's upper one) and pivots:
    ``U~^-1 D L^-1 P`` (module docstring), zero where that is not finite."""
    n = lu.shape[-1]
    diagonal = jnp.diagonal(lu)
    swaps = jnp.sum(pivots != jnp.arange(n, dtype=pivots.dtype))
    partial = jnp.prod(diagonal[:-1]) * (1 - 2 * (swaps % 2)).astype(lu.dtype)  # det(a) / u_nn
    full = partial * diagonal[-1]  # det(a)
    upper = lu.at[-1, -1].set(1 / partial)
    perm = jax.lax.linalg.lu_pivots_to_permutation(pivots, n)
    x = jnp.eye(n, dtype=lu.dtype)[perm]  # P
    x = solve_triangular(lu, x, lower=True, unit_diagonal=True)  # L^-1 P
    scale = jnp.where(jnp.arange(n) < n - 1, full, jnp.ones((), lu.dtype))
    x = solve_triangular(upper, scale[:, None] * x, lower=False)  # U~^-1 D L^-1 P
    return jnp.where(jnp.all(jnp.isfinite(x)), x, jnp.zeros_like(x))
