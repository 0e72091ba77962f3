"""QR: factor a matrix once, then least-squares solves and the factors Q and R."""

from __future__ import annotations

import equinox as eqx
import jax

from ..autodiff import decompositions
from ..ops import products
from ..ops import qr as ops
from . import _base
from .._dense import adjoint, columns, matmul, spec_of, triu
from .._docstrings import shared_arguments
from .._typing import Matrix, MeshLike, Specs, TallRhs, Tile, checked
from ._base import Factorisation, prepare
from .decompositions import _dense_or_adjoint


@shared_arguments
class QR(Factorisation):
    """The QR factorisation of a sharded M x N matrix, and least squares with it.

    ``QR(a, T_A=None, mesh=None, matrix_specs=None, *, donate=False, backend="auto")``
    factors once; :meth:`solve` gives least-squares solutions without refactoring, and
    :attr:`q` and :attr:`r` are in a's layout. For M >= N, ``a = Q R`` is the reduced
    factorisation: Q (M x N), R (N x N, upper triangular).

    A wide ``a`` (M < N) is factored through its conjugate transpose, ``a^H = Q' R'``:
    :meth:`solve` then gives the minimum-norm solution of ``a x = b``
    (``x = Q' R'^-H b``, for ``a`` of full row rank). Its :attr:`q` (M x M) and :attr:`r`
    (M x N, upper trapezoidal) are those of ``a = Q R``, from one more factorisation (of
    a's first M columns, with ``R[:, M:] = Q^H a[:, M:]``).

    Everything is differentiable (forward and reverse mode, any order) in ``a`` (and ``b``)
    for ``a`` of full rank.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
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
    wide: bool = eqx.field(static=True)

    @checked
    def __init__(self, a: Matrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 donate: bool = False, backend: str = "auto"):
        a, self.wide, matrix_specs = _dense_or_adjoint(a, matrix_specs)
        call, (a,), (kept,) = prepare("qr", [("a", a)], square=False, T_A=T_A, mesh=mesh,
                                      matrix_specs=matrix_specs, donate=donate, backend=backend,
                                      num_rhs=1)
        *state, status = ops.factor(call, _base.no_gradient(a), donate=kept is None)
        self.state = tuple(jax.lax.stop_gradient(s) for s in state)
        self.status = status
        self.operator = kept
        self.call = call

    @property
    def shape(self) -> tuple:
        """The factored matrix's shape (M, N)."""
        return self.call.shape[::-1] if self.wide else self.call.shape

    @_base.compiled_under_vmap
    @checked
    def solve(self, b: TallRhs):
        """The x (N or N x NRHS) minimising ||a x - b||_2, for b (M,) or (M, NRHS); for a wide
        ``a``, the x of least norm with ``a x = b``.

        Any grid shape works with any layout of ``b``: it is gathered whole on every
        process, so no process-grid column needs to own a tile of it. x is laid out like b
        (its row axes must divide N).
        """
        call = self._call_here
        b, spec, home = self._rhs(call, b, rows=self.shape[0])
        if not self.wide:
            x = decompositions.least_squares(call, spec, self.shape[1], self.operator, self.state, b)
            return home(self._masked(x))
        if self.operator is None:
            raise ValueError("QR(a, donate=True).solve with a wide a: the minimum-norm solution x = a^H "
                             "(a a^H)^-1 b needs a, which was donated; keep a (donate=False).")
        # a a^H = R'^H R' with a^H = Q' R', so x = a^H (R'^H R')^-1 b = Q' R'^-H b
        z = decompositions._normal_solve(call, spec, self.operator, self.state, b)
        return home(self._masked(products.matvec(call, self.operator, z, spec, spec)))

    def _wide_factors(self):
        if self.operator is None:
            raise ValueError("QR(a, donate=True) with a wide a: q and r need a, which was donated; "
                             "keep a (donate=False), or use jaxmg.qr(a).")
        call = self._call_here
        return wide_factors(adjoint(self.operator), call.tile, call.grid.mesh, None, call.backend)

    @property
    def q(self):
        """Q in a's layout: M x N with orthonormal columns (M x M for a wide a)."""
        if self.wide:
            return self._wide_factors()[0]
        return self._masked(decompositions.qr_outputs(self._call_here, self.operator, self.state)[0])

    @property
    def r(self):
        """R in a's layout: N x N upper triangular (M x N upper trapezoidal for a wide a)."""
        if self.wide:
            return self._wide_factors()[1]
        return self._masked(decompositions.qr_outputs(self._call_here, self.operator, self.state)[1])


def wide_factors(a, T_A, mesh, matrix_specs, backend):
    """(q, r, status) of ``a = q r`` for a wide M x N ``a``: q (M x M) from the QR of a's first
    M columns, r = triu(q^H a) (M x N), both in a's layout."""
    m = a.shape[0]
    square = QR(columns(a, 0, m), T_A, mesh, matrix_specs, backend=backend)
    q = square.q
    return q, triu(matmul(adjoint(q), a, spec_of(a))), square.status
