"""Every operation x dtype x mesh layout against NumPy, with LAPACK-style scaled residuals.

Also checks that outputs keep the caller's layout: solutions take b's sharding,
matrix outputs a's, and eigenvalues, singular values and scalars are replicated.
"""

import numpy as np
import pytest
from jax.sharding import AxisType

import jaxmg
from helpers import (
    DTYPES,
    LAYOUTS,
    hermitian_matrix,
    make_mesh,
    norm,
    put,
    random_matrix,
    rows_spec,
    same_spec,
    scaled,
    spd_matrix,
)

N = 32  # divisible by every mesh axis
M = 64  # rows of tall matrices
TOL = 60.0  # bound on scaled residuals (LAPACK's test suite uses 30 with a smaller constant)

pytestmark = pytest.mark.parametrize("layout", list(LAYOUTS))
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
#: The solves' (dtype, right-hand side) pairs: each dtype with a vector or a matrix b in the quick
#: run, each with the other in the slow one.
solve_cases = pytest.mark.parametrize(
    "dtype,rhs",
    [
        pytest.param(d, r, id=f"{np.dtype(d).name}-{r}", marks=[pytest.mark.slow] if (i + j) % 2 else [])
        for i, d in enumerate(DTYPES)
        for j, r in enumerate(["vector", "matrix"])
    ],
)


def setup(layout):
    shape, names, spec = LAYOUTS[layout]
    axis_types = AxisType.Auto if layout.endswith("-auto") else AxisType.Explicit
    return make_mesh(shape, names, axis_types=axis_types), spec


def tall(layout, dtype, seed):
    """The layout's spec, a random M x N matrix A of ``dtype`` and A laid out on the layout."""
    mesh, spec = setup(layout)
    A = random_matrix(np.random.default_rng(seed), (M, N), dtype)
    return spec, A, put(A, mesh, spec)


def assert_replicated(x):
    assert x.sharding.is_fully_replicated, x.sharding


@solve_cases
def test_potrs(layout, dtype, rhs):
    mesh, spec = setup(layout)
    rng = np.random.default_rng(1)
    A = spd_matrix(rng, N, dtype)
    B = random_matrix(rng, (N,) if rhs == "vector" else (N, 3), dtype)
    b = put(B, mesh, rows_spec(spec))
    x, logdet, status = jaxmg.potrs(put(A, mesh, spec), b, return_logdet=True, return_status=True)
    X = np.asarray(x)
    assert X.shape == B.shape and X.dtype == dtype
    assert scaled(norm(A @ X - B), norm(A) * norm(X), N, dtype) < TOL
    assert np.isclose(float(logdet), np.linalg.slogdet(A.astype(np.complex128))[1], rtol=1e3 * np.finfo(dtype).eps)
    assert int(status) == 0
    assert same_spec(x, rows_spec(spec))
    assert_replicated(logdet)
    assert_replicated(status)


@dtypes
def test_cholesky(layout, dtype):
    mesh, spec = setup(layout)
    A = spd_matrix(np.random.default_rng(2), N, dtype)
    L = jaxmg.cholesky(put(A, mesh, spec))
    Lh = np.asarray(L)
    assert np.allclose(np.triu(Lh, 1), 0)
    assert scaled(norm(Lh @ Lh.conj().T - A), norm(A), N, dtype) < TOL
    assert same_spec(L, spec)


@solve_cases
def test_lu_solve(layout, dtype, rhs):
    mesh, spec = setup(layout)
    rng = np.random.default_rng(3)
    A = random_matrix(rng, (N, N), dtype) + N * np.eye(N, dtype=dtype) / 4
    B = random_matrix(rng, (N,) if rhs == "vector" else (N, 2), dtype)
    x, status = jaxmg.lu_solve(put(A, mesh, spec), put(B, mesh, rows_spec(spec)), return_status=True)
    X = np.asarray(x)
    assert scaled(norm(A @ X - B), norm(A) * norm(X), N, dtype) < TOL
    assert int(status) == 0
    assert same_spec(x, rows_spec(spec))


@solve_cases
def test_least_squares(layout, dtype, rhs):
    mesh, spec = setup(layout)
    rng = np.random.default_rng(4)
    A = random_matrix(rng, (M, N), dtype)
    B = random_matrix(rng, (M,) if rhs == "vector" else (M, 2), dtype)
    x = jaxmg.least_squares(put(A, mesh, spec), put(B, mesh, rows_spec(spec)))
    X = np.asarray(x)
    expected = np.linalg.lstsq(A.astype(np.complex128), B.astype(np.complex128), rcond=None)[0]
    # Normal-equations residual: A^H (A x - b) = 0 at the minimiser.
    assert scaled(norm(A.conj().T @ (A @ X - B)), norm(A) ** 2 * norm(X) + norm(A) * norm(B), M, dtype) < TOL
    assert np.allclose(X, expected, atol=1e3 * np.finfo(dtype).eps * max(1, norm(expected)))
    assert same_spec(x, rows_spec(spec))


@dtypes
def test_qr(layout, dtype):
    spec, A, a = tall(layout, dtype, 5)
    q, r = jaxmg.qr(a)
    Q, R = np.asarray(q), np.asarray(r)
    assert Q.shape == (M, N) and R.shape == (N, N)
    assert np.allclose(np.tril(R, -1), 0)
    assert scaled(norm(Q @ R - A), norm(A), M, dtype) < TOL
    assert scaled(norm(Q.conj().T @ Q - np.eye(N)), 1.0, M, dtype) < TOL
    assert same_spec(q, spec) and same_spec(r, spec)


@dtypes
def test_syevd(layout, dtype):
    mesh, spec = setup(layout)
    A = hermitian_matrix(np.random.default_rng(6), N, dtype)
    w, v = jaxmg.syevd(put(A, mesh, spec))
    W, V = np.asarray(w), np.asarray(v)
    assert np.all(np.diff(W) >= 0)
    assert scaled(norm(A @ V - V * W), norm(A), N, dtype) < TOL
    assert scaled(norm(V.conj().T @ V - np.eye(N)), 1.0, N, dtype) < TOL
    assert np.allclose(W, np.linalg.eigvalsh(A.astype(np.complex128)), atol=1e2 * np.finfo(dtype).eps * norm(A))
    assert same_spec(v, spec)
    assert_replicated(w)
    w_only = jaxmg.syevd(put(A, mesh, spec), return_eigenvectors=False)
    assert np.allclose(np.asarray(w_only), W)


@dtypes
def test_sygvd(layout, dtype):
    mesh, spec = setup(layout)
    rng = np.random.default_rng(7)
    A, B = hermitian_matrix(rng, N, dtype), spd_matrix(rng, N, dtype)
    w, v = jaxmg.sygvd(put(A, mesh, spec), put(B, mesh, spec))
    W, V = np.asarray(w), np.asarray(v)
    assert np.all(np.diff(W) >= 0)
    assert scaled(norm(A @ V - (B @ V) * W), norm(A) * norm(V), N, dtype) < TOL
    assert scaled(norm(V.conj().T @ B @ V - np.eye(N)), norm(B) * norm(V) ** 2, N, dtype) < TOL
    assert same_spec(v, spec)


@dtypes
@pytest.mark.parametrize("full_matrices", [False, True])
def test_gesvd(layout, dtype, full_matrices):
    spec, A, a = tall(layout, dtype, 8)
    u, s, vh = jaxmg.gesvd(a, full_matrices=full_matrices)
    U, S, Vh = np.asarray(u), np.asarray(s), np.asarray(vh)
    assert U.shape == ((M, M) if full_matrices else (M, N))
    assert np.all(np.diff(S) <= 0)
    assert scaled(norm((U[:, :N] * S) @ Vh - A), norm(A), M, dtype) < TOL
    assert scaled(norm(U.conj().T @ U - np.eye(U.shape[1])), 1.0, M, dtype) < TOL
    assert same_spec(u, spec) and same_spec(vh, spec)
    assert_replicated(s)


@dtypes
def test_polar(layout, dtype):
    spec, A, a = tall(layout, dtype, 9)
    u_p, h = jaxmg.polar(a)
    U, H = np.asarray(u_p), np.asarray(h)
    assert scaled(norm(U @ H - A), norm(A), M, dtype) < TOL
    assert scaled(norm(U.conj().T @ U - np.eye(N)), 1.0, M, dtype) < TOL
    assert np.allclose(H, H.conj().T, atol=10 * np.finfo(dtype).eps * norm(H))
    assert np.linalg.eigvalsh(H.astype(np.complex128)).min() > -1e2 * np.finfo(dtype).eps * norm(H)
    assert same_spec(u_p, spec) and same_spec(h, spec)
