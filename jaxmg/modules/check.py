"""The result check of the distributed route: every result probed before it is returned.

After cuSOLVERMp returns, each operation's result is tested with one fixed pseudo-random probe
vector ``r`` and products of the matrix with a few vectors (O(N^2) work, no factorisation):

* a solve ``a x = b`` (potrs, lu_solve): ``||A x s - b s|| <= T N eps ||A|| ||x s||``, with ``s`` a
  probe over the right-hand sides (one column of products whatever NRHS is);
* least squares: the normal-equation residual along the probe,
  ``|<A r, A x s - b s>| <= T N eps ||A|| (||A|| ||x s|| + ||b s||) ||r||``;
* a factorisation whose factor cannot be read in natural order (the modules, whose factor is
  cuSOLVERMp's own): the backward error of one solve with it, ``y = F^-1 r`` and
  ``||A y - r|| <= T N eps ||A|| ||y||`` (that is ``||(A - F) y||``, the factorisation's error
  along the probe ``y``); QR: ``z = (R^H R)^-1 r`` and ``||A^H A z - r|| <= T N eps ||A||^2 ||z||``;
* factors that are returned: ``||L (L^H r) - A r||`` (Cholesky), ``||Q (R r) - A r||`` (QR),
  ``||U (H r) - A r||`` (polar), ``||A (V r) - V (w r)||`` (eigenvectors),
  ``||A (V r) - B (V (w r))||`` (generalised, with ``||V^H B V r - r||``), ``||A (V r) - U (s r)||``
  (SVD), each against ``T N eps ||A|| ||r||``, and ``||Q^H Q r - r|| <= T N eps ||r||`` for every
  factor with orthonormal columns.

``||A||`` is the Frobenius norm (one pass over the matrix; an upper bound of the 2-norm, so the
bound is never below LAPACK's), N the larger dimension, eps the dtype's machine epsilon and
T = :data:`THRESHOLD`. A result that fails a test gets the status
:data:`jaxmg.kernels.status.CHECK_FAILED` and NaN outputs, like every other failure; one that
already failed keeps its status. The check is computed on values whose derivatives are not
taken (``jax.lax.stop_gradient``): derivatives are those of the unchecked operation.

It runs on the distributed route only (the local and batch routes run the device's own LAPACK
or cuSOLVER), where asked for: ``check=True`` on a call or module, or the environment variable
``JAXMG_RESULT_CHECK=1`` for every call that does not say (:func:`enabled`). It is off by default
because it reads the matrix after the factorisation, which cuSOLVERMp runs in the matrix's own
buffer: a checked call keeps a copy of its matrix (one more local block per device; ``cholesky``
more, for its products with the factor), where an unchecked one keeps none. A call that donates
its matrix (``donate=True``) is not checked: the factorisation consumed the matrix the check
reads.
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

#: The test ratio above which a result is flagged: residual / (N eps ||A|| ...) as LAPACK's
#: test programs use 30, here with Frobenius norms (an upper bound of the 2-norm).
THRESHOLD = 30.0
#: The environment variable whose value "0" turns the check off where a call does not say.
ENVIRONMENT = "JAXMG_RESULT_CHECK"
_SEED = 0x6A61786D


def enabled(check: Optional[bool]) -> bool:
    """Whether a call's result is checked: ``check`` where given, else when the environment
    variable :data:`ENVIRONMENT` is ``"1"`` (or "true", "on", "yes"), else False."""
    if check is not None:
        if not isinstance(check, (bool, np.bool_)):
            raise TypeError(f"check must be True, False or None (the default: {ENVIRONMENT}, else off), "
                            f"got {check!r}.")
        return bool(check)
    return os.environ.get(ENVIRONMENT, "0").strip().lower() in ("1", "true", "on", "yes")


class Operator(NamedTuple):
    """A matrix as the check applies it: ``apply(v)`` = A v, ``adjoint(v)`` = A^H v, ``norm`` =
    ||A||_F (or an upper bound of it), ``rows(vs)``: B v for each vector v of ``vs`` by sums
    over the rows of B, which XLA fuses into one pass over the matrix with the norm's (B is A,
    or for a Hermitian A read from its lower triangle, ``hermitian``, the B with A = B + B^H:
    a's strict lower triangle and half its diagonal), and ``place(v)``: the vector ``v``
    replicated on the call's mesh, as the check's vectors are."""

    apply: Callable
    adjoint: Callable
    norm: jax.Array
    place: Callable
    rows: Callable
    hermitian: bool


def verified(plan, status, tests: Callable[[], Sequence[tuple]], *, check: bool, keep: bool = True):
    """``status``, or :data:`~jaxmg.kernels.status.CHECK_FAILED` where it is OK and one of
    ``tests()`` fails; ``tests`` returns ``(residual, scale)`` pairs, each passing when
    ``residual <= THRESHOLD * N * eps * scale``. Only on the distributed route, when ``check``
    and the matrix was kept (``keep``: not donated)."""
    if not (check and keep and plan.distributed):
        return status
    bound = THRESHOLD * max(plan.shape) * float(jnp.finfo(plan.dtype).eps)
    passed = jnp.array(True)
    for residual, scale in tests():
        passed = passed & (residual <= bound * scale)  # NaN fails
    return _status.either(status, jnp.where(passed, _status.OK, _status.CHECK_FAILED))


def _vectors(plan) -> Optional[NamedSharding]:
    """The check's vectors: replicated on the call's mesh (a few times N numbers)."""
    return None if plan.mesh is None else NamedSharding(plan.mesh, P())


def probe(n: int, dtype, salt: int = 0) -> jax.Array:
    """A fixed pseudo-random probe of length ``n`` and ``dtype`` (standard normal entries)."""
    real = jnp.finfo(dtype).dtype
    return jax.random.normal(jax.random.key(_SEED + salt), (n,), real).astype(dtype)


def _norm(x) -> jax.Array:
    return jnp.sqrt(jnp.sum(jnp.abs(x) ** 2))


def general(plan, a) -> Operator:
    """The operator of matrix ``a`` (the caller's, placed in the computation's layout)."""
    return _operator(plan, jax.lax.stop_gradient(plan.enter(a)), hermitian=False)


def hermitian(plan, a) -> Operator:
    """The operator of the Hermitian matrix A = B + B^H read from ``a``'s lower triangle (B: the
    strict lower triangle and half the diagonal); its norm bound is 2 ||B||_F."""
    a = jax.lax.stop_gradient(plan.enter(a))
    return _operator(plan, jnp.conj(_dist.lower_read_weights(a, like=plan.layout)), hermitian=True)


def _operator(plan, b, *, hermitian: bool) -> Operator:
    """The operator of B (``hermitian``: of B + B^H), applied by sums over B's rows (B v) and
    columns (B^H v) of its elementwise products with the vectors: XLA fuses the masking that
    makes B into them, so no matrix is written, and the sums over rows with the norm's."""
    place = functools.partial(_replicated, plan)

    def rows(vs):
        return [place(jnp.sum(b * v[None, :], axis=-1)) for v in vs]

    def columns(v):
        return place(jnp.sum(jnp.conj(b) * v[:, None], axis=0))

    norm = jnp.sqrt(jnp.sum(jnp.sum(jnp.abs(b) ** 2, axis=-1)))  # by rows, as the products
    if hermitian:
        apply = lambda v: rows([v])[0] + columns(v)  # noqa: E731
        return Operator(apply, apply, 2 * norm, place, rows, True)
    return Operator(lambda v: rows([v])[0], columns, norm, place, rows, False)


def _replicated(plan, v):
    """A vector of the check replicated on the call's mesh."""
    return v if plan.mesh is None else _sharded.pinned(v, P(), plan.mesh)


def product(plan, m, v, trans: str = "N"):
    """op(m) v for an output matrix ``m`` (its derivatives not taken). For a vector ``v`` and
    op = T or C, as the row-vector product ``v^T m`` (conjugated for C): no transposed copy of
    ``m`` is made (a transposed copy of a sharded factor is laid out anew, gathered)."""
    m = jax.lax.stop_gradient(m)
    layout = _vectors(plan)
    if trans == "N" or jnp.ndim(v) != 1:
        return _dist.matvec(m, v, layout, trans)
    w = jnp.conj(v) if trans == "C" else v
    if layout is not None and _dist._explicit(layout):
        out = jnp.matmul(w, m, precision=jax.lax.Precision.HIGHEST, out_sharding=layout)
    else:
        out = _dist._in_layout(jnp.matmul(w, m, precision=jax.lax.Precision.HIGHEST), layout)
    return jnp.conj(out) if trans == "C" else out


def _columns_probe(x, salt: int = 1):
    """x s: a vector unchanged, the columns of a matrix combined by a probe."""
    x = jax.lax.stop_gradient(x)
    return x if x.ndim == 1 else jnp.matmul(x, probe(x.shape[-1], x.dtype, salt), precision=jax.lax.Precision.HIGHEST)


def solution(op: Operator, x, b) -> list:
    """The test of a solution ``x`` of ``A x = b``: ``||A x s - b s||`` against ``||A|| ||x s||``.

    For a Hermitian A read from its lower triangle, the residual along two unit probes q
    instead, ``|<q, A x s - b s>|`` (at most ``||A x s - b s||``, so never above the bound
    where the whole residual is not): ``<q, A y> = q^H (B y) + (B q)^H y`` needs sums over the
    rows of B only, one pass over the matrix where A y needs two."""
    xs, bs = op.place(_columns_probe(x)), op.place(_columns_probe(b))
    scale = op.norm * _norm(xs)
    if not op.hermitian:
        return [(_norm(op.apply(xs) - bs), scale)]
    probes = [_unit(probe(xs.shape[0], xs.dtype, salt)) for salt in (3, 4)]
    b_xs, *b_qs = op.rows([xs, *probes])
    return [(jnp.abs(_inner(q, b_xs) + _inner(b_q, xs) - _inner(q, bs)), scale)
            for q, b_q in zip(probes, b_qs)]


def _inner(u, v):
    """u^H v of two vectors (a sum: exact products, whatever the default precision)."""
    return jnp.sum(jnp.conj(u) * v)


def _unit(v):
    return v / _norm(v)


def least_squares(op: Operator, x, b) -> list:
    """The test of a least-squares solution ``x``: the normal-equation residual
    ``A^H (A x - b)`` along the probe, ``|<A r, A x s - b s>|``, against
    ``||A|| (||A|| ||x s|| + ||b s||) ||r||`` (the bound of a backward-stable solution)."""
    xs, bs = op.place(_columns_probe(x)), op.place(_columns_probe(b))
    r = probe(xs.shape[0], xs.dtype)
    a_xs, a_r = op.rows([xs, r])  # one pass over A
    residual = jnp.abs(_inner(a_r, a_xs - bs))
    return [(residual, op.norm * (op.norm * _norm(xs) + _norm(bs)) * _norm(r))]


def factor_solve(plan, op: Operator, solve: Callable) -> list:
    """The test of a saved factor F through one solve with it, ``solve(r, spec)`` (the kernels'
    solve of a right-hand side in layout ``spec``): ``y = F^-1 r``, then ``||A y - r||`` against
    ``||A|| ||y||``."""
    r = probe(plan.shape[-1], plan.dtype)
    return solution(op, _placed(plan, solve, r, plan.shape[0]), r)


def factored_checked(plan, factored: tuple, kernels, operator: Callable, *, check: bool, keep: bool):
    """(state, status) of a module's factorisation ``factored`` (state, status, operator) after
    the test of its saved factor through one solve with ``kernels.solve`` (:func:`factor_solve`,
    with the matrix ``operator()``)."""
    state, status, _ = factored
    solve = lambda r, spec: kernels.solve(state, r, spec)  # noqa: E731
    status = verified(plan, status, lambda: factor_solve(plan, operator(), solve), check=check, keep=keep)
    return state, status


def normal_solve(plan, op: Operator, solve: Callable) -> list:
    """The test of a saved QR factor of the M x N matrix of ``plan`` through
    ``z = (R^H R)^-1 r`` (``solve(r, spec)``): ``||A^H (A z) - r||`` against ``||A||^2 ||z||``."""
    r = probe(plan.shape[-1], plan.dtype)
    z = _placed(plan, solve, r, plan.shape[0])
    return [(_norm(op.adjoint(op.apply(z)) - r), op.norm ** 2 * _norm(z))]


def _placed(plan, solve: Callable, r, rows: int):
    """``solve(r, spec)`` with ``r`` in the layout ``spec`` of the plan's right-hand sides of
    ``rows`` rows (not differentiated)."""
    _, spec, _ = _plan.place_rhs(plan, jnp.zeros((rows,), plan.dtype), rows=rows)
    if spec is not None:
        r = _sharded.place(r, _layout.padded_spec(spec, 1), plan.mesh)
    return _replicated(plan, jax.lax.stop_gradient(solve(r, spec)))


def factorisation(op: Operator, rebuild: Callable, n: int, dtype) -> list:
    """The test of returned factors: ``||rebuild(r) - A r||`` against ``||A|| ||r||``, for
    ``rebuild(r)`` the factors' product applied to the probe (``L (L^H r)``, ``Q (R r)``, ...)."""
    r = probe(n, dtype)
    return [(_norm(rebuild(r) - op.apply(r)), op.norm * _norm(r))]


def orthonormal(plan, q, trans: str = "N") -> list:
    """The test of orthonormal columns of ``op(q)`` (``trans`` "C": of q's conjugate transpose):
    ``||Q^H Q r - r||`` against ``||r||``."""
    back = "C" if trans == "N" else "N"
    r = probe(q.shape[-1] if trans == "N" else q.shape[-2], q.dtype, salt=2)
    return [(_norm(product(plan, q, product(plan, q, r, trans), back) - r), _norm(r))]


def eigenvectors(plan, op: Operator, w, v) -> list:
    """The test of ``A V = V diag(w)`` with orthonormal ``V``."""
    r = probe(v.shape[-1], v.dtype)
    w = jax.lax.stop_gradient(w).astype(v.dtype)
    residual = op.apply(product(plan, v, r)) - product(plan, v, w * r)
    return [(_norm(residual), op.norm * _norm(r))] + orthonormal(plan, v)


def generalised(plan, op: Operator, pencil: Operator, w, v) -> list:
    """The test of ``A V = B V diag(w)`` with ``V^H B V = I``, against
    ``(||A|| + ||B|| max|w|) ||V||_F ||r||`` and ``||B|| ||V||_F^2 ||r||``."""
    r = probe(v.shape[-1], v.dtype)
    w = jax.lax.stop_gradient(w).astype(v.dtype)
    v_norm = _norm(jax.lax.stop_gradient(v))
    vr = product(plan, v, r)
    residual = op.apply(vr) - pencil.apply(product(plan, v, w * r))
    scale = (op.norm + pencil.norm * jnp.max(jnp.abs(w))) * v_norm * _norm(r)
    b_orthonormal = _norm(product(plan, v, pencil.apply(vr), "C") - r)
    return [(_norm(residual), scale), (b_orthonormal, pencil.norm * v_norm ** 2 * _norm(r))]


def singular(plan, op: Operator, u, s, vh) -> list:
    """The test of ``A V = U diag(s)`` (the first K columns of each) with orthonormal U and V."""
    k = s.shape[-1]
    r = probe(k, u.dtype)
    s = jax.lax.stop_gradient(s).astype(u.dtype)
    right = product(plan, vh, _padded(r, vh.shape[-2]), "C")
    residual = op.apply(right) - product(plan, u, _padded(s * r, u.shape[-1]))
    return [(_norm(residual), op.norm * _norm(r))] + orthonormal(plan, u) + orthonormal(plan, vh, "C")


def _padded(v, n: int):
    """``v`` with zeros up to length ``n``."""
    return v if v.shape[-1] == n else jnp.concatenate([v, jnp.zeros((n - v.shape[-1],), v.dtype)])
