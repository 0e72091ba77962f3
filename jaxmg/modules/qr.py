"""QR: factor a matrix once, then least-squares solves and the factors Q and R."""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import jax
import jax.numpy as jnp

from .. import _dispatch, _plan
from .._dense import adjoint, columns, matmul, spec_of, triu
from .._docstrings import shared_arguments
from .._plan import Options
from .._typing import Matrix, MeshLike, Specs, TallRhs, Tile, checked
from ..autodiff import _dist, decompositions, solves
from ..kernels import status as _status
from ..kernels.families import QRState
from . import _base, check as _check
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
      status: int32, replicated: 0 on success (a rank-deficient ``a`` too: its factor exists),
        or -1 for a non-finite result. The solves also test R's diagonal against ``rcond``
        (:meth:`rank_status`); a wide ``a``'s solution that fails its backward check is NaN
        (``jaxmg.least_squares`` reports -2).
    """

    state: QRState

    @checked
    def __init__(
        self,
        a: Matrix,
        T_A: Tile = None,
        mesh: MeshLike = None,
        matrix_specs: Specs = None,
        *,
        donate: bool = False,
        backend: str = "auto",
        check: Optional[bool] = None,
    ):
        options = Options(T_A, mesh, matrix_specs, donate, backend, check)
        self.plan, (self.state, self.status), (self.operator,) = _base.build(
            _made, "qr", [("a", a)], options, num_rhs=1
        )

    @property
    def wide(self) -> bool:
        """Whether a has fewer rows than columns (factored through its conjugate transpose)."""
        return self.plan.wide

    @checked
    def solve(self, b: TallRhs, rcond: Optional[Union[float, int]] = None):
        """The x (N or N x NRHS) minimising ||a x - b||_2, for b (M,) or (M, NRHS); for a wide
        ``a``, the x of least norm with ``a x = b``.

        Any grid shape works with any layout of ``b``: it is gathered whole on every
        process, so no process-grid column needs to own a tile of it. x is laid out like b
        (its row axes must divide N).

        ``rcond`` (a Python float, as in ``jnp.linalg.lstsq``; default ``max(M, N) * eps`` of
        the dtype, negative: ``eps``): x is NaN where ``a`` is numerically rank deficient, a
        diagonal entry of R below ``rcond * max|R_ii|`` (:meth:`rank_status` says which).
        """
        if self.wide and self.operator is None:
            raise ValueError(
                "QR(a, donate=True).solve with a wide a: the check of the minimum-norm solution "
                "x = Q R^-H b (a^H = Q R) needs a, which was donated; keep a (donate=False)."
            )
        return _dispatch.method(self, _solve, b, rcond=_status.checked_rcond(rcond))

    def rank_status(self, rcond: Optional[Union[float, int]] = None) -> jax.Array:
        """The status of :meth:`solve` with this ``rcond``: :attr:`status` where it is not 0, else
        the 1-based index of the first diagonal entry of R below ``rcond * max|R_ii|`` (``a`` is
        numerically rank deficient), else 0. int32, one per matrix."""
        return _dispatch.method(self, _rank_status, rcond=_status.checked_rcond(rcond))

    def _adjoint_solve(self, b: TallRhs):
        """The x of least norm with ``a^H x = b`` for a tall or square ``a`` (b (N,) or (N, NRHS), x
        (M,) or (M, NRHS)): ``x = Q R^-H b`` from the saved factor, with no Q formed and no second
        factorisation; laid out like b (its row axes must divide M). NaN where :attr:`status` is
        not 0; ``a`` must have full column rank (:meth:`rank_status`)."""
        if self.wide:
            raise ValueError(
                "QR._adjoint_solve needs a tall or square a (M >= N); for a wide a, QR(a).solve(b) "
                "already gives the x of least norm with a x = b."
            )
        return _dispatch.method(self, _adjoint_solved, b)

    @property
    def q(self):
        """Q in a's layout: M x N with orthonormal columns (M x M for a wide a)."""
        return self._factors()[0]

    @property
    def r(self):
        """R in a's layout: N x N upper triangular, read from the saved factor with no Q formed
        (M x N upper trapezoidal for a wide a, with the Q of a's first M columns)."""
        if self.wide:
            return self._factors()[1]
        return _dispatch.method(self, _triangle)

    def _factors(self):
        if self.wide and self.operator is None:
            raise ValueError(
                "QR(a, donate=True) with a wide a: q and r need a, which was donated; "
                "keep a (donate=False), or use jaxmg.qr(a)."
            )
        return _dispatch.method(self, _factors)


def kernel_plan(plan):
    """The plan the QR kernels run on: a's, or that of a^H for a wide a."""
    return plan.adjoint() if plan.wide else plan


def factored(plan, a, *, keep: bool):
    """(state, status, operator) of the QR factorisation of ``a`` (of a^H for a wide a)."""
    kplan = kernel_plan(plan)
    state, status, _ = _base.factored(kplan.backend.qr(kplan), kplan, adjoint(a) if plan.wide else a, keep=False)
    return state, status, a if keep else None


def _made(plan, a, *, keep: bool, check: bool):
    def products():  # of the factored matrix: a, or a^H for a wide a (no transposed copy of a)
        op = _check.general(plan, a)
        return _check.normal_probes(op.adjointed() if plan.wide else op)

    (a,), probes = _check.probed(plan, (a,), products, check=check)
    state, status, _ = factored(plan, a, keep=keep)
    kplan = kernel_plan(plan)
    kernels = kplan.backend.qr(kplan)

    def tests(p):  # R^H R is singular where R has an exact zero on its diagonal: no test applies
        untestable = jnp.any(kernels.diagonal(state) == 0)
        found = _check.normal_solve(kplan, p, lambda r, spec: kernels.normal_solve(state, r, spec))
        return [(jnp.where(untestable, 0, residual), jnp.where(untestable, 1, scale)) for residual, scale in found]

    return state, _check.verified(plan, status, probes, tests)


def solved(plan, operator, state, status, b):
    """(x, status): the least-squares (or, for a wide a, minimum-norm) solution from the saved
    factor, and ``status`` with the wide solution's backward check (:func:`_backward_status`)."""
    kplan = kernel_plan(plan)
    kernels = kplan.backend.qr(kplan)
    b, spec, home = _plan.place_rhs(kplan, b, rows=plan.shape[0])
    operator, b = _status.derivatives_masked(status, operator, b)
    if not plan.wide:
        x = decompositions.least_squares(kernels, spec, operator, state, b)
    else:
        x = decompositions.minimum_norm(kernels, spec, adjoint(operator), state, b)
        layout = solves.rhs_layout(kernels.plan, spec)
        status = _status.either(status, _backward_status(kplan.enter(adjoint(operator)), x, b, layout))
    # the derivatives are masked on the way in, save where the wide solution's check flags it
    return home(_status.masked(status, x, derivatives=plan.wide)), status


def _backward_status(ah, x, b, layout):
    """:data:`~jaxmg.kernels.status.CHECK_FAILED` where the minimum-norm ``x`` of a wide ``a``
    (``ah`` = a^H) does not solve ``a x = b`` to LAPACK's test ratio: ||a x - b||_1 above
    30 max(M, N) eps (||a||_1 ||x||_1 + ||b||_1), per column of ``b`` (one product with ``a``
    and two column sums, O(M N)). ``x = Q R^-H b`` is backward stable for ``a`` of full row rank
    whatever its condition number (up to the rank test's ``rcond``), so this holds for every
    matrix that passes the rank test; the check guards that claim rather than trusting it. Not
    differentiated."""
    ah, x, b = (jax.lax.stop_gradient(v) for v in (ah, x, b))
    r = b - _dist.matvec(ah, x, layout, "C")
    norm = lambda v: jnp.sum(jnp.abs(v), axis=0)  # noqa: E731  (1-norm of each column)
    a_norm = jnp.max(jnp.sum(jnp.abs(ah), axis=-1), initial=0)  # a's largest column sum: a^H's largest row sum
    m, n = ah.shape[-1], ah.shape[-2]
    eps = jnp.finfo(ah.dtype).eps
    bound = 30 * max(m, n) * eps * (a_norm * norm(x) + norm(b))
    bad = jnp.any(~(norm(r) <= bound))
    return jnp.where(bad, _status.CHECK_FAILED, _status.OK).astype(jnp.int32)


def rank_status(plan, state, status, rcond: Optional[float]):
    """``status``, else the rank test of R's diagonal at ``rcond`` (``jnp.linalg.lstsq``'s reading:
    None for max(M, N) eps, negative for eps; trace-only)."""
    kplan = kernel_plan(plan)
    threshold = _status.rcond_threshold(rcond, plan.shape, plan.dtype)
    return _status.either(status, _status.rank_deficient(kplan.backend.qr(kplan).diagonal(state), threshold))


def _rank_status(plan, module, *, rcond):
    return rank_status(plan, module.state, module.status, rcond)


def _adjoint_solved(plan, module, b):
    kernels = plan.backend.qr(plan)
    b, spec, home = _plan.place_rhs(plan, b, rows=plan.shape[1])
    operator, b = _status.derivatives_masked(module.status, module.operator, b)
    x = decompositions.minimum_norm(kernels, spec, operator, module.state, b)
    return home(_status.masked(module.status, x, derivatives=False))


def _solve(plan, module, b, *, rcond):
    status = rank_status(plan, module.state, module.status, rcond)
    return solved(plan, module.operator, module.state, status, b)[0]


def factors(plan, operator, state, status):
    """(q, r) in a's layout from the saved factor of a tall ``a`` (trace-only)."""
    operator = _status.derivatives_masked(status, operator)
    q, r = decompositions.qr_outputs(plan.backend.qr(plan), operator, state)
    return _status.masked(status, plan.leave(q, "q"), plan.leave(r, "r"), derivatives=False)


def triangle(plan, a, *, keep: bool, check: bool):
    """(r, status): R alone of ``a = Q R``, in a's layout, from the Householder factorisation and
    its upper triangle, with no Q formed (trace-only; the derivative forms Q from the same factor,
    :func:`jaxmg.autodiff.decompositions.qr_triangle`). A tall or square ``a``: R (N x N), checked
    on the distributed route as :class:`QR`'s factor is. A wide ``a`` (M x N, M < N): R (M x N),
    upper trapezoidal; the device's solver (local and batch routes) factors the whole ``a``, as
    LAPACK's and JAX's wide QR (the native geqrf factors M >= N only: on the distributed route a
    wide ``a``'s R comes with the Q of its first M columns, :func:`wide_factors`)."""
    assert not (plan.wide and plan.distributed), "the native geqrf factors M >= N only"
    if plan.wide:  # the device's own wide factor (not that of a^H, which QR's solves use)
        state, status, _ = _base.factored(plan.backend.qr(plan), plan, a, keep=False)
    else:
        state, status = _made(plan, a, keep=keep, check=check)
    return saved_triangle(plan, a, state, status), status


def saved_triangle(plan, operator, state, status):
    """R in a's layout from the saved factor ``state`` of ``a`` (``operator``, which carries the
    derivative), with no Q formed; NaN where ``status`` is not 0 (trace-only)."""
    operator = _status.derivatives_masked(status, operator)
    r = decompositions.qr_triangle(plan.backend.qr(plan), operator, state)
    return _status.masked(status, plan.leave(r, "r"), derivatives=False)


def _triangle(plan, module):
    return saved_triangle(plan, module.operator, module.state, module.status)


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
    r = plan.leave(triu(matmul(adjoint(q), a, spec_of(a))), "r")
    return (*_status.masked(status, q, r), status)
