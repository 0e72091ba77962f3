"""Run a per-shard kernel over the process grid and return outputs in the caller's layout.

Every operation is a *kernel* that runs on each device inside ``jax.shard_map``:

* matrix arguments arrive as this device's local block of the grid layout
  (``Grid.spec``);
* right-hand sides arrive whole (they are small: N x NRHS), gathered here from
  the caller's layout;
* the kernel returns, per output, either a local block of a matrix in the grid
  layout (:class:`Block`), or a whole array that is the same on every device
  (:class:`Rows`, sliced here back to the right-hand side's layout, or
  :class:`Replicated`).

Placement, resharding, donation and compilation caching are done here once
for every operation.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ._layout import Grid, Layout, check_output_fits, entry_axes


@dataclasses.dataclass(frozen=True)
class Block:
    """A matrix output: the kernel returns its local block of the grid layout."""

    spec: P  # the caller's layout to return it in


@dataclasses.dataclass(frozen=True)
class Rows:
    """A solution-like output: whole in the kernel, returned with a right-hand side's layout."""

    spec: P


@dataclasses.dataclass(frozen=True)
class Replicated:
    """A small output (scalar, eigenvalues, status) that every device holds whole."""


OutKind = Block | Rows | Replicated


def _index(axes) -> jax.Array:
    """This device's index along the (possibly combined) mesh axes ``axes``."""
    return jax.lax.axis_index(axes if len(axes) > 1 else axes[0])


def gather_rows(x: jax.Array, spec: P) -> jax.Array:
    """Inside shard_map: the whole array from its local rows (spec's first entry)."""
    axes = entry_axes(tuple(spec)[0] if len(tuple(spec)) else None)
    if not axes:
        return x
    return jax.lax.all_gather(x, axes if len(axes) > 1 else axes[0], axis=0, tiled=True)


def local_rows(x: jax.Array, spec: P) -> jax.Array:
    """Inside shard_map: this device's rows of a whole array, for layout ``spec``."""
    axes = entry_axes(tuple(spec)[0] if len(tuple(spec)) else None)
    if not axes:
        return x
    size = 1
    for name in axes:
        size *= jax.lax.axis_size(name)
    rows = x.shape[0] // size
    return jax.lax.dynamic_slice_in_dim(x, _index(axes) * rows, rows, axis=0)


def gather_block(x: jax.Array, grid: Grid) -> jax.Array:
    """Inside shard_map: the whole matrix from this device's block of the grid layout."""
    if grid.row_axes:
        x = jax.lax.all_gather(x, _name(grid.row_axes), axis=x.ndim - 2, tiled=True)
    if grid.col_axes:
        x = jax.lax.all_gather(x, _name(grid.col_axes), axis=x.ndim - 1, tiled=True)
    return x


def local_block(x: jax.Array, grid: Grid) -> jax.Array:
    """Inside shard_map: this device's block of a whole matrix, in the grid layout."""
    rows = x.shape[-2] // grid.nprow
    cols = x.shape[-1] // grid.npcol
    if grid.row_axes:
        x = jax.lax.dynamic_slice_in_dim(x, _index(grid.row_axes) * rows, rows, axis=x.ndim - 2)
    if grid.col_axes:
        x = jax.lax.dynamic_slice_in_dim(x, _index(grid.col_axes) * cols, cols, axis=x.ndim - 1)
    return x


def _name(axes):
    return axes if len(axes) > 1 else axes[0]


def _kind_spec(kind: OutKind, grid: Grid) -> P:
    if isinstance(kind, Block):
        return grid.spec
    if isinstance(kind, Rows):
        return kind.spec
    return P()


def _localize(value: jax.Array, kind: OutKind) -> jax.Array:
    if isinstance(kind, Rows):
        return local_rows(value, kind.spec)
    return value


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything static about one call; hashable, so compiled calls are cached on it."""

    kernel: Callable  # kernel(*local_matrices, *whole_rhs, grid=..., **params) -> outputs
    params: tuple  # sorted (name, value) pairs of the kernel's static keywords
    layout: Layout
    num_matrices: int
    outputs: tuple  # OutKind per output


def _body(plan: Plan):
    nm = plan.num_matrices

    def body(*args):
        mats = args[:nm]
        rhs = [gather_rows(x, spec) for x, spec in zip(args[nm:], plan.layout.rhs_specs)]
        outs = plan.kernel(*mats, *rhs, grid=plan.layout.grid, **dict(plan.params))
        return tuple(_localize(o, k) for o, k in zip(outs, plan.outputs))

    return body


def _in_specs(plan: Plan) -> tuple:
    return (plan.layout.grid.spec,) * plan.num_matrices + plan.layout.rhs_specs


def _traced(plan: Plan, *args):
    """The computation of one call, to be traced (inside the caller's jit or our own)."""
    grid = plan.layout.grid
    mesh = grid.mesh
    abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
    with jax.sharding.use_abstract_mesh(abstract):
        args = tuple(_place(x, spec, mesh) for x, spec in zip(args, _in_specs(plan)))
        outs = jax.shard_map(
            _body(plan),
            mesh=mesh,
            in_specs=_in_specs(plan),
            out_specs=tuple(_kind_spec(k, grid) for k in plan.outputs),
            check_vma=False,
        )(*args)
        return tuple(
            _place(o, k.spec, mesh) if isinstance(k, Block) else o
            for o, k in zip(outs, plan.outputs)
        )


def _place(x, spec: P, mesh) -> jax.Array:
    """Inside a trace: give ``x`` layout ``spec`` (Explicit axes need an explicit reshard)."""
    types = getattr(mesh, "axis_types", ())
    if not any(t == jax.sharding.AxisType.Explicit for t in types):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
    current = jax.typeof(x).sharding if isinstance(x, jax.core.Tracer) else None
    if current is not None and not current.mesh.empty and current.spec == _full(spec, x.ndim):
        return x
    return jax.sharding.reshard(x, spec)


def _full(spec: P, ndim: int) -> P:
    entries = tuple(spec)
    return P(*(entries + (None,) * (ndim - len(entries))))


@functools.lru_cache(maxsize=256)
def _compiled(plan: Plan, donate: bool):
    nargs = plan.num_matrices + len(plan.layout.rhs_specs)
    return jax.jit(
        functools.partial(_traced, plan),
        donate_argnums=tuple(range(nargs)) if donate else (),
    )


def run(plan: Plan, args: Sequence, *, donate: bool = False) -> tuple:
    """Run ``plan`` on ``args`` (matrices first, then right-hand sides).

    Eagerly, the inputs are placed on the mesh and a compiled call cached on the
    plan runs inside the call's own mesh; with ``donate=True`` the inputs may be
    consumed. Inside a trace the computation is inlined into the caller's program.
    """
    args = tuple(args)
    if any(isinstance(x, jax.core.Tracer) for x in args) or not isinstance(plan.layout.grid.mesh, Mesh):
        return _traced(plan, *args)
    mesh = plan.layout.grid.mesh
    placed = tuple(
        jax.device_put(x, NamedSharding(mesh, spec)) for x, spec in zip(args, _in_specs(plan))
    )
    with jax.set_mesh(mesh):
        return _compiled(plan, bool(donate))(*placed)


def check_outputs(plan_outputs: Sequence[OutKind], shapes: Sequence[tuple], mesh, names: Sequence[str]) -> None:
    """Every output shape must be divisible by the mesh axes of its layout."""
    for kind, shape, name in zip(plan_outputs, shapes, names):
        if isinstance(kind, (Block, Rows)):
            check_output_fits(shape, kind.spec, mesh, name)


def real_dtype(dtype) -> jnp.dtype:
    """The real dtype matching ``dtype`` (float32 for complex64, ...)."""
    return jnp.finfo(dtype).dtype
