"""log |det A| and A^-1 from a saved factor (Cholesky or LU), with custom JVPs.

The factor is never differentiated: every derivative flows through the operator ``a``. The
Cholesky factorisation reads only the lower triangle of ``a``: the matrix factored is
``H(a) = tril(a, -1) + tril(a, -1)^H + Re diag(a)``, and the rules are the derivatives of that
function of ``a`` (exact also for ``a`` that is not exactly Hermitian): tangents enter as
``H(a')``. LU reads all of ``a``.

d log|det A| = Re tr(A^-1 A') = Re sum(A^-T * A'): an elementwise product in the computation's
layout (no gather); in reverse mode JAX transposes it (the cotangent g * A^-T). For Cholesky the
pairing with H(a') is folded into weights on A^-1's lower triangle, so the cotangent of ``a`` is
one elementwise pass over A^-1 (``_dist.lower_read_weights``). For a complex LU
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


def from_saved_factor(method, formula, read=_read_tangent):
    """``f(kernels, a, state)`` = ``method(kernels, state)``, the value of a saved factor, with a
    custom JVP along ``a``: ``formula(kernels, a, state, value, a_dot)`` gives the tangent from
    ``a_dot = read(kernels, a, a')`` (zero tangents, without work, where ``a`` is not
    differentiated). ``state`` is never differentiated."""

    @functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
    def f(kernels, a, state):
        return method(kernels, state)

    def jvp(kernels, primals, tangents):
        a, state = primals
        value = f(kernels, a, state)
        a_dot = read(kernels, a, tangents[0])
        if a_dot is None:
            return value, jax.tree.map(jnp.zeros_like, value)
        return value, formula(kernels, a, state, value, a_dot)

    f.__doc__ = method.__doc__
    f.defjvp(jvp, symbolic_zeros=True)
    return f


def _logdet(kernels, state):
    """log det A (real) from the Cholesky factor ``state``; ``a`` carries the derivative (may be None)."""
    return kernels.logdet(state)


def _placed_tangent(kernels, a, a_dot):
    """The tangent of ``a`` itself, in the computation's layout (None where ``a`` is not differentiated)."""
    return _dist.placed_tangent(a, a_dot, kernels.plan.layout)


def _logdet_tangent(kernels, a, state, value, a_dot):
    """d log det H(a) = Re tr(V H(a')) = 2 Re sum(W * a') with V = H(a)^-1 Hermitian and W its
    lower-read weights (``_dist.lower_read_weights``): elementwise in V's lower triangle, so the
    reverse-mode cotangent 2 g W needs no matrix beyond V (the 2 multiplies the scalar g)."""
    weights = _dist.lower_read_weights(inverse(kernels, a, state), like=kernels.plan.layout)
    return (2 * jnp.real(jnp.sum(weights * a_dot))).astype(value.dtype)


def _slogdet(kernels, state):
    """(sign, log|det A|) from LU's saved ``state``; ``a`` carries the derivative."""
    return kernels.slogdet(state)


def _slogdet_tangent(kernels, a, state, value, a_dot):
    sign, logabsdet = value
    trace = jnp.sum(inverse_transposed(kernels, a, state) * a_dot)  # tr(A^-1 A')
    # a singular A (sign 0, log|det A| = -inf) has no derivative: NaN (in both modes, not the
    # rounding of its inverse), a factor rather than a choice, whose transpose would give 0
    trace = trace * jnp.where(sign == 0, jnp.nan, 1).astype(trace.dtype)
    if jnp.iscomplexobj(sign):  # i Im tr(A^-1 A'), built as a complex number (no implicit promotion)
        sign_dot = sign * jax.lax.complex(jnp.zeros_like(jnp.imag(trace)), jnp.imag(trace)).astype(sign.dtype)
    else:
        sign_dot = jnp.zeros_like(sign)
    return sign_dot, jnp.real(trace).astype(logabsdet.dtype)


def _inverse(kernels, state):
    """A^-1 in the computation's layout, from the saved factor; differentiable through ``a``."""
    return kernels.inverse(state)


def _inverse_transposed(kernels, state):
    """A^-T in the computation's layout: conj(A^-1) for Hermitian A (no transpose), (A^-1)^T for
    LU; with the tangent -A^-T A'^T A^-T, so that log|det|'s derivatives of every order are right
    along any direction."""
    inverse = kernels.inverse(state)
    if kernels.hermitian:
        return jnp.conj(inverse)
    return _dist.ct(jnp.conj(inverse), like=kernels.plan.layout)


def _inverse_tangent(transposed: bool):
    """The tangent of V = A^-1 (or A^-T where ``transposed``): -V A' V (or -V A'^T V), two products
    in the computation's layout."""

    def tangent(kernels, a, state, value, a_dot):
        layout = kernels.plan.layout
        if transposed:  # V A'^T = V (conj A')^H
            middle = _dist.matmul(value, jnp.conj(a_dot), layout, adj_y=True)
        else:
            middle = _dist.matmul(value, a_dot, layout)
        return -_dist.matmul(middle, value, layout)

    return tangent


logdet = from_saved_factor(_logdet, _logdet_tangent, read=_placed_tangent)
slogdet = from_saved_factor(_slogdet, _slogdet_tangent)
inverse = from_saved_factor(_inverse, _inverse_tangent(False))
inverse_transposed = from_saved_factor(_inverse_transposed, _inverse_tangent(True))
