"""LU: factor a general square matrix once (partial pivoting), then solve many times."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..autodiff import logdet, solves
from ..ops import lu as ops
from . import _base
from .._docstrings import shared_arguments
from .._typing import MeshLike, Rhs, Specs, SquareMatrix, Tile, checked
from ._base import Factorisation, prepare

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
      T_A: {T_A}
      mesh: {mesh_module}
      matrix_specs: {matrix_specs_solver}
      donate: {donate}
      backend: {backend}

    Attributes:
      status: int32, replicated: 0 on success, else the 1-based index of the first zero pivot
        (``a`` is singular), or -1 for a non-finite result; solutions are then not finite.
    """

    lu: jax.Array
    pivots: jax.Array

    @checked
    def __init__(self, a: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 donate: bool = False, backend: str = "auto"):
        call, (a,), (kept,) = prepare("lu", [("a", a)], T_A=T_A, mesh=mesh, matrix_specs=matrix_specs,
                                      donate=donate, backend=backend, num_rhs=1)
        lu, pivots, status = ops.factor(call, _base.no_gradient(a), donate=kept is None)
        self.lu = jax.lax.stop_gradient(lu)
        self.pivots = pivots
        self.status = status
        self.operator = kept
        self.call = call

    def _apply(self, call, r, spec, trans: str, conjugate: bool):
        if conjugate:
            return jnp.conj(ops.solve(call, self.lu, self.pivots, jnp.conj(r), spec, trans))
        return ops.solve(call, self.lu, self.pivots, r, spec, trans)

    @_base.compiled_under_vmap
    @checked
    def solve(self, b: Rhs, trans: str = "N"):
        """x with ``op(a) @ x = b``, op by ``trans``: "N" (a), "T" (a^T) or "C" (a^H)."""
        if trans not in _TRANSPOSE:
            raise ValueError(f"trans must be 'N', 'T' or 'C', got {trans!r}.")
        call = self._call_here
        b, spec, home = self._rhs(call, b)
        transposed, conjugate = _TRANSPOSE[trans]
        return home(self._masked(solves.linear_solve(
            call, self.operator, b, spec,
            lambda r: self._apply(call, r, spec, trans, False),
            lambda r: self._apply(call, r, spec, transposed, conjugate),
            symmetric=False, trans=trans,
        )))

    def transpose_solve(self, b):
        """x with ``a^T @ x = b`` (shorthand for ``solve(b, trans="T")``)."""
        return self.solve(b, trans="T")

    def inverse(self):
        """a^-1 (N x N) in a's layout, from the saved factor: LAPACK's getri, the inverses of
        both triangular factors and their product, (4/3) N^3 flops in large matrix products,
        distributed over the grid (never gathered). Differentiable in ``a`` (any order)."""
        call = self._call_here
        inverse = logdet.inverse(call, self.operator, (self.lu, self.pivots))
        return self._masked(_base._put(inverse, call.layout.out_spec, call.grid.mesh))

    def slogdet(self):
        """``(sign, logabsdet)`` of a, replicated, as ``jnp.linalg.slogdet``: sign has a's dtype
        (+-1, or a unit-modulus phase for complex a; 0 where a is singular) and logabsdet is
        real (-inf where a is singular). Differentiable in ``a`` (any order), with A^-1 from the
        saved factor."""
        sign, value = logdet.slogdet(self._call_here, self.operator, (self.lu, self.pivots))
        return sign, value
