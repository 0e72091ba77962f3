"""Mesh and sharding resolution: how the caller's arrays map onto the process grid.

Rules (the same for every operation):

1. A one- or two-axis mesh, with any axis names, maps onto the process grid. The mesh
   axes named in the first entry of a's partition spec split the rows (process rows),
   those in the second entry split the columns (process columns). With the default
   spec the first mesh axis gives process rows and the second process columns.
2. ``a`` may be ``P(r, c)``, ``P(r)`` (same as ``P(r, None)``), or ``P(None, c)``.
   Right-hand sides may be ``P(r)``, ``P(r, None)`` or replicated.
3. ``mesh`` and ``matrix_specs`` are optional: they are read from a's sharding, or else
   from the mesh set with ``jax.set_mesh`` (eagerly and inside ``jax.jit``).
4. When the layout of ``a`` is unknown (Auto mesh axes inside ``jax.jit``, or an
   unsharded or replicated ``a``) the default is the mesh axes in order:
   ``P(x, y)`` on two axes, ``P(x, None)`` on one.

This module applies the rules to what is known: the mesh and the layouts that the caller's
arrays are known to have are read by ``jaxmg._context`` (``find_mesh``, ``caller_spec``) and
handed in; nothing here reads a tracer or the mesh in context.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import NamedTuple, Optional, Union

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, PartitionSpec as P

AnyMesh = Union[Mesh, AbstractMesh]
Axes = tuple  # tuple[str, ...]

#: Largest automatic tile size below :data:`LARGE_N`, and from it on (docs/tile-size.md).
MAX_AUTO_TILE = 1024
LARGE_AUTO_TILE = 2048
LARGE_N = 32768


class _MeshRecord(NamedTuple):
    """A concrete mesh as pickle keeps it (JAX's ``Mesh`` holds devices, which do not pickle):
    its devices' ids in mesh order, their shape, the axis names and types."""

    ids: tuple
    shape: tuple
    axis_names: tuple
    axis_types: tuple

    @classmethod
    def of(cls, mesh: Mesh) -> _MeshRecord:
        return cls(tuple(int(d.id) for d in mesh.devices.flat), mesh.devices.shape, mesh.axis_names, mesh.axis_types)

    def mesh(self) -> Mesh:
        """The mesh of this process's devices with these ids (``jax.devices()``)."""
        found = {d.id: d for d in jax.devices()}
        missing = [i for i in self.ids if i not in found]
        if missing:
            raise ValueError(
                f"the pickled mesh's devices {missing} are not among this process's devices "
                f"(ids {sorted(found)}); unpickle where the same devices exist, or save the arrays with "
                "equinox.tree_serialise_leaves and make the module again."
            )
        devices = np.array([found[i] for i in self.ids], dtype=object).reshape(self.shape)
        return Mesh(devices, self.axis_names, axis_types=self.axis_types)


def reduce_meshes(obj) -> tuple:
    """``__reduce__`` of a frozen dataclass whose fields may hold concrete meshes: each is pickled
    as a :class:`_MeshRecord` and rebuilt from this process's devices when loaded."""
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return _rebuilt, (type(obj), {k: _MeshRecord.of(v) if isinstance(v, Mesh) else v for k, v in values.items()})


def _rebuilt(cls, values: dict):
    return cls(**{k: v.mesh() if isinstance(v, _MeshRecord) else v for k, v in values.items()})


def meshes_agree(first, second) -> bool:
    """Whether two meshes (or any two values) name the same mesh as far as both are known: equal,
    or one abstract (the mesh a trace sees) and equal to the other's abstract mesh. A module made
    from a traced array holds the abstract mesh and one made from a concrete array the concrete
    one; both describe one call (the concrete mesh is found again from the arrays where it is
    needed, ``jaxmg._plan.module_plan``), so their pytree structures must be equal for
    ``jax.lax.cond`` and ``jax.lax.scan``. Two different concrete meshes never agree."""
    if first == second:
        return True
    meshes = (isinstance(first, (Mesh, AbstractMesh)), isinstance(second, (Mesh, AbstractMesh)))
    if not all(meshes) or not (isinstance(first, AbstractMesh) or isinstance(second, AbstractMesh)):
        return False
    return first.abstract_mesh == second.abstract_mesh


def agreeing_eq(obj, other) -> bool:
    """``__eq__`` of a frozen dataclass whose fields may hold meshes: the same type, and each field
    equal, meshes by :func:`meshes_agree` (a field that is such a dataclass compares by its own)."""
    if type(other) is not type(obj):
        return NotImplemented  # pyright: ignore[reportReturnType]
    return all(meshes_agree(getattr(obj, f.name), getattr(other, f.name)) for f in dataclasses.fields(obj))


def agreeing_hash(obj) -> int:
    """``__hash__`` of :func:`agreeing_eq`: each mesh hashed as its abstract mesh."""
    values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    return hash(tuple(v.abstract_mesh if isinstance(v, (Mesh, AbstractMesh)) else v for v in values))


@dataclasses.dataclass(frozen=True)
class Grid:
    """How a distributed matrix maps onto the process grid.

    ``row_axes`` are the mesh axes that split the rows (empty: rows are whole on
    every process), ``col_axes`` those that split the columns. The grid has
    ``nprow x npcol`` processes; devices outside these axes hold replicas.
    """

    mesh: AnyMesh
    row_axes: Axes
    col_axes: Axes

    def __reduce__(self):
        return reduce_meshes(self)

    def __eq__(self, other: object) -> bool:
        return agreeing_eq(self, other)

    def __hash__(self) -> int:
        return agreeing_hash(self)

    @property
    def nprow(self) -> int:
        return _axes_size(self.mesh, self.row_axes)

    @property
    def npcol(self) -> int:
        return _axes_size(self.mesh, self.col_axes)

    @property
    def spec(self) -> P:
        """The partition spec of a matrix laid out on this grid."""
        return P(entry(self.row_axes), entry(self.col_axes))

    @classmethod
    def from_spec(cls, mesh: AnyMesh, spec: P, name: str = "a") -> Grid:
        """The grid of a matrix laid out as ``spec`` on ``mesh`` (checked as everywhere)."""
        entries = validate_spec(spec, mesh, name, 2)
        return cls(mesh, entry_axes(entries[0]), entry_axes(entries[1]))

    def rows_spec(self, ndim: int) -> P:
        """The spec of a right-hand side whose rows follow this grid's process rows."""
        axes = self.row_axes or self.col_axes
        return P(entry(axes), *([None] * (ndim - 1)))


def entry(axes: Axes):
    """The PartitionSpec entry for the mesh axes ``axes`` (None for none)."""
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else tuple(axes)


def _axes_size(mesh: AnyMesh, axes: Axes) -> int:
    return math.prod(mesh.shape[name] for name in axes)


def padded_spec(spec, ndim: int) -> P:
    """``spec`` with trailing ``None`` entries up to rank ``ndim``."""
    entries = tuple(spec)
    if len(entries) > ndim:
        raise ValueError(f"PartitionSpec {spec} has more entries than the array's rank {ndim}")
    return P(*(entries + (None,) * (ndim - len(entries))))


def entry_axes(entry) -> Axes:
    """The mesh axes named by one entry of a partition spec."""
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def spec_axes(entries) -> set:
    """The names of the mesh axes that the spec entries ``entries`` use."""
    return {name for e in entries for name in entry_axes(e)}


def all_explicit(mesh: AnyMesh) -> bool:
    """Whether the axes of ``mesh`` that an array's layout can name are all Explicit: some axis is
    Explicit and none is Auto (inside a ``jax.shard_map`` over some of the axes, the Manual ones
    are named by no layout, and the free Explicit ones type the arrays as outside)."""
    types = set(getattr(mesh, "axis_types", ()))
    return jax.sharding.AxisType.Explicit in types and jax.sharding.AxisType.Auto not in types


def check_mesh(mesh) -> None:
    """``mesh=`` must be a Mesh or AbstractMesh with axes."""
    if not isinstance(mesh, (Mesh, AbstractMesh)):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}.")
    if mesh.empty:
        raise ValueError("mesh has no axes; pass a mesh made with jax.make_mesh.")


#: The axis names of the 1 x 1 mesh of a call that finds no mesh anywhere.
DEVICE_AXES = ("rows", "cols")


def split_specs(matrix_specs, count: int) -> tuple:
    """``matrix_specs`` is one PartitionSpec (for ``a``) or one per matrix argument."""
    if matrix_specs is None:
        return (None,) * count
    if isinstance(matrix_specs, P):
        return (matrix_specs,) + (None,) * (count - 1)
    if isinstance(matrix_specs, (list, tuple)) and all(s is None or isinstance(s, P) for s in matrix_specs):
        specs = tuple(matrix_specs)
        if len(specs) > count:
            raise ValueError(
                f"matrix_specs has {len(specs)} entries but this operation takes {count} "
                f"matrix argument(s); pass one PartitionSpec per argument."
            )
        return specs + (None,) * (count - len(specs))
    raise TypeError(
        "matrix_specs must be a PartitionSpec or a list of PartitionSpecs (one per matrix "
        f"argument), got {matrix_specs!r}."
    )


def validate_spec(spec: P, mesh: AnyMesh, name: str, ndim: int) -> tuple:
    """The entries of ``spec`` for an array ``name`` of rank ``ndim``, padded with None, checked."""
    entries = tuple(spec)
    if len(entries) > ndim:
        raise ValueError(f"the spec of {name}, {spec}, has {len(entries)} entries but {name} has rank {ndim}.")
    entries = entries + (None,) * (ndim - len(entries))
    used = []
    for axis in (axis for entry in entries for axis in entry_axes(entry)):
        if not isinstance(axis, str):
            raise TypeError(f"the spec of {name}, {spec}, must name mesh axes by string.")
        if axis not in mesh.axis_names:
            raise ValueError(
                f"the spec of {name}, {spec}, names mesh axis {axis!r}, which the mesh "
                f"does not have; its axes are {tuple(mesh.axis_names)}."
            )
        if axis in used:
            raise ValueError(f"the spec of {name}, {spec}, uses mesh axis {axis!r} twice.")
        used.append(axis)
    if len(used) > 2:
        raise ValueError(
            f"the spec of {name}, {spec}, uses {len(used)} mesh axes; the process grid has "
            f"two dimensions, so use at most two axes, e.g. P('x', 'y')."
        )
    return entries


def divides(shape, entries, mesh: AnyMesh) -> bool:
    """Whether every dimension of ``shape`` is divisible by the mesh axes of its spec entry."""
    return all(extent % _axes_size(mesh, entry_axes(e)) == 0 for extent, e in zip(shape, tuple(entries)))


def check_divides(shape, entries, mesh: AnyMesh, name: str, fix: Optional[str] = None) -> None:
    """Each dimension of ``shape`` must be divisible by the mesh axes of its spec entry."""
    for dim, (extent, entry) in enumerate(zip(shape, entries)):
        size = _axes_size(mesh, entry_axes(entry))
        if extent % size:
            what = "rows" if dim == 0 else "columns"
            raise ValueError(
                f"{name} (shape {tuple(shape)}) has {extent} {what}, which the {size} devices of "
                f"mesh axes {entry_axes(entry)} do not divide; "
                f"{fix or f'pad {name} to a multiple of {size} or choose another mesh or spec'}."
            )


def default_spec(mesh: AnyMesh) -> P:
    """The layout used when a's layout is unknown: the mesh axes in order."""
    names = tuple(mesh.axis_names)
    if len(names) not in (1, 2):
        raise ValueError(
            f"the mesh has {len(names)} axes {names}; jaxmg maps one or two of them onto the "
            f"process grid, so pass matrix_specs=P(row_axis, col_axis)."
        )
    return P(*names, *(None,) * (2 - len(names)))


def _abstract(mesh: AnyMesh) -> AbstractMesh:
    """``mesh`` itself if abstract, else its abstract mesh (axis names, sizes and types)."""
    return mesh if isinstance(mesh, AbstractMesh) else mesh.abstract_mesh


def same_mesh(m1: AnyMesh, m2: AnyMesh) -> bool:
    """Whether ``m1`` and ``m2`` are one mesh (abstract meshes: the same axes and types)."""
    both_concrete = isinstance(m1, Mesh) and isinstance(m2, Mesh)
    return _abstract(m1) == _abstract(m2) and (not both_concrete or m1 == m2)


def _is_replicated(spec: P) -> bool:
    return all(not entry_axes(e) for e in spec)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The resolved layout of a factorisation or solve.

    ``grid`` is where the computation runs and ``out_spec`` is the layout in which the
    caller holds ``a`` (matrix outputs return to it). ``rhs_specs`` are the specs given
    in ``matrix_specs`` for right-hand sides (None where not given).
    """

    grid: Grid
    out_spec: P
    rhs_specs: tuple = ()


def resolve(mesh: AnyMesh, matrix_specs, matrices: Sequence[tuple], given: Optional[P], num_rhs: int = 0) -> Layout:
    """The layout of the matrix arguments of a call on ``mesh``.

    ``matrices`` are ``(array, name)`` pairs laid out on the grid (``a`` first; all
    share its spec). ``matrix_specs`` is a PartitionSpec for ``a`` or a list with one
    spec per argument: matrices first, then ``num_rhs`` right-hand sides. ``given`` is the
    layout in which the caller holds ``a`` where it is known (``jaxmg._context.caller_spec``).
    """
    a_name = matrices[0][1]
    specs = split_specs(matrix_specs, len(matrices) + num_rhs)

    spec_a = specs[0]
    if spec_a is None:
        spec_a = given if given is not None and not _is_replicated(given) else default_spec(mesh)
    grid = Grid.from_spec(mesh, spec_a, a_name)
    entries = tuple(grid.spec)
    for (x, name), spec in zip(matrices, specs[: len(matrices)]):
        if spec is not None and P(*validate_spec(spec, mesh, name, 2)) != grid.spec:
            raise ValueError(
                f"the spec of {name}, {spec}, differs from that of {a_name}, {grid.spec}; "
                f"both matrices must share one layout."
            )
        check_divides(x.shape, entries, mesh, name)
    out_spec = given if given is not None and specs[0] is None else grid.spec
    return Layout(grid, out_spec, tuple(specs[len(matrices) :]))


def check_same_axes(own: AnyMesh, mesh: AnyMesh, name: str, target: str = "mesh=", fix: Optional[str] = None) -> None:
    """An array ``name`` traced on mesh ``own`` cannot move to ``mesh`` of another shape or other
    axes inside ``jax.jit``: say so, naming ``target`` (where ``mesh`` came from) and ``fix``,
    instead of JAX's divisibility or device-assignment error."""
    theirs, wanted = _abstract(own), _abstract(mesh)
    if (theirs.axis_names, theirs.axis_sizes) != (wanted.axis_names, wanted.axis_sizes):
        fix = fix or f"Pass {name}'s own mesh (or mesh=None)"
        raise ValueError(
            f"{name} is sharded over a mesh of axes {dict(zip(theirs.axis_names, theirs.axis_sizes))}, but "
            f"{target} is one of axes {dict(zip(wanted.axis_names, wanted.axis_sizes))}; inside jax.jit an array "
            f"cannot move to another mesh. {fix}, or place {name} on that mesh first "
            f"(jax.device_put(x, NamedSharding(mesh, spec)) before jax.jit)."
        )


def resolve_rhs(x, name: str, grid: Grid, spec: Optional[P] = None) -> tuple:
    """(solved, home): the layout in which right-hand side ``x`` is solved, and the one its
    solution goes back to, or None where that is the same. The layout is ``spec`` (given in
    ``matrix_specs``, else x's own where it is known), else a's rows; one that splits x's columns
    is solved with the columns whole, and is the solution's home."""
    if spec is None:
        spec = grid.rows_spec(x.ndim)
    entries = validate_spec(spec, grid.mesh, name, x.ndim)
    home = None
    if x.ndim == 2 and entry_axes(entries[1]):
        home, entries = P(*entries), (entries[0], None)
    check_divides(x.shape[:1], entries[:1], grid.mesh, name)
    return P(*entries), home


def check_output_fits(shape, spec: P, mesh: AnyMesh, what: str) -> None:
    """An output of ``shape`` must be divisible by the mesh axes of ``spec``."""
    entries = tuple(spec) + (None,) * (len(shape) - len(tuple(spec)))
    check_divides(shape, entries, mesh, what, fix="choose a mesh or spec that divides it")


def auto_tile(shape, grid: Grid) -> int:
    """The automatic tile size ``T_A``.

    The largest power of two that is at most :data:`MAX_AUTO_TILE` (:data:`LARGE_AUTO_TILE`
    once N >= :data:`LARGE_N`) and at most the smaller extent of a's local block, so that
    every process owns at least one tile in each direction and large problems get the tile
    size measured fastest.
    """
    local = min(shape[0] // grid.nprow, shape[1] // grid.npcol)
    cap = LARGE_AUTO_TILE if min(shape) >= LARGE_N else MAX_AUTO_TILE
    tile = 1
    while tile * 2 <= min(local, cap):
        tile *= 2
    return tile


def batch_axes(mesh: AnyMesh, size: int, taken: Axes = ()) -> Axes:
    """The mesh axes to spread a stack of ``size`` matrices over: the longest run of the mesh's
    axes, in order, whose devices divide ``size`` (none where even one axis does not), leaving out
    the axes ``taken`` (those that split the batch axes of enclosing stacks)."""
    names = tuple(name for name in mesh.axis_names if name not in taken)
    for count in range(len(names), 0, -1):
        for start in range(len(names) - count + 1):
            axes = names[start : start + count]
            if size % _axes_size(mesh, axes) == 0:
                return axes
    return ()


def platform(mesh) -> str:
    """The platform of the mesh's devices ("cpu", "gpu", ...), concrete or abstract mesh."""
    if mesh is None:
        return jax.devices()[0].platform
    device = getattr(_abstract(mesh), "abstract_device", None)
    return getattr(device, "platform", None) or "unknown"


@functools.cache
def single_device(device) -> jax.sharding.Sharding:
    """The sharding of an array on ``device`` alone, naming no mesh:
    ``jax.sharding.make_single_device_sharding``, which replaces the class
    ``jax.sharding.SingleDeviceSharding`` (deprecated from JAX 0.12.1, whose name warns on every
    use); the class itself on older JAX."""
    make = getattr(jax.sharding, "make_single_device_sharding", None)
    if make is None:
        return jax.sharding.SingleDeviceSharding(device)
    return make(device)
