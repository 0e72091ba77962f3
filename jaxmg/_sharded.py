"""Run a per-shard kernel over the process grid and return outputs in the caller's layout.

Every operation is a *kernel* that runs on each device inside ``jax.shard_map``.
Each argument and each output has a kind:

* :class:`Block` — a matrix in the grid layout: the kernel sees (and returns) this
  device's local block. An output Block can be returned in another layout (``spec``).
* :class:`Rows` — a right-hand side or solution (N or N x NRHS, small): the kernel sees
  and returns it whole; it arrives and leaves in layout ``spec`` (rows split or not).
* :class:`Replicated` — small data every device holds whole (scalars, eigenvalues,
  pivots, status).

Placement, resharding, donation and compilation caching are done here once for
every operation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ._layout import Grid, check_output_fits, eager_value, entry_axes, is_eager, padded_spec, tracing


@dataclasses.dataclass(frozen=True)
class Block:
    """A matrix in the grid layout; as an output, returned with layout ``spec`` (None: grid)."""

    spec: Optional[P] = None


@dataclasses.dataclass(frozen=True)
class Rows:
    """Whole inside the kernel; outside, laid out as ``spec`` (rows split, or replicated)."""

    spec: P


@dataclasses.dataclass(frozen=True)
class Replicated:
    """Small data that every device holds whole."""


Kind = Block | Rows | Replicated


def axis_name(axes):
    """The mesh axis name(s) of ``axes`` as collectives take them."""
    return axes if len(axes) > 1 else axes[0]


def axis_index(axes) -> jax.Array:
    """This device's index along the (possibly combined) mesh axes ``axes`` (0 for none)."""
    return jax.lax.axis_index(axis_name(axes)) if axes else jnp.int32(0)


def _rows_axes(spec: P) -> tuple:
    entries = tuple(spec)
    return entry_axes(entries[0] if entries else None)


def gather_rows(x: jax.Array, spec: P) -> jax.Array:
    """Inside shard_map: the whole array from its local rows (spec's first entry)."""
    axes = _rows_axes(spec)
    if not axes:
        return x
    return jax.lax.all_gather(x, axis_name(axes), axis=0, tiled=True)


def local_rows(x: jax.Array, spec: P) -> jax.Array:
    """Inside shard_map: this device's rows of a whole array, for layout ``spec``."""
    axes = _rows_axes(spec)
    if not axes:
        return x
    size = 1
    for name in axes:
        size *= jax.lax.axis_size(name)
    rows = x.shape[0] // size
    return jax.lax.dynamic_slice_in_dim(x, axis_index(axes) * rows, rows, axis=0)


def gather_block(x: jax.Array, grid: Grid) -> jax.Array:
    """Inside shard_map: the whole matrix from this device's block of the grid layout."""
    if grid.row_axes:
        x = jax.lax.all_gather(x, axis_name(grid.row_axes), axis=x.ndim - 2, tiled=True)
    if grid.col_axes:
        x = jax.lax.all_gather(x, axis_name(grid.col_axes), axis=x.ndim - 1, tiled=True)
    return x


def local_block(x: jax.Array, grid: Grid) -> jax.Array:
    """Inside shard_map: this device's block of a whole matrix, in the grid layout."""
    rows = x.shape[-2] // grid.nprow
    cols = x.shape[-1] // grid.npcol
    if grid.row_axes:
        x = jax.lax.dynamic_slice_in_dim(x, axis_index(grid.row_axes) * rows, rows, axis=x.ndim - 2)
    if grid.col_axes:
        x = jax.lax.dynamic_slice_in_dim(x, axis_index(grid.col_axes) * cols, cols, axis=x.ndim - 1)
    return x


def block_offsets(grid: Grid, local_shape) -> tuple[jax.Array, jax.Array]:
    """Inside shard_map: global row and column indices of this device's local block."""
    rows, cols = local_shape[-2], local_shape[-1]
    i, j = axis_index(grid.row_axes), axis_index(grid.col_axes)
    return i * rows + jnp.arange(rows), j * cols + jnp.arange(cols)


def _spec(kind: Kind, grid: Grid) -> P:
    if isinstance(kind, Block):
        return grid.spec
    if isinstance(kind, Rows):
        return kind.spec
    return P()


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything static about one call; hashable, so compiled calls are cached on it."""

    kernel: Callable  # kernel(*args, grid=grid, **params) -> tuple of outputs
    params: tuple  # sorted (name, value) pairs of the kernel's static keywords
    grid: Grid
    inputs: tuple  # Kind per argument
    outputs: tuple  # Kind per output
    check_vma: bool = False  # True for pure-JAX kernels that JAX differentiates

    @property
    def in_specs(self) -> tuple:
        return tuple(_spec(k, self.grid) for k in self.inputs)


def _body(plan: Plan):
    def body(*args):
        args = [gather_rows(x, k.spec) if isinstance(k, Rows) else x for x, k in zip(args, plan.inputs)]
        outs = plan.kernel(*args, grid=plan.grid, **dict(plan.params))
        return tuple(local_rows(o, k.spec) if isinstance(k, Rows) else o for o, k in zip(outs, plan.outputs))

    return body


def _traced(plan: Plan, *args):
    """The computation of one call, to be traced (inside the caller's jit or our own)."""
    mesh = plan.grid.mesh
    abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
    with jax.sharding.use_abstract_mesh(abstract):
        args = tuple(pinned(x, spec, mesh) for x, spec in zip(args, plan.in_specs))
        outs = jax.shard_map(
            _body(plan),
            mesh=mesh,
            in_specs=plan.in_specs,
            out_specs=tuple(_spec(k, plan.grid) for k in plan.outputs),
            check_vma=plan.check_vma,
        )(*args)
        return tuple(
            _place(o, k.spec, mesh) if isinstance(k, Block) and k.spec is not None else o
            for o, k in zip(outs, plan.outputs)
        )


def _place(x, spec: P, mesh) -> jax.Array:
    """Inside a trace: give ``x`` layout ``spec``."""
    types = getattr(mesh, "axis_types", ())
    if not any(t == jax.sharding.AxisType.Explicit for t in types):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
    current = jax.typeof(x).sharding if isinstance(x, jax.core.Tracer) else None
    if current is not None and not current.mesh.empty and current.spec == padded_spec(spec, x.ndim):
        return x
    return jax.sharding.reshard(x, spec)


@functools.lru_cache(maxsize=512)
def _compiled(plan: Plan, donate: tuple):
    return jax.jit(functools.partial(_traced, plan), donate_argnums=donate)


def run(plan: Plan, args: Sequence, *, donate: Sequence[int] = ()) -> tuple:
    """Run ``plan`` on ``args``.

    Outside ``jax.jit`` (concrete arrays, or the tracers of eager transformations such as
    ``jax.grad`` and ``jax.jvp`` called outside jit) the inputs are placed on the mesh and
    a compiled call cached on the plan runs; JAX differentiates that call as it does any
    jitted function (its derivatives are compiled and cached too). Arguments whose
    positions are in ``donate`` may be consumed when all are concrete. Inside a trace it is
    a call of the same cached jitted function, which XLA inlines into the caller's program;
    where a transformation stages the call and then runs it eagerly (the solves inside
    ``jax.lax.custom_linear_solve`` under an eager ``jax.grad``), it runs as one compiled
    program, compiled once, instead of operation by operation.
    """
    args = tuple(args)
    mesh = plan.grid.mesh
    if not isinstance(mesh, Mesh) or not is_eager(args):
        return _compiled(plan, ())(*args)
    placed = tuple(put_eager(x, NamedSharding(mesh, spec)) for x, spec in zip(args, plan.in_specs))
    concrete = not any(isinstance(x, jax.core.Tracer) for x in args)
    with entered(mesh):
        return _compiled(plan, tuple(donate) if concrete else ())(*placed)


def whole(fn: Callable, args: Sequence, grid: Grid, **static):
    """``fn(*args, **static)`` on whole matrices in the grid layout.

    ``fn`` is written for whole (global) arrays; XLA's partitioner splits its products and
    slices over the mesh, so no matrix is gathered onto one device (on Explicit mesh axes it is
    traced with the axes Auto, as ``jax.sharding.auto_axes`` does). Matrix arguments and outputs
    are in the grid layout, vectors (pivots) and scalars replicated. It runs as one jitted call cached
    on ``fn``, the grid and ``static`` (hashable), eagerly and inside a trace, like :func:`run`.
    """
    mesh = grid.mesh
    key = tuple(sorted(static.items()))
    if isinstance(mesh, Mesh) and is_eager(args):
        placed = tuple(put_eager(x, NamedSharding(mesh, _whole_spec(x, grid))) for x in args)
        with entered(mesh):
            return _whole_compiled(fn, grid, key)(*placed)
    return _whole_compiled(fn, grid, key)(*args)


def _whole_traced(fn: Callable, grid: Grid, static: tuple, *args):
    mesh = grid.mesh
    abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
    body = functools.partial(fn, **dict(static))
    with jax.sharding.use_abstract_mesh(abstract):
        args = tuple(pinned(x, _whole_spec(x, grid), mesh) for x in args)
        shapes = jax.eval_shape(body, *(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in args))
        specs = jax.tree.map(lambda o: _whole_spec(o, grid), shapes)
        if any(t == jax.sharding.AxisType.Explicit for t in getattr(mesh, "axis_types", ())):
            return jax.sharding.auto_axes(body, out_sharding=specs)(*args)
        return jax.tree.map(lambda o, spec: jax.lax.with_sharding_constraint(o, NamedSharding(mesh, spec)),
                            body(*args), specs)


def _whole_spec(x, grid: Grid) -> P:
    return grid.spec if jnp.ndim(x) == 2 else P()


@functools.lru_cache(maxsize=256)
def _whole_compiled(fn: Callable, grid: Grid, static: tuple):
    return jax.jit(functools.partial(_whole_traced, fn, grid, static))


def put_eager(x, sharding: NamedSharding):
    """``x`` (concrete, or an eager transformation's tracer) moved to ``sharding`` with its
    tangents; values under ``jax.vmap`` (one more axis) are left to the compiled call, whose
    own placement JAX batches."""
    if eager_value(x) is None:
        return x
    if _in_place(x, sharding):
        return x  # already there (and JAX's transpose of device_put under jacrev mistypes Explicit cotangents)
    return jax.device_put(x, sharding)


def _in_place(x, sharding: NamedSharding) -> bool:
    """Whether the concrete values in ``x`` (its primal, and the tangents of ``jax.jvp`` that are
    concrete arrays) all have layout ``sharding``."""
    while isinstance(x, jax.core.Tracer):
        tangent = getattr(x, "tangent", None)
        current = getattr(tangent, "sharding", None) if not isinstance(tangent, jax.core.Tracer) else None
        if current is not None and not current.is_equivalent_to(sharding, x.ndim):
            return False
        x = x.primal
    current = getattr(x, "sharding", None)
    return current is not None and current.is_equivalent_to(sharding, x.ndim)


def uncommitted(tree):
    """``tree`` with each concrete single-device array made uncommitted (no copy), as JAX's
    own results are when every input was uncommitted: such arrays then meet arrays on any
    device, as jnp.linalg's results do."""
    from jax._src.array import ArrayImpl  # the only constructor that takes the commitment

    def release(x):
        if not isinstance(x, ArrayImpl) or not x.committed or len(x.sharding.device_set) != 1:
            return x
        device = next(iter(x.sharding.device_set))
        return ArrayImpl(x.aval, jax.sharding.SingleDeviceSharding(device), x._arrays, committed=False)

    return jax.tree.map(release, tree)


def entered(mesh):
    """Context that enters ``mesh`` for eager code that traces (a no-op while a
    transformation traces: ``jax.set_mesh`` cannot be entered then, and the caller's
    program decides).

    Each call runs in its own mesh, whatever mesh the caller has set."""
    if isinstance(mesh, Mesh) and not tracing():
        return jax.set_mesh(mesh)
    return contextlib.nullcontext()


def pinned(x, spec: P, mesh) -> jax.Array:
    """``x`` in layout ``spec``, with the placement recorded in the trace even where ``x``
    already has it (on Explicit mesh axes).

    For the solves handed to ``jax.lax.custom_linear_solve``: JAX traces them once with the
    right-hand side's type, then replays the traced solve on cotangents as they come (on
    Explicit axes, often replicated), and a placement elided at trace time would leave the
    replayed shard_map a value of the wrong layout."""
    if any(t == jax.sharding.AxisType.Explicit for t in getattr(mesh, "axis_types", ())):
        abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
        with jax.sharding.use_abstract_mesh(abstract):
            return jax.sharding.reshard(x, spec)
    return place(x, spec, mesh)


def place(x, spec: P, mesh) -> jax.Array:
    """Give global array ``x`` layout ``spec`` on ``mesh``, eagerly or inside a trace.

    Its tangents get the same layout: JAX accepts tangents and cotangents in any sharding
    (replicated, on one device, another spec), and every array that enters an operation
    passes here, so the computation after it sees one layout per value."""
    if isinstance(x, jax.core.Tracer):
        return _placed(x, spec, mesh)
    return _place_value(x, spec, mesh)


def _place_value(x, spec: P, mesh) -> jax.Array:
    if isinstance(x, jax.core.Tracer) or not isinstance(mesh, Mesh):
        abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
        with jax.sharding.use_abstract_mesh(abstract):
            return _place(x, spec, mesh)
    return jax.device_put(x, NamedSharding(mesh, spec))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _placed(x, spec: P, mesh) -> jax.Array:
    return _place_value(x, spec, mesh)


@_placed.defjvp
def _placed_jvp(spec, mesh, primals, tangents):
    (x,), (dx,) = primals, tangents
    return _placed(x, spec, mesh), _placed(dx, spec, mesh)


def check_outputs(kinds: Sequence[Kind], shapes: Sequence[tuple], grid: Grid, names: Sequence[str]) -> None:
    """Every output shape must be divisible by the mesh axes of its layout."""
    for kind, shape, name in zip(kinds, shapes, names):
        if isinstance(kind, (Block, Rows)):
            check_output_fits(shape, _spec(kind, grid) if kind.spec is None else kind.spec, grid.mesh, name)
