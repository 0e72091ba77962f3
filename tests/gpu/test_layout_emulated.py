"""The native kernels' layout algebra, checked on CPU against an emulated cuSOLVERMp.

``jaxmg.kernels.native`` prepares the local blocks, the right-hand side and the FFI attributes
in JAX, and the FFI handler (csrc/solver.cc) reorders tiles and calls cuSOLVERMp. Here the FFI
call is replaced by a pure-JAX emulation of exactly what the handler and cuSOLVERMp do with the
buffers (the in-place tile reorder of csrc/layout.cu, the block-cyclic descriptors, potrf/potrs
with uplo=UPPER on the column-major view), so that every grid, padding and permutation rule is
checked without a GPU. Runs on CPU with 4 virtual devices.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, PartitionSpec as P  # noqa: E402

from jaxmg import _layout  # noqa: E402
from jaxmg.kernels import native  # noqa: E402

if jax.default_backend() != "cpu" or len(jax.devices()) < 4:
    pytest.skip("needs 4 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)",
                allow_module_level=True)


def _sigma(g, k, p):
    return (g % p) * (k // p) + g // p


def _emulated_factor_call(grid):
    def call(a_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve):
        del members, nid
        rank = rank[0]
        loc = jnp.swapaxes(a_m, -1, -2)  # column-major view: (mloc, nloc)
        mloc, nloc = loc.shape
        if mode == native._MODE_INPLACE and pr == 1 and pc > 1:
            k = mloc // tile
            r = np.arange(mloc)
            loc = loc[_sigma(r // tile, k, pc) * tile + r % tile, :]
        elif mode == native._MODE_INPLACE and pc == 1 and pr > 1:
            k = nloc // tile
            c = np.arange(nloc)
            loc = loc[:, _sigma(c // tile, k, pr) * tile + c % tile]
        axes = native._grid_axes(grid)
        gath = lambda x: jax.lax.all_gather(x[None], native._name(axes), axis=0, tiled=True) if axes else x[None]
        # all locals in rank order (rank = j + i*npcol): gather col axes first, then row axes
        def rank_gather(x):
            x = x[None]
            if grid.col_axes:
                x = jax.lax.all_gather(x, native._name(grid.col_axes), axis=0, tiled=True)
            if grid.row_axes:
                x = jax.lax.all_gather(x, native._name(grid.row_axes), axis=0, tiled=True)
            return x
        del gath
        locs = rank_gather(loc)
        m = jnp.zeros((n, n), loc.dtype)
        kr, kc = mloc // tile, nloc // tile
        for r in range(pr * pc):
            p, q = r % pr, r // pr
            for lr in range(kr):
                for lc in range(kc):
                    gr, gc = (p + lr * pr) * tile, (q + lc * pc) * tile
                    m = m.at[gr:gr + tile, gc:gc + tile].set(locs[r, lr * tile:(lr + 1) * tile, lc * tile:(lc + 1) * tile])
        up = jnp.triu(m)
        full = up + jnp.conj(jnp.triu(m, 1)).T
        lower = jnp.linalg.cholesky(full)
        u = jnp.conj(lower).T
        p, q = rank % pr, rank // pr
        # factor back into the local layout
        rows = (np.arange(mloc) // tile)
        cols = (np.arange(nloc) // tile)
        grow = (p + rows * pr) * tile + np.arange(mloc) % tile
        gcol = (q + cols * pc) * tile + np.arange(nloc) % tile
        f_loc = u[grow[:, None], gcol[None, :]]
        diag = jnp.real(jnp.diagonal(u))
        gidx = np.arange(n)
        own = ((gidx // tile) % pr == p) & ((gidx // tile) % pc == q)
        logdet = jnp.sum(jnp.where(own, jnp.log(diag), 0)).astype(jnp.finfo(loc.dtype).dtype)
        xt = b_m
        if solve:
            bl = jnp.swapaxes(b_m, -1, -2)  # (mloc, nrhs) column-major view
            bls = rank_gather(bl)
            bg = jnp.zeros((n, bl.shape[1]), loc.dtype)
            for r in range(pr):  # process column 0 holds B
                for lr in range(kr):
                    g = (r + lr * pr) * tile
                    bg = bg.at[g:g + tile].set(bls[r, lr * tile:(lr + 1) * tile])
            y = jax.scipy.linalg.cho_solve((lower, True), bg)
            xl = y[grow]
            xt = jnp.where(q == 0, jnp.swapaxes(xl, -1, -2), jnp.zeros_like(b_m))
        return jnp.swapaxes(f_loc, -1, -2), xt, logdet, jnp.int32(0)
    return call


CASES = [
    # mesh shape, spec, n, tile
    ((2,), P("x", None), 64, 16),
    ((2,), P(None, "x"), 64, 16),
    ((1,), P("x", None), 32, 8),
    ((2, 2), P("x", "y"), 64, 16),
    ((4,), P("x", None), 64, 8),
    ((4,), P(None, "x"), 64, 8),
    ((2,), P("x", None), 60, 16),   # padded
    ((2,), P(None, "x"), 60, 8),    # padded
    ((2, 2), P("x", "y"), 48, 16),  # padded
]


def _matrix(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        g = g + 1j * rng.standard_normal((n, n))
    a = g @ np.conj(g).T / n + np.eye(n)
    junk = np.triu(np.full((n, n), 7.0), 1)  # only the lower triangle is read
    return (np.tril(a) + junk).astype(dtype), a.astype(dtype)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("case", CASES)
def test_potrs_and_cholesky_layout(case, dtype, reverse, monkeypatch):
    shape, spec, n, tile = case
    devs = jax.devices()[: int(np.prod(shape))]
    if reverse:
        devs = devs[::-1]
    mesh = jax.make_mesh(shape, ("x", "y")[: len(shape)], axis_types=(AxisType.Auto,) * len(shape), devices=devs)
    grid = _layout.Grid(mesh, _layout.entry_axes(spec[0]), _layout.entry_axes(spec[1]))
    monkeypatch.setattr(native, "_check_one_gpu_per_process", lambda: None)
    monkeypatch.setattr(native, "_register", lambda: None)
    monkeypatch.setattr(native, "_factor_call", _emulated_factor_call(grid))
    monkeypatch.setattr(native, "_bootstrap", lambda g: (jnp.zeros((1,), jnp.int32),) * 2 + (
        jnp.reshape(native._index(g.col_axes) + native._index(g.row_axes) * g.npcol, (1,)).astype(jnp.int32),))
    with jax.enable_x64(True):
        a_in, a = _matrix(n, dtype)
        b = np.arange(1, 2 * n + 1, dtype=np.float64).reshape(n, 2).astype(dtype)
        f = jax.shard_map(lambda a, b: native.potrs(a, b, grid=grid, tile=tile), mesh=mesh,
                          in_specs=(grid.spec, P()), out_specs=(P(), P(), P()), check_vma=False)
        x, logdet, status = jax.jit(f)(a_in, b)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(float(logdet), np.linalg.slogdet(a)[1], rtol=1e-10)
        assert int(status) == 0
        c = jax.shard_map(lambda a: native.cholesky(a, grid=grid, tile=tile), mesh=mesh,
                          in_specs=(grid.spec,), out_specs=(grid.spec, P()), check_vma=False)
        low, status = jax.jit(c)(a_in)
        np.testing.assert_allclose(np.asarray(low), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
