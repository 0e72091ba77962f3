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
products; no matrix is gathered). Inside :func:`laid_out`, every matrix they form (slice,
product, assembled block) is held in the order and layout of a :class:`Layout` instead (for
example :class:`jaxmg.kernels.cyclic.Cyclic` on a process grid, in which each slice is local).
A triangular operand is a :class:`Tri`: the array, which triangle holds it, and whether it is
used conjugate-transposed (a view: nothing is copied). The other triangle of the array is never
read.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import jax
import jax.numpy as jnp

from .. import _sharded
from .varying import alike

#: Diagonal blocks of at most this order are inverted by a triangular solve, and triangular
#: products of at most this order are one product with the other triangle masked (the default
#: of every ``base`` argument; smaller means fewer wasted flops, but more and smaller products).
BASE = 1024

#: Triangular products (:func:`trmm`) of at most this order are one product with the other
#: triangle masked (the other functions pass ``min(base, TRMM_BASE)``; docs/performance.md).
TRMM_BASE = 512

_ENGINE: contextvars.ContextVar = contextvars.ContextVar("jaxmg_triangular_engine", default=(None, None, None))


class Layout:
    """How the recursion holds its matrices: this base class is the natural order (each matrix
    as it is, XLA choosing the layout of every slice and product). A subclass may hold every
    matrix ``X`` (m x n) as a reordering ``X[s_m][:, s_n]``, ``s_m`` a permutation of ``range(m)``
    such that the reordering of a block ``X[rows, cols]`` (bounds at the recursion's split points)
    is the block of the reordering that :meth:`block` takes, and the reordering of a product is
    the product of the reorderings."""

    #: Whether the products run one after the other (each product's operands wait for the previous
    #: product's result), so that the memory a product needs in flight is held by one at a time.
    sequential: bool = False

    def block(self, x: jax.Array, rows: slice, cols: slice) -> jax.Array:
        """The (reordered) block ``X[rows, cols]`` of the (reordered) matrix ``x``."""
        return x[rows, cols]

    def concatenate(self, parts, axis: int) -> jax.Array:
        """The (reordered) matrix whose blocks along ``axis`` are the (reordered) ``parts``."""
        return jnp.concatenate(parts, axis=axis)

    def order(self, m: int) -> jax.Array:
        """``s_m``: the index in ``X`` of each row of an order-``m`` reordered matrix, (m,) int."""
        return jnp.arange(m)

    def natural(self, x: jax.Array) -> jax.Array:
        """``X`` from its reordering ``x`` (square)."""
        return x

    def reordered(self, x: jax.Array) -> jax.Array:
        """The reordering of ``X`` (square): the inverse of :meth:`natural`."""
        return x

    def matmul(self, x: jax.Array, y: jax.Array) -> jax.Array:
        """``x @ y`` at full precision."""
        return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)


_LAYOUT: contextvars.ContextVar = contextvars.ContextVar("jaxmg_triangular_layout", default=Layout())
_LAST_PRODUCT: contextvars.ContextVar = contextvars.ContextVar("jaxmg_triangular_last_product", default=None)


@contextlib.contextmanager
def laid_out(layout: Layout):
    """While tracing inside this block, the functions of this module hold their matrices (their
    arguments and results included) in ``layout``'s order and layout."""
    tokens = _LAYOUT.set(layout), _LAST_PRODUCT.set([])
    try:
        yield
    finally:
        _LAST_PRODUCT.reset(tokens[1])
        _LAYOUT.reset(tokens[0])


@contextlib.contextmanager
def products_through(product, trmm=None, inverse=None):
    """While tracing inside this block, every product of this module is
    ``product(x, y, adj_x, adj_y)`` (``op(x) @ op(y)``, op the conjugate transpose where
    ``adj_*``) and, where ``trmm`` is given, every triangular product :func:`trmm` is one call
    ``trmm(t, x, lower=, adj=, unit=, left=)`` (``op(T) @ x`` or ``x @ op(T)``, T the stored
    triangle ``lower`` of ``t``, unit diagonal where ``unit``); where ``inverse`` is given,
    :func:`hermitian_inverse` is one call ``inverse(l)`` (A^-1, both triangles, for A = L L^H with
    L the lower triangle of ``l``). For example cuBLAS on one GPU (``jaxmg.kernels.ffi.gemm``).
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

    def block(self, rows: slice, cols: slice) -> Mat:
        """The block ``[rows, cols]`` of the matrix this stands for."""
        layout = _LAYOUT.get()
        part = layout.block(self.x, cols, rows) if self.adj else layout.block(self.x, rows, cols)
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

    def block(self, rows: slice, cols: slice) -> Mat:
        part = Mat.block(self, rows, cols)
        if rows == cols:
            return part
        return Mat(part.x, part.adj)

    def diagonal(self, s: slice) -> Tri:
        """The diagonal block ``[s, s]``: triangular as this matrix is."""
        return dataclasses.replace(self, x=Mat.block(self, s, s).x)

    def value(self) -> jax.Array:
        """The triangle as a full matrix, the other triangle zero (unit diagonal set)."""
        x = Mat.value(self)
        s = _LAYOUT.get().order(self.n)
        keep = s[:, None] >= s[None, :] if self.lower else s[:, None] <= s[None, :]
        t = jnp.where(keep, x, jnp.zeros((), x.dtype))
        if self.unit:
            eye = jnp.eye(self.n, dtype=bool)
            t = jnp.where(eye, jnp.ones((), x.dtype), t)
        return t


def _mm(x, y) -> jax.Array:
    """``x @ y`` of Mats or arrays, at full precision (XLA folds the transposes into the product).

    The operands (slices of the factor at many offsets) pass an optimisation barrier first, so
    that each product is compiled as a product of whole arrays: XLA then tunes one kernel per
    shape instead of one per fused slice (the slices cost one copy each); for a
    :attr:`Layout.sequential` layout they wait for the previous product's result too. Inside
    :func:`products_through`, the product given there is used instead."""
    x = x if isinstance(x, Mat) else Mat(x)
    y = y if isinstance(y, Mat) else Mat(y)
    product = _ENGINE.get()[0]
    if product is not None:
        return product(x.x, y.x, x.adj, y.adj)
    xs, ys = _in_turn(x.x, y.x)
    return _done(_LAYOUT.get().matmul(dataclasses.replace(x, x=xs).value(), dataclasses.replace(y, x=ys).value()))


def _in_turn(*operands) -> tuple:
    """``operands`` through an optimisation barrier (so that XLA does not fuse their slices into
    what uses them), which, for a :attr:`Layout.sequential` layout, holds them until the result
    of the previous step (product or diagonal-block inverse) is computed."""
    last = _LAST_PRODUCT.get()
    after = last[-1:] if _LAYOUT.get().sequential and last is not None else []
    return jax.lax.optimization_barrier((*operands, *after))[: len(operands)]


def _done(out: jax.Array) -> jax.Array:
    """``out``, recorded as the result that the next step of a sequential layout waits for."""
    last = _LAST_PRODUCT.get()
    if last is not None:
        last[:] = [out]
    return out


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
    t11, t22 = t.diagonal(s1), t.diagonal(s2)
    whole = slice(None)
    if left:
        x1, x2 = x.block(s1, whole), x.block(s2, whole)
        if t.lower:
            top = trmm(t11, x1, left=True, base=base)
            bottom = _mm(t.block(s2, s1), x1) + trmm(t22, x2, left=True, base=base)
        else:
            top = trmm(t11, x1, left=True, base=base) + _mm(t.block(s1, s2), x2)
            bottom = trmm(t22, x2, left=True, base=base)
        return _LAYOUT.get().concatenate([top, bottom], axis=0)
    x1, x2 = x.block(whole, s1), x.block(whole, s2)
    if t.lower:
        first = trmm(t11, x1, left=False, base=base) + _mm(x2, t.block(s2, s1))
        second = trmm(t22, x2, left=False, base=base)
    else:
        first = trmm(t11, x1, left=False, base=base)
        second = _mm(x1, t.block(s1, s2)) + trmm(t22, x2, left=False, base=base)
    return _LAYOUT.get().concatenate([first, second], axis=1)


def triangular_solve(
    t: jax.Array,
    b: jax.Array,
    *,
    left_side: bool = False,
    lower: bool = False,
    transpose_a: bool = False,
    conjugate_a: bool = False,
    unit_diagonal: bool = False,
) -> jax.Array:
    """``jax.lax.linalg.triangular_solve`` (same arguments, same result: ``op(T)^-1 b``, or
    ``b op(T)^-1`` unless ``left_side``, T read from the ``lower`` (else upper) triangle of ``t``
    (..., N, N), its diagonal taken as ones where ``unit_diagonal``), with a derivative that holds
    on stacks split over Explicit mesh axes.

    The derivative is JAX's, that of what is computed (``x' = op(T)^-1 (b' - op(T') x)`` on the
    left, T' the tangent of the triangle read), through a ``jax.lax.custom_linear_solve`` of the
    product with ``op(T)``, whose solves are never differentiated themselves: every order is
    available. JAX's own rule masks the triangle with an unsplit array, which a stack split over
    Explicit mesh axes refuses (``jax.vmap`` of a solve, or of its derivative, there), and its
    reverse mode emits its triangular solve, which a second derivative then differentiates so.
    Inside a ``jax.shard_map``, ``t`` and ``b`` are marked to vary alike
    (``jaxmg.kernels.varying.alike``: a triangle shared by every device and a right-hand side of
    each device's own, or the reverse), as the product with ``t`` does."""
    conjugate_a = conjugate_a and jnp.issubdtype(t.dtype, jnp.complexfloating)
    t, b = alike(_whole_matrices(t), b)

    def solve(transposed: bool):
        return lambda _, r: _sharded.typed_like(
            r,
            jax.lax.linalg.triangular_solve(
                t,
                r,
                left_side=left_side,
                lower=lower,
                transpose_a=transposed,
                conjugate_a=conjugate_a,
                unit_diagonal=unit_diagonal,
            ),
        )

    def product(x):
        op = jnp.tril(t, -1) if lower else jnp.triu(t, 1)
        op = op + (jnp.eye(t.shape[-1], dtype=t.dtype) if unit_diagonal else jnp.tril(jnp.triu(t)))
        op = jnp.swapaxes(op, -1, -2) if transpose_a else op
        op = jnp.conj(op) if conjugate_a else op
        operands = (op, x) if left_side else (x, op)
        return _sharded.typed_like(x, jnp.matmul(*operands, precision=jax.lax.Precision.HIGHEST))

    return jax.lax.custom_linear_solve(product, b, solve=solve(transpose_a), transpose_solve=solve(not transpose_a))


def _whole_matrices(t):
    """``t`` (..., N, N) with its last two axes unsplit where its sharding type splits them over
    Explicit mesh axes (JAX's triangular solve, transposed or not, needs whole matrices); else ``t``."""
    sharding = _sharded.explicit_type(t)
    if sharding is None:
        return t
    spec = tuple(sharding.spec) + (None,) * (t.ndim - len(tuple(sharding.spec)))
    if spec[-2:] == (None, None):
        return t
    return jax.sharding.reshard(
        t, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*spec[:-2], None, None))
    )


def trsm(t: Tri, b: jax.Array, *, base: int | None = None) -> jax.Array:
    """``x`` with ``t @ x = b`` for triangular ``t`` (order n) and ``b`` (n, k): BLAS's trsm
    (n^2 k flops), recursive: with ``t`` lower, x1 from T11 x1 = b1, then x2 from
    T22 x2 = b2 - T21 x1 (upper: the other way round). Every flop but those of the diagonal
    blocks (``base`` rows and fewer, one triangular solve each) is in a product, which XLA
    partitions over a mesh. Differentiable (the rules of the products and of the solves)."""
    base = BASE if base is None else base
    n = t.n
    if n <= base:
        stored_lower = t.lower != t.adj
        return triangular_solve(
            t.x, b, left_side=True, lower=stored_lower, unit_diagonal=t.unit, transpose_a=t.adj, conjugate_a=t.adj
        )
    s1, s2 = _halves(n)
    b1, b2 = b[s1], b[s2]
    if t.lower:
        x1 = trsm(t.diagonal(s1), b1, base=base)
        x2 = trsm(t.diagonal(s2), b2 - _mm(t.block(s2, s1), x1), base=base)
    else:
        x2 = trsm(t.diagonal(s2), b2, base=base)
        x1 = trsm(t.diagonal(s1), b1 - _mm(t.block(s1, s2), x2), base=base)
    return jnp.concatenate([x1, x2], axis=0)


def _trmm_base(base: int) -> int:
    return min(base, TRMM_BASE)


def _assemble(b11, b12, b21, b22) -> jax.Array:
    """The matrix [[b11, b12], [b21, b22]] (in the layout of :func:`laid_out`)."""
    layout = _LAYOUT.get()
    return layout.concatenate([layout.concatenate([b11, b12], axis=1), layout.concatenate([b21, b22], axis=1)], axis=0)


def trtri(t: Tri, *, base: int | None = None) -> jax.Array:
    """The inverse of triangular ``t``, triangular the same way (the other triangle zero):
    [[T11, 0], [T21, T22]]^-1 = [[W11, 0], [-W22 T21 W11, W22]], N^3/3 flops."""
    base = BASE if base is None else base
    n = t.n
    if n <= base:
        layout = _LAYOUT.get()
        x = _in_turn(t.x)[0] if layout.sequential else t.x
        eye = jnp.eye(n, dtype=t.x.dtype)
        w = jax.lax.linalg.triangular_solve(
            layout.natural(dataclasses.replace(t, x=x).value()),
            eye,
            left_side=True,
            lower=t.lower,
            unit_diagonal=t.unit,
        )
        return _done(layout.reordered(w))
    s1, s2 = _halves(n)
    w11 = trtri(t.diagonal(s1), base=base)
    w22 = trtri(t.diagonal(s2), base=base)
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
    w11, w21, w22 = w.diagonal(s1), w.block(s2, s1), w.diagonal(s2)
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
    c11 = upper_times_lower(x.diagonal(s1), y.diagonal(s1), base=base) + _mm(x12, y21)
    c12 = trmm(y.diagonal(s2), x12, left=False, base=_trmm_base(base))
    c21 = trmm(x.diagonal(s2), y21, left=True, base=_trmm_base(base))
    c22 = upper_times_lower(x.diagonal(s2), y.diagonal(s2), base=base)
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
