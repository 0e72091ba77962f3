"""LU family: factor P A = L U once (partial pivoting), then solve with A, A^T or A^H."""

from __future__ import annotations

from .._call import Block, Call, Replicated, Rows

TRANS = {"N": 0, "T": 1, "C": 2}


def factor(call: Call, a, *, donate: bool = False):
    """The backend's LU factor (grid layout), pivots and status."""
    return call.run("lu_factor", [a], [Block()], [Block(), Replicated(), Replicated()],
                    donate=(0,) if donate else ())


def solve(call: Call, lu, piv, b, spec, trans: str = "N"):
    """x with op(A) x = b, op given by ``trans`` ("N", "T" or "C")."""
    return call.run("lu_solve", [lu, piv, b], [Block(), Replicated(), Rows(spec)], [Rows(spec)],
                    trans=TRANS[trans])[0]
