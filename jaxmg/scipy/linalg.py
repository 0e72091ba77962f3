"""``jax.scipy.linalg`` on sharded matrices: JAX's names and signatures over jaxmg.

Change ``import jax.scipy.linalg as sla`` to ``import jaxmg.scipy.linalg as sla``. The
arguments that tune SciPy's LAPACK calls (``overwrite_a``, ``overwrite_b``,
``check_finite``, ``lapack_driver``, ``turbo``, ``lwork``, ``debug``) are accepted and
ignored, as JAX ignores them. Leading batch dimensions are mapped with ``jax.vmap`` as in
:mod:`jaxmg.numpy.linalg`.

Factorisations are jaxmg modules. ``cho_factor(a)`` returns the tuple ``(c, lower)`` whose
``c`` is a :class:`jaxmg.Cholesky` (the distributed factor, not JAX's array with the
factor in one triangle), and ``lu_factor(a)`` returns ``(lu, piv)`` whose ``lu`` is a
:class:`jaxmg.LU` (``piv`` its pivots). Unpacking works as with JAX, and
:func:`cho_solve`/:func:`lu_solve` take these tuples and solve with the saved factor, without
refactoring. They also take JAX's arrays: ``cho_solve`` then solves with the array factor
itself (two triangular solves), ``lu_solve`` is JAX's.
"""

from __future__ import annotations

import functools

from .. import functional as _f
from .._dense import adjoint as _H, in_layout_of as _in_layout_of
from ..modules import LU as _LU, Cholesky as _Cholesky
from ..numpy import linalg as _np
from ..numpy._util import herm_input as _herm_input, inexact as _inexact, map_batch as _map_batch, square as _square
from . import _cho


def _one_square_matrix(a, name: str, module: str):
    """``a`` as an inexact array, checked to be one square matrix (N, N): ``module`` factors one."""
    (a,) = _inexact(a)
    _square(a, name)
    if a.ndim != 2:
        raise ValueError(f"{name}: a must be one matrix (N, N) (a {module} factors one matrix), "
                         f"got shape {a.shape}; use jax.vmap for a batch.")
    return a


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)``: ``c`` the :class:`jaxmg.Cholesky` factorisation of Hermitian
    positive-definite ``a`` (N, N), from its lower triangle (``lower=True``) or its upper one
    (default, as SciPy). Pass the tuple to :func:`cho_solve`."""
    del overwrite_a, check_finite
    a = _one_square_matrix(a, "cho_factor", "jaxmg.Cholesky")
    return _Cholesky(_herm_input(a, False, lower=bool(lower))), bool(lower)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``a @ x = b`` with ``(c, lower)`` from :func:`cho_factor`; ``x`` has b's shape and
    layout. ``c`` may also be JAX's array (..., N, N), the factor in its ``lower`` triangle: x
    then comes from two triangular solves with it (no new factorisation), batched as b."""
    del overwrite_b, check_finite
    c, lower = c_and_lower
    if isinstance(c, _Cholesky):
        return c.solve(b)
    c, b = _inexact(c, b)
    _square(c, "cho_solve")
    solve = functools.partial(_cho.solve_with_factor, lower=bool(lower))
    return _map_batch(solve, (c, b), (2, 1 if b.ndim == 1 else 2), solution=True)


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of ``a`` (..., N, N) from one triangle (``lower``; default upper, as
    SciPy): ``L`` with ``a = L L^H``, or ``U`` with ``a = U^H U``. In a's layout."""
    del overwrite_a, check_finite
    (a,) = _inexact(a)
    _square(a, "cholesky")
    factor = _map_batch(_f.cholesky, (_herm_input(a, False, lower=bool(lower)),), (2,))
    return factor if lower else _in_layout_of(_H(factor), factor)


def lu_factor(a, overwrite_a=False, check_finite=True):
    """``(lu, piv)``: ``lu`` the :class:`jaxmg.LU` factorisation (partial pivoting) of square ``a``
    (N, N), ``piv`` its pivots (replicated). Pass the tuple to :func:`lu_solve`."""
    del overwrite_a, check_finite
    a = _one_square_matrix(a, "lu_factor", "jaxmg.LU")
    factor = _LU(a)
    return factor, factor.pivots


_TRANS = {0: "N", 1: "T", 2: "C", "N": "N", "T": "T", "C": "C"}


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``op(a) @ x = b`` with ``(lu, piv)`` from :func:`lu_factor`; op by ``trans``: 0 (a),
    1 (a^T) or 2 (a^H). ``lu`` may also be JAX's packed array: the solve is then JAX's."""
    del overwrite_b, check_finite
    if trans not in _TRANS:
        raise ValueError(f"lu_solve: trans must be 0, 1 or 2 ('N', 'T', 'C'), got {trans!r}.")
    lu, piv = lu_and_piv
    if isinstance(lu, _LU):
        return lu.solve(b, trans=_TRANS[trans])
    import jax.scipy.linalg

    return jax.scipy.linalg.lu_solve((lu, piv), b, trans=trans)


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False, check_finite=True,
          assume_a="gen"):
    """Solve ``a @ x = b``: LU for ``assume_a`` "gen", "sym" or "her"; Cholesky for "pos" (from
    a's ``lower`` triangle, default upper, as SciPy). Shapes as :func:`jaxmg.numpy.linalg.solve`."""
    del overwrite_a, overwrite_b, debug, check_finite
    if assume_a not in ("gen", "sym", "her", "pos"):
        raise ValueError(f"solve: assume_a must be 'gen', 'sym', 'her' or 'pos', got {assume_a!r}.")
    if assume_a != "pos":
        return _np.solve(a, b)
    a, b = _inexact(a, b)
    _square(a, "solve")
    a = _herm_input(a, False, lower=bool(lower))
    return _map_batch(_f.potrs, (a, b), (2, 1 if b.ndim == 1 else 2), solution=True)


def inv(a, overwrite_a=False, check_finite=True):
    """The inverse of square ``a`` (..., N, N) in a's layout: :func:`jaxmg.numpy.linalg.inv`."""
    del overwrite_a, check_finite
    return _np.inv(a)


def det(a, overwrite_a=False, check_finite=True):
    """The determinant of square ``a`` (..., N, N): :func:`jaxmg.numpy.linalg.det`."""
    del overwrite_a, check_finite
    return _np.det(a)


def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, turbo=True,
         eigvals=None, type=1, check_finite=True):
    """Eigenvalues ``w`` (ascending), and eigenvectors ``v`` in a's layout unless
    ``eigvals_only``, of Hermitian ``a`` (..., N, N): ``a v = v diag(w)`` by syevd, or with
    ``b`` (Hermitian positive definite) ``a v = b v diag(w)``, ``v^H b v = I`` by sygvd.

    As JAX does, ``(a + a^H)/2`` (and ``(b + b^H)/2``) is decomposed, so that the result and
    its derivative are those of a Hermitian matrix; ``lower`` is accepted for the signature.
    ``type`` must be 1 and ``eigvals`` None."""
    del lower, overwrite_a, overwrite_b, turbo, check_finite
    if eigvals is not None:
        raise NotImplementedError("eigh: only eigvals=None is implemented (as in JAX); slice the result.")
    if type != 1:
        raise NotImplementedError(f"eigh: only type=1 (a v = w b v) is implemented, got type={type!r}.")
    matrices = _inexact(a) if b is None else _inexact(a, b)
    for x, name in zip(matrices, ("eigh", "eigh (b)")):
        _square(x, name)
    matrices = tuple(_herm_input(x, True, lower=True) for x in matrices)
    fn = functools.partial(_f.syevd if b is None else _f.sygvd, return_eigenvectors=not eigvals_only)
    return _map_batch(fn, matrices, (2,) * len(matrices))


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    """``(u, s, vh)`` (or ``s`` with ``compute_uv=False``) of ``a`` (..., M, N), tall, square or
    wide: :func:`jaxmg.numpy.linalg.svd`, as a plain tuple (as JAX)."""
    del overwrite_a, check_finite
    if lapack_driver not in ("gesdd", "gesvd"):
        raise ValueError(f"svd: lapack_driver must be 'gesdd' or 'gesvd', got {lapack_driver!r}.")
    out = _np.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(out) if compute_uv else out


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """The QR decomposition of ``a`` (..., M, N), tall, square or wide, in a's layout.

    ``mode="full"`` (default): ``(q, r)`` with q (M, M) and r (M, N); ``"economic"``: q (M, K),
    r (K, N), K = min(M, N); ``"r"``: ``(r,)`` (full r). ``pivoting`` is not implemented
    (cuSOLVERMp has no pivoted QR).
    """
    del overwrite_a, lwork, check_finite
    if pivoting:
        raise NotImplementedError("qr: pivoting=True is not implemented (no distributed pivoted QR).")
    modes = {"full": "complete", "economic": "reduced", "r": "r"}
    if mode not in modes:
        raise ValueError(f"qr: mode must be 'full', 'economic' or 'r' (no 'raw'), got {mode!r}.")
    if mode == "r":
        return (_np.qr(a, mode="complete").R,)
    return tuple(_np.qr(a, mode=modes[mode]))


def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None):
    """The polar decomposition of ``a`` (M, N): ``(u, p)`` with ``a = u p`` (``side="right"``,
    M >= N: u with orthonormal columns, p (N, N) Hermitian positive semi-definite) or
    ``a = p u`` (``side="left"``, M <= N: p (M, M)). Both in a's layout, by
    :func:`jaxmg.polar` (the left one from the right one of ``a^H``). ``method`` ("qdwh" or
    "svd") is accepted; jaxmg's own iteration is used, to its own tolerance (``eps`` and
    ``max_iterations`` must be None)."""
    if side not in ("right", "left"):
        raise ValueError(f"polar: side must be 'right' or 'left', got {side!r}.")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"polar: method must be 'qdwh' or 'svd', got {method!r}.")
    if eps is not None or max_iterations is not None:
        raise NotImplementedError("polar: eps and max_iterations are not supported; jaxmg's polar "
                                  "iterates to its own tolerance.")
    (a,) = _inexact(a)
    if side == "right":
        return _map_batch(_f.polar, (a,), (2,))
    u, p = _map_batch(_f.polar, (_H(a),), (2,))  # a^H = u p, so a = p u^H
    return _in_layout_of(_H(u), a), _in_layout_of(p, a)


def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True, lapack_driver=None):
    """``(x, residues, rank, s)`` as ``scipy.linalg.lstsq`` (JAX has no scipy lstsq): the
    least-squares solution of least norm for ``a`` (M, N) of any shape and rank, from jaxmg's
    SVD; ``cond`` is the relative cutoff for small singular values; ``residues`` is empty
    where M <= N or rank < N (as SciPy), which needs a concrete rank (outside ``jax.jit``)."""
    del overwrite_a, overwrite_b, check_finite, lapack_driver
    return _np.lstsq(a, b, rcond=cond, numpy_resid=True)


__all__ = ["cho_factor", "cho_solve", "cholesky", "det", "eigh", "inv", "lstsq", "lu_factor", "lu_solve",
           "polar", "qr", "solve", "svd"]
