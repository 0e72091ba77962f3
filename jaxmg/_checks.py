"""Argument checks shared by every operation.

Each check runs at trace time on shapes and dtypes only, and raises a
``TypeError`` or ``ValueError`` whose message names the argument and says how
to fix it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SUPPORTED_DTYPES = (
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.complex64),
    np.dtype(np.complex128),
)
BACKENDS = ("auto", "portable", "native")


def as_array(value, name: str) -> Any:
    """Return ``value`` as something with ``.shape`` and ``.dtype``: JAX arrays and tracers pass
    through; NumPy arrays and scalars take the dtype that ``jnp.asarray`` gives them (float64
    becomes float32 unless ``jax_enable_x64`` is on) and stay on the host, so that an eager call
    sees the dtypes that ``jax.jit`` gives its arguments; anything else goes through
    ``jnp.asarray``."""
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value, dtype=jax.dtypes.canonicalize_dtype(value.dtype))
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        check_x64(value, name)
        return value
    try:
        return jnp.asarray(value)
    except (TypeError, ValueError) as err:  # jnp.asarray(None) is a ValueError
        raise TypeError(f"{name} must be an array, got {type(value).__name__}.") from err


def check_x64(x, name: str) -> None:
    """A JAX array (or tracer) ``x`` of a 64-bit floating dtype that the current x64 mode does not
    offer (float64 or complex128 made while ``jax_enable_x64`` was on, passed inside
    ``jax.enable_x64(False)``) is refused: JAX's own functions keep its dtype, which jaxmg's
    kernels cannot (every array that they make takes the mode's 32-bit dtype), and converting it
    would lose precision unasked. The message names the argument and both fixes."""
    dtype = np.dtype(x.dtype)
    available = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if jnp.issubdtype(dtype, jnp.inexact) and dtype != available:
        raise TypeError(
            f"{name} has dtype {dtype}, which 64-bit mode, off here, does not offer (an array made while "
            f"jax_enable_x64 was on); convert it with {name}.astype(jnp.{available}), or call with 64-bit mode "
            f"on (inside jax.enable_x64(True), or after jax.config.update('jax_enable_x64', True))."
        )


def inexact_dtype(*dtypes) -> np.dtype:
    """The dtype to which JAX's ``jnp.linalg`` and ``jax.scipy.linalg`` promote arguments of
    ``dtypes`` (dtypes, arrays or scalars): their JAX result type, where it is an integer or
    boolean the float of JAX's own table (float64 for 64-bit integers, float32 for the others,
    whatever ``jax_enable_x64`` says), canonical for the current x64 mode."""
    kinds = {(np.dtype(x.dtype), bool(getattr(x, "weak_type", False))) for x in dtypes if hasattr(x, "dtype")}
    if len(kinds) == 1 and len(dtypes) > 0 and all(hasattr(x, "dtype") for x in dtypes):
        (dtype, weak), *_ = kinds
        if not weak and jnp.issubdtype(dtype, jnp.inexact):  # arrays of one inexact dtype: their own
            return np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    dtype = np.dtype(jax.dtypes.result_type(*dtypes))
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = np.dtype(np.float64 if dtype.itemsize == 8 and dtype.kind in "iu" else np.float32)
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _available() -> str:
    """The supported dtypes that the current x64 mode offers (float32 and complex64 without it)."""
    names = dict.fromkeys(str(jax.dtypes.canonicalize_dtype(d)) for d in SUPPORTED_DTYPES)
    return ", ".join(names)


def check_dtype(x, name: str, operation: str | None = None) -> None:
    """``x`` must be float32, float64, complex64 or complex128. With ``operation`` (the
    factorisation's family: "cholesky", "lu", "eigh", ...) the message begins as JAX's own
    ("cholesky does not accept dtype float16"), then names the argument and the conversion to a
    dtype that the current x64 mode offers."""
    if np.dtype(x.dtype) not in SUPPORTED_DTYPES:
        others = _available().removeprefix("float32, ")
        fix = f"convert it with {name}.astype(jnp.float32) (or {others})."
        if operation is None:
            raise TypeError(f"{name} has dtype {x.dtype}, which jaxmg does not support; {fix}")
        raise TypeError(f"{operation} does not accept dtype {x.dtype} (argument {name}); {fix}")


def of_dtype(x, dtype) -> Any:
    """``x`` in ``dtype`` where ``x`` is weakly typed (the type of a Python scalar, which
    ``jnp.full(n, 1.0)`` and ``jnp.where(mask, 1.0, 0.0)`` give) and JAX promotes it to ``dtype``
    (a weak float next to a float32 or complex matrix), as JAX's own operations read it whatever
    ``jax_enable_x64`` says; else ``x`` unchanged."""
    if getattr(x, "weak_type", False) and x.dtype != dtype and jax.dtypes.result_type(x, dtype) == dtype:
        return x.astype(dtype)
    return x


def check_same_dtype(x, name: str, dtype, ref_name: str) -> None:
    """``x`` must have the dtype ``dtype`` of argument ``ref_name``. The message's fix converts
    ``x`` to that dtype (also where x's own dtype is one that jaxmg does not take), except for a
    complex ``x`` next to a real ``ref_name``, which would lose its imaginary part: there both
    take their complex dtype."""
    if x.dtype == dtype:
        return
    fix = f"convert {name} with {name}.astype({ref_name}.dtype)"
    if jnp.issubdtype(x.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
        common = inexact_dtype(x.dtype, dtype)
        fix = (
            f"a real {ref_name} with a complex {name} is solved in complex arithmetic: convert both with "
            f".astype(jnp.{common}) ({name}.astype({ref_name}.dtype) would drop {name}'s imaginary part)"
        )
    raise TypeError(f"{name} has dtype {x.dtype} but {ref_name} has dtype {np.dtype(dtype)}; {fix}.")


def check_matrix(x, name: str, *, square: bool = False, tall: bool = False) -> None:
    """``x`` must be a rank-2 matrix; square, or with at least as many rows as columns. Empty
    matrices (a dimension 0) are accepted: they take the local route, where the results are
    JAX's (empty factors and solutions, det 1)."""
    if x.ndim != 2:
        raise ValueError(
            f"{name} must be a matrix (rank 2), got shape {tuple(x.shape)} (rank {x.ndim}); "
            f"use jax.vmap for a batch of matrices."
        )
    m, n = x.shape
    if square and m != n:
        raise ValueError(f"{name} must be square, got shape {tuple(x.shape)}.")
    if tall and m < n:
        raise ValueError(
            f"{name} must have at least as many rows as columns (M >= N) for this decomposition, "
            f"got shape {tuple(x.shape)}; for the polar decomposition of a wide matrix, decompose "
            f"{name}.conj().T = u h, which gives {name} = h u^H (the left polar decomposition, "
            f"jaxmg.scipy.linalg.polar(a, side='left'))."
        )


def check_rhs(b, name: str, rows: int, a_name: str = "a") -> None:
    """``b`` must be a vector of length ``rows`` or a matrix with ``rows`` rows."""
    if b.ndim not in (1, 2):
        raise ValueError(
            f"{name} must be a vector (N,) or a matrix (N, NRHS), got shape {tuple(b.shape)} "
            f"(rank {b.ndim}); use jax.vmap for a batch of right-hand sides."
        )
    if b.shape[0] != rows:
        batch = (
            f"; for one right-hand side per row of {name} pass {name}.T, or map them with jax.vmap (one per "
            f"matrix of a module made under jax.vmap: jax.vmap(lambda m, b: m.solve(b))(module, {name}))"
            if b.ndim == 2 and b.shape[1] == rows
            else ""
        )
        raise ValueError(
            f"{name} has {b.shape[0]} rows but {a_name} has {rows}; {name} must have shape ({rows},) or "
            f"({rows}, NRHS){batch}."
        )


def check_tile(tile) -> None:
    """``T_A`` must be None or a positive integer."""
    if tile is None:
        return
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)):
        raise TypeError(f"T_A must be a positive int or None (automatic), got {tile!r}.")
    if tile < 1:
        raise ValueError(f"T_A must be at least 1, got {tile}; pass T_A=None to choose it automatically.")


def check_backend(backend) -> None:
    """``backend`` must be one of :data:`BACKENDS`."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")


def check_flag(value, name: str) -> None:
    """Keyword flags are plain Python bools, fixed at trace time."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}.")
