"""Singular value decomposition A = U diag(s) V^H (M >= N)."""

from __future__ import annotations

from .._call import Call, Replicated


def gesvd(call: Call, a, *, full_matrices: bool, donate: bool = False):
    """(u, s, vh, status): u (M x N, or M x M) and vh (N x N) in a's layout, s replicated."""
    m, n = a.shape
    return call.run("gesvd", [a], [call.block(False)],
                    [call.block(), Replicated(), call.block(), Replicated()],
                    shapes=[(m, m if full_matrices else n), (n,), (n, n), ()],
                    names=["u", "s", "vh", "status"], donate=(0,) if donate else (),
                    full_matrices=bool(full_matrices))
