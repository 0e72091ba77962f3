"""A battery of hard matrices for every operation: LAPACK's dlatms-like kinds (geometric,
arithmetic and clustered spectra, condition numbers 1e2 to 1e15, rank-deficient, graded rows
and columns, zero and near-underflow matrices, exactly repeated eigenvalues; tall and wide
for least squares, QR and SVD) in float32, float64, complex64 and complex128.

Every result is either right by LAPACK's test ratios (``hard_matrices.THRESHOLD``) or flagged
(a non-zero status and NaN outputs; NaN outputs for the ``jaxmg.numpy.linalg`` functions, which
have no status): never a finite wrong answer with status 0. Each operation runs on the local
route (a matrix on one device), on the batch route (``jax.vmap`` over all kinds at once) and
over a (4, 2) mesh (the portable backend); each is compiled once per dtype and route.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import hard_matrices as hm
import jaxmg
import jaxmg.numpy.linalg as mla
from hard_matrices import (
    backward_error,
    factor_error,
    hermitian_of_lower,
    norm1,
    orthogonality,
    ratio,
    value_error,
    wide,
)
from helpers import DTYPES, make_mesh, put

N, M = 32, 48  # square order; a tall matrix is (M, N), a wide one (N, M)
SHAPES = {"square": (N, N), "tall": (M, N), "wide": (N, M)}
ROUTES = ["local", "batch", "mesh"]


# --- what each check computes (NumPy, double precision) --------------------------------------


def triangle_error(t, lower: bool) -> float:
    """inf where a triangular factor has an entry on the wrong side of its diagonal."""
    t = np.asarray(t)
    stray = np.triu(t, 1) if lower else np.tril(t, -1)
    return 0.0 if not np.any(stray) else float("inf")


def condition(a) -> float:
    s = np.linalg.svd(wide(a), compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else float("inf")


def logdet_error(sign, logabsdet, a, dtype) -> float:
    """|sign - sign_ref| + |logdet - logdet_ref| against (kappa(A) N eps): the perturbation of
    log|det| by a backward error of N eps ||A|| is at most kappa(A) N eps."""
    ref_sign, ref = np.linalg.slogdet(wide(a))
    if ref_sign == 0:
        return 0.0 if (sign == 0 and logabsdet == -np.inf) else float("inf")
    scale = min(condition(a), 1 / hm.eps(dtype))
    return ratio(abs(complex(sign) - ref_sign) + abs(float(logabsdet) - ref), scale, a.shape[0], dtype)


def inverse_error(a, x, dtype) -> float:
    """||A X - I|| / (||A|| ||X|| N eps) (LAPACK's dget03)."""
    a, x = wide(a), wide(x)
    return ratio(norm1(a @ x - np.eye(a.shape[0])), norm1(a) * norm1(x), a.shape[0], dtype)


def numerically_singular(a, dtype) -> bool:
    """Whether cond(a) max(M, N) eps >= 1: singular to working precision (rank-deficient to
    the default ``rcond`` of ``jnp.linalg.lstsq``)."""
    return condition(a) * max(a.shape) * hm.eps(dtype) >= 1


def least_squares_error(a, x, b, full_rank: bool, dtype) -> dict:
    """The least-squares x's ratios: for a wide a of full rank, the backward error (x solves
    a x = b); else (no x need solve it)
    ||A^H (b - A x)|| / (||A|| (||A|| ||x|| + ||b||) M eps) (LAPACK's dqrt17 with the scale of a
    backward-stable x)."""
    a, x, b = wide(a), wide(x), wide(b)
    if a.shape[0] <= a.shape[1] and full_rank:
        return {"backward": backward_error(a, x, b, dtype)}
    r = b - a @ x
    return {"normal": ratio(norm1(np.conj(a).T @ r), norm1(a) * (norm1(a) * norm1(x) + norm1(b)), max(a.shape), dtype)}


def minimum_norm(a, x, b, kind) -> dict:
    """For a singular a: ||x|| / ||x+|| with x+ = pinv(a) b (LAPACK's gelsd): a least-squares x
    of a rank-deficient a must be the one of least norm, not any backward-stable one (those are
    as large as 1/eps)."""
    if kind not in hm.RANK_DEFICIENT:
        return {}
    best = np.linalg.lstsq(wide(a), wide(b), rcond=None)[0]
    return {"norm/least": float(np.linalg.norm(wide(x)) / max(np.linalg.norm(best), np.finfo(float).tiny))}


def _least_squares_checks(inputs, outputs, dtype, rcond: bool) -> dict:
    """least_squares_error and minimum_norm; ``rcond``: the function treats a numerically
    singular a as rank-deficient (jnp.linalg.lstsq's rcond), so its x need not solve a x = b."""
    a, _, b, kind = inputs
    full_rank = kind not in hm.RANK_DEFICIENT and not (rcond and numerically_singular(a, dtype))
    return {**least_squares_error(a, outputs[0], b, full_rank, dtype), **minimum_norm(a, outputs[0], b, kind)}


def _least_squares_fixed_rank(inputs, outputs, dtype) -> dict:
    """_least_squares_checks of a function that takes a's rank as it is (no rcond)."""
    return _least_squares_checks(inputs, outputs, dtype, rcond=False)


def _least_squares_with_rcond(inputs, outputs, dtype) -> dict:
    """_least_squares_checks of a function that treats a numerically singular a as rank-deficient."""
    return _least_squares_checks(inputs, outputs, dtype, rcond=True)


def eigen_error(a, w, v, dtype) -> dict:
    """syevd's ratios (LAPACK's dsyt21 and eigenvalues against LAPACK's in double)."""
    a = wide(a)
    return {
        "residual": ratio(norm1(a @ wide(v) - wide(v) * wide(w)), norm1(a), a.shape[0], dtype),
        "orthogonality": orthogonality(v, dtype),
        "eigenvalues": value_error(w, np.linalg.eigvalsh(a), norm1(a), a.shape[0], dtype),
    }


def svd_error(a, u, s, vh, dtype) -> dict:
    """gesvd's ratios (LAPACK's dbdt01/dort01 and singular values against LAPACK's in double)."""
    a = wide(a)
    return {
        "residual": factor_error(a, (wide(u) * wide(s)) @ wide(vh), dtype),
        "orthogonality-u": orthogonality(u, dtype),
        "orthogonality-v": orthogonality(np.conj(wide(vh)).T, dtype),
        "values": value_error(s, np.linalg.svd(a, compute_uv=False), norm1(a), max(a.shape), dtype),
    }


def qr_error(a, q, r, dtype) -> dict:
    return {
        "residual": factor_error(a, wide(q) @ wide(r), dtype),
        "orthogonality": orthogonality(q, dtype),
        "triangular": triangle_error(r, lower=False),
    }


def polar_error(a, u, h, dtype) -> dict:
    """The polar factors' ratios: a = u h, u's orthonormal columns, h Hermitian and positive
    semi-definite to working precision."""
    h2, scale = wide(h), norm1(a)
    lowest = float(np.min(np.linalg.eigvalsh((h2 + np.conj(h2).T) / 2)))
    return {
        "residual": factor_error(a, wide(u) @ h2, dtype),
        "orthogonality": orthogonality(u, dtype),
        "hermitian": ratio(norm1(h2 - np.conj(h2).T), scale, a.shape[1], dtype),
        "semi-definite": ratio(max(0.0, -lowest), scale, a.shape[1], dtype),
    }


def pencil_error(a, b, w, z, dtype) -> dict:
    """sygvd's ratios: ||A Z - B Z diag(w)|| / ((||A|| + ||B|| max|w|) ||Z|| N eps) and
    ||Z^H B Z - I|| / (||B|| ||Z||^2 N eps) (LAPACK's dsgt01 scaled as a backward error)."""
    a, b, w, z = wide(a), wide(b), wide(w), wide(z)
    n = a.shape[0]
    scale = (norm1(a) + norm1(b) * float(np.max(np.abs(w), initial=0.0))) * norm1(z)
    return {
        "residual": ratio(norm1(a @ z - (b @ z) * w), scale, n, dtype),
        "b-orthogonality": ratio(norm1(np.conj(z).T @ b @ z - np.eye(n)), (norm1(b) * norm1(z)) * norm1(z), n, dtype),
    }


def pinv_error(a, x, dtype) -> dict:
    """The Penrose conditions A X A = A and X A X = X, each scaled as a backward error."""
    a, x = wide(a), wide(x)
    n = max(a.shape)
    return {
        "axa": ratio(norm1(a @ x @ a - a), norm1(a) * (norm1(a) * norm1(x)), n, dtype),
        "xax": ratio(norm1(x @ a @ x - x), norm1(x) * (norm1(x) * norm1(a)), n, dtype),
    }


# --- the operations: structure, shape, the call, its checks ----------------------------------


class Op:
    """One operation of the battery.

    structure: what the kinds build ("general", "spd", "hermitian" or "pencil": a Hermitian
    a and a positive-definite b of the same kind); shape: a key of SHAPES; call(a, b, rhs, kw)
    returns (outputs, status) in JAX (status None where the function has none; kw: backend);
    check(inputs, outputs) returns {name: ratio} from NumPy arrays; inputs are (a, b, rhs) as
    the operation reads them (the Hermitian matrix of a's lower triangle for those operations);
    exact(inputs, outputs): whether the outputs are the exact answer that is not finite (the
    slogdet (0, -inf) and det 0 of a singular matrix, as JAX gives), checked first.
    """

    def __init__(self, structure, shape, call, check, reads="full", exact=None):
        self.structure, self.shape, self.call, self.check, self.reads = structure, shape, call, check, reads
        self.exact = exact


def _pair(out):
    """(outputs, status) of a call that returns (x, status)."""
    return (out[0],), out[1]


def _split(out):
    """(outputs, status) of a call that returns (..., status)."""
    return tuple(out[:-1]), out[-1]


def _module(module, *names):
    return tuple(getattr(module, name) for name in names), module.status


def _factors(function, structure: str, shape: str, check, reads: str = "full") -> Op:
    """The operation ``function(a, return_status=True, **kw)``, which returns its factors and
    status, checked by ``check(a, *factors, dtype)``."""
    return Op(
        structure,
        shape,
        lambda a, b, r, kw: _split(function(a, return_status=True, **kw)),
        lambda i, o, d: check(i[0], *o, d),
        reads=reads,
    )


def _module_factors(module, names: tuple, structure: str, shape: str, check, reads: str = "full") -> Op:
    """The factors ``names`` of the module ``module(a, **kw)`` with its status, checked by
    ``check(a, *factors, dtype)``."""
    return Op(
        structure,
        shape,
        lambda a, b, r, kw: _module(module(a, **kw), *names),
        lambda i, o, d: check(i[0], *o, d),
        reads=reads,
    )


def _numpy(function, structure: str, shape: str, check, reads: str = "full") -> Op:
    """The jaxmg.numpy.linalg function ``function(a)`` (no status): its output, or its outputs'
    tuple, checked by ``check``."""

    def call(a, b, rhs, kw):
        out = function(a)
        return (tuple(out) if isinstance(out, tuple) else (out,)), None

    return Op(structure, shape, call, check, reads=reads)


def _least_squares(a, b, rhs, kw):
    return _pair(jaxmg.least_squares(a, rhs, return_status=True, **kw))


def _cholesky_module(a, b, rhs, kw):
    m = jaxmg.Cholesky(a, **kw)
    return (m.solve(rhs), m.logdet(), m.inverse(), m.factor), m.status


def _lu_module(a, b, rhs, kw):
    m = jaxmg.LU(a, **kw)
    return (m.solve(rhs), m.solve(rhs, trans="C"), m.inverse()), m.status


def _lu_slogdet(a, b, rhs, kw):
    return tuple(jaxmg.LU(a, **kw).slogdet()), None


def _qr_module(a, b, rhs, kw):
    """QR(a).solve with the status that governs it (the rank test of R's diagonal)."""
    m = jaxmg.QR(a, **kw)
    return (m.solve(rhs),), m.rank_status()


def _qr_factors(a, b, rhs, kw):
    """QR(a)'s factors with the factorisation's own status (a rank-deficient a has valid factors)."""
    m = jaxmg.QR(a, **kw)
    return (m.q, m.r), m.status


def _lstsq_numpy(a, b, rhs, kw):
    x, resid, rank, s = mla.lstsq(a, rhs)
    return (x,), None


def _slogdet_numpy(a, b, rhs, kw):
    sign, logdet = mla.slogdet(a)
    return (sign, logdet, mla.det(a)), None


def _singular_slogdet(a, outputs) -> bool:
    """sign 0 and log|det| -inf (and det 0) for an exactly singular a (NumPy's slogdet in double
    precision says sign 0), as jnp.linalg.slogdet gives."""
    if np.linalg.slogdet(wide(a))[0] != 0:
        return False
    sign, logdet, *det = (np.asarray(o) for o in outputs)
    return sign == 0 and logdet == -np.inf and all(d == 0 for d in det)


def _logdet_check(ld, a, dtype):
    return logdet_error(1.0, ld, a, dtype)


def _backward_check(i, o, d):
    """The backward error of the solution o[0] of a x = rhs."""
    return {"backward": backward_error(i[0], o[0], i[2], d)}


def _cholesky_factor_checks(i, o, d):
    """L = o[0]: a = L L^H, and L lower triangular."""
    low = wide(o[0])
    return {"factor": factor_error(i[0], low @ np.conj(low).T, d), "triangular": triangle_error(o[0], lower=True)}


def _cholesky_module_checks(i, o, d):
    """Cholesky(a)'s solve, log-determinant, inverse and factor."""
    low = wide(o[3])
    return {
        "solve": backward_error(i[0], o[0], i[2], d),
        "logdet": _logdet_check(o[1], i[0], d),
        "inverse": inverse_error(i[0], o[2], d),
        "factor": factor_error(i[0], low @ np.conj(low).T, d),
    }


def _lu_module_checks(i, o, d):
    """LU(a)'s solves of a x = rhs and a^H x = rhs, and its inverse."""
    return {
        "solve": backward_error(i[0], o[0], i[2], d),
        "solve-C": backward_error(np.conj(wide(i[0])).T, o[1], i[2], d),
        "inverse": inverse_error(i[0], o[2], d),
    }


def _det_check(i, o, d):
    a = i[0]
    sign, logdet, det = o
    ref_sign, ref = np.linalg.slogdet(wide(a))
    ref_det = ref_sign * np.exp(ref)
    scale = abs(ref_det) * min(condition(a), 1 / hm.eps(d))
    det_err = (
        0.0 if det == ref_det else ratio(abs(complex(det) - ref_det), scale, N, d) if np.isfinite(ref) else float("inf")
    )
    return {"slogdet": logdet_error(sign, logdet, a, d), "det": det_err}


OPS = {
    "potrs": Op(
        "spd",
        "square",
        lambda a, b, r, kw: _split(jaxmg.potrs(a, r, return_logdet=True, return_status=True, **kw)),
        lambda i, o, d: {"backward": backward_error(i[0], o[0], i[2], d), "logdet": _logdet_check(o[1], i[0], d)},
        reads="lower",
    ),
    "cholesky": Op(
        "spd",
        "square",
        lambda a, b, r, kw: _pair(jaxmg.cholesky(a, return_status=True, **kw)),
        _cholesky_factor_checks,
        reads="lower",
    ),
    "lu_solve": Op(
        "general",
        "square",
        lambda a, b, r, kw: _pair(jaxmg.lu_solve(a, r, return_status=True, **kw)),
        _backward_check,
    ),
    "least_squares-tall": Op("general", "tall", _least_squares, _least_squares_fixed_rank),
    "least_squares-wide": Op("general", "wide", _least_squares, _least_squares_fixed_rank),
    "qr-tall": _factors(jaxmg.qr, "general", "tall", qr_error),
    "qr-wide": _factors(jaxmg.qr, "general", "wide", qr_error),
    "syevd": _factors(jaxmg.syevd, "hermitian", "square", eigen_error, reads="lower"),
    "sygvd": Op(
        "pencil",
        "square",
        lambda a, b, r, kw: _split(jaxmg.sygvd(a, b, return_status=True, **kw)),
        lambda i, o, d: pencil_error(i[0], i[1], o[0], o[1], d),
        reads="lower",
    ),
    "gesvd-tall": _factors(jaxmg.gesvd, "general", "tall", svd_error),
    "gesvd-wide": _factors(jaxmg.gesvd, "general", "wide", svd_error),
    "polar": _factors(jaxmg.polar, "general", "tall", polar_error),
    "Cholesky": Op("spd", "square", _cholesky_module, _cholesky_module_checks, reads="lower"),
    "LU": Op("general", "square", _lu_module, _lu_module_checks),
    "LU.slogdet": Op(
        "general",
        "square",
        _lu_slogdet,
        lambda i, o, d: {"slogdet": logdet_error(o[0], o[1], i[0], d)},
        exact=lambda i, o: _singular_slogdet(i[0], o),
    ),
    "QR": Op("general", "tall", _qr_module, _least_squares_fixed_rank),
    "QR.factors": Op("general", "tall", _qr_factors, lambda i, o, d: qr_error(i[0], *o, d)),
    "Eigh": _module_factors(jaxmg.Eigh, ("w", "v"), "hermitian", "square", eigen_error, reads="lower"),
    "SVD": _module_factors(jaxmg.SVD, ("u", "s", "vh"), "general", "tall", svd_error),
    "Polar": _module_factors(jaxmg.Polar, ("u_p", "h"), "general", "tall", polar_error),
    "np.solve": Op("general", "square", lambda a, b, r, kw: ((mla.solve(a, r),), None), _backward_check),
    "np.inv": _numpy(mla.inv, "general", "square", lambda i, o, d: {"inverse": inverse_error(i[0], o[0], d)}),
    "np.slogdet": Op("general", "square", _slogdet_numpy, _det_check, exact=lambda i, o: _singular_slogdet(i[0], o)),
    "np.eigh": Op(
        "hermitian",
        "square",
        lambda a, b, r, kw: (tuple(mla.eigh(a)) + (mla.eigvalsh(a),), None),
        lambda i, o, d: {
            **eigen_error(i[0], o[0], o[1], d),
            "eigvalsh": value_error(o[2], np.linalg.eigvalsh(wide(i[0])), norm1(i[0]), N, d),
        },
        reads="symmetrized",
    ),
    "np.svd": Op(
        "general",
        "tall",
        lambda a, b, r, kw: (tuple(mla.svd(a, full_matrices=False)), None),
        lambda i, o, d: svd_error(i[0], *o, d),
    ),
    "np.lstsq-tall": Op("general", "tall", _lstsq_numpy, _least_squares_with_rcond),
    "np.lstsq-wide": Op("general", "wide", _lstsq_numpy, _least_squares_with_rcond),
    "np.pinv": _numpy(mla.pinv, "general", "tall", lambda i, o, d: pinv_error(i[0], *o, d)),
    "np.cholesky": _numpy(mla.cholesky, "spd", "square", _cholesky_factor_checks, reads="symmetrized"),
    "np.qr": _numpy(mla.qr, "general", "tall", lambda i, o, d: qr_error(i[0], *o, d)),
}


# --- inputs, the three routes, one compile each -----------------------------------------------


@functools.cache
def inputs(name: str, kind: str, dtype) -> tuple:
    """(a, b, rhs) as passed to the call, and (a, b, rhs, kind) as the operation reads them.

    Operations that read a's lower triangle get random entries above the diagonal (never
    read); the numpy functions that symmetrize get the matrix as built (Hermitian to rounding).
    """
    op = OPS[name]
    m, n = SHAPES[op.shape]
    structure = "hermitian" if op.structure == "pencil" else op.structure
    a = hm.matrix(kind, m, n, dtype, structure)
    b = hm.matrix(kind, n, n, dtype, "spd", seed=1) if op.structure == "pencil" else None
    rhs = hm.rhs(m, 2, dtype)
    if op.reads == "lower":
        above = hm.rhs(n, n, dtype, seed=2) * np.max(np.abs(a), initial=0.0)
        a = np.tril(a) + np.triu(above, 1).astype(dtype)
        b = None if b is None else np.tril(b) + np.triu(above, 1).astype(dtype)
        read = (hermitian_of_lower(a), None if b is None else hermitian_of_lower(b))
    elif op.reads == "symmetrized":
        read = ((wide(a) + np.conj(wide(a)).T) / 2, None)
    else:
        read = (a, b)
    return (a, b, rhs), (*read, rhs, kind)


def _host(tree):
    return jax.tree.map(lambda x: None if x is None else np.asarray(x), tree, is_leaf=lambda x: x is None)


@functools.cache
def _mesh():
    return make_mesh((4, 2), ("x", "y"))


def group(name: str) -> tuple:
    """The operations compiled together with ``name``: those of its structure and shape (one
    compiled call per group, dtype and route)."""
    key = (OPS[name].structure, OPS[name].shape)
    return tuple(other for other, op in OPS.items() if (op.structure, op.shape) == key)


def _calls(names, kw):
    def call(args):
        return {name: OPS[name].call(*args[name], kw) for name in names}

    return call


def run_group(names: tuple, dtype, place, kw: dict, host=_host) -> dict:
    """kind -> {name: (outputs, status)} for the operations ``names`` on every kind, one
    compiled call (``jax.jit``) run once per kind: ``place(x, spec)`` puts each input where the
    call reads it (a and b with ``P("x", "y")``, the right-hand side with ``P("x", None)``),
    ``kw`` goes to every jaxmg call (``backend``), ``host`` brings the results back as NumPy."""
    call = jax.jit(_calls(names, kw))
    found = {}
    for kind in hm.KINDS:
        args = {}
        for name in names:
            a, b, rhs = inputs(name, kind, dtype)[0]
            args[name] = (place(a, P("x", "y")), None if b is None else place(b, P("x", "y")), place(rhs, P("x", None)))
        found[kind] = host(call(args))
    return found


def _run_batch(names: tuple, dtype) -> dict:
    """run_group's results from one call of ``jax.vmap`` over all kinds, on one device."""
    kinds = list(hm.KINDS)
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *({n: inputs(n, k, dtype)[0] for n in names} for k in kinds))
    found = _host(jax.jit(jax.vmap(_calls(names, {})))(jax.device_put(stacked, jax.devices()[0])))
    return {k: jax.tree.map(lambda x, i=i: x[i], found) for i, k in enumerate(kinds)}


@functools.cache
def _group_results(names: tuple, dtype, route: str) -> dict:
    """run_group on a route: "local" (one device), "batch" (``jax.vmap`` over all kinds) or
    "mesh" (a (4, 2) mesh, backend="portable")."""
    if route == "batch":
        return _run_batch(names, dtype)
    if route == "local":
        device = jax.devices()[0]
        return run_group(names, dtype, lambda x, spec: jax.device_put(x, device), {})
    return run_group(names, dtype, lambda x, spec: put(x, _mesh(), spec), {"backend": "portable"})


def results(name: str, dtype, route: str, kind: str) -> tuple:
    """(outputs, status) of operation ``name`` on ``kind`` (NumPy arrays; status None where the
    function has none)."""
    return _group_results(group(name), dtype, route)[kind][name]


# --- cases still pending in other parts of the library ----------------------------------------

RCOND = "rank-deficient least squares flagged by rcond: pending"
SINGULAR_DET = (
    "singular det/slogdet: pending (sign NaN and det NaN for an exactly singular matrix, where "
    "jnp.linalg.slogdet gives sign 0, logabsdet -inf and det 0)"
)
DOUBLE, SINGLE = ("float64", "complex128"), ("float32", "complex64")
ALL = DOUBLE + SINGLE
#: (operation, kind) -> (dtypes, routes, reason) of the cases that fail today for a reason being
#: fixed elsewhere. Least squares on a matrix that is rank-deficient, exactly or to working
#: precision (cond(a) max(M, N) eps >= 1), returns a huge x with status 0 (tall a: ||x|| up to
#: 1e15 times the least norm; wide a: the semi-normal equations' backward error up to 1e9),
#: where R's diagonal against rcond max|R_ii| will flag it.
PENDING: dict = {}


#: The same for the native backend's own defects (tests/gpu/test_hard_emulated.py and
#: tests/gpu/hard_cases.py): (operation, kind) -> (dtypes, reason). None today: the distributed
#: polar and SVD complete a partial isometry's columns as the local routes do.
NATIVE_DEFECTS: dict = {}


def _marks(name: str, kind: str, dtype, route: str) -> list:
    dtypes, routes, reason = PENDING.get((name, kind), ((), (), None))
    if np.dtype(dtype).name in dtypes and route in routes:
        return [pytest.mark.xfail(strict=True, reason=reason)]
    return []


CASES = [
    pytest.param(
        name,
        kind,
        dtype,
        route,
        id=f"{name}-{kind}-{np.dtype(dtype).name}-{route}",
        marks=_marks(name, kind, dtype, route),
    )
    for name in OPS
    for kind in hm.KINDS
    for dtype in DTYPES
    for route in ROUTES
]


def verdict(name: str, kind: str, dtype, route: str, outputs, status) -> None:
    """hard_matrices.assert_right_or_flagged for one result of the battery (after the exact
    non-finite answers of a singular matrix, where the operation has them)."""
    _, read = inputs(name, kind, dtype)
    if OPS[name].exact is not None and OPS[name].exact(read, outputs):
        return
    label = f"{name} on {kind} {np.dtype(dtype).name} ({route})"
    hm.assert_right_or_flagged(label, outputs, status, lambda: OPS[name].check(read, outputs, dtype))


@pytest.mark.parametrize("name, kind, dtype, route", CASES)
def test_right_or_flagged(name, kind, dtype, route):
    verdict(name, kind, dtype, route, *results(name, dtype, route, kind))
