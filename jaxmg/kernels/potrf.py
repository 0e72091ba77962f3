"""The Cholesky factorisation of one device's own solver, with LAPACK's ``info``.

``?potrf`` reports the order of the first leading minor that is not positive definite, but
``jax.lax.linalg.cholesky`` drops it (it returns NaN instead). :func:`potrf` calls the same
``?potrf`` handler that JAX's Cholesky lowers to (LAPACK on a CPU, cuSOLVER on an NVIDIA GPU,
hipSOLVER on an AMD one) and keeps its ``info``: the status needs no second pass over the
matrix, and the factor overwrites ``a``'s buffer wherever ``a`` is not used afterwards.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_DTYPES = frozenset(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def potrf(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(factor, info) of the Hermitian matrices ``a`` (..., n, n), of which only the lower
    triangle is read.

    ``factor`` holds L (A = L L^H) in its lower triangle; its strict upper triangle is ``a``'s,
    untouched (never read). ``info`` (int32, shape ``a.shape[:-2]``) is LAPACK's: 0 on success,
    else the order of the first leading minor that is not positive definite; where it is not 0
    the factor's entries are unspecified. The factor is laid out column-major, as the triangular
    solves that follow read it (XLA lays ``a`` out that way where it makes it, and transposes it
    in the copy it makes anyway where ``a`` must be kept).
    """
    if jnp.dtype(a.dtype) not in _DTYPES:
        raise TypeError(f"a must be float32, float64, complex64 or complex128 for a Cholesky factorisation; got {a.dtype}.")
    factor, info = jax.lax.platform_dependent(a, cpu=_lapack, cuda=_solver("cusolver"), rocm=_solver("hipsolver"))
    return _varying_like(a, factor), _varying_like(a, info)


def _call(target: str, a: jax.Array, **attributes) -> tuple[jax.Array, jax.Array]:
    column_major = tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2)  # major-to-minor
    call = jax.ffi.ffi_call(
        target, (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(a.shape[:-2], jnp.int32)),
        input_layouts=[column_major], output_layouts=[column_major, None], input_output_aliases={0: 0},
        vmap_method="broadcast_all")
    factor, info = call(a, **attributes)
    return factor, info


def _varying_like(a: jax.Array, x: jax.Array) -> jax.Array:
    """``x`` marked as varying over the ``shard_map`` axes that ``a`` varies over (a foreign
    call's results carry none: without them, derivatives inside a ``shard_map`` disagree)."""
    axes = tuple(sorted(_varying_axes(a)))
    if not axes:
        return x
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, axes, to="varying")
    return jax.lax.pvary(x, axes)


def _varying_axes(a: jax.Array) -> frozenset:
    """The manual axes over which ``a``'s value varies (``vma``; ``manual_axis_type.varying``
    in newer JAX)."""
    aval = jax.typeof(a)
    manual = getattr(aval, "manual_axis_type", None)
    if manual is not None:
        return frozenset(manual.varying)
    return frozenset(getattr(aval, "vma", ()) or ())


def _lapack(a):
    from jaxlib import lapack  # loads LAPACK's handlers (as JAX's own lowering does)

    return _call(lapack.prepare_lapack_call("potrf_ffi", a.dtype), a, uplo=np.uint8(ord("L")))


def _solver(prefix: str):
    def factor(a):
        return _call(f"{prefix}_potrf_ffi", a, lower=True)
    return factor
