"""Differentiable solves with a saved factor, through ``jax.lax.custom_linear_solve``.

For x = A^-1 b with the factor of A saved: the tangent is x' = A^-1 (b' - A' x) and the
cotangents are b_bar = A^-H x_bar (one more solve with the same factor, never a
refactorisation) and A_bar = -b_bar x^H, an outer product in a's layout (it is the transpose
of the product A' x). Higher orders follow, since every piece is itself differentiable. The
factor is never differentiated: all derivatives with respect to ``a`` flow through the product
``a @ x``. For a factorisation that reads only the lower triangle of ``a`` (Cholesky), that
product is with the Hermitian matrix it read, ``tril(a, -1) + tril(a, -1)^H + Re diag(a)``, so
the derivatives are exactly those of the computed function, also for ``a`` that is not exactly
Hermitian.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from .. import _sharded
from ..kernels.varying import varying_like
from . import _dist


def linear_solve(
    plan,
    a: Optional[jax.Array],
    b: jax.Array,
    spec,
    solve: Callable,
    transpose_solve: Callable,
    *,
    symmetric: bool,
    trans: str = "N",
    reads_lower: bool = False,
) -> jax.Array:
    """x = op(A)^-1 b, differentiable in ``a`` and ``b``; op by ``trans`` ("N", "T", "C").

    ``solve(r)`` and ``transpose_solve(r)`` apply op(A)^-1 and op(A)^-T with the saved factor to a
    right-hand side in layout ``spec`` (None: as it is). ``a`` is the operator as the caller
    holds it (None when it was donated: then no derivative with respect to it exists and none is
    taken); ``plan`` (``jaxmg._plan.Plan``) lays it out. ``reads_lower``: the factorisation read
    only a's lower triangle, so the operator is the Hermitian matrix read from it.
    """
    layout = rhs_layout(plan, spec)
    # inside a shard_map, b varies over every axis that a does (as x does): JAX's tangent of the
    # solve adds a's product to b and needs their varying axes equal
    b = b if a is None else varying_like(a, b)

    def matvec(x):
        if a is None:
            return jnp.zeros_like(x)  # a was consumed: only b can carry derivatives
        operator = plan.enter(a)
        if reads_lower:  # trans is "N": the operator is Hermitian
            return _dist.lower_read_matvec(operator, x, plan.layout, layout)
        return _dist.matvec(operator, x, layout, trans)

    return jax.lax.custom_linear_solve(
        matvec,
        b,
        solve=placed_solve(solve, layout),
        transpose_solve=placed_solve(transpose_solve, layout),
        symmetric=symmetric,
    )


def rhs_layout(plan, spec) -> Optional[NamedSharding]:
    return None if spec is None or plan.mesh is None else NamedSharding(plan.mesh, spec)


def placed_solve(solve: Callable, layout: Optional[NamedSharding]) -> Callable:
    """``solve`` as ``jax.lax.custom_linear_solve`` calls it (``(matvec, r) -> x``), with ``r``
    placed in ``layout`` first: cotangents reach the transposed solve in any layout."""
    if layout is None:
        return lambda _, r: solve(r)
    return lambda _, r: solve(_sharded.pinned(r, layout.spec, layout.mesh))


def hermitian_transpose_solve(solve: Callable, dtype) -> Callable:
    """A^-T from A^-1 for Hermitian A: A^T = conj(A), so A^-T r = conj(A^-1 conj(r))."""
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        return solve
    return lambda r: jnp.conj(solve(jnp.conj(r)))
