"""Stages 2 and 3 of the two-stage Hermitian eigensolver on one NVIDIA GPU (csrc/band.{cu,cc}):
``jaxmg_sb2st`` (band -> tridiagonal by bulge chasing, LAPACK ``dsb2st``'s task order, one
persistent kernel per matrix, with its Householder reflectors where asked),
``jaxmg_tridiagonal_bisection`` (the eigenvalues of a real symmetric tridiagonal, one thread per
eigenvalue) and ``jaxmg_stedc`` (its eigenvalues and eigenvectors by cuSOLVERMp's divide and
conquer, ``cusolverMpStedc``, on the calling GPU's one-rank grid). Their reference is
:func:`jaxmg.kernels.two_stage.band_to_tridiagonal_reference`; the composition is
:func:`jaxmg.kernels.two_stage.eigvalsh`.

Every function takes one matrix or a stack of them (leading dimensions), maps under
``jax.vmap`` and runs in ``jax.jit``; none is differentiable.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..._checks import SUPPORTED_DTYPES
from . import _library, per_matrix

#: stedc's square tiles (a power of two: cuSOLVERMp 0.4.2 to 0.8.0's stedc may fail or hang with
#: other block sizes); smaller for matrices of smaller order.
STEDC_TILE = 256


def available() -> bool:
    """Whether the loaded native library has the band kernels (an NVIDIA GPU is needed to run them)."""
    return bool(_library.capabilities().get("band"))


def stedc_available() -> bool:
    """Whether the loaded cuSOLVERMp has ``cusolverMpStedc`` (:func:`tridiagonal_eigh`)."""
    return bool(_library.capabilities().get("stedc"))


def reflector_extents(n: int, band: int) -> tuple[int, int]:
    """(S, K) of :func:`band_to_tridiagonal`'s reflectors for order ``n`` and half-bandwidth
    ``band``: S = max(N - 2, 0) sweeps and at most K = (N - 3) // b + 1 tasks per sweep (K = 0
    where N < 3 or b < 1)."""
    return max(n - 2, 0), ((n - 3) // band + 1 if n >= 3 and band >= 1 else 0)


def _check_band_storage(ab) -> jax.Array:
    ab = jnp.asarray(ab)
    if ab.ndim < 2 or ab.shape[-2] < 1:
        raise ValueError(
            f"band_to_tridiagonal: ab must be lower band storage (..., b + 1, N) with b >= 0; got shape {ab.shape}"
        )
    if ab.dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"band_to_tridiagonal: ab's dtype must be float32, float64, complex64 or complex128; got {ab.dtype}"
        )
    return ab


def band_to_tridiagonal(ab: jax.Array, reflectors: bool = False):
    """``(d, e)`` of the Hermitian tridiagonal ``T = Q^H B Q`` of the band matrix B in lower band
    storage ab ((..., b + 1, N), float32 to complex128, row r holding ``B[j + r, j]``): d (..., N)
    real, e (..., N - 1) ab's dtype (``T[j + 1, j]``).

    With ``reflectors``, ``(d, e, v, tau)``: Q's Householder reflectors, v (..., S, K, b) of ab's
    dtype and tau (..., S, K) (:func:`reflector_extents`). Sweep i's task t acts on rows
    ``i + 1 + t b + k`` (k = 0 .. b - 1; entries past row N - 1 are zero), ``v[i, t, 0] = 1``;
    tasks a sweep does not have are zero (tau = 0, v = 0), and so are all of them where b = 1;
    ``Q = prod over (i, t) in lexicographic order of (I - tau[i, t] v[i, t] v[i, t]^H)``."""
    ab = _check_band_storage(ab)
    _library.register()
    batch, b, n = ab.shape[:-2], ab.shape[-2] - 1, ab.shape[-1]
    real = jnp.finfo(ab.dtype).dtype
    sweeps, tasks = reflector_extents(n, b)
    v_shape, tau_shape = ((sweeps, tasks, b), (sweeps, tasks)) if reflectors else ((0,), (0,))
    scratch = _library._native_module().sb2st_scratch_bytes(n, b, jnp.dtype(ab.dtype).itemsize)
    shapes = [
        ((n,), real),
        ((max(n - 1, 0),), ab.dtype),
        (v_shape, ab.dtype),
        (tau_shape, ab.dtype),
        ((scratch,), jnp.uint8),
    ]
    d, e, v, tau, _ = per_matrix.call("jaxmg_sb2st", [jax.ShapeDtypeStruct(batch + s, t) for s, t in shapes])(ab)
    return (d, e, v, tau) if reflectors else (d, e)


def _check_tridiagonal(d, e, who: str) -> tuple[jax.Array, jax.Array]:
    """d (..., N) and e (..., N - 1), real, of one dtype, or a ValueError naming the argument."""
    d, e = jnp.asarray(d), jnp.asarray(e)
    for name, x in (("d", d), ("e", e)):
        if x.dtype not in (np.float32, np.float64):
            raise ValueError(
                f"{who}: {name} must be float32 or float64 (a real symmetric tridiagonal; for a "
                f"Hermitian one pass |e|, whose tridiagonal is unitarily similar); got {x.dtype}"
            )
    if d.ndim < 1:
        raise ValueError(f"{who}: d must be the diagonal (..., N); got a scalar")
    want = d.shape[:-1] + (max(d.shape[-1] - 1, 0),)
    if e.shape != want:
        raise ValueError(f"{who}: e must be the off-diagonal of shape {want} for d of shape {d.shape}; got {e.shape}")
    if e.dtype != d.dtype:
        raise ValueError(f"{who}: d and e must have one dtype; got {d.dtype} and {e.dtype}")
    return d, e


def tridiagonal_eigvalsh(d: jax.Array, e: jax.Array) -> jax.Array:
    """The eigenvalues, ascending, of the real symmetric tridiagonal (d (..., N), e (..., N - 1)
    real, float32 or float64), by bisection on Sturm counts, one GPU thread per eigenvalue."""
    d, e = _check_tridiagonal(d, e, "tridiagonal_eigvalsh")
    _library.register()
    de = jnp.stack([d, jnp.pad(e, [(0, 0)] * (e.ndim - 1) + [(0, 1)])], axis=-2)
    (w,) = per_matrix.call("jaxmg_tridiagonal_bisection", [jax.ShapeDtypeStruct(d.shape, d.dtype)])(de)
    return w


def _check_tile(tile) -> int:
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1 or tile & (tile - 1):
        raise ValueError(
            f"tridiagonal_eigh: tile must be a positive power of two (cuSOLVERMp's stedc may fail "
            f"or hang with other block sizes); got {tile!r}"
        )
    return int(tile)


def stedc(d: jax.Array, e: jax.Array, *, tile: int = STEDC_TILE) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`tridiagonal_eigh` with cuSOLVERMp's status: ``(w, z, status)``, status (...) int32
    0 where the matrix was solved, else stedc's info (-1 where it failed without one), with
    that matrix's w and z NaN."""
    d, e = _check_tridiagonal(d, e, "tridiagonal_eigh")
    tile = _check_tile(tile)
    batch, n = d.shape[:-1], d.shape[-1]
    if n == 0:
        return d, jnp.zeros(batch + (0, 0), d.dtype), jnp.zeros(batch, jnp.int32)
    _library.register()
    de = jnp.stack([d, jnp.pad(e, [(0, 0)] * (e.ndim - 1) + [(0, 1)])], axis=-1)  # column-major: d, then e
    results = [
        jax.ShapeDtypeStruct(batch + (n, n), d.dtype),
        jax.ShapeDtypeStruct(batch + (n,), d.dtype),
        jax.ShapeDtypeStruct(batch, jnp.int32),
    ]
    tile = min(tile, 1 << (n - 1).bit_length())
    z, w, status = per_matrix.call("jaxmg_stedc", results, column_major=True, tile=tile)(de)
    order = jnp.argsort(w, axis=-1)  # cuSOLVERMp documents descending order; LAPACK's is ascending
    w = jnp.take_along_axis(w, order, axis=-1)
    z = jnp.take_along_axis(z, jnp.broadcast_to(order[..., None, :], z.shape), axis=-1)
    return w, z, status


def tridiagonal_eigh(d: jax.Array, e: jax.Array, *, tile: int = STEDC_TILE) -> tuple[jax.Array, jax.Array]:
    """The eigenvalues and eigenvectors of the real symmetric tridiagonal T with diagonal d (..., N)
    and off-diagonal e (..., N - 1) (float32 or float64): ``(w, z)``, w (..., N) ascending and z
    (..., N, N) orthonormal, ``T z[:, j] = w[j] z[:, j]``. By cuSOLVERMp's divide and conquer
    (``cusolverMpStedc``) on the calling GPU, in square tiles of ``tile`` (a power of two, at most
    the order rounded up to one); a stack is solved one matrix after another. Where it fails, that
    matrix's w and z are NaN (:func:`stedc` gives the status)."""
    w, z, _ = stedc(d, e, tile=tile)
    return w, z
