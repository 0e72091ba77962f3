"""log |det A| and A^-1 from a saved factor (Cholesky or LU), with custom JVPs.

The factor is never differentiated: every derivative flows through the operator ``a``. The
Cholesky factorisation reads only the lower triangle of ``a``: the matrix factored is
``H(a) = tril(a, -1) + tril(a, -1)^H + Re diag(a)``, and the rules are the derivatives of that
function of ``a`` (exact also for ``a`` that is not exactly Hermitian): tangents enter as
``H(a')``. LU reads all of ``a``.

d log|det A| = Re tr(A^-1 A') = Re sum(A^-T * A'): an elementwise product in the grid layout
(no gather); in reverse mode JAX transposes it (the cotangent g * A^-T). For a complex LU the
sign (phase) moves too: d sign = i sign Im tr(A^-1 A'). A^-T is conj(A^-1) for Hermitian A, a
transpose for LU; its own tangent is -A^-T A'^T A^-T, so every order is available. A^-1 comes
from the saved factor (:func:`jaxmg.ops.cholesky.inverse`, (2/3) N^3 flops, and
:func:`jaxmg.ops.lu.inverse`, (4/3) N^3, both in large products), and its tangent,
-A^-1 A' A^-1, is two distributed products.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from .._call import Call
from ..ops import cholesky
from ..ops import lu as lu_ops
from . import _dist


def _grid(call: Call) -> NamedSharding:
    return NamedSharding(call.grid.mesh, call.grid.spec)


def _inverse_of_factor(call: Call, factor):
    """A^-1 (grid layout) from the saved factor: the Cholesky state, or LU's (lu, pivots)."""
    if call.family == "lu":
        return lu_ops.inverse(call, *factor)
    return cholesky.inverse(call, factor)


def _read_tangent(call: Call, a, a_dot):
    """The tangent of the matrix the factorisation read, in the grid layout (None where ``a`` is
    not differentiated): H(a') for Cholesky, a' for LU."""
    a_dot = _dist.placed_tangent(a, a_dot, call.grid.spec, call.grid.mesh)
    if a_dot is None or call.family == "lu":
        return a_dot
    return _dist.lower_read(a_dot, like=_grid(call))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def logdet(call: Call, a, state):
    """log det A (real) from the Cholesky factor ``state``; ``a`` carries the derivative (may be None)."""
    return cholesky.logdet(call, state)


def _logdet_jvp(call, primals, tangents):
    a, state = primals
    value = logdet(call, a, state)
    a_dot = _read_tangent(call, a, tangents[0])
    if a_dot is None:
        return value, jnp.zeros_like(value)
    tangent = jnp.real(jnp.sum(inverse_transposed(call, a, state) * a_dot))
    return value, tangent.astype(value.dtype)


logdet.defjvp(_logdet_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def slogdet(call: Call, a, factor):
    """(sign, log|det A|) from LU's saved ``factor`` (lu, pivots); ``a`` carries the derivative."""
    return lu_ops.slogdet(call, *factor)


def _slogdet_jvp(call, primals, tangents):
    a, factor = primals
    sign, value = slogdet(call, a, factor)
    a_dot = _read_tangent(call, a, tangents[0])
    if a_dot is None:
        return (sign, value), (jnp.zeros_like(sign), jnp.zeros_like(value))
    trace = jnp.sum(inverse_transposed(call, a, factor) * a_dot)  # tr(A^-1 A')
    sign_dot = sign * (1j * jnp.imag(trace)).astype(sign.dtype) if jnp.iscomplexobj(sign) else jnp.zeros_like(sign)
    return (sign, value), (sign_dot, jnp.real(trace).astype(value.dtype))


slogdet.defjvp(_slogdet_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def inverse_transposed(call: Call, a, factor):
    """A^-T in the grid layout: conj(A^-1) for Hermitian A (no transpose), (A^-1)^T for LU;
    with the tangent -A^-T A'^T A^-T, so that log|det|'s derivatives of every order are right
    along any direction."""
    inverse = _inverse_of_factor(call, factor)
    if call.family == "lu":
        return _dist.ct(jnp.conj(inverse), like=_grid(call))
    return jnp.conj(inverse)


def _inverse_transposed_jvp(call, primals, tangents):
    return _inverse_and_tangent(inverse_transposed, call, primals, tangents, transposed=True)


inverse_transposed.defjvp(_inverse_transposed_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def inverse(call: Call, a, factor):
    """A^-1 in the grid layout, from the saved factor; differentiable through ``a``."""
    return _inverse_of_factor(call, factor)


def _inverse_jvp(call, primals, tangents):
    return _inverse_and_tangent(inverse, call, primals, tangents, transposed=False)


def _inverse_and_tangent(fn, call, primals, tangents, *, transposed: bool):
    """``V = fn(call, a, factor)`` (A^-1, or A^-T where ``transposed``) and its tangent -V A' V,
    or -V A'^T V: two distributed products in the grid layout."""
    a, factor = primals
    value = fn(call, a, factor)
    a_dot = _read_tangent(call, a, tangents[0])
    if a_dot is None:
        return value, jnp.zeros_like(value)
    grid = _grid(call)
    if transposed:  # V A'^T = V (conj A')^H
        middle = _dist.matmul(value, jnp.conj(a_dot), grid, adj_y=True)
    else:
        middle = _dist.matmul(value, a_dot, grid)
    return value, -_dist.matmul(middle, value, grid)


inverse.defjvp(_inverse_jvp, symbolic_zeros=True)
