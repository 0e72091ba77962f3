"""Backend choice: which kernel module runs an operation."""

from __future__ import annotations

from types import ModuleType

from jax.sharding import Mesh

from .kernels import native, portable


def _platform(mesh) -> str:
    """The platform of the mesh's devices ("cpu", "gpu", ...), concrete or abstract."""
    abstract = mesh.abstract_mesh if isinstance(mesh, Mesh) else mesh
    device = getattr(abstract, "abstract_device", None)
    return getattr(device, "platform", None) or "unknown"


#: The kernel family of each public operation.
FAMILY = {
    "potrs": "cholesky", "cholesky": "cholesky", "lu_solve": "lu", "lu": "lu",
    "least_squares": "qr", "qr": "qr", "syevd": "eigh", "eigh": "eigh", "sygvd": "sygvd",
    "gesvd": "svd", "svd": "svd", "polar": "polar",
}


def select(op: str, backend: str, mesh) -> ModuleType:
    """The kernel module for operation family ``op`` ("cholesky", "lu", ...) on ``mesh``.

    ``"auto"`` takes the native backend where it can run (CUDA devices, the native
    library loaded, a native kernel for ``op``) and the portable one otherwise;
    ``"portable"`` always works; ``"native"`` raises RuntimeError where it cannot run.
    """
    op = FAMILY.get(op, op)
    if backend == "portable":
        return portable
    reason = native_unavailable(op, mesh)
    if reason is None:
        return native
    if backend == "native":
        raise RuntimeError(f"backend='native' cannot run {op} here: {reason}. Use backend='portable' or 'auto'.")
    return portable


def native_unavailable(op: str, mesh) -> str | None:
    """Why ``op`` cannot run natively on ``mesh``, or None."""
    platform = _platform(mesh)
    if platform not in ("gpu", "cuda"):
        return f"the mesh's devices are {platform!r}, and the native backend needs NVIDIA GPUs"
    reason = native.unavailable_reason()
    if reason is not None:
        return reason
    if op not in getattr(native, "FAMILIES", frozenset()):
        return f"the {op} family has no native kernels yet"
    return None


def default_backend(op: str, mesh) -> str:
    """The backend that ``backend="auto"`` gives family ``op`` on ``mesh``: "native" or "portable"."""
    return select(op, "auto", mesh).NAME
