"""log |det A| and A^-1 from a saved factor (Cholesky or LU), with custom JVPs.

The factor is never differentiated: every derivative flows through the operator ``a``. The
Cholesky factorisation reads only the lower triangle of ``a``: the matrix factored is
``H(a) = tril(a, -1) + tril(a, -1)^H + Re diag(a)``, and the rules are the derivatives of that
function of ``a`` (exact also for ``a`` that is not exactly Hermitian): tangents enter as
``H(a')``. LU reads all of ``a``.

d log|det A| = Re tr(A^-1 A') = Re sum(A^-T * A'): an elementwise product in the computation's
layout (no gather); in reverse mode JAX transposes it (the cotangent g * A^-T). For a complex LU
the sign (phase) moves too: d sign = i sign Im tr(A^-1 A'). A^-T is conj(A^-1) for Hermitian A,
a transpose for LU; its own tangent is -A^-T A'^T A^-T, so every order is available. A^-1 comes
from the saved factor (the family kernels' ``inverse``: LAPACK's potri, (2/3) N^3 flops, or
getri, (4/3) N^3, both in large products), and its tangent, -A^-1 A' A^-1, is two products.

``kernels`` is the family's kernels (``jaxmg.kernels.families``): a static argument, whose plan
lays the operator out and whose ``hermitian`` says which factorisation it is.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from . import _dist


def _read_tangent(kernels, a, a_dot):
    """The tangent of the matrix the factorisation read, in the computation's layout (None where
    ``a`` is not differentiated): H(a') for Cholesky, a' for LU."""
    layout = kernels.plan.layout
    a_dot = _dist.placed_tangent(a, a_dot, layout)
    if a_dot is None or not kernels.hermitian:
        return a_dot
    return _dist.lower_read(a_dot, like=layout)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def logdet(kernels, a, state):
    """log det A (real) from the Cholesky factor ``state``; ``a`` carries the derivative (may be None)."""
    return kernels.logdet(state)


def _logdet_jvp(kernels, primals, tangents):
    a, state = primals
    value = logdet(kernels, a, state)
    a_dot = _read_tangent(kernels, a, tangents[0])
    if a_dot is None:
        return value, jnp.zeros_like(value)
    tangent = jnp.real(jnp.sum(inverse_transposed(kernels, a, state) * a_dot))
    return value, tangent.astype(value.dtype)


logdet.defjvp(_logdet_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def slogdet(kernels, a, state):
    """(sign, log|det A|) from LU's saved ``state``; ``a`` carries the derivative."""
    return kernels.slogdet(state)


def _slogdet_jvp(kernels, primals, tangents):
    a, state = primals
    sign, value = slogdet(kernels, a, state)
    a_dot = _read_tangent(kernels, a, tangents[0])
    if a_dot is None:
        return (sign, value), (jnp.zeros_like(sign), jnp.zeros_like(value))
    trace = jnp.sum(inverse_transposed(kernels, a, state) * a_dot)  # tr(A^-1 A')
    sign_dot = sign * (1j * jnp.imag(trace)).astype(sign.dtype) if jnp.iscomplexobj(sign) else jnp.zeros_like(sign)
    return (sign, value), (sign_dot, jnp.real(trace).astype(value.dtype))


slogdet.defjvp(_slogdet_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def inverse_transposed(kernels, a, state):
    """A^-T in the computation's layout: conj(A^-1) for Hermitian A (no transpose), (A^-1)^T for
    LU; with the tangent -A^-T A'^T A^-T, so that log|det|'s derivatives of every order are right
    along any direction."""
    inverse = kernels.inverse(state)
    if kernels.hermitian:
        return jnp.conj(inverse)
    return _dist.ct(jnp.conj(inverse), like=kernels.plan.layout)


def _inverse_transposed_jvp(kernels, primals, tangents):
    return _inverse_and_tangent(inverse_transposed, kernels, primals, tangents, transposed=True)


inverse_transposed.defjvp(_inverse_transposed_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def inverse(kernels, a, state):
    """A^-1 in the computation's layout, from the saved factor; differentiable through ``a``."""
    return kernels.inverse(state)


def _inverse_jvp(kernels, primals, tangents):
    return _inverse_and_tangent(inverse, kernels, primals, tangents, transposed=False)


def _inverse_and_tangent(fn, kernels, primals, tangents, *, transposed: bool):
    """``V = fn(kernels, a, state)`` (A^-1, or A^-T where ``transposed``) and its tangent -V A' V,
    or -V A'^T V: two products in the computation's layout."""
    a, state = primals
    value = fn(kernels, a, state)
    a_dot = _read_tangent(kernels, a, tangents[0])
    if a_dot is None:
        return value, jnp.zeros_like(value)
    layout = kernels.plan.layout
    if transposed:  # V A'^T = V (conj A')^H
        middle = _dist.matmul(value, jnp.conj(a_dot), layout, adj_y=True)
    else:
        middle = _dist.matmul(value, a_dot, layout)
    return value, -_dist.matmul(middle, value, layout)


inverse.defjvp(_inverse_jvp, symbolic_zeros=True)
