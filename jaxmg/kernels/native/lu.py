"""The native LU family: cuSOLVERMp getrf/getrs through the handlers of csrc/lu.cc.

Layout, with no redistribution of ``a``. This device's row-major local block of ``A`` is the
column-major local block of ``M = A^T`` on cuSOLVERMp's grid ``pr x pc`` (``_grid``). When both
local extents are whole numbers of tiles (the family tile ``t``: the largest divisor of both
local extents that is at most ``T_A``), a block layout over ``P`` processes is the block-cyclic
layout of a tile-permuted matrix (``_grid.tile_permutation``), with independent permutations
``s_r`` (rows, ``pr`` processes) and ``s_c`` (columns, ``pc``): the buffers hold, block-cyclic,

    M' = M[s_r][:, s_c],    M[i, j] = A[j, i],

on any grid shape. getrf factors ``M' = P L U`` in place (``donate=True``: JAX's own buffer);
that is the state, with the pivots (global, 0-based, in ``M'``'s row order; replicated).
Only the small right-hand side and solution are permuted:

* ``A^T y = c`` is ``M' z = c[s_r]``, ``y[s_c] = z``: getrs (op = N), with the right-hand
  side's rows of process row ``p`` being simply block ``p`` of ``c``. ``A^H y = c`` is the
  same with ``conj(c)`` and ``conj(y)``.
* ``A x = b`` is ``M'^T z = b[s_c]``, ``x[s_r] = z``. cuSOLVERMp's getrs solves with op = N
  only, so this one is solved here, with the same factor and no second factorisation:
  ``M'^T = U^T L^T P^T``, so ``U^T w = b[s_c]`` (forward, tile by tile), ``L^T v = w``
  (backward, unit diagonal), ``z = P v``. Each tile step reads one tile row of this device's
  local block (a column panel of the factor), reduces the partial sums over the grid, and the
  diagonal tile's owner solves and shares the result: two all-reduces of ``t x nrhs`` per tile.

Status: 0, or getrf's ``info`` (the first zero pivot of ``U``, counted in ``M'``'s order), agreed
over the grid; the handler fills a failed factor with NaN, so every solve with it is NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..._sharded import Block, Replicated, Rows, whole
from .. import triangular
from ..algebra import matmul, slogdet_of
from ..families import LUState
from . import _grid
from .cholesky import cholesky_triangle, products_on


def _start(local, grid, tile):
    """The global order n, the family tile, the grid arguments and the handlers' attributes."""
    n = local.shape[-2] * grid.nprow
    t = _grid.family_tile(n, int(tile), grid)
    pr, pc = _grid.mp_grid(grid)
    attrs = dict(n=n, tile=t, pr=pr, pc=pc, mloc=n // pr, nloc=n // pc)
    return n, t, _grid.start(grid), attrs


def _getrf_call(a_m, members, nid, rank, **attrs):
    """jaxmg_getrf: (factor in place, this process row's pivots (mloc,) int32 1-based, status)."""
    results = (
        jax.ShapeDtypeStruct(a_m.shape, a_m.dtype),
        jax.ShapeDtypeStruct((attrs["mloc"],), jnp.int32),
        jax.ShapeDtypeStruct((), jnp.int32),
    )
    return _grid.ffi_call("jaxmg_getrf", results, (a_m,), (members, nid, rank), aliases={0: 0}, **attrs)


def _getrs_call(f_m, ipiv, b_m, members, nid, rank, **attrs):
    """jaxmg_getrs (op = N): x in place of b_m, (nrhs, mloc) = the local rows, valid on process
    column 0."""
    results = jax.ShapeDtypeStruct(b_m.shape, b_m.dtype)
    return _grid.ffi_call(
        "jaxmg_getrs", results, (f_m, ipiv, b_m), (members, nid, rank), aliases={2: 0}, nrhs=b_m.shape[-2], **attrs
    )


def lu_factor(a, *, grid, tile):
    """``M' = P L U`` in place; returns (the factor state: a's local block shape, the pivots:
    (n,) int32, 0-based global rows of ``M'``, replicated; status)."""
    n, t, boot, attrs = _start(a, grid, tile)
    f, ipiv, status = _getrf_call(a, *boot, **attrs)
    (status,) = _grid.agreed(status, grid)  # the handler already filled a failed factor with NaN
    piv = _grid.whole_rows(ipiv[..., None], grid, n, t, attrs["pr"])[..., 0] - 1
    return f, piv, status


def lu_factor_order(n: int, tile: int, grid) -> dict:
    """How :func:`lu_triangles`' result relates to A (:meth:`LU.inverse`): the packed factor of
    ``M'`` (``M'[perm] = L U``, perm from the pivots), transposed (row-major view), with
    ``A[cols][:, rows] = M'^T``; ``rows``/``cols`` are the tile permutations ``s_r``/``s_c`` (tuples),
    or None where both are the identity (one process)."""
    t = _grid.family_tile(n, int(tile), grid)
    pr, pc = _grid.mp_grid(grid)
    if pr == pc == 1:
        return dict(rows=None, cols=None)
    return dict(
        rows=tuple(int(i) for i in _grid.tile_permutation(n, t, pr)),
        cols=tuple(int(i) for i in _grid.tile_permutation(n, t, pc)),
    )


def lu_triangles(lu, *, grid, tile):
    """The packed factor of ``M'`` transposed, in natural order (this device's block of the grid
    layout): the block-cyclic state brought to block layout as :func:`cholesky_triangle` does."""
    return cholesky_triangle(lu, grid=grid, tile=tile)


def lu_solve(lu, piv, b, *, grid, trans, tile):
    """Solve ``op(A) x = b`` from the factor state; trans 0: A, 1: A^T, 2: A^H; b and x whole."""
    n, t, boot, attrs = _start(lu, grid, tile)
    pr, pc = attrs["pr"], attrs["pc"]
    s_r, s_c = _grid.tile_permutation(n, t, pr), _grid.tile_permutation(n, t, pc)
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    if trans == 0:
        z = _transposed_solve(lu, piv, b2[s_c], grid, n, t)
        x = jnp.zeros_like(z).at[s_r].set(z)
    else:
        c = jnp.conj(b2) if trans == 2 else b2
        ipiv = _grid.rows_of(piv[:, None] + 1, _grid.index(grid.col_axes), n, t, pr)[:, 0]
        zt = _getrs_call(lu, ipiv, _grid.block_rows(c, grid, n).T, *boot, **attrs)
        z = _grid.whole_rows(zt.T, grid, n, t, pr)
        x = jnp.zeros_like(z).at[s_c].set(z)
        x = jnp.conj(x) if trans == 2 else x
    return (x[:, 0] if vector else x,)


def _transposed_solve(f, piv, c, grid, n: int, t: int):
    """z with ``M'^T z = c`` (c whole, ``M'``'s column order) from the factor ``P L U`` of ``M'``.

    ``f`` is this device's (nloc, mloc) row-major block: row ``i`` of it is column ``i`` of the
    local factor, so tile row ``m`` of ``f`` holds, transposed, this device's tiles of global
    column tile ``m * pc + q``. Whole vectors are (k, t, nrhs) in ``M'``'s (block-cyclic) order.
    """
    pr, pc = _grid.mp_grid(grid)
    p, q = _grid.index(grid.col_axes), _grid.index(grid.row_axes)
    axes = _grid.grid_axes(grid)
    k, kr = n // t, n // t // pr
    nrhs = c.shape[-1]
    row_tiles = jnp.arange(kr) * pr + p  # global tile of each local tile row of the factor

    def reduce(x):
        return jax.lax.psum(x, _grid.name(axes)) if axes else x

    def step(j, y, rhs, mask, lower):
        """Tile j of the solution of a triangular system with the transposed tile column j of
        the factor: rhs minus the partial sums over the tiles in ``mask``, then the owner's
        triangular solve with the diagonal tile (U^T: lower; L^T: unit upper)."""
        slab = jax.lax.dynamic_slice_in_dim(f, (j // pc) * t, t, axis=-2)  # (t, mloc): column tile j, transposed
        mine = q == j % pc
        known = y.reshape(kr, pr, t, nrhs)
        known = jax.lax.dynamic_index_in_dim(known, p, axis=1, keepdims=False)
        known = jnp.where(mask(row_tiles)[:, None, None], known, jnp.zeros((), y.dtype)).reshape(kr * t, nrhs)
        partial = jnp.where(mine, matmul(slab, known), jnp.zeros((), y.dtype))
        r = rhs - reduce(partial)
        owner = mine & (p == j % pr)
        diag = jax.lax.dynamic_slice_in_dim(slab, (j // pr) * t, t, axis=-1)  # D^T
        diag = jnp.where(owner, diag, jnp.eye(t, dtype=diag.dtype))
        # (D^T)^-1 r as a solve with D, transposed: the triangular solve wants its matrix
        # column-major, which D^T's row-major tile is; asked for D^T itself, XLA transposed the
        # whole local block of the factor once (one more copy of the matrix).
        sol = jax.lax.linalg.triangular_solve(
            jnp.swapaxes(diag, -1, -2), r, left_side=True, lower=not lower, transpose_a=True, unit_diagonal=not lower
        )
        return reduce(jnp.where(owner, sol, jnp.zeros((), sol.dtype)))

    c = c.reshape(k, t, nrhs)

    def forward(j, w):  # U^T w = c: U_ij^T for i < j, then the lower triangle of D^T
        return w.at[j].set(step(j, w.reshape(n, nrhs), c[j], lambda g: g < j, True))

    def backward(i, v):  # L^T v = w: L_ij^T for i > j, then the unit upper triangle of D^T
        j = k - 1 - i
        return v.at[j].set(step(j, v.reshape(n, nrhs), v[j], lambda g: g > j, False))

    w = jax.lax.fori_loop(0, k, forward, jnp.zeros_like(c))
    v = jax.lax.fori_loop(0, k, backward, w).reshape(n, nrhs)
    perm = jax.lax.linalg.lu_pivots_to_permutation(piv, n)  # (P^T y)[i] = y[perm[i]]
    return jnp.zeros_like(v).at[perm].set(v)  # z = P v


class LU(_grid.GridKernels):
    """The LU kernels over the process grid (``jaxmg.kernels.families.LUKernels``)."""

    hermitian = False

    def factor(self, a):
        lu, piv, status = self.run(lu_factor, [a], [Block()], [Block(), Replicated(), Replicated()])
        return LUState(lu, piv), status

    def packed(self, state):
        """The packed factor as cuSOLVERMp leaves it, in the grid layout."""
        return state.lu

    def packed_tangent(self, state, packed, a_dot):
        """No derivative: the factor is of a's tiles in the grid's order."""
        raise NotImplementedError(
            "LU(a).lu on the distributed route is cuSOLVERMp's factor of a's tiles in the process "
            "grid's order, which has no derivative with respect to a; differentiate "
            "jaxmg.scipy.linalg.lu_factor(a) (JAX's packed factor) or LU(a).solve instead."
        )

    def solve(self, state, b, spec, trans: str = "N"):
        return self.run(lu_solve, [*state, b], [Block(), Replicated(), Rows(spec)], [Rows(spec)], trans=_TRANS[trans])[
            0
        ]

    def transposed_factor(self, state):
        """The packed factor of ``M'`` transposed, in natural order, in the grid layout, and how it
        relates to A (:func:`lu_factor_order`): what ``jax.scipy.linalg.lu_factor``'s arrays of a
        distributed matrix are read from (``jaxmg.scipy.linalg``)."""
        return self._triangles(state)

    def _triangles(self, state):
        """The packed factor in the grid layout, and how it relates to A (:func:`lu_factor_order`)."""
        (factor,) = self.run(lu_triangles, [state.lu], [Block()], [Block()])
        return factor, lu_factor_order(self.plan.shape[0], self.plan.tile, self.grid)

    def inverse(self, state):
        """A^-1 in the grid layout, from the factor: LAPACK's getri (the inverses of both
        triangular factors, then their product; (4/3) N^3 flops, almost all in large matrix
        products), on the whole factor in the grid layout (distributed, never gathered)."""
        factor, order = self._triangles(state)
        products = products_on(self.grid, self.plan.shape[0])
        return whole(_inverse, (factor, state.pivots), self.grid, products=products, **order)

    def slogdet(self, state):
        factor, order = self._triangles(state)
        return whole(_slogdet, (factor, state.pivots), self.grid, **order)


_TRANS = {"N": 0, "T": 1, "C": 2}


def _inverse(factor, piv, *, rows, cols, products):
    """A^-1 from the packed factor (``lu_factor_order`` describes it) and the pivots."""
    n = factor.shape[-1]
    perm = jax.lax.linalg.lu_pivots_to_permutation(piv, n)
    with triangular.products_through(*products):
        # factor = (L U)^T of M with M[perm] = L U and A[cols][:, rows] = M^T: A^-1[rows][:, cols] = M^-T
        w_u = triangular.trtri(triangular.Tri(factor, lower=False, unit=True))  # (L^T)^-1
        w_l = triangular.trtri(triangular.Tri(factor, lower=True))  # (U^T)^-1
        m_inv_t = triangular.upper_times_lower(triangular.Tri(w_u, lower=False), triangular.Tri(w_l, lower=True))
    m_inv_t = jnp.zeros_like(m_inv_t).at[perm].set(m_inv_t)  # M^-T = P (L^T)^-1 (U^T)^-1
    if rows is None:
        return m_inv_t
    return jnp.zeros_like(m_inv_t).at[jnp.asarray(rows)[:, None], jnp.asarray(cols)[None, :]].set(m_inv_t)


def _slogdet(factor, piv, *, rows, cols):
    """(sign, log|det A|): det A = +-prod(diag U), the sign that of the row permutation and of the
    factor's tile orders (the diagonal of (L U)^T is U's)."""
    parity = 1 if rows is None else _parity(rows) * _parity(cols)
    return slogdet_of(jnp.diagonal(factor), piv, parity)


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
