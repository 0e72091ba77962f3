"""Cholesky family: factor A = L L^H once, then solve, log-determinant, inverse, L."""

from __future__ import annotations

from .. import _backend, _sharded
from .._call import Block, Call, Replicated, Rows
from ..kernels import triangular


def factor(call: Call, a, *, donate: bool = False):
    """The backend's factor of Hermitian positive-definite ``a`` (grid layout) and status."""
    return call.run("cholesky_factor", [a], [Block()], [Block(), Replicated()],
                    donate=(0,) if donate else ())


def solve(call: Call, state, b, spec):
    """x = A^-1 b with b (and x) in layout ``spec``."""
    return call.run("cholesky_solve", [state, b], [Block(), Rows(spec)], [Rows(spec)])[0]


def logdet(call: Call, state):
    """log det A, real and replicated."""
    return call.run("cholesky_logdet", [state], [Block()], [Replicated()])[0]


def inverse(call: Call, state):
    """A^-1 in the grid layout, from the factor: LAPACK's potri (the triangular inverse, then
    the product W^H W; (2/3) N^3 flops, almost all in large matrix products), on the whole
    factor in the grid layout (distributed, never gathered), then taken to a's order where the
    backend factored a tile-permuted matrix."""
    lower, reordered = call.kernels.cholesky_triangle_kind(call.shape[0], call.tile, call.grid, call.natural)
    (factor,) = call.run("cholesky_triangle", [state], [Block()], [Block()])
    inverse = _sharded.whole(_hermitian_inverse, (factor,), call.grid, lower=lower,
                             products=_backend.one_gpu_products(call.grid, call.shape[0]))
    if reordered:
        (inverse,) = call.run("cholesky_to_a_order", [inverse], [Block()], [Block()])
    return inverse


def _hermitian_inverse(factor, *, lower: bool, products):
    with triangular.products_through(*products):
        return triangular.hermitian_inverse(triangular.Tri(factor, lower=lower))


def state_is_lower(call: Call) -> bool:
    """Whether the backend's factor state holds L, so that :func:`lower` can read it. The
    native backend's default state (cuSOLVERMp's in-place, permuted factor) does not: L then
    needs a factor made with ``dataclasses.replace(call, natural=True)``."""
    check = getattr(call.kernels, "cholesky_state_is_lower", None)
    return check is None or check(call.shape[0], call.tile, call.grid, call.natural)


def lower(call: Call, state):
    """The lower factor L in a's caller layout."""
    return call.run("cholesky_lower", [state], [Block()], [call.block()])[0]
