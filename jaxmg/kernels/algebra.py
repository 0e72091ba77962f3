"""Dense steps that both backends take, on whole matrices (``jaxmg.kernels.local``) or on a
device's blocks inside the native kernels (``jaxmg.kernels.native``): products at full precision
(and kernels traced at it), (sign, log|det|) from a pivoted LU factor's diagonal, and the choice of
a kernel by the platform compiled for."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax


def matmul(x, y):
    """``x @ y`` at full precision: float32 and complex64 products at JAX's default precision run
    in TF32 on GPUs (about 1e-3 relative error)."""
    return jnp.matmul(x, y, precision=lax.Precision.HIGHEST)


def divided(x, scale):
    """``x / scale`` for a positive scale of any magnitude: as ``x * r * r`` with ``r = 1 /
    sqrt(scale)``. XLA divides by a scalar as a product with its reciprocal, and a reciprocal
    below the dtype's smallest normal number (scale above 8.5e37 in float32, 4.5e307 in float64)
    is flushed to zero on CPUs, which would give 0 for every entry."""
    r = 1 / jnp.sqrt(scale)
    return (x * r) * r


def _unchanged(x):
    return x


def scaled_norm(x, max_over: Callable = _unchanged, sum_over: Callable = _unchanged):
    """The 2-norm of all of ``x``'s entries (a vector's, or a matrix's Frobenius norm), with every
    entry divided by the largest magnitude before it is squared, so that no square underflows (a
    matrix of norm 1e-293 in float64 or 1e-32 in float32 would give 0) or overflows; 0 for zeros.
    ``max_over`` and ``sum_over`` combine the local largest magnitude and sum of squares across the
    devices that hold parts of ``x`` (``jax.lax.pmax`` and ``jax.lax.psum`` over their axes)."""
    big = max_over(jnp.max(jnp.abs(x), initial=0.0))
    safe = jnp.where(big > 0, big, 1)
    return big * jnp.sqrt(sum_over(jnp.sum(divided(jnp.abs(x), safe) ** 2)))


def full_precision(kernel):
    """``kernel`` with its matrix products traced at full precision (no TF32 on GPUs)."""

    @functools.wraps(kernel)
    def traced(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return kernel(*args, **kwargs)

    return traced


#: The platforms a kernel may choose by (:func:`by_platform`); any other takes the CPU's choice.
PLATFORMS = ("cuda", "rocm", "cpu")


def platform_name(platform: str) -> str:
    """``platform`` as :data:`PLATFORMS` names it: "gpu", JAX's name for NVIDIA GPUs, is "cuda"."""
    return {"gpu": "cuda"}.get(platform, platform)


def by_platform(operand, choose: Callable[[str], Callable]) -> Any:
    """``choose(platform)(operand)`` for the platform the call is compiled for ("cuda", "rocm", and
    "cpu"'s choice on any other), decided when compiled (``jax.lax.platform_dependent``), so it
    holds eagerly, in ``jax.jit`` and under ``jax.vmap``; a plain call, with no branch, where every
    platform chooses the same function."""
    pick = {p: choose(p) for p in PLATFORMS}
    if len(set(pick.values())) == 1:
        return pick["cpu"](operand)
    return lax.platform_dependent(operand, cuda=pick["cuda"], rocm=pick["rocm"], default=pick["cpu"])


def batched_like(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x`` unchanged, made to depend on the integer array ``index`` (..., n) by adding zeros, so
    that under ``jax.vmap`` it is batched, and sharded, like ``index``. A gather of an unbatched
    ``x`` by batched indices has no layout on Explicit mesh axes (JAX asks for an
    ``out_sharding`` it cannot infer); one batched like its indices has theirs. Exact: the added
    term is 0 (an integer times zero), and integers carry no derivative."""
    return x + jnp.zeros((), x.dtype) * index[..., :1, None].astype(x.dtype)


def permutation_matrix(perm, dtype):
    """P (..., n, n): the identity's rows in the order ``perm`` (..., n), ``P[i, j] = perm[i] == j``.
    Made by comparisons rather than by a gather from the identity, so that under ``jax.vmap`` it
    is batched, and sharded, like ``perm``: a gather from an unbatched identity has no layout on
    Explicit mesh axes."""
    columns = jax.lax.broadcasted_iota(perm.dtype, (*perm.shape, perm.shape[-1]), perm.ndim)
    return (perm[..., :, None] == columns).astype(dtype)


def pivot_parity(pivots) -> jax.Array:
    """(-1)^swaps (an int32 array of shape ``pivots.shape[:-1]``): the determinant of the row
    permutation that LAPACK's 0-based row swaps ``pivots`` (..., n) apply."""
    n = pivots.shape[-1]
    swaps = jnp.sum(pivots != jnp.arange(n, dtype=pivots.dtype), axis=-1)
    return 1 - 2 * (swaps % 2)


def slogdet_of(diagonal, pivots, parity):
    """(sign, log|det A|) from U's diagonal, the row pivots and the sign ``parity`` of any other
    permutation of the factored matrix: det A = parity * (-1)^swaps * prod(diag U). A zero pivot
    is a singular A, not a failure: (0, -inf)."""
    magnitude = jnp.abs(diagonal)
    singular = jnp.any(magnitude == 0)
    if jnp.issubdtype(diagonal.dtype, jnp.complexfloating):
        phases = diagonal / jnp.where(magnitude == 0, jnp.ones((), magnitude.dtype), magnitude).astype(diagonal.dtype)
    else:  # exactly +-1 where division is not exact (a TPU's d / |d| is 1 - 4e-8 in float32)
        phases = jnp.sign(diagonal)
    sign = (pivot_parity(pivots) * parity).astype(diagonal.dtype) * jnp.prod(phases)
    return jnp.where(singular, jnp.zeros((), sign.dtype), sign), jnp.sum(jnp.log(magnitude))
