"""Derivative rules of the factorisations whose outputs are matrices, and of least squares.

Every rule is a custom JVP (forward mode), written with distributed products only
(:mod:`.tangents`, :mod:`._dist`, :mod:`jaxmg.ops.products`): nothing is gathered, on any
backend. Each JVP is linear in the input tangents, so JAX transposes it for reverse mode,
and as each primal inside a rule is itself differentiable, derivatives of every order come
from the one rule (as in ``jax/_src/lax/linalg.py``). Tangents are placed in the call's
layout on the way in; integer outputs (status) get float0 tangents.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from .. import _backend, _sharded
from .._call import Call
from ..ops import eigh, polar, products, qr, svd
from ..ops import cholesky as cholesky_ops
from . import _dist, solves, tangents


def _sharding(call: Call) -> NamedSharding:
    """The layout of the matrices the formulas combine: a's, as the caller holds it."""
    return NamedSharding(call.grid.mesh, call.layout.out_spec)


def _tangent(call: Call, x, x_dot):
    """``x``'s tangent in a's caller layout, or None where ``x`` is not differentiated."""
    return _dist.placed_tangent(x, x_dot, call.layout.out_spec, call.grid.mesh)


def _no_tangent(status):
    """The tangent of an integer output."""
    return np.zeros(jnp.shape(status), jax.dtypes.float0)


def _zeros(outputs):
    """Zero tangents for ``outputs`` (float0 for integer ones)."""
    return tuple(_no_tangent(x) if jnp.issubdtype(x.dtype, jnp.integer) else jnp.zeros_like(x) for x in outputs)


# --- Cholesky factor L: a custom JVP (forward mode; JAX transposes it for reverse) ----------

@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def cholesky_lower(call: Call, a, state):
    """L (a's layout) from the saved factor; derivatives with respect to ``a``.

    L' = L Phi(L^-1 H(A') L^-H), with Phi taking the lower triangle and half the diagonal
    and H(A') = tril(A', -1) + tril(A', -1)^H + Re diag(A') the Hermitian matrix read from
    the lower triangle (the exact derivative of what is computed, which reads only that
    triangle): triangular
    inverse and products, all distributed (:mod:`._dist`); linear in A', so reverse mode is
    its transpose, and L itself is this function, so every order is available.
    """
    return cholesky_ops.lower(call, state)


def _cholesky_jvp(call, primals, tangents):
    a, state = primals
    a_dot, _ = tangents
    lower = cholesky_lower(call, a, state)
    a_dot = _tangent(call, a, a_dot)
    if a_dot is None:
        return lower, jnp.zeros_like(lower)
    layout = _sharding(call)
    a_dot = _dist.lower_read(a_dot, like=layout)
    inverse = _dist.tri_inv(lower, lower=True, like=layout)
    x = _dist.matmul(_dist.matmul(inverse, a_dot, layout), inverse, layout, adj_y=True)
    phi = 0.5 * (_dist.tril(x, 0, like=layout) + _dist.tril(x, -1, like=layout))
    return lower, _dist.matmul(lower, phi, layout)


cholesky_lower.defjvp(_cholesky_jvp, symbolic_zeros=True)


# --- Eigen-, singular value and polar decompositions: one JVP each ---------------------------

def _decomposition(op, formula):
    """``f(call, *matrices)`` = ``op(call, *matrices)`` (outputs ending with status), with a
    custom JVP: ``formula(call, outputs, tangents)`` maps the outputs and the matrices'
    tangents (in a's layout; None where zero) to the tangents of the real outputs."""

    @functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
    def f(call: Call, *matrices):
        return op(call, *matrices)

    def jvp(call, primals, tangents_in):
        outputs = f(call, *primals)
        dots = [_tangent(call, x, d) for x, d in zip(primals, tangents_in)]
        if all(d is None for d in dots):
            return outputs, _zeros(outputs)
        return outputs, tuple(formula(call, outputs, dots)) + (_no_tangent(outputs[-1]),)

    f.defjvp(jvp, symbolic_zeros=True)
    return f


def _syevd_formula(call, outputs, dots):
    w, v, _ = outputs
    return tangents.eigh_jvp(w, v, dots[0], _sharding(call))


def _sygvd_formula(call, outputs, dots):
    w, v, _ = outputs
    return tangents.sygvd_jvp(w, v, *dots, _sharding(call))


def _svd_formula(full_matrices, call, outputs, dots):
    u, s, vh, _ = outputs
    return tangents.svd_jvp(u, s, vh, dots[0], _sharding(call), full_matrices=full_matrices)


def _polar_formula(call, outputs, dots):
    """h's eigendecomposition (sig, V: a's singular values and right singular vectors) comes
    from the distributed syevd of h, differentiable itself (higher orders)."""
    u_p, h, _ = outputs
    sig, vv, _ = syevd(_eigh_call(call, h.shape), h)
    return tangents.polar_jvp(u_p, sig, vv, dots[0], _sharding(call))


def _eigh_call(call: Call, shape) -> Call:
    """A call of the eigh family on an (N, N) matrix in ``call``'s layout and backend choice."""
    backend = "portable" if call.backend == "portable" else "auto"
    return dataclasses.replace(call, family="eigh", shape=tuple(shape),
                               kernels=_backend.select("eigh", backend, call.grid.mesh))


#: (w, v, status) of Hermitian ``a``.
syevd = _decomposition(eigh.syevd, _syevd_formula)
#: (w, v, status) of A v = w B v; derivatives with respect to both.
sygvd = _decomposition(eigh.sygvd, _sygvd_formula)
#: (u_p, h, status) of ``a``.
polar_decomposition = _decomposition(polar.polar, _polar_formula)
_GESVD = {
    full: _decomposition(functools.partial(svd.gesvd, full_matrices=full), functools.partial(_svd_formula, full))
    for full in (False, True)
}


def gesvd(call: Call, full_matrices: bool, a):
    """(u, s, vh, status) of ``a``."""
    return _GESVD[bool(full_matrices)](call, a)


# --- QR and least squares --------------------------------------------------------------------

@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def qr_outputs(call: Call, a, state):
    """(q, r) in a's layout from the saved QR factor; derivatives with respect to ``a``."""
    return qr.q(call, state), qr.r(call, state)


def _qr_jvp(call, primals, tangents_in):
    a, state = primals
    q, r = qr_outputs(call, a, state)
    a_dot = _tangent(call, a, tangents_in[0])
    if a_dot is None:
        return (q, r), (jnp.zeros_like(q), jnp.zeros_like(r))
    return (q, r), tangents.qr_jvp(q, r, a_dot, _sharding(call))


qr_outputs.defjvp(_qr_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def least_squares(call: Call, spec, n: int, a, state, b):
    """argmin_x ||A x - b|| (x has ``n`` rows) from the saved QR factor; b, x in layout ``spec``."""
    return qr.solve(call, state, b, spec, (n,) + b.shape[1:])


def _lstsq_jvp(call, spec, n, primals, tangents_in):
    """x = (A^H A)^-1 A^H b, so with r = b - A x:  x' = (A^H A)^-1 (A'^H r + A^H (b' - A' x)).

    (A^H A)^-1 is applied by ``jax.lax.custom_linear_solve`` with the saved factor (R^-1 R^-H,
    two triangular solves, never a refactorisation), and the products are distributed: the
    whole tangent is linear and JAX transposes it (reverse mode: one more such solve)."""
    a, state, b = primals
    a_dot, _, b_dot = tangents_in
    x = least_squares(call, spec, n, a, state, b)
    mesh = call.grid.mesh
    a_dot = _dist.placed_tangent(a, a_dot, call.grid.spec, mesh)
    b_dot = _dist.placed_tangent(b, b_dot, spec, mesh)
    if a_dot is None and b_dot is None:
        return x, jnp.zeros_like(x)
    if a is None:
        raise ValueError("least_squares: a was donated (QR(a, donate=True)), so no derivative can be "
                         "taken; keep a (donate=False) to differentiate the solution.")

    def adjoint(m, y):  # m^H y
        return products.matvec(call, m, y, spec, spec, "C")

    rhs = 0
    if a_dot is not None:
        residual = b - products.matvec(call, a, x, spec, spec)
        rhs = adjoint(a_dot, residual) - adjoint(a, products.matvec(call, a_dot, x, spec, spec))
    if b_dot is not None:
        rhs = rhs + adjoint(a, b_dot)
    return x, _normal_solve(call, spec, a, state, rhs)


def _normal_solve(call, spec, a, state, y):
    """(A^H A)^-1 y with the saved factor, differentiable and transposable in ``y`` (and ``a``)."""
    solve = lambda r: qr.normal_solve(call, state, r, spec)  # noqa: E731

    def normal(v):
        return products.matvec(call, a, products.matvec(call, a, v, spec, spec), spec, spec, "C")

    transpose = solves.hermitian_transpose_solve(solve, call.dtype)
    with _sharded.entered(call.grid.mesh):
        return jax.lax.custom_linear_solve(normal, y, solve=solves.placed_solve(solve, spec, call.grid.mesh),
                                           transpose_solve=solves.placed_solve(transpose, spec, call.grid.mesh),
                                           symmetric=not jnp.issubdtype(call.dtype, jnp.complexfloating))


least_squares.defjvp(_lstsq_jvp, symbolic_zeros=True)
