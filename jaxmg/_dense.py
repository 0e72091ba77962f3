"""Dense compositions shared by the wide-matrix paths and the JAX-shaped namespaces.

The conjugate transpose of a matrix, column slices, and
products whose output layout is stated where the mesh has Explicit axes (where JAX
cannot infer it from a contraction over a sharded dimension). Every function is plain
JAX: it works eagerly, under ``jax.jit``, ``jax.vmap`` and differentiation, and reads only
array types (never whether a value is traced).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from ._layout import divides


def adjoint(a):
    """The conjugate transpose of the last two dimensions of ``a``."""
    return jnp.conj(jnp.swapaxes(a, -1, -2))


def columns(a, start: int, stop: int):
    """Columns ``start:stop`` of matrix ``a`` (a static slice, also of sharded columns). On
    Explicit mesh axes that do not divide the slice's width, a's columns are gathered first (as
    XLA does on Auto axes), its rows staying split."""
    mesh = _explicit_mesh(a)
    if mesh is not None:
        spec = spec_of(a)
        if not divides((stop - start,), spec[-1:], mesh):
            a = jax.sharding.reshard(a, NamedSharding(mesh, P(*spec[:-1], None)))
    return jax.lax.slice_in_dim(a, start, stop, axis=a.ndim - 1)


def spec_for(like, shape) -> P:
    """like's PartitionSpec (:func:`spec_of`) for an array of ``shape`` (of like's rank) where
    like's mesh divides that shape so, else replicated: the layout of a result "in like's
    layout" whose shape differs from like's (a pseudo-inverse (N, M) of a (M, N))."""
    spec = spec_of(like)
    mesh = _explicit_mesh(like)
    return spec if mesh is None or divides(shape, spec, mesh) else P()


def _explicit_mesh(x):
    mesh = jax.typeof(x).sharding.mesh
    types = getattr(mesh, "axis_types", ())
    return mesh if any(t == AxisType.Explicit for t in types) else None


def spec_of(x) -> P:
    """The PartitionSpec of ``x``'s type (all None where it is not sharded explicitly)."""
    spec = tuple(jax.typeof(x).sharding.spec)
    return P(*(spec + (None,) * (x.ndim - len(spec))))


def matmul(x, y, spec: Optional[P] = None):
    """``x @ y`` at full precision; on a mesh with Explicit axes laid out as ``spec`` (default
    replicated), elsewhere as XLA chooses."""
    mesh = _explicit_mesh(x)
    if mesh is None:
        mesh = _explicit_mesh(y)
    sharding = None
    if mesh is not None:
        sharding = NamedSharding(mesh, spec if spec is not None else P())
    return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST, out_sharding=sharding)


def triu(x):
    """The upper triangle of matrix ``x`` (zero below the diagonal), in x's layout."""
    m, n = x.shape[-2:]
    rows = jax.lax.broadcasted_iota(jnp.int32, (m, n), 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, (m, n), 1)
    return jnp.where(rows <= cols, x, jnp.zeros((), x.dtype))


def kept_reciprocals(s, kept, dtype):
    """``1 / s`` where ``kept``, else 0 (a pseudo-inverse's singular values; no division by the
    others, which may be 0), in ``dtype``."""
    return jnp.where(kept, 1 / jnp.where(kept, s, 1), 0).astype(dtype)


def householder_qr(a, complete: bool = False):
    """``(q, r)`` of the Householder QR ``a = q r`` of ``a`` (..., M, N), as ``jnp.linalg.qr``'s
    ``"reduced"`` (q (..., M, K), r (..., K, N), K = min(M, N)) or ``"complete"`` mode (q (..., M, M),
    r (..., M, N); Q's last M - N columns of a tall ``a`` are LAPACK's completion, H_1 ... H_K applied
    to the last columns of I): the same numbers as JAX's.

    Built from LAPACK's geqrf (``jnp.linalg.qr(mode="raw")``), the product of its reflectors
    (``jax.lax.linalg.householder_product``) and :func:`triu`, each of which keeps a stack's layout
    on Explicit mesh axes (JAX's own QR masks its triangle with a replicated mask, which fails on a
    stack split over an Explicit axis under ``jax.set_mesh``). Primal only: the callers state its
    derivative."""
    m, n = a.shape[-2:]
    k = min(m, n)
    cols = m if complete else k
    if k == 0:  # nothing to reflect: Q is the identity, R empty or zero
        eye = jnp.eye(m, cols, dtype=a.dtype)
        return jnp.broadcast_to(eye, a.shape[:-2] + eye.shape), jnp.zeros(a.shape[:-2] + (cols, n), a.dtype)
    h, tau = jnp.linalg.qr(a, mode="raw")
    h = jnp.swapaxes(h, -1, -2)  # geqrf's factor (..., M, N): R above the diagonal, reflectors below
    if cols > n:  # the reflectors in the first N columns, zeros where Q's completion starts from I
        reflectors = jnp.pad(h, [(0, 0)] * (a.ndim - 1) + [(0, cols - n)])
    else:
        reflectors = columns(h, 0, cols)
    q = jax.lax.linalg.householder_product(reflectors, tau)
    return q, triu(jax.lax.slice_in_dim(h, 0, cols, axis=a.ndim - 2))
