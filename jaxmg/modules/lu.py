"""LU: factor a general square matrix once (partial pivoting), then solve many times."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from .. import _dispatch, _plan
from .._docstrings import shared_arguments
from .._plan import Options
from .._typing import MeshLike, Rhs, Specs, SquareMatrix, Tile, checked
from ..autodiff import decompositions, logdet, solves
from ..kernels import status as _status
from ..kernels.families import LUState
from . import _base, check as _check
from ._base import Factorisation

#: op(A) -> how to apply op(A)^-T with the same factor: (trans, conjugate the rhs/solution).
_TRANSPOSE = {"N": ("T", False), "T": ("N", False), "C": ("N", True)}


@shared_arguments
class LU(Factorisation):
    """The LU factorisation ``P a = L U`` (partial pivoting) of a sharded square matrix.

    ``LU(a, T_A=None, mesh=None, matrix_specs=None, *, donate=False, backend="auto")``
    factors once; :meth:`solve` solves with ``a``, ``a^T`` or ``a^H`` (``trans="N"``,
    ``"T"``, ``"C"``) without refactoring, differentiably in ``a`` and ``b`` (forward and
    reverse, any order: one more solve with the same factor).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      {{solver_layout}}
      {{run}}

    Attributes:
      status: int32, replicated: 0 on success, else the 1-based index of the first zero pivot
        (``a`` is singular), or -1 for a non-finite result; solutions are then not finite.
    """

    state: LUState

    @checked
    def __init__(
        self,
        a: SquareMatrix,
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
            _made, "lu", [("a", a)], options, num_rhs=1
        )

    @property
    def lu(self) -> jax.Array:
        """The packed factor: on the local and batch routes LAPACK's (L's strict lower triangle, U's
        upper one, as ``jax.scipy.linalg.lu_factor`` gives it, in a's layout); on the distributed
        route cuSOLVERMp's, in the grid layout. Differentiable in ``a`` (any order) on the local and
        batch routes, as ``jax.scipy.linalg.lu_factor``'s factor. LAPACK's factor also for a
        singular a (status > 0); NaN where a has an entry that is not finite."""
        return _dispatch.method(self, _packed)

    @property
    def pivots(self) -> jax.Array:
        """The row pivots (replicated)."""
        return self.state.pivots

    @checked
    def solve(self, b: Rhs, trans: str = "N"):
        """x with ``op(a) @ x = b``, op by ``trans``: "N" (a), "T" (a^T) or "C" (a^H)."""
        if trans not in _TRANSPOSE:
            raise ValueError(f"trans must be 'N', 'T' or 'C', got {trans!r}.")
        return _dispatch.method(self, _solve, b, trans=trans)

    def transpose_solve(self, b):
        """x with ``a^T @ x = b`` (shorthand for ``solve(b, trans="T")``)."""
        return self.solve(b, trans="T")

    def inverse(self):
        """a^-1 (N x N) in a's layout, from the saved factor: LAPACK's getri, (4/3) N^3 flops in
        large matrix products. On one GPU it is one call in the factor's own buffer (U^-1, then
        X L = U^-1 by panels of columns); on the distributed route the inverses of both
        triangular factors and their product, over the grid, never gathered; elsewhere solves
        against the identity. Differentiable in ``a`` (any order)."""
        return _dispatch.method(self, _inverse)

    def slogdet(self):
        """``(sign, logabsdet)`` of a, replicated, as ``jnp.linalg.slogdet``: sign has a's dtype
        (+-1, or a unit-modulus phase for complex a; 0 where a is singular) and logabsdet is
        real (-inf where a is singular); NaN where a has an entry that is not finite.
        Differentiable in ``a`` (any order), with A^-1 from the saved factor."""
        return _dispatch.method(self, _slogdet)


def promoted_solve(module: LU, b, trans: str = "N"):
    """:meth:`LU.solve` with ``b`` and the factor promoted together as
    ``jax.scipy.linalg.lu_solve`` promotes them (``jaxmg.modules._base.promoted``)."""
    return _base.promoted(module, _solve, b, trans=trans)


def factored(plan, a, *, keep: bool):
    """(state, status, operator) of the LU factorisation of ``a`` (trace-only)."""
    return _base.factored(plan.backend.lu(plan), plan, a, keep=keep)


def _made(plan, a, *, keep: bool, check: bool):
    a, probes = _check.before(plan, a, "solution", check=check)
    return _check.factored_checked(plan, factored(plan, a, keep=keep), plan.backend.lu(plan), probes)


def solved(plan, operator, state, status, b, trans: str = "N"):
    """x with ``op(a) x = b`` from the saved factor, NaN where the status is not 0 (trace-only)."""
    kernels = plan.backend.lu(plan)
    b, spec, home = _plan.place_rhs(plan, b)
    operator, b = _status.derivatives_masked(status, operator, b)
    transposed, conjugate = _TRANSPOSE[trans]

    def apply(r, op, conj):
        if conj:
            return jnp.conj(kernels.solve(state, jnp.conj(r), spec, op))
        return kernels.solve(state, r, spec, op)

    x = solves.linear_solve(
        plan,
        operator,
        b,
        spec,
        lambda r: apply(r, trans, False),
        lambda r: apply(r, transposed, conjugate),
        symmetric=False,
        trans=trans,
    )
    return home(_status.masked(status, x, derivatives=False))


def _solve(plan, module, b, *, trans):
    return solved(plan, module.operator, module.state, module.status, b, trans)


def _inverse(plan, module):
    return _base.inverse(plan.backend.lu(plan), plan, module)


def _packed(plan, module):
    """The packed factor from the saved state, differentiable through the kept ``a``, in a's layout
    on the local and batch routes (trace-only)."""
    packed = decompositions.lu_packed(plan.backend.lu(plan), module.operator, module.state)
    finite = jnp.all(jnp.isfinite(packed), axis=(-2, -1))
    packed = _status.masked(_undefined_where(module.status, finite), packed)
    return packed if plan.distributed else plan.leave(packed, "lu")


def _slogdet(plan, module):
    """(sign, log|det a|) from the saved factor (trace-only): ``(0, -inf)`` for a singular a (a
    zero pivot, every other finite), NaN (and NaN derivatives) where the factorisation failed
    otherwise (a pivot that is not finite: NaN or Inf in a)."""
    sign, logabsdet = logdet.slogdet(plan.backend.lu(plan), module.operator, module.state)
    singular = logabsdet == -jnp.inf  # a zero pivot and no infinite or NaN one
    return _status.masked(_undefined_where(module.status, singular), sign, logabsdet)


def _undefined_where(status, defined):
    """The factorisation's ``status`` where an output is not ``defined`` by it, else 0: LU of a
    singular matrix (a zero pivot) exists and is LAPACK's, as its log-determinant (-inf) is;
    a pivot that is not finite defines neither."""
    return jnp.where(defined, _status.OK, status)
