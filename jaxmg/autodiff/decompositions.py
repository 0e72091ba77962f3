"""Custom VJPs of the factorisations whose outputs are matrices, and of least squares.

Each primal runs the sharded operation once; its backward pass applies the formulas of
:mod:`.matrix_functions` (distributed products only, nothing gathered) to the saved
outputs, or, for least squares, one more solve with the saved QR factor. Cotangents
come back in the layout of their primal input. Integer outputs (status) carry no
derivative.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from .. import _sharded
from .._call import Call
from ..ops import eigh, polar, products, qr, svd
from ..ops import cholesky as cholesky_ops
from . import matrix_functions as rules


def _like(x, like):
    """``x`` laid out like ``like`` (cotangents keep their primal's layout)."""
    sharding = getattr(jax.typeof(like), "sharding", None)
    if sharding is None or sharding.mesh.empty:
        return x
    return _sharded.place(x, sharding.spec, sharding.mesh)


def _ct(ct):
    """A cotangent, or None for a zero one (the formulas take None as zero)."""
    if ct is None or type(ct).__name__ == "Zero" or getattr(ct, "dtype", None) == jax.dtypes.float0:
        return None
    return ct


def _sharding(call: Call) -> NamedSharding:
    """The layout of the matrices the formulas combine: a's, as the caller holds it."""
    return NamedSharding(call.grid.mesh, call.layout.out_spec)


# --- Cholesky factor L -----------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def cholesky_lower(call: Call, a, state):
    """L (a's layout) from the saved factor; derivative with respect to ``a``."""
    return cholesky_ops.lower(call, state)


def _cholesky_fwd(call, a, state):
    lower = cholesky_ops.lower(call, state)
    return lower, (lower, a)


def _cholesky_bwd(call, residuals, lower_bar):
    lower, a = residuals
    if a is None:
        return None, None
    return _like(rules.cholesky_vjp(lower, _ct(lower_bar), sharding=_sharding(call)), a), None


cholesky_lower.defvjp(_cholesky_fwd, _cholesky_bwd)


# --- Hermitian eigenproblems -----------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def syevd(call: Call, a):
    """(w, v, status) of Hermitian ``a``."""
    return eigh.syevd(call, a)


def _syevd_fwd(call, a):
    w, v, status = eigh.syevd(call, a)
    return (w, v, status), (w, v, a)


def _syevd_bwd(call, residuals, cts):
    w, v, a = residuals
    w_bar, v_bar, _ = cts
    return (_like(rules.eigh_vjp(w, v, _ct(w_bar), _ct(v_bar), sharding=_sharding(call)), a),)


syevd.defvjp(_syevd_fwd, _syevd_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def sygvd(call: Call, a, b):
    """(w, v, status) of A v = w B v."""
    return eigh.sygvd(call, a, b)


def _sygvd_fwd(call, a, b):
    w, v, status = eigh.sygvd(call, a, b)
    return (w, v, status), (w, v, a, b)


def _sygvd_bwd(call, residuals, cts):
    w, v, a, b = residuals
    w_bar, v_bar, _ = cts
    a_bar, b_bar = rules.sygvd_vjp(a, b, w, v, _ct(w_bar), _ct(v_bar), sharding=_sharding(call))
    return _like(a_bar, a), _like(b_bar, b)


sygvd.defvjp(_sygvd_fwd, _sygvd_bwd)


# --- SVD and polar ---------------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def gesvd(call: Call, full_matrices: bool, a):
    """(u, s, vh, status) of ``a``."""
    return svd.gesvd(call, a, full_matrices=full_matrices)


def _gesvd_fwd(call, full_matrices, a):
    u, s, vh, status = svd.gesvd(call, a, full_matrices=full_matrices)
    return (u, s, vh, status), (u, s, vh, a)


def _gesvd_bwd(call, full_matrices, residuals, cts):
    u, s, vh, a = residuals
    u_bar, s_bar, vh_bar, _ = cts
    a_bar = rules.svd_vjp(a, u, s, vh, _ct(u_bar), _ct(s_bar), _ct(vh_bar), full_matrices=full_matrices,
                          sharding=_sharding(call))
    return (_like(a_bar, a),)


gesvd.defvjp(_gesvd_fwd, _gesvd_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def polar_decomposition(call: Call, a):
    """(u_p, h, status) of ``a``."""
    return polar.polar(call, a)


def _polar_fwd(call, a):
    u_p, h, status = polar.polar(call, a)
    return (u_p, h, status), (u_p, h, a)


def _polar_bwd(call, residuals, cts):
    u_p, h, a = residuals
    u_bar, h_bar, _ = cts
    a_bar = rules.polar_vjp(a, u_p, h, _ct(u_bar), _ct(h_bar), sharding=_sharding(call))
    return (_like(a_bar, a),)


polar_decomposition.defvjp(_polar_fwd, _polar_bwd)


# --- QR and least squares --------------------------------------------------------------------

@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def qr_outputs(call: Call, a, state):
    """(q, r) in a's layout from the saved QR factor; derivative with respect to ``a``."""
    return qr.q(call, state), qr.r(call, state)


def _qr_fwd(call, a, state):
    q, r = qr.q(call, state), qr.r(call, state)
    return (q, r), (q, r, a)


def _qr_bwd(call, residuals, cts):
    q, r, a = residuals
    q_bar, r_bar = cts
    if a is None:
        return None, None
    return _like(rules.qr_vjp(a, q, r, _ct(q_bar), _ct(r_bar), sharding=_sharding(call)), a), None


qr_outputs.defvjp(_qr_fwd, _qr_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def least_squares(call: Call, spec, n: int, a, state, b):
    """argmin_x ||A x - b|| (x has ``n`` rows) from the saved QR factor; b, x in layout ``spec``."""
    return qr.solve(call, state, b, spec, (n,) + b.shape[1:])


def _lstsq_fwd(call, spec, n, a, state, b):
    x = least_squares(call, spec, n, a, state, b)
    return x, (a, state, b, x)


def _lstsq_bwd(call, spec, n, residuals, x_bar):
    """JAX's cotangent convention is the conjugate of the adjoint one used here:
    with z = (A^H A)^-1 conj(x_bar): b_bar = conj(A z), a_bar = conj(r z^H - A z x^H)."""
    a, state, b, x = residuals
    z = qr.normal_solve(call, state, jnp.conj(x_bar), spec)
    az = products.matvec(call, a, z, spec, spec)
    b_bar = jnp.conj(az)
    if a is None:
        return None, None, b_bar
    r = b - products.matvec(call, a, x, spec, spec)
    shape = a.shape
    a_bar = products.outer(call, r, z, spec, spec, shape) - products.outer(call, az, x, spec, spec, shape)
    return _like(jnp.conj(a_bar), a), None, b_bar


least_squares.defvjp(_lstsq_fwd, _lstsq_bwd)
