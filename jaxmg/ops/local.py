"""The per-shard kernel layer, for use inside your own ``jax.shard_map`` over the mesh.

Each function takes this device's local block(s) of the matrix (``a``'s block of the grid
layout described by ``grid``) and returns local blocks of matrix outputs; right-hand
sides and solutions are this device's rows (layout ``rhs_spec``, default: rows split like
a's rows, or replicated with ``P()``). Scalars, eigenvalues and status come back whole.

For example, on a (4, 2) mesh of 8 devices::

    >>> import jax, jax.numpy as jnp, numpy as np, jaxmg
    >>> from jax.sharding import NamedSharding, PartitionSpec as P
    >>> mesh = jax.make_mesh((4, 2), ("x", "y"))
    >>> grid = jaxmg.Grid.from_spec(mesh, P("x", "y"))
    >>> @jax.jit
    ... @jax.shard_map(mesh=mesh, in_specs=(P("x", "y"), P("x")), out_specs=(P("x"), P(), P()),
    ...                check_vma=False)
    ... def step(a_block, b_rows):
    ...     x_rows, logdet, status = jaxmg.ops.local.potrs(a_block, b_rows, grid=grid)
    ...     return x_rows, logdet, status
    >>> a = jax.device_put(4 * jnp.eye(8), NamedSharding(mesh, P("x", "y")))
    >>> b = jax.device_put(jnp.ones(8), NamedSharding(mesh, P("x")))
    >>> x, logdet, status = step(a, b)
    >>> print(np.asarray(x)[:2], round(float(logdet), 4), int(status), tuple(x.sharding.spec))
    [0.25 0.25] 11.0904 0 ('x',)

``check_vma=False``: the kernels move data with their own collectives (and the native ones
call cuSOLVERMp), so shard_map cannot infer which outputs are replicated over which axes.

These calls carry no derivative rules of their own: differentiate the global API
(``jaxmg.potrs``, the modules) instead. The route is planned as everywhere else
(``jaxmg._plan.per_shard_tile``): the native kernels where it is distributed, else the device's
own solver on the gathered matrix.
"""

from __future__ import annotations

from typing import Optional

from jax.sharding import PartitionSpec as P

from .. import _plan
from .._layout import Grid
from .._sharded import gather_block, gather_rows, local_block, local_rows
from ..kernels import local, native, status as _status


def _rhs(b, grid: Grid, rhs_spec: Optional[P]):
    spec = rhs_spec if rhs_spec is not None else grid.rows_spec(b.ndim)
    return gather_rows(b, spec), spec


def _device(kernels_class):
    """The local kernels of the device's own solver, for a whole gathered matrix."""
    return kernels_class(None)


def potrs(a, b, *, grid: Grid, rhs_spec: Optional[P] = None, backend: str = "auto", T_A=None):
    """(x rows, logdet, status) for Hermitian positive-definite A from local blocks.

    Natively, factor and solve are one handler call, in place in cuSOLVERMp's layout, with no
    redistribution of the matrix; else the device's own solver factors the gathered matrix."""
    tile = _plan.per_shard_tile("cholesky", grid, backend, T_A, a.shape, a.dtype)
    b, spec = _rhs(b, grid, rhs_spec)
    if tile is not None:
        x, logdet, status = native.potrs(a, b, grid=grid, tile=tile)
        return local_rows(x, spec), logdet, status
    kernels = _device(local.Cholesky)
    state, status = kernels.factor(gather_block(a, grid))
    x, logdet = _status.masked(status, kernels.solve(state, b), kernels.logdet(state))
    return local_rows(x, spec), logdet, status


def cholesky(a, *, grid: Grid, backend: str = "auto", T_A=None):
    """(L block, status) with A = L L^H."""
    tile = _plan.per_shard_tile("cholesky", grid, backend, T_A, a.shape, a.dtype)
    if tile is not None:
        state, status = native.cholesky_factor(a, grid=grid, tile=tile, natural=True)
        (lower,) = native.cholesky_lower(state, grid=grid, tile=tile, natural=True)
        return lower, status
    kernels = _device(local.Cholesky)
    state, status = kernels.factor(gather_block(a, grid))
    return local_block(_status.masked(status, kernels.lower(state)), grid), status


def lu_solve(a, b, *, grid: Grid, rhs_spec: Optional[P] = None, backend: str = "auto", T_A=None):
    """(x rows, status) for general square A."""
    tile = _plan.per_shard_tile("lu", grid, backend, T_A, a.shape, a.dtype)
    b, spec = _rhs(b, grid, rhs_spec)
    if tile is not None:
        lu, piv, status = native.lu_factor(a, grid=grid, tile=tile)
        (x,) = native.lu_solve(lu, piv, b, grid=grid, trans=0, tile=tile)
        return local_rows(x, spec), status
    kernels = _device(local.LU)
    state, status = kernels.factor(gather_block(a, grid))
    return local_rows(_status.masked(status, kernels.solve(state, b)), spec), status


def least_squares(
    a, b, *, grid: Grid, rhs_spec: Optional[P] = None, rcond: Optional[float] = None, backend: str = "auto", T_A=None
):
    """(x rows, status) minimising ||A x - b|| for tall A; a numerically rank-deficient A (a
    diagonal entry of R below ``rcond * max|R_ii|``, ``rcond`` as in ``jaxmg.least_squares``)
    gives that entry's 1-based index as the status and NaN rows."""
    rcond = _status.checked_rcond(rcond)
    tile = _plan.per_shard_tile("qr", grid, backend, T_A, a.shape, a.dtype)
    b, spec = _rhs(b, grid, rhs_spec)
    if tile is not None:
        f, tau, status = native.qr_factor(a, grid=grid, tile=tile)
        (x,) = native.qr_solve(f, tau, b, grid=grid, tile=tile)
        (diagonal,) = native.qr_diagonal(f, tau, grid=grid, tile=tile)
    else:
        kernels = _device(local.QR)
        state, status = kernels.factor(gather_block(a, grid))
        x, diagonal = kernels.solve(state, b), kernels.diagonal(state)
    shape = (a.shape[-2] * grid.nprow, a.shape[-1] * grid.npcol)
    status = _status.either(status, _status.rank_deficient(diagonal, _status.rcond_threshold(rcond, shape, a.dtype)))
    return local_rows(_status.masked(status, x), spec), status


def syevd(a, *, grid: Grid, backend: str = "auto", T_A=None):
    """(w whole, v block, status) of Hermitian A."""
    tile = _plan.per_shard_tile("eigh", grid, backend, T_A, a.shape, a.dtype)
    if tile is not None:
        return native.syevd(a, grid=grid, tile=tile)
    w, v, status = _device(local.Decompositions).syevd(gather_block(a, grid))
    return w, local_block(v, grid), status


def gesvd(a, *, grid: Grid, full_matrices: bool = False, backend: str = "auto", T_A=None):
    """(u block, s whole, vh block, status)."""
    tile = _plan.per_shard_tile("svd", grid, backend, T_A, a.shape, a.dtype)
    if tile is not None:
        return native.gesvd(a, grid=grid, full_matrices=full_matrices, tile=tile)
    u, s, vh, status = _device(local.Decompositions).gesvd(gather_block(a, grid), full_matrices)
    assert u is not None and vh is not None, "gesvd computes u and vh unless told not to"
    return local_block(u, grid), s, local_block(vh, grid), status


def polar(a, *, grid: Grid, backend: str = "auto", T_A=None):
    """(u_p block, h block, status)."""
    tile = _plan.per_shard_tile("polar", grid, backend, T_A, a.shape, a.dtype)
    if tile is not None:
        return native.polar(a, grid=grid, tile=tile)
    u_p, h, status = _device(local.Decompositions).polar(gather_block(a, grid))
    return local_block(u_p, grid), local_block(h, grid), status
