"""Polar decomposition A = U_p H (M >= N)."""

from __future__ import annotations

from .._call import Call, Replicated


def polar(call: Call, a, *, donate: bool = False):
    """(u_p, h, status): u_p (M x N) and h (N x N) in a's layout."""
    m, n = a.shape
    return call.run("polar", [a], [call.block(False)], [call.block(), call.block(), Replicated()],
                    shapes=[(m, n), (n, n), ()], names=["u_p", "h", "status"],
                    donate=(0,) if donate else ())
