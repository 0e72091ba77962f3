"""The native eigensolver family: cuSOLVERMp syevd/sygvd through the handlers of csrc/eig.cc.

Layout. a's block layout is redistributed to the natural-order block-cyclic layout on the mesh
grid (``_grid.cyclic_matrix``: one ``all_to_all`` per distributed dimension when the tiles line
up, gathers of one dimension otherwise), and each member transposes its local block, so that
it is the column-major local block of ``A`` itself on cuSOLVERMp's ``nprow x npcol`` grid with the
row-major rank mapping (rank = mesh row * npcol + mesh column, the bootstrap's rank). The handler
reads A's lower triangle; the eigenvectors come back in the same layout and go back to a's
block layout the same way. Eigenvalues are ascending and replicated.

Tiles that do not divide. syevd pads exactly: ``A_pad = diag(A, sigma I)`` with
``sigma = 2 s``, where ``s = max|a_ii| + max_i sum_{j<i}|a_ij| + max_j sum_{i>j}|a_ij|`` bounds
every Gershgorin disc of A (only the lower triangle is read), so A's spectrum lies in ``[-s, s]``
and the padded eigenvalues (exactly ``sigma``, eigenvectors the padded unit vectors since the
matrix is block diagonal) are the ``npad - n`` largest, separated from A's by at least
``s >= ||A||_2``: the first ``n`` eigenpairs are A's, with zero padded components, and are kept.
``|sigma| <= 6 ||A||_1``, so the backward error stays of the order of A's own.
sygvd takes the family tile instead (the largest divisor of the local extents that is at most
``T_A``; no padding): a padded eigenvalue above the spectrum of ``(A, B)`` would need a bound on
``B^-1``, which is not available before the factorization.

Engine versions. Below cuSOLVERMp 0.9.1 both calls refuse a ``T_A`` that is not a power of two
and 2-D process grids, and sygvd's tile is a power of two (``_engine``: STEDC's defect).

cuSOLVERMp 0.8 computes the eigenvectors in both calls (there is no eigenvalues-only mode), so
``return_eigenvectors=False`` costs the same as computing them (and skips only the
redistribution of the vectors back to a's layout).

Status: 0; syevd's ``info``; for sygvd the order of B's first leading minor that is not
positive definite (LAPACK's ``info - n``); -1 for another failure. Agreed over the grid, and
every output is NaN where it is not 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import _engine, _grid


def _attrs(n: int, tile: int, grid):
    """The handlers' attributes: order, tile, grid (mesh rows x columns), local extents."""
    return dict(n=n, tile=tile, pr=grid.nprow, pc=grid.npcol, mloc=n // grid.nprow, nloc=n // grid.npcol)


def _to_engine(x):
    """Row-major local block-cyclic block -> the column-major local block the handler reads."""
    return jnp.swapaxes(x, -1, -2)


def _vectors(z, grid, n: int, npad: int, tile: int):
    """The handler's column-major local eigenvectors (npad x npad) -> a's block layout, the first
    n rows and columns (the eigenvectors of the unpadded eigenvalues)."""
    z = jnp.swapaxes(z, -1, -2)
    z = _grid.from_cyclic(z, -2, grid.row_axes, grid.nprow, n, npad, tile)
    return _grid.from_cyclic(z, -1, grid.col_axes, grid.npcol, n, npad, tile)


def spectrum_bound(a, grid):
    """s with every eigenvalue of Hermitian A (lower triangle of the local blocks) in ``[-s, s]``:
    ``max|a_ii| + max row sum + max column sum`` of ``|tril(A, -1)|`` (Gershgorin), replicated."""
    rows, cols = a.shape[-2], a.shape[-1]
    gr = _grid.index(grid.row_axes) * rows + jnp.arange(rows)
    gc = _grid.index(grid.col_axes) * cols + jnp.arange(cols)
    mag = jnp.abs(a)
    lower = jnp.where(gr[:, None] > gc[None, :], mag, 0)
    diag = jnp.max(jnp.where(gr[:, None] == gc[None, :], mag, 0))
    row_sums = lower.sum(-1)
    col_sums = lower.sum(-2)
    if grid.col_axes:
        row_sums = jax.lax.psum(row_sums, _grid.name(grid.col_axes))
    if grid.row_axes:
        col_sums = jax.lax.psum(col_sums, _grid.name(grid.row_axes))
    s = diag + jnp.max(row_sums) + jnp.max(col_sums)
    axes = _grid.grid_axes(grid)
    return jax.lax.pmax(s, _grid.name(axes)) if axes else s


def syevd(a, *, grid, tile):
    """(w: n ascending eigenvalues, whole; v: eigenvectors, a's local block; status) of Hermitian A
    (lower triangle read)."""
    _engine.check("syevd", tile, grid)
    n = a.shape[-2] * grid.nprow
    npad = _grid.padded_size(n, int(tile), grid)
    sigma = None
    if npad > n:
        s = spectrum_bound(a, grid)
        sigma = jnp.where(s > 0, 2 * s, 1).astype(a.dtype)
    x = _grid.cyclic_matrix(a, grid, n, npad, int(tile), pad_value=sigma)
    results = (
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(x.shape[:-2] + (npad,), _real(x.dtype)),
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(x.shape[:-2], jnp.int32),
    )
    _, w, z, status = _grid.ffi_call(
        "jaxmg_syevd", results, (_to_engine(x),), _grid.start(grid), aliases={0: 0}, **_attrs(npad, int(tile), grid)
    )
    status, w, z = _grid.agreed(status, grid, w[..., :n], z)
    return w, _vectors(z, grid, n, npad, int(tile)), status


def sygvd(a, b, *, grid, tile):
    """(w ascending, v in a's layout with v^H B v = I, status) of A v = w B v (lower triangles
    read; B Hermitian positive definite)."""
    _engine.check("sygvd", tile, grid)
    n = a.shape[-2] * grid.nprow
    t = _grid.family_tile(n, int(tile), grid, powers_of_two=_engine.powers_of_two_only())
    x = _grid.cyclic_matrix(a, grid, n, n, t)
    y = _grid.cyclic_matrix(b, grid, n, n, t)
    results = (
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(x.shape[:-2] + (n,), _real(x.dtype)),
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(x.shape[:-2], jnp.int32),
    )
    _, _, w, z, status = _grid.ffi_call(
        "jaxmg_sygvd",
        results,
        (_to_engine(x), _to_engine(y)),
        _grid.start(grid),
        aliases={0: 0, 1: 1},
        **_attrs(n, t, grid),
    )
    status, w, z = _grid.agreed(status, grid, w, z)
    return w, _vectors(z, grid, n, n, t), status


def _real(dtype):
    return jnp.finfo(dtype).dtype
