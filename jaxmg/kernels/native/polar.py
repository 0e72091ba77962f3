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

import dataclasses
import functools

from .. import qdwh
from ..._sharded import Block, Replicated, check_outputs, run
from .eig import syevd, sygvd


def polar(a, *, grid, tile):
    """(U_p: a's local block, H: local block of the N x N layout, status), M >= N, by QDWH."""
    return qdwh.polar(a, grid=grid)


def gesvd(a, *, grid, full_matrices, tile):
    """(U block, s descending whole, V^H block, status): polar + the native syevd of H."""
    return qdwh.gesvd(a, grid=grid, full_matrices=full_matrices, syevd=functools.partial(syevd, tile=tile))


@dataclasses.dataclass(frozen=True)
class Decompositions:
    """Eigen-, singular value and polar decompositions over the process grid
    (``jaxmg.kernels.families.DecompositionKernels``): matrix outputs in a's caller layout,
    eigen- and singular values replicated."""

    plan: object

    @property
    def grid(self):
        return self.plan.grid

    @property
    def tile(self) -> int:
        return self.plan.tile

    def _run(self, kernel, args, outputs, shapes=None, names=None, **params):
        if shapes is not None:
            check_outputs(outputs, shapes, self.grid, names)
        return run(kernel, self.grid, args, [Block()] * len(args), outputs, tile=self.tile, **params)

    def syevd(self, a):
        return self._run(syevd, [a], [Replicated(), Block(self.plan.spec), Replicated()])

    def sygvd(self, a, b):
        return self._run(sygvd, [a, b], [Replicated(), Block(self.plan.spec), Replicated()])

    def gesvd(self, a, full_matrices: bool, compute_uv: bool = True):
        m, n = a.shape
        out = self._run(gesvd, [a], [Block(self.plan.spec), Replicated(), Block(self.plan.spec), Replicated()],
                        shapes=[(m, m if full_matrices else n), (n,), (n, n), ()], names=["u", "s", "vh", "status"],
                        full_matrices=bool(full_matrices))
        return out if compute_uv else (None, out[1], None, out[3])

    def polar(self, a):
        m, n = a.shape
        return self._run(polar, [a], [Block(self.plan.spec), Block(self.plan.spec), Replicated()],
                         shapes=[(m, n), (n, n), ()], names=["u_p", "h", "status"])
