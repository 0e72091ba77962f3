"""Derivative rules of the factorisations whose outputs are matrices, and of least squares.

Every rule is a custom JVP (forward mode), written with products in the computation's layout
(:mod:`.tangents`, :mod:`._dist`): on the distributed route nothing is gathered. Each JVP is
linear in the input tangents, so JAX transposes it for reverse mode, and as each primal inside a
rule is itself differentiable, derivatives of every order come from the one rule (as in
``jax/_src/lax/linalg.py``). Tangents are placed in the outputs' layout on the way in; integer
outputs (status) get float0 tangents. ``kernels`` (the family's kernels of
``jaxmg.kernels.families``, with their plan) is a static argument of every rule.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ..kernels import status as _status, two_stage
from . import _dist, logdet, solves, tangents


def _tangent(kernels, x, x_dot):
    """``x``'s tangent in the outputs' layout, or None where ``x`` is not differentiated."""
    return _dist.placed_tangent(x, x_dot, kernels.plan.outputs)


def _no_tangent(status):
    """The tangent of an integer output (float0, typed like the output: inside a shard_map it
    varies over the same axes)."""
    return jax.custom_derivatives.zero_from_primal(status)


def _zeros(outputs):
    """Zero tangents for ``outputs`` (float0 for integer ones)."""
    return tuple(_no_tangent(x) if jnp.issubdtype(x.dtype, jnp.integer) else jnp.zeros_like(x) for x in outputs)


# --- Cholesky factor L: a custom JVP (forward mode; JAX transposes it for reverse) ----------


def _lower(kernels, state):
    """L (a's layout) from the saved factor; derivatives with respect to ``a``.

    L' = L Phi(L^-1 H(A') L^-H), with Phi taking the lower triangle and half the diagonal
    and H(A') = tril(A', -1) + tril(A', -1)^H + Re diag(A') the Hermitian matrix read from
    the lower triangle (the exact derivative of what is computed, which reads only that
    triangle): L^-1 on both sides by two triangular solves (over a layout, the distributed
    triangular inverse and products, :func:`._dist.tri_sandwich`); linear in A',
    so reverse mode is its transpose, and L itself is this function, so every order is available.
    """
    return kernels.lower(state)


def _lower_tangent(kernels, a, state, lower, a_dot):
    layout = kernels.plan.outputs
    a_dot = _dist.lower_read(a_dot, like=layout)
    x = _dist.tri_sandwich(lower, a_dot, like=layout)  # L^-1 H(A') L^-H
    phi = 0.5 * (_dist.tril(x, 0, like=layout) + _dist.tril(x, -1, like=layout))
    return _dist.matmul(lower, phi, layout)


cholesky_lower = logdet.from_saved_factor(_lower, _lower_tangent, read=_tangent)


# --- LU's packed factor: a custom JVP along a (the factor's own state is not differentiated) ---


def _packed(kernels, state):
    """LU's packed factor (``LUKernels.packed``) from the saved state; derivatives with respect to
    ``a``, by the kernels' ``packed_tangent`` (on the local and batch routes that of
    ``jax.scipy.linalg.lu_factor``: ``X = L^-1 P a' U^-1``, ``L' = L stril(X)``, ``U' = triu(X) U``),
    linear in ``a'`` (reverse mode is its transpose) and built from the factor itself (every order)."""
    return kernels.packed(state)


def _packed_tangent(kernels, a, state, packed, a_dot):
    return kernels.packed_tangent(state, packed, a_dot)


lu_packed = logdet.from_saved_factor(_packed, _packed_tangent)


# --- Eigen-, singular value and polar decompositions: one JVP each ---------------------------


def _decomposition(op, formula):
    """``f(kernels, *matrices)`` = ``op(kernels, *matrices)`` (outputs ending with status), with a
    custom JVP: ``formula(kernels, outputs, tangents)`` maps the outputs and the matrices'
    tangents (in the outputs' layout; None where zero; NaN where the status is not 0) to the
    tangents of the real outputs."""

    @functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
    def f(kernels, *matrices):
        return op(kernels, *matrices)

    def jvp(kernels, primals, tangents_in):
        outputs = f(kernels, *primals)
        dots = [_tangent(kernels, x, d) for x, d in zip(primals, tangents_in)]
        if all(d is None for d in dots):
            return outputs, _zeros(outputs)
        # a failed decomposition's derivatives are NaN: the input tangents are masked by its
        # status (reverse mode: the input cotangent, in the pass that places it)
        dots = [None if d is None else _status.masked_tangent(outputs[-1], d) for d in dots]
        return outputs, tuple(formula(kernels, outputs, dots)) + (_no_tangent(outputs[-1]),)

    f.defjvp(jvp, symbolic_zeros=True)
    return f


def _syevd_formula(kernels, outputs, dots):
    w, v, _ = outputs
    return tangents.eigh_jvp(w, v, dots[0], kernels.plan.outputs)


def _sygvd_formula(kernels, outputs, dots):
    w, v, _ = outputs
    return tangents.sygvd_jvp(w, v, *dots, sh=kernels.plan.outputs)


def _svd_formula(full_matrices, kernels, outputs, dots):
    u, s, vh, _ = outputs
    return tangents.svd_jvp(u, s, vh, dots[0], kernels.plan.outputs, full_matrices=full_matrices)


def _polar_formula(kernels, outputs, dots):
    """(u_p', h') from h's eigendecomposition ``h = vv diag(sig) vv^H`` (a's singular values and
    right singular vectors) that the kernel computed with the factors, and the eigendecomposition's
    own tangents (the eigh rule along h'), for the derivatives of higher order."""
    u_p, _, sig, vv, _ = outputs
    sh = kernels.plan.outputs
    u_p_dot, h_dot = tangents.polar_jvp(u_p, sig, vv, dots[0], sh)
    return (u_p_dot, h_dot, *tangents.eigh_jvp(sig, vv, h_dot, sh, full=True))


@two_stage.eigh_of_lower.defjvp
def _two_stage_eigh_jvp(band, stage2, stage3, primals, tangents_in):
    """The two-stage eigensolver's derivative (``jaxmg.kernels.two_stage.eigh``): the eigh rule,
    matrix by matrix of a stack, the exact derivative of the eigendecomposition of the Hermitian
    matrix read from the lower triangle."""
    (a,), (a_dot,) = primals, tangents_in
    w, v = two_stage.eigh_of_lower(a, band, stage2, stage3)
    rule = functools.partial(tangents.eigh_jvp, sh=None)
    return (w, v), jnp.vectorize(rule, signature="(n),(n,n),(n,n)->(n),(n,n)")(w, v, a_dot)


def _entered(method):
    """``method`` of the decomposition kernels on matrices placed in the computation's layout."""

    def op(kernels, *matrices):
        return method(kernels, *(kernels.plan.enter(x) for x in matrices))

    return op


#: (w, v, status) of Hermitian ``a``.
syevd = _decomposition(_entered(lambda k, a: k.syevd(a)), _syevd_formula)
#: (w, v, status) of A v = w B v; derivatives with respect to both.
sygvd = _decomposition(_entered(lambda k, a, b: k.sygvd(a, b)), _sygvd_formula)
#: (u_p, h, sig, vv, status) of ``a``: the polar factors and h's eigendecomposition
#: ``h = vv diag(sig) vv^H`` (from the SVD where the polar factors are computed from one).
polar_with_eigen = _decomposition(_entered(lambda k, a: k.polar(a, eigen=True)), _polar_formula)
_GESVD = {
    full: _decomposition(_entered(lambda k, a, full=full: k.gesvd(a, full)), functools.partial(_svd_formula, full))
    for full in (False, True)
}


def gesvd(kernels, full_matrices: bool, a):
    """(u, s, vh, status) of ``a``."""
    return _GESVD[bool(full_matrices)](kernels, a)


def _differentiated_through(op, factored, kept: tuple):
    """``f(kernels, a)`` = ``op(kernels, a)``, a decomposition computed without what only its
    derivative needs, differentiated as the outputs ``kept`` (indices, the status last) of
    ``factored(kernels, a)``, the decomposition that computes it too (itself differentiable, at
    every order): a derivative runs ``factored``'s one decomposition, never ``op``'s beside it."""

    def pick(outputs):
        return tuple(outputs[i] for i in kept)

    @functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
    def f(kernels, a):
        return op(kernels, a)

    def jvp(kernels, primals, tangents_in):
        (a,), (a_dot,) = primals, tangents_in
        if isinstance(a_dot, jax.custom_derivatives.SymbolicZero):
            outputs = f(kernels, a)
            return outputs, _zeros(outputs)
        outputs, dots = jax.jvp(functools.partial(factored, kernels), (a,), (a_dot,))
        return pick(outputs), pick(dots)

    f.defjvp(jvp, symbolic_zeros=True)
    return f


#: (u_p, h, status) of ``a``; its derivative runs :data:`polar_with_eigen` (the polar factors
#: and h's eigendecomposition, computed once), not the polar decomposition and a second
#: decomposition of h.
polar_decomposition = _differentiated_through(_entered(lambda k, a: k.polar(a)), polar_with_eigen, (0, 1, 4))
#: (s, status) of ``a``, without the singular vectors (the device's own solver computes none);
#: their tangent, Re diag(U^H A' V), from the full decomposition, which only a derivative needs.
singular_values = _differentiated_through(
    _entered(lambda k, a: k.gesvd(a, False, compute_uv=False)[1::2]), _GESVD[False], (1, 3)
)


# --- QR and least squares --------------------------------------------------------------------


def _qr_outputs(kernels, state):
    """(q, r) in the outputs' layout from the saved QR factor; derivatives with respect to ``a``."""
    return kernels.q(state), kernels.r(state)


qr_outputs = logdet.from_saved_factor(
    _qr_outputs, lambda k, a, state, qr, a_dot: tangents.qr_jvp(*qr, a_dot=a_dot, sh=k.plan.outputs), read=_tangent
)


def _qr_triangle(kernels, state):
    """R alone (outputs' layout) from the saved QR factor, Q not formed; derivatives with respect
    to ``a``: R's tangent is the whole QR's (:func:`.tangents.qr_jvp`), whose Q, read from the same
    factor, only the derivative forms (as JAX's ``qr(mode="r")``)."""
    return kernels.r(state)


def _qr_triangle_tangent(kernels, a, state, r, a_dot):
    q, _ = qr_outputs(kernels, a, state)
    return tangents.qr_jvp(q, r, a_dot=a_dot, sh=kernels.plan.outputs)[1]


qr_triangle = logdet.from_saved_factor(_qr_triangle, _qr_triangle_tangent, read=_tangent)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def least_squares(kernels, spec, a, state, b):
    """argmin_x ||A x - b|| from the saved QR factor; b, x in layout ``spec`` (None: as they are)."""
    return kernels.solve(state, b, spec)


def _lstsq_jvp(kernels, spec, primals, tangents_in):
    """x = (A^H A)^-1 A^H b, so with r = b - A x:  x' = (A^H A)^-1 (A'^H r + A^H (b' - A' x)).

    (A^H A)^-1 is applied by :func:`normal_solve` with the saved factor (R^-1 R^-H, two
    triangular solves, never a refactorisation) and the products are distributed: the whole
    tangent is linear and JAX transposes it (reverse mode: one more such solve). The vectors are
    divided by s (:func:`_scale`, a power of two near ||A||) before the products with A and the
    solve multiplies by it, so that every intermediate, forward and transposed, lies within one
    factor of s of the result (b's cotangent A (A^H A)^-1 x_bar is formed as A (s (A^H A)^-1
    x_bar) / s, never through (A^H A)^-1 x_bar ~ x_bar / ||A||^2, which under- or overflows in
    float32 beyond ||A|| ~ 1e+-19)."""
    _, state, b = primals
    x, placed = _solution_and_tangents(least_squares, kernels, spec, primals, tangents_in)
    if placed is None:
        return x, jnp.zeros_like(x)
    a, a_dot, b_dot, layout, s = placed

    def adjoint(m, y):  # m^H y
        return _dist.matvec(m, y, layout, "C")

    rhs = 0
    if a_dot is not None:
        residual = b - _dist.matvec(a, x, layout)
        rhs = adjoint(a_dot, residual / s) - adjoint(a, _dist.matvec(a_dot, x, layout) / s)
    if b_dot is not None:
        rhs = rhs + adjoint(a, b_dot / s)
    return x, normal_solve(kernels, spec, a, state, rhs, s)


def _solution_and_tangents(solve, kernels, spec, primals, tangents_in):
    """(x, placed) of a least-squares rule: x = ``solve(kernels, spec, a, state, b)`` and placed =
    (a in the computation's layout, a's tangent, b's tangent, b's layout, the scale s of
    :func:`_scale`), a tangent None where it is zero; placed is None where both are. A donated
    ``a`` (None) is rebuilt from the saved factor (:func:`_rebuilt`) for the products of b's
    tangent."""
    a, state, b = primals
    x = solve(kernels, spec, a, state, b)
    a_dot, _, b_dot = tangents_in
    plan = kernels.plan
    layout = solves.rhs_layout(plan, spec)
    a_dot = _dist.placed_tangent(a, a_dot, plan.layout)
    b_dot = _dist.placed_tangent(b, b_dot, layout)
    if a_dot is None and b_dot is None:
        return x, None
    s = _scale(kernels, state, x)
    if a is None:  # donated (QR(a, donate=True)): b alone has a tangent
        return x, (_rebuilt(kernels, state), None, b_dot, layout, s)
    return x, (plan.enter(a), a_dot, b_dot, layout, s)


def _rebuilt(kernels, state):
    """The factored matrix ``Q R`` from the saved factor, in the computation's layout and without
    a derivative: the products of a derivative with respect to ``b`` once ``a`` was donated (one
    more M x N matrix, made only for that derivative)."""
    layout = kernels.plan.layout
    return jax.lax.stop_gradient(_dist.matmul(kernels.q(state), kernels.r(state), layout))


def _scale(kernels, state, like) -> jax.Array:
    """s, a power of two in (d/2, d] with d the largest |R_ii| of the saved factor (within a
    factor sqrt(N) of ||A||_2), 1 where d is 0 or not finite; one per matrix of a stack, shaped to
    broadcast against ``like`` (a right-hand side or solution of the same stack). Scaling by a
    power of two is exact: it moves magnitudes, never digits. Not differentiated (a constant)."""
    d = jnp.max(jnp.abs(kernels.diagonal(state)), axis=-1)
    found = (d > 0) & jnp.isfinite(d)
    mantissa, _ = jnp.frexp(jnp.where(found, d, 1))  # d = mantissa 2^e, mantissa in [1/2, 1)
    # d / (2 mantissa) = 2^(e-1) exactly (a power of two is representable, division rounds
    # correctly); jnp.ldexp is not used: its batching rule fails on a stack split on Explicit axes
    s = jnp.where(found, d / (2 * mantissa), 1).astype(d.dtype)
    s = jax.lax.stop_gradient(s)
    return s.reshape(s.shape + (1,) * (jnp.ndim(like) - s.ndim))


def normal_solve(kernels, spec, a, state, y, s):
    """s (A^H A)^-1 y with the saved factor, as R^-1 R^-H (s y), differentiable and transposable
    in ``y`` (and ``a``, given in the computation's layout); ``s`` from :func:`_scale`. Its
    intermediates are s y, about y and about y / s: with y about s times the result (the callers
    divide by s before their products with A), none under- or overflows where the result and
    the derivative are representable."""
    solve = lambda r: kernels.normal_solve(state, s * r, spec)  # noqa: E731
    layout = solves.rhs_layout(kernels.plan, spec)

    def normal(v):  # A^H A v / s, the operator that ``solve`` inverts
        return _dist.matvec(a, _dist.matvec(a, v, layout), layout, "C") / s

    dtype = kernels.plan.dtype
    transpose = solves.hermitian_transpose_solve(solve, dtype)
    return jax.lax.custom_linear_solve(
        normal,
        y,
        solve=solves.placed_solve(solve, layout),
        transpose_solve=solves.placed_solve(transpose, layout),
        symmetric=not jnp.issubdtype(dtype, jnp.complexfloating),
    )


least_squares.defjvp(_lstsq_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def minimum_norm(kernels, spec, a, state, b):
    """The x of least norm with ``A^H x = b`` from the saved QR factor of the tall ``A = Q R`` of
    full column rank (a wide matrix's conjugate transpose): ``x = Q R^-H b``, backward stable (no
    product with A^H A). b, x in layout ``spec`` (None: as they are)."""
    return kernels.minimum_norm(state, b, spec)


def _minimum_norm_jvp(kernels, spec, primals, tangents_in):
    """x = A y with y = (A^H A)^-1 b, so  x' = A' y + A (A^H A)^-1 (b' - A'^H x - A^H A' y).

    (A^H A)^-1 is :func:`normal_solve` with the saved factor and the scale s of :func:`_scale`
    (linear and transposable, so JAX transposes the tangent for reverse mode: b's cotangent is
    s (A^H A)^-1 A^H (x_bar / s), with no intermediate out of range where it is in range); every
    primal inside is differentiable again."""
    _, state, b = primals
    x, placed = _solution_and_tangents(minimum_norm, kernels, spec, primals, tangents_in)
    if placed is None:
        return x, jnp.zeros_like(x)
    a, a_dot, b_dot, layout, s = placed
    rhs, x_dot = 0, 0
    if a_dot is not None:
        x_dot = _dist.matvec(a_dot, normal_solve(kernels, spec, a, state, b, s) / s, layout)
        rhs = -_dist.matvec(a_dot, x, layout, "C") - _dist.matvec(a, x_dot, layout, "C")
    if b_dot is not None:
        rhs = rhs + b_dot
    return x, x_dot + _dist.matvec(a, normal_solve(kernels, spec, a, state, rhs, s), layout) / s


minimum_norm.defjvp(_minimum_norm_jvp, symbolic_zeros=True)
