"""Eigh, SVD and Polar: decompositions computed once, whose factors are the result."""

from __future__ import annotations

from typing import ClassVar, Optional

import jax

from .._checks import check_flag
from .._dense import adjoint
from .._docstrings import shared_arguments
from .._plan import Options
from .._typing import Matrix, MeshLike, Specs, SquareMatrix, TallMatrix, Tile, checked
from ..autodiff import decompositions as rules
from ..kernels import status as _status
from . import check as _check
from ._base import Factorisation, build


@shared_arguments
class Eigh(Factorisation):
    """Eigen-decomposition of a sharded Hermitian matrix, or of the pencil (a, b).

    ``Eigh(a, b=None, T_A=None, mesh=None, matrix_specs=None, *, donate=False,
    backend="auto")``: with ``b`` None, ``a v = v diag(w)``; with ``b``, ``a v = b v diag(w)``
    and ``v^H b v = I``. :attr:`w` (N,) is ascending and replicated, :attr:`v` (N x N) has
    the eigenvectors as columns in a's layout. Differentiable (forward and reverse mode, any order) in ``a`` (and
    ``b``); for degenerate eigenvalues the terms between equal eigenvalues are dropped: exact
    for losses that depend on an eigenspace only through its projector and on its eigenvalues
    only through their sum.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian,
        only its lower triangle is read.
      b: None, or (N, N) Hermitian positive definite with a's shape, dtype and layout (only its
        lower triangle is read).
      {{module_layout}}
      {{run}}

    Attributes:
      status: int32, replicated: 0 on success, else the order of b's leading minor that is
        not positive definite, or -1 for a non-finite result.
    """

    w: jax.Array
    v: jax.Array
    pencil: Optional[jax.Array]
    kept: ClassVar[tuple] = ("operator", "pencil")

    @checked
    def __init__(
        self,
        a: SquareMatrix,
        b: Optional[SquareMatrix] = None,
        T_A: Tile = None,
        mesh: MeshLike = None,
        matrix_specs: Specs = None,
        *,
        donate: bool = False,
        backend: str = "auto",
        check: Optional[bool] = None,
    ):
        matrices = [("a", a)] if b is None else [("a", a), ("b", b)]
        options = Options(T_A, mesh, matrix_specs, donate, backend, check)
        self.plan, (self.w, self.v, self.status), kept = build(
            eigen, "eigh" if b is None else "sygvd", matrices, options
        )
        self.operator, self.pencil = kept[0], (kept[1] if b is not None else None)


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
      {{module_layout}}
      full_matrices: make ``u`` (M, M) instead of (M, N) (default False).
      {{run}}

    Attributes:
      status: int32, replicated: 0 on success, or -1 for a non-finite result.
    """

    u: jax.Array
    s: jax.Array
    vh: jax.Array

    @checked
    def __init__(
        self,
        a: Matrix,
        T_A: Tile = None,
        mesh: MeshLike = None,
        matrix_specs: Specs = None,
        *,
        full_matrices: bool = False,
        donate: bool = False,
        backend: str = "auto",
        check: Optional[bool] = None,
    ):
        check_flag(full_matrices, "full_matrices")
        options = Options(T_A, mesh, matrix_specs, donate, backend, check)
        self.plan, (self.u, self.s, self.vh, self.status), (self.operator,) = build(
            singular,
            "svd",
            [("a", a)],
            options,
            full_matrices=bool(full_matrices),
            compute_uv=True,
        )

    @property
    def wide(self) -> bool:
        """Whether a has fewer rows than columns (decomposed through its conjugate transpose)."""
        return self.plan.wide


@shared_arguments
class Polar(Factorisation):
    """Polar decomposition ``a = u_p h`` of a sharded M x N matrix, M >= N.

    ``Polar(a, T_A=None, mesh=None, matrix_specs=None, *, donate=False, backend="auto")``:
    :attr:`u_p` (M x N, orthonormal columns) and :attr:`h` (N x N, Hermitian positive
    semi-definite), both in a's layout. Differentiable (forward and reverse mode, any order) in ``a`` for ``a`` of
    full rank.

    Args:
      a: (M, N) matrix, M >= N, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      {{module_layout}}
      {{run}}

    Attributes:
      status: int32, replicated: 0 on success, or -1 for a non-finite result.
    """

    u_p: jax.Array
    h: jax.Array

    @checked
    def __init__(
        self,
        a: TallMatrix,
        T_A: Tile = None,
        mesh: MeshLike = None,
        matrix_specs: Specs = None,
        *,
        donate: bool = False,
        backend: str = "auto",
        check: Optional[bool] = None,
    ):
        options = Options(T_A, mesh, matrix_specs, donate, backend, check)
        self.plan, (self.u_p, self.h, self.status), (self.operator,) = build(
            polar_factors, "polar", [("a", a)], options
        )


def eigen(plan, a, b=None, *, keep: bool, check: bool = True):
    """(w, v, status) of ``a v = v diag(w)``, or of ``a v = b v diag(w)`` (trace-only)."""
    kernels = plan.backend.decompositions(plan)

    def products():
        pencil = None if b is None else _check.hermitian(plan, b)
        return _check.factorisation_probes(_check.hermitian(plan, a), pencil)

    matrices, probes = _check.probed(plan, (a,) if b is None else (a, b), products, check=check)
    if b is None:
        (w, v, status), tests = rules.syevd(kernels, *matrices), _check.eigenvectors
    else:
        (w, v, status), tests = rules.sygvd(kernels, *matrices), _check.generalised
    v = plan.leave(v, "v")
    status = _check.verified(plan, status, probes, lambda p: tests(plan, p, w, v))
    # the rule masks its derivatives by the decomposition's own status: only a check adds to it
    w, v = _status.masked(status, w, v, derivatives=probes is not None)
    return w, v, status


def singular(plan, a, *, keep: bool, full_matrices: bool, compute_uv: bool, check: bool = True):
    """(u, s, vh, status) of ``a = u diag(s) vh``; a wide ``a`` through a^H (trace-only)."""
    kplan = plan.adjoint() if plan.wide else plan
    kernels = kplan.backend.decompositions(kplan)
    a, probes = _check.before(plan, a, "factors", check=check and compute_uv)
    x = adjoint(a) if plan.wide else a
    if compute_uv:
        u, s, vh, status = rules.gesvd(kernels, full_matrices, x)
    else:
        (s, status), u, vh = rules.singular_values(kernels, x), None, None
    if plan.wide and compute_uv:  # a^H = u s vh, so a = vh^H s u^H
        u, vh = adjoint(vh), adjoint(u)
    if compute_uv:
        u, vh = plan.leave(u, "u"), plan.leave(vh, "vh")
        status = _check.verified(plan, status, probes, lambda p: _check.singular(plan, p, u, s, vh))
    u, s, vh = _status.masked(status, u, s, vh, derivatives=probes is not None)
    return u, s, vh, status


def polar_factors(plan, a, *, keep: bool, check: bool = True):
    """(u_p, h, status) of ``a = u_p h`` (trace-only)."""
    a, probes = _check.before(plan, a, "factors", check=check)
    u_p, h, status = rules.polar_decomposition(plan.backend.decompositions(plan), a)
    u_p, h = plan.leave(u_p, "u_p"), plan.leave(h, "h")
    rebuilt = lambda r: _check.product(plan, u_p, _check.product(plan, h, r))  # noqa: E731
    status = _check.verified(
        plan, status, probes, lambda p: _check.factorisation(p, rebuilt) + _check.orthonormal(plan, u_p)
    )
    u_p, h = _status.masked(status, u_p, h, derivatives=probes is not None)
    return u_p, h, status
