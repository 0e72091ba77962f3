"""QR: factor a tall matrix once, then least-squares solves and the factors Q and R."""

from __future__ import annotations

import jax

from ..autodiff import decompositions
from ..ops import qr as ops
from . import _base
from .._docstrings import shared_arguments
from .._typing import MeshLike, Specs, TallMatrix, TallRhs, Tile, checked
from ._base import Factorisation, prepare


@shared_arguments
class QR(Factorisation):
    """The reduced QR factorisation ``a = Q R`` of a sharded M x N matrix, M >= N.

    ``QR(a, T_A=None, mesh=None, matrix_specs=None, *, donate=False, backend="auto")``
    factors once; :meth:`solve` gives least-squares solutions without refactoring, and
    :attr:`q` (M x N) and :attr:`r` (N x N, upper triangular) are in a's layout. All are
    differentiable (forward and reverse mode, any order) in ``a`` (and ``b``) for ``a`` of full column rank.

    Args:
      a: (M, N) matrix, M >= N, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      T_A: {T_A}
      mesh: {mesh_module}
      matrix_specs: {matrix_specs_solver}
      donate: {donate}
      backend: {backend}

    Attributes:
      status: int32, replicated: 0 on success, else the 1-based index of the first zero
        diagonal entry of R (``a`` is rank deficient), or -1 for a non-finite result.
    """

    state: tuple

    @checked
    def __init__(self, a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 donate: bool = False, backend: str = "auto"):
        call, (a,), (kept,) = prepare("qr", [("a", a)], square=False, T_A=T_A, mesh=mesh,
                                      matrix_specs=matrix_specs, donate=donate, backend=backend,
                                      num_rhs=1)
        *state, status = ops.factor(call, _base.no_gradient(a), donate=kept is None)
        self.state = tuple(jax.lax.stop_gradient(s) for s in state)
        self.status = status
        self.operator = kept
        self.call = call

    @_base.compiled_under_vmap
    @checked
    def solve(self, b: TallRhs):
        """The x (N or N x NRHS) minimising ||a x - b||_2, for b (M,) or (M, NRHS).

        Any grid shape works with any layout of ``b``: it is gathered whole on every
        process, so no process-grid column needs to own a tile of it. x is laid out like b
        (its row axes must divide N).
        """
        call = self._call_here
        b, spec, home = self._rhs(call, b)
        return home(self._masked(decompositions.least_squares(call, spec, self.shape[1], self.operator,
                                                              self.state, b)))

    @property
    def q(self):
        """Q (M x N) with orthonormal columns, in a's layout."""
        return self._masked(decompositions.qr_outputs(self._call_here, self.operator, self.state)[0])

    @property
    def r(self):
        """R (N x N), upper triangular, in a's layout."""
        return self._masked(decompositions.qr_outputs(self._call_here, self.operator, self.state)[1])
