"""Hermitian eigenproblems: syevd (A v = w v) and sygvd (A v = w B v)."""

from __future__ import annotations

from .._call import Block, Call, Replicated


def syevd(call: Call, a, *, donate: bool = False):
    """(w, v, status): ascending eigenvalues (replicated), eigenvectors in a's layout."""
    return call.run("syevd", [a], [Block()], [Replicated(), call.block(), Replicated()],
                    donate=(0,) if donate else ())


def sygvd(call: Call, a, b, *, donate: bool = False):
    """(w, v, status) of A v = w B v, v^H B v = I."""
    return call.run("sygvd", [a, b], [Block(), Block()], [Replicated(), call.block(), Replicated()],
                    donate=(0, 1) if donate else ())
