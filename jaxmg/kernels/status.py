"""The status every operation returns, defined once for every backend.

* :data:`OK` (0): success.
* A positive value is LAPACK's ``info``: for a Cholesky factorisation the order of the first
  leading minor that is not positive definite (``?potrf``); for LU the 1-based index of the
  first exactly zero pivot of U (``?getrf``). A QR factorisation exists for every finite matrix,
  rank deficient or not (Householder QR, as LAPACK's ``?geqrf``), so its status flags only a
  non-finite R (:func:`finite_diagonal`). Least-squares solves by QR (``jaxmg.least_squares``,
  ``jaxmg.QR.solve``, ``jaxmg.lineax.QR``) report numerical rank deficiency this way
  (:func:`rank_deficient`): the 1-based index of the first diagonal entry of R with
  ``|R_ii| < rcond * max_j |R_jj|`` (default ``rcond``: ``max(M, N) * eps`` of the dtype,
  :func:`default_rcond`).
* :data:`NOT_FINITE` (-1): a result is not finite for another reason (for example an
  eigensolver given NaN).
* :data:`CHECK_FAILED` (-2): a finite result failed its check: the distributed route's result
  check (``jaxmg.modules.check``) found its residual along a probe vector above 30 times
  ``N eps`` times the norms that bound a correct result's; or a wide least-squares solution's
  backward error ||a x - b|| / ((||a|| ||x|| + ||b||) max(M, N) eps) exceeds 30 (on every route).

Whenever the status is not :data:`OK`, the operation's outputs are NaN. Status values are
int32 scalars, replicated (one per matrix for a stack: shape ``(...)`` for matrices
``(..., M, N)``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .. import _sharded

OK = 0
NOT_FINITE = -1
CHECK_FAILED = -2


def first_bad_pivot(pivots: jax.Array) -> jax.Array:
    """LAPACK's info from the diagonal of a triangular factor: the 1-based index of the
    first zero or non-finite entry, else :data:`OK`."""
    return _first(~jnp.isfinite(pivots) | (pivots == 0))


def finite_diagonal(diagonal: jax.Array) -> jax.Array:
    """:data:`OK` for each matrix whose factor's ``diagonal`` (..., n) is finite, else
    :data:`NOT_FINITE`: the status of a factorisation that exists for every finite matrix (QR),
    where a zero entry is a rank-deficient matrix's exact factor, not a failure."""
    return jnp.where(jnp.all(jnp.isfinite(diagonal), axis=-1), OK, NOT_FINITE).astype(jnp.int32)


def _first(bad: jax.Array) -> jax.Array:
    """The 1-based index of the first True of ``bad`` (..., n) along its last axis, else :data:`OK`
    (always for n = 0: an empty factor has no bad pivot)."""
    if bad.shape[-1] == 0:
        return jnp.full(bad.shape[:-1], OK, jnp.int32)
    return jnp.where(jnp.any(bad, axis=-1), jnp.argmax(bad, axis=-1) + 1, OK).astype(jnp.int32)


def default_rcond(shape: tuple, dtype) -> float:
    """``max(M, N) * eps`` of ``dtype`` for an (M, N) matrix: the relative size below which a
    diagonal entry of R counts as zero (``jnp.linalg.lstsq``'s default for singular values)."""
    return max(shape[-2:]) * float(jnp.finfo(dtype).eps)


def checked_rcond(rcond):
    """``rcond`` as a Python float (or None), checked: it is a static argument of the call."""
    if rcond is None:
        return None
    try:
        value = float(rcond)
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError) as error:
        raise TypeError(
            f"rcond must be None or a Python float (a value known when the call is traced), "
            f"got {rcond!r}; pass it as a number, not a traced array."
        ) from error
    if value != value:
        raise ValueError("rcond must be None or a number, got NaN.")
    return value


def rcond_threshold(rcond, shape: tuple, dtype) -> float:
    """The threshold of :func:`rank_deficient` for a checked ``rcond``, as ``jnp.linalg.lstsq``
    reads it: None gives :func:`default_rcond`, a negative value ``eps`` of the dtype."""
    if rcond is None:
        return default_rcond(shape, dtype)
    return float(jnp.finfo(dtype).eps) if rcond < 0 else rcond


def rank_deficient(diagonal: jax.Array, rcond: float) -> jax.Array:
    """The rank test of a least-squares solve on R's ``diagonal`` (..., n): the 1-based index of
    the first entry that is zero, not finite or below ``rcond`` times the largest magnitude
    (``a`` is numerically rank deficient), else :data:`OK`.

    Unpivoted QR puts a near-zero diagonal entry wherever a column lies in the span of the
    columns before it, which is what this test sees; a triangular R whose diagonal is large while
    its smallest singular value is not (Kahan's matrix) passes it. The SVD-based
    ``jaxmg.numpy.linalg.lstsq`` handles any rank. An empty ``diagonal`` (n = 0) has full rank."""
    magnitude = jnp.abs(diagonal)
    largest = jnp.max(magnitude, axis=-1, keepdims=True, initial=0)
    small = magnitude < jnp.asarray(rcond, magnitude.dtype) * largest
    return _first(~jnp.isfinite(diagonal) | (diagonal == 0) | small)


def finite(*arrays: jax.Array) -> jax.Array:
    """:data:`OK` when every entry of ``arrays`` is finite, else :data:`NOT_FINITE`."""
    ok = jnp.array(True)
    for x in arrays:
        ok = ok & jnp.all(jnp.isfinite(x))
    return jnp.where(ok, OK, NOT_FINITE).astype(jnp.int32)


def either(first: jax.Array, second: jax.Array) -> jax.Array:
    """``first`` where it reports a failure, else ``second``."""
    return jnp.where(first != OK, first, second).astype(jnp.int32)


def masked(status: jax.Array, *outputs) -> Any:
    """``outputs`` (one array, or a tuple of several), NaN wherever ``status`` is not
    :data:`OK` (integer outputs are left as they are). Elementwise, so each output keeps its
    layout; under ``jax.vmap`` each system follows its own status, and a stack's statuses
    (shape ``(...)``) mark the outputs' leading axes (``(..., ...)``): matrix by matrix."""
    bad = lax.ne(status, jnp.asarray(OK, status.dtype))
    out = tuple(
        x
        if x is None or not jnp.issubdtype(x.dtype, jnp.inexact)
        else _sharded.typed_like(x, lax.add(x, _nan_or_zero(_leading(bad, x), x)))
        for x in outputs
    )
    return out[0] if len(out) == 1 else out


def _nan_or_zero(bad, x):
    """NaN (NaN + NaN i for complex dtypes) where ``bad``, else -0 (which leaves every number as
    it is when added), broadcast to ``x``: an addend of an output. An addition, not
    ``jnp.where``, so that derivatives pass through in the output's own layout (the transpose of a
    select makes replicated zeros, which Explicit axes reject); and made of ``lax`` primitives
    alone (the square root of -1 is NaN), whose batching rules hold where JAX batches a body that
    was traced one matrix at a time with no mesh (a Lineax solve under ``jax.vmap`` of a stack
    split over Explicit mesh axes), where the batching of a jitted ``jnp`` function fails."""
    real = jnp.finfo(x.dtype).dtype
    value = lax.sqrt(lax.neg(lax.convert_element_type(bad, real)))
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        value = lax.complex(value, value)
    return lax.broadcast_in_dim(value, x.shape, tuple(range(value.ndim))) if value.ndim else value


def _leading(bad, x):
    """``bad`` (the statuses' shape, a prefix of x's) shaped to broadcast over x's trailing axes."""
    return lax.reshape(bad, bad.shape + (1,) * (x.ndim - bad.ndim)) if 0 < bad.ndim < x.ndim else bad


def solved(status: jax.Array, x: jax.Array):
    """(x, status) of a solve: :data:`NOT_FINITE` where the factorisation succeeded but the
    solution is not finite (NaN or Inf in the right-hand side, or overflow), and x NaN
    wherever the status is not :data:`OK`."""
    status = either(status, finite(x))
    return masked(status, x), status


def cholesky_status(info: jax.Array, factor: jax.Array) -> jax.Array:
    """The status of a Cholesky factorisation from ``?potrf``'s ``info`` and its ``factor``
    (..., n, n): ``info`` (the order of the first leading minor that is not positive definite),
    else the order of the first diagonal entry of L that is not finite and positive (a NaN or a
    non-positive pivot that the solver's own test let through), else :data:`OK`."""
    diagonal = jnp.diagonal(factor, axis1=-2, axis2=-1)
    return either(info, _first(~(jnp.isfinite(diagonal) & (jnp.real(diagonal) > 0))))
