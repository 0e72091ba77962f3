r"""Reverse-mode (VJP) formulas of matrix factorisations, for sharded global arrays.

Each function maps the primal outputs of a factorisation and their cotangents to
the cotangent of its input(s). They are written for matrices laid out over a
device mesh (``NamedSharding(mesh, P(r, c))``, Explicit or Auto axes) and never
gather a matrix onto one device: they use only distributed products
(``jnp.matmul`` with a sharding annotation), elementwise operations, masks, the
matmul-based triangular inverse of :func:`jaxmg.autodiff._dist.tri_inv`, and small
replicated vectors (eigen- and singular values). Every returned matrix has the
layout of the primal input; vectors are replicated on the way in.

What moves is decided by XLA's partitioning of each product: on a 2-D layout
``P('x', 'y')`` that is row and column panels (SUMMA-like), never a whole
matrix; on a one-axis layout (``P('i', None)``, ``P(None, 'i')``) a panel *is*
the whole operand, so products there all-gather or all-reduce full-size
matrices. The one deliberate gather is ``polar_vjp`` without ``h_eig``.

Layout. Taken from the keyword ``sharding`` (a ``NamedSharding`` or a
``(mesh, spec)`` pair) when given, else from the main matrix argument (see
:func:`jaxmg.autodiff._dist.layout_of`). Inside ``jit`` with *Auto* mesh axes a
tracer's layout is unknown, so pass ``sharding=`` there; with Explicit axes it is
part of the type. Called eagerly, each function runs as one jitted program.

Conventions (the same as JAX's, so results equal ``jax.vjp`` of the
corresponding ``jnp.linalg`` function):

* **Complex cotangents.** JAX pairs a cotangent ``c`` with a tangent ``dY`` as
  ``Re sum(c * dY)`` (no conjugation). The formulas are derived with the
  "adjoint" convention ``dL = Re tr(Ybar^H dY)``; the two differ by a complex
  conjugation, ``Ybar = conj(c)``, which is applied on the way in and out.
* **Hermitian inputs** (``cholesky_vjp``, ``eigh_vjp``, ``sygvd_vjp``): JAX
  symmetrises the input of ``cholesky``/``eigh`` before factorising, so the
  cotangent returned is the Hermitian part ``(X + X^H)/2`` of the raw one.
* **Gauges.** Eigen- and singular vectors are defined up to a phase (a sign for
  real dtypes) per vector, and up to a rotation inside a degenerate
  eigenspace. The formulas set the gauge components of the tangent to zero, as
  JAX does; the result is the true derivative whenever the loss is invariant
  under those gauges (e.g. depends on ``|v|**2`` elementwise, ``v diag(g) v^H``,
  ``u diag(g) vh``).
* **Degenerate eigen-/singular values.** The coupling
  ``F_ij = 1/(w_j - w_i)`` (``1/(s_j^2 - s_i^2)`` for the SVD) is set to zero
  when ``|w_i - w_j| <= rtol * max|w|``, ``rtol`` defaulting to
  ``max(n, 10) * eps(dtype)``: the contribution of ``v_bar`` between (near-)
  equal eigenvalues is excluded, which is correct when the loss is invariant to
  rotations within the degenerate eigenspaces (and finite, where JAX's ``eigh``
  would give ``inf``/``nan`` for exactly equal eigenvalues).
* **QR** assumes the usual LAPACK gauge: ``r`` has a real diagonal.
* Every cotangent argument may be ``None``, meaning zero.

Cost: ``cholesky_vjp`` and ``qr_vjp`` need a triangular inverse, formed by
``tri_inv`` with ``2 ceil(log2 nb)`` matmuls (``nb`` ~ the number of devices);
the others are a handful of matmuls each.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from . import _dist
from ._dist import (
    _cols,
    _ct,
    _diag_embed,
    _eye,
    _iota,
    _matmul,
    _offset,
    _place,
    _replicate,
    _rows,
    _sym,
    _tri_inv,
    _triu,
    _where,
    _zeros,
)

__all__ = ["cholesky_vjp", "qr_vjp", "eigh_vjp", "sygvd_vjp", "svd_vjp", "polar_vjp"]


# --------------------------------------------------------------------------- shared pieces


def _layout(sharding, *arrays):
    """The layout: ``sharding`` if given, else the first of ``arrays`` that has one."""
    if sharding is not None:
        return _dist.resolve(sharding)
    for x in arrays:
        if x is not None:
            found = _dist.resolve(x)
            if found is not None:
                return found
    return None


def _check_matrix(x, name, square=False, tall=False):
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != 2:
        raise ValueError(f"{name} must be a matrix (rank 2), got shape {shape}")
    if square and shape[0] != shape[1]:
        raise ValueError(f"{name} must be square, got shape {tuple(shape)}")
    if tall and shape[0] < shape[1]:
        raise ValueError(f"{name} must have M >= N, got shape {tuple(shape)}")


def _check_shape(x, shape, name):
    if x is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")


def _rtol(rtol, n, dtype):
    if rtol is not None:
        return float(rtol)
    return max(n, 10) * float(jnp.finfo(dtype).eps)


def _inverse_gaps(w, sh, rtol, squared=False):
    """``F_ij = 1/(w_j - w_i)`` (``1/(w_j^2 - w_i^2)`` when ``squared``), laid out; 0 on the
    diagonal and wherever ``|w_j - w_i| <= rtol * max|w|``."""
    n = w.shape[0]
    wi, wj = _rows(w, n, sh), _cols(w, n, sh)
    tol = rtol * jnp.max(jnp.abs(_replicate(w, sh)))
    keep = jnp.abs(wj - wi) > tol
    gap = (wj * wj - wi * wi) if squared else (wj - wi)
    return jnp.where(keep, 1 / jnp.where(keep, gap, jnp.ones((), gap.dtype)), jnp.zeros((), gap.dtype))


def _in(ct, sh):
    """A JAX cotangent (or None) as the adjoint-convention one, laid out."""
    return None if ct is None else _place(jnp.conj(ct), sh)


# --------------------------------------------------------------------------- Cholesky


def cholesky_vjp(L, L_bar, *, sharding=None):
    r"""Cotangent of ``a`` for ``L = cholesky(a)``, ``a = L L^H`` (``L`` lower triangular).

    Math (Murray 2016, adjoint convention, ``Lbar = conj(L_bar)``)::

        Phi(X)  = tril(X, -1) + diag(X) / 2
        a_bar   = sym( L^{-H} Phi(L^H Lbar) L^{-1} ),   sym(X) = (X + X^H) / 2

    returned conjugated (JAX convention). The result is Hermitian, as for
    ``jax.vjp(jnp.linalg.cholesky, a)`` (which symmetrises its input). Only the
    lower triangle of ``L_bar`` contributes.

    Args:
      L: (N, N) lower Cholesky factor, laid out like ``a``.
      L_bar: (N, N) cotangent of ``L`` (JAX convention), or None for zero.
      sharding: layout of the result (default: L's).

    Returns:
      (N, N) Hermitian ``a_bar`` in the layout.
    """
    _check_matrix(L, "L", square=True)
    _check_shape(L_bar, L.shape, "L_bar")
    sh = _layout(sharding, L, L_bar)
    return _dist.call(_cholesky_impl, (L, L_bar), sh)


def _cholesky_impl(L, L_bar, sh):
    L = _place(L, sh)
    if L_bar is None:
        return _zeros(L.shape, L.dtype, sh)
    lbar = _in(L_bar, sh)
    linv = _tri_inv(L, sh, lower=True)
    c = _matmul(L, lbar, sh, adj_x=True)  # L^H Lbar
    off = _offset(c.shape, sh)
    phi = jnp.where(off < 0, c, jnp.where(off == 0, c / 2, jnp.zeros((), c.dtype)))
    x = _matmul(_matmul(linv, phi, sh, adj_x=True), linv, sh)
    return jnp.conj(_sym(x, sh))


# --------------------------------------------------------------------------- QR


def qr_vjp(a, q, r, q_bar, r_bar, *, sharding=None):
    r"""Cotangent of ``a`` for the reduced QR ``a = q r`` (M >= N, full column rank).

    Math (adjoint convention, ``Qbar = conj(q_bar)``, ``Rbar = triu(conj(r_bar))``)::

        M      = R Rbar^H - Qbar^H Q                                  (N, N)
        copyltu(M) = tril(M, -1) + tril(M, -1)^H + Re diag(M)
        a_bar  = (Qbar + Q copyltu(M)) R^{-H}

    returned conjugated (JAX convention). Derived from ``dA = dQ R + Q dR`` with
    ``Q^H dQ`` skew-Hermitian, ``dR`` upper triangular and the gauge ``diag(R)``
    real (``Im diag(Q^H dQ) = Im diag(Q^H dA R^{-1})``), as LAPACK returns it.
    ``R^{-1}`` comes from the distributed ``tri_inv``.

    Args:
      a: (M, N) input (only its shape/layout is used).
      q: (M, N) with orthonormal columns; r: (N, N) upper triangular, non-singular.
      q_bar, r_bar: cotangents of q and r (JAX convention), or None.
      sharding: layout of the result (default: a's).

    Returns:
      (M, N) ``a_bar`` in the layout.
    """
    _check_matrix(a, "a", tall=True)
    m, n = a.shape
    _check_shape(q, (m, n), "q")
    _check_shape(r, (n, n), "r")
    _check_shape(q_bar, (m, n), "q_bar")
    _check_shape(r_bar, (n, n), "r_bar")
    sh = _layout(sharding, a, q, r)
    return _dist.call(_qr_impl, (q, r, q_bar, r_bar), sh)


def _qr_impl(q, r, q_bar, r_bar, sh):
    q, r = _place(q, sh), _place(r, sh)
    n = r.shape[0]
    mm = _zeros((n, n), q.dtype, sh)
    qbar = _in(q_bar, sh)
    if r_bar is not None:
        rbar = _triu(jnp.conj(r_bar), sh)
        mm = mm + _matmul(r, rbar, sh, adj_y=True)
    if qbar is not None:
        mm = mm - _matmul(qbar, q, sh, adj_x=True)
    off = _offset((n, n), sh)
    low = _where(off < 0, mm)
    sym = low + _ct(low, sh) + _where(off == 0, jnp.real(mm).astype(mm.dtype))
    x = _matmul(q, sym, sh)
    if qbar is not None:
        x = x + qbar
    rinv = _tri_inv(r, sh, lower=False)
    return jnp.conj(_matmul(x, rinv, sh, adj_y=True))


# --------------------------------------------------------------------------- Hermitian eigenproblems


def eigh_vjp(w, v, w_bar, v_bar, *, sharding=None, rtol=None):
    r"""Cotangent of Hermitian ``a`` for ``w, v = eigh(a)``, ``a = v diag(w) v^H``.

    Math (adjoint convention, ``Vbar = conj(v_bar)``)::

        F_ij  = 1 / (w_j - w_i)  (i != j),  0 on the diagonal and where
                |w_i - w_j| <= rtol * max|w|   (degenerate pairs excluded)
        a_bar = sym( v (diag(w_bar) + F o (v^H Vbar)) v^H )

    returned conjugated: the Hermitian cotangent of JAX's ``eigh`` (which
    symmetrises its input). Exact for losses invariant to the phase of each
    eigenvector and to rotations within degenerate eigenspaces; the part of
    ``v_bar`` coupling (near-)equal eigenvalues is dropped.

    Args:
      w: (N,) real eigenvalues (replicated; any order matching v's columns).
      v: (N, N) unitary eigenvectors (columns), laid out like ``a``.
      w_bar: (N,) real cotangent or None; v_bar: (N, N) cotangent or None.
      sharding: layout of the result (default: v's).
      rtol: relative degeneracy threshold (default ``max(N, 10) * eps``).

    Returns:
      (N, N) Hermitian ``a_bar`` in the layout.
    """
    _check_matrix(v, "v", square=True)
    n = v.shape[0]
    _check_shape(w, (n,), "w")
    _check_shape(w_bar, (n,), "w_bar")
    _check_shape(v_bar, (n, n), "v_bar")
    sh = _layout(sharding, v, v_bar)
    return _dist.call(_eigh_impl, (w, v, w_bar, v_bar), sh, rtol=_rtol(rtol, n, v.dtype))


def _eigh_core(w, v, w_bar, v_bar, sh, rtol):
    """(v, F o G or None, G or None) shared by eigh and sygvd: G = v^H Vbar."""
    v = _place(v, sh)
    if v_bar is None:
        return v, None, None
    g = _matmul(v, _in(v_bar, sh), sh, adj_x=True)
    f = _inverse_gaps(w, sh, rtol)
    return v, f.astype(g.dtype) * g, g


def _sandwich(v, x, sh):
    """sym(v x v^H)."""
    return _sym(_matmul(_matmul(v, x, sh), v, sh, adj_y=True), sh)


def _eigh_impl(w, v, w_bar, v_bar, sh, rtol):
    w = _replicate(w, sh)
    v, fg, _ = _eigh_core(w, v, w_bar, v_bar, sh, rtol)
    n = v.shape[0]
    x = _zeros((n, n), v.dtype, sh) if fg is None else fg
    if w_bar is not None:
        x = x + _diag_embed(_replicate(w_bar, sh), sh, dtype=v.dtype)
    return jnp.conj(_sandwich(v, x, sh))


def sygvd_vjp(a, b, w, v, w_bar, v_bar, *, sharding=None, rtol=None):
    r"""Cotangents of Hermitian ``a`` and Hermitian positive definite ``b`` for the generalised
    eigenproblem ``a v = b v diag(w)`` normalised by ``v^H b v = I``.

    Math (adjoint convention, ``Vbar = conj(v_bar)``, ``G = v^H Vbar``, ``W = diag(w)``,
    ``F`` as in :func:`eigh_vjp`). From ``dV = V C`` with
    ``C = F o (v^H da v - v^H db v W) - diag(v^H db v) / 2`` and
    ``dw = diag(v^H da v - v^H db v W)``::

        a_bar = sym( v (diag(w_bar) + F o G) v^H )
        b_bar = -sym( v (diag(w_bar * w) + (F o G) W + diag(G) / 2) v^H )

    both returned conjugated (JAX convention) and Hermitian. Gauge and degenerate
    eigenvalues as in :func:`eigh_vjp`. Note ``v^{-1} = v^H b``: no solve is needed.

    Args:
      a, b: (N, N) inputs (only shapes/layouts are used).
      w: (N,) real eigenvalues; v: (N, N) eigenvectors (columns), laid out like a.
      w_bar, v_bar: cotangents (JAX convention), or None.
      sharding: layout of both results (default: a's, and ``b_bar`` in b's if it differs).
      rtol: relative degeneracy threshold (default ``max(N, 10) * eps``).

    Returns:
      ``(a_bar, b_bar)``, (N, N) each.
    """
    _check_matrix(a, "a", square=True)
    n = a.shape[0]
    _check_shape(b, (n, n), "b")
    _check_shape(v, (n, n), "v")
    _check_shape(w, (n,), "w")
    _check_shape(w_bar, (n,), "w_bar")
    _check_shape(v_bar, (n, n), "v_bar")
    sh = _layout(sharding, a, v, b)
    sh_b = _layout(sharding, b, a, v)
    return _dist.call(_sygvd_impl, (w, v, w_bar, v_bar), sh, rtol=_rtol(rtol, n, v.dtype), sh_b=sh_b)


def _sygvd_impl(w, v, w_bar, v_bar, sh, rtol, sh_b):
    w = _replicate(w, sh)
    v, fg, g = _eigh_core(w, v, w_bar, v_bar, sh, rtol)
    n = v.shape[0]
    xa = _zeros((n, n), v.dtype, sh)
    xb = _zeros((n, n), v.dtype, sh)
    if fg is not None:
        xa = xa + fg
        xb = xb + fg * _cols(w, n, sh).astype(v.dtype) + _where(_eye((n, n), sh), g) / 2
    if w_bar is not None:
        w_bar = _replicate(w_bar, sh)
        xa = xa + _diag_embed(w_bar, sh, dtype=v.dtype)
        xb = xb + _diag_embed(w_bar * w, sh, dtype=v.dtype)
    a_bar = jnp.conj(_sandwich(v, xa, sh))
    b_bar = jnp.conj(-_sandwich(v, xb, sh))
    if sh_b is not None and sh_b != sh:
        b_bar = _place(b_bar, sh_b)
    return a_bar, b_bar


# --------------------------------------------------------------------------- SVD


def svd_vjp(a, u, s, vh, u_bar, s_bar, vh_bar, full_matrices=False, *, sharding=None, rtol=None):
    r"""Cotangent of ``a`` for the SVD ``a = u[:, :N] diag(s) vh`` (M >= N, full rank).

    Math (adjoint convention; ``U = u[:, :N]``, ``V = vh^H``, ``S = diag(s)``,
    ``Ubar = conj(u_bar)[:, :N]``, ``Vbar = vh_bar^T``, ``Gu = U^H Ubar``,
    ``Gv = V^H Vbar``, ``F_ij = 1/(s_j^2 - s_i^2)`` off the diagonal, 0 where
    ``|s_i - s_j| <= rtol * max s``)::

        Pbar  = diag(s_bar) + (F o (Gu - Gu^H)) S + S (F o (Gv - Gv^H))
                + diag(i Im(Gu_ii) / s_i)
        a_bar = [ U (Pbar - Gu S^{-1}) + Ubar S^{-1} ] V^H       (= U Pbar V^H + (I - U U^H) Ubar S^{-1} V^H)

    returned conjugated (JAX convention). Gauge: the phase of each pair
    ``(u_i, v_i)`` is free; the formula is exact for losses invariant to it.
    ``u_bar``/``vh_bar`` are None when those outputs were not used.

    ``full_matrices=True``: ``u`` and ``u_bar`` are (M, M). The extra columns
    ``U2 = u[:, N:]`` are only defined up to a rotation; with that gauge fixed
    (``U2^H dU2 = 0``) they move as ``dU2 = -U (S^{-1} V^H dA^H U2)``, adding

        a_bar += -U2 Ubar2^H U S^{-1} V^H

    which is exact for losses invariant to rotations of ``U2`` (e.g. depending
    on the projector ``U2 U2^H``). (JAX's own SVD has no derivative here.)

    Args:
      a: (M, N) input (only its shape/layout is used).
      u: (M, N), or (M, M) when ``full_matrices``; s: (N,) real, > 0; vh: (N, N).
      u_bar, s_bar, vh_bar: cotangents (JAX convention), or None.
      full_matrices: whether ``u`` is (M, M).
      sharding: layout of the result (default: a's).
      rtol: relative degeneracy threshold (default ``max(N, 10) * eps``).

    Returns:
      (M, N) ``a_bar`` in the layout.
    """
    _check_matrix(a, "a", tall=True)
    m, n = a.shape
    ushape = (m, m) if full_matrices else (m, n)
    _check_shape(u, ushape, "u")
    _check_shape(s, (n,), "s")
    _check_shape(vh, (n, n), "vh")
    _check_shape(u_bar, ushape, "u_bar")
    _check_shape(s_bar, (n,), "s_bar")
    _check_shape(vh_bar, (n, n), "vh_bar")
    sh = _layout(sharding, a, u, vh)
    return _dist.call(_svd_impl, (u, s, vh, u_bar, s_bar, vh_bar), sh,
                      m=m, full_matrices=bool(full_matrices), rtol=_rtol(rtol, n, vh.dtype))


def _svd_impl(u, s, vh, u_bar, s_bar, vh_bar, sh, m, full_matrices, rtol):
    dtype = vh.dtype
    n = vh.shape[0]
    u, vh = _place(u, sh), _place(vh, sh)
    s = _replicate(s, sh)
    if full_matrices:  # U = u[:, :N] without slicing a sharded dimension: u @ [I; 0]
        select = _eye((m, n), sh).astype(dtype)
        u1 = _matmul(u, select, sh)
    else:
        u1 = u
    inv_s = _cols((1 / s).astype(dtype), n, sh)  # [i, j] -> 1 / s_j
    x = _zeros((n, n), dtype, sh)
    y = None
    if s_bar is not None:
        x = x + _diag_embed(_replicate(s_bar, sh), sh, dtype=dtype)
    f = None
    if u_bar is not None or vh_bar is not None:
        f = _inverse_gaps(s, sh, rtol, squared=True).astype(dtype)
    if u_bar is not None:
        ubar = _in(u_bar, sh)
        ubar1 = _matmul(ubar, select, sh) if full_matrices else ubar
        gu = _matmul(u1, ubar1, sh, adj_x=True)
        ku = gu - _ct(gu, sh)
        x = x + f * ku * _cols(s.astype(dtype), n, sh) + _where(_eye((n, n), sh), ku) * (inv_s / 2) - gu * inv_s
        y = ubar1 * _cols((1 / s).astype(dtype), m, sh)
        if full_matrices:
            ubar2 = _where(_iota((m, m), 1, sh) >= n, ubar)  # Ubar's extra columns, in place
            t = _matmul(ubar2, u1, sh, adj_x=True)  # Ubar2^H U (as an (M, N) with zero rows < N)
            y = y - _matmul(u, t, sh) * _cols((1 / s).astype(dtype), m, sh)
    if vh_bar is not None:
        vbar = _place(jnp.swapaxes(vh_bar, -1, -2), sh)  # adjoint-convention cotangent of V
        gv = _matmul(vh, vbar, sh)  # V^H Vbar
        kv = gv - _ct(gv, sh)
        x = x + _rows(s.astype(dtype), n, sh) * (f * kv)
    z = _matmul(u1, x, sh)
    if y is not None:
        z = z + y
    return jnp.conj(_matmul(z, vh, sh))


# --------------------------------------------------------------------------- polar


def polar_vjp(a, u_p, h, u_p_bar, h_bar, *, h_eig=None, sharding=None):
    r"""Cotangent of ``a`` for the polar decomposition ``a = u_p h`` (M >= N, full rank).

    ``u_p`` (M, N) has orthonormal columns, ``h = (a^H a)^{1/2}`` (N, N) is Hermitian
    positive definite. Math (adjoint convention, ``Ubar = conj(u_p_bar)``,
    ``Hbar = conj(h_bar)``): from ``dU_p = (dA - U_p dH) h^{-1}`` and the Sylvester
    equation ``h dH + dH h = dA^H a + a^H dA``::

        K     = Hbar - u_p^H Ubar h^{-1}
        Z     = Syl^{-1}(K + K^H),   Syl(X) = h X + X h
        a_bar = Ubar h^{-1} + a Z

    Both ``h^{-1}`` and ``Syl^{-1}`` are applied in the eigenbasis ``h = V diag(sig) V^H``:
    ``Syl^{-1}(Y) = V ((V^H Y V) / (sig_i + sig_j)) V^H``, so with ``W = u_p V``
    (the left singular vectors of a), ``T = Ubar V``::

        Kt    = V^H Hbar V - (W^H T) diag(1/sig)
        Zt    = (Kt + Kt^H) / (sig_i + sig_j)
        a_bar = (T diag(1/sig) + W diag(sig) Zt) V^H

    returned conjugated (JAX convention). ``sig`` are a's singular values and ``V``
    its right singular vectors: pass them as ``h_eig=(sig, V)`` (e.g. from the SVD
    that produced the polar factors, or ``jaxmg.syevd(h)``) to stay fully
    distributed. Without ``h_eig`` they come from ``jnp.linalg.eigh(h)`` on a
    *replicated* copy of ``h`` (a gather of the (N, N) matrix onto every device).

    Args:
      a: (M, N) input; u_p: (M, N); h: (N, N).
      u_p_bar, h_bar: cotangents (JAX convention), or None.
      h_eig: optional ``(sig, V)``, eigenvalues (N,) and eigenvectors (N, N) of h.
      sharding: layout of the result (default: a's).

    Returns:
      (M, N) ``a_bar`` in the layout.
    """
    _check_matrix(a, "a", tall=True)
    m, n = a.shape
    _check_shape(u_p, (m, n), "u_p")
    _check_shape(h, (n, n), "h")
    _check_shape(u_p_bar, (m, n), "u_p_bar")
    _check_shape(h_bar, (n, n), "h_bar")
    sig, vv = (None, None) if h_eig is None else h_eig
    _check_shape(sig, (n,), "h_eig[0]")
    _check_shape(vv, (n, n), "h_eig[1]")
    sh = _layout(sharding, a, u_p, h)
    return _dist.call(_polar_impl, (u_p, h, u_p_bar, h_bar, sig, vv), sh)


def _polar_impl(u_p, h, u_p_bar, h_bar, sig, vv, sh):
    n = h.shape[0]
    dtype = u_p.dtype
    u_p = _place(u_p, sh)
    if sig is None:  # fallback: eigendecomposition of a replicated copy of h
        sig, vv = jnp.linalg.eigh(_place(_sym(h, sh), sh, P(None, None)))
    sig = _replicate(sig, sh).astype(jnp.finfo(dtype).dtype)
    vv = _place(vv.astype(dtype), sh)
    m = u_p.shape[0]
    inv_sig = (1 / sig).astype(dtype)
    w = _matmul(u_p, vv, sh)  # left singular vectors of a
    kt = _zeros((n, n), dtype, sh)
    t = None
    if u_p_bar is not None:
        t = _matmul(_in(u_p_bar, sh), vv, sh)
        kt = kt - _matmul(w, t, sh, adj_x=True) * _cols(inv_sig, n, sh)
    if h_bar is not None:
        kt = kt + _matmul(_matmul(vv, _in(h_bar, sh), sh, adj_x=True), vv, sh)
    ssum = _rows(sig, n, sh) + _cols(sig, n, sh)
    zt = (kt + _ct(kt, sh)) / ssum.astype(dtype)
    z = _matmul(w, _rows(sig.astype(dtype), n, sh) * zt, sh)
    if t is not None:
        z = z + t * _cols(inv_sig, m, sh)
    return jnp.conj(_matmul(z, vv, sh, adj_y=True))
