"""Matrix products on one GPU through cuBLAS (``jaxmg_gemm``, ``jaxmg_trmm``, csrc/gemm.cc),
without autotuning, and the inverses from a Cholesky factor (``jaxmg_potri``) and from an LU
factor (``jaxmg_getri``), each in its factor's own buffer.

The triangular inverses (``jaxmg.kernels.triangular``) are made of products of many distinct
shapes. As XLA dots, each shape is autotuned when the program is first compiled, which at order
32,768 took tens of seconds; cuBLAS's heuristic chooses its kernel without a tuning run. XLA
cannot partition a custom call, so these products serve only computations on one GPU. A
triangular product is one cuBLAS trmm: no flops on the zero triangle, no recursion.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..triangular import Mat, Tri
from ..varying import varying_like
from . import _library, relayout
from ._codes import CODES


def available() -> bool:
    """Whether the native library is loaded with cuBLAS, so that :func:`product` can run."""
    return bool(_library.capabilities().get("gemm"))


#: Triangular products of matrices of at most this order are single cuBLAS trmm calls; larger ones
#: recurse into gemm calls (the faster of the two at each size measured on one H200,
#: ``python benchmarks/bench_gp.py --inverse``; docs/performance.md).
TRMM_MAX_ORDER = 16384


def one_gpu_products(n: int) -> tuple:
    """The (product, triangular product, Hermitian inverse) that the triangular inverses of an
    order-``n`` matrix (``jaxmg.kernels.triangular.products_through``) use on one GPU: cuBLAS's
    gemm, its trmm up to :data:`TRMM_MAX_ORDER`, and the one-call potri :func:`hermitian_inverse`."""
    return product, (triangular_product if n <= TRMM_MAX_ORDER else None), hermitian_inverse


def _op(x: jax.Array, adj: bool) -> int:
    """The handlers' ``op`` (csrc/codes.h) for ``x`` itself, or its conjugate transpose where ``adj``."""
    if not adj:
        return CODES["op_n"]
    return CODES["op_c"] if jnp.iscomplexobj(x) else CODES["op_t"]


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _product(x, y, adj_x, adj_y):
    _library.register()
    m = x.shape[1] if adj_x else x.shape[0]
    n = y.shape[0] if adj_y else y.shape[1]
    out = jax.ShapeDtypeStruct((m, n), x.dtype)
    return jax.ffi.ffi_call("jaxmg_gemm", out, vmap_method="sequential")(
        x, y, op_x=np.int64(_op(x, adj_x)), op_y=np.int64(_op(y, adj_y))
    )


@_product.defjvp
def _product_jvp(adj_x, adj_y, primals, tangents):
    # Tangents through XLA's dots: linear, so JAX can transpose them (the custom call cannot be).
    x, y = primals
    dx, dy = tangents
    out = _product(x, y, adj_x, adj_y)
    hi = jax.lax.Precision.HIGHEST
    dout = jnp.matmul(Mat(dx, adj_x).value(), Mat(y, adj_y).value(), precision=hi)
    dout = dout + jnp.matmul(Mat(x, adj_x).value(), Mat(dy, adj_y).value(), precision=hi)
    return out, dout


def product(x: jax.Array, y: jax.Array, adj_x: bool = False, adj_y: bool = False) -> jax.Array:
    """``op(x) @ op(y)`` on this GPU, op the conjugate transpose where ``adj_*``: x (p, q) and
    y (r, s), row-major, one dtype (float32, float64, complex64, complex128); float32 and
    complex64 at full precision (no TF32). Differentiable (tangents through XLA's dots)."""
    return _product(x, y, bool(adj_x), bool(adj_y))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4, 5))
def _triangular_product(t, x, lower, adj, unit, left):
    _library.register()
    return jax.ffi.ffi_call("jaxmg_trmm", jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="sequential")(
        t, x, left=np.int64(left), lower=np.int64(lower), op=np.int64(_op(t, adj)), unit=np.int64(unit)
    )


@_triangular_product.defjvp
def _triangular_product_jvp(lower, adj, unit, left, primals, tangents):
    t, x = primals
    dt, dx = tangents
    out = _triangular_product(t, x, lower, adj, unit, left)
    # T's stored triangle (ones on the diagonal where unit), and its tangent (zero diagonal there)
    tri = Tri(t, lower=lower, unit=unit).value()
    dtri = jnp.tril(dt, -1 if unit else 0) if lower else jnp.triu(dt, 1 if unit else 0)
    tri, dtri = Mat(tri, adj).value(), Mat(dtri, adj).value()
    hi = jax.lax.Precision.HIGHEST
    if left:
        dout = jnp.matmul(dtri, x, precision=hi) + jnp.matmul(tri, dx, precision=hi)
    else:
        dout = jnp.matmul(x, dtri, precision=hi) + jnp.matmul(dx, tri, precision=hi)
    return out, dout


def triangular_product(
    t: jax.Array, x: jax.Array, *, lower: bool, adj: bool = False, unit: bool = False, left: bool = True
) -> jax.Array:
    """``op(T) @ x`` (``left``) or ``x @ op(T)`` on this GPU (cuBLAS trmm): T the stored triangle of
    square ``t`` (its lower one where ``lower``; the other is never read), with ones on the
    diagonal where ``unit``, op the conjugate transpose where ``adj``; x (n, s) or (r, n),
    row-major, t's dtype. Differentiable (tangents through XLA's dots)."""
    return _triangular_product(t, x, bool(lower), bool(adj), bool(unit), bool(left))


#: :func:`hermitian_inverse`'s handler inverts diagonal blocks of at most this order by one
#: cuBLAS trsm against the identity (through a scratch buffer of this order squared), does each
#: triangular product with a diagonal block of order at most ``TRMM_LEAF`` as gemms on
#: ``TRMM_CHUNK`` columns or rows of its operand at a time (through a ``TRMM_LEAF`` x
#: ``TRMM_CHUNK`` scratch buffer: 16 MiB in float64, whatever the order) and each Hermitian
#: rank-k update of order at most ``HERK_LEAF`` as one cuBLAS herk; everything above is cuBLAS
#: gemm calls.
INVERSE_LEAF = 512
TRMM_LEAF = 512
TRMM_CHUNK = 4096
HERK_LEAF = 2048


def _in_place_operands(factor, *scratch_rows: int) -> tuple:
    """What potri and getri share: the identity of the leaf order (varying like the factor inside
    a shard_map), and the result shapes: the inverse (in the factor's buffer), the leaf x leaf and
    min(TRMM_LEAF, n) x min(TRMM_CHUNK, n) scratch buffers, and one (rows, n) scratch buffer per
    ``scratch_rows``."""
    _library.register()
    n, dtype = factor.shape[0], factor.dtype
    leaf = max(1, min(INVERSE_LEAF, n))
    eye = varying_like(factor, jnp.eye(leaf, dtype=dtype))
    shapes = [(n, n), (leaf, leaf), (min(TRMM_LEAF, n), min(TRMM_CHUNK, n))]
    shapes += [(rows, n) for rows in scratch_rows]
    return eye, tuple(jax.ShapeDtypeStruct(shape, dtype) for shape in shapes)


def _inverse_tangent(inverse, da):
    """d(A^-1) = -A^-1 dA A^-1, through XLA's dots (JAX can transpose them)."""
    hi = jax.lax.Precision.HIGHEST
    return -jnp.matmul(inverse, jnp.matmul(da, inverse, precision=hi), precision=hi)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _hermitian_inverse(factor, column_major):
    eye, shapes = _in_place_operands(factor)
    # A column-major factor goes in as its transpose, row-major: the same bytes (the transpose is
    # a bitcast), so that the inverse the handler leaves in them is read row-major, as the
    # caller's arrays are, and nothing downstream transposes it.
    operand = factor.T if column_major else factor
    inverse, _, _ = jax.ffi.ffi_call("jaxmg_potri", shapes, input_output_aliases={0: 0}, vmap_method="sequential")(
        operand, eye, trmm_leaf=np.int64(TRMM_LEAF), herk_leaf=np.int64(HERK_LEAF), column_major=np.int64(column_major)
    )
    if column_major:  # the buffer holds A^-1 column-major: read row-major, (A^-1)^T = conj(A^-1)
        inverse = jnp.conj(inverse)
    return varying_like(factor, inverse)


@_hermitian_inverse.defjvp
def _hermitian_inverse_jvp(column_major, primals, tangents):
    # dA = dL L^H + L dL^H
    (factor,), (dfactor,) = primals, tangents
    inverse = _hermitian_inverse(factor, column_major)
    low, dlow = jnp.tril(factor), jnp.tril(dfactor)
    da = jnp.matmul(dlow, jnp.conj(low).T, precision=jax.lax.Precision.HIGHEST)
    return inverse, _inverse_tangent(inverse, da + jnp.conj(da).T)


def hermitian_inverse(factor: jax.Array, column_major: bool = False) -> jax.Array:
    """A^-1 (n, n, both triangles) on this GPU for A = L L^H, from the lower triangular factor L
    in ``factor``'s lower triangle (the other triangle is not read), float32 to complex128:
    LAPACK's potri ((2/3) n^3 flops) as one call that recurses into cuBLAS gemm calls on the
    factor's own buffer, in place, and mirrors one triangle into the other there
    (``jaxmg_potri``, csrc/gemm.cc): no second matrix. ``column_major``: the factor is laid out
    column-major (as the device's potrf leaves it), else row-major. A^-1 comes back row-major
    either way, in the factor's buffer: neither is transposed. Differentiable (tangents through
    XLA's dots)."""
    return _hermitian_inverse(factor, bool(column_major))


@jax.custom_jvp
def _lu_inverse(lu, permutation):
    eye, shapes = _in_place_operands(lu, min(max(INVERSE_LEAF, TRMM_LEAF), lu.shape[0]))  # the panels' scratch
    column_major = (1, 0)  # major-to-minor
    inverse, _, _, _ = jax.ffi.ffi_call(
        "jaxmg_getri",
        shapes,
        input_layouts=[column_major, None, None],
        output_layouts=[column_major, None, None, None],
        input_output_aliases={0: 0},
        vmap_method="sequential",
    )(lu, varying_like(lu, permutation.astype(jnp.int32)), eye, trmm_leaf=np.int64(TRMM_LEAF))
    # the buffer holds A^-1 column-major: transposed in place, it is read row-major
    return relayout.relayout(jnp.swapaxes(varying_like(lu, inverse), -1, -2), relayout.TRANSPOSE)


@_lu_inverse.defjvp
def _lu_inverse_jvp(primals, tangents):
    # A = P^T L U, dA = P^T (dL U + L dU)
    (lu, permutation), (dlu, _) = primals, tangents
    inverse = _lu_inverse(lu, permutation)
    n = lu.shape[0]
    hi = jax.lax.Precision.HIGHEST
    unit_lower = jnp.tril(lu, -1) + jnp.eye(n, dtype=lu.dtype)
    dlu_product = jnp.matmul(jnp.tril(dlu, -1), jnp.triu(lu), precision=hi) + jnp.matmul(
        unit_lower, jnp.triu(dlu), precision=hi
    )
    da = jnp.zeros_like(dlu_product).at[permutation].set(dlu_product, unique_indices=True)  # row k of P A is
    # row permutation[k] of A
    return inverse, _inverse_tangent(inverse, da)


def lu_inverse(lu: jax.Array, permutation: jax.Array) -> jax.Array:
    """A^-1 (n, n) on this GPU from the packed LU factor of ``a[permutation] = L U`` (L unit lower
    in ``lu``'s strict lower triangle, U in its upper one, as the device's getrf leaves it:
    column-major), float32 to complex128: LAPACK's getri ((4/3) n^3 flops) as one call on the
    factor's own buffer (``jaxmg_getri``, csrc/gemm.cc): U^-1 in place (the recursion of
    :func:`hermitian_inverse`), then X L = U^-1 by panels of 512 columns (one cuBLAS gemm and one
    trsm each), then the column interchanges through a 512 x n scratch buffer, and a transpose
    in place (:mod:`.relayout`): no second matrix. A^-1 comes back row-major. ``permutation`` (n,): row
    ``permutation[k]`` of A is row k of P A. Differentiable in ``lu`` (tangents through XLA's dots)."""
    return _lu_inverse(lu, permutation)
