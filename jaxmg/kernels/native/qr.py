"""The native QR family: cuSOLVERMp geqrf/orgqr through the handlers of csrc/qr.cc (Q^H b is
applied from the saved reflectors).

Layout. A QR factorization cannot be taken of ``A^T`` (what a row-major local block is, read
column-major, see ``_grid``), and only row permutations leave R unchanged. So the kernels keep the
mesh's rows as cuSOLVERMp's process rows: the grid is ``pr x pc = grid.nprow x grid.npcol`` with
the row-major rank mapping (``rank = p * pc + q``, the rank :func:`_grid.bootstrap` gives), and
the matrix is laid out once, natural-order block-cyclic in square tiles of ``t``
(``_grid.to_cyclic``: one all_to_all per axis where the tiles divide evenly), then transposed
locally to column-major. An ``M x N`` matrix whose extents are not multiples of ``t`` times the
grid is factored as the padded ``Mp x Np`` matrix

    [[A, 0],
     [0, E]]    (E: ones at (M + j, N + j), zeros elsewhere; Mp - M >= Np - N),

whose Householder QR has the same first N reflectors, ``R[:N, :N]`` = A's R and ``Q[:M, :N]`` =
A's Q exactly (the padding columns are unit vectors orthogonal to A's columns).

State (backend-private): the geqrf output (Householder vectors below R) as this device's
column-major local block, shape ``(Np / pc, Mp / pr)``, and tau of a's N columns, whole
``(N,)`` (replicated). The padding columns' reflectors are replaced by the identity (tau = 0)
wherever the state is used: Q's first N columns and R's leading N x N block do not depend on
them, and R's padding diagonal (+-1) stays as geqrf left it.

* ``qr_q``: orgqr of a copy of the factor, laid back out to a's block layout.
* ``qr_r``: the upper triangle of the factor's first Np rows, laid back out.
* ``qr_solve``: ``c = Q^H [b; 0]``, then ``R x = c[:Np]`` by tile-by-tile back substitution on
  the distributed R (:func:`_r_solve`): Q is never formed. ``Q^H`` is applied from the saved
  reflectors panel by panel in compact WY form (:func:`_apply_q`), measured faster than
  cuSOLVERMp's ormqr (``benchmarks/bench_qr.py``).
* ``qr_minimum_norm``: ``x = Q R^-H b``, the minimum-norm solution of ``A^H x = b`` (a wide
  matrix's, factored through its conjugate transpose): forward substitution with R^H, then Q
  applied from the reflectors as ``Q^H`` is for ``qr_solve``.
* ``qr_normal_solve``: ``R^-1 R^-H y`` with the same substitution (the least-squares derivative).
* ``qr_diagonal``: R's diagonal, whole (the rank test of least-squares solves).

Status: 0, or the 1-based index of the first zero or non-finite diagonal entry of R (A is
rank deficient), or geqrf's own failure (N + 1), agreed over the grid; the state is NaN on
failure, so every result from it is NaN.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..._sharded import Block, Replicated, Rows
from ..algebra import matmul
from ..families import QRState
from ..status import finite_diagonal
from . import _grid


class _Shape:
    """The padded problem: global ``m x n`` (padded), tile ``t``, grid ``pr x pc`` and the local
    column-major extents; ``m0 x n0`` is a's own shape (``m0`` None where a saved state does not
    say it: then ``m`` is given)."""

    def __init__(self, m0: int | None, n0: int, tile: int, grid, m: int | None = None):
        self.m0, self.n0 = m0, n0
        self.pr, self.pc = grid.nprow, grid.npcol
        step = math.lcm(self.pr, self.pc)
        self.t = max(1, min(int(tile), -(-n0 // step)))
        self.n = _grid.padded_size(n0, self.t, grid)
        if m is None:
            assert m0 is not None, "the padded rows come from a's rows where not given"
            m = _grid.padded_size(m0 + self.n - n0, self.t, grid)
        self.m = m
        self.mloc, self.nloc = self.m // self.pr, self.n // self.pc

    def attrs(self) -> dict:
        return dict(m=self.m, n=self.n, tile=self.t, pr=self.pr, pc=self.pc, mloc=self.mloc, nloc=self.nloc)


def _global_index(count: int, tile: int, nproc: int, me):
    """Global indices of this process's ``count`` local entries, block-cyclic in tiles of ``tile``."""
    r = jnp.arange(count)
    return ((r // tile) * nproc + me) * tile + r % tile


def _coords(grid):
    """This device's cuSOLVERMp coordinates (p, q): its mesh row and column indices."""
    return _grid.index(grid.row_axes), _grid.index(grid.col_axes)


def _laid_out(a, grid, s: _Shape):
    """a's block -> the padded matrix's natural block-cyclic local block, column-major (nloc, mloc)."""
    assert s.m0 is not None, "a's shape is known where a is laid out"
    x = _grid.to_cyclic(a, -2, grid.row_axes, s.pr, s.m0, s.m, s.t)
    x = _grid.to_cyclic(x, -1, grid.col_axes, s.pc, s.n0, s.n, s.t)
    if s.n > s.n0:
        p, q = _coords(grid)
        gr = _global_index(s.mloc, s.t, s.pr, p)
        gc = _global_index(s.nloc, s.t, s.pc, q)
        ones = (gr[:, None] - s.m0 == gc[None, :] - s.n0) & (gc[None, :] >= s.n0)
        x = jnp.where(ones, jnp.ones((), x.dtype), x)
    return jnp.swapaxes(x, -1, -2)


def _block(x_cm, grid, s: _Shape, rows: int):
    """Inverse of _laid_out for an output with ``rows`` (m0 or n0) of its padded rows."""
    x = jnp.swapaxes(x_cm, -1, -2)
    prow = s.m if rows == s.m0 else s.n
    x = jax.lax.slice_in_dim(x, 0, prow // s.pr, axis=-2)
    x = _grid.from_cyclic(x, -2, grid.row_axes, s.pr, rows, prow, s.t)
    return _grid.from_cyclic(x, -1, grid.col_axes, s.pc, s.n0, s.n, s.t)


def _whole_cols(v, grid, s: _Shape):
    """The whole (n,) vector from every process column's local (nloc,) entries."""
    if s.pc == 1:
        return v
    vs = jax.lax.all_gather(v, _grid.name(grid.col_axes), axis=0, tiled=False)  # (pc, nloc)
    return vs.reshape(s.pc, s.nloc // s.t, s.t).transpose(1, 0, 2).reshape(s.n)


def _local_cols(v, grid, s: _Shape):
    """This process column's (nloc,) entries of a whole (n,) vector."""
    if s.pc == 1:
        return v
    _, q = _coords(grid)
    return jax.lax.dynamic_index_in_dim(v.reshape(s.nloc // s.t, s.pc, s.t), q, axis=1, keepdims=False).reshape(-1)


def _diagonal(f, grid, s: _Shape):
    """R's whole diagonal (n,) from the distributed factor."""
    p, q = _coords(grid)
    gr = _global_index(s.mloc, s.t, s.pr, p)
    gc = _global_index(s.nloc, s.t, s.pc, q)
    mine = jnp.sum(jnp.where(gc[:, None] == gr[None, :], f, jnp.zeros((), f.dtype)), axis=-1)  # (nloc,)
    if grid.row_axes:
        mine = jax.lax.psum(mine, _grid.name(grid.row_axes))
    return _whole_cols(mine, grid, s)


def qr_factor(a, *, grid, tile):
    """Householder QR of a (M x N, M >= N); returns (factor: (Np/pc, Mp/pr) local, tau: (N,)
    whole, status)."""
    m0, n0 = a.shape[-2] * grid.nprow, a.shape[-1] * grid.npcol
    s, boot = _Shape(m0, n0, tile, grid), _grid.start(grid)
    results = (
        jax.ShapeDtypeStruct((s.nloc, s.mloc), a.dtype),
        jax.ShapeDtypeStruct((s.nloc,), a.dtype),
        jax.ShapeDtypeStruct((), jnp.int32),
    )
    f, tau, status = _grid.ffi_call("jaxmg_geqrf", results, (_laid_out(a, grid, s),), boot, aliases={0: 0}, **s.attrs())
    status = jnp.where(status != 0, status, finite_diagonal(_diagonal(f, grid, s)[:n0]))
    status, f, tau = _grid.agreed(status, grid, f, _whole_cols(tau, grid, s)[:n0])
    return f, tau, status


def _of_state(f, tau, grid, tile, m0: int | None = None):
    """The padded problem of a saved state (a had ``m0`` rows, where known, and tau's N columns;
    the padded rows are the state's) and tau's local entries of the padded matrix (zero, the
    identity reflector, for the padding columns)."""
    s = _Shape(m0, tau.shape[-1], tile, grid, m=f.shape[-1] * grid.nprow)
    if s.nloc != f.shape[-2] or (m0 is not None and _Shape(m0, s.n0, tile, grid).m != s.m):
        raise ValueError(
            f"the QR state's local block {f.shape[-2:]} does not fit a {m0} x {s.n0} matrix in "
            f"tiles of {tile} on this grid: it comes from another call"
        )
    return s, _local_cols(jnp.pad(tau, (0, s.n - s.n0)), grid, s)


def qr_q(f, tau, *, grid, tile, m):
    """Q (M x N, a's block layout), by orgqr of a copy of the factor."""
    s, tau_l = _of_state(f, tau, grid, tile, m)
    assert s.m0 is not None
    q = _grid.ffi_call(
        "jaxmg_orgqr", jax.ShapeDtypeStruct(f.shape, f.dtype), (f, tau_l), _grid.start(grid), **s.attrs()
    )
    return (_block(q, grid, s, s.m0),)


def qr_r(f, tau, *, grid, tile):
    """R (N x N, a's block layout): the upper triangle of the factor's first Np rows."""
    s, _ = _of_state(f, tau, grid, tile)
    p, q = _coords(grid)
    gr = _global_index(s.mloc, s.t, s.pr, p)
    gc = _global_index(s.nloc, s.t, s.pc, q)
    upper = gc[:, None] >= gr[None, :]
    r = jnp.where(upper | jnp.isnan(f), f, jnp.zeros((), f.dtype))  # a failed (NaN) state stays NaN
    return (_block(r, grid, s, s.n0),)


def qr_diagonal(f, tau, *, grid, tile):
    """R's diagonal (N,), whole on every device (NaN for a failed state)."""
    s, _ = _of_state(f, tau, grid, tile)
    return (_diagonal(f, grid, s)[: s.n0],)


def qr_solve(f, tau, b, *, grid, tile):
    """The least-squares solution x = R^-1 (Q^H b)[:N] (b whole, M rows; x whole, N rows): Q^H b
    from the saved reflectors, then back substitution; Q is never formed."""
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    s, tau_l = _of_state(f, tau, grid, tile, b2.shape[0])
    assert s.m0 is not None
    p, _ = _coords(grid)
    c = jnp.pad(b2, ((0, s.m - s.m0), (0, 0)))
    c_l = _grid.rows_of(c, p, s.m, s.t, s.pr)  # (mloc, nrhs): this process row's rows
    c = _gathered_rows(_apply_q(f, tau_l, c_l, grid, s, adjoint=True), grid, s)
    x = _r_solve(f, c[: s.n], grid, s, adjoint=False)[: s.n0]
    return (x[:, 0] if vector else x,)


def qr_minimum_norm(f, tau, b, *, grid, tile, m):
    """The x of least norm with ``A^H x = b`` (A = Q R, M x N, M >= N, of full column rank; b
    whole, N rows; x whole, M rows): ``x = Q R^-H b``, forward substitution with R^H on the
    distributed R, then Q applied from the saved reflectors; Q is never formed."""
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    s, tau_l = _of_state(f, tau, grid, tile, m)
    assert s.m0 is not None
    p, _ = _coords(grid)
    y = _r_solve(f, jnp.pad(b2, ((0, s.n - s.n0), (0, 0))), grid, s, adjoint=True)[: s.n0]
    c_l = _grid.rows_of(jnp.pad(y, ((0, s.m - s.n0), (0, 0))), p, s.m, s.t, s.pr)  # Q [y; 0]
    x = _gathered_rows(_apply_q(f, tau_l, c_l, grid, s, adjoint=False), grid, s)[: s.m0]
    return (x[:, 0] if vector else x,)


#: The widest compact-WY panel of :func:`_apply_q` (below a tile when the tile is wider).
PANEL_WIDTH = 256


def _panel_width(tile: int) -> int:
    """Columns per compact-WY panel of :func:`_apply_q`: the tile, halved while above
    :data:`PANEL_WIDTH` (a panel lies within one tile; its Gram matrix costs 2 M w^2 per panel,
    2 M N w in all)."""
    w = tile
    while w > PANEL_WIDTH and w % 2 == 0:
        w //= 2
    return w


def _apply_q(f, tau_l, c_l, grid, s: _Shape, adjoint: bool):
    """``Q^H c`` (``adjoint``) or ``Q c`` for the saved factor's reflectors: c_l is this process
    row's (mloc, nrhs) rows of c, the same on every process column, and so is the result.

    ``Q = H_1 ... H_n``, ``H_i = I - tau_i v_i v_i^H`` (v_i: unit lower trapezoidal column i of the
    factor). A panel of w reflectors is ``I - V T V^H`` with ``T^-1 = S = diag(1/tau) +
    striu(V^H V)``, so ``Q^H c`` is, panel by panel from the first, ``c -= V S^-H (V^H c)``, and
    ``Q c``, panel by panel from the last, ``c -= V S^-1 (V^H c)``. The panel's owner process
    column forms ``V^H V`` and ``V^H c`` from its local rows (summed over the process rows), solves
    with the w x w triangle, updates its rows and shares them with the other process columns. The
    padding columns' reflectors (tau = 0) are the identity: v is taken as zero there.
    """
    p, q = _coords(grid)
    w = _panel_width(s.t)
    rows = _global_index(s.mloc, s.t, s.pr, p)
    zero = jnp.zeros((), f.dtype)

    def row_sum(x):
        return jax.lax.psum(x, _grid.name(grid.row_axes)) if grid.row_axes else x

    panels = -(-s.n0 // w)

    def panel(i, c_l):
        k = i if adjoint else panels - 1 - i  # Q^H: panels from the first; Q: from the last
        first = k * w  # the panel's first global column, in global tile column first // t
        owner = (first // s.t) % s.pc
        local = (first // s.t // s.pc) * s.t + first % s.t
        cols = first + jnp.arange(w)
        v = jax.lax.dynamic_slice_in_dim(f, local, w, axis=-2)  # (w, mloc): V^T, local rows
        tau_k = jax.lax.dynamic_slice_in_dim(tau_l, local, w)
        live = (tau_k != 0) & (q == owner)
        v = jnp.where(rows[None, :] > cols[:, None], v, zero) + (rows[None, :] == cols[:, None]).astype(f.dtype)
        v = jnp.where(live[:, None], v, zero)
        gram, proj = row_sum((matmul(jnp.conj(v), v.T), matmul(jnp.conj(v), c_l)))
        tri = jnp.triu(gram, 1) + jnp.diag(jnp.where(live, 1 / jnp.where(live, tau_k, 1), 1).astype(f.dtype))
        y = jax.scipy.linalg.solve_triangular(tri, proj, lower=False, trans="C" if adjoint else 0)
        c_l = c_l - matmul(v.T, y)
        if grid.col_axes:  # the owner's rows, to every process column
            c_l = jax.lax.psum(jnp.where(q == owner, c_l, zero), _grid.name(grid.col_axes))
        return c_l

    return jax.lax.fori_loop(0, panels, panel, c_l)


def qr_normal_solve(f, tau, y, *, grid, tile):
    """z = (A^H A)^-1 y = R^-1 R^-H y (y and z whole, N rows), for the least-squares derivative."""
    vector = y.ndim == 1
    y2 = y[:, None] if vector else y
    s, _ = _of_state(f, tau, grid, tile)
    c = jnp.pad(y2, ((0, s.n - s.n0), (0, 0)))
    z = _r_solve(f, _r_solve(f, c, grid, s, adjoint=True), grid, s, adjoint=False)[: s.n0]
    return (z[:, 0] if vector else z,)


def _gathered_rows(x_l, grid, s: _Shape):
    """The whole (m, nrhs) array from every process row's (mloc, nrhs) local rows (the same on
    every process column)."""
    if s.pr == 1:
        return x_l
    xs = jax.lax.all_gather(x_l, _grid.name(grid.row_axes), axis=0, tiled=False)  # (pr, mloc, nrhs)
    return xs.reshape(s.pr, s.mloc // s.t, s.t, -1).transpose(1, 0, 2, 3).reshape(s.m, -1)


def _r_solve(f, c, grid, s: _Shape, adjoint: bool):
    """x with R x = c (or R^H x = c when ``adjoint``), R the factor's leading n x n upper triangle,
    c and x whole (n, nrhs): tile-by-tile substitution on the distributed R.

    Step j (backward for R, forward for R^H) reads tile row j of R (R) or tile column j (R^H),
    from this device's tiles only, reduces the partial sums over the grid, and the diagonal
    tile's owner solves with it and shares the result: two all-reduces of ``t x nrhs`` per tile.
    """
    p, q = _coords(grid)
    t, k, nrhs = s.t, s.n // s.t, c.shape[-1]
    axes = _grid.grid_axes(grid)
    kr_n = s.n // s.pr // t  # local tile rows of R (the factor's first n rows)
    row_tiles = jnp.arange(kr_n) * s.pr + p
    col_tiles = jnp.arange(s.nloc // t) * s.pc + q

    def reduce(x):
        return jax.lax.psum(x, _grid.name(axes)) if axes else x

    def step(j, x, rhs):
        if adjoint:  # (R^H x)_j = sum_{i <= j} R_ij^H x_i: tile column j of R, local rows
            slab = jax.lax.dynamic_slice_in_dim(f, (j // s.pc) * t, t, axis=-2)[:, : kr_n * t]  # (t, rows)
            mine = q == j % s.pc
            known = jax.lax.dynamic_index_in_dim(x.reshape(kr_n, s.pr, t, nrhs), p, axis=1, keepdims=False)
            known = jnp.where((row_tiles < j)[:, None, None], known, 0).reshape(kr_n * t, nrhs)
            partial = matmul(jnp.conj(slab), known)
            diag = jax.lax.dynamic_slice_in_dim(slab, (j // s.pr) * t, t, axis=-1).T  # R_jj
            owner = mine & (p == j % s.pr)
        else:  # (R x)_j = sum_{l >= j} R_jl x_l: tile row j of R, local columns
            slab = jax.lax.dynamic_slice_in_dim(f, (j // s.pr) * t, t, axis=-1)  # (nloc, t): R_j,:^T
            mine = p == j % s.pr
            known = jax.lax.dynamic_index_in_dim(x.reshape(s.nloc // t, s.pc, t, nrhs), q, axis=1, keepdims=False)
            known = jnp.where((col_tiles > j)[:, None, None], known, 0).reshape(s.nloc, nrhs)
            partial = matmul(slab.T, known)
            diag = jax.lax.dynamic_slice_in_dim(slab, (j // s.pc) * t, t, axis=-2).T  # R_jj
            owner = mine & (q == j % s.pc)
        r = rhs - reduce(jnp.where(mine, partial, jnp.zeros((), c.dtype)))
        diag = jnp.where(owner, diag, jnp.eye(t, dtype=diag.dtype))
        sol = jax.scipy.linalg.solve_triangular(diag, r, lower=False, trans="C" if adjoint else 0)
        return reduce(jnp.where(owner, sol, jnp.zeros((), sol.dtype)))

    c = c.reshape(k, t, nrhs)

    def body(i, x):
        j = i if adjoint else k - 1 - i
        return x.at[j].set(step(j, x.reshape(s.n, nrhs), c[j]))

    return jax.lax.fori_loop(0, k, body, jnp.zeros_like(c)).reshape(s.n, nrhs)


class QR(_grid.GridKernels):
    """The QR kernels over the process grid (``jaxmg.kernels.families.QRKernels``)."""

    def factor(self, a):
        f, tau, status = self.run(qr_factor, [a], [Block()], [Block(), Replicated(), Replicated()])
        return QRState(f, tau), status

    def q(self, state):
        m, n = self.plan.shape
        return self.run(qr_q, list(state), _STATE, [self.caller], [(m, n)], ["q"], m=m)[0]

    def r(self, state):
        n = self.plan.shape[1]
        return self.run(qr_r, list(state), _STATE, [self.caller], [(n, n)], ["r"])[0]

    def diagonal(self, state):
        return self.run(qr_diagonal, list(state), _STATE, [Replicated()])[0]

    def solve(self, state, b, spec):
        n = self.plan.shape[1]
        return self.run(qr_solve, [*state, b], [*_STATE, Rows(spec)], [Rows(spec)], [(n,) + b.shape[1:]], ["x"])[0]

    def normal_solve(self, state, y, spec):
        return self.run(qr_normal_solve, [*state, y], [*_STATE, Rows(spec)], [Rows(spec)])[0]

    def minimum_norm(self, state, b, spec):
        m = self.plan.shape[0]
        args, inputs = [*state, b], [*_STATE, Rows(spec)]
        return self.run(qr_minimum_norm, args, inputs, [Rows(spec)], [(m,) + b.shape[1:]], ["x"], m=m)[0]


_STATE = [Block(), Replicated()]
