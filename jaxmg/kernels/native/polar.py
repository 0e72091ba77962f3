"""The native backend's polar and gesvd kernels: compositions, since cuSOLVERMp 0.8 has neither.

``polar`` is the QDWH iteration of ``jaxmg.kernels.qdwh`` (QR form for the first, badly
conditioned steps, Cholesky form after; products and N x N factorizations on each device's row
slab). ``gesvd`` is that polar decomposition followed by this backend's syevd of H (csrc/eig.cc):
``A = U_p H``, ``H = V diag(w) V^H``, ``U = U_p V``, ``s = |w|`` descending.

cuSOLVERMp 0.9 and later export their own polar and gesvd (``jaxmg.kernels.native.info()``'s
capabilities ``polar`` / ``gesvd``, probed at load by csrc/dynload.cc); jaxmg has no handlers for
them, so these compositions run on every version.

:class:`Decompositions` runs them, and the eigensolvers of ``.eig``, over the process grid.
"""

from __future__ import annotations

import functools

from ..._sharded import Block, Replicated
from .. import qdwh, two_stage
from . import _grid
from .eig import syevd, sygvd


def polar(a, *, grid, tile, eigen: bool = False):
    """(U_p: a's local block, H: local block of the N x N layout, status), M >= N, by QDWH; where
    U_p needs completing, H's eigendecomposition (whole on every device) by the solver of one device
    that ``jaxmg.kernels.two_stage.TWO_STAGE_ABOVE`` names. ``eigen``: (U_p, H, w whole, V block,
    status) with ``H = V diag(w) V^H`` by this backend's syevd (QDWH computes no eigendecomposition;
    a derivative needs one)."""
    u_p, h, status = qdwh.polar(a, grid=grid, eigh=two_stage.device_eigh)
    if not eigen:
        return u_p, h, status
    w, v, _ = syevd(h, grid=grid, tile=tile)
    return u_p, h, w, v, status


def gesvd(a, *, grid, full_matrices, tile):
    """(U block, s descending whole, V^H block, status): polar + the native syevd of H."""
    return qdwh.gesvd(a, grid=grid, full_matrices=full_matrices, syevd=functools.partial(syevd, tile=tile))


class Decompositions(_grid.GridKernels):
    """Eigen-, singular value and polar decompositions over the process grid
    (``jaxmg.kernels.families.DecompositionKernels``): matrix outputs in a's caller layout,
    eigen- and singular values replicated."""

    def syevd(self, a):
        return self.run(syevd, [a], [Block()], [Replicated(), self.caller, Replicated()])

    def sygvd(self, a, b):
        return self.run(sygvd, [a, b], [Block(), Block()], [Replicated(), self.caller, Replicated()])

    def gesvd(self, a, full_matrices: bool, compute_uv: bool = True):
        m, n = a.shape
        out = self.run(
            gesvd,
            [a],
            [Block()],
            [self.caller, Replicated(), self.caller, Replicated()],
            shapes=[(m, m if full_matrices else n), (n,), (n, n), ()],
            names=["u", "s", "vh", "status"],
            full_matrices=bool(full_matrices),
        )
        return out if compute_uv else (None, out[1], None, out[3])

    def polar(self, a, eigen: bool = False):
        m, n = a.shape
        factors = (Replicated(), self.caller) if eigen else ()
        return self.run(
            polar,
            [a],
            [Block()],
            [self.caller, self.caller, *factors, Replicated()],
            shapes=[(m, n), (n, n), *([(n,), (n, n)] if eigen else []), ()],
            names=["u_p", "h", *(["sig", "vv"] if eigen else []), "status"],
            eigen=bool(eigen),
        )
