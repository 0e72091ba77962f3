"""log det A from a saved Cholesky factor, with a custom JVP.

d log det A = Re tr(A^-1 A') = Re sum(conj(A^-1) * A') for Hermitian A, an elementwise
product in a's layout (no transpose, no gather); in reverse mode the cotangent is
g * A^-1 (Hermitian). A^-1 comes from the saved factor (``ops.cholesky.inverse``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .. import _sharded
from .._call import Call
from ..ops import cholesky


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def logdet(call: Call, a, state):
    """log det A (real) from the factor ``state``; ``a`` carries the derivative (may be None)."""
    return cholesky.logdet(call, state)


def _logdet_jvp(call, primals, tangents):
    a, state = primals
    a_dot, _ = tangents
    value = cholesky.logdet(call, state)
    if a is None or isinstance(a_dot, jax.custom_derivatives.SymbolicZero):
        return value, jnp.zeros_like(value)  # no A^-1 needed when a is not differentiated
    inverse = cholesky.inverse(call, state)
    a_dot = _sharded.place(a_dot, call.grid.spec, call.grid.mesh)
    tangent = jnp.real(jnp.sum(jnp.conj(inverse) * a_dot))
    return value, tangent.astype(value.dtype)


logdet.defjvp(_logdet_jvp, symbolic_zeros=True)
