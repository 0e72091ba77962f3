"""What a public call finds itself in: eager or traced, inside a ``shard_map``, under ``jax.vmap``.

:func:`of` reads it from the call's arrays once, at the public boundary (``jaxmg._dispatch``).
Everything below the boundary is trace-only and never asks again.

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
from typing import Any, Optional

import jax
import jax.core
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

EAGER, TRACED, MANUAL = "eager", "traced", "manual"


@dataclasses.dataclass(frozen=True)
class Stack:
    """A stack of matrices under ``jax.vmap``: ``size`` matrices, and the stacked value's
    ``sharding`` where it is known (a concrete stack, or Explicit mesh axes), with the batch axis
    first, else None; ``concrete``: the stack is a concrete array (an eager ``jax.vmap``)."""

    size: int
    sharding: Optional[NamedSharding] = None
    concrete: bool = False

    @property
    def mesh(self):
        return None if self.sharding is None else self.sharding.mesh

    @property
    def home(self) -> Optional[P]:
        """The layout the stack's outputs return to: its batch axis split as the stack's is (whole
        matrices on each device), replicated for a concrete stack on no mesh (a NumPy array),
        None where it is not known (Auto mesh axes inside ``jax.jit``)."""
        if self.sharding is not None:
            entries = tuple(self.sharding.spec)
            return P(entries[0] if entries else None)
        return P() if self.concrete else None


@dataclasses.dataclass(frozen=True)
class Context:
    """Where a call runs (:data:`EAGER`, :data:`TRACED` or :data:`MANUAL`), the stack it is part
    of under ``jax.vmap`` (None for one matrix), and whether a differentiation trace holds the
    arrays innermost (a batching rule of jaxmg's own must then not be bound: JAX cannot transpose
    it; JAX's batching of the body runs instead)."""

    kind: str
    stack: Optional[Stack] = None
    differentiated: bool = False

    @property
    def eager(self) -> bool:
        return self.kind == EAGER


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
    """Whether every array (None allowed) is concrete or an eager transformation's tracer."""
    return all(x is None or concrete_value(x, through_vmap=True) is not None for x in arrays)


def stack_of(x) -> Optional[Stack]:
    """The stack that ``x`` (a matrix argument) is a member of under ``jax.vmap``, or None."""
    while isinstance(x, jax.core.Tracer):
        found = _batched(x)
        if found is not None:
            value, axis = found
            if not isinstance(axis, int):  # not mapped: this argument is not batched
                return None
            concrete = concrete_value(value, through_vmap=True)
            return Stack(int(jax.typeof(value).shape[axis]), _sharding(value, axis),
                         concrete is not None and not isinstance(concrete, jax.core.Tracer))
        x = _primal(x)
    return None


def _sharding(value, axis: int) -> Optional[NamedSharding]:
    """The sharding of a stacked ``value`` with its batch axis ``axis`` moved first, if known."""
    concrete = concrete_value(value, through_vmap=True)
    if concrete is not None and not isinstance(concrete, jax.core.Tracer):
        sharding = getattr(concrete, "sharding", None)
        ndim = concrete.ndim
    else:
        sharding = getattr(jax.typeof(value), "sharding", None)
        ndim = jax.typeof(value).ndim
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return None
    if concrete is None and not all(t == AxisType.Explicit for t in sharding.mesh.axis_types):
        return None  # Auto axes inside jax.jit: the layout is not known while tracing
    entries = list(tuple(sharding.spec) + (None,) * (ndim - len(tuple(sharding.spec))))
    entries.insert(0, entries.pop(axis))
    return NamedSharding(sharding.mesh, P(*entries))


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
    stack = next((s for s in map(stack_of, matrices) if s is not None), None)
    differentiated = any(_primal(x) is not None for x in arrays)
    kind = EAGER if is_eager(arrays) else TRACED
    return Context(kind, stack, differentiated)


def tracing() -> bool:
    """Whether a transformation is tracing (``jax.set_mesh`` cannot be entered then)."""
    try:
        jax.sharding.get_mesh()
    except ValueError:
        return True
    return False
