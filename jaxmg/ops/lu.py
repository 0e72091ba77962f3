"""LU family: factor P A = L U once (partial pivoting), then solve with A, A^T or A^H."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import _backend, _sharded
from .._call import Block, Call, Replicated, Rows
from ..kernels import triangular

TRANS = {"N": 0, "T": 1, "C": 2}


def factor(call: Call, a, *, donate: bool = False):
    """The backend's LU factor (grid layout), pivots and status."""
    return call.run("lu_factor", [a], [Block()], [Block(), Replicated(), Replicated()],
                    donate=(0,) if donate else ())


def solve(call: Call, lu, piv, b, spec, trans: str = "N"):
    """x with op(A) x = b, op given by ``trans`` ("N", "T" or "C")."""
    return call.run("lu_solve", [lu, piv, b], [Block(), Replicated(), Rows(spec)], [Rows(spec)],
                    trans=TRANS[trans])[0]


def inverse(call: Call, lu, piv):
    """A^-1 in the grid layout, from the factor: LAPACK's getri (the inverses of both triangular
    factors, then their product; (4/3) N^3 flops, almost all in large matrix products), on the
    whole factor in the grid layout (distributed, never gathered)."""
    order = call.kernels.lu_factor_order(call.shape[0], call.tile, call.grid)
    (factor,) = call.run("lu_triangles", [lu], [Block()], [Block()])
    products = _backend.one_gpu_products(call.grid, call.shape[0])
    return _sharded.whole(_inverse, (factor, piv), call.grid, products=products, **order)


def _inverse(factor, piv, *, transposed: bool, rows, cols, products):
    """A^-1 from the packed factor (``lu_factor_order`` describes it) and the pivots, with the
    triangular kernels' products through ``products`` (see ``triangular.products_through``)."""
    with triangular.products_through(*products):
        return _inverse_from_factor(factor, piv, transposed=transposed, rows=rows, cols=cols)


def _inverse_from_factor(factor, piv, *, transposed: bool, rows, cols):
    n = factor.shape[-1]
    perm = jax.lax.linalg.lu_pivots_to_permutation(piv, n)
    if not transposed:  # a[perm] = L U
        return triangular.lu_inverse(factor, perm)
    # factor = (L U)^T of M with M[perm] = L U and A[cols][:, rows] = M^T: A^-1[rows][:, cols] = M^-T
    w_u = triangular.trtri(triangular.Tri(factor, lower=False, unit=True))  # (L^T)^-1
    w_l = triangular.trtri(triangular.Tri(factor, lower=True))  # (U^T)^-1
    m_inv_t = triangular.upper_times_lower(triangular.Tri(w_u, lower=False), triangular.Tri(w_l, lower=True))
    m_inv_t = jnp.zeros_like(m_inv_t).at[perm].set(m_inv_t)  # M^-T = P (L^T)^-1 (U^T)^-1
    if rows is None:
        return m_inv_t
    return jnp.zeros_like(m_inv_t).at[jnp.asarray(rows)[:, None], jnp.asarray(cols)[None, :]].set(m_inv_t)


def slogdet(call: Call, lu, piv):
    """(sign, log|det A|) from the factor's diagonal and the pivots (replicated)."""
    order = call.kernels.lu_factor_order(call.shape[0], call.tile, call.grid)
    (factor,) = call.run("lu_triangles", [lu], [Block()], [Block()])
    return _sharded.whole(_slogdet, (factor, piv), call.grid, **order)


def _slogdet(factor, piv, *, transposed: bool, rows, cols):
    """(sign, log|det A|): det A = +-prod(diag U), the sign that of the row permutation (and, for
    the tile-permuted factor, of its row and column orders)."""
    del transposed  # the diagonal of (L U)^T is U's
    n = factor.shape[-1]
    d = jnp.diagonal(factor)
    swaps = jnp.sum(piv != jnp.arange(n, dtype=piv.dtype))
    parity = 1 - 2 * (swaps % 2) if rows is None else (1 - 2 * (swaps % 2)) * _parity(rows) * _parity(cols)
    magnitude = jnp.abs(d)
    sign = parity.astype(d.dtype) * jnp.prod(d / magnitude.astype(d.dtype))
    return sign, jnp.sum(jnp.log(magnitude))


def _parity(order) -> int:
    """+1 or -1: the sign of the permutation ``order`` (a tuple)."""
    seen, sign = set(), 1
    for start in range(len(order)):
        length, k = 0, start
        while k not in seen:
            seen.add(k)
            k = order[k]
            length += 1
        if length and length % 2 == 0:
            sign = -sign
    return sign
