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
(``jaxmg.potrs``, the modules) instead. The backend is chosen as everywhere else.
"""

from __future__ import annotations

from typing import Optional

from jax.sharding import PartitionSpec as P

from .. import _backend, _checks, _layout
from .._layout import Grid
from .._sharded import gather_rows, local_rows


def _kernels(family: str, grid: Grid, backend: str, T_A: Optional[int], local_shape, dtype=None):
    _checks.check_backend(backend)
    _checks.check_tile(T_A)
    shape = (local_shape[0] * grid.nprow, local_shape[1] * grid.npcol)
    module = _backend.select(family, backend, grid.mesh, shape, dtype)
    params = {}
    if module.NAME == "native":
        params["tile"] = T_A or _layout.auto_tile(shape, grid)
    return module, params


def _rhs(b, grid: Grid, rhs_spec: Optional[P]):
    spec = rhs_spec if rhs_spec is not None else grid.rows_spec(b.ndim)
    return gather_rows(b, spec), spec


def potrs(a, b, *, grid: Grid, rhs_spec: Optional[P] = None, backend: str = "auto", T_A=None):
    """(x rows, logdet, status) for Hermitian positive-definite A from local blocks.

    A backend with a fused solve (the native one: factor and solve in one call, in place in
    cuSOLVERMp's layout, with no redistribution of the matrix) runs it; otherwise the
    factor and the solve of the Cholesky family run one after the other.
    """
    module, params = _kernels("cholesky", grid, backend, T_A, a.shape)
    b, spec = _rhs(b, grid, rhs_spec)
    if hasattr(module, "potrs"):
        x, logdet, status = module.potrs(a, b, grid=grid, **params)
        return local_rows(x, spec), logdet, status
    state, status = module.cholesky_factor(a, grid=grid, **params)
    (x,) = module.cholesky_solve(state, b, grid=grid, **params)
    (logdet,) = module.cholesky_logdet(state, grid=grid, **params)
    return local_rows(x, spec), logdet, status


def cholesky(a, *, grid: Grid, backend: str = "auto", T_A=None):
    """(L block, status) with A = L L^H."""
    module, params = _kernels("cholesky", grid, backend, T_A, a.shape)
    if module.NAME == "native":
        params["natural"] = True  # a factor L can be read from
    state, status = module.cholesky_factor(a, grid=grid, **params)
    (lower,) = module.cholesky_lower(state, grid=grid, **params)
    return lower, status


def lu_solve(a, b, *, grid: Grid, rhs_spec: Optional[P] = None, backend: str = "auto", T_A=None):
    """(x rows, status) for general square A."""
    module, params = _kernels("lu", grid, backend, T_A, a.shape, a.dtype)
    lu, piv, status = module.lu_factor(a, grid=grid, **params)
    b, spec = _rhs(b, grid, rhs_spec)
    (x,) = module.lu_solve(lu, piv, b, grid=grid, trans=0, **params)
    return local_rows(x, spec), status


def least_squares(a, b, *, grid: Grid, rhs_spec: Optional[P] = None, backend: str = "auto", T_A=None):
    """(x rows, status) minimising ||A x - b|| for tall A."""
    module, params = _kernels("qr", grid, backend, T_A, a.shape)
    q, r, status = module.qr_factor(a, grid=grid, **params)
    b, spec = _rhs(b, grid, rhs_spec)
    (x,) = module.qr_solve(q, r, b, grid=grid, **params)
    return local_rows(x, spec), status


def syevd(a, *, grid: Grid, backend: str = "auto", T_A=None):
    """(w whole, v block, status) of Hermitian A."""
    module, params = _kernels("eigh", grid, backend, T_A, a.shape)
    return module.syevd(a, grid=grid, **params)


def gesvd(a, *, grid: Grid, full_matrices: bool = False, backend: str = "auto", T_A=None):
    """(u block, s whole, vh block, status)."""
    module, params = _kernels("svd", grid, backend, T_A, a.shape)
    return module.gesvd(a, grid=grid, full_matrices=full_matrices, **params)


def polar(a, *, grid: Grid, backend: str = "auto", T_A=None):
    """(u_p block, h block, status)."""
    module, params = _kernels("polar", grid, backend, T_A, a.shape)
    return module.polar(a, grid=grid, **params)
