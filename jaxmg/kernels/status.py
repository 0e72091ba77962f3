"""The status every operation returns, defined once for every backend.

* :data:`OK` (0): success.
* A positive value is LAPACK's ``info``: for a Cholesky factorisation the order of the first
  leading minor that is not positive definite (``?potrf``); for LU the 1-based index of the
  first exactly zero pivot of U (``?getrf``); for QR the first zero diagonal entry of R.
* :data:`NOT_FINITE` (-1): a result is not finite for another reason (for example an
  eigensolver given NaN).

Whenever the status is not :data:`OK`, the operation's outputs are NaN. Status values are
int32 scalars, replicated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

OK = 0
NOT_FINITE = -1


def first_bad_pivot(pivots: jax.Array) -> jax.Array:
    """LAPACK's info from the diagonal of a triangular factor: the 1-based index of the
    first zero or non-finite entry, else :data:`OK`."""
    bad = ~jnp.isfinite(pivots) | (pivots == 0)
    return jnp.where(jnp.any(bad), jnp.argmax(bad) + 1, OK).astype(jnp.int32)


def finite(*arrays: jax.Array) -> jax.Array:
    """:data:`OK` when every entry of ``arrays`` is finite, else :data:`NOT_FINITE`."""
    ok = jnp.array(True)
    for x in arrays:
        ok = ok & jnp.all(jnp.isfinite(x))
    return jnp.where(ok, OK, NOT_FINITE).astype(jnp.int32)


def either(first: jax.Array, second: jax.Array) -> jax.Array:
    """``first`` where it reports a failure, else ``second``."""
    return jnp.where(first != OK, first, second).astype(jnp.int32)


def masked(status: jax.Array, *outputs):
    """``outputs`` (one array, or a tuple of several), NaN wherever ``status`` is not
    :data:`OK` (integer outputs are left as they are). Elementwise, so each output keeps its
    layout; under ``jax.vmap`` each system follows its own status."""
    bad = status != OK
    out = tuple(x if x is None or not jnp.issubdtype(x.dtype, jnp.inexact)
                else _in_layout_of(x, x + _nan_or_zero(bad, x.dtype)) for x in outputs)
    return out[0] if len(out) == 1 else out


def _in_layout_of(x, y):
    """``y`` with ``x``'s layout recorded (on Explicit axes), so that reverse mode hands the
    cotangent back in that layout whatever layout it arrives in."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    if sharding is None or sharding.mesh.empty or not any(
            t == jax.sharding.AxisType.Explicit for t in sharding.mesh.axis_types):
        return y
    return jax.sharding.reshard(y, sharding)


def _nan_or_zero(bad, dtype):
    """NaN (NaN + NaN i for complex dtypes) where ``bad``, else 0: a scalar added to an output
    (an addition, not ``jnp.where``, so that derivatives pass through in the output's own
    layout: the transpose of a select makes replicated zeros, which Explicit axes reject)."""
    nan = jnp.nan * (1 + 1j) if jnp.issubdtype(dtype, jnp.complexfloating) else jnp.nan
    return jnp.where(bad, jnp.asarray(nan, dtype), jnp.zeros((), dtype))


def solved(status: jax.Array, x: jax.Array):
    """(x, status) of a solve: :data:`NOT_FINITE` where the factorisation succeeded but the
    solution is not finite (NaN or Inf in the right-hand side, or overflow), and x NaN
    wherever the status is not :data:`OK`."""
    status = either(status, finite(x))
    return masked(status, x), status


def cholesky_info(a: jax.Array, factor: jax.Array) -> jax.Array:
    """LAPACK ``?potrf``'s info for Hermitian ``a`` (lower triangle read), given the factor
    that a dense Cholesky returned (NaN when it failed, as JAX's does).

    :data:`OK` when ``factor`` has a positive, finite diagonal. Otherwise the order of the
    first leading minor of ``a`` that is not positive definite, found by an unblocked
    Cholesky that stops at the first pivot that is not positive (``O(N^3)`` scalar steps, run
    only on failure): the same pivots as LAPACK's, up to rounding. :data:`NOT_FINITE` where
    every minor is positive but the factor is not finite (an Inf in ``a``).
    """
    diag = jnp.real(jnp.diagonal(factor))
    ok = jnp.all(jnp.isfinite(diag) & (diag > 0))
    info = _first_failing_minor(a, ok)
    return jnp.where((info == OK) & ~ok, NOT_FINITE, info).astype(jnp.int32)


@jax.custom_batching.custom_vmap
def _first_failing_minor(a: jax.Array, ok: jax.Array) -> jax.Array:
    """Runs only when not ``ok``: ``lax.cond`` skips it, so a factorisation that succeeded pays
    neither a pass over ``a`` nor a copy of it."""
    return jax.lax.cond(ok, lambda a, ok: _zero_like(a), _unblocked_pivots, a, ok)


@_first_failing_minor.def_vmap
def _first_failing_minors(size, in_batched, a, ok):
    """A stack: only where one of its factorisations failed, the search runs over the stack (each
    loop stops at once for the matrices that are ``ok``), on whole matrices: a loop over a stack
    split on Explicit mesh axes is refused by JAX."""
    a = a if in_batched[0] else jnp.broadcast_to(a, (size,) + a.shape)
    ok = ok if in_batched[1] else jnp.broadcast_to(ok, (size,))

    def search(a, ok):
        a, ok = _unsplit(a), _unsplit(ok)
        return jax.vmap(_unblocked_pivots)(a, ok)

    return jax.lax.cond(jnp.all(ok), lambda a, ok: jnp.zeros((size,), jnp.int32), search, a, ok), True


def _unsplit(x):
    """``x`` replicated where it is split over Explicit mesh axes (else as it is)."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty or not any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):
        return x
    return jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))


def _zero_like(a: jax.Array) -> jax.Array:
    """An int32 zero that varies over the same ``shard_map`` axes as ``a`` (loop carries and
    branches must agree there)."""
    return (jnp.isnan(jnp.real(a[..., 0, 0])) & False).astype(jnp.int32)


def _unblocked_pivots(a: jax.Array, ok: jax.Array) -> jax.Array:
    """An unblocked Cholesky of the Hermitian matrix whose lower triangle is ``a``'s, stopping
    at the first pivot that is not positive. It reads only the lower triangle (the pivots and
    the columns below them), so ``a`` is its working copy as it is."""
    n = a.shape[0]
    rows = jnp.arange(n)

    def running(carry):
        j, _, info = carry
        return (j < n) & (info == OK) & ~ok

    def step(carry):
        j, work, _ = carry
        pivot = jnp.real(work[j, j])
        bad = ~(pivot > 0)  # NaN included
        scale = jnp.sqrt(jnp.where(bad, 1.0, pivot)).astype(work.dtype)
        column = jnp.where(rows > j, work[:, j], 0) / scale
        work = work - jnp.outer(column, jnp.conj(column))
        return j + 1, work, jnp.where(bad, j + 1, OK).astype(jnp.int32)

    zero = _zero_like(a)
    _, _, info = jax.lax.while_loop(running, step, (zero, a, zero + OK))
    return info
