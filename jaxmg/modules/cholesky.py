"""Cholesky: factor a Hermitian positive-definite matrix once, then solve many times."""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax

from .. import _dispatch, _plan
from .._docstrings import shared_arguments
from .._plan import Options
from .._typing import MeshLike, Rhs, Specs, SquareMatrix, Tile, checked
from ..autodiff import decompositions, logdet, solves
from ..kernels import status as _status
from ..kernels.families import CholeskyState
from . import _base, check as _check
from ._base import Factorisation


@shared_arguments
class Cholesky(Factorisation):
    """The Cholesky factorisation ``a = L L^H`` of a sharded Hermitian positive-definite matrix.

    ``Cholesky(a, T_A=None, mesh=None, matrix_specs=None, *, natural=False, donate=False,
    backend="auto")`` factors ``a`` once; :meth:`solve` then solves any number of right-hand
    sides without refactoring, :meth:`logdet` gives ``log det a`` and :meth:`inverse` ``a^-1``.

    On the distributed route the saved factor is, by default, ``a``'s buffer factored in place
    in cuSOLVERMp's permuted layout (with ``donate=True`` no second copy of the matrix exists);
    :attr:`factor` (L in a's layout) then costs one more factorisation of the kept ``a``.
    ``natural=True`` keeps the factor in natural order instead (about twice the memory), from
    which :attr:`factor` is read, as on the local and batch routes.

    Derivatives (forward and reverse, any order) of :meth:`solve` and :meth:`logdet` in ``a``
    and ``b`` reuse the saved factor (one more solve, never a refactorisation); they are those
    of the functions of the Hermitian matrix read from a's lower triangle.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; only its
        lower triangle is read.
      {{solver_layout}}
      natural: keep the factor in natural order, so that :attr:`factor` is free (distributed
        route; default False).
      {{run}}

    Attributes:
      status: int32, replicated: 0 on success, else the order of the leading minor that is
        not positive definite (distributed route: in cuSOLVERMp's permuted order), or -1 for a
        non-finite result; every output is then NaN.
    """

    state: CholeskyState

    @checked
    def __init__(
        self,
        a: SquareMatrix,
        T_A: Tile = None,
        mesh: MeshLike = None,
        matrix_specs: Specs = None,
        *,
        natural: bool = False,
        donate: bool = False,
        backend: str = "auto",
        check: Optional[bool] = None,
    ):
        options = Options(T_A, mesh, matrix_specs, donate, backend, check)
        self.plan, (self.state, self.status), (self.operator,) = _base.build(
            _made, "cholesky", [("a", a)], options, num_rhs=1, natural=natural
        )

    @checked
    def solve(self, b: Rhs):
        """x with ``a @ x = b``; b is (N,) or (N, NRHS) and x has b's shape and sharding."""
        return _dispatch.method(self, _solve, b)

    def logdet(self):
        """log det a (real, replicated)."""
        return _dispatch.method(self, _logdet)

    def inverse(self):
        """a^-1 (N x N) in a's layout, from the saved factor: LAPACK's potri, the triangular
        inverse and the product L^-H L^-1, (2/3) N^3 flops in large matrix products (on the
        distributed route over the grid, never gathered). Differentiable in ``a`` (any order)."""
        return _dispatch.method(self, _inverse)

    @property
    def factor(self):
        """The lower factor L (N x N) in a's layout, zero above the diagonal.

        Read from the saved factor where it holds L (``natural=True``, the local and batch
        routes); else computed by factoring the kept ``a`` once more in natural order.
        """
        if not self.plan.backend.cholesky(self.plan).lower_readable and self.operator is None:
            raise ValueError(
                "Cholesky(a, donate=True).factor: the donated a was factored in cuSOLVERMp's permuted "
                "layout, from which L cannot be read, and a is gone; use Cholesky(a, natural=True, "
                "donate=True) (or jaxmg.cholesky) when L is needed."
            )
        return _dispatch.method(self, _lower)


def promoted_solve(module: Cholesky, b):
    """:meth:`Cholesky.solve` with ``b`` and the factor promoted together as
    ``jax.scipy.linalg.cho_solve`` promotes them (``jaxmg.modules._base.promoted``)."""
    return _base.promoted(module, _solve, b)


def factored(plan, a, *, keep: bool):
    """(state, status, operator) of the factorisation of ``a`` (trace-only)."""
    return _base.factored(plan.backend.cholesky(plan), plan, a, keep=keep)


def _made(plan, a, *, keep: bool, check: bool):
    a, probes = _check.before(plan, a, "solution", lower_read=True, check=check)
    return _check.factored_checked(plan, factored(plan, a, keep=keep), plan.backend.cholesky(plan), probes)


def solved(plan, operator, state, status, b):
    """x with ``a x = b`` from the saved factor, NaN where the status is not 0 (trace-only)."""
    kernels = plan.backend.cholesky(plan)
    b, spec, home = _plan.place_rhs(plan, b)
    operator, b = _status.derivatives_masked(status, operator, b)
    solve = lambda r: kernels.solve(state, r, spec)  # noqa: E731
    # the operator read from a's lower triangle is Hermitian: symmetric for real dtypes (one solve
    # serves its transpose), and its transpose is its conjugate for complex ones
    real = not jax.numpy.issubdtype(plan.dtype, jax.numpy.complexfloating)
    x = solves.linear_solve(
        plan,
        operator,
        b,
        spec,
        solve,
        solves.hermitian_transpose_solve(solve, plan.dtype),
        symmetric=real,
        reads_lower=True,
    )
    return home(_status.masked(status, x, derivatives=False))


def log_determinant(plan, operator, state, status):
    """log det a from the saved factor (trace-only)."""
    operator = _status.derivatives_masked(status, operator)
    return _status.masked(status, logdet.logdet(plan.backend.cholesky(plan), operator, state), derivatives=False)


def _solve(plan, module, b):
    return solved(plan, module.operator, module.state, module.status, b)


def _logdet(plan, module):
    return log_determinant(plan, module.operator, module.state, module.status)


def _inverse(plan, module):
    return _base.inverse(plan.backend.cholesky(plan), plan, module)


def _lower(plan, module):
    state = module.state
    if not plan.backend.cholesky(plan).lower_readable:
        plan = dataclasses.replace(plan, natural=True)
        state, _, _ = factored(plan, module.operator, keep=False)
    operator = _status.derivatives_masked(module.status, module.operator)
    return module._masked(plan.leave(decompositions.cholesky_lower(plan.backend.cholesky(plan), operator, state)))
