"""Portable per-shard kernels: pure JAX on any platform (CPU, GPU, TPU).

Each kernel runs on every device inside ``shard_map`` (see ``jaxmg._sharded``): it
gathers the whole matrix from the local blocks, calls JAX's own dense linear algebra,
and returns outputs in the kernel contract (local blocks of matrix outputs, whole
solutions and scalars). Correct everywhere; it does not scale past one device's
memory, which is what the native backend is for.

Kernels come in families that share a factor ("state") layout private to the backend:
``cholesky_*`` (state: the lower factor L), ``lu_*`` (state: LAPACK's packed LU and
pivots) and ``qr_*`` (state: Q and R). Conventions shared with the native backend: only
the lower triangle of a Hermitian matrix is read; ``status`` is 0 on success and
otherwise LAPACK's ``info``, or -1 when a result is not finite for another reason (defined
once, in ``jaxmg.kernels.status``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular

from .._sharded import gather_block, local_block
from . import status as _status
from .products import matmul

NAME = "portable"


def _cholesky(a: jax.Array):
    """The lower factor of Hermitian ``a`` (lower triangle read) and LAPACK's info: NaN
    everywhere when a leading minor is not positive definite."""
    chol = lax.linalg.cholesky(a, symmetrize_input=False)
    status = _status.cholesky_info(a, chol)
    return jnp.where(status == _status.OK, jnp.tril(chol), jnp.nan), status


def _as_matrix(b: jax.Array) -> jax.Array:
    return b[:, None] if b.ndim == 1 else b


def _like_rhs(x: jax.Array, b: jax.Array) -> jax.Array:
    return x[:, 0] if b.ndim == 1 else x


def _hermitian_from_lower(a: jax.Array) -> jax.Array:
    return jnp.tril(a) + jnp.conj(jnp.tril(a, -1)).T


# --- Cholesky family: state = the lower factor L in the grid layout -------------------------

def cholesky_factor(a, *, grid):
    """Factor A = L L^H (lower triangle of A read); returns (L's local block, status)."""
    chol, status = _cholesky(gather_block(a, grid))
    return local_block(chol, grid), status


def cholesky_solve(state, b, *, grid):
    """x = A^-1 b from the factor; b and x whole."""
    chol = gather_block(state, grid)
    y = solve_triangular(chol, _as_matrix(b), lower=True)
    return (_like_rhs(solve_triangular(chol, y, lower=True, trans="C"), b),)


def cholesky_logdet(state, *, grid):
    """log det A = 2 sum log diag(L) (real)."""
    chol = gather_block(state, grid)
    return (2 * jnp.sum(jnp.log(jnp.real(jnp.diagonal(chol)))),)


def cholesky_triangle_kind(n: int, tile: int, grid, natural: bool = False) -> tuple[bool, bool]:
    """(lower, reordered) of :func:`cholesky_triangle`'s result: L itself, in a's order."""
    return True, False


def cholesky_triangle(state, *, grid):
    """The factor as a triangular matrix (local block): L."""
    return (state,)


def cholesky_to_a_order(c, *, grid):
    """A matrix in the factored matrix's order taken to a's order: the same order here."""
    return (c,)


def cholesky_lower(state, *, grid):
    """The natural-order lower factor L (local block)."""
    return (state,)


# --- LU family: state = packed LU (grid layout) and pivots (replicated) ---------------------

def lu_factor(a, *, grid):
    """PA = LU with partial pivoting; returns (packed LU local block, pivots, status)."""
    lu, piv = jax.scipy.linalg.lu_factor(gather_block(a, grid))
    return local_block(lu, grid), piv.astype(jnp.int32), _status.first_bad_pivot(jnp.diagonal(lu))


def lu_factor_order(n: int, tile: int, grid) -> dict:
    """How :func:`lu_triangles`' result relates to a (``jaxmg.ops.lu``): LAPACK's packed
    ``a[perm] = L U`` itself."""
    return dict(transposed=False, rows=None, cols=None)


def lu_triangles(lu, *, grid):
    """The packed factor L\\U (local block of the grid layout)."""
    return (lu,)


def lu_solve(lu, piv, b, *, grid, trans):
    """Solve op(A) x = b from the LU factor; trans 0: A, 1: A^T, 2: A^H."""
    x = jax.scipy.linalg.lu_solve((gather_block(lu, grid), piv), _as_matrix(b), trans=trans)
    return (_like_rhs(x, b),)


# --- QR family: state = Q (M x N, grid layout) and R (N x N, replicated) ----------------------

def qr_factor(a, *, grid):
    """Reduced A = QR (M >= N); returns (Q's local block, R whole, status)."""
    q, r = jnp.linalg.qr(gather_block(a, grid), mode="reduced")
    return local_block(q, grid), r, _status.first_bad_pivot(jnp.diagonal(r))


def qr_q(q, r, *, grid, m):
    """Q (M x N, local block); ``m`` (a's rows) is what a backend whose state does not keep it needs."""
    return (q,)


def qr_r(q, r, *, grid):
    """R (N x N, local block)."""
    return (local_block(r, grid),)


def qr_solve(q, r, b, *, grid):
    """The least-squares solution x = R^-1 Q^H b (b has M rows; x has N)."""
    q = gather_block(q, grid)
    x = solve_triangular(r, matmul(jnp.conj(q).T, _as_matrix(b)), lower=False)
    return (_like_rhs(x, b),)


def qr_normal_solve(q, r, y, *, grid):
    """z = (A^H A)^-1 y = R^-1 R^-H y (y and z have N rows)."""
    z = solve_triangular(r, _as_matrix(y), lower=False, trans="C")
    return (_like_rhs(solve_triangular(r, z, lower=False), y),)


# --- Eigen-, singular value and polar decompositions -----------------------------------------

def syevd(a, *, grid):
    """Eigenvalues (ascending, whole) and eigenvectors (local block) of Hermitian A, and status."""
    v, w = lax.linalg.eigh(gather_block(a, grid), lower=True, symmetrize_input=False)
    return w, local_block(v, grid), _status.finite(w)


def sygvd(a, b, *, grid):
    """A v = lambda B v with B Hermitian positive definite; eigenvectors normalised v^H B v = I."""
    chol, status = _cholesky(gather_block(b, grid))
    c = solve_triangular(chol, _hermitian_from_lower(gather_block(a, grid)), lower=True)
    c = solve_triangular(chol, jnp.conj(c).T, lower=True)
    v, w = lax.linalg.eigh(c, lower=True, symmetrize_input=True)
    v = solve_triangular(chol, v, lower=True, trans="C")
    status = _status.either(status, _status.finite(w))
    return w, local_block(v, grid), status


def gesvd(a, *, grid, full_matrices):
    """Singular values (descending) and local blocks of U and V^H, and status."""
    u, s, vh = jnp.linalg.svd(gather_block(a, grid), full_matrices=full_matrices)
    return local_block(u, grid), s, local_block(vh, grid), _status.finite(s)


def polar(a, *, grid):
    """A = U_p H with U_p (M x N) having orthonormal columns and H (N x N) Hermitian PSD."""
    u, s, vh = jnp.linalg.svd(gather_block(a, grid), full_matrices=False)
    u_p = matmul(u, vh)
    h = matmul(jnp.conj(vh).T * s.astype(vh.dtype), vh)
    h = (h + jnp.conj(h).T) / 2
    return local_block(u_p, grid), local_block(h, grid), _status.finite(s)
