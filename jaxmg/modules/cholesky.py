"""Cholesky: factor a Hermitian positive-definite matrix once, then solve many times."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from ..autodiff import decompositions, logdet, solves
from ..ops import cholesky as ops
from . import _base
from .._checks import check_flag
from .._docstrings import shared_arguments
from .._typing import MeshLike, Rhs, Specs, SquareMatrix, Tile, checked
from ._base import Factorisation, prepare


@shared_arguments
class Cholesky(Factorisation):
    """The Cholesky factorisation ``a = L L^H`` of a sharded Hermitian positive-definite matrix.

    ``Cholesky(a, T_A=None, mesh=None, matrix_specs=None, *, natural=False, donate=False,
    backend="auto")`` factors ``a`` once, in the backend's own layout; :meth:`solve` then
    solves any number of right-hand sides without refactoring, and :meth:`logdet` gives
    ``log det a``.

    On the native backend the saved factor is, by default, cuSOLVERMp's own: ``a``'s buffer
    factored in place in a permuted block-cyclic layout (nothing redistributed; with
    ``donate=True`` no second copy of the matrix ever exists). :attr:`factor` (L in a's
    layout) cannot be read from it and costs one more factorisation of the kept ``a``.
    ``natural=True`` keeps the factor in natural order instead (redistributed first: about
    twice the memory), so that :attr:`factor` is read from it. The portable backend's factor
    is always L.

    Derivatives (forward and reverse, any order) of :meth:`solve` and :meth:`logdet` with
    respect to ``a`` and ``b`` reuse the saved factor: one more solve, never a
    refactorisation. They are the derivatives of the functions of the full matrix ``a``
    (as ``jnp.linalg.solve`` and ``slogdet`` give), for Hermitian ``a``.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; only its
        lower triangle is read.
      T_A: {T_A}
      mesh: {mesh_module}
      matrix_specs: {matrix_specs_solver}
      natural: keep the factor in natural order, so that :attr:`factor` is free (native backend;
        default False).
      donate: {donate}
      backend: {backend}

    Attributes:
      status: int32, replicated: 0 on success, else the order of the leading minor that is
        not positive definite (native backend: in cuSOLVERMp's permuted order), or -1 for a
        non-finite result; every output is then NaN.
    """

    state: jax.Array

    @checked
    def __init__(self, a: SquareMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 natural: bool = False, donate: bool = False, backend: str = "auto"):
        check_flag(natural, "natural")
        call, (a,), (kept,) = prepare("cholesky", [("a", a)], T_A=T_A, mesh=mesh,
                                      matrix_specs=matrix_specs, donate=donate, backend=backend,
                                      num_rhs=1)
        call = dataclasses.replace(call, natural=natural)
        state, status = ops.factor(call, _base.no_gradient(a), donate=kept is None)
        self.state = jax.lax.stop_gradient(state)
        self.status = status
        self.operator = kept
        self.call = call

    @_base.compiled_under_vmap
    @checked
    def solve(self, b: Rhs):
        """x with ``a @ x = b``; b is (N,) or (N, NRHS) and x has b's shape and sharding."""
        call = self._call_here
        b, spec, home = self._rhs(call, b)
        solve = lambda r: ops.solve(call, self.state, r, spec)  # noqa: E731
        return home(self._masked(solves.linear_solve(
            call, self.operator, b, spec, solve,
            solves.hermitian_transpose_solve(solve, self.dtype),
            symmetric=False, reads_lower=True,
        )))

    def logdet(self):
        """log det a (real, replicated)."""
        return self._masked(logdet.logdet(self._call_here, self.operator, self.state))

    def inverse(self):
        """a^-1 (N x N) in a's layout, from the saved factor: LAPACK's potri, the triangular
        inverse and the product L^-H L^-1, (2/3) N^3 flops in large matrix products, distributed
        over the grid (never gathered). Differentiable in ``a`` (any order)."""
        call = self._call_here
        inverse = logdet.inverse(call, self.operator, self.state)
        return self._masked(_base._put(inverse, call.layout.out_spec, call.grid.mesh))

    @property
    def factor(self):
        """The lower factor L (N x N) in a's layout, zero above the diagonal.

        Read from the saved factor where it holds L (``natural=True``, the portable backend);
        else computed by factoring the kept ``a`` once more in natural order.
        """
        call, state = self._call_here, self.state
        if not ops.state_is_lower(call):
            if self.operator is None:
                raise ValueError(
                    "Cholesky(a, donate=True).factor: the donated a was factored in cuSOLVERMp's permuted "
                    "layout, from which L cannot be read, and a is gone; use Cholesky(a, natural=True, "
                    "donate=True) (or jaxmg.cholesky) when L is needed.")
            call = dataclasses.replace(call, natural=True)
            state, _ = ops.factor(call, _base.no_gradient(self.operator))
            state = jax.lax.stop_gradient(state)
        return self._masked(decompositions.cholesky_lower(call, self.operator, state))
