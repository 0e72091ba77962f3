"""Eigh, SVD and Polar: decompositions computed once, whose factors are the result."""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax

from ..autodiff import decompositions as rules
from .._checks import as_array, check_flag
from .._dense import adjoint, adjoint_specs
from .._docstrings import shared_arguments
from .._typing import Matrix, MeshLike, Specs, SquareMatrix, TallMatrix, Tile, checked
from ._base import Factorisation, prepare


@shared_arguments
class Eigh(Factorisation):
    """Eigen-decomposition of a sharded Hermitian matrix, or of the pencil (a, b).

    ``Eigh(a, b=None, T_A=None, mesh=None, matrix_specs=None, *, donate=False,
    backend="auto")``: with ``b`` None, ``a v = v diag(w)``; with ``b``, ``a v = b v diag(w)``
    and ``v^H b v = I``. :attr:`w` (N,) is ascending and replicated, :attr:`v` (N x N) has
    the eigenvectors as columns in a's layout. Differentiable (forward and reverse mode, any order) in ``a`` (and
    ``b``); for degenerate eigenvalues the derivative is that of a loss invariant to
    rotations within each eigenspace (the terms between equal eigenvalues are dropped).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian,
        only its lower triangle is read.
      b: None, or (N, N) Hermitian positive definite with a's shape, dtype and layout (only its
        lower triangle is read).
      T_A: {T_A}
      mesh: {mesh_module}
      matrix_specs: {matrix_specs}
      donate: {donate}
      backend: {backend}

    Attributes:
      status: int32, replicated: 0 on success, else the order of b's leading minor that is
        not positive definite, or -1 for a non-finite result.
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
        w, v, self.status = (rules.syevd if b is None else rules.sygvd)(call, *arrays)
        self.w, self.v = self._masked(w, v)
        self.operator = kept[0]
        self.pencil = kept[1] if b is not None else None
        self.call = call


@shared_arguments
class SVD(Factorisation):
    """Singular value decomposition ``a = u diag(s) vh`` of a sharded M x N matrix.

    ``SVD(a, T_A=None, mesh=None, matrix_specs=None, *, full_matrices=False, donate=False,
    backend="auto")``: with K = min(M, N), :attr:`u` (M x K, or M x M with
    ``full_matrices``) and :attr:`vh` (K x N, or N x N with ``full_matrices``) in a's
    layout, :attr:`s` (K,) descending and replicated. A wide ``a`` (M < N) is decomposed
    through its conjugate transpose (``a^H = u' s vh'`` gives ``u = vh'^H`` and
    ``vh = u'^H``), so it costs what the tall case costs. Differentiable (forward and
    reverse mode, any order) in ``a`` for distinct non-zero singular values.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      T_A: {T_A}
      mesh: {mesh_module}
      matrix_specs: {matrix_specs}
      full_matrices: make ``u`` (M, M) instead of (M, N) (default False).
      donate: {donate}
      backend: {backend}

    Attributes:
      status: int32, replicated: 0 on success, or -1 for a non-finite result.
    """

    u: jax.Array
    s: jax.Array
    vh: jax.Array
    wide: bool = eqx.field(static=True)

    @checked
    def __init__(self, a: Matrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 full_matrices: bool = False, donate: bool = False, backend: str = "auto"):
        check_flag(full_matrices, "full_matrices")
        a, self.wide, matrix_specs = _dense_or_adjoint(a, matrix_specs)
        call, (a,), (kept,) = prepare("svd", [("a", a)], square=False, T_A=T_A, mesh=mesh,
                                      matrix_specs=matrix_specs, donate=donate, backend=backend)
        u, s, vh, self.status = rules.gesvd(call, bool(full_matrices), a)
        if self.wide:  # a^H = u s vh, so a = vh^H s u^H
            u, vh = adjoint(vh), adjoint(u)
        self.u, self.s, self.vh = self._masked(u, s, vh)
        self.operator = kept
        self.call = call

    @property
    def shape(self) -> tuple:
        """The decomposed matrix's shape (M, N)."""
        return self.call.shape[::-1] if self.wide else self.call.shape


@shared_arguments
class Polar(Factorisation):
    """Polar decomposition ``a = u_p h`` of a sharded M x N matrix, M >= N.

    ``Polar(a, T_A=None, mesh=None, matrix_specs=None, *, donate=False, backend="auto")``:
    :attr:`u_p` (M x N, orthonormal columns) and :attr:`h` (N x N, Hermitian positive
    semi-definite), both in a's layout. Differentiable (forward and reverse mode, any order) in ``a`` for ``a`` of
    full rank.

    Args:
      a: (M, N) matrix, M >= N, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      T_A: {T_A}
      mesh: {mesh_module}
      matrix_specs: {matrix_specs}
      donate: {donate}
      backend: {backend}

    Attributes:
      status: int32, replicated: 0 on success, or -1 for a non-finite result.
    """

    u_p: jax.Array
    h: jax.Array

    @checked
    def __init__(self, a: TallMatrix, T_A: Tile = None, mesh: MeshLike = None, matrix_specs: Specs = None, *,
                 donate: bool = False, backend: str = "auto"):
        call, (a,), (kept,) = prepare("polar", [("a", a)], square=False, T_A=T_A, mesh=mesh,
                                      matrix_specs=matrix_specs, donate=donate, backend=backend)
        u_p, h, self.status = rules.polar_decomposition(call, a)
        self.u_p, self.h = self._masked(u_p, h)
        self.operator = kept
        self.call = call


def _dense_or_adjoint(a, matrix_specs):
    """(a, False, matrix_specs) for a tall or square ``a``; for a wide one (M < N) its conjugate
    transpose, True and the specs of the conjugate transpose, so that decompositions that
    need M >= N run on a^H."""
    a = as_array(a, "a")
    if a.ndim == 2 and a.shape[0] < a.shape[1]:
        return adjoint(a), True, adjoint_specs(matrix_specs)
    return a, False, matrix_specs
