"""The determinant of one square matrix from jaxmg's LU factor, with the derivative JAX defines.

``det(a)`` is ``sign * exp(log|det a|)`` of the LU factor's diagonal and pivots: a zero pivot is
not a failure but a singular matrix, whose determinant is 0 (``slogdet`` gives (0, -inf)).

Its derivative is ``d det(a) = tr(adj(a) a')`` with the adjugate ``adj(a)``, which is defined
(and smooth) for every matrix, singular ones included, as ``jnp.linalg.det``'s is:

* on the local and batch routes, from the packed factor ``P a = L U`` (natural layout, and
  differentiable: :attr:`jaxmg.LU.lu`): where no pivot but the last is exactly zero,
  ``adj(a) = det(P) p U~^-1 diag(u_nn, ..., u_nn, 1) L^-1 P`` (:func:`_last_pivot_adjugate`),
  with ``U~`` U whose last pivot is 1 and ``p`` the product of the other pivots: no division
  by the last pivot, which partial pivoting leaves the smallest, so that second derivatives
  stay exact at numerically singular matrices (where ``det(a) a^-1`` would cancel terms of
  order ``|a^-1|``); where an earlier pivot is exactly zero, the cofactor matrix
  (:func:`_cofactor`): exact where one pivot is zero, wherever it is (corank one), and 0 where
  more are (as JAX's);
* on the distributed route (cuSOLVERMp's permuted factor), ``adj(a) = det(a) a^-1`` from the
  same factor (one inverse from the saved factor: :meth:`jaxmg.LU.inverse`), differentiable
  again; an exactly singular matrix's derivative is NaN there;
* a 1 x 1 matrix's adjugate is 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from .._plan import whole_where_split
from .._routes import DISTRIBUTED
from ..kernels.algebra import permutation_matrix, pivot_parity
from ..modules import LU
from ._util import in_layout_of


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
    return value, jnp.sum(in_layout_of(jnp.swapaxes(adjugate, -1, -2), a) * a_dot)  # tr(adj(a) a'), in a's layout


def _value_and_adjugate(a):
    """(det a, adj a): adj a = det(a) a^-1 from a's LU factor, or the cofactor matrix where a
    pivot is exactly zero (module docstring)."""
    n = a.shape[-1]
    if n <= 1:
        return det(a), jnp.ones_like(a)
    factor = LU(a)
    value = _value(factor)  # from the same factor; its own derivative is slogdet's

    if factor.route == DISTRIBUTED:
        return value, jnp.asarray(value, a.dtype) * factor.inverse()

    def last(lu: jax.Array) -> jax.Array:
        return in_layout_of(_last_pivot_adjugate(lu, factor.pivots), a).astype(a.dtype)

    def cofactor(lu: jax.Array) -> jax.Array:
        return in_layout_of(_cofactor(jax.lax.stop_gradient(lu), factor.pivots), a).astype(a.dtype)

    # the local and batch routes' factor, in a's layout, read whole (its diagonal, its entries)
    lu = whole_where_split(factor.lu)
    # one branch runs: the cofactor's solves only where a pivot before the last is exactly zero
    # (under vmap both run)
    singular = jnp.any(jnp.diagonal(lu)[:-1] == 0)
    return value, jax.lax.cond(singular, cofactor, last, lu)


def _permuted_inverse_of_l(lu: jax.Array, pivots: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(L^-1 P, det P)`` from a's packed factor ``P a = L U`` (N, N) and its 0-based row swaps."""
    n = lu.shape[-1]
    parity = pivot_parity(pivots).astype(lu.dtype)
    perm = jax.lax.linalg.lu_pivots_to_permutation(pivots, n)
    return solve_triangular(lu, permutation_matrix(perm, lu.dtype), lower=True, unit_diagonal=True), parity


def _last_pivot_adjugate(lu: jax.Array, pivots: jax.Array) -> jax.Array:
    """adj(a) (N, N) from a's packed factor ``P a = L U`` and pivots, for U's pivots before the
    last non-zero: with ``U = D U~`` (``D = diag(1, ..., 1, u_nn)``, ``U~`` U with its last pivot
    1), ``adj(U) = det(U~) U~^-1 adj(D)``, ``adj(D) = diag(u_nn, ..., u_nn, 1)``, and
    ``adj(a) = det(P) adj(U) L^-1 P``: never divided by ``u_nn`` (exact for ``u_nn = 0`` too)."""
    n = lu.shape[-1]
    rest, parity = _permuted_inverse_of_l(lu, pivots)
    diagonal = jnp.diagonal(lu)
    last = jnp.arange(n) == n - 1
    tilde = jnp.where(jnp.eye(n, dtype=bool) & last[None, :], jnp.ones((), lu.dtype), lu)  # U~ in the upper triangle
    scale = jnp.where(last, jnp.ones((), lu.dtype), diagonal[-1])[:, None]  # adj(D)
    partial = jnp.prod(jnp.where(last, jnp.ones((), lu.dtype), diagonal))  # det(U~)
    return parity * partial * solve_triangular(tilde, scale * rest, lower=False)


def _cofactor(lu: jax.Array, pivots: jax.Array) -> jax.Array:
    """adj(a) from a's packed LU factor ``P a = L U`` (L's strict lower triangle, U's upper one)
    and pivots, where a pivot of U is exactly zero: ``adj(a) = det(P) adj(U) L^-1 P``. With one
    zero pivot, at k, ``adj(U(t))`` for ``U(t) = U + t e_k e_k^T`` is affine in t (each cofactor
    is affine in one entry) and ``U(t)`` is invertible for t != 0, so ``adj(U)`` is the mean of
    ``det(U(t)) U(t)^-1`` at t = +-tau (tau = max |u_ii|). With more zero pivots that is not
    finite, and the result is 0 (as JAX's)."""
    diagonal = jnp.diagonal(lu)
    k = jnp.argmax(diagonal == 0)
    largest = jnp.max(jnp.abs(diagonal))
    tau = jnp.where(largest > 0, largest, jnp.ones((), largest.dtype)).astype(lu.dtype)
    rest, parity = _permuted_inverse_of_l(lu, pivots)  # L^-1 P

    def adjugate_times_rest(t):
        shifted = jnp.triu(lu).at[k, k].add(t)
        return jnp.prod(jnp.diagonal(shifted)) * solve_triangular(shifted, rest, lower=False)

    x = parity * (adjugate_times_rest(tau) + adjugate_times_rest(-tau)) / 2
    return jnp.where(jnp.all(jnp.isfinite(x)), x, jnp.zeros_like(x))
