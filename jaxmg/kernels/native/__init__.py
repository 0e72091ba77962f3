"""Native per-shard kernels: cuSOLVERMp through the XLA FFI library ``jaxmg._native`` (csrc/).

The package mirrors csrc/: ``_library`` loads the library and registers its handlers; ``_grid``
holds what every family shares; one module per family (``cholesky``, ``lu``, ``qr``, ``eig``)
holds its kernels; ``polar`` holds the compositions (QDWH polar, and gesvd as polar + syevd) that
stand in for cuSOLVERMp 0.8's missing polar and gesvd. The kernels run on every device inside
``shard_map``; the family classes (:class:`Cholesky`, :class:`LU`, :class:`QR`,
:class:`Decompositions`) run them over the grid, implementing ``jaxmg.kernels.families``.

Status: 0, or LAPACK's ``info`` (in the permuted, padded matrix that cuSOLVERMp factors), agreed
over the grid; outputs are NaN whenever status != 0, and the grid stays usable.
"""

from __future__ import annotations

from ..families import Backend
from ..ffi._library import abort_communicators, clear_cache, last_timings, library_candidates, unavailable_reason
from ._engine import info
from ._grid import family_tile
from .cholesky import (
    Cholesky,
    cholesky_factor,
    cholesky_logdet,
    cholesky_lower,
    cholesky_solve,
    cholesky_state_is_lower,
    cholesky_to_a_order,
    cholesky_triangle,
    cholesky_triangle_kind,
    potrs,
)
from .eig import syevd, sygvd
from .lu import LU, lu_factor, lu_factor_order, lu_solve, lu_triangles
from .polar import Decompositions, gesvd, polar
from .qr import QR, qr_diagonal, qr_factor, qr_minimum_norm, qr_normal_solve, qr_q, qr_r, qr_solve

#: The native backend (``jaxmg.kernels.families.Backend``): the distributed route's kernels.
BACKEND = Backend("native", cholesky=Cholesky, lu=LU, qr=QR, decompositions=Decompositions)

#: Kernel families with native kernels: those whose GPU cases (tests/gpu/native_cases.py) have
#: passed.
FAMILIES: frozenset = frozenset({"cholesky", "lu", "qr", "eigh", "sygvd", "polar", "svd"})

__all__ = [
    "BACKEND",
    "FAMILIES",
    "Cholesky",
    "Decompositions",
    "LU",
    "QR",
    "abort_communicators",
    "cholesky_factor",
    "cholesky_logdet",
    "cholesky_lower",
    "cholesky_solve",
    "cholesky_state_is_lower",
    "cholesky_to_a_order",
    "cholesky_triangle",
    "cholesky_triangle_kind",
    "clear_cache",
    "family_tile",
    "gesvd",
    "info",
    "last_timings",
    "library_candidates",
    "lu_factor",
    "lu_factor_order",
    "lu_solve",
    "lu_triangles",
    "polar",
    "potrs",
    "qr_diagonal",
    "qr_factor",
    "qr_minimum_norm",
    "qr_normal_solve",
    "qr_q",
    "qr_r",
    "qr_solve",
    "syevd",
    "sygvd",
    "unavailable_reason",
]
