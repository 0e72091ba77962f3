"""Polar decomposition by QDWH, and the SVD composed from it, as per-shard kernels on any backend.

``polar(a, grid=...)`` computes ``A = U_p H`` (A: M x N, M >= N; U_p with orthonormal columns, H
Hermitian positive semidefinite) with the QR-based dynamically weighted Halley iteration
(Nakatsukasa, Bai and Gygi 2010; Nakatsukasa and Higham 2013):

    X_0 = A / alpha,  alpha = ||A||_F >= sigma_max,  l_0 = eps <= sigma_min(X_0)
    X_{k+1} = (b_k/c_k) X_k + (a_k - b_k/c_k) X_k (I + c_k X_k^H X_k)^-1

with (a_k, b_k, c_k) from the lower bound l_k (the optimal rational weights), computed ahead on the
host (the schedule depends only on l_0 and the dtype). While c_k > 100 the step is the QR form
``[sqrt(c_k) X; I] = [Q_1; Q_2] R``, ``X_{k+1} = (b_k/c_k) X + (a_k - b_k/c_k)/sqrt(c_k) Q_1 Q_2^H``
(stable for the badly conditioned first steps); afterwards the Cholesky form
``Z = I + c_k X^H X = W^H W``, ``X_{k+1} = (b_k/c_k) X + (a_k - b_k/c_k) (X W^-1) W^-H``. One
Halley step (a, b, c) = (3, 1, 3) follows to clean up. ``H = U_p^H A``, symmetrised.
l_0 = eps covers condition numbers up to about 1 / (eps sqrt(N)) (1e12 in float64 at any N
in reach); for a smaller sigma_min the iteration still converges, on the well-separated singular
values, with fewer correct digits on the smallest ones.

Layout inside the kernel: the local block of A (rows over ``grid.row_axes``, columns over
``grid.col_axes``) is gathered along the columns into a row slab (M / nprow x N), so every step is
local except one all-reduce of an N x N Gram matrix (Cholesky form) or one all-gather of the
slabs' N x N triangular factors (the QR form: TSQR); the N x N factorizations are done on every
device. U_p comes back as a's block layout, H as a block of the N x N layout.

``gesvd`` composes: ``A = U_p H``, ``H = V diag(w) V^H`` (the backend's syevd, given as ``syevd``),
``s = |w|`` descending, ``U = U_p V`` (signs of the columns where w < 0 flipped). With
``full_matrices`` U is completed to M x M by a complete QR of U (gathered).
Status: 0, the syevd status, or -1 where a result is not finite; outputs are NaN where it is not 0.

On the local and batch routes (``local=True``: a whole matrix on one device, or each matrix of a
stack under ``jax.vmap``) every step is a batched matrix product, Cholesky factorization or
triangular solve, with the iteration count fixed by the dtype (the schedule above), so a stack
runs as one sequence of batched calls with no per-matrix loop:

* float32 and complex64 are iterated in float64 and complex128 where JAX has them (x64): the
  Cholesky form's error grows like c_k eps, and in float64 c_0 = 2.7e9 (float32's schedule) costs
  3e-7 at most, below float32's eps, so every step is a Cholesky step; on an H200 float64
  products run at float32's rate (67 TFLOP/s both).
* float64 and complex128 take their two QR-form steps by shifted Cholesky QR (Fukaya, Nakatsukasa,
  Yanagisawa and Yamamoto 2020): ``B = [sqrt(c) X; I]`` has condition number at most
  ``sqrt(1 + c n)``; Cholesky factorizations of ``B^H B + s I`` (s = 11 (m n + n (n + 1)) eps
  ||B||_F^2: one pass at orders up to about 200, two above, :func:`_shifted_passes`) bring it
  below eps^-1/2 / 10, and two plain Cholesky QR passes make Q orthonormal to working precision.
  (Householder QR of a stack runs one matrix after another in cuSOLVER.) Without x64, float32
  takes Householder QR steps, as on the distributed route.
* where A is rank-deficient (singular values below eps ||A||_F do not reach 1 in the fixed number
  of steps), U_p is only a partial isometry: where ``| ||U_p||_F^2 - N | > 10 N eps`` the columns
  of U = U_p V are made orthonormal by a QR of U (Nakatsukasa and Freund 2016, section 5.5): the
  columns of converged singular values are kept (up to rounding), the others completed to an
  orthonormal basis of the rest; the polar factor is then U V^H. Under ``jax.vmap`` this one pass
  runs only where some matrix of the stack needs it.

The distributed route does the same on the row slabs: the test sums over the slabs (and is made
the same on every device), the QR of U is a TSQR (:func:`_tsqr`, as the QR-form steps), and the
polar factor's V comes from the device's own eigensolver on H (whole on every device).

Every matrix product runs at full precision (``jax.default_matmul_precision("highest")``):
with the default, GPUs multiply float32 and complex64 in TF32, and the iteration's products then
leave errors in U_p far above float32's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from jax.sharding import AbstractMesh

from .._layout import Grid
from .._sharded import axis_name as _axes_name, gather_block, local_block
from .algebra import divided, full_precision, platform_name, scaled_norm

#: The local and batch routes' SVD and polar method, by the platform compiled for: the order
#: (min(M, N)) above which svd, svdvals, pinv, lstsq and polar run through QDWH polar + batched
#: eigh (this module) instead of the platform's own SVD; None: at no order. On NVIDIA
#: GPUs cuSOLVER's batched Jacobi SVD serves orders up to 32 (a stack of 512 float32 matrices of
#: order 32 in 0.8 ms on an H200, against 0.41 s at order 33, where JAX runs one gesvd after
#: another; QDWH + eigh takes 45.9 ms for 512 of order 256 where JAX takes 3.29 s:
#: docs/eigen.md). On CPUs LAPACK's divide-and-conquer SVD stays.
POLAR_EIGH_ABOVE: dict = {"cuda": 32, "rocm": 32, "cpu": None}


def polar_eigh_above(platform: str) -> Optional[int]:
    """:data:`POLAR_EIGH_ABOVE`'s order for ``platform`` ("gpu", as JAX's devices name NVIDIA
    GPUs, is "cuda")."""
    return POLAR_EIGH_ABOVE.get(platform_name(platform))


def polar_eigh(platform: str, shape) -> bool:
    """Whether the local and batch routes compute the SVD or polar decomposition of a matrix of
    ``shape`` (M, N) through QDWH polar + eigh on ``platform`` (:data:`POLAR_EIGH_ABOVE`)."""
    above = polar_eigh_above(platform)
    return above is not None and min(shape[-2:]) > above


#: The grid of a whole matrix on one device (the local and batch routes): no mesh axes.
WHOLE = Grid(AbstractMesh((), ()), (), ())

#: The QR form is used while c_k exceeds this (Nakatsukasa and Higham 2013).
QR_ABOVE = 100.0


def schedule(dtype) -> list[tuple[float, float, float]]:
    """The QDWH weights (a_k, b_k, c_k) from l_0 = eps until l_k is 1 to working precision,
    then one Halley step (3, 1, 3)."""
    eps = float(np.finfo(dtype).eps)
    l, out = eps, []
    while 1 - l > 10 * eps and len(out) < 12:
        l2 = l * l
        d = (4 * (1 - l2) / (l2 * l2)) ** (1 / 3)
        a = math.sqrt(1 + d) + 0.5 * math.sqrt(8 - 4 * d + 8 * (2 - l2) / (l2 * math.sqrt(1 + d)))
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        out.append((a, b, c))
        l = min(1.0, l * (a + b * l2) / (1 + c * l2))
    out.append((3.0, 1.0, 3.0))
    return out


def _psum_rows(x, grid):
    """Sum over the row slabs (the mesh axes the rows are split over)."""
    return jax.lax.psum(x, _axes_name(grid.row_axes)) if grid.row_axes else x


def _frobenius(x, grid):
    """||A||_F from the row slabs (``algebra.scaled_norm``: no square underflows or overflows)."""
    if not grid.row_axes:
        return scaled_norm(x)
    axes = _axes_name(grid.row_axes)
    return scaled_norm(x, max_over=lambda big: jax.lax.pmax(big, axes), sum_over=lambda s: jax.lax.psum(s, axes))


def _gram(x, grid):
    """X^H X (N x N, replicated) from the row slabs."""
    return _psum_rows(jnp.conj(x).T @ x, grid)


def _tsqr(x, grid, tail=None):
    """(Q's row slab, Q's tail rows, R) of the reduced QR of ``[X; tail]``, X in row slabs over
    ``grid``'s process rows, ``tail`` (optional) replicated rows below it: one QR per slab, an
    all-gather of the slabs' triangular factors and one QR of them stacked (TSQR); one QR of the
    stacked matrix where there is one slab. R is the same on every device."""
    n = x.shape[-1]
    if grid.nprow == 1:
        q, r = jnp.linalg.qr(x if tail is None else jnp.concatenate([x, tail], axis=0), mode="reduced")
        return q[: x.shape[0]], q[x.shape[0] :], r
    q_loc, r_loc = jnp.linalg.qr(x, mode="reduced")
    r_all = jax.lax.all_gather(r_loc, _axes_name(grid.row_axes), axis=0, tiled=False)
    k = r_all.shape[1]
    stacked = r_all.reshape(-1, n)
    q_small, r = jnp.linalg.qr(stacked if tail is None else jnp.concatenate([stacked, tail], axis=0), mode="reduced")
    me = jax.lax.axis_index(_axes_name(grid.row_axes))
    return q_loc @ jax.lax.dynamic_slice_in_dim(q_small, me * k, k, axis=0), q_small[stacked.shape[0] :], r


def _qr_step(x, grid, a, b, c):
    """One QR-form QDWH step on the row slabs (TSQR of [sqrt(c) X; I])."""
    q1, q2, _ = _tsqr(math.sqrt(c) * x, grid, jnp.eye(x.shape[-1], dtype=x.dtype))
    return (b / c) * x + ((a - b / c) / math.sqrt(c)) * (q1 @ jnp.conj(q2).T)


def _cholesky_step(x, grid, a, b, c):
    """One Cholesky-form QDWH step on the row slabs."""
    n = x.shape[-1]
    z = jnp.eye(n, dtype=x.dtype) + c * _gram(x, grid)
    w = jax.lax.linalg.cholesky((z + jnp.conj(z).T) / 2, symmetrize_input=False)  # Z = W W^H, W lower
    y = solve_triangular(w, jnp.conj(x).T, lower=True)  # W^-1 X^H
    y = solve_triangular(w, y, lower=True, trans="C")  # Z^-1 X^H
    return (b / c) * x + (a - b / c) * jnp.conj(y).T


def _right_solve(x, w):
    """X W^-H for lower triangular W (X R^-1 with R = W^H, the upper Cholesky factor)."""
    return jax.lax.linalg.triangular_solve(w, x, left_side=False, lower=True, transpose_a=True, conjugate_a=True)


def _cholqr_step(x, grid, a, b, c):
    """One QR-form QDWH step with the QR of ``B = [sqrt(c) X; I]`` by shifted Cholesky QR: shifted
    passes until Q's condition number is below eps^-1/2 / 10, then two plain ones (batched
    products, Cholesky factorizations and triangular solves only)."""
    n = x.shape[-1]
    eye = jnp.eye(n, dtype=x.dtype)
    top, bottom = math.sqrt(c) * x, eye
    gram = eye + c * _gram(x, grid)  # B^H B
    m = x.shape[0] * grid.nprow + n
    eps = float(jnp.finfo(x.dtype).eps)
    delta = 11 * (m * n + n * (n + 1)) * eps
    for k, shifted in enumerate(_shifted_passes(math.sqrt(1 + c * n), delta, eps) + [False, False]):
        if k:
            gram = _gram(top, grid) + jnp.conj(bottom).T @ bottom
        shift = (delta * jnp.real(jnp.trace(gram))).astype(x.dtype) if shifted else 0
        w = jax.lax.linalg.cholesky(_hermitian_part(gram) + shift * eye, symmetrize_input=False)
        top, bottom = _right_solve(top, w), _right_solve(bottom, w)
    return (b / c) * x + ((a - b / c) / math.sqrt(c)) * (top @ jnp.conj(bottom).T)


def _shifted_passes(kappa: float, delta: float, eps: float) -> list:
    """The shifted passes that bring a condition number of at most ``kappa`` (B's: sigma_min(B) >= 1,
    ||B||_F^2 <= 1 + c n) below eps^-1/2 / 10, each multiplying it by about sqrt(delta) (a
    working estimate: the bounds of Fukaya et al. are for the worst-case rounding of the Gram
    matrix, and ask for fewer passes than they would at large orders)."""
    passes = [True]
    kappa *= math.sqrt(delta)
    while kappa > 0.1 / math.sqrt(eps) and len(passes) < 4:
        passes.append(True)
        kappa = max(1.0, kappa * math.sqrt(delta))
    return passes


def _iteration_dtype(dtype, local: bool):
    """The dtype the iteration runs in: float32 and complex64 in float64 and complex128 on the
    local route where JAX has them (x64), else ``dtype``."""
    if local and jax.config.jax_enable_x64:
        return jnp.dtype(jnp.complex128 if jnp.issubdtype(dtype, jnp.complexfloating) else jnp.float64)
    return jnp.dtype(dtype)


def _iterate(x, grid, dtype, local: bool):
    """U_p's row slab from X_0 (in the iteration's dtype), with ``dtype``'s schedule."""
    ratio = float(jnp.finfo(dtype).eps / jnp.finfo(x.dtype).eps)  # the Cholesky form's error is c_k eps
    qr_step = _cholqr_step if local and jnp.finfo(x.dtype).bits == 64 else _qr_step
    for a_k, b_k, c_k in schedule(dtype):
        step = qr_step if c_k > QR_ABOVE * ratio else _cholesky_step
        x = step(x, grid, a_k, b_k, c_k)
    return x


def _slab(a, grid):
    """The row slab (M / nprow x N) of this device's block."""
    if grid.col_axes:
        return jax.lax.all_gather(a, _axes_name(grid.col_axes), axis=1, tiled=True)
    return a


def _block_cols(x, grid, ncols):
    """This device's columns of a row slab: a's block layout."""
    if not grid.col_axes:
        return x
    j = jax.lax.axis_index(_axes_name(grid.col_axes))
    return jax.lax.dynamic_slice_in_dim(x, j * ncols, ncols, axis=1)


def _finite(*xs):
    ok = functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(x)) for x in xs])
    return jnp.where(ok, 0, -1).astype(jnp.int32)


def _failed_nan(status, *outputs):
    """``(*outputs, status)`` with every output NaN wherever ``status`` is not 0."""
    bad = status != 0
    return tuple(jnp.where(bad, jnp.full((), jnp.nan, v.dtype), v) for v in outputs) + (status,)


def _polar_slab(a, grid, local: bool = False):
    """(U_p row slab, H whole and symmetrised, the slab of A) of this device's block; ``local``:
    a whole matrix on one device (the module docstring says what changes)."""
    x0 = _slab(a, grid)
    alpha = _frobenius(x0, grid)
    alpha = jnp.where(alpha > 0, alpha, 1).astype(x0.dtype)
    x = _iterate(divided(x0, alpha).astype(_iteration_dtype(x0.dtype, local)), grid, x0.dtype, local).astype(x0.dtype)
    return x, _hermitian_part(_psum_rows(jnp.conj(x).T @ x0, grid)), x0


def _hermitian_part(h):
    return (h + jnp.conj(h).T) / 2


def _partial_isometry(u_p, grid=WHOLE):
    """Whether U_p's columns (row slabs over ``grid``) are not orthonormal:
    | ||U_p||_F^2 - N | > 10 N eps (one pass over U_p; an isometry whose Gram matrix is further
    than 10 N eps from I fails it). The same on every device of the grid."""
    n = u_p.shape[-1]
    needed = jnp.abs(_psum_rows(jnp.sum(jnp.abs(u_p) ** 2), grid) - n) > 10 * n * jnp.finfo(u_p.dtype).eps
    axes = tuple(grid.row_axes) + tuple(grid.col_axes)
    return jax.lax.pmax(needed.astype(jnp.int32), _axes_name(axes)) > 0 if axes else needed


def _orthonormal_columns(u, grid=WHOLE):
    """Q of U = Q R (U in row slabs over ``grid``; TSQR) with the signs of R's diagonal moved into
    Q: U's columns where they are orthonormal already, the others completed to an orthonormal
    set."""
    q, _, r = _tsqr(u, grid)
    d = jnp.diagonal(r)
    return q * jnp.where(jnp.real(d) < 0, -1, 1).astype(q.dtype)[None, :]


def _at_most_once(needed, repair, x):
    """``repair(x)`` where ``needed``, else ``x``: a loop of at most one pass, so that under
    ``jax.vmap`` it runs only where some matrix of the stack needs it."""
    out, _ = jax.lax.while_loop(lambda c: c[1], lambda c: (repair(c[0]), jnp.zeros_like(c[1])), (x, needed))
    return out


def _eigh(h):
    """(w ascending, V) of Hermitian ``h`` by the device's own eigensolver."""
    v, w = jax.lax.linalg.eigh(h, lower=True, symmetrize_input=False)
    return w, v


def _descending(w, v):
    """(s = |w| descending, V's columns in that order, the signs of w in that order)."""
    order = jnp.argsort(-jnp.abs(w))
    return jnp.abs(w)[order], v[:, order], jnp.where(w[order] < 0, -1, 1).astype(v.dtype)


def _complete_polar(x, h, x0, grid, eigh):
    """(U_p, H) with U_p's columns orthonormal where A (slab ``x0``) is rank-deficient to working
    precision and the iterate ``x`` only a partial isometry: with H = V diag(w) V^H (the whole H,
    on every device; ``eigh(h) -> (w, v)``), U_p = Q V^H for Q the orthonormal columns of X V,
    the columns of the largest |w| first (so that those of the converged singular values are
    kept); H = U_p^H A again. Runs at most once, only where needed."""

    def repair(xh):
        _, v, _ = _descending(*eigh(xh[1]))
        u_p = _orthonormal_columns(x @ v, grid) @ jnp.conj(v).T
        return u_p, _hermitian_part(_psum_rows(jnp.conj(u_p).T @ x0, grid))

    return _at_most_once(_partial_isometry(x, grid), repair, (x, h))


def polar_local(a, eigh: Callable[[jax.Array], tuple[jax.Array, jax.Array]], eigen: bool = False):
    """(U_p, H, status) of a whole M x N matrix on one device, M >= N (vmappable): U_p's columns
    are orthonormal for rank-deficient A too (U V^H from its SVD where U_p is a partial isometry;
    V by ``eigh(h) -> (w, v)``, the local route's eigensolver). ``eigen``: (U_p, H, w, V, status)
    with ``H = V diag(w) V^H`` (w ascending), one ``eigh`` of H that the completion reuses (for a
    rank-deficient A, whose H it changes, the eigendecomposition of the H it started from)."""
    x, h, x0 = _polar_slab(a, WHOLE, local=True)
    if not eigen:
        x, h = _complete_polar(x, h, x0, WHOLE, eigh)
        return _failed_nan(_finite(x, h), x, h)
    w, v = eigh(h)
    x, h = _complete_polar(x, h, x0, WHOLE, lambda _: (w, v))
    return _failed_nan(_finite(x, h), x, h, w, v)


def svdvals_local(a, eigvalsh: Callable[[jax.Array], jax.Array]):
    """(s descending, status) of a whole M x N matrix on one device, M >= N (vmappable): the
    eigenvalues of H (values only, by ``eigvalsh(h)``, the local route's eigensolver)."""
    _, h, _ = _polar_slab(a, WHOLE, local=True)
    w = eigvalsh(h)
    s = -jnp.sort(-jnp.abs(w))
    return _failed_nan(_finite(s), s)


polar_local = full_precision(polar_local)
svdvals_local = full_precision(svdvals_local)


@full_precision
def polar(a, *, grid, eigh=_eigh, **unused):
    """(U_p: a's local block, H: local block of the N x N layout, status) of A = U_p H, M >= N;
    U_p's columns are orthonormal for rank-deficient A too (:func:`_complete_polar`, with
    ``eigh(h) -> (w, v)`` of the whole H on every device, by default the device's own)."""
    x, h = _complete_polar(*_polar_slab(a, grid), grid, eigh)
    u_p = _block_cols(x, grid, a.shape[-1])
    h = local_block(h, grid)
    return _failed_nan(_finite(x, h), u_p, h)  # x and h are the same on every device of the grid


@full_precision
def gesvd(a, *, grid, full_matrices, syevd, local: bool = False, **unused):
    """(U: a's block, M x N or M x M; s: N descending, whole; V^H: block of N x N; status), with
    ``syevd(h_block, grid=grid) -> (w, v_block, status)`` the backend's eigensolver; ``local``: a
    whole matrix on one device (``grid`` :data:`WHOLE`; vmappable)."""
    m_loc, n_loc = a.shape
    x, h, _ = _polar_slab(a, grid, local)
    w, v_block, status = syevd(local_block(h, grid), grid=grid)
    v = gather_block(v_block, grid)  # N x N whole
    s, v, sign = _descending(w, v)
    u = (x @ v) * sign[None, :]  # row slab of U (M / nprow x N)
    u = _at_most_once(_partial_isometry(x, grid), functools.partial(_orthonormal_columns, grid=grid), u)
    if full_matrices and m_loc * grid.nprow > v.shape[0]:
        u_whole = _gather_rows(u, grid)
        q, _ = jnp.linalg.qr(u_whole, mode="complete")
        u_whole = jnp.concatenate([u_whole, q[:, u_whole.shape[1] :]], axis=1)
        u_out = local_block(u_whole, grid)
    else:
        u_out = _block_cols(u, grid, n_loc)
    vh = local_block(jnp.conj(v).T, grid)
    return _failed_nan(jnp.where(status != 0, status, _finite(u_out, s, vh)), u_out, s, vh)


def _gather_rows(x, grid):
    if grid.row_axes:
        return jax.lax.all_gather(x, _axes_name(grid.row_axes), axis=0, tiled=True)
    return x
