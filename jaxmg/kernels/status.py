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

Whenever the status is not :data:`OK`, the operation's outputs are NaN, and so are their
derivatives (:func:`masked`, :func:`derivatives_masked`; a solution's result check masks them
around the solve, ``jaxmg.functional``). Status values are
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


def masked(status: jax.Array, *outputs, derivatives: bool = True) -> Any:
    """``outputs`` (one array, or a tuple of several), NaN wherever ``status`` is not
    :data:`OK` (integer outputs are left as they are), and so are their derivatives: a flagged
    result's tangents and cotangents are NaN, never the finite derivatives of the failed
    factorisation's numbers (which a training step would apply while its loss is NaN).
    Elementwise, so each output keeps its layout; under ``jax.vmap`` each system follows its own
    status, and a stack's statuses (shape ``(...)``) mark the outputs' leading axes
    (``(..., ...)``): matrix by matrix.

    ``derivatives=False`` masks the values alone, for outputs whose derivative rule already
    masks the input tangents by this same status (:func:`masked_tangent`): there the mask costs
    nothing in reverse mode, where scaling an output's cotangent keeps XLA from folding a
    constant one (the gradient of ``sum(w)``) into the rule's products."""
    bad = _failed(status)
    mask = _masked_output if derivatives else _masked_value
    out = tuple(
        x if x is None or not jnp.issubdtype(x.dtype, jnp.inexact) else mask(_leading(bad, x), x) for x in outputs
    )
    return out[0] if len(out) == 1 else out


def masked_tangent(status: jax.Array, tangent: jax.Array) -> jax.Array:
    """``tangent`` (an input's tangent inside a derivative rule, (..., M, N) for statuses
    (...)), NaN wherever ``status`` is not :data:`OK`: a product, linear in the tangent, so
    reverse mode scales the input's cotangent the same way, inside the elementwise pass that
    places it."""
    return _nan_scaled(_leading(_failed(status), tangent), tangent)


def _failed(status: jax.Array) -> jax.Array:
    """True where ``status`` is not :data:`OK`."""
    return lax.ne(status, jnp.asarray(OK, status.dtype))


def _nan_scaled(bad: jax.Array, tangent: jax.Array) -> jax.Array:
    """``tangent`` times 1, or NaN where ``bad`` (shaped to broadcast over it), in its layout."""
    return _sharded.typed_like(tangent, lax.mul(tangent, _one_or_nan(bad, tangent)))


def derivatives_masked(status: jax.Array, *inputs) -> Any:
    """``inputs`` (one array, or a tuple of several; None stays None) unchanged, with tangents
    NaN wherever ``status`` is not :data:`OK`: what a differentiated computation from a saved
    factor reads (the operator, a right-hand side), masked by the factor's status before the
    computation, so that every derivative of its outputs is NaN where they are, and reverse mode
    scales only the inputs' cotangents (inside the elementwise pass that places them), not the
    outputs' (a solve's backward pass then solves with the cotangent it was given, which XLA
    can share with the forward solve)."""
    out = tuple(
        x if x is None or not jnp.issubdtype(x.dtype, jnp.inexact) else _nan_derivatives(status, x) for x in inputs
    )
    return out[0] if len(out) == 1 else out


@jax.custom_jvp
def _nan_derivatives(status: jax.Array, x: jax.Array) -> jax.Array:
    """``x``, with its tangent NaN where ``status`` is not :data:`OK`. The value is a select of
    ``x`` on either side (which XLA folds to ``x``) rather than ``x`` itself, so that where
    ``jax.vmap`` batches the status and not ``x`` (a right-hand side shared by a stack), the value
    is batched as its tangent is."""
    return lax.select(_broadcast(_leading(_failed(status), x), x), x, x)


@_nan_derivatives.defjvp
def _nan_derivatives_jvp(primals, tangents):
    status, x = primals
    return x, masked_tangent(status, tangents[1])


def _masked_value(bad: jax.Array, x: jax.Array) -> jax.Array:
    """``x`` plus NaN where ``bad``, plus -0 elsewhere (every number left as it is); its tangent
    is x's own."""
    return _sharded.typed_like(x, lax.add(x, _nan_or_zero(bad, x)))


@jax.custom_jvp
def _masked_output(bad: jax.Array, x: jax.Array) -> jax.Array:
    """``x`` plus NaN where ``bad``, plus -0 elsewhere (every number left as it is). Its tangent
    is ``x``'s tangent scaled by 1 or NaN: linear, so reverse mode scales the cotangent the same
    way, and the primal's own arithmetic (which XLA fuses into the operation's last kernel) is
    unchanged by differentiation."""
    return _masked_value(bad, x)


@_masked_output.defjvp
def _masked_output_jvp(primals, tangents):
    bad, x = primals
    x_dot = tangents[1]
    return _masked_output(bad, x), _nan_scaled(bad, x_dot)


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
    return _broadcast(value, x)


def _one_or_nan(bad, x):
    """1 where not ``bad``, else NaN (NaN + NaN i for complex dtypes), in x's dtype, broadcast to
    ``x``: the factor of a tangent (a product is linear, so its transpose scales the cotangent
    by the same factor; ``lax`` primitives alone, as :func:`_nan_or_zero`)."""
    real = jnp.finfo(x.dtype).dtype
    nan = lax.sqrt(lax.neg(lax.convert_element_type(bad, real)))
    value = lax.add(nan, lax.full((), 1, real))
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        value = lax.complex(value, nan)
    return _broadcast(value, x)


def _broadcast(value, x):
    return lax.broadcast_in_dim(value, x.shape, tuple(range(value.ndim))) if value.ndim else value


def _leading(bad, x):
    """``bad`` (the statuses' shape, a prefix of x's) shaped to broadcast over x's trailing axes."""
    return lax.reshape(bad, bad.shape + (1,) * (x.ndim - bad.ndim)) if 0 < bad.ndim < x.ndim else bad


def solved(status: jax.Array, x: jax.Array):
    """(x, status) of a solve: :data:`NOT_FINITE` where the factorisation succeeded but the
    solution is not finite (NaN or Inf in the right-hand side, or overflow), and x NaN
    wherever the status is not :data:`OK`."""
    status = either(status, finite(x))
    return masked(status, x, derivatives=False), status


def cholesky_status(info: jax.Array, factor: jax.Array) -> jax.Array:
    """The status of a Cholesky factorisation from ``?potrf``'s ``info`` and its ``factor``
    (..., n, n): ``info`` (the order of the first leading minor that is not positive definite),
    else the order of the first diagonal entry of L that is not finite and positive (a NaN or a
    non-positive pivot that the solver's own test let through), else :data:`OK`."""
    diagonal = jnp.diagonal(factor, axis1=-2, axis2=-1)
    return either(info, _first(~(jnp.isfinite(diagonal) & (jnp.real(diagonal) > 0))))
