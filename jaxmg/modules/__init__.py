"""Equinox factorisation modules: factor once (sharded), then solve or read the factors.

Each module is a pytree (it crosses ``jax.jit`` boundaries and ``jax.vmap``), keeps the
backend's factor in the grid layout, and differentiates through the rules of
``jaxmg.autodiff``. The functional API (``jaxmg.potrs`` …) is built from these modules.
"""

from .cholesky import Cholesky
from .decompositions import SVD, Eigh, Polar
from .lu import LU
from .qr import QR

__all__ = ["Cholesky", "Eigh", "LU", "Polar", "QR", "SVD"]
