"""Hard test matrices in the manner of LAPACK's dlatms, and the one verdict every result of the
battery gets: right by LAPACK's test ratios, or flagged.

Used by tests/test_hard_matrices.py (CPU: the local route and the portable backend over a mesh)
and tests/gpu/hard_cases.py (the native backend on a GPU). NumPy only: no JAX here.

A *kind* names a spectrum and a scaling (:data:`KINDS`); :func:`matrix` builds an (m, n) matrix
of that kind with singular values (general and rectangular matrices), positive eigenvalues
(``structure="spd"``) or eigenvalues of both signs (``structure="hermitian"``) from the kind's
spectrum, rotated by Haar-random unitaries, then graded or scaled. Everything is built in
float64/complex128 and rounded once to the dtype, so references computed from the rounded
matrix in double precision are exact enough for every ratio.
"""

from __future__ import annotations

import numpy as np

THRESHOLD = 30.0  # LAPACK's test-ratio threshold

#: kind -> (spectrum mode, condition number, scaling); modes as dlatms's: "geometric"
#: (mode 3), "arithmetic" (mode 4), "one-small" (mode 2: all 1 but the last, 1/cond),
#: "one-large" (mode 1: all 1/cond but the first, 1), "repeated" (two values, each N/2 times),
#: "rank-half" (geometric over the first half, exact zeros after), "zero"; scalings "graded-rows"
#: and "graded-cols" (diag(10^-10 .. 10^10) on one side; both sides for Hermitian structures),
#: "tiny" (largest entry 0.25 safmin / eps, as LAPACK's dlatb4: 2.5e-293 in float64, 2.5e-32 in
#: float32; smaller norms leave too few significant bits in the subnormal range for any solver).
KINDS = {
    "geometric-1e2": ("geometric", 1e2, None),
    "geometric-1e7": ("geometric", 1e7, None),
    "geometric-1e15": ("geometric", 1e15, None),
    "arithmetic-1e4": ("arithmetic", 1e4, None),
    "clustered-small": ("one-large", 1e6, None),
    "clustered-large": ("one-small", 1e6, None),
    "repeated": ("repeated", 2.0, None),
    "rank-deficient": ("rank-half", 1e2, None),
    "graded-rows": ("geometric", 1e2, "graded-rows"),
    "graded-cols": ("geometric", 1e2, "graded-cols"),
    "zero": ("zero", 1.0, None),
    "tiny": ("geometric", 1e2, "tiny"),
}

#: Kinds whose matrices are singular, exactly or to working precision (so that a solve's
#: answer is judged by its backward error only, and least squares must be flagged).
RANK_DEFICIENT = ("rank-deficient", "zero")


def real_dtype(dtype) -> np.dtype:
    return np.finfo(np.dtype(dtype)).dtype


def eps(dtype) -> float:
    return float(np.finfo(np.dtype(dtype)).eps)


def is_complex(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.complexfloating)


def spectrum(mode: str, cond: float, k: int) -> np.ndarray:
    """k values in [1/cond, 1], largest first, as dlatms's modes (plus "repeated", "rank-half",
    "zero")."""
    if mode == "geometric":
        return np.geomspace(1.0, 1.0 / cond, k)
    if mode == "arithmetic":
        return np.linspace(1.0, 1.0 / cond, k)
    if mode == "one-large":
        return np.r_[1.0, np.full(k - 1, 1.0 / cond)]
    if mode == "one-small":
        return np.r_[np.ones(k - 1), 1.0 / cond]
    if mode == "repeated":
        return np.r_[np.ones(k - k // 2), np.full(k // 2, 1.0 / cond)]
    if mode == "rank-half":
        return np.r_[np.geomspace(1.0, 1.0 / cond, k - k // 2), np.zeros(k // 2)]
    if mode == "zero":
        return np.zeros(k)
    raise ValueError(f"unknown spectrum mode {mode!r}")


def unitary(rng, k: int, complex_: bool) -> np.ndarray:
    """A Haar-random k x k unitary (orthogonal when not complex_)."""
    g = rng.standard_normal((k, k)) + (1j * rng.standard_normal((k, k)) if complex_ else 0)
    q, r = np.linalg.qr(g)
    d = np.diagonal(r)
    return q * (d / np.abs(d))


def _scaled(a: np.ndarray, scaling, dtype, hermitian: bool) -> np.ndarray:
    m, n = a.shape
    if scaling == "tiny":  # LAPACK's dlatb4: norm 0.25 safmin / eps, the smallest it tests
        info = np.finfo(real_dtype(dtype))
        return a * (0.25 * float(info.tiny) / float(info.eps) / np.max(np.abs(a)))
    if scaling in ("graded-rows", "graded-cols"):
        if hermitian:  # D A D keeps the structure
            d = np.logspace(-10, 10, n) if scaling == "graded-rows" else np.logspace(10, -10, n)
            return d[:, None] * a * d[None, :]
        if scaling == "graded-rows":
            return np.logspace(-10, 10, m)[:, None] * a
        return a * np.logspace(-10, 10, n)[None, :]
    return a


def matrix(kind: str, m: int, n: int, dtype, structure: str = "general", seed: int = 0) -> np.ndarray:
    """An (m, n) matrix of ``kind`` (:data:`KINDS`) in ``dtype``.

    structure: "general" (singular values from the kind's spectrum), "spd" (Hermitian, those
    values as its eigenvalues: positive semi-definite) or "hermitian" (eigenvalues of
    alternating sign, so indefinite). Hermitian structures are square.
    """
    mode, cond, scaling = KINDS[kind]
    rng = np.random.default_rng(seed + 7919 * list(KINDS).index(kind))
    cplx = is_complex(dtype)
    k = min(m, n)
    s = spectrum(mode, cond, k)
    if structure == "general":
        a = (unitary(rng, m, cplx)[:, :k] * s) @ np.conj(unitary(rng, n, cplx)[:, :k]).T
    else:
        assert m == n, "Hermitian structures are square"
        w = s if structure == "spd" else s * np.where(np.arange(k) % 2 == 0, 1.0, -1.0)
        q = unitary(rng, n, cplx)
        a = (q * w) @ np.conj(q).T
        a = (a + np.conj(a).T) / 2
    return _scaled(a, scaling, dtype, structure != "general").astype(dtype)


def hermitian_of_lower(a: np.ndarray) -> np.ndarray:
    """The Hermitian matrix an operation that reads a's lower triangle works on."""
    strict = np.tril(a, -1)
    return strict + np.conj(strict).T + np.diag(np.real(np.diagonal(a)))


def hermitian_band(n: int, band: int, dtype, seed: int = 0) -> np.ndarray:
    """An n x n Hermitian matrix with Gaussian entries within ``band`` of the diagonal (half-
    bandwidth band, real diagonal), exactly zero beyond it."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if is_complex(dtype) else 0)
    i, j = np.indices((n, n))
    low = np.where((i > j) & (i - j <= band), x, 0)
    return (low + np.conj(low).T + np.diag(rng.standard_normal(n))).astype(dtype)


def rhs(m: int, k: int, dtype, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((m, k)) + (1j * rng.standard_normal((m, k)) if is_complex(dtype) else 0)
    return b.astype(dtype)


# --- ratios (in double precision, of the rounded inputs) and the verdict ----------------------


def wide(x) -> np.ndarray:
    """x in complex128 (or float64), for references."""
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def norm1(x) -> float:
    """LAPACK's 1-norm: largest column sum of a matrix, sum of a vector."""
    x = wide(x)
    return float(np.linalg.norm(x, 1)) if x.ndim == 2 else float(np.sum(np.abs(x)))


def ratio(residual: float, scale: float, n: int, dtype) -> float:
    """residual / (scale * n * eps): LAPACK's test ratio (0 for a zero residual)."""
    if residual == 0.0:
        return 0.0
    return float(residual) / (max(float(scale), np.finfo(np.float64).tiny) * n * eps(dtype))


def backward_error(a, x, b, dtype) -> float:
    """A solve's ||A x - b|| / ((||A|| ||x|| + ||b||) N eps) (LAPACK's dget02, with ||b|| in
    the scale so that a right x = 0 is judged right)."""
    a, x, b = wide(a), wide(x), wide(b)
    return ratio(norm1(a @ x - b), norm1(a) * norm1(x) + norm1(b), max(a.shape), dtype)


def factor_error(a, product, dtype) -> float:
    """||A - product|| / (||A|| N eps) (dpot01, dget01, dqrt01)."""
    a = wide(a)
    return ratio(norm1(a - wide(product)), norm1(a), max(a.shape), dtype)


def orthogonality(q, dtype) -> float:
    """||Q^H Q - I|| / (N eps) for Q with orthonormal columns (dqrt01, dort01)."""
    q = wide(q)
    return ratio(norm1(np.conj(q).T @ q - np.eye(q.shape[1])), 1.0, max(q.shape), dtype)


def value_error(w, reference, scale: float, n: int, dtype) -> float:
    """max |w - reference| / (scale N eps): eigenvalues or singular values against LAPACK's in
    double precision, scale = ||A||."""
    return ratio(float(np.max(np.abs(wide(w) - wide(reference)), initial=0.0)), scale, n, dtype)


def _all_nan(outputs) -> bool:
    return all(np.all(np.isnan(np.asarray(o))) for o in outputs)


def assert_right_or_flagged(label: str, outputs, status, ratios) -> None:
    """The battery's one verdict: a result is right (finite, every LAPACK ratio of ``ratios()``
    at most :data:`THRESHOLD`) or flagged (a non-zero ``status`` and every output NaN; where
    the function has no status, ``status`` None, every output NaN). A finite wrong answer with
    status 0, NaN with status 0, or finite outputs with a non-zero status all fail.

    outputs: the arrays the call returned (NumPy); ratios: a function giving {name: ratio},
    called only for an unflagged result.
    """
    outputs = [np.asarray(o) for o in outputs]
    code = None if status is None else int(np.asarray(status))
    if code:
        assert _all_nan(outputs), f"{label}: status {code} but outputs are not all NaN"
        return
    if code is None and _all_nan(outputs):
        return
    finite = all(np.all(np.isfinite(o)) for o in outputs)
    assert finite, f"{label}: status {code} with non-finite outputs (neither right nor flagged)"
    got = ratios()
    bad = {k: v for k, v in got.items() if not v <= THRESHOLD}
    assert not bad, (
        f"{label}: status {code} and a finite answer outside LAPACK's ratios (threshold "
        f"{THRESHOLD}): " + ", ".join(f"{k} = {v:.3g}" for k, v in got.items())
    )
