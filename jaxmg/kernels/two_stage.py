"""Hermitian eigenvalues and eigenvectors in two stages on one device: dense -> band -> tridiagonal.

The design of LAPACK's ``dsytrd_2stage``/``dsyevd_2stage`` (and MAGMA's, ELPA2's): the one-stage
tridiagonal reduction of ``syevd`` is bound by matrix-vector products; here the dense work is
matrix products and the memory-bound work is confined to a band.

1. **Dense -> band** (:func:`reduce_to_band`): for each panel of ``band`` = b columns, a QR of the
   panel below the band (geqrf through ``jnp.linalg.qr(mode="raw")``: LAPACK on CPUs, cuSOLVER on GPUs) gives
   ``Q = I - Y T Y^H`` (compact WY; T from ``T^-1 = diag(1/tau) + striu(Y^H Y)``), and the
   trailing matrix is updated on both sides as matrix products: ``X = A Y T``,
   ``W = X - 1/2 Y (T^H Y^H X)``, ``A -= [Y W] [W Y]^H``. The panel becomes R (and R^H above the
   diagonal), with exact zeros beyond the band. Static shapes: the panels are grouped into
   ``segments`` groups; a group works on the trailing window of its first panel (a static
   slice), its panels in one ``lax.fori_loop`` at a dynamic offset in it, the reflectors padded
   with zero rows. Flops: ``6 m^2 b`` per panel on an ``m x m`` window (``2 m^2 b`` for
   ``A Y T``, ``4 m^2 b`` for the update as one product of inner dimension 2b), ``2 N^3`` over the
   panels with exact windows, times ``(S + 1)(2 S + 1) / (2 S^2)`` for S groups of equal panel
   counts: ``2.39 N^3`` for S = 8 (:data:`SEGMENTS`; fewer below 32 panels), against LAPACK's
   ``4/3 N^3`` (its her2k updates one triangle).
2. **Band -> tridiagonal** by bulge chasing (:func:`band_to_tridiagonal_reference`), LAPACK
   ``dsb2st``'s task order: sweep i annihilates column i below its first subdiagonal with one
   reflector of length b (the first task); the reflector applied on the right fills a triangle
   (the bulge) below the next diagonal block, whose first column the next task annihilates, and so
   on down the band; what is left of each bulge is annihilated by the next sweep. Every task is the
   same: on the window of 3b rows and columns starting at column ``c``, a reflector from column
   ``c``'s rows ``d .. d + b - 1`` (d = 1 for a sweep's first task, b after), applied on both sides
   as ``A -= w v^H + v w^H``. This module holds the reference, in XLA's operations (one
   ``fori_loop`` over the tasks of :func:`task_order`); the CUDA kernel of the same tasks is
   ``csrc/band.cu``, its sweeps pipelined over thread blocks (:data:`PIPELINE_LAG`), an order
   that :func:`task_order` replays on the reference.
3. **Tridiagonal eigenvalues** (:func:`tridiagonal_eigvalsh`) in O(N^2): LAPACK's ``sterf``
   through a host callback, or bisection (JAX's ``eigh_tridiagonal``, or the CUDA kernel of
   ``csrc/band.cu``). A Hermitian tridiagonal has the eigenvalues of the real one with ``|e|``.
   With eigenvectors (:func:`tridiagonal_eigh`): a unitary diagonal D makes ``D^H T D`` real,
   whose eigenvectors Z (LAPACK's divide and conquer, or cuSOLVERMp's stedc) give ``D Z``.

:func:`eigvalsh` composes them; :func:`eigh` also keeps both stages' reflectors (stage 1's
compact-WY panels, stage 2's one reflector a task, :func:`band_to_tridiagonal_reference`) and
back-transforms ``v = Q1 (Q2 (D Z))`` as matrix products (:func:`apply_q2`: the reflectors of b
sweeps at one task as one block, blocks on disjoint rows batched in a wavefront;
:func:`apply_q1`: the panels in reverse).

Where jaxmg runs it: every Hermitian eigenproblem of the local and batch routes goes through
:func:`device_eigh` (:func:`device_eigvalsh`), which runs the platform's own syevd, or this
solver above the order :data:`TWO_STAGE_ABOVE` holds for the platform compiled for, measured
against cuSOLVER's ``syevd`` (``benchmarks/bench_eigen.py``, impl ``jaxmg.two_stage``); None,
at no order, until measured.
"""

from __future__ import annotations

import functools
import typing
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.linalg import solve_triangular
from jax.typing import ArrayLike

from .._checks import SUPPORTED_DTYPES
from .._dense import adjoint
from . import algebra
from .algebra import full_precision, scaled_norm
from .ffi import band as native_band
from .varying import varying_like

#: Panel groups of stage 1 (each one ``fori_loop`` on a static trailing window).
SEGMENTS = 8
#: Stage-3 methods: LAPACK sterf on the host, JAX's bisection, or the CUDA kernel.
STAGE3_METHODS = ("sterf", "bisection", "native")


# --- shared pieces ---------------------------------------------------------------------------


def hermitian_from_lower(a: jax.Array) -> jax.Array:
    """The Hermitian matrix of ``a``'s lower triangle (its diagonal's real part), as
    ``jnp.linalg.eigvalsh`` reads ``a`` (UPLO='L')."""
    low = jnp.tril(a, -1)
    diag = jnp.real(jnp.diagonal(a, axis1=-2, axis2=-1)).astype(a.dtype)
    return low + adjoint(low) + diag[..., None] * jnp.eye(a.shape[-1], dtype=a.dtype)


def householder(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """LAPACK's ``larfg``: ``(v, tau, beta)`` with ``v[0] = 1``, beta real and
    ``(I - tau v v^H)^H x = beta e_0``; tau = 0 (the identity) where ``x[1:]`` is zero and
    ``x[0]`` is real. x: (m,)."""
    alpha = x[0]
    xnorm = scaled_norm(x[1:])
    alphr, alphi = jnp.real(alpha), jnp.imag(alpha)
    trivial = (xnorm == 0) & (alphi == 0)
    beta = -jnp.copysign(scaled_norm(jnp.stack([jnp.abs(alpha), xnorm])), alphr)
    beta = jnp.where(trivial, alphr, beta)
    safe_beta = jnp.where(trivial, 1, beta)
    tau = jnp.where(trivial, 0, (beta - alpha) / safe_beta).astype(x.dtype)
    denom = jnp.where(trivial, 1, alpha - beta)
    v = (x / denom).at[0].set(1).astype(x.dtype)
    return jnp.where(trivial, jnp.zeros_like(x).at[0].set(1), v), tau, beta


def compact_wy(y: jax.Array, tau: jax.Array) -> jax.Array:
    """T (b x b, upper) with ``H_0 H_1 ... H_{b-1} = I - Y T Y^H`` for ``H_k = I - tau_k y_k
    y_k^H`` (LAPACK's ``larft``, forward, columnwise), from ``T^-1 = diag(1/tau) + striu(Y^H
    Y)``; columns with tau = 0 must be zero in Y (they are the identity)."""
    b = tau.shape[-1]
    inv_tau = jnp.where(tau == 0, 1, 1 / jnp.where(tau == 0, 1, tau))
    t_inv = jnp.triu(adjoint(y) @ y, 1) + jnp.diag(inv_tau)
    eye = 0 * t_inv + jnp.eye(b, dtype=y.dtype)  # batched and laid out as t_inv (a stack under vmap)
    return solve_triangular(t_inv, eye, lower=False)


def zeros_as(a: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Zeros of ``shape`` in a's dtype that vary and are laid out as ``a``: over the axes of a
    ``jax.shard_map`` that ``a`` varies over, and, under ``jax.vmap`` of a stack split over a
    mesh's Explicit axes, batched as ``a`` (a constant would be neither, and a loop carry or a
    scatter into it would then disagree with the values written into it)."""
    scalar = 0 * jnp.sum(a[..., :1, :1])  # a's batch axes and layout (jnp.zeros_like drops the layout)
    return varying_like(a, jnp.broadcast_to(scalar, shape))


def _check_square(a, name: str) -> jax.Array:
    a = jnp.asarray(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: a must be a square matrix or a stack of them (..., N, N); got shape {a.shape}")
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        a = a.astype(jnp.result_type(float))
    if a.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"{name}: a's dtype must be float32, float64, complex64 or complex128; got {a.dtype}")
    return a


def _check_band(band, n: int, name: str) -> int:
    if isinstance(band, bool) or not isinstance(band, (int, np.integer)) or band < 1:
        raise ValueError(f"{name}: band must be a positive int (the half-bandwidth b); got {band!r}")
    return int(min(band, max(n - 1, 1)))


def scaled_into_range(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sigma a, sigma)``: each matrix of ``a`` (..., N, N) scaled as LAPACK's ``?heevd`` scales
    it, so that its largest entry lies in ``[sqrt(safmin / eps), sqrt(eps / safmin)]`` (sigma = 1
    where it does, or where the matrix is zero); the eigenvalues of ``sigma a`` are ``sigma``
    times ``a``'s, its eigenvectors ``a``'s. Without it, stage 2's products of entries near
    1e-300 underflow (XLA on CPUs flushes subnormals to zero) and entries near 1e300 overflow."""
    info = jnp.finfo(a.dtype)
    small = float(info.tiny) / float(info.eps)
    rmin, rmax = np.sqrt(small), np.sqrt(1 / small)
    top = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True)
    sigma = jnp.where((top > 0) & (top < rmin), rmin / top, jnp.where(top > rmax, rmax / top, 1))
    sigma = jnp.where(jnp.isfinite(sigma) & (sigma > 0), sigma, 1).astype(top.dtype)  # NaN or Inf in a: 1
    return a * sigma.astype(a.dtype), sigma[..., 0]


# --- stage 1: dense -> band ------------------------------------------------------------------


def panel_count(n: int, band: int) -> int:
    """How many panels stage 1 reduces: those with an entry beyond the band (N - k - b >= 2)."""
    return 0 if n < band + 2 else (n - band - 2) // band + 1


#: The fewest panels of a group (fewer loops to compile for small matrices).
MIN_GROUP = 4


def _segments(panels: int, segments: int) -> list[tuple[int, int]]:
    """``[p0, p1)`` ranges of about equal panel counts, at most ``segments`` of them, each of
    at least :data:`MIN_GROUP` panels where there are that many."""
    s = max(1, min(segments, panels // MIN_GROUP))
    edges = [round(k * panels / s) for k in range(s + 1)]
    return [(p0, p1) for p0, p1 in zip(edges[:-1], edges[1:]) if p1 > p0]


def _panel_qr(cols: jax.Array, start) -> tuple[jax.Array, jax.Array, jax.Array]:
    """QR of ``cols[start:]`` (m x b, rows from a dynamic start) with static shapes: Y (m x b,
    zero above ``start``), T (b x b) and R rolled to rows ``start .. start + b - 1`` (zero
    elsewhere), so that ``Q^H cols[start:] = R`` for ``Q = I - Y T Y^H``."""
    m, b = cols.shape
    rows = jnp.arange(m)[:, None]
    active = rows < m - start
    panel = jnp.where(active, jnp.roll(cols, -start, axis=0), 0)
    h, tau = jnp.linalg.qr(panel, mode="raw")  # h is geqrf's factor, transposed as NumPy's
    qr = jnp.swapaxes(h, -1, -2)
    y = jnp.where(active, jnp.tril(qr, -1) + jnp.eye(m, b, dtype=qr.dtype), 0)
    y = jnp.where(tau[None, :] == 0, 0, y)
    r = jnp.where(rows < b, jnp.triu(qr), 0)
    t = compact_wy(y, tau)
    return jnp.roll(y, start, axis=0), t, jnp.roll(r, start, axis=0)


def _band_step(w: jax.Array, j, b: int):
    """One panel (columns ``j .. j + b - 1`` of the Hermitian window w) reduced: w <- Q^H w Q
    with the panel's rows below the band replaced by R exactly. Returns (w, Y, T)."""
    m = w.shape[0]
    start = j + b
    cols = lax.dynamic_slice_in_dim(w, j, b, axis=1)
    y, t, r = _panel_qr(cols, start)
    yt = y @ t
    x = w @ yt
    wv = x - 0.5 * (y @ (adjoint(yt) @ x))
    w = w - jnp.concatenate([y, wv], axis=1) @ adjoint(jnp.concatenate([wv, y], axis=1))
    rows = jnp.arange(m)[:, None]
    panel = jnp.where(rows >= start, r, lax.dynamic_slice_in_dim(w, j, b, axis=1))
    w = lax.dynamic_update_slice_in_dim(w, panel, j, axis=1)
    w = lax.dynamic_update_slice_in_dim(w, adjoint(panel), j, axis=0)
    return w, y, t


@functools.partial(jax.jit, static_argnames=("band", "reflectors", "segments"))
@full_precision
def _reduce(a, band: int, reflectors: bool, segments: int):
    n, b = a.shape[-1], band
    panels = panel_count(n, b)
    ys = zeros_as(a, (panels, n, b)) if reflectors else None
    ts = zeros_as(a, (panels, b, b)) if reflectors else None
    for p0, p1 in _segments(panels, segments):
        r0 = p0 * b

        def body(p, carry, p0=p0, r0=r0):
            w, ys, ts = carry
            w, y, t = _band_step(w, (p - p0) * b, b)
            if ys is not None:
                ys = ys.at[p].set(jnp.pad(y, ((r0, 0), (0, 0))))
                ts = ts.at[p].set(t)
            return w, ys, ts

        w, ys, ts = lax.fori_loop(p0, p1, body, (a[r0:, r0:], ys, ts))
        a = a.at[r0:, r0:].set(w)
    return hermitian_from_lower(a), ys, ts


@typing.overload
def reduce_to_band(
    a: ArrayLike, band: int, *, reflectors: Literal[False] = False, segments: int = SEGMENTS
) -> jax.Array: ...
@typing.overload
def reduce_to_band(
    a: ArrayLike, band: int, *, reflectors: Literal[True], segments: int = SEGMENTS
) -> tuple[jax.Array, jax.Array, jax.Array]: ...
def reduce_to_band(a: ArrayLike, band: int, *, reflectors: bool = False, segments: int = SEGMENTS):
    """Stage 1: ``B = Q^H A Q`` Hermitian with half-bandwidth ``band`` (zero where |i - j| >
    band), A the Hermitian matrix of ``a``'s lower triangle. a: (N, N), float32 to complex128.

    Returns B (N, N), or ``(B, Y, T)`` with ``reflectors``: Y (P, N, b) and T (P, b, b) for the
    P = :func:`panel_count` panels, ``Q = prod_p (I - Y_p T_p Y_p^H)`` (panel 0 first)."""
    a = _check_square(a, "reduce_to_band")
    if a.ndim != 2:
        raise ValueError(f"reduce_to_band: a must be one matrix (N, N); got shape {a.shape} (map stacks with jax.vmap)")
    band = _check_band(band, a.shape[-1], "reduce_to_band")
    b_mat, ys, ts = _reduce(hermitian_from_lower(a), band, reflectors, segments)
    return (b_mat, ys, ts) if reflectors else b_mat


def lower_band(b_mat: jax.Array, band: int) -> jax.Array:
    """LAPACK's lower band storage of a Hermitian band matrix: ``ab[d, j] = B[j + d, j]`` for d
    = 0 .. band (zero past the matrix's end). b_mat: (..., N, N) -> (..., band + 1, N)."""
    n = b_mat.shape[-1]
    padded = jnp.pad(b_mat, [(0, 0)] * (b_mat.ndim - 2) + [(0, band), (0, 0)])
    j = jnp.arange(n)[None, :]
    return padded[..., j + jnp.arange(band + 1)[:, None], j]


def dense_from_lower_band(ab: jax.Array) -> jax.Array:
    """The Hermitian N x N matrix of lower band storage ab ((band + 1, N)), its diagonal's real part."""
    band, n = ab.shape[-2] - 1, ab.shape[-1]
    low = sum(jnp.diag(ab[d, : n - d], -d) for d in range(1, band + 1)) if band else 0
    return low + adjoint(low) + jnp.diag(jnp.real(ab[0]).astype(ab.dtype))


# --- stage 2: band -> tridiagonal (the reference of csrc/band.cu) -----------------------------

#: Task t of sweep i runs once sweep i - 1 has completed its tasks up to t + 3 (csrc/band.cu):
#: task t' of sweep i - 1 starts at row i + (t' - 1) b, past the end of task t's window
#: (i + 1 + (t + 2) b) exactly when t' >= t + PIPELINE_LAG.
PIPELINE_LAG = 4


def sweep_tasks(n: int, band: int, sweep: int) -> int:
    """How many tasks sweep ``sweep`` (0 .. N - 3) has: its reflectors start at rows
    ``sweep + 1 + t * band`` <= N - 2."""
    return (n - 3 - sweep) // band + 1


def task_window(sweep: int, task: int, band: int) -> tuple[int, int]:
    """(c, d) of a task: its window starts at row and column c, its reflector takes column c's
    rows ``c + d .. c + d + band - 1`` (d = 1 for a sweep's first task, band after)."""
    return (sweep, 1) if task == 0 else (sweep + 1 + (task - 1) * band, band)


def _task_indices(n: int, band: int, lag: int | None) -> list[tuple[int, int]]:
    """The tasks' (sweep, task) in the order they run (see :func:`task_order`)."""
    sweeps = max(n - 2, 0) if band > 1 else 0
    counts = [sweep_tasks(n, band, i) for i in range(sweeps)]
    if lag is None:
        return [(i, t) for i in range(sweeps) for t in range(counts[i])]
    done, order = [0] * sweeps, []
    while any(done[i] < counts[i] for i in range(sweeps)):
        ready = [
            i
            for i in range(sweeps)
            if done[i] < counts[i] and (i == 0 or done[i - 1] >= min(done[i] + lag, counts[i - 1]))
        ]
        for i in reversed(ready):
            order.append((i, done[i]))
            done[i] += 1
    return order


def task_order(n: int, band: int, lag: int | None = None) -> np.ndarray:
    """The tasks' (c, d) (T x 2) in the order they run: sweep after sweep (``lag`` None,
    LAPACK's sequential order), or as csrc/band.cu's kernel may run them, every sweep on its own
    thread block: in rounds, each sweep whose next task t has sweep i - 1's tasks up to
    ``t + lag - 1`` completed (all of them, near its end) runs it, the later sweeps of a round
    first."""
    order = [task_window(i, t, band) for i, t in _task_indices(n, band, lag)]
    return np.array(order, dtype=np.int32).reshape(-1, 2)


def reflector_shape(n: int, band: int) -> tuple[int, int, int]:
    """(S, K, b) of stage 2's reflectors: S = max(N - 2, 0) sweeps, at most K = (N - 3) // b + 1
    tasks a sweep (0 when N < 3), reflectors of length b."""
    return (*native_band.reflector_extents(n, band), band)


def _chase_task(a, c, d, band: int):
    """One bulge-chasing task on the padded dense matrix a: (a, v, tau) with the task's reflector."""
    size = 3 * band
    win = lax.dynamic_slice(a, (c, c), (size, size))
    v, tau, beta = householder(lax.dynamic_slice_in_dim(win[:, 0], d, band))
    vw = jnp.roll(jnp.pad(v, (0, size - band)), d)  # v on the window's rows d .. d + band - 1
    p = tau * (win @ vw)
    s = jnp.conj(tau) * jnp.vdot(vw, p)
    w = p - 0.5 * s * vw
    win = win - jnp.outer(w, jnp.conj(vw)) - jnp.outer(vw, jnp.conj(w))
    col = lax.dynamic_update_slice_in_dim(win[:, 0], jnp.where(jnp.arange(band) == 0, beta, 0).astype(a.dtype), d, 0)
    win = win.at[:, 0].set(col).at[0, :].set(jnp.conj(col))
    return lax.dynamic_update_slice(a, win, (c, c)), v, tau


@functools.partial(jax.jit, static_argnames=("reflectors",))
def _chase(ab, tasks, reflectors: bool):
    band, n = ab.shape[0] - 1, ab.shape[1]
    pad = 3 * band
    a = jnp.pad(dense_from_lower_band(ab), ((0, pad), (0, pad)))
    sweeps, k, _ = reflector_shape(n, band)
    vs = zeros_as(ab, (sweeps, k, band)) if reflectors else None
    taus = zeros_as(ab, (sweeps, k)) if reflectors else None

    def task(j, carry):
        a_j, vs_j, taus_j = carry
        c, d, i, t = tasks[j, 0], tasks[j, 1], tasks[j, 2], tasks[j, 3]
        a_j, v, tau = _chase_task(a_j, c, d, band)
        if vs_j is not None:
            vs_j, taus_j = vs_j.at[i, t].set(v), taus_j.at[i, t].set(tau)
        return a_j, vs_j, taus_j

    if tasks.shape[0]:
        a, vs, taus = lax.fori_loop(0, tasks.shape[0], task, (a, vs, taus))
    idx = jnp.arange(n)
    d = jnp.real(a[idx, idx])
    e = a[idx[1:], idx[:-1]]
    return (d, e, vs, taus) if reflectors else (d, e)


def band_to_tridiagonal_reference(ab: ArrayLike, *, reflectors: bool = False, lag: int | None = None):
    """Stage 2 in XLA's operations, task for task as ``csrc/band.cu``: the Hermitian band matrix
    B in lower band storage ab ((b + 1, N), :func:`lower_band`) reduced to a Hermitian
    tridiagonal ``T = Q2^H B Q2`` by bulge chasing. Returns ``(d, e)`` (d: N real, the diagonal;
    e: N - 1, the subdiagonal, complex for complex B), and with ``reflectors`` ``(d, e, v, tau)``,
    Q2's reflectors in the layout ``csrc/band.cu`` writes too:

    - S = max(N - 2, 0) sweeps and at most K = (N - 3) // b + 1 tasks a sweep (K = 0 when
      N < 3; :func:`reflector_shape`); ``v`` (S, K, b) in ab's dtype, ``tau`` (S, K);
    - task t of sweep i has the reflector ``I - tau[i, t] v[i, t] v[i, t]^H`` acting on rows
      ``i + 1 + t b + k`` for k = 0 .. b - 1, with ``v[i, t, 0] = 1`` (entries for rows past
      N - 1 are zero); tasks a sweep does not have (t >= :func:`sweep_tasks`), and every task
      when b = 1 (B is tridiagonal already), are zero (tau = 0, v = 0);
    - ``Q2 = prod over (i, t) in lexicographic order of (I - tau[i, t] v[i, t] v[i, t]^H)``.

    :func:`apply_q2` applies Q2. The tasks run in :func:`task_order` (``lag``: the pipelined order
    of the CUDA kernel, which gives the same result bit for bit). One task after another on a
    dense copy: a reference for tests and small matrices, not for speed."""
    ab = jnp.asarray(ab)
    if ab.ndim != 2 or ab.shape[0] < 1:
        raise ValueError(
            f"band_to_tridiagonal_reference: ab must be lower band storage (band + 1, N); got shape {ab.shape}"
        )
    if ab.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"band_to_tridiagonal_reference: ab's dtype must be float32 to complex128; got {ab.dtype}")
    n, band = ab.shape[1], ab.shape[0] - 1
    tasks = [(*task_window(i, t, band), i, t) for i, t in _task_indices(n, band, lag)]
    return _chase(ab, jnp.asarray(np.array(tasks, dtype=np.int32).reshape(-1, 4)), bool(reflectors))


# --- back-transformations: Q2 and Q1 applied as matrix products ------------------------------

#: :func:`apply_q2` splits the wavefront's steps into products of at most a 1/Q2_CHUNKS-th of the
#: busiest step's blocks (padding every step to the busiest would double the flops).
Q2_CHUNKS = 4


def q2_schedule(n: int, band: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """The wavefront of :func:`apply_q2`: ``(blocks, rows)`` (products x slots), the block index
    ``g K + t`` (K: tasks a sweep, :func:`reflector_shape`) and first row ``g G + 1 + t b`` of
    every block (g, t) of each batched product, in the order they run; unused slots hold block
    index ``groups K`` (none) and row 0.

    Block (g, t) gathers task t of the G sweeps ``g G .. g G + G - 1``. A reflector of a later
    sweep overlaps those of earlier sweeps at the same task and the next (sweep i' > i at task t'
    meets sweep i's task t' when i' - i < b, and task t' + 1 when i' - i < 2b), and Q2's product
    runs over the sweeps in order, so Q2 z applies the later one first: block (g, t) after
    (g + 1, t), (g + 1, t - 1) and (g, t - 1) (the sweeps of one group overlap at the previous
    task). Step ``t + groups - 1 - g`` satisfies all three; blocks of one step, (g, t) and
    (g + 1, t + 1), start ``G + b`` rows apart and span ``b + G - 1``: disjoint, so a step's
    blocks run in any order, here in products of ``ceil(busiest / Q2_CHUNKS)`` blocks."""
    sweeps, k, _ = reflector_shape(n, band)
    groups = -(-sweeps // group)
    steps = groups + k - 1 if sweeps else 0
    per_step = [
        [
            (g * k + t, g * group + 1 + t * band)
            for g in range(groups)
            for t in [s - (groups - 1 - g)]
            if 0 <= t < sweep_tasks(n, band, g * group)
        ]
        for s in range(steps)
    ]
    slots = -(-max((len(x) for x in per_step), default=0) // Q2_CHUNKS)
    products = [step[j : j + slots] for step in per_step for j in range(0, len(step), slots)]
    blocks = np.full((len(products), slots), groups * k, np.int32)
    rows = np.zeros((len(products), slots), np.int32)
    for s, product in enumerate(products):
        for j, (blk, row) in enumerate(product):
            blocks[s, j], rows[s, j] = blk, row
    return blocks, rows


def _q2_blocks(v: jax.Array, tau: jax.Array, blocks: jax.Array, group: int) -> tuple[jax.Array, jax.Array]:
    """(Y, Y T) ((len(blocks), b + G - 1, G)) of the blocks ``blocks`` (indices g K + t; v, tau
    padded to a multiple of G sweeps): Y's column k is sweep ``g G + k``'s reflector at task t,
    on the block's rows k .. k + b - 1, so that ``I - Y T Y^H`` is the reflectors' product in
    sweep order (:func:`compact_wy`)."""
    _, k, b = v.shape
    m = b + group - 1
    sweeps = (blocks // k)[:, None] * group + jnp.arange(group)[None, :]  # (blocks, G)
    tasks = (blocks % k)[:, None]
    taus = tau[sweeps, tasks]
    cols = jnp.where(taus[..., None] == 0, 0, v[sweeps, tasks])  # (blocks, G, b)
    offset = jnp.arange(m)[:, None] - jnp.arange(group)[None, :]
    inside = (offset >= 0) & (offset < b)
    y = jnp.where(inside, cols[:, jnp.arange(group)[None, :], jnp.clip(offset, 0, b - 1)], 0)
    return y, y @ jax.vmap(compact_wy)(y, taus)


@functools.partial(jax.jit, static_argnames=("group",))
@full_precision
def _apply_q2(v, tau, z, group: int):
    n, (sweeps, k, b) = z.shape[0], v.shape
    blocks, rows = q2_schedule(n, b, group)
    if blocks.size == 0:
        return z
    pad = -sweeps % group
    v, tau = jnp.pad(v, ((0, pad), (0, 0), (0, 0))), jnp.pad(tau, ((0, pad), (0, 0)))
    m, count = b + group - 1, (sweeps + pad) // group * k
    used = jnp.asarray(blocks < count)[:, :, None, None]  # unused slots add nothing
    blocks, rows = jnp.asarray(np.minimum(blocks, count - 1)), jnp.asarray(rows)

    def step(s, zp):
        y, yt = _q2_blocks(v, tau, blocks[s], group)  # formed where used: O(slots b G) memory
        idx = rows[s][:, None] + jnp.arange(m)[None, :]
        w = adjoint(y) @ zp[idx]  # (slots, G, columns)
        return zp.at[idx].add(jnp.where(used[s], -(yt @ w), 0))

    zp = lax.fori_loop(0, blocks.shape[0], step, jnp.pad(z, ((0, m), (0, 0))))
    return zp[:n]


def apply_q2(v: ArrayLike, tau: ArrayLike, z: ArrayLike, *, group: int | None = None) -> jax.Array:
    """``Q2 z`` for stage 2's reflectors ``(v, tau)`` (:func:`band_to_tridiagonal_reference`'s
    layout: v (S, K, b), tau (S, K)) and z (N, M), as batched matrix products.

    The reflectors of ``group`` = G consecutive sweeps (default b; at most b) at one task make
    one compact-WY block ``I - Y T Y^H`` on b + G - 1 rows (Y and Y T formed in the step that
    applies them: no memory beyond v, tau, z and one step's blocks);
    the blocks run in the wavefront of :func:`q2_schedule`: N/G + N/b steps, each split into
    batched products over blocks on disjoint rows (gathered and scattered at dynamic row
    offsets), one ``lax.fori_loop`` over the products. Flops: ``4 (b + G - 1) G M`` a block and
    about ``N^2 / (2 G b)`` blocks, so ``2 N^2 M (b + G - 1) / b``: 4 N^3 for M = N and G = b
    (``dormtr`` after LAPACK's one-stage reduction: 2 N^3); the products' padding to a fixed
    block count adds about a quarter (4.9 N^3 at N = 16,384, b = 64)."""
    v, tau, z = jnp.asarray(v), jnp.asarray(tau), jnp.asarray(z)
    shape_ok = v.ndim == 3 and z.ndim == 2 and tau.shape == v.shape[:2]
    if not shape_ok or v.shape[:2] != reflector_shape(z.shape[0], v.shape[2])[:2]:
        raise ValueError(
            "apply_q2: v must be (S, K, b), tau (S, K) and z (N, M) with S = max(N - 2, 0) and "
            f"K = (N - 3) // b + 1 (reflector_shape); got {v.shape}, {tau.shape}, {z.shape}"
        )
    b = v.shape[2]
    group = b if group is None else group
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or not 1 <= group <= max(b, 1):
        raise ValueError(f"apply_q2: group must be an int in 1 .. b = {b}; got {group!r}")
    dtype = jnp.result_type(v.dtype, z.dtype)
    return _apply_q2(v.astype(dtype), tau.astype(dtype), z.astype(dtype), int(group))


@jax.jit
@full_precision
def _apply_q1(ys, ts, z):
    panels, _, b = ys.shape
    for p0, p1 in reversed(_segments(panels, SEGMENTS)):
        r0 = p0 * b

        def body(j, zw, p0=p0, p1=p1, r0=r0):
            p = p1 - 1 - j + p0
            y = lax.dynamic_index_in_dim(ys, p, keepdims=False)[r0:]
            t = lax.dynamic_index_in_dim(ts, p, keepdims=False)
            return zw - y @ (t @ (adjoint(y) @ zw))

        z = z.at[r0:].set(lax.fori_loop(p0, p1, body, z[r0:]))
    return z


def apply_q1(ys: ArrayLike, ts: ArrayLike, z: ArrayLike) -> jax.Array:
    """``Q1 z`` for stage 1's reflectors (:func:`reduce_to_band` with ``reflectors``: Y (P, N, b),
    T (P, b, b), ``Q1 = prod_p (I - Y_p T_p Y_p^H)``, panel 0 first) and z (N, M): the panels'
    compact-WY blocks in reverse panel order, ``z -= Y (T (Y^H z))``, on the trailing rows of
    stage 1's panel groups (static windows). Flops: ``4 m b M`` a panel on m rows, about
    ``2 N^2 M (S + 1) / S`` in all for S = :data:`SEGMENTS` groups (2.25 N^3 for M = N)."""
    ys, ts, z = jnp.asarray(ys), jnp.asarray(ts), jnp.asarray(z)
    if ys.ndim != 3 or ts.shape != (ys.shape[0], ys.shape[2], ys.shape[2]) or z.ndim != 2 or z.shape[0] != ys.shape[1]:
        raise ValueError(
            f"apply_q1: ys must be (P, N, b), ts (P, b, b) and z (N, M); got {ys.shape}, {ts.shape}, {z.shape}"
        )
    dtype = jnp.result_type(ys.dtype, z.dtype)
    return _apply_q1(ys.astype(dtype), ts.astype(dtype), z.astype(dtype))


# --- stage 3: tridiagonal eigenvalues ----------------------------------------------------------


def _lapack_tridiagonal(routine: str, d: jax.Array, e: jax.Array, shapes) -> tuple[jax.Array, ...]:
    """LAPACK's ``?<routine>`` (``sterf``, ``stevd``) of the real symmetric tridiagonals (d, e)
    (..., N) and (..., N - 1) through a host callback, one call per matrix (a stack's batch axes,
    ``jax.vmap``'s too, come whole to the host): its results of ``shapes`` (per matrix, d's
    dtype), NaN where LAPACK's info is not 0."""

    def host(d, e):
        from scipy.linalg import lapack

        batch = np.broadcast_shapes(d.shape[:-1], e.shape[:-1])
        d, e = np.broadcast_to(d, batch + d.shape[-1:]), np.broadcast_to(e, batch + e.shape[-1:])
        (routine_fn,) = lapack.get_lapack_funcs((routine,), (d,))
        outs = [np.empty(batch + shape, d.dtype) for shape in shapes]
        for idx in np.ndindex(batch):
            *results, info = routine_fn(np.array(d[idx]), np.array(e[idx]))
            for out, result in zip(outs, results):
                out[idx] = result if info == 0 else np.nan
        return tuple(outs)

    out = tuple(jax.ShapeDtypeStruct(d.shape[:-1] + shape, d.dtype) for shape in shapes)
    return tuple(varying_like(d, x) for x in jax.pure_callback(host, out, d, e, vmap_method="expand_dims"))


def tridiagonal_eigvalsh(d: jax.Array, e: jax.Array, *, method: str = "sterf") -> jax.Array:
    """The eigenvalues, ascending, of the Hermitian tridiagonal with diagonal d (N, real) and
    subdiagonal e (N - 1; complex allowed: its moduli are used). ``method``: "sterf" (LAPACK,
    through a host callback; NaN where it fails to converge), "bisection" (JAX's
    ``eigh_tridiagonal``), "native" (the CUDA bisection kernel of ``csrc/band.cu``)."""
    if method not in STAGE3_METHODS:
        raise ValueError(f"tridiagonal_eigvalsh: method must be one of {STAGE3_METHODS}; got {method!r}")
    e = jnp.abs(e).astype(d.dtype)
    if d.shape[-1] == 1:
        return d
    if method == "bisection":
        return jax.scipy.linalg.eigh_tridiagonal(d, e, eigvals_only=True)
    if method == "native":
        return native_band.tridiagonal_eigvalsh(d, e)
    return _lapack_tridiagonal("sterf", d, e, [d.shape[-1:]])[0]


#: Stage-3 methods with eigenvectors: LAPACK's divide and conquer on the host, cuSOLVERMp's
#: stedc, or the device's own dense eigensolver on the tridiagonal.
STAGE3_VECTOR_METHODS = ("stedc", "native", "dense")


def tridiagonal_phases(e: jax.Array) -> jax.Array:
    """The unitary diagonal D (its N entries, e's dtype) with ``D^H T D`` real, ``|e|`` below the
    diagonal, for the Hermitian tridiagonal T with subdiagonal e (..., N - 1): ``D_0 = 1``,
    ``D_{j+1} = D_j e_j / |e_j|`` (1 where e_j = 0); +-1 for real e."""
    mag = jnp.abs(e)
    unit = jnp.where(mag == 0, 1, e / jnp.where(mag == 0, 1, mag).astype(e.dtype)).astype(e.dtype)
    phases = jnp.pad(jnp.cumprod(unit, axis=-1), [(0, 0)] * (e.ndim - 1) + [(1, 0)], constant_values=1)
    return phases / jnp.abs(phases).astype(e.dtype) if jnp.iscomplexobj(e) else phases


def tridiagonal_eigh(d: ArrayLike, e: ArrayLike, *, method: str | None = None) -> tuple[jax.Array, jax.Array]:
    """``(w, v)`` of the Hermitian tridiagonal T with diagonal d (..., N, real) and subdiagonal e
    (..., N - 1, real or complex): w ascending (..., N, d's dtype), v (..., N, N, e's dtype) with
    orthonormal columns and ``T v = v diag(w)``; a stack in one call. The real tridiagonal
    ``D^H T D`` (:func:`tridiagonal_phases`) is solved and its eigenvectors Z give ``v = D Z``.
    ``method``: "stedc" (LAPACK's divide and conquer, ``?stevd``, which runs ``?stedc``, through
    a host callback: SciPy exposes ``?stevd``, not ``?stedc``; NaN where it fails to converge),
    "native" (cuSOLVERMp's stedc, ``jaxmg.kernels.ffi.band.tridiagonal_eigh``), "dense" (the
    device's own ``jnp.linalg.eigh`` of the dense real tridiagonal: O(N^3)); by default native
    on a GPU with the native library and a cuSOLVERMp with stedc, stedc on CPUs, dense
    elsewhere."""
    method = method or _default_stage3(vectors=True)
    if method not in STAGE3_VECTOR_METHODS:
        raise ValueError(f"tridiagonal_eigh: method must be one of {STAGE3_VECTOR_METHODS}; got {method!r}")
    d, e = jnp.asarray(d), jnp.asarray(e)
    real = d.ndim >= 1 and d.dtype in (np.float32, np.float64)
    if not real or e.shape != d.shape[:-1] + (max(d.shape[-1] - 1, 0),):
        raise ValueError(
            "tridiagonal_eigh: d must be the real diagonal (..., N), float32 or float64, and e the "
            f"subdiagonal (..., N - 1); got d {d.shape} {d.dtype} and e {e.shape}"
        )
    n = d.shape[-1]
    if n <= 1:
        return d, jnp.ones(d.shape + (n,), e.dtype)
    phases = tridiagonal_phases(e)
    mag = jnp.abs(e).astype(d.dtype)
    if method == "native":
        w, z = native_band.tridiagonal_eigh(d, mag)
    elif method == "dense":
        dense = jnp.vectorize(lambda d, m: jnp.diag(d) + jnp.diag(m, -1) + jnp.diag(m, 1), signature="(n),(m)->(n,n)")
        w, z = jnp.linalg.eigh(dense(d, mag))
    else:
        w, z = _lapack_tridiagonal("stevd", d, mag, [(n,), (n, n)])
    return w, phases[..., :, None] * z.astype(e.dtype)


# --- composition -------------------------------------------------------------------------------


def _platform(platform: str | None) -> str:
    """``platform`` as :data:`TWO_STAGE_ABOVE` names it ("gpu", as JAX names NVIDIA GPUs, is
    "cuda"), or the default backend's where None."""
    return algebra.platform_name(platform or jax.default_backend())


def _default_stage2(platform: str | None = None) -> str:
    """Stage 2's method on ``platform`` (None: the default backend's)."""
    return "native" if _platform(platform) == "cuda" and native_band.available() else "reference"


def _default_stage3(vectors: bool = False, platform: str | None = None) -> str:
    """Stage 3's method on ``platform`` (None: the default backend's), with or without vectors."""
    if _default_stage2(platform) == "native":
        if not vectors or native_band.stedc_available():
            return "native"
    if _platform(platform) == "cpu":
        return "stedc" if vectors else "sterf"
    return "dense" if vectors else "bisection"


def _checked_stages(stage2: str | None, stage3: str | None, who: str, vectors: bool = False) -> tuple[str, str]:
    stage2, stage3 = stage2 or _default_stage2(), stage3 or _default_stage3(vectors)
    methods = STAGE3_VECTOR_METHODS if vectors else STAGE3_METHODS
    if stage2 not in ("native", "reference"):
        raise ValueError(f"{who}: stage2 must be 'native' or 'reference'; got {stage2!r}")
    if stage3 not in methods:
        raise ValueError(f"{who}: stage3 must be one of {methods}; got {stage3!r}")
    return stage2, stage3


def band_to_tridiagonal(ab: jax.Array, *, stage2: str | None = None, reflectors: bool = False):
    """Stage 2 of one band matrix (lower band storage ab, (b + 1, N)): ``(d, e)``, and with
    ``reflectors`` ``(d, e, v, tau)`` in :func:`band_to_tridiagonal_reference`'s layout, by
    ``stage2``: "native" (csrc/band.cu) or "reference", by default native where it can run."""
    stage2, _ = _checked_stages(stage2, None, "band_to_tridiagonal")
    if stage2 == "native":
        return native_band.band_to_tridiagonal(ab, reflectors=reflectors)
    return band_to_tridiagonal_reference(ab, reflectors=reflectors)


def band_eigvalsh(ab: jax.Array, *, stage2: str | None = None, stage3: str | None = None) -> jax.Array:
    """Stages 2 and 3: the eigenvalues, ascending, of the Hermitian band matrix in lower band
    storage ab ((..., b + 1, N), :func:`lower_band`). ``stage2``: "native" (csrc/band.cu, on an
    NVIDIA GPU with the native library) or "reference" (:func:`band_to_tridiagonal_reference`),
    by default native where it can run; ``stage3``: see :func:`tridiagonal_eigvalsh`, by default
    native on a GPU with the native library, sterf on CPUs, bisection elsewhere."""
    stage2, stage3 = _checked_stages(stage2, stage3, "band_eigvalsh")

    def one(ab):
        return tridiagonal_eigvalsh(*band_to_tridiagonal(ab, stage2=stage2), method=stage3)

    return jnp.vectorize(one, signature="(k,n)->(n)")(jnp.asarray(ab))


def eigvalsh(
    a: ArrayLike, band: int = 64, *, symmetrize_input: bool = True, stage2: str | None = None, stage3: str | None = None
) -> jax.Array:
    """The eigenvalues, ascending, of ``(a + a^H) / 2`` (``symmetrize_input``, as
    ``jnp.linalg.eigvalsh``) or of the Hermitian matrix of ``a``'s lower triangle, by the two
    stages: a (..., N, N), float32 to complex128 (integers as float); returns (..., N) real.
    ``band``: the half-bandwidth of stage 1. ``stage2``, ``stage3``: see :func:`band_eigvalsh`.
    It computes no eigenvectors, so it has no derivative: differentiating it raises a TypeError
    (``jaxmg.numpy.linalg.eigvalsh`` and ``jnp.linalg.eigvalsh`` are differentiable)."""
    a = _check_square(a, "eigvalsh")
    band = _check_band(band, a.shape[-1], "eigvalsh")
    stage2, stage3 = _checked_stages(stage2, stage3, "eigvalsh")
    return _values(a, band, bool(symmetrize_input), stage2, stage3)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4))
def _values(a, band: int, symmetrize_input: bool, stage2: str, stage3: str):
    return _eigvalsh(a, band, symmetrize_input, stage2, stage3)


@_values.defjvp
def _values_jvp(band, symmetrize_input, stage2, stage3, primals, tangents):
    raise TypeError(
        "jaxmg.kernels.two_stage.eigvalsh has no derivative (it computes no eigenvectors): "
        "differentiate jaxmg.numpy.linalg.eigvalsh or jnp.linalg.eigvalsh instead"
    )


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _eigvalsh(a, band: int, symmetrize_input: bool, stage2: str, stage3: str):
    if a.shape[-1] == 0:
        return jnp.zeros(a.shape[:-1], jnp.real(a).dtype)
    if symmetrize_input:
        a = (a + adjoint(a)) / 2
    a, sigma = scaled_into_range(a)

    def one(m):
        return band_eigvalsh(lower_band(reduce_to_band(m, band), band), stage2=stage2, stage3=stage3)

    return jnp.vectorize(one, signature="(n,n)->(n)")(a) / sigma


# --- with eigenvectors ---------------------------------------------------------------------------


def back_transform(ys: jax.Array, ts: jax.Array, v: jax.Array, tau: jax.Array, z: jax.Array) -> jax.Array:
    """``Q1 (Q2 z)`` (:func:`apply_q1` of :func:`apply_q2`): the eigenvectors of the Hermitian
    matrix from its tridiagonal's, z (N, M), for stage 1's reflectors (ys, ts) and stage 2's
    (v, tau)."""
    return apply_q1(ys, ts, apply_q2(v, tau, z))


def _reduce_with_reflectors(a, band: int, stage2: str):
    """Stages 1 and 2 of one matrix, reflectors kept: (d, e, v, tau, ys, ts)."""
    b_mat, ys, ts = reduce_to_band(a, band, reflectors=True)
    return (*band_to_tridiagonal(lower_band(b_mat, band), stage2=stage2, reflectors=True), ys, ts)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _eigh(a, band: int, stage2: str, stage3: str):
    if a.shape[-1] == 0:
        return jnp.zeros(a.shape[:-1], jnp.real(a).dtype), jnp.zeros(a.shape, a.dtype)
    a, sigma = scaled_into_range(a)
    reduce = functools.partial(_reduce_with_reflectors, band=band, stage2=stage2)
    d, e, v, tau, ys, ts = jnp.vectorize(reduce, signature="(n,n)->(n),(m),(s,t,b),(s,t),(p,n,b),(p,b,b)")(a)
    w, z = tridiagonal_eigh(d, e, method=stage3)  # a stack in one call
    back = jnp.vectorize(back_transform, signature="(p,n,b),(p,b,b),(s,t,b),(s,t),(n,n)->(n,n)")
    return w / sigma, back(ys, ts, v, tau, z)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def eigh_of_lower(a: jax.Array, band: int, stage2: str, stage3: str) -> tuple[jax.Array, jax.Array]:
    """:func:`eigh`'s ``(w, v)`` of the Hermitian matrices read from the lower triangles of ``a``
    (..., N, N), with checked arguments. Its derivative rule is jaxmg's eigh rule
    (``jaxmg.autodiff.tangents.eigh_jvp``), which ``jaxmg.autodiff.decompositions``, the layer of
    every derivative rule, attaches (importing this module imports jaxmg, and with it that)."""
    return _eigh(a, band, stage2, stage3)


def eigh(
    a: ArrayLike, band: int = 64, *, symmetrize_input: bool = True, stage2: str | None = None, stage3: str | None = None
) -> tuple[jax.Array, jax.Array]:
    """``(w, v)`` as ``jnp.linalg.eigh``: the eigenvalues w (..., N), ascending and real, and
    eigenvectors v (..., N, N) (orthonormal columns, ``A v = v diag(w)``) of ``A = (a + a^H) / 2``
    (``symmetrize_input``) or of the Hermitian matrix of ``a``'s lower triangle, by the two stages
    with their back-transformations: ``v = Q1 (Q2 (D Z))``, Q1 from stage 1
    (:func:`reduce_to_band`, :func:`apply_q1`), Q2 from stage 2's reflectors
    (:func:`apply_q2`), D Z the tridiagonal's eigenvectors (:func:`tridiagonal_eigh`).
    a (..., N, N), float32 to complex128 (integers as float); a stack runs matrix by matrix.
    ``band``: stage 1's half-bandwidth; ``stage2``: see :func:`band_eigvalsh`; ``stage3``: a
    method of :func:`tridiagonal_eigh`, by default "native" on a GPU with the native library and
    a cuSOLVERMp with stedc, "stedc" on CPUs, "dense" elsewhere. Differentiable (forward and reverse, every order) by
    jaxmg's eigh rule; eigenvectors are fixed up to a phase each, as JAX's."""
    a = _check_square(a, "eigh")
    band = _check_band(band, a.shape[-1], "eigh")
    stage2, stage3 = _checked_stages(stage2, stage3, "eigh", vectors=True)
    if symmetrize_input:
        a = (a + adjoint(a)) / 2
    return eigh_of_lower(a, band, stage2, stage3)


# --- where it runs: the order per platform, from measurement -------------------------------------

#: The Hermitian eigensolver of one device on the local and batch routes, by the platform compiled
#: for: the order above which syevd (eigh, eigvalsh, the ``Eigh`` module), sygvd after its Cholesky
#: reduction, and the eigendecompositions inside the SVD and polar compositions
#: (``jaxmg.kernels.qdwh``) run this module's two-stage solver instead of the platform's own syevd
#: (``jax.lax.linalg.eigh``: cuSOLVER on NVIDIA GPUs, LAPACK on CPUs); None: at no order. Each
#: entry is an order measured against the platform's own syevd (``benchmarks/bench_eigen.py``,
#: impls ``jax`` and ``jaxmg.two_stage``: docs/eigen.md); None until measured.
TWO_STAGE_ABOVE: dict = {"cuda": None, "rocm": None, "cpu": None}
#: Stage 1's half-bandwidth where :data:`TWO_STAGE_ABOVE` runs the two-stage solver, per platform:
#: 64, :func:`eigh`'s default, until measured (``bench_eigen.py --bands`` times each width).
BAND: dict = {"cuda": 64, "rocm": 64, "cpu": 64}


def two_stage_above(platform: str) -> int | None:
    """:data:`TWO_STAGE_ABOVE`'s order for ``platform`` ("gpu", as JAX names NVIDIA GPUs, is "cuda")."""
    return TWO_STAGE_ABOVE.get(_platform(platform))


def two_stage_band(platform: str, shape) -> int | None:
    """The half-bandwidth with which the local and batch routes run the two-stage solver on a
    Hermitian matrix of ``shape`` (..., N, N) compiled for ``platform``, or None where they run the
    platform's own syevd (:data:`TWO_STAGE_ABOVE`, :data:`BAND`)."""
    above = two_stage_above(platform)
    if above is None or shape[-1] <= above:
        return None
    return _check_band(BAND.get(_platform(platform), 64), shape[-1], "two_stage.BAND")


def _choice(platform: str, shape, vectors: bool) -> tuple:
    """(band, stage 2, stage 3) of the two-stage solver on ``platform``, or () for the platform's own."""
    band = two_stage_band(platform, shape)
    if band is None:
        return ()
    return band, _default_stage2(platform), _default_stage3(vectors, platform)


@functools.cache
def _solver(choice: tuple, vectors: bool, symmetrize_input: bool):
    """The eigensolver of one :func:`_choice` (one function for each, so that platforms which choose
    alike share it, and :func:`jaxmg.kernels.algebra.by_platform` makes no branch for them)."""

    def own(a):
        v, w = lax.linalg.eigh(a, lower=True, symmetrize_input=symmetrize_input)
        return (w, v) if vectors else w

    def two_stage(a):
        band, stage2, stage3 = choice
        if not vectors:
            return _values(a, band, symmetrize_input, stage2, stage3)
        return eigh_of_lower((a + adjoint(a)) / 2 if symmetrize_input else a, band, stage2, stage3)

    return two_stage if choice else own


def device_eigh(a: jax.Array, *, symmetrize_input: bool = False) -> tuple[jax.Array, jax.Array]:
    """``(w, v)``: the eigenvalues (..., N), ascending, and eigenvectors (..., N, N) of the
    Hermitian matrices of the lower triangles of ``a`` (..., N, N) (of ``(a + a^H) / 2`` with
    ``symmetrize_input``), by the solver :data:`TWO_STAGE_ABOVE` names for the platform the call is
    compiled for: :func:`eigh_of_lower` with :func:`two_stage_band`'s band, or the platform's own
    syevd (``jax.lax.linalg.eigh``). Decided when compiled, so it holds under ``jax.vmap``; the
    derivative is jaxmg's eigh rule of ``(w, v)`` either way. A failed solve gives NaN."""
    return algebra.by_platform(a, lambda p: _solver(_choice(p, a.shape, True), True, symmetrize_input))


def device_eigvalsh(a: jax.Array, *, symmetrize_input: bool = False) -> jax.Array:
    """:func:`device_eigh`'s eigenvalues alone: on the two-stage solver, without its eigenvectors
    (:func:`eigvalsh`, which has no derivative rule: callers take derivatives from the vectors)."""
    return algebra.by_platform(a, lambda p: _solver(_choice(p, a.shape, False), False, symmetrize_input))
