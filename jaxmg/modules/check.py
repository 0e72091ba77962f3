"""The result check of the distributed route: every result probed before it is returned.

cuSOLVERMp factors a matrix in its own buffer, so everything the check needs of the matrix is
computed *before* the factorisation: a few products of the matrix with fixed pseudo-random
probe vectors and its norm (O(N^2) work, two to four passes over the matrix), tied ahead of the
factorisation by ``jax.lax.optimization_barrier`` (:func:`probed`), so that XLA neither keeps
the matrix (or a copy of it) alive past the factorisation nor moves the products after it.
After the engine returns, each result is tested with those vectors and products with its own
outputs only:

* a solve ``a x = b`` (potrs, lu_solve): the residual's projection on k = 2 orthonormal probes
  ``Q``, ``||(A^H Q)^H (x s) - Q^H (b s)|| = ||Q^H (A x s - b s)|| <= T N eps ||A|| ||x s||``,
  with ``s`` a probe over the right-hand sides; ``A^H Q`` is computed before the factorisation;
* least squares: the normal-equation residual along a probe ``q``,
  ``|(A^H A q)^H (x s) - (A q)^H (b s)| <= T N eps ||A|| (||A|| ||x s|| + ||b s||) ||q||``;
* a factorisation whose factor cannot be read in natural order (the modules Cholesky and LU,
  whose factor is cuSOLVERMp's own): one solve with it, ``y = F^-1 r``, tested as a solution of
  ``A y = r`` (that is ``Q^H (A - F) y``); QR: ``z = (R^H R)^-1 r`` and
  ``|(A^H A q)^H z - q^H r| <= T N eps ||A||^2 ||z|| ||q||``;
* factors that are returned, against ``A r`` computed before: ``||L (L^H r) - A r||``
  (Cholesky), ``||Q (R r) - A r||`` (QR), ``||U (H r) - A r||`` (polar),
  ``||U (s (V^H r)) - A r||`` (SVD), each against ``T N eps ||A|| ||r||`` (LAPACK's
  ``||A - factors|| / (N eps ||A||)``); eigenvectors: ``||V^H (A r) - w V^H r||`` against
  ``T N eps ||A|| ||r||`` (it is ``||(A V - V diag(w))^H r||``), generalised:
  ``||V^H (A r) - w V^H (B r)||`` against ``(||A|| + ||B|| max|w|) ||V||_F ||r||`` and
  ``||V (V^H (B r)) - r||`` (``V^H B V = I``) against ``||B|| ||V||_F^2 ||r||``; and
  ``||Q^H Q r - r|| <= T N eps ||r||`` for every factor with orthonormal columns.

``||A||`` is the Frobenius norm (an upper bound of the 2-norm, so the bound is never below
LAPACK's), N the larger dimension, eps the dtype's machine epsilon and T = :data:`THRESHOLD`.
Every norm divides the entries by the largest magnitude before squaring them, and the normal
equations' products are divided by ``||A||`` (:func:`normal_probes`): no square underflows or
overflows (a float32 matrix's do below a norm of about 1e-19 and above 1e19).

Power: a wrong result leaves a non-zero error E (a vector, or a matrix E applied to the
probe), and a fixed non-zero E is orthogonal to a random Gaussian probe with probability 0, so
one probe detects every wrong result in exact arithmetic. In floating point the tests of
returned factors measure ``||E r||`` whole (``E r`` has the size of ``||E||_F`` on average). A
solve's test sees ``||Q^H e||`` for the residual ``e``: never more than ``||e||`` (so it flags no
result that the whole-residual test, LAPACK's, passes) and about ``sqrt(k / N) ||e||`` (a
chi variable with k degrees of freedom: below ``t sqrt(k / N) ||e||`` with probability about
``t^2`` for small t, k = 2), so it flags residuals from about ``sqrt(N / k)`` times the bound
up. With ``||A||_F <= sqrt(N) ||A||_2``, a relative error d in ``x`` is flagged once
``d >~ 30 N^2 eps / sqrt(k)`` in the worst case (a flat spectrum; ``30 N^1.5 eps / sqrt(k)`` for
a matrix dominated by a few singular values): every 1e-6 error at N = 32 in float64 (the tests),
at N = 16,384 errors above about 1e-6 to 1e-8 (30 N^2 eps / sqrt(2) = 1.3e-6), and every
error of the size of the result itself at any N. The least-squares and QR-module tests project
on one probe the same way.

A result that fails a test gets the status :data:`jaxmg.kernels.status.CHECK_FAILED` and NaN
outputs, like every other failure; one that already failed keeps its status. The check is
computed on values whose derivatives are not taken (``jax.lax.stop_gradient``): derivatives
are those of the unchecked operation.

It runs on the distributed route (the process grid), by default: ``check=False`` on a call or
module, or the environment variable ``JAXMG_RESULT_CHECK=0`` for every call that does not say,
turns it off (:func:`enabled`). It costs no memory beyond a few vectors: the products are made
while the matrix is whole, before the factorisation, which then runs in place as an unchecked
one does (donated matrices too). The local and batch routes run the device's own LAPACK or
cuSOLVER, whose results are not probed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from .. import _layout, _plan, _sharded
from ..autodiff import _dist
from ..kernels import status as _status
from ..kernels.algebra import divided, scaled_norm

#: The test ratio above which a result is flagged: residual / (N eps ||A|| ...) as LAPACK's
#: test programs use 30, here with Frobenius norms (an upper bound of the 2-norm).
THRESHOLD = 30.0
#: The environment variable whose value "0" turns the check off where a call does not say.
ENVIRONMENT = "JAXMG_RESULT_CHECK"
_SEED = 0x6A61786D
_OFF = ("0", "false", "off", "no")
_ON = ("1", "true", "on", "yes", "")


def enabled(check: Optional[bool]) -> bool:
    """Whether a call's result is checked: ``check`` where given, else False where the
    environment variable :data:`ENVIRONMENT` is ``"0"`` (or "false", "off", "no"), else True
    (the check runs on the distributed route only)."""
    if check is not None:
        if not isinstance(check, (bool, np.bool_)):
            raise TypeError(
                f"check must be True, False or None (the default: on, unless {ENVIRONMENT}=0), got {check!r}."
            )
        return bool(check)
    value = os.environ.get(ENVIRONMENT, "").strip().lower()
    if value not in _OFF + _ON:
        raise ValueError(f"{ENVIRONMENT}={value!r}: set it to 0 (the check off) or 1 (on, the default).")
    return value not in _OFF


class Operator(NamedTuple):
    """A matrix as the check applies it before the factorisation: ``apply(v)`` = A v,
    ``adjoint(v)`` = A^H v (for a vector or the columns of an (n, k) array; replicated), ``norm`` =
    ||A||_F (or an upper bound of it), ``shape`` and ``dtype``: A's."""

    apply: Callable
    adjoint: Callable
    norm: jax.Array
    shape: tuple
    dtype: np.dtype

    def adjointed(self) -> Operator:
        """The operator of A^H."""
        return Operator(self.adjoint, self.apply, self.norm, self.shape[::-1], self.dtype)


class Probes(NamedTuple):
    """What the check needs of a matrix, computed before its factorisation: ``norms`` (the
    matrix's, and a pencil's) and ``vectors`` (the probes and the matrix's products with them,
    in the order of the test that reads them)."""

    norms: tuple
    vectors: tuple


def probed(plan, matrices: tuple, products: Callable[[], Probes], *, check: bool):
    """``(matrices, probes)``: ``products()`` computed from the matrices before anything else
    reads them, and the matrices tied after it by an optimization barrier (the factorisation
    then reads the barrier's outputs: XLA runs the products first, and keeps no copy of a
    matrix for them); ``probes`` is None where the call is not checked (``check`` False, or
    not the distributed route)."""
    if not (check and plan.distributed):
        return matrices, None
    return _tied(matrices, products())


@jax.custom_jvp
def _tied(matrices: tuple, probes: Probes):
    """``(matrices, probes)`` through an optimization barrier: what reads the matrices after it
    runs after the probes' products."""
    return jax.lax.optimization_barrier((matrices, probes))


@_tied.defjvp
def _tied_jvp(primals, tangents):
    """The matrices' tangents pass through untouched (the probes have none): the barrier orders
    the values only, and a barrier on a cotangent would make XLA write it out (a reverse-mode
    derivative's cotangent of the matrix is otherwise computed inside the reductions that
    consume it)."""
    matrices, probes = primals
    matrices_dot, _ = tangents
    return _tied(matrices, probes), (matrices_dot, jax.tree.map(jnp.zeros_like, probes))


def verified(plan, status, probes: Optional[Probes], tests: Callable[[Probes], Sequence[tuple]]):
    """``status``, or :data:`~jaxmg.kernels.status.CHECK_FAILED` where it is OK and one of
    ``tests(probes)`` fails; ``tests`` returns ``(residual, scale)`` pairs, each passing when
    ``residual <= THRESHOLD * N * eps * scale``. ``status`` itself where the call is not
    checked (``probes`` None)."""
    if probes is None:
        return status
    bound = THRESHOLD * max(plan.shape) * float(jnp.finfo(plan.dtype).eps)
    passed = jnp.array(True)
    for residual, scale in tests(probes):
        passed = passed & (residual <= bound * scale)  # NaN fails
    return _status.either(status, jnp.where(passed, _status.OK, _status.CHECK_FAILED))


def probe(n: int, dtype, salt: int = 0) -> jax.Array:
    """A fixed pseudo-random probe of length ``n`` and ``dtype`` (standard normal entries)."""
    real = jnp.finfo(dtype).dtype
    return jax.random.normal(jax.random.key(_SEED + salt), (n,), real).astype(dtype)


def _norm(x) -> jax.Array:
    """The 2-norm of all of ``x``'s entries, with no square underflowing or overflowing (a
    float32 vector of entries below 1e-19 or above 1e19 has a norm, not 0 or inf)."""
    return scaled_norm(x)


def general(plan, a, *, by_columns: bool = False) -> Operator:
    """The operator of matrix ``a`` (the caller's, placed in the computation's layout); its norm
    summed over columns where ``by_columns`` (with products ``A^H v``: one pass), else rows."""
    a = jax.lax.stop_gradient(plan.enter(a))
    return _operator(plan, a, a.shape, hermitian=False, norm_axis=0 if by_columns else -1)


def hermitian(plan, a) -> Operator:
    """The operator of the Hermitian matrix A = B + B^H read from ``a``'s lower triangle (B: the
    strict lower triangle and half the diagonal); its norm bound is 2 ||B||_F."""
    a = jax.lax.stop_gradient(plan.enter(a))
    layout = _dist.resolve(plan.layout)
    row, column = (_dist._iota(a.shape, axis, layout) for axis in (0, 1))
    # the masks as comparisons of the two iotas, not the weights of _dist.lower_read_weights: a
    # derivative's weights are then not shared with the check's (XLA would write a shared one out)
    diagonal = (jnp.real(a) / 2).astype(a.dtype)
    b = jnp.where(row > column, a, jnp.where(row == column, diagonal, jnp.zeros((), a.dtype)))
    return _operator(plan, b, a.shape, hermitian=True)


def _operator(plan, b, shape: tuple, *, hermitian: bool, norm_axis: int = -1) -> Operator:
    """The operator of B (``hermitian``: of B + B^H), applied to a vector or to the k columns of
    an (n, k) array by sums over B's rows (B v) and columns (B^H v) of its elementwise products
    with them: XLA fuses the masking that makes B into them, so no matrix is written, and the
    sums in one direction (the norm's too, over ``norm_axis``) into one pass over B."""
    place = functools.partial(_replicated, plan)

    def each(v, one):  # a sum per column: sums of (n, n, k) products would be written out
        return place(one(v) if v.ndim == 1 else jnp.stack([one(v[:, j]) for j in range(v.shape[1])], axis=1))

    def rows(v):
        return each(v, lambda u: jnp.sum(b * u[None, :], axis=1))

    def columns(v):
        return each(v, lambda u: jnp.sum(jnp.conj(b) * u[:, None], axis=0))

    norm = _matrix_norm(b, norm_axis)
    if hermitian:
        apply = lambda v: rows(v) + columns(v)  # noqa: E731
        return Operator(apply, apply, 2 * norm, shape, b.dtype)
    return Operator(rows, columns, norm, shape, b.dtype)


def _matrix_norm(b, axis: int) -> jax.Array:
    """||B||_F with every entry divided by the largest magnitude before it is squared (as
    ``algebra.scaled_norm``), so that no square underflows or overflows: a float32 matrix of norm
    below 1e-19 or above 1e19 has a norm, not 0 or inf; the squares summed over ``axis`` first,
    in the products' direction."""
    big = jnp.max(jnp.abs(b), initial=0.0)
    squares = divided(jnp.abs(b), jnp.where(big > 0, big, 1)) ** 2
    return big * jnp.sqrt(jnp.sum(jnp.sum(squares, axis=axis)))


def _replicated(plan, v):
    """A vector of the check replicated on the call's mesh."""
    return v if plan.mesh is None else _sharded.pinned(v, P(), plan.mesh)


def product(plan, m, v, trans: str = "N"):
    """op(m) v, replicated, for an output matrix ``m`` in the outputs' layout (its derivatives
    not taken) and a replicated vector ``v``: the shared distributed product
    (:func:`jaxmg.autodiff._dist.matvec`, no transposed copy of ``m`` for op = T or C), summed
    where ``m`` lies (the product split like op(m)'s rows: partial sums over the other mesh axes,
    never ``m`` gathered), then replicated."""
    layout = plan.outputs
    if layout is not None:
        rows, columns = _layout.padded_spec(layout.spec, 2)
        layout = NamedSharding(layout.mesh, P(rows if trans == "N" else columns))
    return _replicated(plan, _dist.matvec(jax.lax.stop_gradient(m), v, layout, trans))


def _columns_probe(plan, x, salt: int = 1):
    """x s, replicated: a vector unchanged, the columns of a matrix combined by a probe."""
    x = jax.lax.stop_gradient(x)
    if x.ndim != 1:
        x = jnp.matmul(x, probe(x.shape[-1], x.dtype, salt), precision=jax.lax.Precision.HIGHEST)
    return _replicated(plan, x)


def _inner(u, v):
    """u^H v of two vectors (a sum: exact products, whatever the default precision)."""
    return jnp.sum(jnp.conj(u) * v)


def _unit(v):
    return v / _norm(v)


# --------------------------------------------------------------------------- before the factorisation


#: How many orthonormal probes a solution's residual is projected on (:func:`solution_probes`):
#: each costs one pass over the matrix on a GPU (XLA's GPU compiler fuses the sums over rows of
#: several products into one pass, not those over columns that A^H q needs).
SOLUTION_PROBES = 2


def solution_probes(op: Operator) -> Probes:
    """For the test of solutions of ``A x = b`` (:func:`solution`): the (n, k) orthonormal
    probes ``Q`` over A's rows (k = :data:`SOLUTION_PROBES`) and ``A^H Q``, in one pass over A."""
    gaussian = jnp.stack([probe(op.shape[0], op.dtype, salt) for salt in range(3, 3 + SOLUTION_PROBES)], axis=1)
    q = jnp.linalg.qr(gaussian)[0]
    return Probes((op.norm,), (q, op.adjoint(q)))


def normal_probes(op: Operator) -> Probes:
    """For the tests of least-squares solutions and of a saved QR factor: a probe ``q`` over
    A's columns, ``A q / ||A||`` and ``A^H (A q) / ||A||`` (two passes over A). Divided by
    ``||A||`` so that the normal equations' products have the size of A's entries: ``A^H A q``
    itself overflows or underflows where ``||A||^2`` does (float32 matrices of norm above 1e19
    or below 1e-19)."""
    q = probe(op.shape[1], op.dtype, 5)
    a_q = divided(op.apply(q), _positive(op.norm))
    return Probes((op.norm,), (q, a_q, op.adjoint(a_q)))


def _positive(norm):
    """``norm``, or 1 where it is 0 (a zero matrix): a divisor."""
    return jnp.where(norm > 0, norm, 1).astype(norm.dtype)


def factorisation_probes(op: Operator, pencil: Optional[Operator] = None) -> Probes:
    """For the tests of returned factors: a probe ``r`` over A's columns and ``A r`` (and with a
    ``pencil`` B, ``B r`` and B's norm)."""
    r = probe(op.shape[1], op.dtype)
    if pencil is None:
        return Probes((op.norm,), (r, op.apply(r)))
    return Probes((op.norm, pencil.norm), (r, op.apply(r), pencil.apply(r)))


def before(plan, a, test: str, *, lower_read: bool = False, check: bool):
    """``(a, probes)`` of :func:`probed` for one matrix ``a``: the products that ``test`` needs
    ("solution": :func:`solution_probes`, "normal": :func:`normal_probes`, "factors":
    :func:`factorisation_probes`) of the matrix read from a's lower triangle (``lower_read``) or
    of ``a`` itself."""

    def products():
        if lower_read:
            return _PROBES[test](hermitian(plan, a))
        return _PROBES[test](general(plan, a, by_columns=test == "solution"))

    (a,), probes = probed(plan, (a,), products, check=check)
    return a, probes


_PROBES = {"solution": solution_probes, "normal": normal_probes, "factors": factorisation_probes}


# --------------------------------------------------------------------------- after it


def solution(plan, probes: Probes, x, b) -> list:
    """The test of a solution ``x`` of ``A x = b``: the residual's projection on the orthonormal
    probes ``Q``, ``||(A^H Q)^H x s - Q^H b s|| = ||Q^H (A x s - b s)||``, against
    ``||A|| ||x s||`` (at most ``||A x s - b s||``: never above the bound where the whole residual
    is not)."""
    (norm,), (q, a_q) = probes
    xs, bs = _columns_probe(plan, x), _columns_probe(plan, b)
    residual = jnp.sum(jnp.conj(a_q) * xs[:, None], axis=0) - jnp.sum(jnp.conj(q) * bs[:, None], axis=0)
    return [(_norm(residual), norm * _norm(xs))]


def least_squares(plan, probes: Probes, x, b) -> list:
    """The test of a least-squares solution ``x``: the normal-equation residual
    ``A^H (A x - b)`` along the probe ``q``, ``|(A^H A q)^H x s - (A q)^H b s|``, against
    ``||A|| (||A|| ||x s|| + ||b s||) ||q||`` (the bound of a backward-stable solution), both
    divided by ``||A||`` (:func:`normal_probes`)."""
    (norm,), (q, a_q, normal_q) = probes
    xs, bs = _columns_probe(plan, x), _columns_probe(plan, b)
    residual = jnp.abs(_inner(normal_q, xs) - _inner(a_q, bs))
    return [(residual, (norm * _norm(xs) + _norm(bs)) * _norm(q))]


def factor_solve(plan, probes: Probes, solve: Callable) -> list:
    """The test of a saved factor F through one solve with it, ``solve(r, spec)`` (the kernels'
    solve of a right-hand side in layout ``spec``): ``y = F^-1 r`` tested as a solution of
    ``A y = r`` (:func:`solution`)."""
    r = probe(plan.shape[-1], plan.dtype)
    return solution(plan, probes, _placed(plan, solve, r, plan.shape[0]), r)


def factored_checked(plan, factored: tuple, kernels, probes: Optional[Probes]):
    """(state, status) of a module's factorisation ``factored`` (state, status, operator) after
    the test of its saved factor through one solve with ``kernels.solve`` (:func:`factor_solve`)."""
    state, status, _ = factored
    solve = lambda r, spec: kernels.solve(state, r, spec)  # noqa: E731
    return state, verified(plan, status, probes, lambda p: factor_solve(plan, p, solve))


def normal_solve(plan, probes: Probes, solve: Callable) -> list:
    """The test of a saved QR factor of the M x N matrix of ``plan`` through
    ``z = (R^H R)^-1 r`` (``solve(r, spec)``): ``|(A^H A q)^H z - q^H r|`` against
    ``||A||^2 ||z|| ||q||`` (:func:`normal_probes`), with ``z`` solved for ``||A|| r`` (it is
    ``||A|| z``, of the size of ``r / ||A||``: ``z`` itself overflows or underflows where
    ``||A||^2`` does)."""
    (norm,), (q, _, normal_q) = probes
    r = probe(plan.shape[-1], plan.dtype)
    z = _placed(plan, solve, r * _positive(norm).astype(r.dtype), plan.shape[0])
    return [(jnp.abs(_inner(normal_q, z) - _inner(q, r)), norm * _norm(z) * _norm(q))]


def _placed(plan, solve: Callable, r, rows: int):
    """``solve(r, spec)`` with ``r`` in the layout ``spec`` of the plan's right-hand sides of
    ``rows`` rows (not differentiated)."""
    _, spec, _ = _plan.place_rhs(plan, jnp.zeros((rows,), plan.dtype), rows=rows)
    if spec is not None:
        r = _sharded.place(r, _layout.padded_spec(spec, 1), plan.mesh)
    return _replicated(plan, jax.lax.stop_gradient(solve(r, spec)))


def factorisation(probes: Probes, rebuild: Callable) -> list:
    """The test of returned factors: ``||rebuild(r) - A r||`` against ``||A|| ||r||``, for
    ``rebuild(r)`` the factors' product applied to the probe (``L (L^H r)``, ``Q (R r)``, ...)."""
    (norm,), (r, a_r) = probes
    return [(_norm(rebuild(r) - a_r), norm * _norm(r))]


def orthonormal(plan, q, trans: str = "N") -> list:
    """The test of orthonormal columns of ``op(q)`` (``trans`` "C": of q's conjugate transpose):
    ``||Q^H Q r - r||`` against ``||r||``."""
    back = "C" if trans == "N" else "N"
    r = probe(q.shape[-1] if trans == "N" else q.shape[-2], q.dtype, salt=2)
    return [(_norm(product(plan, q, product(plan, q, r, trans), back) - r), _norm(r))]


def eigenvectors(plan, probes: Probes, w, v) -> list:
    """The test of ``A V = V diag(w)`` with orthonormal ``V``: ``||V^H (A r) - w V^H r||``
    (``(A V - V diag(w))^H r``) against ``||A|| ||r||``."""
    (norm,), (r, a_r) = probes
    w = jax.lax.stop_gradient(w).astype(v.dtype)
    residual = product(plan, v, a_r, "C") - w * product(plan, v, r, "C")
    return [(_norm(residual), norm * _norm(r))] + orthonormal(plan, v)


def generalised(plan, probes: Probes, w, v) -> list:
    """The test of ``A V = B V diag(w)`` with ``V^H B V = I``: ``||V^H (A r) - w V^H (B r)||``
    against ``(||A|| + ||B|| max|w|) ||V||_F ||r||`` and ``||V (V^H (B r)) - r||`` (``V V^H B =
    I``) against ``||B|| ||V||_F^2 ||r||``."""
    (a_norm, b_norm), (r, a_r, b_r) = probes
    w = jax.lax.stop_gradient(w).astype(v.dtype)
    v_norm = _norm(jax.lax.stop_gradient(v))
    vh_b_r = product(plan, v, b_r, "C")
    residual = product(plan, v, a_r, "C") - w * vh_b_r
    scale = (a_norm + b_norm * jnp.max(jnp.abs(w))) * v_norm * _norm(r)
    b_orthonormal = _norm(product(plan, v, vh_b_r) - r)
    return [(_norm(residual), scale), (b_orthonormal, b_norm * v_norm**2 * _norm(r))]


def singular(plan, probes: Probes, u, s, vh) -> list:
    """The test of ``A = U diag(s) V^H`` (the first K columns of U and rows of V^H):
    ``||U (s (V^H r)) - A r||``, with orthonormal U and V."""
    (norm,), (r, a_r) = probes
    k = s.shape[-1]
    s = jax.lax.stop_gradient(s).astype(u.dtype)
    coefficients = product(plan, vh, r)[:k]
    rebuilt = product(plan, u, _padded(s * coefficients, u.shape[-1]))
    return [(_norm(rebuilt - a_r), norm * _norm(r))] + orthonormal(plan, u) + orthonormal(plan, vh, "C")


def _padded(v, n: int):
    """``v`` with zeros up to length ``n``."""
    return v if v.shape[-1] == n else jnp.concatenate([v, jnp.zeros((n - v.shape[-1],), v.dtype)])
