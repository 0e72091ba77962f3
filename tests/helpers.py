"""Shared test helpers: problem generators, meshes and LAPACK-style scaled residuals."""

from __future__ import annotations

import numpy as np
import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]

#: name -> (mesh shape, axis names, spec of a); names ending in "-auto" use Auto mesh axes
LAYOUTS = {
    "rows-1d": ((8,), ("i",), P("i", None)),
    "cols-1d": ((8,), ("i",), P(None, "i")),
    "grid-8x1": ((8, 1), ("x", "y"), P("x", "y")),
    "grid-4x2": ((4, 2), ("x", "y"), P("x", "y")),
    "grid-2x4": ((2, 4), ("x", "y"), P("x", "y")),
    "grid-1x8": ((1, 8), ("x", "y"), P("x", "y")),
    "grid-4x2-auto": ((4, 2), ("x", "y"), P("x", "y")),
    "cols-1d-auto": ((8,), ("i",), P(None, "i")),
}


def eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def random_matrix(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def spd_matrix(rng, n, dtype):
    g = random_matrix(rng, (n, n), dtype)
    return (g @ g.conj().T / n + np.eye(n)).astype(dtype)


def hermitian_matrix(rng, n, dtype):
    g = random_matrix(rng, (n, n), dtype)
    return ((g + g.conj().T) / 2).astype(dtype)


def make_mesh(shape, names, devices=None, axis_types=AxisType.Explicit):
    """A mesh of the first prod(shape) devices (or ``devices``), Explicit axes by default."""
    devices = np.asarray(jax.devices() if devices is None else devices)
    return Mesh(devices[: int(np.prod(shape))].reshape(shape), names,
                axis_types=(axis_types,) * len(shape))


def put(x, mesh, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def rows_spec(spec: P) -> P:
    """The right-hand-side spec matching a's rows (or columns on a column-split grid)."""
    entries = tuple(spec)
    return P(entries[0] if entries[0] is not None else entries[1])


def norm(x):
    return float(np.linalg.norm(np.asarray(x, dtype=np.complex128)))


def scaled(residual: float, scale: float, n: int, dtype) -> float:
    """LAPACK-style scaled residual: residual / (scale * n * eps); O(1) means backward stable."""
    return residual / (max(scale, np.finfo(np.float64).tiny) * n * eps(dtype))


def spec_of(x) -> P:
    spec = x.sharding.spec
    entries = tuple(spec) + (None,) * (x.ndim - len(tuple(spec)))
    return P(*entries)


def same_spec(x, expected: P) -> bool:
    want = tuple(expected) + (None,) * (x.ndim - len(tuple(expected)))
    return spec_of(x) == P(*want) or x.sharding.is_equivalent_to(
        NamedSharding(x.sharding.mesh, P(*want)), x.ndim)
