"""Which route and backend a call takes: one decision, from one table of measured crossovers.

Routes (docs/routes.md):

* ``local``: the device's own dense solver (JAX's ``lax.linalg``) on whole matrices, with jaxmg's
  derivative rules and status values: inside a user's ``jax.shard_map``, for a matrix on one
  device or on no known mesh, and where :data:`CROSSOVERS` says one device's solver is faster
  and the matrix fits (a matrix sharded over a mesh is then gathered: the ``portable`` backend).
* ``batch``: a stack of matrices (``jax.vmap``) each of which fits on one device: the local route
  on each matrix, where the stack lies (spread over the mesh by all-to-alls where it is not; the
  results return to its layout: matrices to the stack's, solutions to b's).
* ``distributed``: one matrix over the process grid, through cuSOLVERMp (the ``native``
  backend); a stack of matrices too large for one device runs one such call after another.

:func:`choose` is the only reader of :data:`CROSSOVERS`; ``jaxmg.info`` reports what it decides
(and what ``jaxmg.kernels.qdwh.polar_eigh`` decides: how the local and batch routes compute SVDs
and polar factors).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from jax.sharding import Mesh

from . import _checks, _layout
from .kernels import native

LOCAL, BATCH, DISTRIBUTED = "local", "batch", "distributed"

#: The kernel family of each public operation, module and jaxmg.numpy/scipy entry.
FAMILY = {
    "potrs": "cholesky",
    "cholesky": "cholesky",
    "Cholesky": "cholesky",
    "logdet": "cholesky",
    "lu_solve": "lu",
    "LU": "lu",
    "lu": "lu",
    "least_squares": "qr",
    "qr": "qr",
    "QR": "qr",
    "syevd": "eigh",
    "eigh": "eigh",
    "Eigh": "eigh",
    "sygvd": "sygvd",
    "gesvd": "svd",
    "svd": "svd",
    "SVD": "svd",
    "polar": "polar",
    "Polar": "polar",
}


@dataclasses.dataclass(frozen=True)
class Crossover:
    """Where ``auto`` runs a family on one device's own solver although the native one can run.

    copies: copies of the matrix that one device holds at once on the local route (input,
      factors or vectors, solver workspace): the matrix "fits" when ``copies * bytes`` is at most
      the device's memory. It also decides the batch route for stacks.
    below_n: the local route only while the matrix's order is below this (None: at every size
      that fits).
    devices: the grid sizes the rule is for (None: every size).
    """

    copies: int
    below_n: Optional[int] = None
    devices: Optional[frozenset] = None


#: Measured crossovers: docs/routes.md.
CROSSOVERS: dict = {
    "cholesky": (Crossover(copies=5, devices=frozenset({1})), Crossover(copies=5, below_n=32768)),
    "lu": (Crossover(copies=3),),
    "qr": (Crossover(copies=4, below_n=8192, devices=frozenset({1})), Crossover(copies=4, below_n=32768)),
    "eigh": (Crossover(copies=5),),
    "sygvd": (Crossover(copies=7),),
}
#: Copies one device holds where a family has no crossover (for the batch route's "fits").
DEFAULT_COPIES = 6


def family(op: str) -> str:
    """The kernel family of ``op`` (an operation, module or family name)."""
    if op in FAMILY:
        return FAMILY[op]
    if op in FAMILY.values():
        return op
    known = sorted(set(FAMILY) | set(FAMILY.values()))
    raise ValueError(f"op must name an operation, module or family of jaxmg, one of {known}; got {op!r}.")


def device_bytes(mesh) -> Optional[int]:
    """The memory of one device of ``mesh`` (any of them: a grid's devices are of one kind), or
    None where it cannot be read (CPUs)."""
    import jax

    if isinstance(mesh, Mesh):
        device = mesh.devices.flat[0]
    else:
        kind = _layout.platform(mesh)
        devices = jax.local_devices(backend=None if kind in ("unknown",) else kind)
        device = devices[0] if devices else None
    stats = device.memory_stats() if device is not None and hasattr(device, "memory_stats") else None
    return (stats or {}).get("bytes_limit")


def native_unavailable(fam: str, mesh) -> Optional[str]:
    """Why the native backend cannot run family ``fam`` on ``mesh``, or None."""
    kind = _layout.platform(mesh)
    if kind not in ("gpu", "cuda"):
        return f"the devices are {kind!r}, and the native backend needs NVIDIA GPUs"
    reason = native.unavailable_reason()
    if reason is not None:
        return reason
    if fam not in native.FAMILIES:
        return f"the {fam} family has no native kernels"
    return None


def _bytes(shape, dtype) -> int:
    return int(np.prod(shape)) * np.dtype(dtype).itemsize


def fits(fam: str, shape, dtype, mesh, count: int = 1) -> bool:
    """Whether the local route's copies of ``count`` matrices fit on one device at once (True
    where the memory cannot be read)."""
    limit = device_bytes(mesh)
    rules = CROSSOVERS.get(fam, ())
    copies = max((r.copies for r in rules), default=DEFAULT_COPIES)
    return limit is None or count * copies * _bytes(shape, dtype) <= limit


def device_solver_faster(fam: str, devices: int, shape, dtype, mesh) -> bool:
    """Whether a rule of :data:`CROSSOVERS` sends a matrix of ``shape``/``dtype`` on a grid of
    ``devices`` to one device's own solver (it fits, and its order is below the rule's)."""
    limit = device_bytes(mesh)
    if not limit:
        return False
    for rule in CROSSOVERS.get(fam, ()):
        if rule.devices is not None and devices not in rule.devices:
            continue
        if rule.below_n is not None and min(shape) >= rule.below_n:
            continue
        if rule.copies * _bytes(shape, dtype) <= limit:
            return True
    return False


def choose(fam: str, backend: str, mesh, shape, dtype, *, stacked: int = 0, manual: bool = False) -> str:
    """The route of one call of family ``fam``: :data:`LOCAL`, :data:`BATCH` or :data:`DISTRIBUTED`.

    ``backend`` is the caller's ("auto", "portable" or "native"); ``mesh`` is where the call runs
    (None: no mesh is known: the arrays are on one device, or their layout is not known inside
    ``jax.jit``); ``stacked``: the size of a stack of such matrices under ``jax.vmap`` (0: one
    matrix): it takes the batch route where each device's share of it fits; ``manual``: inside a
    ``jax.shard_map``. An empty matrix (a dimension 0) takes the local route (the batch route
    for a stack) whatever the backend: there is nothing to distribute. Raises RuntimeError where
    ``backend="native"`` cannot run."""
    if manual:
        if backend == "native":
            raise RuntimeError(
                "backend='native' cannot run inside jax.shard_map: there the arrays are each "
                "device's own, and the device's own solver runs on them (backend='auto')."
            )
        return LOCAL
    if 0 in tuple(shape):
        return BATCH if stacked else LOCAL  # nothing to distribute: JAX's answers for empty matrices
    if backend == "native":
        reason = native_unavailable(fam, mesh)  # without a mesh: of the default devices
        if reason is not None:
            raise RuntimeError(f"backend='native' cannot run {fam} here: {reason}. Use backend='portable' or 'auto'.")
        if mesh is None:
            raise RuntimeError(
                "backend='native' needs a mesh, and none is known here (inside jax.jit the "
                "layout of an array on Auto mesh axes is not known): pass mesh=, or call it "
                "inside jax.set_mesh(mesh)."
            )
        return DISTRIBUTED
    if stacked:
        share = -(-int(stacked) // (1 if mesh is None else mesh.size))  # matrices per device, spread
        local = backend == "portable" or mesh is None or fits(fam, shape, dtype, mesh, share)
        return BATCH if local or native_unavailable(fam, mesh) else DISTRIBUTED
    if backend == "portable" or mesh is None or native_unavailable(fam, mesh) is not None:
        return LOCAL
    devices = int(np.prod(list(mesh.shape.values())))
    return LOCAL if device_solver_faster(fam, devices, shape, dtype, mesh) else DISTRIBUTED


def backend_of(route: str) -> str:
    """The backend a route runs: "native" (cuSOLVERMp) on the distributed route, else "portable"."""
    return "native" if route == DISTRIBUTED else "portable"


def route(op: str, shape, dtype="float64", mesh=None, *, stacked: int = 0, backend: str = "auto") -> str:
    """The route a call of ``op`` takes: "local", "batch" or "distributed" (docs/routes.md).

    ``op`` is an operation ("potrs", "lu_solve", ...), a module ("Cholesky", ...) or a family;
    ``shape`` and ``dtype`` are a's; ``mesh`` is the mesh the call finds (None: a device's own
    arrays); ``stacked``: the size of a stack of such matrices under ``jax.vmap`` (0: one matrix).
    A call inside a user's ``jax.shard_map`` always takes the local route."""
    fam, shape = family(op), _query_shape(shape, stacked)
    square, tall = shapes_taken(fam)
    if square and shape[0] != shape[1]:
        raise ValueError(f"shape must be a square matrix's (N, N) for {op!r} (a {fam} factorisation), got {shape!r}.")
    if tall and shape[0] < shape[1]:
        raise ValueError(f"shape must have at least as many rows as columns (M >= N) for {op!r}, got {shape!r}.")
    _checks.check_backend(backend)
    if np.dtype(dtype) not in _checks.SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in _checks.SUPPORTED_DTYPES)
        raise TypeError(f"dtype must be a's dtype, one of {names} (the dtypes jaxmg factors), got {np.dtype(dtype)}.")
    if mesh is not None:
        _layout.check_mesh(mesh)
    return choose(fam, backend, mesh, shape, np.dtype(dtype), stacked=stacked)


#: The matrices each family takes, (square, tall): square, or any shape (M, N), or M >= N; a
#: family not named takes square matrices.
_SHAPES: dict = {"qr": (False, False), "svd": (False, False), "polar": (False, True)}


def shapes_taken(fam: str) -> tuple[bool, bool]:
    """(square, tall) of the matrices family ``fam`` takes (:data:`_SHAPES`): its calls, and
    :func:`route`, refuse other shapes."""
    return _SHAPES.get(fam, (True, True))


def _query_shape(shape, stacked) -> tuple:
    """``shape`` checked to be one matrix's (M, N), and ``stacked`` a count (0: one matrix)."""
    shape = tuple(shape)
    if len(shape) != 2 or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        raise ValueError(
            f"shape must be one matrix's (M, N), got {shape!r}; for a stack of matrices pass (M, N) and "
            "stacked=the number of matrices."
        )
    if isinstance(stacked, bool) or not isinstance(stacked, (int, np.integer)) or stacked < 0:
        raise ValueError(f"stacked must be the number of matrices of a stack (0: one matrix), got {stacked!r}.")
    return shape


def default_backend(op: str, mesh, shape, dtype="float64", *, stacked: int = 0) -> str:
    """The backend that ``backend="auto"`` gives ``op`` for a's ``shape`` and ``dtype`` on ``mesh``:
    "native" (cuSOLVERMp, the distributed route) or "portable" (a device's own solver)."""
    return backend_of(route(op, shape, dtype, mesh, stacked=stacked))
