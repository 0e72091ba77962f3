"""Inverses from triangular factors, made of large matrix products (pure JAX, any platform).

LAPACK forms A^-1 from a factor in two blocked steps whose work is mostly matrix products:
``potri`` is ``trtri`` (the inverse W of the triangular factor) then ``lauum`` (the product
W^H W, of which one triangle is computed); ``getri`` multiplies U^-1 by L^-1. Here each step is
recursive: halve the triangle, recurse on the two diagonal blocks, and form the off-diagonal
block with products, whose own triangular operands are split the same way. Every flop but those
of the small diagonal blocks (``base`` rows and fewer) is then in a large product, and the flop
counts are LAPACK's: N^3/3 for ``trtri``, N^3/3 for ``lauum``, 2N^3/3 for the product of an
upper and a lower triangular matrix. On a GPU that runs near matrix-product speed; solving
against the identity (2N^3 flops at triangular-solve speed) does not.

The functions take whole matrices, on one device or sharded over a mesh (XLA partitions the
products; no matrix is gathered). A triangular operand is a :class:`Tri`: the array, which
triangle holds it, and whether it is used conjugate-transposed (a view: nothing is copied).
The other triangle of the array is never read.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import jax
import jax.numpy as jnp

#: Diagonal blocks of at most this order are inverted by a triangular solve, and triangular
#: products of at most this order are one product with the other triangle masked (the default
#: of every ``base`` argument; smaller means fewer wasted flops, but more and smaller products).
BASE = 1024

#: Triangular products (:func:`trmm`) of at most this order are one product with the other
#: triangle masked (the other functions pass ``min(base, TRMM_BASE)``; docs/performance.md).
TRMM_BASE = 512

_ENGINE: contextvars.ContextVar = contextvars.ContextVar("jaxmg_triangular_engine", default=(None, None, None))


@contextlib.contextmanager
def products_through(product, trmm=None, inverse=None):
    """While tracing inside this block, every product of this module is
    ``product(x, y, adj_x, adj_y)`` (``op(x) @ op(y)``, op the conjugate transpose where
    ``adj_*``) and, where ``trmm`` is given, every triangular product :func:`trmm` is one call
    ``trmm(t, x, lower=, adj=, unit=, left=)`` (``op(T) @ x`` or ``x @ op(T)``, T the stored
    triangle ``lower`` of ``t``, unit diagonal where ``unit``); where ``inverse`` is given,
    :func:`hermitian_inverse` is one call ``inverse(l)`` (A^-1, both triangles, for A = L L^H with
    L the lower triangle of ``l``). For example cuBLAS on one GPU (``jaxmg.kernels.native.gemm``).
    None: XLA's dots, which XLA partitions over a mesh."""
    token = _ENGINE.set((product, trmm, inverse))
    try:
        yield
    finally:
        _ENGINE.reset(token)


@dataclasses.dataclass(frozen=True)
class Mat:
    """``x``, or its conjugate transpose where ``adj``, without forming it."""

    x: jax.Array
    adj: bool = False

    @property
    def shape(self) -> tuple:
        return self.x.shape[::-1] if self.adj else self.x.shape

    def block(self, rows: slice, cols: slice) -> "Mat":
        """The block ``[rows, cols]`` of the matrix this stands for."""
        part = self.x[cols, rows] if self.adj else self.x[rows, cols]
        return dataclasses.replace(self, x=part)

    def value(self) -> jax.Array:
        return jnp.conj(self.x).T if self.adj else self.x


@dataclasses.dataclass(frozen=True)
class Tri(Mat):
    """A square triangular matrix: ``lower`` says which triangle the matrix it stands for
    occupies (the stored triangle of ``x`` is the other one where ``adj``). ``unit``: its
    diagonal is taken as ones (LU's L)."""

    lower: bool = True
    unit: bool = False

    @property
    def n(self) -> int:
        return self.x.shape[0]

    def block(self, rows: slice, cols: slice):
        part = Mat.block(self, rows, cols)
        if rows == cols:
            return part
        return Mat(part.x, part.adj)

    def value(self) -> jax.Array:
        """The triangle as a full matrix, the other triangle zero (unit diagonal set)."""
        x = Mat.value(self)
        t = jnp.tril(x) if self.lower else jnp.triu(x)
        if self.unit:
            eye = jnp.eye(self.n, dtype=bool)
            t = jnp.where(eye, jnp.ones((), x.dtype), t)
        return t


def _mm(x, y) -> jax.Array:
    """``x @ y`` of Mats or arrays, at full precision (XLA folds the transposes into the product).

    The operands (slices of the factor at many offsets) pass an optimisation barrier first, so
    that each product is compiled as a product of whole arrays: XLA then tunes one kernel per
    shape instead of one per fused slice (the slices cost one copy each). Inside
    :func:`products_through`, the product given there is used instead."""
    x = x if isinstance(x, Mat) else Mat(x)
    y = y if isinstance(y, Mat) else Mat(y)
    product = _ENGINE.get()[0]
    if product is not None:
        return product(x.x, y.x, x.adj, y.adj)
    xs, ys = jax.lax.optimization_barrier((x.x, y.x))
    return jnp.matmul(dataclasses.replace(x, x=xs).value(), dataclasses.replace(y, x=ys).value(),
                      precision=jax.lax.Precision.HIGHEST)


def _halves(n: int):
    """The halves of an order-n problem, split at a multiple of 128 where n is large (products
    of well-aligned extents run fastest)."""
    half = n // 2
    k = (half // 128) * 128 if half >= 256 else half
    return slice(0, k), slice(k, n)


def trmm(t: Tri, x, *, left: bool, base: int | None = None) -> jax.Array:
    """``t @ x`` (``left``) or ``x @ t`` for triangular ``t`` (order n) and full ``x``: 2 n^2 m
    flops halved, as BLAS's trmm."""
    base = TRMM_BASE if base is None else base
    x = x if isinstance(x, Mat) else Mat(x)
    engine = _ENGINE.get()[1]
    if engine is not None:  # the stored triangle of t.x is the other one where t.adj
        return engine(t.x, x.value(), lower=t.lower != t.adj, adj=t.adj, unit=t.unit, left=left)
    n = t.n
    if n <= base:
        return _mm(t, x) if left else _mm(x, t)
    s1, s2 = _halves(n)
    t11, t22 = t.block(s1, s1), t.block(s2, s2)
    whole = slice(None)
    if left:
        x1, x2 = x.block(s1, whole), x.block(s2, whole)
        if t.lower:
            top = trmm(t11, x1, left=True, base=base)
            bottom = _mm(t.block(s2, s1), x1) + trmm(t22, x2, left=True, base=base)
        else:
            top = trmm(t11, x1, left=True, base=base) + _mm(t.block(s1, s2), x2)
            bottom = trmm(t22, x2, left=True, base=base)
        return jnp.concatenate([top, bottom], axis=0)
    x1, x2 = x.block(whole, s1), x.block(whole, s2)
    if t.lower:
        first = trmm(t11, x1, left=False, base=base) + _mm(x2, t.block(s2, s1))
        second = trmm(t22, x2, left=False, base=base)
    else:
        first = trmm(t11, x1, left=False, base=base)
        second = _mm(x1, t.block(s1, s2)) + trmm(t22, x2, left=False, base=base)
    return jnp.concatenate([first, second], axis=1)


def _trmm_base(base: int) -> int:
    return min(base, TRMM_BASE)


def _assemble(b11, b12, b21, b22) -> jax.Array:
    return jnp.concatenate([jnp.concatenate([b11, b12], axis=1), jnp.concatenate([b21, b22], axis=1)], axis=0)


def trtri(t: Tri, *, base: int | None = None) -> jax.Array:
    """The inverse of triangular ``t``, triangular the same way (the other triangle zero):
    [[T11, 0], [T21, T22]]^-1 = [[W11, 0], [-W22 T21 W11, W22]], N^3/3 flops."""
    base = BASE if base is None else base
    n = t.n
    if n <= base:
        eye = jnp.eye(n, dtype=t.x.dtype)
        return jax.lax.linalg.triangular_solve(t.value(), eye, left_side=True, lower=t.lower,
                                               unit_diagonal=t.unit)
    s1, s2 = _halves(n)
    w11 = trtri(t.block(s1, s1), base=base)
    w22 = trtri(t.block(s2, s2), base=base)
    tri11, tri22, tb = Tri(w11, lower=t.lower), Tri(w22, lower=t.lower), _trmm_base(base)
    if t.lower:
        off = -trmm(tri22, trmm(tri11, t.block(s2, s1), left=False, base=tb), left=True, base=tb)
        return _assemble(w11, jnp.zeros((w11.shape[0], w22.shape[1]), w11.dtype), off, w22)
    off = -trmm(tri11, trmm(tri22, t.block(s1, s2), left=False, base=tb), left=True, base=tb)
    return _assemble(w11, off, jnp.zeros((w22.shape[0], w11.shape[1]), w11.dtype), w22)


def gram(x: Mat, *, base: int | None = None) -> jax.Array:
    """``x^H x`` (Hermitian, both triangles), computing one triangle: half a product's flops."""
    base = BASE if base is None else base
    x = x if isinstance(x, Mat) else Mat(x)
    k = x.shape[1]
    if k <= base:
        return _mm(dataclasses.replace(x, adj=not x.adj), x)
    s1, s2 = _halves(k)
    whole = slice(None)
    x1, x2 = x.block(whole, s1), x.block(whole, s2)
    c11, c22 = gram(x1, base=base), gram(x2, base=base)
    c21 = _mm(dataclasses.replace(x2, adj=not x2.adj), x1)
    return _assemble(c11, jnp.conj(c21).T, c21, c22)


def lauum(w: Tri, *, base: int | None = None) -> jax.Array:
    """``w^H w`` for lower triangular ``w`` (Hermitian, both triangles), N^3/3 flops:
    [[W11, 0], [W21, W22]]^H (...) = [[W11^H W11 + W21^H W21, .], [W22^H W21, W22^H W22]]."""
    base = BASE if base is None else base
    if not w.lower:
        raise ValueError("lauum takes a lower triangular w (pass an upper one as Tri(u, adj=True))")
    n = w.n
    if n <= base:
        return _mm(dataclasses.replace(w, adj=not w.adj, lower=False), w)
    s1, s2 = _halves(n)
    w11, w21, w22 = w.block(s1, s1), w.block(s2, s1), w.block(s2, s2)
    c11 = lauum(w11, base=base) + gram(w21, base=base)
    c21 = trmm(dataclasses.replace(w22, adj=not w22.adj, lower=False), w21, left=True, base=_trmm_base(base))
    c22 = lauum(w22, base=base)
    return _assemble(c11, jnp.conj(c21).T, c21, c22)


def hermitian_inverse(t: Tri, *, base: int | None = None) -> jax.Array:
    """A^-1 for A = T T^H (``t`` lower) or A = T^H T (``t`` upper): with W the lower triangular
    L^-1 (L = T, or T^H), A^-1 = W^H W. LAPACK's potri: (2/3) N^3 flops."""
    base = BASE if base is None else base
    lower = t if t.lower else dataclasses.replace(t, adj=not t.adj, lower=True)
    engine = _ENGINE.get()[2]
    if engine is not None:
        return engine(lower.x if not lower.adj else Mat.value(lower))
    w = trtri(lower, base=base)
    return lauum(Tri(w, lower=True), base=base)


def upper_times_lower(x: Tri, y: Tri, *, base: int | None = None) -> jax.Array:
    """``x @ y`` for upper triangular ``x`` and lower triangular ``y``, 2N^3/3 flops:
    C11 = X11 Y11 + X12 Y21, C12 = X12 Y22, C21 = X22 Y21, C22 = X22 Y22."""
    base = BASE if base is None else base
    n = x.n
    if n <= base:
        return _mm(x, y)
    s1, s2 = _halves(n)
    x12, y21 = x.block(s1, s2), y.block(s2, s1)
    c11 = upper_times_lower(x.block(s1, s1), y.block(s1, s1), base=base) + _mm(x12, y21)
    c12 = trmm(y.block(s2, s2), x12, left=False, base=_trmm_base(base))
    c21 = trmm(x.block(s2, s2), y21, left=True, base=_trmm_base(base))
    c22 = upper_times_lower(x.block(s2, s2), y.block(s2, s2), base=base)
    return _assemble(c11, c12, c21, c22)


def lu_inverse(lu: jax.Array, permutation: jax.Array, *, base: int | None = None) -> jax.Array:
    """A^-1 from LAPACK's packed LU of ``a[permutation] = L U`` (L unit lower, U upper, both in
    ``lu``): A^-1 = U^-1 L^-1 P with P the row permutation, as LAPACK's getri (4N^3/3 flops).
    ``permutation`` (N,) holds the rows of a in the order the factor has them."""
    base = BASE if base is None else base
    w_u = trtri(Tri(lu, lower=False), base=base)
    w_l = trtri(Tri(lu, lower=True, unit=True), base=base)
    c = upper_times_lower(Tri(w_u, lower=False), Tri(w_l, lower=True), base=base)
    # (P a)^-1 = a^-1 P^-1, so a^-1 = c P: column k of c goes to column permutation[k]
    return jnp.zeros_like(c).at[:, permutation].set(c)
