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
from . import _dist
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


# --- Cholesky factor L: a custom JVP (forward mode; JAX transposes it for reverse) ----------

@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def cholesky_lower(call: Call, a, state):
    """L (a's layout) from the saved factor; derivatives with respect to ``a``.

    L' = L Phi(L^-1 sym(A') L^-H), with Phi taking the lower triangle and half the diagonal
    and sym(A') = (A' + A'^H) / 2 (the convention of ``jnp.linalg.cholesky``): triangular
    inverse and products, all distributed (:mod:`._dist`); linear in A', so reverse mode is
    its transpose, and L itself is this function, so every order is available.
    """
    return cholesky_ops.lower(call, state)


def _cholesky_jvp(call, primals, tangents):
    a, state = primals
    a_dot, _ = tangents
    lower = cholesky_lower(call, a, state)
    a_dot = _dist.placed_tangent(a, a_dot, call.layout.out_spec, call.grid.mesh)
    if a_dot is None:
        return lower, jnp.zeros_like(lower)
    layout = _sharding(call)
    a_dot = _dist.sym_part(a_dot, like=layout)
    inverse = _dist.tri_inv(lower, lower=True, like=layout)
    x = _dist.matmul(_dist.matmul(inverse, a_dot, layout), inverse, layout, adj_y=True)
    phi = 0.5 * (_dist.tril(x, 0, like=layout) + _dist.tril(x, -1, like=layout))
    return lower, _dist.matmul(lower, phi, layout)


cholesky_lower.defjvp(_cholesky_jvp, symbolic_zeros=True)


# --- Eigen-, singular value and polar decompositions: outputs computed once -----------------

def _decomposition(op, rule):
    """``f(call, *matrices)`` = ``op(call, *matrices)``, with a custom VJP: the backward pass
    applies ``rule(call, outputs, cotangents, matrices)`` (cotangents None where zero) and
    returns each matrix's cotangent in that matrix's layout."""

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def f(call: Call, *matrices):
        return op(call, *matrices)

    def fwd(call, *matrices):
        outputs = op(call, *matrices)
        return outputs, (outputs, matrices)

    def bwd(call, residuals, cotangents):
        outputs, matrices = residuals
        bars = rule(call, outputs, tuple(_ct(c) for c in cotangents), matrices)
        return tuple(_like(bar, m) for bar, m in zip(bars, matrices))

    f.defvjp(fwd, bwd)
    return f


def _eigh_rule(call, outputs, cts, matrices):
    (w, v, _), (w_bar, v_bar, _) = outputs, cts
    return (rules.eigh_vjp(w, v, w_bar, v_bar, sharding=_sharding(call)),)


def _sygvd_rule(call, outputs, cts, matrices):
    (w, v, _), (w_bar, v_bar, _) = outputs, cts
    return rules.sygvd_vjp(*matrices, w, v, w_bar, v_bar, sharding=_sharding(call))


def _svd_rule(full_matrices, call, outputs, cts, matrices):
    (u, s, vh, _), (u_bar, s_bar, vh_bar, _) = outputs, cts
    return (rules.svd_vjp(matrices[0], u, s, vh, u_bar, s_bar, vh_bar, full_matrices=full_matrices,
                          sharding=_sharding(call)),)


def _polar_rule(call, outputs, cts, matrices):
    (u_p, h, _), (u_bar, h_bar, _) = outputs, cts
    return (rules.polar_vjp(matrices[0], u_p, h, u_bar, h_bar, sharding=_sharding(call)),)


#: (w, v, status) of Hermitian ``a``.
syevd = _decomposition(eigh.syevd, _eigh_rule)
#: (w, v, status) of A v = w B v.
sygvd = _decomposition(eigh.sygvd, _sygvd_rule)
#: (u_p, h, status) of ``a``.
polar_decomposition = _decomposition(polar.polar, _polar_rule)
_GESVD = {
    full: _decomposition(functools.partial(svd.gesvd, full_matrices=full), functools.partial(_svd_rule, full))
    for full in (False, True)
}


def gesvd(call: Call, full_matrices: bool, a):
    """(u, s, vh, status) of ``a``."""
    return _GESVD[bool(full_matrices)](call, a)


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
