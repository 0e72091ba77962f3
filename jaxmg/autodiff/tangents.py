r"""Forward-mode (JVP) formulas of the matrix decompositions, for sharded global arrays.

Each function maps the primal outputs of a decomposition and the tangent(s) of its
input(s) to the tangents of its outputs. Every formula is *linear* in the input tangents,
so JAX transposes it for reverse mode: one formula gives forward and reverse mode, and,
since the primal pieces used here are themselves differentiable, derivatives of any
order (the model is ``jax/_src/lax/linalg.py``: ``_eigh_jvp_rule``, ``qr_jvp_rule``,
``_svd_jvp_rule``).

Nothing is gathered: the formulas use only distributed products (``jnp.matmul`` with a
sharding annotation), elementwise operations, laid-out masks, the matmul-based triangular
inverse of :func:`jaxmg.autodiff._dist.tri_inv` and small replicated vectors (eigen- and
singular values). Every matrix tangent has the layout ``sh`` of the primal matrices
(``NamedSharding``, Explicit or Auto axes; None for none); vector tangents are replicated.
Everything is trace-only (the public boundary compiles the whole call).

Conventions, as ``jnp.linalg``:

* **Hermitian inputs** (eigh, sygvd): the primal reads only the lower triangle, and the
  tangent used is the Hermitian matrix read from the lower triangle of the one given,
  ``tril(A', -1) + tril(A', -1)^H + Re diag(A')``: the exact derivative of what is computed,
  also for inputs that are not exactly Hermitian.
* **Gauges.** Eigen- and singular vectors are defined up to a phase (a sign for real
  dtypes) per vector: the gauge components of the tangent are set to zero, as JAX does
  (``Im diag(v^H v') = 0``). Derivatives of a loss are right whenever the loss is
  invariant under those gauges (``|v|**2`` elementwise, ``v diag(g) v^H``,
  ``u diag(g) vh``, ...).
* **Degenerate eigen-/singular values.** The coupling ``F_ij = 1/(w_j - w_i)`` is set to
  zero where ``|w_i - w_j| <= rtol * max|w|``, ``rtol = max(n, 10) * eps(dtype)``: the terms
  between (near-)equal values are dropped (where ``jnp.linalg.eigh`` gives ``inf``/``nan``,
  these stay finite). That is exact for losses that depend on each degenerate eigenspace only
  through its projector and on its eigenvalues only through their sum; a matrix function
  ``v diag(f(w)) v^H`` misses its terms inside the eigenspace. The SVD's coupling
  ``1/(s_j^2 - s_i^2)`` is ``1/(s_j - s_i)`` on the Hermitian part of ``U^H A' V`` (dropped
  likewise) and ``1/(s_j + s_i)`` on its skew-Hermitian part (dropped only between zeros),
  so that the polar factor ``u vh`` keeps its exact derivative at repeated singular values.
* **QR**: the LAPACK gauge, ``diag(r)`` real.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._dense import columns
from ._dist import (
    _cols,
    _ct,
    _eye,
    _iota,
    _lower_read,
    _matmul,
    _place,
    _replicate,
    _right_tri_solve,
    _rows,
    _tril,
    _where,
    _zeros,
    kind,
)

__all__ = ["qr_jvp", "eigh_jvp", "sygvd_jvp", "svd_jvp", "polar_jvp"]


# --------------------------------------------------------------------------- shared pieces


def _rtol(n: int, dtype) -> float:
    return max(n, 10) * float(jnp.finfo(dtype).eps)


def _inverse_gaps(w, sh, rtol, *, sums=False):
    """``F_ij = 1/(w_j - w_i)`` (``1/(w_j + w_i)`` with ``sums``), laid out; 0 on the diagonal
    and wherever ``|w_j -+ w_i| <= rtol * max|w|`` (degenerate pairs, or with ``sums`` pairs of
    zeros, dropped)."""
    n = w.shape[0]
    wi, wj = _rows(w, n, sh), _cols(w, n, sh)
    tol = rtol * jnp.max(jnp.abs(_replicate(w, sh)), initial=0)
    gap = (wj + wi) if sums else (wj - wi)
    keep = (jnp.abs(gap) > tol) & ~_eye((n, n), sh)
    return jnp.where(keep, 1 / jnp.where(keep, gap, jnp.ones((), gap.dtype)), jnp.zeros((), gap.dtype))


def _diag(x, sh):
    """The diagonal of a square laid-out matrix, as a replicated vector (a masked sum)."""
    return _replicate(jnp.sum(_where(_eye(x.shape, sh), x), axis=0), sh)


def _real(x):
    return jnp.real(x).astype(jnp.finfo(x.dtype).dtype)


def _safe_inverse(s):
    """1/s, and 0 where s is 0."""
    zero = s == 0
    return jnp.where(zero, jnp.zeros((), s.dtype), 1 / jnp.where(zero, jnp.ones((), s.dtype), s))


def _rotated(v, x_dot, sh):
    """``v^H X' v`` for the Hermitian matrix X' read from the lower triangle of a tangent
    (None stays None)."""
    if x_dot is None:
        return None
    return _matmul(_matmul(v, _lower_read(x_dot, sh), sh, adj_x=True), v, sh)


# --------------------------------------------------------------------------- QR


def qr_jvp(q, r, a_dot, sh):
    r"""Tangents ``(q', r')`` of the reduced QR ``a = q r`` (full rank).

    Math, M >= N: with ``X = q^H a' r^{-1}`` and ``O`` the skew-Hermitian matrix with O's strictly
    lower triangle that of X and ``diag(O) = i Im diag(X)``::

        q' = q (O - X) + a' r^{-1},      r' = (X - O) r     (upper triangular)

    ``a' r^{-1}`` is one triangular solve without a layout and the distributed
    :func:`~jaxmg.autodiff._dist.tri_inv` and a product over one. M < N (LAPACK's wide factor,
    ``r = [r_1, r_2]`` with r_1 square): ``(q', r_1')`` as above for ``a_1 = q r_1``, and, as
    ``r_2 = q^H a_2``, ``r_2' = q'^H a_2 + q^H a_2'`` (JAX's ``qr_jvp_rule``), which with the square
    q's ``q^H q' = O`` and ``a_2 = q r_2`` is ``-O r_2 + q^H a_2'`` (one product fewer).
    q (M, K), r (K, N) and a' (M, N) in layout ``sh``, K = min(M, N).
    """
    m, n = r.shape[-2:]
    if m >= n:
        return _thin_qr_jvp(q, r, a_dot, sh)[:2]
    q_dot, head, o = _thin_qr_jvp(q, columns(r, 0, m), columns(a_dot, 0, m), sh)
    tail = _matmul(q, columns(a_dot, m, n), sh, adj_x=True) - _matmul(o, columns(r, m, n), sh)
    return q_dot, jnp.concatenate([head, tail], axis=-1)


def _thin_qr_jvp(q, r, a_dot, sh):
    """``(q', r', O)`` of the reduced QR of a tall or square ``a`` (:func:`qr_jvp`)."""
    q, r = _place(q, sh), _place(r, sh)
    dx_rinv = _right_tri_solve(a_dot, r, sh, lower=False)
    x = _matmul(q, dx_rinv, sh, adj_x=True)
    low = _tril(x, sh, -1)
    o = low - _ct(low, sh) + _where(_eye(x.shape, sh), x - _real(x).astype(x.dtype))
    return _matmul(q, o - x, sh) + dx_rinv, _matmul(x - o, r, sh), o


# --------------------------------------------------------------------------- Hermitian eigenproblems


def eigh_jvp(w, v, a_dot, sh, *, full: bool = False):
    r"""Tangents ``(w', v')`` of ``w, v = eigh(a)`` for Hermitian ``a = v diag(w) v^H``.

    Math: ``X = v^H H(a') v`` (``H``: the Hermitian matrix read from the lower triangle), ``w' = Re diag(X)``,
    ``v' = v (F o X)`` with ``F`` the inverse gaps (module docstring: degenerate pairs dropped). w (N,) replicated;
    v and a' (N, N) in layout ``sh``. ``full``: ``a'`` itself in place of ``H(a')``, also where it is not
    Hermitian (the rule of ``jnp.linalg.eigh``, whose derivative is that of the full matrix).
    """
    v = _place(v, sh)
    z = _matmul(_place(a_dot, sh) if full else _lower_read(a_dot, sh), v, sh)  # H(a') v
    _, v_dot = _generalized(w, v, _matmul(v, z, sh, adj_x=True), None, sh, _rtol(v.shape[0], v.dtype))
    # w' = Re diag(v^H Z) as the column sums of conj(v) * Z: transposed, (v diag(w-bar)) v^H is
    # one product, where the diagonal of the product would first make the N x N diag(w-bar).
    return _replicate(_real(jnp.sum(jnp.conj(v) * z, axis=0)), sh), v_dot


def sygvd_jvp(w, v, a_dot, b_dot, sh):
    r"""Tangents ``(w', v')`` of the pencil ``a v = b v diag(w)``, ``v^H b v = I`` (a Hermitian,
    b Hermitian positive definite), with respect to both ``a`` and ``b``.

    Math: ``Xa = v^H H(a') v``, ``Xb = v^H H(b') v``, ``Y = Xa - Xb diag(w)``::

        w' = Re diag(Y),      v' = v (F o Y - diag(Xb) / 2)

    (``v^{-1} = v^H b``, so no solve is needed). Either tangent may be None (zero).
    """
    v = _place(v, sh)
    return _generalized(w, v, _rotated(v, a_dot, sh), _rotated(v, b_dot, sh), sh, _rtol(v.shape[0], v.dtype))


def _generalized(w, v, xa, xb, sh, rtol):
    """(w', v') from Xa = v^H A' v and Xb = v^H B' v (either None: zero); B' = 0 for eigh."""
    n = v.shape[0]
    w = _replicate(w, sh)
    y = _zeros((n, n), v.dtype, sh) if xa is None else xa
    if xb is not None:
        y = y - xb * _cols(w.astype(v.dtype), n, sh)
    c = _inverse_gaps(w, sh, rtol).astype(v.dtype) * y
    if xb is not None:
        c = c - _where(_eye((n, n), sh), xb) / 2
    return _real(_diag(y, sh)), _matmul(v, c, sh)


# --------------------------------------------------------------------------- SVD


def svd_jvp(u, s, vh, a_dot, sh, full_matrices=False):
    r"""Tangents ``(u', s', vh')`` of the SVD ``a = u[:, :N] diag(s) vh`` (M >= N, full rank).

    Math (``U = u[:, :N]``, ``V = vh^H``, ``S = diag(s)``, ``X = U^H a' V``, ``F`` the inverse
    gaps of ``s**2``)::

        s'  = Re diag(X)
        U'  = U (F o (X S + S X^H) + diag(i Im diag(X)) S^{-1}) + (I - U U^H) a' V S^{-1}
        V'  = V (F o (S X + X^H S)),        vh' = V'^H

    ``full_matrices``: u is (M, M) and its extra columns ``U2`` are defined up to a rotation;
    with that gauge fixed (``U2^H U2' = 0``) they move as ``U2' = -U S^{-1} V^H a'^H U2``
    (right for losses invariant to rotations of ``U2``, such as ones depending on the
    projector ``U2 U2^H``; JAX's own SVD has no derivative there).
    """
    m, rtol = a_dot.shape[0], _rtol(vh.shape[0], vh.dtype)
    dtype = vh.dtype
    n = vh.shape[0]
    full_matrices = full_matrices and m > n  # a square u has no extra columns
    u, vh, a_dot = _place(u, sh), _place(vh, sh), _place(a_dot, sh)
    s = _replicate(s, sh)
    u1 = _leading_columns(u, n, sh) if full_matrices else u
    inv_s = _safe_inverse(s).astype(dtype)
    dav = _matmul(a_dot, vh, sh, adj_y=True)  # a' V  (M, N)
    x = _matmul(u1, dav, sh, adj_x=True)  # U^H a' V  (N, N)
    # F o (X S + S X^H) = h / (s_j - s_i) + k / (s_j + s_i), h and k X's Hermitian and
    # skew-Hermitian parts: only h's coupling is singular between equal singular values
    h, k = (x + _ct(x, sh)) / 2, (x - _ct(x, sh)) / 2
    hf = _inverse_gaps(s, sh, rtol).astype(dtype) * h
    kf = _inverse_gaps(s, sh, rtol, sums=True).astype(dtype) * k
    phase = _where(_eye((n, n), sh), k) * _cols(inv_s, n, sh)
    du = _matmul(u1, hf + kf + phase, sh)
    if m > n:  # (I - U U^H) a' V S^-1: zero for a square (unitary) U, as in JAX's rule
        du = du + (dav - _matmul(u1, x, sh)) * _cols(inv_s, m, sh)
    dvh = _matmul(hf - kf, vh, sh, adj_x=True)  # (V (F o (S X + X^H S)))^H
    if full_matrices:
        # U2' = -U S^{-1} (U^H a' V)^H restricted to u's columns >= N, as an (M, M) in place
        g = _matmul(u, dav, sh, adj_x=True)  # u^H a' V  (M, N)
        t = _where(_iota((n, m), 1, sh) >= n, _ct(g, sh)) * _rows(inv_s, m, sh)
        du = _padded_columns(du, m, sh) - _matmul(u1, t, sh)
    return du, _real(_diag(x, sh)), dvh


def _leading_columns(x, n, sh):
    """``x[:, :n]``: a slice without a layout, a product with the (M, n) identity over one (no
    slicing of a laid-out matrix)."""
    if kind(sh) is None:
        return x[:, :n]
    return _matmul(x, _eye((x.shape[1], n), sh).astype(x.dtype), sh)


def _padded_columns(x, m, sh):
    """``x`` (M, N) with zero columns appended up to (M, m): a pad without a layout, a product
    with the (N, m) identity over one."""
    if kind(sh) is None:
        return jnp.pad(x, ((0, 0), (0, m - x.shape[1])))
    return _matmul(x, _eye((x.shape[1], m), sh).astype(x.dtype), sh)


# --------------------------------------------------------------------------- polar


def polar_jvp(u_p, sig, vv, a_dot, sh):
    r"""Tangents ``(u_p', h')`` of the polar decomposition ``a = u_p h`` (M >= N, full rank).

    ``h = vv diag(sig) vv^H`` is the eigendecomposition of h (sig: a's singular values,
    vv: its right singular vectors; any order), ``W = u_p vv`` the left singular vectors.
    Math, with ``X = W^H a' vv`` and ``sum_ij = sig_i + sig_j`` (> 0 for full rank)::

        h'   = vv ((diag(sig) X + X^H diag(sig)) / sum) vv^H
        u_p' = (W ((X - X^H) / sum) + (a' vv - W X) diag(1/sig)) vv^H

    (from ``h^2 = a^H a`` and ``a = u_p h``). Smooth for full-rank ``a``: no degenerate case,
    whatever basis ``vv`` takes inside a repeated singular value.
    """
    dtype = u_p.dtype
    n, m = vv.shape[0], u_p.shape[0]
    u_p, vv, a_dot = _place(u_p, sh), _place(vv.astype(dtype), sh), _place(a_dot, sh)
    sig = _replicate(sig, sh).astype(dtype)
    w = _matmul(u_p, vv, sh)
    dav = _matmul(a_dot, vv, sh)
    x = _matmul(w, dav, sh, adj_x=True)
    total = _rows(sig, n, sh) + _cols(sig, n, sh)
    sx = _rows(sig, n, sh) * x
    dh = _matmul(_matmul(vv, (sx + _ct(sx, sh)) / total, sh), vv, sh, adj_y=True)
    inner = _matmul(w, (x - _ct(x, sh)) / total, sh) + (dav - _matmul(w, x, sh)) * _cols(1 / sig, m, sh)
    return _matmul(inner, vv, sh, adj_y=True), dh
