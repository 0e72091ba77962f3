"""What the CPU emulations of the native handlers share (tests/gpu/test_*_emulated.py): the
tile permutation of the in-place layout, the in-place symmetrization of csrc/solver.cc, and
the test matrices."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def sigma(g, k, p):
    """Block-layout tile of block-cyclic tile g (k tiles over p processes)."""
    return (g % p) * (k // p) + g // p


def symmetrized(m0, n, tile, p):
    """What csrc's make_sym_plan leaves: the upper triangle as given, the strictly lower parts of
    diagonal tiles and the lower tiles that land in the permuted lower triangle filled from it,
    and NaN in every other lower tile (the handler leaves those as they were: never read)."""
    k = n // tile
    blocks = np.arange(k)
    cyc = (blocks % (k // p)) * p + blocks // (k // p)
    tile_of = np.arange(n) // tile
    r, c = tile_of[:, None], tile_of[None, :]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    filled = (r == c) | ((r > c) & (cyc[r] > cyc[c]))
    full = jnp.triu(m0) + jnp.conj(jnp.triu(m0, 1)).T
    return jnp.where(i <= j, m0, jnp.where(filled, full, jnp.nan))


def permuted(m, n, tile, p):
    """S^T m S: the matrix whose block-cyclic layout (p processes along each distributed
    dimension) is m's block layout."""
    e = np.arange(n)
    perm = sigma(e // tile, n // tile, p) * tile + e % tile
    return m[perm][:, perm]


def hermitian_with_junk(n, dtype, seed=0):
    """(a with junk above the diagonal, the Hermitian positive-definite a it stands for): the
    handlers read only the lower triangle."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        g = g + 1j * rng.standard_normal((n, n))
    a = g @ np.conj(g).T / n + np.eye(n)
    junk = np.triu(np.full((n, n), 7.0 - 3.0j if np.issubdtype(dtype, np.complexfloating) else 7.0), 1)
    return (np.tril(a) + junk).astype(dtype), a.astype(dtype)
