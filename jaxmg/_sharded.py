"""Run a per-shard kernel over the process grid and return outputs in the caller's layout.

Every operation is a *kernel* that runs on each device inside ``jax.shard_map``.
Each argument and each output has a kind:

* :class:`Block` — a matrix in the grid layout: the kernel sees (and returns) this
  device's local block. An output Block can be returned in another layout (``spec``).
* :class:`Rows` — a right-hand side or solution (N or N x NRHS, small): the kernel sees
  and returns it whole; it arrives and leaves in layout ``spec`` (rows split or not).
* :class:`Replicated` — small data every device holds whole (scalars, eigenvalues,
  pivots, status).

Everything here is trace-only: the public boundary (``jaxmg._dispatch``) places the caller's
arrays, caches compiled calls and enters meshes; this module only builds the ``shard_map`` of a
kernel over the grid and records placements in the trace.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ._layout import Grid, check_output_fits, entry, entry_axes, padded_spec, single_device


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


def explicit(mesh) -> bool:
    """Whether any axis of ``mesh`` is Explicit (arrays' types then carry their layout)."""
    return any(t == jax.sharding.AxisType.Explicit for t in getattr(mesh, "axis_types", ()))


def manual_axes_in(mesh) -> bool:
    """Whether any axis of ``mesh`` is Manual (the mesh of a ``jax.shard_map`` body)."""
    return any(t == jax.sharding.AxisType.Manual for t in getattr(mesh, "axis_types", ()))


def explicit_type(x) -> Optional[NamedSharding]:
    """The sharding of ``x``'s type where its mesh has Explicit axes (there the type carries the
    layout, inside ``jax.jit`` too), else None."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    if sharding is None or sharding.mesh.empty or not explicit(sharding.mesh):
        return None
    return sharding


def typed_like(like, y) -> jax.Array:
    """``y`` with ``like``'s sharding type where that names Explicit mesh axes; else ``y``. Reverse
    mode then hands a cotangent back in that layout whatever layout it arrives in, and a
    ``custom_linear_solve``'s solve returns the type of its right-hand side."""
    sharding = explicit_type(like)
    return y if sharding is None else jax.sharding.reshard(y, sharding)


def on_mesh_of(like, y) -> jax.Array:
    """``y`` typed as replicated on the mesh of ``like``'s sharding type where that names Explicit
    mesh axes and ``y`` has no mesh; else ``y``. A value traced one matrix at a time (Lineax's
    solves) whose mesh type was dropped on the way (an integer status that a primitive handed back
    with no mesh) is then batched by JAX over an Explicit axis of that mesh, which a value of no
    mesh cannot be."""
    sharding = explicit_type(like)
    return y if sharding is None else _replicated_if_meshless(y, sharding.mesh)


def _replicated_if_meshless(y, mesh) -> jax.Array:
    """``y`` typed replicated on ``mesh`` where its type names no mesh; else ``y``. Put there
    (``jax.device_put``) where ``mesh`` is concrete: the enclosing program then runs on its devices,
    also where no mesh is in context (``jax.jit`` of a call given ``mesh=`` on arrays of one
    device), which a type alone does not make it do."""
    own = getattr(jax.typeof(y), "sharding", None)
    if own and not own.mesh.empty:
        return y
    if isinstance(mesh, Mesh):
        return jax.device_put(y, NamedSharding(mesh, P()))
    return jax.sharding.reshard(y, NamedSharding(mesh, P()))


def meshless_typed_on(mesh, args):
    """``args`` (a pytree) with each array whose type names no mesh typed as replicated on
    ``mesh``, where ``mesh`` has Explicit axes and none Manual; else ``args``. An array made
    outside any mesh context (``jnp.ones(n)`` in the caller's function) and not mapped by
    ``jax.vmap`` is then broadcast by JAX's batching rules over the vmapped Explicit axis as the
    mapped arrays are, which an array of no mesh is not (its batch would be whole on every device
    beside a split one: JAX refuses the product or triangular solve of the two)."""
    abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
    if not explicit(abstract) or manual_axes_in(abstract):
        return args
    return jax.tree.map(lambda x: _replicated_if_meshless(x, mesh) if isinstance(x, jax.Array) else x, args)


def explicit_mesh_of(args):
    """The mesh of the first array of ``args`` (a pytree) whose type names Explicit axes, else
    None."""
    for x in jax.tree.leaves(args):
        sharding = explicit_type(x) if isinstance(x, jax.Array) else None
        if sharding is not None:
            return sharding.mesh
    return None


def cotangents_typed(args):
    """``args`` (a pytree), each array whose type names Explicit axes (and none Manual) passed
    through a reshard to its own type: the same values, whose transpose gives a cotangent that
    arrives in any type (one of no mesh: the random cotangent of a second-order reverse check,
    ``jax.test_util.check_grads``) the array's type. JAX's transpose of a transpose checks its
    cotangent's type, and the drop-ins' resharded transposes (``(a + a^H)/2``, a wide matrix's
    adjoint) would see one of no mesh."""

    def typed(x):
        sharding = explicit_type(x) if isinstance(x, jax.Array) else None
        if sharding is None or manual_axes_in(sharding.mesh):
            return x
        return jax.sharding.reshard(x, sharding)

    return jax.tree.map(typed, args)


def meshless_typed_alike(args):
    """``args`` (a sequence) with each array of no mesh typed replicated on the mesh of the first
    argument whose type names Explicit axes (:func:`meshless_typed_on`); else ``args``. Inside a
    trace only (eagerly an array's mesh is a concrete one)."""
    for x in args:
        sharding = explicit_type(x)
        if sharding is not None:
            return meshless_typed_on(sharding.mesh, args)
    return args


def auto_axes_of(mesh):
    """The abstract mesh of ``mesh`` with its Explicit axes Auto: the mesh that a body run by
    ``jax.sharding.auto_axes`` sees."""
    abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
    return abstract.update_axis_types(
        {
            name: jax.sharding.AxisType.Auto
            for name, kind in zip(abstract.axis_names, abstract.axis_types)
            if kind == jax.sharding.AxisType.Explicit
        }
    )


def auto_axes(body: Callable, mesh, out_sharding) -> Callable:
    """``jax.sharding.auto_axes(body)`` over the Explicit axes of ``mesh`` alone: inside a
    ``jax.shard_map`` over some of the axes, the Manual ones stay Manual (JAX refuses to make
    them Auto)."""
    names = tuple(n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == jax.sharding.AxisType.Explicit)
    return jax.sharding.auto_axes(body, axes=names, out_sharding=out_sharding)


def abstract_context(mesh):
    """The abstract mesh of ``mesh`` (concrete or abstract), entered as the context of a trace."""
    return jax.sharding.use_abstract_mesh(mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh)


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
    rows = x.shape[0] // math.prod(jax.lax.axis_size(name) for name in axes)
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


def _spec(kind: Kind, grid: Grid) -> P:
    if isinstance(kind, Block):
        return grid.spec
    if isinstance(kind, Rows):
        return kind.spec
    return P()


@dataclasses.dataclass(frozen=True)
class Call:
    """Everything static about one kernel call over the grid."""

    kernel: Callable  # kernel(*args, grid=grid, **params) -> tuple of outputs
    params: tuple  # sorted (name, value) pairs of the kernel's static keywords
    grid: Grid
    inputs: tuple  # Kind per argument
    outputs: tuple  # Kind per output

    @property
    def in_specs(self) -> tuple:
        return tuple(_spec(k, self.grid) for k in self.inputs)


def _body(call: Call):
    def body(*args):
        args = [gather_rows(x, k.spec) if isinstance(k, Rows) else x for x, k in zip(args, call.inputs)]
        outs = call.kernel(*args, grid=call.grid, **dict(call.params))
        return tuple(local_rows(o, k.spec) if isinstance(k, Rows) else o for o, k in zip(outs, call.outputs))

    return body


def run(kernel: Callable, grid: Grid, args: Sequence, inputs: Sequence, outputs: Sequence, **params) -> tuple:
    """``kernel`` on every device of ``grid`` inside ``jax.shard_map`` (trace-only): the arguments
    are placed in the layouts of their kinds (``inputs``), and the outputs come back in theirs
    (``outputs``; a Block output with a ``spec`` is returned in that layout)."""
    call = Call(kernel, tuple(sorted(params.items())), grid, tuple(inputs), tuple(outputs))
    mesh = grid.mesh
    with abstract_context(mesh):
        args = tuple(pinned(x, spec, mesh) for x, spec in zip(args, call.in_specs))
        outs = jax.shard_map(
            _body(call),
            mesh=mesh,
            in_specs=call.in_specs,
            out_specs=tuple(_spec(k, grid) for k in call.outputs),
            check_vma=False,
        )(*args)
        return tuple(
            _place(o, k.spec, mesh) if isinstance(k, Block) and k.spec is not None else o
            for o, k in zip(outs, call.outputs)
        )


def _place(x, spec: P, mesh) -> jax.Array:
    """Inside a trace: give ``x`` layout ``spec``."""
    if not explicit(mesh):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
    typed, free = _split_by_type(spec, mesh)
    current = jax.typeof(x).sharding
    if isinstance(current, NamedSharding) and not current.mesh.empty and current.spec == padded_spec(typed, x.ndim):
        return _constrained(x, free, mesh)
    return _constrained(jax.sharding.reshard(x, typed), free, mesh)


def _split_by_type(spec: P, mesh) -> tuple[P, Optional[P]]:
    """``spec`` on a mesh with Explicit axes as (its Explicit axes, which an array's type carries
    and ``jax.sharding.reshard`` places; its Auto axes, which ``with_sharding_constraint`` places,
    or None where it names none): on a mesh of Explicit and Auto axes a layout names both."""
    types = dict(zip(mesh.axis_names, mesh.axis_types))

    def keep(axes, kind):
        return entry(tuple(name for name in entry_axes(axes) if types[name] == kind))

    typed = P(*(keep(e, jax.sharding.AxisType.Explicit) for e in spec))
    free = P(*(keep(e, jax.sharding.AxisType.Auto) for e in spec))
    return typed, (free if any(e is not None for e in free) else None)


def _constrained(x, free: Optional[P], mesh) -> jax.Array:
    """``x`` with the Auto-axes part ``free`` of its layout (:func:`_split_by_type`) constrained,
    inside a ``jax.jit``: traced, the constraint keeps the Explicit axes of x's type, where an eager
    one (a concrete primal, or the eager transpose of an eager ``jax.grad``) would lay ``x`` out as
    ``free`` alone and drop them."""
    if free is None:
        return x
    return _jitted_constraint(x, NamedSharding(mesh, free))


@functools.partial(jax.jit, static_argnums=(1,))
def _jitted_constraint(x, sharding: NamedSharding) -> jax.Array:
    return jax.lax.with_sharding_constraint(x, sharding)


def released(tree, mesh: Mesh):
    """Each array of ``tree`` placed on the one device of ``mesh`` (a 1 x 1 mesh) by a sharding of
    no mesh (trace-only): its type then names no mesh, as those of JAX's own operations on one
    device do, and its cotangent comes back so too. Outside any mesh context."""
    device = single_device(mesh.devices.flat[0])
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, device) if hasattr(x, "ndim") else x, tree)


def whole(fn: Callable, args: Sequence, grid: Grid, **static) -> Any:
    """``fn(*args, **static)`` on whole matrices in the grid layout (trace-only).

    ``fn`` is written for whole (global) arrays; XLA's partitioner splits its products and slices
    over the mesh, so no matrix is gathered onto one device (on Explicit mesh axes it is traced
    with the axes Auto, as ``jax.sharding.auto_axes`` does). Matrix arguments and outputs are in
    the grid layout, vectors (pivots) and scalars replicated."""
    mesh = grid.mesh
    body = functools.partial(fn, **static)
    with abstract_context(mesh):
        args = tuple(pinned(x, _whole_spec(x, grid), mesh) for x in args)
    with abstract_context(auto_axes_of(mesh)):  # the shapes, traced with the axes the body sees
        shapes = jax.eval_shape(body, *(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in args))
    specs = jax.tree.map(lambda o: _whole_spec(o, grid), shapes)
    with abstract_context(mesh):
        if explicit(mesh):
            return auto_axes(body, mesh, specs)(*args)
        return jax.tree.map(
            lambda o, spec: jax.lax.with_sharding_constraint(o, NamedSharding(mesh, spec)), body(*args), specs
        )


def _whole_spec(x, grid: Grid) -> P:
    return grid.spec if jnp.ndim(x) == 2 else P()


def pinned(x, spec: P, mesh) -> jax.Array:
    """``x`` in layout ``spec``, with the placement recorded in the trace even where ``x``
    already has it (on Explicit mesh axes): ``jax.lax.custom_linear_solve`` replays a solve
    traced once on cotangents in any layout, and an elided placement would leave the replayed
    shard_map a value of the wrong layout."""
    if explicit(mesh):
        typed, free = _split_by_type(spec, mesh)
        with abstract_context(mesh):
            return _constrained(jax.sharding.reshard(x, typed), free, mesh)
    return place(x, spec, mesh)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def place(x, spec: P, mesh) -> jax.Array:
    """Global array ``x`` in layout ``spec`` on ``mesh`` (trace-only).

    Its tangents get the same layout: JAX accepts tangents and cotangents in any sharding
    (replicated, on one device, another spec), and every array that enters an operation
    passes here, so the computation after it sees one layout per value."""
    with abstract_context(mesh):
        return _place(x, spec, mesh)


@place.defjvp
def _place_jvp(spec, mesh, primals, tangents):
    (x,), (dx,) = primals, tangents
    return place(x, spec, mesh), place(dx, spec, mesh)


def moved(x, source: P, target: P, mesh) -> jax.Array:
    """``x``, laid out as ``source``, in layout ``target`` on ``mesh``, one mesh axis at a time
    (trace-only; tangents move as ``x`` does, cotangents back the same way): XLA moves one axis
    from one dimension to another by an all-to-all, where a move of several at once gathers the
    whole array onto every device first ("involuntary full rematerialization"). Axes that
    ``target`` does not name are gathered, those that ``source`` does not name are sliced
    locally."""
    for spec in _axis_moves(source, target, x.ndim):
        x = place(x, spec, mesh)
    return place(x, target, mesh)


def _axis_moves(source: P, target: P, ndim: int) -> list[P]:
    """The layouts between ``source`` and ``target`` (each one mesh axis moved, or the axes after
    it in its dimension that ``target`` does not name gathered first, so that it moves as the
    minor axis of that dimension), the minor dimensions' axes first; the last step to ``target``
    (gathering what is left) is the caller's."""
    now = [list(entry_axes(e)) for e in padded_spec(source, ndim)]
    want = [list(entry_axes(e)) for e in padded_spec(target, ndim)]
    named = {name for axes in want for name in axes}
    steps = []
    for dim in reversed(range(ndim)):
        for k, name in enumerate(want[dim]):
            if now[dim][: k + 1] == want[dim][: k + 1]:
                continue
            if now[dim] != want[dim][:k]:
                break
            held = next((axes for axes in now if name in axes), None)
            if held is not None:
                minor = held[held.index(name) + 1 :]
                if any(a not in named for a in minor):
                    held[:] = [a for a in held if a not in minor or a in named]
                    steps.append(P(*(entry(tuple(axes)) for axes in now)))
                held.remove(name)
            now[dim].append(name)
            steps.append(P(*(entry(tuple(axes)) for axes in now)))
    return steps


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def tangents_in(x, spec: P, mesh) -> jax.Array:
    """``x`` itself (nothing moves), whose tangents and cotangents take layout ``spec`` on
    ``mesh`` (trace-only): placed before an operation that moves ``x`` elsewhere, it returns the
    cotangent of ``x`` to ``spec`` (JAX's transpose of a placement keeps the placement's layout)."""
    return x


@tangents_in.defjvp
def _tangents_in_jvp(spec, mesh, primals, tangents):
    (x,), (dx,) = primals, tangents
    return x, place(dx, _typed_as(x, spec, mesh), mesh)


def _typed_as(x, spec: P, mesh) -> P:
    """``spec`` with the Explicit mesh axes of x's type in place of its own (a tangent's type is its
    primal's: only the Auto axes of a layout can differ), on a mesh of Explicit and Auto axes."""
    if not explicit(mesh) or all(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):
        return spec
    _, free = _split_by_type(spec, mesh)
    typed = padded_spec(P(*jax.typeof(x).sharding.spec), x.ndim)
    free = padded_spec(free if free is not None else P(), x.ndim)
    merged = (entry_axes(t) + entry_axes(f) for t, f in zip(typed, free))
    return P(*(entry(axes) for axes in merged))


def check_outputs(kinds: Sequence[Kind], shapes: Sequence[tuple], grid: Grid, names: Sequence[str]) -> None:
    """Every output shape must be divisible by the mesh axes of its layout."""
    for kind, shape, name in zip(kinds, shapes, names):
        if isinstance(kind, (Block, Rows)):
            check_output_fits(shape, _spec(kind, grid) if kind.spec is None else kind.spec, grid.mesh, name)
