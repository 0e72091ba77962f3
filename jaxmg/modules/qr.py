"""QR: factor a matrix once, then least-squares solves and the factors Q and R."""

from __future__ import annotations

import dataclasses

import jax

from .. import _dispatch, _plan
from .._dense import adjoint, columns, matmul, spec_of, triu
from .._docstrings import shared_arguments
from .._typing import Matrix, MeshLike, Specs, TallRhs, Tile, checked
from ..autodiff import _dist, decompositions, solves
from ..kernels import status as _status
from ..kernels.families import QRState
from ._base import Factorisation


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
      {{solver_layout}}
      {{run}}

    Attributes:
      status: int32, replicated: 0 on success, else the 1-based index of the first zero
        diagonal entry of R (``a`` is rank deficient), or -1 for a non-finite result.
    """

    state: QRState

    @checked
    def __init__(self, a: Matrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 donate: bool = False, backend: str = "auto"):
        self.plan, (self.state, self.status), (self.operator,) = _dispatch.build(
            _made, "qr", [("a", a)], T_A=T_A, mesh=mesh, matrix_specs=matrix_specs, donate=donate,
            backend=backend, square=False, tall=False, num_rhs=1)

    @property
    def wide(self) -> bool:
        """Whether a has fewer rows than columns (factored through its conjugate transpose)."""
        return self.plan.wide

    @checked
    def solve(self, b: TallRhs):
        """The x (N or N x NRHS) minimising ||a x - b||_2, for b (M,) or (M, NRHS); for a wide
        ``a``, the x of least norm with ``a x = b``.

        Any grid shape works with any layout of ``b``: it is gathered whole on every
        process, so no process-grid column needs to own a tile of it. x is laid out like b
        (its row axes must divide N).
        """
        if self.wide and self.operator is None:
            raise ValueError("QR(a, donate=True).solve with a wide a: the minimum-norm solution x = a^H "
                             "(a a^H)^-1 b needs a, which was donated; keep a (donate=False).")
        return _dispatch.method(self, _solve, b)

    @property
    def q(self):
        """Q in a's layout: M x N with orthonormal columns (M x M for a wide a)."""
        return self._factors()[0]

    @property
    def r(self):
        """R in a's layout: N x N upper triangular (M x N upper trapezoidal for a wide a)."""
        return self._factors()[1]

    def _factors(self):
        if self.wide and self.operator is None:
            raise ValueError("QR(a, donate=True) with a wide a: q and r need a, which was donated; "
                             "keep a (donate=False), or use jaxmg.qr(a).")
        return _dispatch.method(self, _factors)


def kernel_plan(plan):
    """The plan the QR kernels run on: a's, or that of a^H for a wide a."""
    return plan.adjoint() if plan.wide else plan


def factored(plan, a, *, keep: bool):
    """(state, status, operator) of the QR factorisation of ``a`` (of a^H for a wide a)."""
    kplan = kernel_plan(plan)
    factor_of = adjoint(a) if plan.wide else a
    state, status = kplan.kernels.QR(kplan).factor(jax.lax.stop_gradient(kplan.enter(factor_of)))
    return jax.lax.stop_gradient(state), status, a if keep else None


def _made(plan, a, *, keep: bool):
    return factored(plan, a, keep=keep)[:2]


def solved(plan, operator, state, status, b):
    """The least-squares (or, for a wide a, minimum-norm) solution from the saved factor."""
    kplan = kernel_plan(plan)
    kernels = kplan.kernels.QR(kplan)
    b, spec, home = _plan.place_rhs(kplan, b, rows=plan.shape[0])
    if not plan.wide:
        x = decompositions.least_squares(kernels, spec, operator, state, b)
    else:
        # a a^H = R'^H R' with a^H = Q' R', so x = a^H (R'^H R')^-1 b = Q' R'^-H b
        ah = kplan.enter(adjoint(operator))
        z = decompositions.normal_solve(kernels, spec, ah, state, b)
        x = _dist.matvec(ah, z, solves.rhs_layout(kplan, spec))
    return home(_status.masked(status, x))


def _solve(plan, module, b):
    return solved(plan, module.operator, module.state, module.status, b)


def factors(plan, operator, state, status):
    """(q, r) in a's layout from the saved factor of a tall ``a`` (trace-only)."""
    q, r = decompositions.qr_outputs(plan.kernels.QR(plan), operator, state)
    return _status.masked(status, plan.leave(q, "q"), plan.leave(r, "r"))


def _factors(plan, module):
    if not plan.wide:
        return factors(plan, module.operator, module.state, module.status)
    q, r, _ = wide_factors(plan, module.operator)
    return q, r


def wide_factors(plan, a):
    """(q, r, status) of ``a = q r`` for a wide M x N ``a``: q (M x M) from the QR of a's first M
    columns, r = triu(q^H a) (M x N), both in a's layout (trace-only)."""
    m = a.shape[0]
    square = dataclasses.replace(plan, shape=(m, m))
    head = columns(a, 0, m)
    state, status, _ = factored(square, head, keep=True)
    q, _ = factors(square, head, state, status)
    return q, triu(matmul(adjoint(q), a, spec_of(a))), status
