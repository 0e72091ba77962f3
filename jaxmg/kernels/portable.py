"""Portable per-shard kernels: pure JAX on any platform (CPU, GPU, TPU).

Each kernel runs on every device inside ``shard_map`` (see ``jaxmg._sharded``):
it gathers the whole matrix from the local blocks, calls JAX's own dense
linear algebra, and returns outputs in the kernel contract (local blocks of
matrix outputs, whole solutions and scalars). Correct everywhere; it does not
scale past one device's memory, which is what the native backend is for.

Conventions shared with the native backend: only the lower triangle of a
Hermitian matrix is read; ``status`` is 0 on success and otherwise the
1-based index of the first failing pivot (LAPACK ``info``), or -1 when a
result is not finite for another reason.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular

from .._sharded import gather_block, local_block

NAME = "portable"


def _pivot_status(pivots: jax.Array) -> jax.Array:
    """LAPACK-style info from the diagonal of a factor: first non-finite or zero pivot, 1-based."""
    bad = ~jnp.isfinite(pivots) | (pivots == 0)
    return jnp.where(jnp.any(bad), jnp.argmax(bad) + 1, 0).astype(jnp.int32)


def _finite_status(*arrays: jax.Array) -> jax.Array:
    ok = jnp.array(True)
    for x in arrays:
        ok = ok & jnp.all(jnp.isfinite(x))
    return jnp.where(ok, 0, -1).astype(jnp.int32)


def _cholesky_lower(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Lower Cholesky factor of the whole matrix (lower triangle read) and its status."""
    chol = lax.linalg.cholesky(a, symmetrize_input=False)
    diag = jnp.real(jnp.diagonal(chol, axis1=-2, axis2=-1))
    status = _pivot_status(jnp.where(diag > 0, diag, 0))
    return chol, status


def _cho_solve(chol: jax.Array, b: jax.Array) -> jax.Array:
    y = solve_triangular(chol, b, lower=True)
    return solve_triangular(chol, y, lower=True, trans="C")


def _as_matrix(b: jax.Array) -> jax.Array:
    return b[:, None] if b.ndim == 1 else b


def _like_rhs(x: jax.Array, b: jax.Array) -> jax.Array:
    return x[:, 0] if b.ndim == 1 else x


def potrs(a, b, *, grid):
    """Solve A x = b for Hermitian positive-definite A; returns (x, logdet, status)."""
    chol, status = _cholesky_lower(gather_block(a, grid))
    x = _like_rhs(_cho_solve(chol, _as_matrix(b)), b)
    logdet = 2 * jnp.sum(jnp.log(jnp.real(jnp.diagonal(chol))))
    return x, logdet, status


def cholesky(a, *, grid):
    """Lower factor L (local block) with A = L L^H, and status."""
    chol, status = _cholesky_lower(gather_block(a, grid))
    return local_block(jnp.tril(chol), grid), status


def lu_solve(a, b, *, grid):
    """Solve A x = b by LU with partial pivoting; returns (x, status)."""
    lu, piv = jax.scipy.linalg.lu_factor(gather_block(a, grid))
    x = jax.scipy.linalg.lu_solve((lu, piv), _as_matrix(b))
    return _like_rhs(x, b), _pivot_status(jnp.diagonal(lu))


def least_squares(a, b, *, grid):
    """Minimise ||A x - b||_2 for M x N A with M >= N, by QR; returns (x, status)."""
    q, r = jnp.linalg.qr(gather_block(a, grid), mode="reduced")
    y = jnp.conj(q).T @ _as_matrix(b)
    x = solve_triangular(r, y, lower=False)
    return _like_rhs(x, b), _pivot_status(jnp.diagonal(r))


def qr(a, *, grid):
    """Reduced QR: local blocks of Q (M x N) and R (N x N), and status."""
    q, r = jnp.linalg.qr(gather_block(a, grid), mode="reduced")
    return local_block(q, grid), local_block(r, grid), _finite_status(r)


def syevd(a, *, grid):
    """Eigenvalues (ascending, whole) and eigenvectors (local block) of Hermitian A, and status."""
    v, w = lax.linalg.eigh(gather_block(a, grid), lower=True, symmetrize_input=False)
    return w, local_block(v, grid), _finite_status(w)


def sygvd(a, b, *, grid):
    """A v = lambda B v with B Hermitian positive definite; eigenvectors normalised v^H B v = I."""
    chol, status = _cholesky_lower(gather_block(b, grid))
    full_a = gather_block(a, grid)
    full_a = jnp.tril(full_a) + jnp.conj(jnp.tril(full_a, -1)).T
    c = solve_triangular(chol, full_a, lower=True)
    c = solve_triangular(chol, jnp.conj(c).T, lower=True)
    v, w = lax.linalg.eigh(c, lower=True, symmetrize_input=True)
    v = solve_triangular(chol, v, lower=True, trans="C")
    status = jnp.where(status != 0, status, _finite_status(w))
    return w, local_block(v, grid), status


def gesvd(a, *, grid, full_matrices):
    """Singular values (descending) and local blocks of U and V^H, and status."""
    u, s, vh = jnp.linalg.svd(gather_block(a, grid), full_matrices=full_matrices)
    return local_block(u, grid), s, local_block(vh, grid), _finite_status(s)


def polar(a, *, grid):
    """A = U_p H with U_p (M x N) having orthonormal columns and H (N x N) Hermitian PSD."""
    u, s, vh = jnp.linalg.svd(gather_block(a, grid), full_matrices=False)
    u_p = u @ vh
    h = (jnp.conj(vh).T * s.astype(vh.dtype)) @ vh
    h = (h + jnp.conj(h).T) / 2
    return local_block(u_p, grid), local_block(h, grid), _finite_status(s)
