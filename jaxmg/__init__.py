"""jaxmg: dense linear algebra on matrices sharded across a JAX device mesh.

On NVIDIA GPUs the native backend runs cuSOLVERMp, one process per GPU; everywhere
else (and on request) a portable pure-JAX backend runs the same API.
"""

import os as _os

from ._threads import choose_openblas_threads as _choose_openblas_threads

_choose_openblas_threads()  # one OpenBLAS thread on simulated CPU devices, unless the user chose

if _os.environ.get("JAXMG_COORDINATOR"):  # started by jaxmg.launch: join the other processes
    from .launch import initialize_from_environment as _initialize_from_environment

    _initialize_from_environment()

from . import ops as ops  # noqa: E402
from ._layout import Grid, auto_tile  # noqa: E402
from ._native_check import NativeBackendWarning, warn_if_native_missing as _warn_if_native_missing  # noqa: E402
from ._routes import default_backend, route  # noqa: E402
from .functional import (  # noqa: E402
    cholesky,
    gesvd,
    least_squares,
    lu_solve,
    polar,
    potrs,
    qr,
    syevd,
    sygvd,
)
from .modules import LU, QR, SVD, Cholesky, Eigh, Polar  # noqa: E402

_warn_if_native_missing()

__version__ = "0.1.0"


def __getattr__(name):
    # jaxmg.lineax needs the optional Lineax: imported on first use, not with jaxmg; the
    # JAX-shaped namespaces jaxmg.numpy and jaxmg.scipy are imported on first use too, and so is
    # jaxmg.info (run as python -m jaxmg.info, which must not find it imported already).
    if name in ("info", "lineax", "numpy", "scipy"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'jaxmg' has no attribute {name!r}")


__all__ = [
    "Cholesky",
    "Eigh",
    "LU",
    "Polar",
    "QR",
    "SVD",
    "Grid",
    "NativeBackendWarning",
    "auto_tile",
    "default_backend",
    "route",
    "cholesky",
    "gesvd",
    "least_squares",
    "lu_solve",
    "polar",
    "potrs",
    "qr",
    "sygvd",
    "syevd",
]
