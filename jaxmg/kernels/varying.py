"""Foreign calls inside ``jax.shard_map``: their results carry no varying manual axes (``vma``),
so that a value computed from a device's own block would look replicated, and derivatives
through it would disagree with their primals. :func:`varying_like` marks them as their operand."""

from __future__ import annotations

import jax


def varying_like(a: jax.Array, x: jax.Array) -> jax.Array:
    """``x`` marked as varying over the ``shard_map`` axes that ``a`` varies over and ``x`` does
    not yet (``x`` itself outside a ``shard_map``, or where there are none)."""
    axes = tuple(sorted(varying_axes(a) - varying_axes(x)))
    if not axes:
        return x
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, axes, to="varying")
    return jax.lax.pvary(x, axes)  # pyright: ignore[reportAttributeAccessIssue]  # JAX before pcast; gone from newer JAX


def varying_axes(a: jax.Array) -> frozenset:
    """The manual axes over which ``a``'s value varies (``vma``; ``manual_axis_type.varying``
    in newer JAX)."""
    aval = jax.typeof(a)
    manual = getattr(aval, "manual_axis_type", None)
    if manual is not None:
        return frozenset(manual.varying)
    return frozenset(getattr(aval, "vma", ()) or ())
