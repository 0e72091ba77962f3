"""The cyclic order of a matrix on a process grid, in which the triangular recursion's slices are local.

On a grid of ``nprow x npcol`` processes, with ``c = lcm(nprow, npcol)``, an m x n matrix ``X``
(m, n multiples of ``c``) is held as its reordering ``R = X[s_m][:, s_n]`` in the grid layout
(rows split over the row axes, columns over the column axes), with the cyclic permutation
``s_m[l * (m / c) + k] = k * c + l``: row ``k * c + l`` of ``X`` is row ``k`` of the ``l``-th of
``c`` equal row groups of ``R``, and each process holds ``c / nprow`` whole groups. So:

* a block ``X[a:b, d:e]`` (bounds multiples of ``c``) is rows ``a/c:b/c`` and columns
  ``d/c:e/c`` of every group: a slice of every process's own block, no data moves (in the natural
  order, the half of a matrix lies on half of the processes and XLA gathers it to split it again);
* the reordering of ``X^H`` is ``R^H`` (the same permutation on both sides), and that of a
  product ``X Y`` is the product of the reorderings (the permutation of the summed index cancels);
* a product is one matrix product per process of the row panel of ``x`` (its rows, gathered
  over the column axes) and the column panel of ``y`` (gathered over the row axes): the panels in
  flight are the only memory beyond the operands and the result.

:class:`Cyclic` is this order as a ``jaxmg.kernels.triangular.Layout``. Its methods are traced
on whole matrices with the grid's axes Auto (``jaxmg._sharded.whole``: on an Explicit mesh, as
``jax.sharding.auto_axes``), where XLA places what the shardings they name do not fix.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from .._sharded import axis_name
from . import triangular

if TYPE_CHECKING:
    from .._layout import Grid


@dataclasses.dataclass(frozen=True)
class Cyclic(triangular.Layout):
    """The cyclic order (module docstring) of the matrices of ``grid`` (a ``jaxmg._layout.Grid``);
    ``base``: the order of the diagonal blocks that the recursion inverts whole (each process
    holds such a block whole while it inverts it)."""

    grid: Grid
    base: int
    sequential = True

    @property
    def groups(self) -> int:
        """``c``: the number of row (and column) groups, ``lcm(nprow, npcol)``."""
        return math.lcm(self.grid.nprow, self.grid.npcol)

    def fits(self, n: int) -> bool:
        """Whether every block that the recursion on an order-``n`` matrix takes has bounds that
        are multiples of :attr:`groups`."""

        def ok(m: int) -> bool:
            if m % self.groups:
                return False
            if m <= min(self.base, triangular.TRMM_BASE):
                return True
            first, second = triangular._halves(m)
            return ok(first.stop) and ok(m - first.stop)

        return ok(n)

    def _mesh(self):
        """The grid's mesh with the axis types of the trace: the context's abstract mesh where it
        is the grid's (inside ``jax.sharding.auto_axes``, as ``jaxmg._sharded.whole`` runs the
        recursion, the axes of an Explicit mesh are Auto), else the grid's mesh."""
        context = jax.sharding.get_abstract_mesh()
        if not context.empty and context.axis_names == self.grid.mesh.axis_names:
            return context
        return self.grid.mesh

    def _laid(self, x: jax.Array) -> jax.Array:
        """``x`` (m, n) in the grid layout."""
        return jax.lax.with_sharding_constraint(x, NamedSharding(self._mesh(), self.grid.spec))

    def _grouped(self, x: jax.Array) -> jax.Array:
        """(m, n) -> (c, m/c, c, n/c): the row and column groups, each group on one process."""
        c, (m, n) = self.groups, x.shape
        spec = P(self.grid.spec[0], None, self.grid.spec[1], None)
        return jax.lax.with_sharding_constraint(x.reshape(c, m // c, c, n // c), NamedSharding(self._mesh(), spec))

    def _ungrouped(self, g: jax.Array) -> jax.Array:
        """Inverse of :meth:`_grouped`."""
        c, mc, _, nc = g.shape
        return self._laid(g.reshape(c * mc, c * nc))

    def block(self, x, rows, cols):
        (r0, r1, _), (c0, c1, _), c = rows.indices(x.shape[0]), cols.indices(x.shape[1]), self.groups
        return self._ungrouped(self._grouped(x)[:, r0 // c : r1 // c, :, c0 // c : c1 // c])

    def concatenate(self, parts, axis):
        return self._ungrouped(jnp.concatenate([self._grouped(p) for p in parts], axis=2 * axis + 1))

    def order(self, m):
        i, mc = jnp.arange(m), m // self.groups
        return (i % mc) * self.groups + i // mc

    def natural(self, x):
        c, (m, n) = self.groups, x.shape
        return x.reshape(c, m // c, c, n // c).transpose(1, 0, 3, 2).reshape(m, n)

    def reordered(self, x):
        c, (m, n) = self.groups, x.shape
        return self._laid(x.reshape(m // c, c, n // c, c).transpose(1, 0, 3, 2).reshape(m, n))

    def matmul(self, x, y):
        """``x @ y`` of reordered matrices in the grid layout: on each process, its row panel of
        ``x`` (m/nprow, k) times its column panel of ``y`` (k, n/npcol)."""
        grid = self.grid

        def local(xb, yb):
            if grid.col_axes:
                xb = jax.lax.all_gather(xb, axis_name(grid.col_axes), axis=1, tiled=True)
            if grid.row_axes:
                yb = jax.lax.all_gather(yb, axis_name(grid.row_axes), axis=0, tiled=True)
            return jnp.matmul(xb, yb, precision=jax.lax.Precision.HIGHEST)

        return jax.shard_map(
            local, mesh=self._mesh(), in_specs=(grid.spec, grid.spec), out_specs=grid.spec, check_vma=False
        )(self._laid(x), self._laid(y))


def on_grid(grid, n: int) -> Cyclic | None:
    """The cyclic order for the triangular recursion on an order-``n`` matrix of ``grid``, or None
    where the grid is one process or the recursion's blocks do not fit it (the natural order).
    Its diagonal blocks are of order at most n/16 (and 128 at least): each is 1/256 of the matrix,
    1/32 of a process's share on 8 processes."""
    if grid.nprow * grid.npcol == 1:
        return None
    layout = Cyclic(grid, min(triangular.BASE, max(128, n // 16)))
    return layout if layout.fits(n) else None
