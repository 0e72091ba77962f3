"""The functional API: each solver is a factorisation of ``jaxmg.modules``, used once.

``potrs(a, b)`` computes what ``Cholesky(a).solve(b)`` does, ``lu_solve`` what ``LU(a).solve(b)``
does, and so on: the same trace-only bodies, the same derivatives, in one call through the public
boundary (``jaxmg._dispatch``). Shapes, layouts and keywords are those users of distributed JAX
solvers already write (see the README's table). Every function works on float32, float64,
complex64 and complex128, eagerly and inside ``jax.jit``.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from ._checks import check_flag
from ._docstrings import shared_arguments
from ._plan import Options
from ._typing import Matrix, MeshLike, Rhs, Specs, SquareMatrix, TallMatrix, TallRhs, Tile, checked
from .autodiff import decompositions
from .kernels import status as _status
from .modules import (
    _base,
    check as _check,
    cholesky as _cholesky,
    decompositions as _decompositions,
    lu as _lu,
    qr as _qr,
)


def _flags(**flags) -> dict:
    """``flags`` (a function's keyword flags, the body's static arguments), each checked to be a
    plain bool."""
    for name, value in flags.items():
        check_flag(value, name)
    return flags


def pick(values, keep):
    """The values whose flag is set: one value alone, several as a tuple."""
    chosen = tuple(v for v, k in zip(values, keep) if k)
    return chosen[0] if len(chosen) == 1 else chosen


@shared_arguments
@checked
def potrs(
    a: SquareMatrix,
    b: Rhs,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    return_logdet=False,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """Solve ``a @ x = b`` for Hermitian positive-definite ``a`` by Cholesky factorisation.

    Differentiable (forward and reverse, any order) in ``a`` and ``b``.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; only its
        lower triangle is read.
      b: the right-hand side, (N,) or (N, NRHS) with a's dtype, sharded ``P(r)``, ``P(r, None)``
        (r: a's row axes) or replicated.
      {{layout}}
      return_logdet: also return ``log det a`` (real, replicated).
      return_status: also return the status (int32, replicated): 0 on success, else the order of
        the leading minor that is not positive definite (on the native backend counted in
        cuSOLVERMp's permuted order: non-zero, but not LAPACK's number), or -1 for a non-finite
        result. Failed outputs are NaN.
      {{run}}

    Returns:
      ``x`` with b's shape and sharding; then ``logdet`` and ``status`` when asked, in that
      order.

    Example (8 devices; ``jax.grad`` works the same eagerly and under ``jax.jit``)::

        >>> import jax, jax.numpy as jnp, numpy as np, jaxmg
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = jax.make_mesh((4, 2), ("x", "y"))
        >>> a = jax.device_put(4 * jnp.eye(8), NamedSharding(mesh, P("x", "y")))
        >>> x, logdet = jaxmg.potrs(a, jnp.ones(8), return_logdet=True)
        >>> print(np.asarray(x)[:2], round(float(logdet), 4))
        [0.25 0.25] 11.0904
        >>> with jax.set_mesh(mesh):
        ...     g = jax.grad(lambda a: jnp.sum(jaxmg.potrs(a, jnp.ones(8))))(a)
        >>> print(np.asarray(g)[:2, :2], tuple(g.sharding.spec))
        [[-0.0625 -0.    ]
         [-0.125  -0.0625]] ('x', 'y')

    Only the lower triangle of ``a`` is read, so the derivative with respect to ``a`` is that of
    the function of its lower triangle (as ``jax.scipy.linalg.cho_solve(cho_factor(a,
    lower=True), b)`` gives): zero above the diagonal, and below it the sum of the full-matrix
    gradient's two mirrored entries.
    """
    flags = _flags(return_logdet=return_logdet, return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_potrs, "cholesky", [("a", a)], options, rhs=[("b", b)], **flags)[1][0]


def _potrs(plan, a, b, *, keep, return_logdet, return_status, check):
    """potrs's outputs, and the factor state when donating (so that XLA can give it a's donated
    buffer; the caller drops it)."""
    x, status, state, operator, factor_status = _solution(
        _cholesky, plan, a, b, keep=keep, check=check, lower_read=True
    )
    if return_logdet:  # NaN with its derivatives where the factor is flagged; also NaN where x is
        logdet = _cholesky.log_determinant(plan, operator, state, factor_status)
        logdet = _status.masked(status, logdet, derivatives=False)
    else:
        logdet = None
    return pick((x, logdet, status), (True, return_logdet, return_status)), None if keep else state


@shared_arguments
@checked
def cholesky(
    a: SquareMatrix,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """The lower-triangular Cholesky factor ``L`` with ``a = L @ L^H``.

    Differentiable (forward and reverse, any order).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian
        positive definite, only its lower triangle is read.
      {{layout}}
      return_status: also return the status (int32, replicated): 0 on success, else the order of
        the leading minor that is not positive definite (on the native backend counted in
        cuSOLVERMp's permuted order), or -1 for a non-finite result. Failed outputs are NaN.
      {{run}}

    Returns:
      ``L`` (N, N), zero above the diagonal, with a's sharding; then ``status`` when asked.
    """
    flags = _flags(return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_lower, "cholesky", [("a", a)], options, natural=True, **flags)[1]


def _lower(plan, a, *, keep, return_status, check):
    a, probes = _check.before(plan, a, "factors", lower_read=True, check=check)
    state, status, operator = _cholesky.factored(plan, a, keep=keep)
    lower = plan.leave(decompositions.cholesky_lower(plan.backend.cholesky(plan), operator, state))
    rebuilt = lambda r: _check.product(plan, lower, _check.product(plan, lower, r, "C"))  # noqa: E731
    status = _check.verified(plan, status, probes, lambda p: _check.factorisation(p, rebuilt))
    return pick((_status.masked(status, lower), status), (True, return_status))


def _solution(family, plan, a, b, *, keep, check, lower_read=False):
    """(x, status, state, operator, factor_status) of ``a @ x = b`` by the factorisation of
    ``family`` (:mod:`jaxmg.modules.cholesky`, which reads a's lower triangle, or
    :mod:`jaxmg.modules.lu`), x checked against ``b`` (trace-only). ``factor_status`` says
    whether the factor is right: the factorisation's status and, where the call is checked, the
    check's (which tests the factor through x); ``status`` is also -1 where x is not finite."""
    a, probes = _check.before(plan, a, "solution", lower_read=lower_read, check=check)
    state, status, operator = family.factored(plan, a, keep=keep)

    def solved(operator, b, state, status, probes):
        x = family.solved(plan, operator, state, status, b)
        return _checked_solution(plan, probes, b, *_status.solved(status, x))

    x, checked = _checked(solved, (operator, b), (state, status, probes))
    return x, checked, state, operator, (status if probes is None else checked)


def _checked(solved, differentiated: tuple, fixed: tuple):
    """``solved(*differentiated, *fixed)``: x and its status after the result check (the last of
    ``fixed`` being the check's probes, None where unchecked), with its derivatives along
    ``differentiated`` NaN where that status is not 0. The solve masks them by the factor's
    status itself (``jaxmg.kernels.status.derivatives_masked``); the check's status is known only
    from x, so a checked call is differentiated by :func:`_masked_by_outcome`. ``fixed`` carries
    no derivative."""
    if fixed[-1] is None:
        return solved(*differentiated, *fixed)
    return _masked_by_outcome(solved, len(differentiated), *differentiated, *fixed)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _masked_by_outcome(fn, count: int, *args):
    """``fn(*args)`` = (outputs, status), differentiable in its first ``count`` arguments; the
    rule linearizes ``fn`` once (one forward computation) and applies the linear map to the input
    tangents masked by the status (``jaxmg.kernels.status.masked_tangent``): reverse mode scales
    the inputs' cotangents, never the outputs', so the transposed solve works on the cotangent it
    was given (the GP loss's backward solve, A^-1 b, stays the forward one)."""
    return fn(*args)


@_masked_by_outcome.defjvp
def _masked_by_outcome_jvp(fn, count, primals, tangents):
    differentiated, fixed = primals[:count], primals[count:]
    outputs, linear, status = jax.linearize(lambda *d: fn(*d, *fixed), *differentiated, has_aux=True)
    dots = [
        t if x is None or not jnp.issubdtype(jnp.result_type(x), jnp.inexact) else _status.masked_tangent(status, t)
        for x, t in zip(differentiated, tangents[:count])
    ]
    return (outputs, status), (linear(*dots), jax.custom_derivatives.zero_from_primal(status))


def _checked_solution(plan, probes, b, x, status, tests=_check.solution, derivatives=False):
    """(x, status) of a solve after the result check ``tests`` (:mod:`jaxmg.modules.check`) of
    ``x`` against ``b`` with the matrix's ``probes``: x NaN where it fails, and its tangent too
    with ``derivatives`` where the call is checked (else the derivatives are masked by the
    factor's status in the solve, and by this status around it: :func:`_checked`)."""
    status = _check.verified(plan, status, probes, lambda p: tests(plan, p, x, b))
    return _status.masked(status, x, derivatives=derivatives and probes is not None), status


@shared_arguments
@checked
def lu_solve(
    a: SquareMatrix,
    b: Rhs,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """Solve ``a @ x = b`` for a general square ``a`` by LU factorisation with partial pivoting.

    Differentiable (forward and reverse, any order) in ``a`` and ``b``.

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      b: the right-hand side, (N,) or (N, NRHS) with a's dtype, sharded ``P(r)``, ``P(r, None)``
        (r: a's row axes) or replicated.
      {{layout}}
      return_status: also return the status (int32, replicated): 0 on success, else the 1-based
        index of the first zero pivot (``a`` is singular), or -1 for a non-finite result. Failed
        outputs are NaN.
      {{run}}

    Returns:
      ``x`` with b's shape and sharding; then ``status`` when asked.
    """
    flags = _flags(return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_lu_solve, "lu", [("a", a)], options, rhs=[("b", b)], **flags)[1][0]


def _lu_solve(plan, a, b, *, keep, return_status, check):
    """lu_solve's outputs, and the factor when donating (so that XLA can give it a's donated
    buffer; the caller drops it)."""
    x, status, state, _, _ = _solution(_lu, plan, a, b, keep=keep, check=check)
    return pick((x, status), (True, return_status)), None if keep else state


@shared_arguments
@checked
def least_squares(
    a: Matrix,
    b: TallRhs,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    rcond=None,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """The ``x`` minimising ``||a @ x - b||_2`` for ``a`` of full column rank, by QR; for a wide
    ``a`` (M < N) of full row rank, the ``x`` of least norm with ``a @ x = b``.

    A wide ``a`` is factored through its conjugate transpose, ``a^H = Q R``, and
    ``x = Q R^-H b``: backward stable at any condition number that passes the rank test (the
    error of x at most about cond(a) eps). A numerically rank-deficient ``a`` (a diagonal entry of R below
    ``rcond * max|R_ii|``) is flagged by the status and gives NaN, never a finite wrong ``x``;
    ``jaxmg.numpy.linalg.lstsq`` (by SVD) gives the minimum-norm solution for any rank.

    Differentiable (forward and reverse, any order) in ``a`` and ``b``.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      b: (M,) or (M, NRHS) with a's dtype, in any layout (``P(r)``, ``P(r, None)`` or replicated)
        on any grid shape: it is gathered whole on every process, so the ScaLAPACK-style
        restriction that every process-grid column owns a tile of ``b`` does not apply.
      {{layout}}
      rcond: the relative size below which a diagonal entry of R counts as zero, a Python float
        as in ``jnp.linalg.lstsq``: None (default) for ``max(M, N) * eps`` of a's dtype, a
        negative value for ``eps``; 0 flags exactly zero entries only.
      return_status: also return the status (int32, replicated): 0 on success, else the 1-based
        index of the first diagonal entry of R that is zero or below ``rcond * max|R_ii|``
        (``a`` is numerically rank deficient), -2 where a wide ``a``'s solution fails its backward
        check (``jaxmg.kernels.status.CHECK_FAILED``), or -1 for a non-finite result. Failed
        outputs are NaN.
      {{run}}

    Returns:
      ``x``, (N,) or (N, NRHS), laid out like ``b`` (its row axes must divide N); then
      ``status`` when asked.
    """
    flags = _flags(return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(
        _least_squares,
        "qr",
        [("a", a)],
        options,
        rhs=[("b", b)],
        rcond=_status.checked_rcond(rcond),
        **flags,
    )[1]


def _least_squares(plan, a, b, *, keep, rcond, return_status, check):
    a, probes = _check.before(plan, a, "normal", check=check)
    state, status, operator = _qr.factored(plan, a, keep=keep or plan.wide)
    status = _qr.rank_status(plan, state, status, rcond)
    x, status = _qr.solved(plan, operator, state, status, b)
    # the check's status masks x's tangent after the solve (not around it as a square solve's:
    # the linearized minimum-norm rule loses its range-safe transposition in float32)
    solved = _status.solved(status, x)
    x, status = _checked_solution(plan, probes, b, *solved, tests=_check.least_squares, derivatives=True)
    return pick((x, status), (True, return_status))


@shared_arguments
@checked
def qr(
    a: Matrix,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    mode="reduced",
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """The reduced QR decomposition ``a = q @ r``; for a wide ``a`` (M < N), ``q`` (M, M) and ``r``
    (M, N) upper trapezoidal (from the QR of a's first M columns and ``r[:, M:] = q^H a[:, M:]``).

    Differentiable (forward and reverse, any order) for ``a`` of full rank.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      {{layout}}
      mode: ``"reduced"`` (default): ``(q, r)``; ``"r"``: ``r`` alone, as
        ``jnp.linalg.qr(a, mode="r")``: the Householder factorisation and its upper triangle,
        with no Q formed (only its derivative forms Q, as JAX's does). A wide ``a``'s ``r`` is
        then LAPACK's factor of the whole ``a`` (as JAX's) on the local and batch routes; the
        distributed route forms the M x M Q of a's first M columns for it (cuSOLVERMp's geqrf
        is taken of M >= N only).
      return_status: also return the status (int32, replicated): 0 on success, rank-deficient
        ``a`` included (a zero diagonal entry of R is its exact factor, as LAPACK's and JAX's), or
        -1 for a non-finite result. Failed outputs are NaN.
      {{run}}

    Returns:
      ``(q, r)``: with K = min(M, N), ``q`` (M, K) with orthonormal columns and ``r`` (K, N)
      upper triangular (trapezoidal), both with a's sharding (``r`` alone for ``mode="r"``);
      then ``status`` when asked.
    """
    if mode not in ("reduced", "r"):
        raise ValueError(f"qr: mode must be 'reduced' or 'r', got {mode!r}.")
    flags = _flags(return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_qr_factors, "qr", [("a", a)], options, mode=mode, **flags)[1]


def _qr_factors(plan, a, *, keep, mode, return_status, check):
    if mode == "r" and not (plan.wide and plan.distributed):  # R alone: no Q formed
        return pick(_qr.triangle(plan, a, keep=keep, check=check), (True, return_status))
    a, probes = _check.before(plan, a, "factors", check=check)
    if plan.wide:  # a's first M columns, then q^H a
        q, r, status = _qr.wide_factors(plan, a)
    else:
        state, status, operator = _qr.factored(plan, a, keep=keep)
        q, r = _qr.factors(plan, operator, state, status)
    rebuilt = lambda v: _check.product(plan, q, _check.product(plan, r, v))  # noqa: E731
    status = _check.verified(
        plan, status, probes, lambda p: _check.factorisation(p, rebuilt) + _check.orthonormal(plan, q)
    )
    return pick((*_status.masked(status, q, r), status), (mode != "r", True, return_status))


@shared_arguments
@checked
def syevd(
    a: SquareMatrix,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    return_eigenvectors=True,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """Eigenvalues and eigenvectors of a Hermitian matrix: ``a @ v = v @ diag(w)``.

    Differentiable (forward and reverse, any order); for degenerate eigenvalues the terms
    between equal eigenvalues are dropped: exact for losses that depend on an eigenspace only
    through its projector and on its eigenvalues only through their sum (docs/derivatives.md).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian,
        only its lower triangle is read.
      {{layout}}
      return_eigenvectors: return ``(w, v)`` (default) or ``w`` alone.
      return_status: also return the status (int32, replicated): 0 on success, or -1 for a
        non-finite result. Failed outputs are NaN.
      {{run}}

    Returns:
      ``(w, v)``: ``w`` (N,) ascending and replicated, ``v`` (N, N) with the eigenvectors as
      columns in a's sharding; or ``w`` alone; then ``status`` when asked.
    """
    flags = _flags(return_eigenvectors=return_eigenvectors, return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_eigh, "eigh", [("a", a)], options, **flags)[1]


@shared_arguments
@checked
def sygvd(
    a: SquareMatrix,
    b: SquareMatrix,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    return_eigenvectors=True,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """The generalised Hermitian eigenproblem ``a @ v = b @ v @ diag(w)`` with ``v^H b v = I``.

    Differentiable (forward and reverse, any order) in ``a`` and ``b`` (degenerate
    eigenvalues as in :func:`syevd`).

    Args:
      a: (N, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``; Hermitian,
        only its lower triangle is read.
      b: (N, N) Hermitian positive definite, with a's shape, dtype and layout; only its lower
        triangle is read.
      T_A: {T_A}
      mesh: {mesh}
      matrix_specs: a's ``PartitionSpec`` (``P(r, c)``, ``P(r)`` or ``P(None, c)``), or a list
        with one spec per array argument (``[spec_a, spec_b]`` or one spec for both). Default:
        read from the arrays' shardings; with Auto mesh axes inside ``jax.jit``, the mesh axes in
        order.
      return_eigenvectors: return ``(w, v)`` (default) or ``w`` alone.
      return_status: also return the status (int32, replicated): 0 on success, else the order of
        b's leading minor that is not positive definite, or -1 for a non-finite result. Failed
        outputs are NaN.
      {{run}}

    Returns:
      ``(w, v)``: ``w`` (N,) ascending and replicated, ``v`` (N, N) in a's sharding; or ``w``
      alone; then ``status`` when asked.
    """
    flags = _flags(return_eigenvectors=return_eigenvectors, return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_eigh, "sygvd", [("a", a), ("b", b)], options, **flags)[1]


def _eigh(plan, a, b=None, *, keep, return_eigenvectors, return_status, check):
    w, v, status = _decompositions.eigen(plan, a, b, keep=keep, check=check)
    return pick((w, v, status), (True, return_eigenvectors, return_status))


@shared_arguments
@checked
def gesvd(
    a: Matrix,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    compute_u=True,
    compute_vh=True,
    full_matrices=False,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """The singular value decomposition ``a = u @ diag(s) @ vh``, in NumPy's order.

    Differentiable (forward and reverse, any order) for distinct non-zero singular values.
    A wide ``a`` (M < N) is decomposed through its conjugate transpose at the tall cost.

    Args:
      a: (M, N) matrix sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      {{layout}}
      compute_u: return ``u`` (default True).
      compute_vh: return ``vh`` (default True).
      full_matrices: ``u`` is (M, M) and ``vh`` (N, N) instead of (M, K) and (K, N), K = min(M, N)
        (default False).
      return_status: also return the status (int32, replicated): 0 on success, or -1 for a
        non-finite result. Failed outputs are NaN.
      {{run}}

    Returns:
      ``(u, s, vh)``, ``(u, s)``, ``(s, vh)`` or ``s`` as asked: ``s`` (K,) descending and
      replicated, ``u`` and ``vh`` with a's sharding; then ``status`` when asked.
    """
    flags = _flags(compute_u=compute_u, compute_vh=compute_vh, full_matrices=full_matrices, return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_gesvd, "svd", [("a", a)], options, **flags)[1]


def _gesvd(plan, a, *, keep, compute_u, compute_vh, full_matrices, return_status, check):
    u, s, vh, status = _decompositions.singular(
        plan, a, keep=keep, full_matrices=full_matrices, compute_uv=compute_u or compute_vh, check=check
    )
    return pick((u, s, vh, status), (compute_u, True, compute_vh, return_status))


@shared_arguments
@checked
def polar(
    a: TallMatrix,
    T_A: Tile = None,
    mesh: MeshLike = None,
    matrix_specs: Specs = None,
    *,
    compute_h=True,
    return_status=False,
    donate=False,
    backend="auto",
    check: Optional[bool] = None,
):
    """The polar decomposition ``a = u_p @ h``.

    Differentiable (forward and reverse, any order) for ``a`` of full rank.

    Args:
      a: (M, N) matrix, M >= N, sharded ``P(r, c)``, ``P(r)`` or ``P(None, c)`` over ``mesh``.
      {{layout}}
      compute_h: also return ``h`` (default True).
      return_status: also return the status (int32, replicated): 0 on success, or -1 for a
        non-finite result. Failed outputs are NaN.
      {{run}}

    Returns:
      ``(u_p, h)`` or ``u_p``: ``u_p`` (M, N) with orthonormal columns and ``h`` (N, N)
      Hermitian positive semi-definite, both with a's sharding; then ``status`` when asked.
    """
    flags = _flags(compute_h=compute_h, return_status=return_status)
    options = Options(T_A, mesh, matrix_specs, donate, backend, check)
    return _base.build(_polar, "polar", [("a", a)], options, **flags)[1]


def _polar(plan, a, *, keep, compute_h, return_status, check):
    u_p, h, status = _decompositions.polar_factors(plan, a, keep=keep, check=check)
    return pick((u_p, h, status), (True, compute_h, return_status))
