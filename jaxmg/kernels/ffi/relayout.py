"""Square matrices rearranged in their own buffer on one NVIDIA GPU (``jaxmg_relayout``,
csrc/relayout.cc), so that the device's factorisations change between JAX's row-major layout and
the column-major one of cuSOLVER without a second matrix.

XLA keeps arrays row-major and hands a column-major operand over by transposing it into a new
buffer. A transpose made here in place, then read through ``swapaxes`` (which XLA lays out as a
bitcast of the same bytes), gives the column-major operand in the matrix's own buffer.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..varying import varying_like
from . import _library, per_matrix
from ._codes import CODES

#: ``x`` becomes ``x^T``.
TRANSPOSE = CODES["relayout_transpose"]
#: ``x`` becomes ``tril(x) + triu(x^T, 1)``: the symmetric matrix of its lower triangle (not
#: conjugated), whose row-major bytes hold that triangle where a column-major reader of the
#: lower triangle looks for it.
SYMMETRIC_FROM_LOWER = CODES["relayout_symmetric_from_lower"]
#: ``x`` becomes ``tril(x^T)``, zero above the diagonal: a column-major lower factor, read
#: through ``swapaxes``, as a row-major one.
LOWER_OF_TRANSPOSE = CODES["relayout_lower_of_transpose"]


def available() -> bool:
    """Whether the native library is loaded, so that :func:`relayout` can run on an NVIDIA GPU."""
    return bool(_library.capabilities().get("relayout"))


def reference(x: jax.Array, mode: int) -> jax.Array:
    """What :func:`relayout` computes, in XLA's operations (any platform; a second buffer)."""
    t = jnp.swapaxes(x, -1, -2)
    mode = _checked_mode(mode)
    if mode == TRANSPOSE:
        return t
    if mode == SYMMETRIC_FROM_LOWER:
        return jnp.tril(x) + jnp.triu(t, 1)
    return jnp.tril(t)


def _checked_mode(mode) -> int:
    if mode not in (TRANSPOSE, SYMMETRIC_FROM_LOWER, LOWER_OF_TRANSPOSE):
        raise ValueError(f"relayout: mode must be TRANSPOSE, SYMMETRIC_FROM_LOWER or LOWER_OF_TRANSPOSE; got {mode!r}")
    return int(mode)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _relayout(x, mode):
    _library.register()
    (out,) = per_matrix.call(
        "jaxmg_relayout", [jax.ShapeDtypeStruct(x.shape, x.dtype)], input_output_aliases={0: 0}, mode=np.int64(mode)
    )(x)
    return varying_like(x, out)


@_relayout.defjvp
def _relayout_jvp(mode, primals, tangents):
    (x,), (dx,) = primals, tangents
    return _relayout(x, mode), reference(dx, mode)  # linear: JAX transposes the reference


def relayout(x: jax.Array, mode: int) -> jax.Array:
    """``reference(x, mode)`` on this GPU in ``x``'s own buffer, where ``x`` is not used afterwards
    (XLA copies it first where it is): x (..., n, n), row-major, float32 to complex128, a stack
    in one call. Differentiable (the tangent through :func:`reference`)."""
    return _relayout(x, _checked_mode(mode))
