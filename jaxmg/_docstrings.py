"""The argument descriptions that the functions and modules share, written once.

A docstring line ``NAME: {KEY}`` (in an ``Args:`` section) is replaced by ``NAME:`` and the text
of :data:`ARGUMENTS` [KEY], wrapped to the line's indentation (a line ``{{GROUP}}`` first stands
for the lines of :data:`GROUPS` [GROUP]); :func:`shared_arguments` does it
when the function or class is defined, so ``help()``, the documentation site (which inspects
the imported objects) and IDEs show the full text.
"""

from __future__ import annotations

import re
import textwrap

#: KEY -> the description of an argument that several operations take.
ARGUMENTS: dict = {
    "T_A": (
        "tile size of the native block-cyclic layout (the portable backend ignores it). None "
        "picks the largest power of two that is at most 1024 (2048 once N >= 32768) and at most "
        "the smaller extent of a's local block; a local block that is not a multiple of T_A is "
        "padded. Must be >= 1."
    ),
    "mesh": (  # functions (the mesh may also come from b)
        "the device mesh (a one- or two-axis ``jax.sharding.Mesh`` or ``AbstractMesh``). Default: "
        "a's mesh, else b's, else the mesh set with ``jax.set_mesh``, else the device of ``a`` (a "
        "1 x 1 grid)."
    ),
    "mesh_module": (  # modules (only a is given)
        "the device mesh (a one- or two-axis ``jax.sharding.Mesh`` or ``AbstractMesh``). Default: "
        "a's mesh, else the mesh set with ``jax.set_mesh``, else the device of ``a`` (a 1 x 1 "
        "grid)."
    ),
    "matrix_specs": (
        "a's ``PartitionSpec`` (``P(r, c)``, ``P(r)`` or ``P(None, c)``), or a list with one spec "
        "per array argument (``[spec_a, spec_b]``). Default: read from the arrays' shardings; "
        "with Auto mesh axes inside ``jax.jit``, the mesh axes in order."
    ),
    "matrix_specs_solver": (  # modules that solve (their specs also cover later right-hand sides)
        "a's ``PartitionSpec`` (``P(r, c)``, ``P(r)`` or ``P(None, c)``), or a list with one spec "
        "per array argument (``[spec_a, spec_b]`` for the right-hand sides of later solves). "
        "Default: read from the arrays' shardings; with Auto mesh axes inside ``jax.jit``, the "
        "mesh axes in order."
    ),
    "donate": (
        "let the call consume its matrix inputs (their buffers may be reused for the "
        "factorisation). Default False: inputs are never consumed. Under a transformation "
        "(``jax.jit``, an eager ``jax.grad``, ``jax.jvp`` or ``jax.vmap``) the caller's arrays are "
        "not consumed: their derivatives need them (under ``jax.jit``, donate to the jitted function)."
    ),
    "backend": (
        '``"auto"`` (the route that ``jaxmg.route`` reports, docs/routes.md: cuSOLVERMp over the '
        "process grid where it was measured faster or the matrix does not fit one device, else the "
        "device's own solver), ``\"portable\"`` (the device's own solver, on the gathered matrix: "
        'correct everywhere, not scalable past one device\'s memory) or ``"native"`` (cuSOLVERMp; '
        "raises RuntimeError where it cannot run, saying why)."
    ),
    "check": (
        'check the result on the distributed route (docs/usage.md, "The result check"): probe '
        "vectors and a few products with the matrix (O(N^2)), made before the factorisation (no "
        "memory beyond vectors; donated matrices too); a wrong result gets status -2 and NaN "
        "outputs. None (default): on, unless the environment variable ``JAXMG_RESULT_CHECK`` is "
        "``0``; False: off. The local and batch routes are not checked."
    ),
}

#: GROUP -> the ``NAME: {KEY}`` lines that a docstring line ``{{GROUP}}`` stands for.
GROUPS: dict = {
    "layout": ("T_A: {T_A}", "mesh: {mesh}", "matrix_specs: {matrix_specs}"),
    "module_layout": ("T_A: {T_A}", "mesh: {mesh_module}", "matrix_specs: {matrix_specs}"),
    "solver_layout": ("T_A: {T_A}", "mesh: {mesh_module}", "matrix_specs: {matrix_specs_solver}"),
    "run": ("donate: {donate}", "backend: {backend}", "check: {check}"),
}

_GROUP = re.compile(r"^( *)\{\{(\w+)\}\}$", re.M)
_PLACEHOLDER = re.compile(r"^( *)(\w+): \{(\w+)\}$", re.M)
_WIDTH = 100


def _group(match: re.Match) -> str:
    indent, key = match.group(1), match.group(2)
    return "\n".join(indent + line for line in GROUPS[key])


def _expand(match: re.Match) -> str:
    indent, name, key = match.group(1), match.group(2), match.group(3)
    return textwrap.fill(
        ARGUMENTS[key],
        _WIDTH,
        initial_indent=f"{indent}{name}: ",
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def shared_arguments(obj):
    """``obj`` (a function or class) with its docstring's ``NAME: {KEY}`` lines filled in from
    :data:`ARGUMENTS`; an unknown KEY raises KeyError at import, so no placeholder ships."""
    if obj.__doc__:
        obj.__doc__ = _PLACEHOLDER.sub(_expand, _GROUP.sub(_group, obj.__doc__))
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None and getattr(wrapped, "__doc__", None):
            wrapped.__doc__ = obj.__doc__
    return obj
