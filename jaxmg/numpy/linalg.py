"""``jax.numpy.linalg`` on sharded matrices: JAX's names, signatures and results over jaxmg.

Change ``import jax.numpy.linalg as la`` to ``import jaxmg.numpy.linalg as la`` and a model
runs its linear algebra on matrices sharded over a mesh: each function checks and promotes
its arguments as JAX does, then calls jaxmg's distributed operations (LU for solve, inv,
det and slogdet; syevd for eigh; the polar-based SVD for svd, lstsq, pinv, matrix_rank and
cond; QR for qr) and returns JAX's own result types (``EighResult``, ``SVDResult``,
``SlogdetResult``, ``QRResult``). Matrix outputs stay in the input's layout.

Leading batch dimensions (``(..., M, N)``) are accepted wherever JAX accepts them: the
function runs on each matrix of the batch in turn through ``jax.vmap`` of the 2-D
function, and each matrix is distributed over the whole mesh. Functions that only move or
multiply data (``matmul``, ``outer``, ``trace`` ...) are JAX's own, re-exported: XLA
shards them already. ``eig`` and ``eigvals`` (non-Hermitian eigenproblems) are JAX's own,
on one device: cuSOLVERMp has no distributed non-Hermitian eigensolver.

Example (8 devices)::

    >>> import jax, jax.numpy as jnp, numpy as np
    >>> import jaxmg.numpy.linalg as la
    >>> from jax.sharding import NamedSharding, PartitionSpec as P
    >>> mesh = jax.make_mesh((4, 2), ("x", "y"))
    >>> a = jax.device_put(4 * jnp.eye(8), NamedSharding(mesh, P("x", "y")))
    >>> sign, logdet = la.slogdet(a)
    >>> print(float(sign), round(float(logdet), 4), tuple(la.inv(a).sharding.spec))
    1.0 11.0904 ('x', 'y')
    >>> u, s, vh = la.svd(jnp.ones((4, 8)))  # wide: U (4, 4), Vh (8, 8) as full_matrices=True
    >>> print(u.shape, round(float(s[0]), 4), vh.shape)
    (4, 4) 5.6569 (8, 8)
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Literal, Union, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as _P

from .. import _checks, functional as _f
from .._context import is_tracer as _is_tracer
from .._dense import (
    adjoint as _H,
    columns as _columns,
    householder_qr as _householder_qr,
    kept_reciprocals as _kept_reciprocals,
    matmul as _matmul,
    spec_for as _spec_for,
    spec_of as _spec_of,
    triu as _triu,
)
from .._dispatch import drop_in as _drop_in
from ..modules import LU as _LU
from . import _det, _jax_rules, _util
from ._results import EighResult, QRResult, SlogdetResult, SVDResult
from ._util import (
    distributed_mesh as _distributed_mesh,
    herm_input as _herm_input,
    inexact as _inexact,
    map_batch as _map_batch,
    map_solve as _map_solve,
    square as _square,
    take_columns as _take_columns,
)

# Products, norms of vectors and data movement: JAX's own (XLA shards them).
cross = jnp.linalg.cross
diagonal = jnp.linalg.diagonal
matmul = jnp.linalg.matmul
matrix_transpose = jnp.linalg.matrix_transpose
multi_dot = jnp.linalg.multi_dot
outer = jnp.linalg.outer
tensordot = jnp.linalg.tensordot
trace = jnp.linalg.trace
vecdot = jnp.linalg.vecdot
vector_norm = jnp.linalg.vector_norm


# --- LU: solve, inv, det, slogdet -------------------------------------------------------------


@_drop_in
def solve(a, b):
    """Solve ``a @ x = b`` for square ``a`` by distributed LU (:func:`jaxmg.lu_solve`).

    ``a`` is (..., N, N); ``b`` is (N,), one vector for every matrix (x is (..., N)), or
    (..., N, K), batch dimensions broadcast, as in ``jnp.linalg.solve`` (JAX 0.5 and later: a
    batch of vectors (..., N) is written ``solve(a, b[..., None])[..., 0]``). ``x`` has b's
    shape (after broadcasting) and layout.
    """
    a, b = _inexact(a, b)
    _square(a, "solve")
    _solve_shapes(a.shape, b.shape)
    return _map_solve(_f.lu_solve, (a, b), fold_columns=True)


def _solve_shapes(a_shape: tuple, b_shape: tuple) -> None:
    """The right-hand sides ``jnp.linalg.solve`` accepts: (N,), or (..., N, K) whose batch
    dimensions broadcast with a's."""
    n = a_shape[-1]
    if len(b_shape) == 0:
        raise ValueError(f"solve: b must be (N,) or (..., N, K), got a scalar for a of shape {a_shape}.")
    if len(b_shape) > 1 and len(a_shape) == len(b_shape) + 1 and b_shape[-1] == n != b_shape[-2]:
        raise ValueError(
            f"solve: invalid shapes {a_shape}, {b_shape}: b of shape (..., N) is not a batch of "
            f"vectors (as in jnp.linalg.solve since JAX 0.5.0, b is (N,) or (..., N, K)); for one "
            f"right-hand side per matrix write solve(a, b[..., None])[..., 0]."
        )
    rows = b_shape[0] if len(b_shape) == 1 else b_shape[-2]
    if rows != n:
        expected = f"({n},)" if len(b_shape) == 1 else f"(..., {n}, K)"
        raise ValueError(f"solve: b must be {expected} to match a of shape {a_shape}, got {b_shape}.")
    if len(b_shape) > 1:
        try:
            jnp.broadcast_shapes(a_shape[:-2], b_shape[:-2])
        except ValueError:
            raise ValueError(
                f"solve: the batch dimensions of a {a_shape[:-2]} and b {b_shape[:-2]} do not broadcast."
            ) from None


@_drop_in
def inv(a):
    """The inverse of square ``a`` (..., N, N), in a's layout, from its distributed LU factor
    (:meth:`jaxmg.LU.inverse`: both triangular inverses and their product)."""
    (a,) = _inexact(a)
    _square(a, "inv")
    return _map_batch(lambda a: _LU(a).inverse(), (a,), (2,))


@_drop_in(static=("method",))
def slogdet(a, *, method=None):
    """``SlogdetResult(sign, logabsdet)`` of square ``a`` (..., N, N).

    ``method`` as JAX's: None or ``"lu"`` (default) from jaxmg's LU factor, whose derivative is
    ``Re tr(a^-1 da)`` with a^-1 from the saved factor; ``"qr"`` is JAX's own
    ``jnp.linalg.slogdet(a, method="qr")`` (Householder QR on one device).
    """
    if method not in (None, "lu", "qr"):
        raise ValueError(f"slogdet: method must be None, 'lu' or 'qr', got {method!r}.")
    if method == "qr":
        return jnp.linalg.slogdet(a, method="qr")
    (a,) = _inexact(a)
    _square(a, "slogdet")
    if _jaxs_closed_form(a, (1, 2)):
        return jnp.linalg.slogdet(a)
    return SlogdetResult(*_map_batch(lambda a: _LU(a).slogdet(), (a,), (2,)))


@_drop_in
def det(a):
    """The determinant of square ``a`` (..., N, N), ``sign * exp(logabsdet)`` of its LU factor: 0
    for a singular matrix, 1 for an empty one. The derivative is JAX's, ``tr(adj(a) da)``, defined
    at singular matrices too (``jaxmg.numpy._det``). Eagerly and in ``jax.jit`` one computation."""
    (a,) = _inexact(a)
    _square(a, "det")
    if _jaxs_closed_form(a, (2, 3)):
        return jnp.linalg.det(a)
    return _det_compiled(a)


def _jaxs_closed_form(a, orders: tuple) -> bool:
    """Whether ``a`` is of a dtype that jaxmg does not factor (float16, bfloat16) and of an order
    for which JAX writes its determinant out (``orders``: det 2 and 3, slogdet 1 and 2), where
    ``jnp.linalg`` computes it in that dtype rather than refuse it as its LU does: then JAX's own
    function gives it (a matrix of at most 3 x 3, nothing to distribute)."""
    return np.dtype(a.dtype) not in _checks.SUPPORTED_DTYPES and a.shape[-1] in orders


@_util.compiled_once
def _det_compiled(a):
    """The determinants of a stack as one compiled call (eagerly too: the same numbers as in jit)."""
    return _map_batch(_det.det, (a,), (2,))


# --- Cholesky ------------------------------------------------------------------------------------


@_drop_in(static=("upper", "symmetrize_input"))
def cholesky(a, *, upper=False, symmetrize_input=True):
    """The Cholesky factor of Hermitian positive-definite ``a`` (..., N, N), in a's layout.

    ``L`` (lower, ``a = L L^H``) or, with ``upper=True``, ``U = L^H`` (``a = U^H U``).
    With ``symmetrize_input`` (default) ``(a + a^H)/2`` is factored; otherwise a's lower
    triangle is read. Distributed Cholesky (:func:`jaxmg.cholesky`).
    """
    (a,) = _inexact(a)
    _square(a, "cholesky")
    a = _herm_input(a, symmetrize_input, lower=True)
    factor = _map_batch(_f.cholesky, (a,), (2,))
    return _util.in_layout_of(_H(factor), factor) if upper else factor


# --- Hermitian eigenproblems ---------------------------------------------------------------------


def _uplo(UPLO, name):
    if UPLO is None or UPLO == "L":
        return True
    if UPLO == "U":
        return False
    raise ValueError(f"{name}: UPLO must be 'L' or 'U', got {UPLO!r}.")


@_drop_in(static=("UPLO", "symmetrize_input"))
def eigh(a, UPLO=None, symmetrize_input=True):
    """``EighResult(eigenvalues, eigenvectors)`` of Hermitian ``a`` (..., N, N) by distributed syevd.

    Eigenvalues ascending and replicated, eigenvectors as columns in a's layout. With
    ``symmetrize_input`` (default) ``(a + a^H)/2`` is decomposed; otherwise the triangle
    ``UPLO`` ("L", the default, or "U") is read, and the derivative is JAX's, that of the full
    matrix (:mod:`jaxmg.numpy._jax_rules`).
    """
    return EighResult(*_eigh(a, UPLO, symmetrize_input, "eigh", vectors=True))


@_drop_in(static=("UPLO", "symmetrize_input"))
def eigvalsh(a, UPLO="L", *, symmetrize_input=True):
    """The eigenvalues (ascending, replicated) of Hermitian ``a`` (..., N, N), as in :func:`eigh`."""
    return _eigh(a, UPLO, symmetrize_input, "eigvalsh", vectors=False)


def _eigh(a, UPLO, symmetrize_input, name: str, *, vectors: bool):
    """eigh's or eigvalsh's outputs: syevd of ``(a + a^H)/2``, or of the triangle ``UPLO`` with
    ``jnp.linalg.eigh``'s derivative (that of the full matrix: :mod:`._jax_rules`)."""
    (a,) = _inexact(a)
    _square(a, name)
    lower = _uplo(UPLO, name)
    if symmetrize_input:
        fn = functools.partial(_f.syevd, return_eigenvectors=vectors)
        return _map_batch(fn, (_herm_input(a, True, lower=lower),), (2,))
    return _map_batch(functools.partial(_jax_rules.eigh_of_triangle, lower=lower, vectors=vectors), (a,), (2,))


# --- SVD -----------------------------------------------------------------------------------------


def _hermitian_svd(a, compute_uv):
    """The SVD of Hermitian ``a`` from its eigendecomposition: s = |w| descending, u = v
    reordered and vh = (u sign(w))^H. Equal |w| (w and -w) are ordered as JAX orders them:
    ascending |w| sorted stably, then reversed (the later eigenvector first)."""
    if not compute_uv:
        return -jnp.sort(-jnp.abs(_f.syevd(a, return_eigenvectors=False)))
    w, v = _f.syevd(a)
    order = jnp.argsort(jnp.abs(w), stable=True)[::-1]
    w = w[order]
    u = _take_columns(v, order)
    return u, jnp.abs(w), _H(u * jnp.sign(w).astype(u.dtype)[None, :])


def _svd(a, *, full_matrices, compute_uv, hermitian):
    if hermitian:
        return _hermitian_svd(a, compute_uv)
    if not compute_uv:
        return _f.gesvd(a, compute_u=False, compute_vh=False)
    return _f.gesvd(a, full_matrices=full_matrices)


@overload
def svd(
    a, full_matrices: bool = True, compute_uv: Literal[True] = True, hermitian: bool = False, subset_by_index=None
) -> SVDResult: ...
@overload
def svd(
    a, full_matrices: bool, compute_uv: Literal[False], hermitian: bool = False, subset_by_index=None
) -> jax.Array: ...
@overload
def svd(
    a, full_matrices: bool = True, *, compute_uv: Literal[False], hermitian: bool = False, subset_by_index=None
) -> jax.Array: ...
@overload
def svd(
    a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False, subset_by_index=None
) -> Union[SVDResult, jax.Array]: ...
@_drop_in(static=("full_matrices", "compute_uv", "hermitian", "subset_by_index"))
def svd(a, full_matrices=True, compute_uv=True, hermitian=False, subset_by_index=None):
    """The singular value decomposition of ``a`` (..., M, N), tall, square or wide.

    ``SVDResult(U, S, Vh)`` (or ``S`` alone with ``compute_uv=False``): S descending and
    replicated, U and Vh in a's layout, (M, M) and (N, N) with ``full_matrices`` (default,
    as JAX), else (M, K) and (K, N), K = min(M, N). Computed by jaxmg's polar-based
    :func:`jaxmg.gesvd`; with ``hermitian=True`` from the eigendecomposition of
    ``(a + a^H)/2`` (:func:`jaxmg.syevd`). ``subset_by_index=(start, end)`` keeps singular
    values ``start:end`` (and their vectors) of the full decomposition.
    """
    (a,) = _inexact(a)
    _util.matrices(a, "svd")
    if hermitian:
        _square(a, "svd(hermitian=True)")
        a = _herm_input(a, True, lower=True)
        full_matrices = False
    fn = functools.partial(
        _svd, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv), hermitian=bool(hermitian)
    )
    subset = _svd_subset(subset_by_index, a.shape, full_matrices and not hermitian)
    out = _map_batch(fn, (a,), (2,))
    if subset is not None:
        start, end = subset
        if compute_uv:
            u, s, vh = out
            out = (_columns(u, start, end), s[..., start:end], jax.lax.slice_in_dim(vh, start, end, axis=vh.ndim - 2))
        else:
            out = out[..., start:end]
    return SVDResult(*out) if compute_uv else out


def _svd_subset(subset_by_index, shape: tuple, full_matrices: bool):
    """``(start, end)``, or None for all min(M, N) singular values (as JAX, where
    ``(0, min(M, N))`` keeps full matrices); with ``full_matrices`` any other range is JAX's
    ``ValueError``."""
    if subset_by_index is None:
        return None
    k = min(shape[-2:])
    pair = tuple(subset_by_index) if isinstance(subset_by_index, (tuple, list)) else ()
    if len(pair) != 2 or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in pair):
        raise TypeError(f"svd: subset_by_index must be None or a pair of ints (start, end), got {subset_by_index!r}.")
    start, end = (int(i) for i in pair)
    if not 0 <= start <= end <= k:
        raise ValueError(
            f"svd: subset_by_index=(start, end) must have 0 <= start <= end <= min(M, N) = {k} for a of "
            f"shape {shape} (singular values start:end, descending), got {subset_by_index!r}."
        )
    if (start, end) == (0, k):
        return None
    if full_matrices:
        raise ValueError(
            f"svd: full_matrices and subset_by_index cannot both be set (as in jnp.linalg.svd), got "
            f"subset_by_index={subset_by_index!r} for a of shape {shape}; pass full_matrices=False."
        )
    return start, end


@_drop_in
def svdvals(x, /):
    """The singular values of ``x`` (..., M, N), descending: ``svd(x, compute_uv=False)``."""
    return svd(x, compute_uv=False)


# --- QR --------------------------------------------------------------------------------------------


def _complete_qr(a):
    """q (M x M) and r (M x N) of a tall ``a``. Where jaxmg's QR takes the distributed route: the
    QR of ``[a, g]`` with a fixed random M x (M - N) block g (nonsingular with probability one),
    whose first N columns of Q are a's, and r = triu(q^H a). Elsewhere (one device's solver, the
    local and batch routes): the device's Householder QR, whose last M - N columns of Q are
    LAPACK's completion (H_1 ... H_N applied to the last columns of I), as JAX's."""
    m, n = a.shape
    if n == 0:  # no columns to keep: Q is the identity, as LAPACK's (and JAX's) Householder Q
        return _util.in_layout_of(jnp.eye(m, dtype=a.dtype), a), jnp.zeros((m, 0), a.dtype)
    if _distributed_mesh(a, "qr") is None:
        q, r = _householder_complete(_util.in_layout(a, _P(), a))
        return _util.in_layout_of(q, a), _util.in_layout_of(r, a)
    g = np.random.default_rng(0).standard_normal((m, m - n))
    if jnp.issubdtype(a.dtype, jnp.complexfloating):
        g = g + 1j * np.random.default_rng(1).standard_normal((m, m - n))
    rows = _P(_spec_of(a)[0], None)  # both blocks with a's rows split and their columns whole
    blocks = [_util.in_layout(a, rows, a), _util.in_layout(jnp.asarray(g, a.dtype), rows, a)]
    q, _ = _f.qr(jnp.concatenate(blocks, axis=1))
    return q, _triu(_matmul(_H(q), a, _spec_of(a)))


@jax.custom_jvp
def _householder_complete(a):
    """One device's complete Householder QR of a tall ``a`` (jaxmg's own, which keeps a stack's
    layout on Explicit mesh axes: JAX's numbers), differentiated as JAX differentiates its own."""
    return _householder_qr(a, complete=True)


@_householder_complete.defjvp
def _householder_complete_jvp(primals, tangents):
    """JAX's derivative of the complete QR (its completion columns' too), with JAX's factors, which
    are these (one factorisation)."""
    (a,), (da,) = primals, tangents
    primal, tangent = jax.jvp(lambda x: jnp.linalg.qr(x, mode="complete"), (a,), (da,))
    return tuple(primal), tuple(tangent)


def _qr(a, *, mode):
    m, n = a.shape
    if mode == "r":  # R alone: no Q formed
        return _f.qr(a, mode="r")
    if mode == "complete" and m > n == 0:
        q, r = _util.in_layout_of(jnp.eye(m, dtype=a.dtype), a), a  # no column to reflect: Q = I
    elif mode == "complete" and m > n:
        q, r = _complete_qr(a)
    else:
        q, r = _f.qr(a)
    return q, r


@overload
def qr(a, mode: Literal["reduced", "complete", "raw", "full"] = "reduced") -> QRResult: ...
@overload
def qr(a, mode: Literal["r"]) -> jax.Array: ...
@overload
def qr(a, mode: str) -> Union[QRResult, jax.Array]: ...
@_drop_in(static=("mode",))
def qr(a, mode="reduced"):
    """The QR decomposition of ``a`` (..., M, N), tall, square or wide, by distributed QR.

    ``mode="reduced"`` (default, and its NumPy alias ``"full"``): ``QRResult(Q, R)``, Q (M, K)
    and R (K, N), K = min(M, N); ``"complete"``: Q (M, M) and R (M, N) (Q's last M - N columns of
    a tall ``a``: LAPACK's Householder completion, as JAX's, except on the distributed route, where
    they are another orthonormal basis of the complement); ``"r"``: R alone (as
    reduced), from the Householder factorisation and its upper triangle with no Q formed (only
    its derivative forms Q, as JAX's). Both in a's layout. A wide ``a`` is factored as Q R of its first M columns with
    ``R[:, M:] = Q^H a[:, M:]``. ``"raw"`` is JAX's own: ``QRResult(h, tau)``, LAPACK's
    Householder reflectors (h (..., N, M), transposed as NumPy's) from one device's geqrf.
    """
    if mode not in ("reduced", "complete", "r", "full", "raw"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete', 'r', 'raw' or 'full', got {mode!r}.")
    if mode == "raw":
        return jnp.linalg.qr(a, mode="raw")
    mode = "reduced" if mode == "full" else mode
    (a,) = _inexact(a)
    _util.matrices(a, "qr")
    out = _map_batch(functools.partial(_qr, mode=mode), (a,), (2,))
    return out if mode == "r" else QRResult(*out)


# --- Least squares, pseudo-inverse, rank, condition number ---------------------------------------


def _lstsq(a, b, rcond, numpy_resid):
    m, n = a.shape
    vector = b.ndim == 1
    b = b[:, None] if vector else b
    eps = float(jnp.finfo(a.dtype).eps)
    rcond = eps * max(m, n) if rcond is None else jnp.where(rcond < 0, eps, rcond)
    rcond = jnp.asarray(rcond, jnp.finfo(a.dtype).dtype)
    x, s = _least_norm(a, b, rcond)
    x = _util.solution_in_layout(x, b, a)
    rank = jnp.sum(_kept(s, rcond))
    if numpy_resid and (m <= n or _concrete(rank, "lstsq(numpy_resid=True)") < n):
        resid = jnp.asarray([], dtype=s.dtype)  # NumPy's empty residuals
    else:
        resid = jnp.sum(jnp.abs(b - _matmul(a, x)) ** 2, axis=0)
    return (x[:, 0] if vector else x), resid, rank, s


def _kept(s, rcond):
    """Which singular values ``s`` (descending) least squares keeps: ``s > 0`` and
    ``s >= rcond * s[0]``; the rank is their count."""
    return (s > 0) & (s >= rcond * jnp.max(s, initial=0))


def _kept_svd(a, rcond):
    """a's SVD ``(u, s, vh)`` and the reciprocals of the singular values kept (0 for the
    others), in a's dtype."""
    u, s, vh = _f.gesvd(a)
    mask = _kept(s, rcond)
    return u, s, vh, _kept_reciprocals(s, mask, a.dtype)


@jax.custom_jvp
def _least_norm(a, b, rcond):
    """``(x, s)``: the least-squares solution of least norm ``x = pinv(a_r) b`` (b (M, K)), with
    ``a_r`` a's SVD truncated to the singular values kept (:func:`_kept`), and a's singular
    values; differentiated as that function (:func:`_least_norm_jvp`): smooth where the number
    kept is constant, repeated singular values included."""
    u, s, vh, s_inv = _kept_svd(a, rcond)
    return _matmul(_H(vh), s_inv[:, None] * _matmul(_H(u), b)), s


@_least_norm.defjvp
def _least_norm_jvp(primals, tangents) -> Any:
    """The tangent of ``x = pinv(a_r) b``, with ``a_r = P_L a`` for ``P_L = U_K U_K^H`` the
    projector onto the kept left singular vectors. Golub and Pereyra's derivative of the
    pseudo-inverse of the rank-r ``a_r`` along ``a_r' = P_L' a + P_L a'``, with ``P = pinv(a_r)``
    and ``r = b - a x``::

        x' = P (b' - a' x) + P P^H a'^H r + (I - P a) a'^H P^H x        (the terms of a' itself)
             + V_K S_K^-1 Delta U_D^H b + V_D S_D G^H S_K^-2 U_K^H b       (P_L' against kept s_D)

    where ``G_ij = (X_ij s_j + s_i conj(X_ji)) / (s_i^2 - s_j^2)`` (i kept, j dropped; ``X = U^H a' V``)
    is the coupling of ``P_L'`` (the spectral projector of ``a a^H``) and ``Delta = G - X^H / s_i``
    what remains of it beyond the first line. Both vanish where the dropped ``s_j`` are 0 (exact
    rank r: Golub and Pereyra's formula alone). P is applied through the SVD's factors;
    ``s' = Re diag(U^H a' V)``."""
    a, b, rcond = primals
    a_dot, b_dot, _ = tangents
    u, s, vh, s_inv = _kept_svd(a, rcond)
    v, kept = _H(vh), (s_inv != 0).astype(a.dtype)[:, None]

    def pinv(y):  # P y
        return _matmul(v, s_inv[:, None] * _matmul(_H(u), y))

    def pinv_h(y):  # P^H y
        return _matmul(u, s_inv[:, None] * _matmul(vh, y))

    x = pinv(b)
    y = _matmul(_H(a_dot), pinv_h(x))
    x_dot = pinv(b_dot - _matmul(a_dot, x)) + pinv(pinv_h(_matmul(_H(a_dot), b - _matmul(a, x))))
    x_dot = x_dot + y - _matmul(v, kept * _matmul(vh, y))
    u_a_dot = _matmul(_H(u), a_dot)
    xm = _matmul(u_a_dot, v)  # X = U^H a' V  (K, K), K = min(M, N)
    g, delta = _dropped_couplings(xm, s, s_inv != 0)
    c = _matmul(_H(u), b)  # U^H b
    sd, si = s.astype(a.dtype)[:, None], s_inv[:, None]
    x_dot = x_dot + _matmul(v, si * _matmul(delta, c) + sd * _matmul(_H(g), si * si * c))
    s_dot = jnp.real(jnp.diagonal(xm)).astype(s.dtype)  # replicated, as s
    return (x, s), (x_dot, s_dot)


def _dropped_couplings(xm, s, kept):
    """``(G, Delta)`` (K, K) of :func:`_least_norm_jvp` from ``X = U^H a' V``, the singular values
    ``s`` (K,) and which are ``kept``: non-zero only in the rows kept and the columns dropped,
    where ``s_i > s_j >= 0`` (so no division by zero)."""
    dtype = xm.dtype
    couple = kept[:, None] & ~kept[None, :]
    si, sj = s[:, None], s[None, :]
    gap = jnp.where(couple, si * si - sj * sj, 1).astype(dtype)
    si, sj = jnp.where(couple, si, 1).astype(dtype), sj.astype(dtype)
    xh = _H(xm)
    g = jnp.where(couple, (xm * sj + si * xh) / gap, 0)
    delta = jnp.where(couple, sj * (si * xm + sj * xh) / (si * gap), 0)
    return g, delta


def _concrete(value, name):
    if _is_tracer(value):
        raise ValueError(
            f"{name} needs the rank as a Python value, which inside jax.jit is not known: "
            f"call it outside jax.jit, or call jaxmg.numpy.linalg.lstsq(a, b, rcond) with numpy_resid=False "
            f"(its default: the residuals always returned)."
        )
    return int(value)


@_drop_in
def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """``(x, resid, rank, s)``: the least-squares solution of ``a @ x = b`` of least norm.

    ``a`` (M, N) tall, square or wide, of any rank; ``b`` (M,) or (M, K). From jaxmg's SVD:
    singular values below ``rcond * s[0]`` (default ``eps * max(M, N)``) are treated as zero,
    ``rank`` counts the others, and ``resid`` holds ``||b - a x||^2`` per column (with
    ``numpy_resid=True``, NumPy's empty array where M <= N or rank < N).
    """
    a, b = _inexact(a, b)
    if a.ndim != 2:
        raise TypeError(f"lstsq: a must be two-dimensional (M, N), got shape {a.shape}.")
    if b.ndim not in (1, 2):  # JAX's TypeError, as for a
        raise TypeError(f"lstsq: b must be (M,) or (M, K), got shape {b.shape} (rank {b.ndim}) for a {a.shape}.")
    if b.shape[0] != a.shape[0]:
        raise ValueError(
            f"lstsq: b must have shape ({a.shape[0]},) or ({a.shape[0]}, K) to match a {a.shape}, got {b.shape}."
        )
    return _lstsq(a, b, rcond, numpy_resid)


def _pinv_from_svd(a, rtol, hermitian):
    u, s, vh = _svd(a, full_matrices=False, compute_uv=True, hermitian=hermitian)
    cutoff = rtol * jnp.max(s, initial=0)
    s_inv = _kept_reciprocals(s, s > cutoff, a.dtype)
    shape = (a.shape[-1], a.shape[-2])
    return _util.in_layout_of(_matmul(_H(vh) * s_inv[None, :], _H(u), _spec_for(a, shape)), a)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _pinv(a, rtol, hermitian):
    return _pinv_from_svd(a, rtol, hermitian)


@_pinv.defjvp
def _pinv_jvp(hermitian, primals, tangents):
    """Golub and Pereyra's derivative of the pseudo-inverse (as JAX's pinv), with products
    laid out like a."""
    a, rtol = primals
    a_dot, _ = tangents
    p = _pinv(a, rtol, hermitian)
    chain = functools.partial(_chain, like=a)
    s = chain(p, _H(p), _H(a_dot))
    t = chain(_H(a_dot), _H(p), p)
    p_dot = -chain(p, a_dot, p) + s - chain(s, a, p) + t - chain(p, a, t)
    return p, p_dot


def _chain(x, y, z, *, like):
    """``x @ y @ z`` in the cheaper order: for an (M, N) matrix and its (N, M) pseudo-inverse the
    intermediates are then min(M, N) square, never max(M, N) square (a wide a's derivative
    multiplies in the wide order). Each product laid out like ``like`` where that layout divides
    its shape (``jaxmg._dense.spec_for``)."""

    def product(u, v):
        return _matmul(u, v, _spec_for(like, (u.shape[0], v.shape[1])))

    (m, k), n, q = x.shape, y.shape[1], z.shape[1]
    if m * k * n + m * n * q <= k * n * q + m * k * q:
        return product(product(x, y), z)
    return product(x, product(y, z))


@_drop_in(static=("hermitian",))
def pinv(a, rtol=None, hermitian=False, *, rcond=None):
    """The Moore-Penrose pseudo-inverse of ``a`` (..., M, N), (..., N, M) in a's layout
    (replicated where a's layout does not divide (N, M)).

    From jaxmg's SVD (the eigendecomposition with ``hermitian=True``); singular values at most
    ``rtol * s[0]`` (default ``10 * max(M, N) * eps``) are treated as zero. ``rcond`` is
    JAX's alias of ``rtol``. The derivative is JAX's (Golub and Pereyra).
    """
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: only one of rtol and rcond may be specified.")
        rtol = rcond
    (a,) = _inexact(a)
    if hermitian:
        _square(a, "pinv(hermitian=True)")
        a = _herm_input(a, True, lower=True)
    if rtol is None:
        rtol = 10.0 * max(a.shape[-2:]) * float(jnp.finfo(a.dtype).eps)
    rtol = jnp.asarray(rtol, dtype=jnp.finfo(a.dtype).dtype)
    return _map_batch(functools.partial(_pinv_compiled, hermitian=bool(hermitian)), (a, rtol), (2, 0))


@functools.partial(_util.compiled_once, static_argnames="hermitian")
def _pinv_compiled(a, rtol, *, hermitian):
    """The pseudo-inverse and its derivative as one compiled call (eagerly too)."""
    return _pinv(a, rtol, hermitian)


@_drop_in(static=("hermitian",))
def matrix_rank(M, rtol=None, *, hermitian=False, tol=None):
    """The number of singular values of ``M`` (..., M, N) above the tolerance, as in JAX.

    The tolerance is ``rtol`` (or its alias ``tol``) where given, else
    ``s.max() * max(M, N) * eps``. Singular values from :func:`svdvals` (``hermitian``:
    absolute eigenvalues).
    """
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
        rtol = tol
    (M,) = _inexact(M)
    if M.ndim < 2:
        return jnp.any(M != 0).astype(jnp.int32)
    s = svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian)
    if rtol is None:
        rtol = s.max(-1) * max(M.shape[-2:]) * jnp.finfo(s.dtype).eps
    rtol = jnp.expand_dims(jnp.asarray(rtol), np.ndim(rtol))
    return jnp.sum(s > rtol, axis=-1)


@_drop_in(static=("p",))
def cond(x, p=None):
    """The condition number of ``x`` (..., M, N) in norm ``p``, as ``jnp.linalg.cond``.

    ``p`` None, 2 or -2: ratios of singular values (:func:`svdvals`); other norms (square x):
    ``norm(x, p) * norm(inv(x), p)``. Singular matrices give inf; an empty matrix (M or N zero)
    is a ``ValueError``, as in JAX.
    """
    (x,) = _inexact(x)
    if x.ndim < 2:
        raise ValueError(f"cond: x must be at least 2-D, got shape {x.shape}.")
    if 0 in x.shape[-2:]:
        raise ValueError(
            f"cond: x must not be empty (as in jnp.linalg.cond), got shape {x.shape}; "
            "the condition number of a matrix without rows or columns is not defined."
        )
    if p is None or p == 2:
        s = svdvals(x)
        r = s[..., 0] / s[..., -1]
    elif p == -2:
        s = svdvals(x)
        r = s[..., -1] / s[..., 0]
    else:
        _square(x, f"cond(p={p!r})")
        r = norm(x, ord=p, axis=(-2, -1)) * norm(inv(x), ord=p, axis=(-2, -1))
    return jnp.where(jnp.isnan(r) & ~jnp.isnan(x).any(axis=(-2, -1)), jnp.inf, r)


# --- Norms and powers ---------------------------------------------------------------------------


def _spectral(x, ord, axis, keepdims):
    """Matrix norms from singular values (ord 2, -2, 'nuc') over ``axis`` (two dimensions; an
    axis out of bounds or repeated is JAX's ValueError)."""
    for a in axis:
        if not -x.ndim <= a < x.ndim:
            raise ValueError(f"norm: axis {a} is out of bounds for array of dimension {x.ndim}.")
    rows, cols = (a % x.ndim for a in axis)
    if rows == cols:
        raise ValueError(f"norm: axis {tuple(axis)} repeats an axis; a matrix norm takes two different axes.")
    moved = jnp.moveaxis(x, (rows, cols), (-2, -1))
    s = svdvals(moved)
    out = {
        2: lambda: jnp.max(s, axis=-1, initial=0),
        -2: lambda: jnp.min(s, axis=-1),
        "nuc": lambda: jnp.sum(s, axis=-1),
    }[ord]()
    if keepdims:
        out = jnp.expand_dims(out, tuple(sorted((rows, cols))))
    return out


@_drop_in(static=("ord", "axis", "keepdims"))
def norm(x, ord=None, axis=None, keepdims=False):
    """``jnp.linalg.norm``; the matrix norms ord=2, -2 and 'nuc' from jaxmg's singular values."""
    (x,) = _inexact(x)
    if axis is not None and not isinstance(axis, (tuple, list)):
        axis = (operator.index(axis),)  # an int, or NumPy's integer scalars, as JAX's norm takes
    matrix_axes = tuple(axis) if axis is not None else ((-2, -1) if x.ndim == 2 else None)
    if matrix_axes is not None and len(matrix_axes) == 2 and ord in (2, -2, "nuc"):
        return _spectral(x, ord, matrix_axes, keepdims)
    return jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)


@_drop_in(static=("keepdims", "ord"))
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """``jnp.linalg.matrix_norm`` over the last two dimensions (2, -2, 'nuc' via :func:`svdvals`)."""
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


@_drop_in(static=("n",))
def matrix_power(a, n):
    """``a`` (..., N, N) to the integer power ``n`` by repeated squaring; negative ``n`` raise
    :func:`inv` (a) to ``-n``. Products in a's layout."""
    a = jnp.asarray(a)
    _square(a, "matrix_power", TypeError)  # as jnp.linalg.matrix_power
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"matrix_power: n (the exponent) must be an integer, got {n!r}; pass int(n).") from None
    if n < 0:
        a, n = inv(a), -n
    if n == 0:
        return jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)

    def power(x):
        mm = functools.partial(_matmul, spec=_spec_of(x))
        result, base, k = None, x, n
        while k:
            if k & 1:
                result = base if result is None else mm(result, base)
            k >>= 1
            if k:
                base = mm(base, base)
        return result

    return _map_batch(power, (a,), (2,))


# --- Tensor forms -------------------------------------------------------------------------------


@_drop_in
def tensorinv(a, ind=2):
    """The tensor inverse of ``a`` over its first ``ind`` dimensions, via :func:`inv`."""
    (a,) = _inexact(a)
    ind = operator.index(ind)
    if ind <= 0:
        raise ValueError(f"tensorinv: ind must be a positive integer, got {ind}.")
    head, tail = a.shape[:ind], a.shape[ind:]
    rows, cols = int(np.prod(head)), int(np.prod(tail))
    if rows != cols:
        raise ValueError(f"tensorinv: prod(a.shape[:ind]) = {rows} must equal prod(a.shape[ind:]) = {cols}.")
    return inv(a.reshape(rows, cols)).reshape(*tail, *head)


@_drop_in
def tensorsolve(a, b, axes=None):
    """Solve the tensor equation ``tensordot(a, x, x.ndim) = b`` for x, via :func:`solve`."""
    a, b = _inexact(a, b)
    if axes is not None:  # an axis out of bounds or repeated is JAX's ValueError, from jnp.moveaxis
        axes = tuple(axes)
        a = jnp.moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
    out_shape = a.shape[b.ndim :]
    if a.shape[: b.ndim] != b.shape:
        raise ValueError(
            f"tensorsolve: after moving the axes to the end, a's leading shape must be b's (as in "
            f"jnp.linalg.tensorsolve), got a.shape={a.shape}, b.shape={b.shape}."
        )
    rows, cols = int(np.prod(b.shape)), int(np.prod(out_shape))
    if rows != cols:
        raise ValueError(f"tensorsolve: prod(b.shape) = {rows} must equal prod(x.shape) = {cols}.")
    return solve(a.reshape(rows, cols), b.ravel()).reshape(out_shape)


__all__ = [
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "lstsq",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "multi_dot",
    "norm",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "tensorinv",
    "tensorsolve",
    "trace",
    "vecdot",
    "vector_norm",
]
# Non-Hermitian eigenproblems: JAX's own functions, on one device (cuSOLVERMp has no distributed
# non-Hermitian eigensolver; docs/numpy.md's table).
eig = jnp.linalg.eig
eigvals = jnp.linalg.eigvals

__all__ += ["eig", "eigvals"]


def __dir__() -> list:
    """The module's public names, as ``dir(jax.numpy.linalg)`` lists JAX's (not its imports)."""
    return sorted(__all__)
