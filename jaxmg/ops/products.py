"""Distributed products for the derivative rules: matrix-vector products and outer products."""

from __future__ import annotations

from .._call import Block, Call, Rows
from ..kernels import products

TRANS = {"N": 0, "T": 1, "C": 2}


def matvec(call: Call, a, x, spec_in, spec_out, trans: str = "N"):
    """op(a) @ x; x in layout ``spec_in``, the product in ``spec_out``."""
    return call.run("matvec", [a, x], [Block(), Rows(spec_in)], [Rows(spec_out)],
                    kernels=products, trans=TRANS[trans])[0]


def outer(call: Call, u, v, spec_u, spec_v, shape):
    """u @ v^H as a matrix of ``shape`` in the grid layout (u, v: vectors or N x K)."""
    local = (shape[0] // call.grid.nprow, shape[1] // call.grid.npcol)
    return call.run("outer", [u, v], [Rows(spec_u), Rows(spec_v)], [Block()],
                    kernels=products, local_shape=local)[0]
