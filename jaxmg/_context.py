"""What a public call finds itself in: eager or traced, inside a ``shard_map``, under ``jax.vmap``,
on which mesh, and what is known of its arrays' layouts.

:func:`of` reads the context from the call's arrays once, at the public boundary
(``jaxmg._dispatch``); the planner (``jaxmg._plan``) asks here for the call's mesh
(:func:`find_mesh`) and the arrays' known layouts (:func:`caller_spec`, :func:`known_sharding`).
This module is jaxmg's only reader of JAX's tracers, of the meshes in context (``jax.set_mesh``,
``jax.sharding.get_abstract_mesh``) and of JAX's private modules; every layer below the planner
is trace-only, is given their answers and never asks again.

* **eager**: every array is concrete, or a tracer of a transformation called outside ``jax.jit``
  (``jax.grad``, ``jvp``, ``vmap`` ...) over concrete arrays. The call then runs as one cached
  ``jax.jit`` of its body.
* **traced**: inside ``jax.jit`` (or any staging transformation): the body is traced inline.
* **manual**: inside a user's ``jax.shard_map`` (the context mesh has Manual axes): the arrays are
  the device's own, and the device's own solver runs on them.

Under ``jax.vmap`` the per-example values hide the stack: :func:`stack_of` reads its size and
layout beneath the vmap tracer. Only here does jaxmg read JAX's tracers (a vmap tracer's
``val``/``batch_dim``, a JVP tracer's ``primal``; JAX 0.10 to 0.13); where they are not found
the call is routed as one matrix (correct, only not spread over the devices).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, Optional, TypeGuard

import jax
import jax.core
import numpy as np
from jax._src import config as _jax_config, core as _core  # the trace state and JAX's trace context
from jax._src.array import ArrayImpl  # concrete arrays, and the only constructor that takes the commitment
from jax._src.interpreters import partial_eval as _pe  # the trace that stages a program out (jax.jit ...)
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from . import _layout
from ._layout import AnyMesh

EAGER, TRACED, MANUAL = "eager", "traced", "manual"


@dataclasses.dataclass(frozen=True)
class Stack:
    """A stack of matrices under ``jax.vmap``: ``size`` matrices, and the stacked value's
    ``sharding`` where it is known (a concrete stack, or Explicit mesh axes), with the batch axis
    first, else None; ``concrete``: the stack is a concrete array (an eager ``jax.vmap``);
    ``nested``: it is a member of a stack of an enclosing ``jax.vmap``; ``outer_axes``: the mesh
    axes that split the batch axes of the enclosing stacks, where their layout is known (those
    axes are the enclosing ``jax.vmap``'s: this stack is spread over the others)."""

    size: int
    sharding: Optional[NamedSharding] = None
    concrete: bool = False
    nested: bool = False
    outer_axes: tuple = ()

    @property
    def mesh(self):
        return None if self.sharding is None else self.sharding.mesh

    @property
    def layout(self) -> Optional[P]:
        """The layout the stack's outputs return to: the stack's own, batch axis first (its matrix
        entries too: a stack split inside its matrices keeps that split; a member of an enclosing
        stack its own, without the enclosing batch axes, which the enclosing ``jax.vmap`` keeps),
        replicated for a concrete stack on no mesh (a NumPy array), None where it is not known
        (Auto mesh axes inside ``jax.jit``, and a member of an enclosing stack on no mesh) and for
        a member of an enclosing stack that every device holding it holds whole (it is mapped as
        it is: nothing moves)."""
        if self.sharding is not None:
            spec = P(*tuple(self.sharding.spec))
            return None if self.nested and not any(_layout.entry_axes(e) for e in spec) else spec
        if self.nested:
            return None
        return P() if self.concrete else None


@dataclasses.dataclass(frozen=True)
class Context:
    """Where a call runs (:data:`EAGER`, :data:`TRACED` or :data:`MANUAL`), the stack it is part
    of under ``jax.vmap`` (None for one matrix), and whether a differentiation trace holds the
    arrays innermost (a batching rule of jaxmg's own must then not be bound: JAX cannot transpose
    it; JAX's batching of the body runs instead). ``concrete``: every array is concrete (no
    tracer at all: it may be donated). ``tracing``: a transformation is tracing, so that
    ``jax.set_mesh`` cannot be entered (an eager ``jax.grad``, ``jax.vmap`` ...)."""

    kind: str
    stack: Optional[Stack] = None
    differentiated: bool = False
    concrete: bool = False
    tracing: bool = False

    @property
    def eager(self) -> bool:
        return self.kind == EAGER


def is_tracer(x) -> bool:
    """Whether ``x`` is a tracer (of any transformation) rather than a concrete value."""
    return isinstance(x, jax.core.Tracer)


def _primal(x):
    """The value beneath a JVP or linearize tracer, or None."""
    return getattr(x, "primal", None) if isinstance(x, jax.core.Tracer) else None


def _batched(x):
    """(stacked value, batch axis) beneath a vmap tracer, or None."""
    if isinstance(x, jax.core.Tracer) and hasattr(x, "batch_dim") and hasattr(x, "val"):
        return x.val, x.batch_dim
    return None


def concrete_value(x, *, through_vmap: bool = False) -> Any:
    """The concrete array beneath the tracers of eager transformations, or None (inside
    ``jax.jit`` there is none). With ``through_vmap`` a vmap tracer's stacked value counts too."""
    while isinstance(x, jax.core.Tracer):
        inner = _primal(x)
        if inner is None and through_vmap:
            found = _batched(x)
            inner = None if found is None else found[0]
        if inner is None:
            return None
        x = inner
    return x


def is_eager(arrays) -> bool:
    """Whether every array (None allowed) is concrete or an eager transformation's tracer, and no
    program is being staged out (concrete arrays closed over by a function that ``jax.jit``,
    ``jax.lax.cond``, ``jax.lax.scan`` or ``jax.eval_shape`` traces are constants of that
    program: the call is traced into it)."""
    return not staging() and all(x is None or concrete_value(x, through_vmap=True) is not None for x in arrays)


def staging() -> bool:
    """Whether a trace that stages a program out (``jax.jit``, the control-flow primitives,
    ``jax.checkpoint``, ``jax.eval_shape``, ``jax.make_jaxpr``) is active, beneath any eager
    transformations' traces."""
    trace = _core.trace_ctx.trace
    while trace is not None:
        if isinstance(trace, _pe.DynamicJaxprTrace):
            return True
        trace = getattr(trace, "parent_trace", None)
    return False


def stack_of(x, matrix: bool = False) -> Optional[Stack]:
    """The stack that ``x`` is a member of under ``jax.vmap``, or None. ``matrix``: ``x`` is a
    matrix argument, whose layout on a mesh of Explicit and Auto axes inside ``jax.jit`` is
    completed by rule 4 (:func:`_completed`)."""
    while isinstance(x, jax.core.Tracer):
        found = _batched(x)
        if found is not None:
            value, axis = found
            if not isinstance(axis, int):  # not mapped: this argument is not batched
                return None
            deepest, position, outer = _beneath(value, axis)
            sharding = _placed(deepest)
            layout = None if sharding is None else _moved_first(sharding, jax.typeof(deepest).ndim, position, outer)
            outer_axes = () if sharding is None else _axes_of(sharding, outer)
            if layout is not None and is_tracer(deepest) and not _layout.all_explicit(layout.mesh):
                layout = _completed(layout) if matrix and not outer_axes else None
            return Stack(int(jax.typeof(value).shape[axis]), layout, not is_tracer(deepest), bool(outer), outer_axes)
        x = _primal(x)
    return None


def _placed(value) -> Optional[NamedSharding]:
    """The sharding of ``value`` (the array beneath a stack's tracers) on a mesh: a concrete
    array's, else its type's (inside ``jax.jit`` the type names its Explicit mesh axes alone)."""
    sharding = getattr(jax.typeof(value) if is_tracer(value) else value, "sharding", None)
    return sharding if isinstance(sharding, NamedSharding) and not sharding.mesh.empty else None


def _completed(typed: NamedSharding) -> Optional[NamedSharding]:
    """The layout of a stack of matrices inside ``jax.jit`` on a mesh of Explicit and Auto axes,
    from ``typed``, its type (batch axis first), which names its Explicit axes alone: its matrices
    laid out by rule 4 of ``jaxmg._layout`` (the mesh axes in order, as one matrix of unknown
    layout is) and its batch axis whole, where the type agrees (no Explicit axis splits the batch
    axis, and each one splits the dimension of the matrices that the rule gives it); else None,
    not known (on Auto axes alone too: the type names none)."""
    mesh = typed.mesh
    entries = tuple(typed.spec) + (None,) * (3 - len(tuple(typed.spec)))
    if AxisType.Explicit not in mesh.axis_types or len(mesh.axis_names) > 2 or len(entries) != 3 or entries[0]:
        return None
    default = tuple(_layout.default_spec(mesh))
    if any(not set(_layout.entry_axes(t)) <= set(_layout.entry_axes(d)) for t, d in zip(entries[1:], default)):
        return None
    return NamedSharding(mesh, P(None, *default))


def _moved_first(sharding: NamedSharding, ndim: int, axis: int, outer: tuple[int, ...]) -> NamedSharding:
    """``sharding`` of an array of rank ``ndim`` with its dimension ``axis`` first and its
    dimensions ``outer`` (the batch axes of enclosing ``jax.vmap`` calls) left out: the layout of
    each member of the enclosing stacks, a stack along ``axis``."""
    entries = list(tuple(sharding.spec) + (None,) * (ndim - len(tuple(sharding.spec))))
    rest = [e for i, e in enumerate(entries) if i != axis and i not in outer]
    return NamedSharding(sharding.mesh, P(entries[axis], *rest))


def _axes_of(sharding: NamedSharding, dims: tuple[int, ...]) -> tuple:
    """The mesh axes that split the dimensions ``dims`` of an array laid out as ``sharding``."""
    spec = tuple(sharding.spec)
    return tuple(name for i in dims if i < len(spec) for name in _layout.entry_axes(spec[i]))


def _beneath(value, axis: int) -> tuple[Any, int, tuple[int, ...]]:
    """What lies beneath a stacked ``value``: (the array beneath every ``jax.vmap`` and JVP tracer,
    concrete, or a tracer of ``jax.jit``; the position of ``value``'s axis ``axis`` in it; the
    positions of the axes that enclosing ``jax.vmap`` calls map over, non-empty for a stack inside
    a stack)."""
    outer: list[int] = []
    while isinstance(value, jax.core.Tracer):
        inner = _primal(value)
        if inner is None:
            found = _batched(value)
            if found is None:
                return value, axis, tuple(outer)
            inner, mapped = found
            if isinstance(mapped, int):
                axis += mapped <= axis
                outer = [o + (mapped <= o) for o in outer] + [mapped]
        value = inner
    return value, axis, tuple(outer)


def manual() -> bool:
    """Whether the call is inside a ``jax.shard_map`` body (the context mesh has Manual axes)."""
    mesh = jax.sharding.get_abstract_mesh()
    return mesh is not None and not mesh.empty and any(t == AxisType.Manual for t in mesh.axis_types)


def of(matrices, others=()) -> Context:
    """The context of a call on ``matrices`` (the matrix arguments: their stack decides the
    route) and ``others`` (right-hand sides, a module's arrays)."""
    arrays = [x for x in list(matrices) + list(others) if x is not None]
    if manual():
        return Context(MANUAL)
    stack = next((s for s in (stack_of(x, matrix=True) for x in matrices) if s is not None), None)
    differentiated = any(_primal(x) is not None for x in arrays)
    kind = EAGER if is_eager(arrays) else TRACED
    concrete = not any(is_tracer(x) for x in arrays)
    return Context(kind, stack, differentiated, concrete, tracing())


def tracing() -> bool:
    """Whether a transformation is tracing (``jax.set_mesh`` cannot be entered then)."""
    try:
        jax.sharding.get_mesh()
    except ValueError:
        return True
    return False


# --- What is known of an array's layout ---


def _array_sharding(x, through_vmap: bool = False) -> Optional[NamedSharding]:
    """The NamedSharding of ``x`` (of the concrete array beneath eager transformations' tracers,
    else of its type), or None where it has no mesh."""
    base = concrete_value(x, through_vmap=through_vmap)
    x = x if base is None else base
    sharding = getattr(jax.typeof(x) if is_tracer(x) else x, "sharding", None)
    return sharding if isinstance(sharding, NamedSharding) and not sharding.mesh.empty else None


def known_sharding(x) -> Optional[NamedSharding]:
    """The NamedSharding of ``x`` if it is known at trace time, else None: that of concrete
    arrays (and eager transformations' tracers of them), and inside ``jax.jit`` only on Explicit
    mesh axes."""
    sharding = _array_sharding(x)
    if sharding is None or (is_tracer(x) and concrete_value(x) is None and not _layout.all_explicit(sharding.mesh)):
        return None
    return sharding


def typed_sharding(x) -> Optional[NamedSharding]:
    """The sharding of ``x`` where its mesh has Explicit axes, inside ``jax.jit`` too: there its
    type names the Explicit axes that split it (on a mesh of Explicit and Auto axes, the part of
    its layout that the type carries); None elsewhere."""
    sharding = _array_sharding(x)
    if sharding is None or AxisType.Explicit not in sharding.mesh.axis_types:
        return None
    return sharding


def whole_on(x, mesh: AnyMesh) -> bool:
    """Whether ``x``, a tracer inside ``jax.jit``, is known to be whole on ``mesh``, a mesh of
    Explicit axes alone: its type names no mesh (an argument on one device, or an array made
    inside without a layout), and on Explicit axes a type names every split, as eagerly the
    array's own placement does."""
    if not is_tracer(x) or concrete_value(x, through_vmap=True) is not None or not _layout.all_explicit(mesh):
        return False
    sharding = getattr(jax.typeof(x), "sharding", None)
    return sharding is not None and getattr(sharding, "mesh", None) is not None and sharding.mesh.empty


def mesh_of(x) -> Optional[AnyMesh]:
    """The mesh ``x`` is placed on, concrete or abstract, if any (Auto axes included; under eager
    transformations, that of the concrete array beneath the tracers)."""
    sharding = _array_sharding(x, through_vmap=True)
    return None if sharding is None else sharding.mesh


def caller_spec(x, mesh: AnyMesh) -> Optional[P]:
    """The spec of ``x`` on ``mesh`` if known (None when unknown or on another mesh)."""
    sharding = known_sharding(x)
    if sharding is None or not _layout.same_mesh(sharding.mesh, mesh):
        return None
    return sharding.spec


def check_reachable(x, name: str, mesh: AnyMesh, target: str = "mesh=", fix: Optional[str] = None) -> None:
    """Inside ``jax.jit`` an array cannot move to a mesh of another shape or other axes (eagerly
    it is transferred): say so, naming ``target`` (where ``mesh`` came from) and ``fix``,
    instead of JAX's divisibility or device-assignment error."""
    if not is_tracer(x) or is_eager((x,)):
        return
    own = mesh_of(x)
    if own is None or own.empty:
        return
    _layout.check_same_axes(own, mesh, name, target, fix)


# --- The mesh of a call ---


def _set_mesh_while_tracing() -> Optional[Mesh]:
    """The concrete mesh of ``jax.set_mesh`` while an eager transformation traces (when
    ``jax.sharding.get_mesh`` refuses to run), from JAX's private context (JAX 0.10 - 0.12); None
    where it moved."""
    try:
        from jax._src import mesh as mesh_lib

        found = mesh_lib.get_concrete_mesh()
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, Mesh) and not found.empty else None


def context_mesh(eager: bool = False) -> Optional[AnyMesh]:
    """The mesh set with ``jax.set_mesh``: concrete when eager, abstract inside jit. ``eager``: the
    call's arrays are concrete (or eager transformations' tracers of them), so that the concrete
    mesh is wanted even while those trace."""
    if not tracing():
        concrete = jax.sharding.get_mesh()
    else:
        concrete = _set_mesh_while_tracing() if eager else None
    if concrete is not None and not concrete.empty:
        return concrete
    abstract = jax.sharding.get_abstract_mesh()
    if abstract is not None and not abstract.empty:
        return abstract
    return None


def find_mesh(mesh, a, others: Sequence = ()) -> Optional[AnyMesh]:
    """The mesh a call runs on: ``mesh`` if given, else a's mesh, else that of another argument
    (``others``), else the context mesh (``jax.set_mesh``), else the 1 x 1 mesh of a's device where
    that device is known (eagerly, or in a process with one device: :func:`is_device_mesh`, on
    which the route is decided and only the distributed route runs); else None: inside
    ``jax.jit`` on several devices an array without a known layout is on no known mesh."""
    if mesh is not None:
        _layout.check_mesh(mesh)
        return mesh
    found = mesh_of(a)
    for x in others:
        found = found or mesh_of(x)
    eager = is_eager((a,) + tuple(others))
    found = found or context_mesh(eager=eager)
    if found is None and (eager or jax.device_count() == 1):
        found = device_mesh(a)
    return found


def device_mesh(x) -> Mesh:
    """The 1 x 1 mesh of the device ``x`` lives on (the default device where unknown): with no
    mesh anywhere a call runs on that device as a 1 x 1 process grid, as ``jax.scipy.linalg`` would."""
    base = concrete_value(x, through_vmap=True)
    devices = getattr(getattr(base, "sharding", None), "device_set", None)
    device = next(iter(devices)) if devices is not None and len(devices) == 1 else jax.devices()[0]
    return _one_device_mesh(device)


@functools.cache
def _one_device_mesh(device) -> Mesh:
    return Mesh(np.array([device]).reshape(1, 1), _layout.DEVICE_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2)


def is_device_mesh(mesh) -> TypeGuard[Mesh]:
    """Whether ``mesh`` is the 1 x 1 mesh that :func:`device_mesh` made for a call with no mesh
    anywhere (not one the caller gave, set or placed an array on): a call plans its route there,
    but only the distributed route runs on it; the others run on the arrays as they are, so that
    their outputs are placed as JAX places them (no mesh of jaxmg's in their types or shardings)."""
    if not isinstance(mesh, Mesh) or mesh.axis_names != _layout.DEVICE_AXES or mesh.size != 1:
        return False
    return _one_device_mesh(mesh.devices.flat[0]) is mesh


# --- Eager calls: the concrete values beneath tracers, and uncommitted outputs ---


def eager_values(x) -> list:
    """The concrete arrays beneath ``x``: its primal, and the tangents of ``jax.jvp`` that are
    concrete (none for vmapped values, which the compiled call's batching places)."""
    if not hasattr(x, "shape"):
        return []
    found = []
    while is_tracer(x):
        tangent = getattr(x, "tangent", None)
        if tangent is not None and not is_tracer(tangent) and hasattr(tangent, "sharding"):
            found.append(tangent)
        x = getattr(x, "primal", None)
        if x is None:
            return []
    return [x] + found


def uncommitted(tree):
    """``tree`` with each concrete single-device array made uncommitted (no copy), as JAX's own
    results are when every input was uncommitted: such arrays then meet arrays on any device."""

    def release(x):
        if type(x) is not ArrayImpl or not x.committed or len(x.sharding.device_set) != 1:
            return x
        device = next(iter(x.sharding.device_set))
        # the same buffer, whose device the sharding names: nothing for JAX to check again
        return ArrayImpl(x.aval, _layout.single_device(device), x._arrays, committed=False, _skip_checks=True)

    return jax.tree.map(release, tree)


# --- What decides an eager call's compiled program ---


def top_level() -> bool:
    """Whether no transformation is tracing at all (an eager call on concrete arrays, outside
    ``jax.jit``, ``jax.grad`` and every other trace)."""
    return _core.trace_state_clean()


def config_key() -> tuple:
    """What of JAX's configuration changes a trace (JAX's own ``jax.jit`` cache keys on it): the
    x64 mode, dtype and rank promotion, the default device and matmul precision, the meshes set
    with ``jax.set_mesh`` (concrete and abstract), and the rest of JAX's trace context."""
    return _jax_config.trace_context()


def concrete_signature(values) -> Optional[tuple]:
    """What of the concrete arrays ``values`` decides a call's plan and compiled program: each
    one's shape, dtype and weak type (its abstract value), sharding and commitment; None where a
    value is not a concrete JAX array (a NumPy array, a scalar, a tracer, None)."""
    signature = []
    for x in values:
        if type(x) is not ArrayImpl:
            return None
        signature.append((x.aval, x.sharding, x.committed))
    return tuple(signature)


def visible_signature(x) -> Optional[tuple]:
    """What a concrete array ``x`` shows of itself (None where it is not one): its shape, dtype and
    weak type, the Explicit mesh axes of its type and the spec they carry (the abstract mesh of
    Auto axes, which a computation run in ``jax.set_mesh`` leaves on its outputs, carries none),
    its sharding and commitment."""
    if type(x) is not ArrayImpl:
        return None
    aval = x.aval
    typed = getattr(aval, "sharding", None)
    mesh = getattr(typed, "mesh", None)
    explicit = tuple(
        n for n, t in zip(getattr(mesh, "axis_names", ()), getattr(mesh, "axis_types", ())) if t == AxisType.Explicit
    )
    spec = typed.spec if explicit and typed is not None else None
    return aval.shape, aval.dtype, aval.weak_type, explicit, spec, x.sharding, x.committed


def retyped(tree, avals: tuple):
    """``tree`` with each concrete array whose entry of ``avals`` (one per leaf; None: as it is) is
    an abstract value made of that type, the same buffers (no copy): an array of one shape,
    dtype and sharding whose type names another abstract mesh of Auto axes (that of the mesh an
    eager call ran in)."""
    leaves, structure = jax.tree.flatten(tree)
    out = [
        x if aval is None else ArrayImpl(aval, x.sharding, x._arrays, committed=x.committed, _skip_checks=True)
        for x, aval in zip(leaves, avals)
    ]
    return jax.tree.unflatten(structure, out)


def uncommitted_call(mesh, arrays) -> bool:
    """Whether an eager call's outputs should be uncommitted: no mesh was given, none is set, and
    every input array is uncommitted (as with JAX's own operations)."""
    if mesh is not None or context_mesh(eager=True) is not None:
        return False
    leaves = [concrete_value(x) for x in jax.tree.leaves(arrays) if hasattr(x, "shape")]
    return all(x is not None and not getattr(x, "committed", False) for x in leaves)
