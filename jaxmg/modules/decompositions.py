"""Eigh, SVD and Polar: decompositions computed once, whose factors are the result."""

from __future__ import annotations

from typing import Optional

import jax

from ..autodiff import decompositions as rules
from .._typing import MeshLike, Specs, SquareMatrix, TallMatrix, Tile, checked
from ._base import Factorisation, prepare


class Eigh(Factorisation):
    """Eigen-decomposition of a sharded Hermitian matrix, or of the pencil (a, b).

    ``Eigh(a, b=None, T_A=None, mesh=None, matrix_specs=None, *, donate=False,
    backend="auto")``: with ``b`` None, ``a v = v diag(w)``; with ``b`` Hermitian positive
    definite (same shape and layout as ``a``), ``a v = b v diag(w)`` and ``v^H b v = I``.
    Only lower triangles are read. :attr:`w` (N,) is ascending and replicated, :attr:`v`
    (N x N) has the eigenvectors as columns in a's layout. Differentiable in ``a`` (and
    ``b``); for degenerate eigenvalues the derivative is that of a loss invariant to
    rotations within each eigenspace (the terms between equal eigenvalues are dropped).
    ``status`` is 0, the order of b's failing minor, or -1 for a non-finite result.
    """

    w: jax.Array
    v: jax.Array
    pencil: Optional[jax.Array]

    @checked
    def __init__(self, a: SquareMatrix, b: Optional[SquareMatrix] = None, T_A: Tile = None, mesh: MeshLike = None,
                 matrix_specs: Specs = None, *, donate: bool = False, backend: str = "auto"):
        matrices = [("a", a)] if b is None else [("a", a), ("b", b)]
        call, arrays, kept = prepare("eigh" if b is None else "sygvd", matrices, T_A=T_A, mesh=mesh,
                                     matrix_specs=matrix_specs, donate=donate, backend=backend)
        if b is None:
            self.w, self.v, self.status = rules.syevd(call, *arrays)
        else:
            self.w, self.v, self.status = rules.sygvd(call, *arrays)
        self.operator = kept[0]
        self.pencil = kept[1] if b is not None else None
        self.call = call


class SVD(Factorisation):
    """Singular value decomposition ``a = u diag(s) vh`` of a sharded M x N matrix, M >= N.

    ``SVD(a, T_A=None, mesh=None, matrix_specs=None, *, full_matrices=False, donate=False,
    backend="auto")``: :attr:`u` (M x N, or M x M with ``full_matrices``) and :attr:`vh`
    (N x N) in a's layout, :attr:`s` (N,) descending and replicated. Differentiable in ``a``
    for distinct non-zero singular values. ``status`` is 0, or -1 for a non-finite result.
    """

    u: jax.Array
    s: jax.Array
    vh: jax.Array

    @checked
    def __init__(self, a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 full_matrices: bool = False, donate: bool = False, backend: str = "auto"):
        from .._checks import check_flag

        check_flag(full_matrices, "full_matrices")
        call, (a,), (kept,) = prepare("svd", [("a", a)], square=False, T_A=T_A, mesh=mesh,
                                      matrix_specs=matrix_specs, donate=donate, backend=backend)
        self.u, self.s, self.vh, self.status = rules.gesvd(call, bool(full_matrices), a)
        self.operator = kept
        self.call = call


class Polar(Factorisation):
    """Polar decomposition ``a = u_p h`` of a sharded M x N matrix, M >= N.

    ``Polar(a, T_A=None, mesh=None, matrix_specs=None, *, donate=False, backend="auto")``:
    :attr:`u_p` (M x N, orthonormal columns) and :attr:`h` (N x N, Hermitian positive
    semi-definite), both in a's layout. Differentiable in ``a`` for ``a`` of full rank.
    ``status`` is 0, or -1 for a non-finite result.
    """

    u_p: jax.Array
    h: jax.Array

    @checked
    def __init__(self, a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 donate: bool = False, backend: str = "auto"):
        call, (a,), (kept,) = prepare("polar", [("a", a)], square=False, T_A=T_A, mesh=mesh,
                                      matrix_specs=matrix_specs, donate=donate, backend=backend)
        self.u_p, self.h, self.status = rules.polar_decomposition(call, a)
        self.operator = kept
        self.call = call
