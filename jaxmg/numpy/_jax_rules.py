"""The derivatives that JAX's own functions define where they differ from jaxmg's.

jaxmg's Hermitian operations read one triangle of ``a`` and are differentiated as functions of
that triangle (docs/derivatives.md). Two of JAX's drop-in counterparts differentiate the full
matrix instead, and ``jaxmg.numpy.linalg`` and ``jaxmg.scipy.linalg`` take JAX's derivative there,
so that a port by import takes the same gradient steps:

* ``jnp.linalg.eigh`` and ``eigvalsh`` with ``symmetrize_input=False`` (either ``UPLO``): the
  eigendecomposition of the triangle read, with JAX's rule applied to the tangent ``a'`` as given
  (``w' = Re diag(v^H a' v)``, ``v' = v (F o v^H a' v)``), not to the Hermitian matrix read from
  its triangle; the same syevd gives the values and the derivative.
* ``jax.scipy.linalg.solve(a, b, assume_a="pos")``: ``x = H^-1 b`` by Cholesky of the triangle
  ``lower`` read (``H``), with the derivative of the full matrix, ``x' = H^-1 (b' - a' x)``: a
  ``jax.lax.custom_linear_solve`` with the product ``a @ x`` and the solves of one saved factor
  (one factorisation, as JAX's).

Both equal jaxmg's own rules wherever ``a'`` is Hermitian (``a'`` read from a triangle, or
symmetrized), which is the derivative of the computed function there.
"""

from __future__ import annotations

import functools

import jax

from .. import _context, functional as _f
from .._dense import _explicit_mesh
from ..autodiff import _dist, solves, tangents
from ..kernels.varying import alike
from ..modules import Cholesky
from ._util import herm_input, in_layout_of


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def eigh_of_triangle(a: jax.Array, lower: bool, vectors: bool):
    """``(w, v)`` (or ``w`` alone unless ``vectors``) of the Hermitian matrix read from the triangle
    ``lower`` of ``a`` (N, N) by :func:`jaxmg.syevd`, differentiated as ``jnp.linalg.eigh(a,
    symmetrize_input=False)`` is (module docstring). w (N,) replicated, v in a's layout."""
    return _f.syevd(herm_input(a, False, lower=lower), return_eigenvectors=vectors)


@eigh_of_triangle.defjvp
def _eigh_of_triangle_jvp(lower, vectors, primals, tangents_in):
    (a,), (a_dot,) = primals, tangents_in
    w, v = _f.syevd(_triangle_moving_symmetrised(a, lower))
    w_dot, v_dot = tangents.eigh_jvp(w, v, a_dot, _dist.resolve(v), full=True)
    return ((w, v), (w_dot, v_dot)) if vectors else (w, w_dot)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _triangle_moving_symmetrised(a: jax.Array, lower: bool) -> jax.Array:
    """The matrix whose lower triangle :func:`eigh_of_triangle` decomposes (``a``, or ``a^H`` for
    the upper triangle), with the tangent ``(a' + a'^H) / 2``: inside its rule, ``w`` and ``v``
    then move as JAX's, whose rule decomposes ``(a + a^H) / 2``, so that its second and higher
    derivatives are JAX's too (the first applies JAX's rule to ``a'`` as given). The other
    triangle's values are never read (it may hold anything)."""
    return herm_input(a, False, lower=lower)


@_triangle_moving_symmetrised.defjvp
def _triangle_moving_symmetrised_jvp(lower, primals, tangents_in):
    (a,), (a_dot,) = primals, tangents_in
    return _triangle_moving_symmetrised(a, lower), herm_input(a_dot, True, lower=lower)


def positive_solve(a: jax.Array, b: jax.Array, *, lower: bool) -> jax.Array:
    """``x`` with ``H x = b`` for the Hermitian positive-definite ``H`` read from the triangle
    ``lower`` of ``a`` (N, N), by one Cholesky factorisation (:class:`jaxmg.Cholesky`); ``b`` (N,)
    or (N, K), x in its shape and layout. Differentiated as ``jax.scipy.linalg.solve(a, b,
    assume_a="pos")`` is: through the product ``a @ x`` with the full ``a``."""
    a, b = alike(a, b)  # inside a shard_map, a and b vary alike (a shared a, or a shared b)
    factor = Cholesky(jax.lax.stop_gradient(herm_input(a, False, lower=lower)))
    layout = _dist.resolve(b)
    transpose_solve = solves.hermitian_transpose_solve(factor.solve, a.dtype)
    place = _vector_placement(a, b)
    # every vector in b's layout, as custom_linear_solve types its transpose
    return jax.lax.custom_linear_solve(
        lambda x: place(_dist.matvec(a, x, layout), x),
        b,
        solve=lambda _, r: place(factor.solve(r), r),
        transpose_solve=lambda _, r: place(transpose_solve(r), r),
    )


def _vector_placement(a: jax.Array, b: jax.Array):
    """How :func:`positive_solve` lays out the vectors of its ``custom_linear_solve``: each in the
    layout of the vector it replaces (:func:`in_layout_of`). The closures are traced apart from
    ``jax.vmap``, where a member of a stack looks like one matrix and would be put in one matrix's
    layout (rows and columns over the mesh, the stack gathered), so for a stack on Auto mesh axes
    the vectors stay where XLA puts them (with the stack, split on its batch axis)."""
    if (_context.stack_of(a) is None and _context.stack_of(b) is None) or _explicit_mesh(b) is not None:
        return in_layout_of
    return lambda x, like: x
