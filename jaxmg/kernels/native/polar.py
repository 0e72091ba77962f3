"""The native backend's polar and gesvd kernels: compositions, since cuSOLVERMp 0.8 has neither.

``polar`` is the QDWH iteration of ``jaxmg.kernels.qdwh`` (QR form for the first, badly
conditioned steps, Cholesky form after; products and N x N factorizations on each device's row
slab). ``gesvd`` is that polar decomposition followed by this backend's syevd of H (csrc/eig.cc):
``A = U_p H``, ``H = V diag(w) V^H``, ``U = U_p V``, ``s = |w|`` descending.

cuSOLVERMp 0.9 and later export their own polar and gesvd (``jaxmg.kernels.native.info()``'s
capabilities ``polar`` / ``gesvd``, probed at load by csrc/dynload.cc). Handlers for them are
not written yet (only 0.8 has been run), so these compositions run on every
version; :func:`engine_polar_available` is where the choice goes once they exist.
"""

from __future__ import annotations

import functools

from .. import qdwh
from . import _library
from .eig import syevd


def engine_polar_available() -> bool:
    """Whether the loaded cuSOLVERMp has its own polar/gesvd (0.9+); unused until handlers for
    them exist (module docstring)."""
    caps = _library.capabilities()
    return bool(caps.get("polar")) and bool(caps.get("gesvd"))


def polar(a, *, grid, tile):
    """(U_p: a's local block, H: local block of the N x N layout, status), M >= N, by QDWH."""
    return qdwh.polar(a, grid=grid)


def gesvd(a, *, grid, full_matrices, tile):
    """(U block, s descending whole, V^H block, status): polar + the native syevd of H."""
    return qdwh.gesvd(a, grid=grid, full_matrices=full_matrices, syevd=functools.partial(syevd, tile=tile))
