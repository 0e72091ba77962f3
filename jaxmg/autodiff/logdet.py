"""log det A and A^-1 from a saved Cholesky factor, with custom JVPs.

The factorisation reads only the lower triangle of ``a``: the matrix factored is
``A = H(a) = tril(a, -1) + tril(a, -1)^H + Re diag(a)``, and every rule here is the derivative
of that function of ``a`` (exact also for ``a`` that is not exactly Hermitian): tangents enter
as ``H(a')``. Then d log det A = Re tr(A^-1 H(a')) = Re sum(A^-T * H(a')), with A^-T = conj(A^-1):
an elementwise product in the grid layout (no gather); in reverse mode JAX transposes it (the
cotangent g * A^-T, folded onto the lower triangle). A^-T's own tangent is
-A^-T H(a')^T A^-T, so every order is available. A^-1 comes from the saved factor by
:func:`jaxmg.ops.cholesky.inverse` ((2/3) N^3 flops in large products), and its tangent,
-A^-1 H(a') A^-1, is two distributed products.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from .._call import Call
from ..ops import cholesky
from . import _dist


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def logdet(call: Call, a, state):
    """log det A (real) from the factor ``state``; ``a`` carries the derivative (may be None)."""
    return cholesky.logdet(call, state)


def _logdet_jvp(call, primals, tangents):
    a, state = primals
    a_dot, _ = tangents
    value = logdet(call, a, state)
    a_dot = _read_tangent(call, a, a_dot)
    if a_dot is None:
        return value, jnp.zeros_like(value)
    tangent = jnp.real(jnp.sum(inverse_transposed(call, a, state) * a_dot))
    return value, tangent.astype(value.dtype)


logdet.defjvp(_logdet_jvp, symbolic_zeros=True)


def _read_tangent(call: Call, a, a_dot):
    """H(a'): the tangent of the Hermitian matrix read from a's lower triangle, in the grid
    layout (None where ``a`` is not differentiated)."""
    a_dot = _dist.placed_tangent(a, a_dot, call.grid.spec, call.grid.mesh)
    if a_dot is None:
        return None
    return _dist.lower_read(a_dot, like=NamedSharding(call.grid.mesh, call.grid.spec))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def inverse_transposed(call: Call, a, state):
    """A^-T in the grid layout: conj(A^-1) for Hermitian A (no transpose, no gather), with the
    full matrix's tangent, -A^-T A'^T A^-T, so that the derivatives of log det of every order
    are slogdet's along any direction A', Hermitian or not."""
    return jnp.conj(cholesky.inverse(call, state))


def _inverse_transposed_jvp(call, primals, tangents):
    return _inverse_and_tangent(inverse_transposed, call, primals, tangents, transposed=True)


inverse_transposed.defjvp(_inverse_transposed_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def inverse(call: Call, a, state):
    """A^-1 in the grid layout, from the factor ``state``; differentiable through ``a``."""
    return cholesky.inverse(call, state)


def _inverse_jvp(call, primals, tangents):
    return _inverse_and_tangent(inverse, call, primals, tangents, transposed=False)


def _inverse_and_tangent(fn, call, primals, tangents, *, transposed: bool):
    """``V = fn(call, a, state)`` (A^-1, or A^-T where ``transposed``) and its tangent -V A' V,
    or -V A'^T V: two distributed products in the grid layout."""
    a, state = primals
    a_dot, _ = tangents
    value = fn(call, a, state)
    a_dot = _read_tangent(call, a, a_dot)
    if a_dot is None:
        return value, jnp.zeros_like(value)
    grid = NamedSharding(call.grid.mesh, call.grid.spec)
    if transposed:  # V A'^T = V (conj A')^H
        middle = _dist.matmul(value, jnp.conj(a_dot), grid, adj_y=True)
    else:
        middle = _dist.matmul(value, a_dot, grid)
    return value, -_dist.matmul(middle, value, grid)


inverse.defjvp(_inverse_jvp, symbolic_zeros=True)
