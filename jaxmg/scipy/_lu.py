"""``lu_factor``'s arrays ``(lu, piv)`` of a matrix split over a mesh, from jaxmg's distributed LU.

JAX's ``(lu, piv)`` is LAPACK's row-pivoted factor ``a[order] = L U`` (L unit lower, U upper,
packed into one matrix) with the row swaps ``piv`` that give ``order``. On the distributed route
(cuSOLVERMp, ``jaxmg.kernels.native.lu``) :class:`jaxmg.LU` of a matrix ``x`` factors, in its own
buffers, ``M' = (x^T)[s_r][:, s_c]`` with ``s_r`` and ``s_c`` tile permutations of the process
grid. Here ``x = a^T`` with its columns split over every device of the mesh (a's rows split, each
device's block transposed where it lies), so that cuSOLVERMp's grid is one column of processes:
``s_c`` is the identity and ``M' = a[s_r]``, whose partial-pivoting factor ``M'[perm] = L U`` is
a's own (the order of the rows decides only between equal pivots): ``a[s_r[perm]] = L U``.
``lu`` is that packed factor, read back from the grid and transposed, in a's layout (never
gathered onto one device); ``piv`` the row swaps of ``s_r[perm]``.

cuSOLVERMp leaves a singular matrix's factor NaN (where LAPACK leaves a zero pivot): on this
route ``lu`` of an exactly singular matrix is NaN.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from .. import _dispatch
from .._dense import matmul, spec_of
from .._layout import AnyMesh
from ..kernels.ffi.solver import packed_lu_tangent
from ..kernels.native.lu import lu_factor_order
from ..modules import LU
from ..numpy._util import distributed_mesh as _distributed_mesh, in_layout, in_layout_of, take_rows


def distributed_mesh(a) -> Optional[AnyMesh]:
    """The mesh on which one matrix ``a`` (N, N) takes jaxmg's distributed LU (the route that
    :class:`jaxmg.LU` takes for it) with its rows split over the mesh's devices, else None."""
    mesh = _distributed_mesh(a, "LU")
    if mesh is None:
        return None
    devices = math.prod(mesh.shape[name] for name in _axes(mesh))
    return mesh if devices > 1 and a.shape[0] % devices == 0 else None


def _axes(mesh) -> tuple:
    """The mesh's axes of more than one device, in order."""
    return tuple(name for name in mesh.axis_names if mesh.shape[name] > 1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def packed(a: jax.Array, mesh, solve: Callable) -> tuple[jax.Array, jax.Array]:
    """``(lu, piv)`` of ``a`` (N, N) on ``mesh`` by the distributed LU (module docstring); ``lu``
    in a's layout, ``piv`` (N,) int32 replicated. ``solve(t, b, lower=, unit=, right=)``: the
    triangular solve over the mesh that the derivative uses."""
    del solve
    split = _axes(mesh)
    x = jnp.swapaxes(in_layout(a, P(split, None), a), -1, -2)  # a^T, its columns split
    module = LU(x, mesh=mesh, matrix_specs=P(None, split))
    factor = _dispatch.method(module, _transposed_factor)
    order = lu_factor_order(a.shape[0], module.plan.tile, module.plan.grid)
    assert order["cols"] is None or order["cols"] == tuple(range(a.shape[0])), "one column of processes"
    perm = jax.lax.linalg.lu_pivots_to_permutation(module.pivots, a.shape[0])  # M'[perm] = L U
    rows = perm if order["rows"] is None else jnp.asarray(order["rows"], perm.dtype)[perm]
    return in_layout_of(jnp.swapaxes(factor, -1, -2), a), row_swaps(rows)


def _transposed_factor(plan, module):
    """The packed factor of ``M'`` transposed, in the grid layout (trace-only)."""
    return plan.backend.lu(plan).transposed_factor(module.state)[0]


@packed.defjvp
def _packed_jvp(mesh, solve, primals, tangents):
    """JAX's derivative of the packed factor (``packed_lu_tangent``), with the solves and
    products over the mesh."""
    (a,), (a_dot,) = primals, tangents
    lu, piv = packed(a, mesh, solve)
    order = jax.lax.linalg.lu_pivots_to_permutation(piv, a.shape[0])
    product = functools.partial(matmul, spec=spec_of(lu))
    lu_dot = packed_lu_tangent(lu, take_rows(a_dot, order), solve=solve, matmul=product)
    return (lu, piv), (in_layout_of(lu_dot, lu), jax.custom_derivatives.zero_from_primal(piv))


def row_swaps(order: jax.Array) -> jax.Array:
    """LAPACK's 0-based row swaps (row ``i`` exchanged with row ``piv[i]``, for i = 0, 1, ...)
    that bring the rows of a matrix into ``order`` (row ``order[i]`` ends at ``i``):
    ``jax.lax.linalg.lu_pivots_to_permutation(row_swaps(order), n) == order``."""
    n = order.shape[0]

    def step(i, state):
        at, where, swaps = state  # at[p]: the row now at p; where[r]: where row r is now
        row = order[i]
        j, moved = where[row], at[i]
        at = at.at[i].set(row).at[j].set(moved)
        where = where.at[row].set(i).at[moved].set(j)
        return at, where, swaps.at[i].set(j)

    start = jnp.arange(n, dtype=jnp.int32)
    return jax.lax.fori_loop(0, n, step, (start, start, start))[2]
