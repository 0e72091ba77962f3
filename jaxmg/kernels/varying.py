"""Foreign calls inside ``jax.shard_map``: their results carry no varying manual axes (``vma``),
so that a value computed from a device's own block would look replicated, and derivatives
through it would disagree with their primals. :func:`varying_like` marks them as their operand."""

from __future__ import annotations

import jax


def varying_like(a: jax.Array, x: jax.Array) -> jax.Array:
    """``x`` marked as varying over the ``shard_map`` axes that ``a`` varies over and ``x`` does
    not yet (``x`` itself outside a ``shard_map``, or where there are none)."""
    return _varying_over(x, varying_axes(a))


def alike(*arrays: jax.Array) -> tuple:
    """``arrays`` each marked as varying over every ``shard_map`` axis that any of them varies
    over (each itself outside a ``shard_map``, or where they vary alike already): the operands
    of a solve inside a ``shard_map``, a matrix shared by every device and a right-hand side of
    each device's own (or the reverse), so that JAX's ``custom_linear_solve``, whose solves are
    traced again when lowered, sees operands that vary alike. Its derivative with respect to an
    array marked so is summed over those axes, as that of an array used by every device is."""
    axes = frozenset().union(*(varying_axes(x) for x in arrays))
    return tuple(_varying_over(x, axes) for x in arrays)


def _varying_over(x: jax.Array, axes: frozenset) -> jax.Array:
    """``x`` marked as varying over the manual ``axes`` it does not vary over yet."""
    missing = tuple(sorted(axes - varying_axes(x)))
    if not missing:
        return x
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, missing, to="varying")
    return jax.lax.pvary(x, missing)  # pyright: ignore[reportAttributeAccessIssue]  # JAX before pcast; gone from newer JAX


def varying_axes(a: jax.Array) -> frozenset:
    """The manual axes over which ``a``'s value varies (``vma``; ``manual_axis_type.varying``
    in newer JAX)."""
    aval = jax.typeof(a)
    manual = getattr(aval, "manual_axis_type", None)
    if manual is not None:
        return frozenset(manual.varying)
    return frozenset(getattr(aval, "vma", ()) or ())
