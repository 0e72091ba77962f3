"""Backend-independent per-shard kernels: distributed products in pure JAX.

Used by the derivative rules (``jaxmg.autodiff``) on every backend. They run inside
``shard_map`` with replication checking on, so JAX differentiates and transposes them
(psum, all_gather and slicing all have transposes). No matrix is gathered: a product
moves only the small vectors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._sharded import axis_index, axis_name

NAME = "products"
DIFFERENTIABLE = True


def matmul(x, y):
    """``x @ y`` at full precision, as every kernel multiplies: float32 and complex64 products
    at JAX's default precision run in TF32 on GPUs (about 1e-3 relative error)."""
    return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)


def _slice(x, axes, size, extent):
    if not axes:
        return x
    return jax.lax.dynamic_slice_in_dim(x, axis_index(axes) * extent, extent, axis=0)


def matvec(a, x, *, grid, trans):
    """op(A) @ x for whole x; trans 0: A, 1: A^T, 2: A^H. Returns the whole product."""
    vector = x.ndim == 1
    x2 = x[:, None] if vector else x
    mloc, nloc = a.shape
    if trans == 0:
        part = matmul(a, _slice(x2, grid.col_axes, grid.npcol, nloc))
        sum_axes, gather_axes = grid.col_axes, grid.row_axes
    else:
        at = a.T if trans == 1 else jnp.conj(a).T
        part = matmul(at, _slice(x2, grid.row_axes, grid.nprow, mloc))
        sum_axes, gather_axes = grid.row_axes, grid.col_axes
    if sum_axes:
        part = jax.lax.psum(part, axis_name(sum_axes))
    if gather_axes:
        part = _assemble(part, gather_axes)
    return (part[:, 0] if vector else part,)


def _assemble(part, axes):
    """The whole array from each device's rows along ``axes``, typed as replicated there.

    A psum of each part placed at its offset: unlike all_gather, its result is invariant
    over ``axes``, so shard_map's replication check accepts it and JAX transposes it.
    """
    count = 1
    for name in axes:
        count *= jax.lax.axis_size(name)
    whole = jnp.zeros((part.shape[0] * count,) + part.shape[1:], part.dtype)
    whole = jax.lax.dynamic_update_slice_in_dim(whole, part, axis_index(axes) * part.shape[0], axis=0)
    return jax.lax.psum(whole, axis_name(axes))


def outer(u, v, *, grid, local_shape):
    """This device's block of u @ v^H for whole u (M[, K]) and v (N[, K])."""
    u2 = u[:, None] if u.ndim == 1 else u
    v2 = v[:, None] if v.ndim == 1 else v
    mloc, nloc = local_shape
    ul = _slice(u2, grid.row_axes, grid.nprow, mloc)
    vl = _slice(v2, grid.col_axes, grid.npcol, nloc)
    return (matmul(ul, jnp.conj(vl).T),)
