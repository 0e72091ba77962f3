"""QR family: factor A = Q R once (M >= N), then least-squares solves, Q and R.

The factor is a pair: an M x N matrix in the grid layout and a small replicated part
(the backend decides what they hold, e.g. Q and R, or Householder vectors and scalars).
"""

from __future__ import annotations

from .._call import Block, Call, Replicated, Rows


def factor(call: Call, a, *, donate: bool = False):
    """The backend's QR factor (two grid-layout arrays) and status."""
    return call.run("qr_factor", [a], [Block()], [Block(), Replicated(), Replicated()],
                    donate=(0,) if donate else ())


_STATE = [Block(), Replicated()]


def q(call: Call, state):
    """Q (M x N) in a's caller layout."""
    m, n = call.shape
    return call.run("qr_q", list(state), _STATE, [call.block()], shapes=[(m, n)], names=["q"], m=m)[0]


def r(call: Call, state):
    """R (N x N) in a's caller layout."""
    n = call.shape[1]
    return call.run("qr_r", list(state), _STATE, [call.block()], shapes=[(n, n)], names=["r"])[0]


def solve(call: Call, state, b, spec, out_shape):
    """The least-squares solution of A x = b; b in layout ``spec``, x in the same layout."""
    return call.run("qr_solve", [*state, b], [*_STATE, Rows(spec)], [Rows(spec)],
                    shapes=[out_shape], names=["x"])[0]


def normal_solve(call: Call, state, y, spec):
    """z = (A^H A)^-1 y, for the least-squares derivative; y and z have N rows."""
    return call.run("qr_normal_solve", [*state, y], [*_STATE, Rows(spec)], [Rows(spec)])[0]
