"""The factorisations of one device's own dense solver, called directly: ``?potrf`` and
``?getrf`` through the same handlers that ``jax.lax.linalg.cholesky`` and ``lu`` lower to (LAPACK
on a CPU, cuSOLVER on an NVIDIA GPU, hipSOLVER on an AMD one).

Called directly, they keep what JAX's lowerings drop or add: ``potrf``'s ``info`` (the order of
the first leading minor that is not positive definite, where JAX returns NaN), so that the status
needs no second pass over the matrix; and no masking pass over the factor, which would write a
second matrix. Each factor overwrites ``a``'s buffer wherever ``a`` is not used afterwards, in
the column-major layout that the triangular solves that follow read. On an NVIDIA GPU with the
native library loaded, ``a``'s row-major buffer is rearranged in place for the handler
(:mod:`.relayout`), so that a donated ``a``, or one that is not used afterwards, is
factored with no second matrix, and a kept one in the one copy XLA makes of it; elsewhere XLA
transposes ``a`` into that copy (or lays it out column-major where it makes it).

On a platform with none of these handlers (a TPU, for example) the factorisations are JAX's own
(``jax.lax.linalg.cholesky`` and ``lu``, :func:`own_potrf` and :func:`own_getrf`), with the same
results, derivative rules and statuses.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..._checks import check_dtype
from ..._dense import adjoint
from .. import status as _status
from ..triangular import triangular_solve
from ..varying import varying_like
from . import per_matrix, relayout


@jax.custom_jvp
def potrf(a: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """(factor, info) of the Hermitian matrices ``a`` (..., n, n), of which only the lower
    triangle is read.

    ``factor`` holds L (A = L L^H) in its lower triangle; its strict upper triangle is
    unspecified (never read). ``info`` (int32, shape ``a.shape[:-2]``) is LAPACK's: 0 on success,
    else the order of the first leading minor that is not positive definite; where it is not 0
    the factor's entries are unspecified. Differentiable: L's tangent (lower triangular) from
    the factor, L' = L Phi(L^-1 H(a') L^-H), Phi the lower triangle with half the diagonal.
    ``a`` may be a NumPy array: JAX evaluates the known primal on host arrays when it linearizes.
    """
    a = jnp.asarray(a)
    out = (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(a.shape[:-2], jnp.int32))
    return _factorization(
        "potrf", a, out, cpu={"uplo": np.uint8(ord("L"))}, gpu={"lower": True}, in_place=relayout.SYMMETRIC_FROM_LOWER
    )


@jax.custom_jvp
def getrf(a: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """(lu, pivots) of the square matrices ``a`` (..., n, n): P a = L U with partial pivoting,
    L (unit lower) and U packed in ``lu``; ``pivots`` (int32, (..., n)) 0-based: row i was swapped
    with row ``pivots[i]``. A zero pivot leaves U singular (its diagonal says where).
    Differentiable: with X = L^-1 P a' U^-1, L' = L stril(X) and U' = triu(X) U, packed.
    ``a`` may be a NumPy array, as for :func:`potrf`."""
    a = jnp.asarray(a)
    out = (
        jax.ShapeDtypeStruct(a.shape, a.dtype),
        jax.ShapeDtypeStruct(a.shape[:-1], jnp.int32),
        jax.ShapeDtypeStruct(a.shape[:-2], jnp.int32),
    )
    lu, pivots, _ = _factorization("getrf", a, out, in_place=relayout.TRANSPOSE)
    return lu, pivots - 1  # LAPACK's pivots are 1-based


def _solve(t, b, *, lower: bool, unit: bool = False, right: bool = False, trans: str = "N"):
    """op(T)^-1 b (or b op(T)^-1 where ``right``) for the stored triangle of ``t``."""
    return triangular_solve(
        t,
        varying_like(t, b),
        left_side=not right,
        lower=lower,
        unit_diagonal=unit,
        transpose_a=trans != "N",
        conjugate_a=trans == "C",
    )


@potrf.defjvp
def _potrf_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    factor, info = potrf(a)
    low = jnp.tril(factor)
    below = jnp.tril(a_dot, -1)  # H(a'): the Hermitian matrix that a' makes through the lower triangle read
    sigma = below + adjoint(below) + _diagonal_of(jnp.real(a_dot).astype(a.dtype))
    inner = _solve(low, _solve(low, sigma, lower=True, right=True, trans="C"), lower=True)  # L^-1 H(a') L^-H
    phi = jnp.tril(inner, -1) + 0.5 * _diagonal_of(inner)
    l_dot = jnp.matmul(low, phi, precision=jax.lax.Precision.HIGHEST)
    return (factor, info), (l_dot, jax.custom_derivatives.zero_from_primal(info))


@getrf.defjvp
def _getrf_jvp(primals, tangents):
    (a,), (a_dot,) = primals, tangents
    lu, pivots = getrf(a)
    return (lu, pivots), (pivoted_lu_tangent(lu, pivots, a_dot), jax.custom_derivatives.zero_from_primal(pivots))


def pivoted_lu_tangent(lu: jax.Array, pivots: jax.Array, a_dot: jax.Array) -> jax.Array:
    """The tangent of LAPACK's packed factor ``lu`` (..., n, n) of ``P a = L U`` along ``a'``
    (..., n, n), with ``pivots`` (..., n) getrf's 0-based row swaps: :func:`packed_lu_tangent` of
    ``P a'`` on one device."""
    permutation = jax.lax.linalg.lu_pivots_to_permutation(pivots, lu.shape[-1])
    permuted = jnp.take_along_axis(a_dot, permutation[..., :, None], axis=-2)  # P a'
    return packed_lu_tangent(lu, permuted)


def _matmul(x, y):
    return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)


def packed_lu_tangent(lu: jax.Array, permuted: jax.Array, solve=_solve, matmul=_matmul) -> jax.Array:
    """The tangent of the packed factor ``lu`` of ``P a = L U`` (L unit lower, U upper) given
    ``permuted = P a'``: with ``X = L^-1 P a' U^-1``, ``L' = L stril(X)`` and ``U' = triu(X) U``,
    packed. ``solve(t, b, lower=, unit=, right=)`` solves with a triangle of ``t`` (on the left,
    or on the right where ``right``) and ``matmul`` multiplies: one device's by default, over a
    mesh where the factor is distributed."""
    x = solve(lu, solve(lu, permuted, lower=True, unit=True), lower=False, right=True)  # L^-1 P a' U^-1
    unit_lower = jnp.tril(lu, -1) + jnp.eye(lu.shape[-1], dtype=lu.dtype)
    return matmul(unit_lower, jnp.tril(x, -1)) + matmul(jnp.triu(x), jnp.triu(lu))


def _diagonal_of(x: jax.Array) -> jax.Array:
    """x's diagonal as a matrix (zero elsewhere), for stacks (..., n, n) too."""
    return jnp.diagonal(x, axis1=-2, axis2=-1)[..., None] * jnp.eye(x.shape[-1], dtype=x.dtype)


def _factorization(
    name: str, a: jax.Array, out: tuple, cpu=None, gpu=None, in_place: int = relayout.TRANSPOSE
) -> tuple:
    """The ``?{name}`` handler of ``a``'s platform on ``a`` (overwritten in place), with results
    ``out`` (the first is the factor, column-major) and the attributes of each platform.

    The handlers read ``a`` column-major. On an NVIDIA GPU with the native library loaded, the
    row-major ``a`` is first rearranged in its own buffer by ``relayout(a, in_place)``
    (:mod:`.relayout`), whose transpose the handler then reads as the same bytes:
    ``TRANSPOSE`` for a handler that reads the whole matrix, ``SYMMETRIC_FROM_LOWER`` for one
    that reads its lower triangle. Elsewhere XLA transposes ``a`` into the copy it makes."""
    check_dtype(a, "a", name)
    # a weakly typed a (jnp.full((n, n), 1.0)) would make JAX's own branch's pivots weak, which
    # 64-bit mode promotes to int64 where LAPACK's are int32: every branch reads a strongly typed a
    a = a.astype(a.dtype)
    if a.shape[-1] == 0:  # an empty factor: nothing to compute (LAPACK's handlers would divide by n)
        return tuple(varying_like(a, _empty_result(a, o)) for o in out)

    def call(target, attributes):  # split over the devices where the stack lies (per_matrix)
        return per_matrix.call(target, out, column_major=True, input_output_aliases={0: 0}, **(attributes or {}))

    def lapack(x):
        from jaxlib import lapack  # loads LAPACK's handlers (as JAX's own lowering does)

        return call(lapack.prepare_lapack_call(f"{name}_ffi", x.dtype), cpu)(x)

    def cusolver(x):
        if relayout.available():
            x = jnp.swapaxes(relayout.relayout(x, in_place), -1, -2)  # column-major: the same bytes
        return call(f"cusolver_{name}_ffi", gpu)(x)

    own = {"potrf": own_potrf, "getrf": own_getrf}[name]
    results = by_platform(a, cpu=lapack, cuda=cusolver, rocm=call(f"hipsolver_{name}_ffi", gpu), default=own)
    return tuple(varying_like(a, x) for x in results)


def _empty_result(a: jax.Array, out: jax.ShapeDtypeStruct) -> jax.Array:
    """The zeros ``out`` (shape ``a.shape[:-2] + ...``) of an empty ``a`` made from ``a`` (a sum
    over none of its entries), so that under ``jax.vmap`` it is batched where ``a`` is, as the
    tangents that the derivative rules compute from ``a``'s tangent are."""
    zero = jnp.sum(jnp.real(a), axis=(-2, -1)).astype(out.dtype)
    return jnp.broadcast_to(zero.reshape(zero.shape + (1,) * (len(out.shape) - zero.ndim)), out.shape)


def by_platform(x: jax.Array, **branches):
    """``jax.lax.platform_dependent(x, **branches)``: the branch of the platform that the call is
    lowered for, ``default`` on a platform that has no branch of its own."""
    return jax.lax.platform_dependent(x, **branches)


def own_potrf(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``?potrf``'s (factor, info) from JAX's own ``jax.lax.linalg.cholesky`` (any platform), of
    which only the lower triangle of ``a`` is read. JAX's factor is NaN where the factorisation
    fails (wholly, or from the failing column on), so ``info`` is the order of the first diagonal
    entry of L that is not finite and positive: not 0 exactly where LAPACK's is not, and at most
    LAPACK's order of the first leading minor that is not positive definite."""
    factor = jax.lax.linalg.cholesky(a, symmetrize_input=False)
    return factor, _status.cholesky_status(jnp.zeros(a.shape[:-2], jnp.int32), factor)


def own_getrf(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``?getrf``'s (lu, pivots, info) from JAX's own ``jax.lax.linalg.lu`` (any platform):
    pivots 1-based as LAPACK's, and info the 1-based index of U's first zero pivot, else 0."""
    lu, pivots, _ = jax.lax.linalg.lu(a)
    return lu, pivots + 1, _status.first_bad_pivot(jnp.diagonal(lu, axis1=-2, axis2=-1))
