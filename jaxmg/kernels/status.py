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


def cholesky_info(a: jax.Array, factor: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(factor, info): LAPACK ``?potrf``'s info for Hermitian ``a`` (lower triangle read), given
    the factor that a dense Cholesky returned (NaN when it failed, as JAX's does).

    info is :data:`OK` when ``factor`` has a positive, finite diagonal. Otherwise it is the order
    of the first leading minor of ``a`` that is not positive definite, found by an unblocked
    Cholesky that stops at the first pivot that is not positive (``O(N^3)`` scalar steps, run
    only on failure): the same pivots as LAPACK's, up to rounding; :data:`NOT_FINITE` where every
    minor is positive but the factor is not finite (an Inf in ``a``). The search works in the
    factor's own buffer, so it holds no copy of ``a``: the factor comes back as it is on success,
    and with unspecified entries otherwise (the caller masks it with the status).
    """
    diag = jnp.real(jnp.diagonal(factor, axis1=-2, axis2=-1))
    ok = jnp.all(jnp.isfinite(diag) & (diag > 0), axis=-1)
    factor, info = _first_failing_minor(a, factor, ok)
    return factor, jnp.where((info == OK) & ~ok, NOT_FINITE, info).astype(jnp.int32)


@jax.custom_batching.custom_vmap
def _first_failing_minor(a: jax.Array, work: jax.Array, ok: jax.Array):
    """(work, info) of :func:`_unblocked_pivots`: no step runs where ``ok``."""
    return _unblocked_pivots(a, work, ok)


@_first_failing_minor.def_vmap
def _first_failing_minors(size, in_batched, a, work, ok):
    """A stack: one loop over the stack, each matrix stopping at its own first bad pivot (no step
    runs where every factorisation succeeded)."""
    a, work, ok = (x if batched else jnp.broadcast_to(x, (size,) + x.shape)
                   for x, batched in zip((a, work, ok), in_batched))
    return _unblocked_pivots(a, work, ok), (True, True)


def _zero_like(a: jax.Array) -> jax.Array:
    """An int32 zero for each matrix of ``a`` that varies over the same ``shard_map`` axes as
    ``a`` (loop carries must agree there)."""
    return (jnp.isnan(jnp.real(a[..., 0, 0])) & False).astype(jnp.int32)


def _unblocked_pivots(a: jax.Array, work: jax.Array, ok: jax.Array):
    """An unblocked Cholesky of the Hermitian matrices (..., n, n) whose lower triangles are
    ``a``'s, each stopping at its first pivot that is not positive; (work, info) with info the
    1-based order of that pivot (:data:`OK` where none). It runs in ``work`` (the factor's
    buffer: ``a`` is copied into it on the first step) and reads only lower triangles. No step
    runs where ``ok``: then ``work`` comes back as it is."""
    n = a.shape[-1]
    rows = jnp.arange(n)

    def unfinished(carry):
        j, _, info = carry
        return jnp.any((j < n) & (info == OK) & ~ok)

    def step(carry):
        j, work, info = carry
        running = (info == OK) & ~ok & (j < n)
        live = running[..., None, None]
        work = jnp.where(live & (j == 0)[..., None, None], a, work)
        at = jnp.minimum(j, n - 1)
        pivot = jnp.real(jnp.take_along_axis(jnp.diagonal(work, axis1=-2, axis2=-1), at[..., None], -1))[..., 0]
        bad = ~(pivot > 0)  # NaN included
        scale = jnp.sqrt(jnp.where(bad, 1.0, pivot)).astype(work.dtype)
        column = jnp.take_along_axis(work, at[..., None, None], -1)[..., 0]
        column = jnp.where(rows > j[..., None], column, 0) / scale[..., None]
        update = column[..., :, None] * jnp.conj(column)[..., None, :]
        work = jnp.where(live, work - update, work)
        info = jnp.where(running & bad, j + 1, info).astype(jnp.int32)
        return jnp.where(running & ~bad, j + 1, j), work, info

    zero = _zero_like(a)
    _, work, info = jax.lax.while_loop(unfinished, step, (zero, work, zero + OK))
    return work, info
