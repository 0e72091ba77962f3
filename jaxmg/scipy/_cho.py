"""``cho_solve`` with JAX's array factor: two triangular solves with that factor, never a new
factorisation of ``L L^H`` (whose error would grow like cond(L)^2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from ..autodiff import _dist
from ..kernels.triangular import triangular_solve


def solve_with_factor(c: jax.Array, b: jax.Array, lower: bool) -> jax.Array:
    """x with ``a x = b`` for ``a = L L^H`` (``lower``: L in c's lower triangle) or ``a = U^H U``
    (U in c's upper triangle); the other triangle of ``c`` (N, N) is not read. ``b`` is (N,) or
    (N, K), and x has its shape.

    On an unsharded factor (one device, or a layout that XLA chooses inside ``jax.jit``): the
    device's two triangular solves, as ``jax.scipy.linalg.cho_solve``. On a factor laid out over
    mesh axes: the triangular inverse W of the factor by blocks (``jaxmg.autodiff._dist.tri_inv``:
    large products, nothing gathered), then ``x = W^H (W b)`` (lower) or ``W (W^H b)`` (upper).
    Differentiable in ``c`` and ``b`` at every order."""
    rhs = b[:, None] if b.ndim == 1 else b
    layout = _dist.resolve(c)
    if _dist.kind(layout) is None:
        t = jnp.tril(c) if lower else jnp.triu(c)
        solve = triangular_solve
        y = solve(t, rhs, left_side=True, lower=lower, transpose_a=not lower, conjugate_a=not lower)
        x = solve(t, y, left_side=True, lower=lower, transpose_a=lower, conjugate_a=lower)
    else:
        assert layout is not None, "a layout kind comes from a sharding"
        w = _dist.tri_inv(c, lower=lower, like=layout)
        rows = NamedSharding(layout.mesh, P(_dist.padded_spec(layout.spec, 2)[0], None))  # b's rows split as c's
        x = _dist.matmul(w, _dist.matmul(w, rhs, rows, adj_x=not lower), rows, adj_x=lower)
    return x[:, 0] if b.ndim == 1 else x
