"""Stages 2 and 3 of the two-stage Hermitian eigensolver on one NVIDIA GPU (csrc/band.cu):
``jaxmg_sb2st`` (band -> tridiagonal by bulge chasing, LAPACK ``dsb2st``'s task order, one
persistent kernel per matrix) and ``jaxmg_tridiagonal_bisection`` (the eigenvalues of a real
symmetric tridiagonal, one thread per eigenvalue). Their reference is
:func:`jaxmg.kernels.two_stage.band_to_tridiagonal_reference`; the composition is
:func:`jaxmg.kernels.two_stage.eigvalsh`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import _library, per_matrix


def available() -> bool:
    """Whether the loaded native library has the band kernels (an NVIDIA GPU is needed to run them)."""
    return bool(_library.capabilities().get("band"))


def band_to_tridiagonal(ab: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(d, e)`` of the Hermitian tridiagonal ``Q^H B Q`` of the band matrix in lower band
    storage ab ((..., b + 1, N), float32 to complex128): d (..., N) real, e (..., N - 1) ab's
    dtype. Not differentiable."""
    _library.register()
    b, n = ab.shape[-2] - 1, ab.shape[-1]
    real = jnp.finfo(ab.dtype).dtype
    scratch = _library._native_module().sb2st_scratch_bytes(n, b, jnp.dtype(ab.dtype).itemsize)
    d, e, _ = per_matrix.call("jaxmg_sb2st", [jax.ShapeDtypeStruct((n,), real),
                                              jax.ShapeDtypeStruct((max(n - 1, 0),), ab.dtype),
                                              jax.ShapeDtypeStruct((scratch,), jnp.uint8)])(ab)
    return d, e


def tridiagonal_eigvalsh(d: jax.Array, e: jax.Array) -> jax.Array:
    """The eigenvalues, ascending, of the real symmetric tridiagonal (d (..., N), e (..., N - 1)
    real, float32 or float64), by bisection on Sturm counts, one GPU thread per eigenvalue."""
    _library.register()
    de = jnp.stack([d, jnp.pad(e, [(0, 0)] * (e.ndim - 1) + [(0, 1)])], axis=-2)
    w, = per_matrix.call("jaxmg_tridiagonal_bisection", [jax.ShapeDtypeStruct(d.shape[-1:], d.dtype)])(de)
    return w
