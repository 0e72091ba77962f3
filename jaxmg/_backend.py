"""Backend choice: which kernel module runs an operation."""

from __future__ import annotations

from types import ModuleType

from jax.sharding import Mesh

from . import _crossover
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
    # the modules, and log det (the Cholesky family's)
    "Cholesky": "cholesky", "LU": "lu", "QR": "qr", "Eigh": "eigh", "SVD": "svd", "Polar": "polar",
    "logdet": "cholesky",
}


def _first_device(mesh):
    """A device of the mesh: its first one, or for the abstract mesh that ``jax.jit`` traces
    with (no devices attached), this process's first device of the mesh's platform: the grid's
    devices are of one kind, so its memory is theirs."""
    if isinstance(mesh, Mesh):
        return mesh.devices.flat[0]
    import jax

    platform = _platform(mesh)
    try:
        return jax.local_devices(backend=None if platform == "unknown" else platform)[0]
    except RuntimeError:  # no such platform in this process
        return None


def _device_bytes(mesh):
    """The memory of one of the mesh's devices (bytes), or None where it cannot be read. Inside
    ``jax.jit`` too, so that ``auto`` applies the measured crossovers there as it does eagerly."""
    try:
        stats = _first_device(mesh).memory_stats() or {}
    except Exception:  # noqa: BLE001 (platforms without memory stats)
        return None
    return stats.get("bytes_limit")


def select(op: str, backend: str, mesh, shape=None, dtype=None) -> ModuleType:
    """The kernel module for operation family ``op`` ("cholesky", "lu", ...) on ``mesh``.

    ``"auto"`` takes the native backend where it can run (CUDA devices, the native
    library loaded, a native kernel for ``op``) and the portable one otherwise, except where
    the measured crossovers of ``jaxmg._crossover`` say that one device's own solver is faster
    for a matrix of ``shape``/``dtype`` that fits; ``"portable"`` always works; ``"native"``
    raises RuntimeError where it cannot run.
    """
    op = FAMILY.get(op, op)
    if backend == "portable":
        return portable
    reason = native_unavailable(op, mesh)
    if reason is None:
        if backend == "auto" and _crossover.prefer_portable(op, mesh.size, shape, dtype, _device_bytes(mesh)):
            return portable
        return native
    if backend == "native":
        raise RuntimeError(f"backend='native' cannot run {op} here: {reason}. Use backend='portable' or 'auto'.")
    return portable


def native_unavailable(op: str, mesh) -> str | None:
    """Why ``op`` (an operation, module or family) cannot run natively on ``mesh``, or None."""
    op = FAMILY.get(op, op)
    platform = _platform(mesh)
    if platform not in ("gpu", "cuda"):
        return f"the mesh's devices are {platform!r}, and the native backend needs NVIDIA GPUs"
    reason = native.unavailable_reason()
    if reason is not None:
        return reason
    if op not in getattr(native, "FAMILIES", frozenset()):
        return f"the {op} family has no native kernels yet"
    return None


#: On one GPU, triangular products are single cuBLAS trmm calls for matrices of at most this
#: order, and recurse into cuBLAS gemm calls above it. One H200, float64, ``Cholesky(a).inverse()``:
#: 73.9 ms with trmm against 76.2 ms recursing at N = 16,384; 0.553 s against 0.534 s at 32,768
#: (benchmarks/results/h200x1/2026-12-02).
ONE_GPU_TRMM_MAX_ORDER = 16384


def one_gpu_products(grid, n: int) -> tuple:
    """The (product, triangular product, Hermitian inverse) of the triangular inverses
    (``jaxmg.kernels.triangular.products_through``) of an order-``n`` matrix on ``grid``: cuBLAS's
    gemm and trmm (no autotuning on the first call) and the one-call potri of
    ``jaxmg.kernels.native.gemm.hermitian_inverse`` where the grid's mesh is one NVIDIA GPU and the
    native library is loaded (trmm up to :data:`ONE_GPU_TRMM_MAX_ORDER`), else (None, None, None):
    XLA's dots, which XLA partitions over the mesh. ``JAXMG_PRODUCTS=xla`` keeps XLA's dots,
    ``recursion`` the Hermitian inverse as a recursion of cuBLAS products, ``gemm`` cuBLAS's gemm
    only, ``trmm`` its trmm at every order."""
    mesh = grid.mesh
    if mesh.size != 1 or _platform(mesh) not in ("gpu", "cuda"):
        return None, None, None
    from .kernels.native import gemm

    general, triangular, inverse = gemm.chosen()
    triangular = triangular and (n <= ONE_GPU_TRMM_MAX_ORDER or gemm.trmm_at_every_order())
    return ((gemm.product if general else None), (gemm.triangular_product if triangular else None),
            (gemm.hermitian_inverse if inverse else None))


def default_backend(op: str, mesh) -> str:
    """The backend that ``backend="auto"`` gives ``op`` on ``mesh``: "native" or "portable".

    ``op`` is an operation ("potrs", "lu_solve", ...), a module ("Cholesky", "Eigh", ...) or a
    family ("cholesky", "lu", "qr", "eigh", "sygvd", "svd", "polar")."""
    if op not in FAMILY and op not in FAMILY.values():
        known = sorted(set(FAMILY) | set(FAMILY.values()))
        raise ValueError(f"op must name an operation, module or family of jaxmg, one of {known}; got {op!r}.")
    return select(op, "auto", mesh).NAME
