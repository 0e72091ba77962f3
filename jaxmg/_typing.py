"""Shape-typed signatures (jaxtyping) and optional run-time checking (beartype).

The public functions and modules are annotated with jaxtyping shapes ("n n" for a square
matrix, "n" or "n k" for right-hand sides, "m n" for a rectangular matrix). Checking is off by
default. Set the environment variable ``JAXMG_TYPECHECK=1`` before ``import jaxmg`` to
verify every public call with beartype: a mismatch raises a type-check error naming the
argument and the dimension that disagrees (e.g. ``n=32`` from ``a`` against 16 rows of
``b``). It works eagerly, under ``jax.jit`` and ``jax.vmap`` (it checks shapes, which
tracers have).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Optional, Union

import jax
import numpy as np
from jax.sharding import AbstractMesh, Mesh, PartitionSpec
from jaxtyping import Inexact, Int, Real, jaxtyped

AnyArray = Union[jax.Array, np.ndarray]
#: Nested Python sequences of numbers, which every operation converts as ``jnp.asarray`` does
#: (their shapes and dtypes are then the operation's own checks, as for arrays).
Nested = Union[list, tuple]
SquareMatrix = Union[Inexact[AnyArray, "n n"], Nested]
TallMatrix = Union[Inexact[AnyArray, "m n"], Nested]  # M >= N, checked by the operation
Matrix = Union[Inexact[AnyArray, "m n"], Nested]  # any M x N (wide ones where the operation takes them)
Rhs = Union[Inexact[AnyArray, " n"], Inexact[AnyArray, "n k"], Nested]
TallRhs = Union[Inexact[AnyArray, " m"], Inexact[AnyArray, "m k"], Nested]
Solution = Union[Inexact[jax.Array, " n"], Inexact[jax.Array, "n k"]]
Status = Int[jax.Array, ""]
Scalar = Real[jax.Array, ""]
Tile = Optional[int]
MeshLike = Optional[Union[Mesh, AbstractMesh]]
Specs = Optional[Union[PartitionSpec, Sequence[Optional[PartitionSpec]]]]

#: How the documentation shows each alias above: jaxtyping's dtype kind and shape, not the
#: ``Union``/``Optional`` that the aliases expand to (read by docs/griffe_jaxmg.py).
DOC_TYPES: dict = {
    "SquareMatrix": "Inexact[Array, 'n n'] | Sequence",
    "TallMatrix": "Inexact[Array, 'm n'] | Sequence",
    "Matrix": "Inexact[Array, 'm n'] | Sequence",
    "Rhs": "Inexact[Array, 'n'] | Inexact[Array, 'n k'] | Sequence",
    "TallRhs": "Inexact[Array, 'm'] | Inexact[Array, 'm k'] | Sequence",
    "Solution": "Inexact[Array, 'n'] | Inexact[Array, 'n k']",
    "Status": "Int[Array, '']",
    "Scalar": "Real[Array, '']",
    "Tile": "int | None",
    "MeshLike": "Mesh | AbstractMesh | None",
    "Specs": "PartitionSpec | Sequence[PartitionSpec | None] | None",
}


def enabled() -> bool:
    """Whether run-time checking was asked for (``JAXMG_TYPECHECK=1``)."""
    return os.environ.get("JAXMG_TYPECHECK", "").lower() in ("1", "true", "yes", "on")


def checked(obj):
    """``obj`` (a function or an Equinox module class) with run-time shape checking when
    enabled, else unchanged."""
    if not enabled():
        return obj
    from beartype import beartype

    return jaxtyped(typechecker=beartype)(obj)
