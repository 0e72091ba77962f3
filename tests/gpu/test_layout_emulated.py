"""The native kernels' layout algebra, checked on CPU against an emulated cuSOLVERMp.

``jaxmg.kernels.native`` prepares the local blocks, the right-hand side and the FFI attributes
in JAX, and the FFI handler (csrc/solver.cc) reorders tiles and calls cuSOLVERMp. Here the FFI
call is replaced by a pure-JAX emulation of exactly what the handler and cuSOLVERMp do with the
buffers (the in-place symmetrization and tile reorder of csrc, the block-cyclic descriptors,
potrf/potrs with uplo=LOWER (in-place mode) or UPPER (natural mode) on the column-major view),
so that every grid, padding and permutation rule, and the kernel contract seen from the public
API, is checked without a GPU. Runs on CPU with 4 of the simulated devices.
"""
from __future__ import annotations

import functools


import numpy as np
import pytest

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, PartitionSpec as P  # noqa: E402

from jaxmg import _layout  # noqa: E402
from jaxmg.kernels import native  # noqa: E402

from _emulation import hermitian_with_junk as _matrix, sigma as _sigma, symmetrized as _symmetrized  # noqa: E402

if jax.default_backend() != "cpu" or len(jax.devices()) < 4:
    pytest.skip("needs 4 CPU devices (tests/conftest.py sets up 8)",
                allow_module_level=True)


def _rank_gather(grid, x):
    """Every member's x stacked in rank order (rank = j + i * npcol: column axes first, then rows)."""
    x = x[None]
    if grid.col_axes:
        x = jax.lax.all_gather(x, native._name(grid.col_axes), axis=0, tiled=True)
    if grid.row_axes:
        x = jax.lax.all_gather(x, native._name(grid.row_axes), axis=0, tiled=True)
    return x


def _emulated_factor_call(grid):
    def call(a_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve):
        del members, nid
        rank = rank[0]
        rank_gather = functools.partial(_rank_gather, grid)
        loc = jnp.swapaxes(a_m, -1, -2)  # column-major view: (mloc, nloc)
        mloc, nloc = loc.shape
        if mode == native._MODE_INPLACE:  # symmetrize the block layout (csrc: make_sym_plan)
            blocks = rank_gather(loc)
            m0 = jnp.zeros((n, n), loc.dtype)
            for r in range(pr * pc):
                p0, q0 = r % pr, r // pr
                m0 = m0.at[p0 * mloc:(p0 + 1) * mloc, q0 * nloc:(q0 + 1) * nloc].set(blocks[r])
            m0 = _symmetrized(m0, n, tile, max(pr, pc))
            p0, q0 = rank % pr, rank // pr
            loc = jax.lax.dynamic_slice(m0, (p0 * mloc, q0 * nloc), (mloc, nloc))
        if mode == native._MODE_INPLACE and pr == 1 and pc > 1:
            k = mloc // tile
            r = np.arange(mloc)
            loc = loc[_sigma(r // tile, k, pc) * tile + r % tile, :]
        elif mode == native._MODE_INPLACE and pc == 1 and pr > 1:
            k = nloc // tile
            c = np.arange(nloc)
            loc = loc[:, _sigma(c // tile, k, pr) * tile + c % tile]
        locs = rank_gather(loc)
        m = jnp.zeros((n, n), loc.dtype)
        kr, kc = mloc // tile, nloc // tile
        for r in range(pr * pc):
            p, q = r % pr, r // pr
            for lr in range(kr):
                for lc in range(kc):
                    gr, gc = (p + lr * pr) * tile, (q + lc * pc) * tile
                    m = m.at[gr:gr + tile, gc:gc + tile].set(locs[r, lr * tile:(lr + 1) * tile, lc * tile:(lc + 1) * tile])
        if mode == native._MODE_INPLACE:  # uplo=LOWER on the symmetrized, permuted matrix
            lower = jnp.linalg.cholesky(jnp.tril(m) + jnp.conj(jnp.tril(m, -1)).T)
            u = lower
        else:  # uplo=UPPER
            lower = jnp.linalg.cholesky(jnp.triu(m) + jnp.conj(jnp.triu(m, 1)).T)
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


def _emulated_solve_call(grid):
    """jaxmg_potrs: potrs with a saved factor (natural order, mode 0, uplo=UPPER; or the permuted
    in-place layout, mode 1, uplo=LOWER), and log det."""
    def call(f_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve):
        rank = rank[0]
        rank_gather = functools.partial(_rank_gather, grid)

        loc = jnp.swapaxes(f_m, -1, -2)
        mloc, nloc = loc.shape
        locs = rank_gather(loc)
        u = jnp.zeros((n, n), loc.dtype)
        kr, kc = mloc // tile, nloc // tile
        for r in range(pr * pc):
            p, q = r % pr, r // pr
            for lr in range(kr):
                for lc in range(kc):
                    gr, gc = (p + lr * pr) * tile, (q + lc * pc) * tile
                    u = u.at[gr:gr + tile, gc:gc + tile].set(locs[r, lr * tile:(lr + 1) * tile, lc * tile:(lc + 1) * tile])
        u = jnp.conj(jnp.tril(u)).T if mode == native._MODE_INPLACE else jnp.triu(u)  # M = U^H U
        p, q = rank % pr, rank // pr
        gidx = np.arange(n)
        own = ((gidx // tile) % pr == p) & ((gidx // tile) % pc == q)
        logdet = jnp.sum(jnp.where(own, jnp.log(jnp.real(jnp.diagonal(u))), 0)).astype(jnp.finfo(loc.dtype).dtype)
        xt = b_m
        if solve:
            bl = jnp.swapaxes(b_m, -1, -2)
            bls = rank_gather(bl)
            bg = jnp.zeros((n, bl.shape[1]), loc.dtype)
            for r in range(pr):
                for lr in range(kr):
                    g = (r + lr * pr) * tile
                    bg = bg.at[g:g + tile].set(bls[r, lr * tile:(lr + 1) * tile])
            y = jax.scipy.linalg.solve_triangular(u, bg, lower=False, trans="C")
            y = jax.scipy.linalg.solve_triangular(u, y, lower=False)
            grow = (p + (np.arange(mloc) // tile) * pr) * tile + np.arange(mloc) % tile
            xt = jnp.where(q == 0, jnp.swapaxes(y[grow], -1, -2), jnp.zeros_like(b_m))
        return xt, logdet, jnp.int32(0)
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


@pytest.mark.parametrize("case,dtype,reverse", [(c, np.float64, False) for c in CASES]
                         + [(c, np.complex128, True) for c in CASES])
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


@pytest.mark.parametrize("spec", [P("x", None), P(None, "x")])
@pytest.mark.parametrize("n,tile", [(64, 16), (60, 16)])
def test_public_api_through_native_family(spec, n, tile, monkeypatch):
    """jaxmg.potrs / jaxmg.cholesky / Cholesky(...) with backend="native", on CPU, through the
    native family kernels with the FFI calls emulated (checks the kernel contract end to end)."""
    import jaxmg
    from jaxmg import _backend

    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,), devices=jax.devices()[:2])
    grid = _layout.Grid(mesh, _layout.entry_axes(spec[0]), _layout.entry_axes(spec[1]))
    monkeypatch.setattr(_backend, "native_unavailable", lambda op, mesh: None)
    monkeypatch.setattr(native, "_check_one_gpu_per_process", lambda: None)
    monkeypatch.setattr(native, "_register", lambda: None)
    monkeypatch.setattr(native, "_factor_call", _emulated_factor_call(grid))
    monkeypatch.setattr(native, "_solve_call", _emulated_solve_call(grid))
    monkeypatch.setattr(native, "_bootstrap", lambda g: (jnp.zeros((1,), jnp.int32),) * 2 + (
        jnp.reshape(native._index(g.col_axes) + native._index(g.row_axes) * g.npcol, (1,)).astype(jnp.int32),))
    with jax.enable_x64(True):
        a_in, a = _matrix(n, np.float64)
        b = np.arange(1, n + 1, dtype=np.float64)
        ag = jax.device_put(a_in, jax.sharding.NamedSharding(mesh, spec))
        x, logdet, status = jaxmg.potrs(ag, b, T_A=tile, mesh=mesh, return_logdet=True, return_status=True,
                                        backend="native")
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(float(logdet), np.linalg.slogdet(a)[1], rtol=1e-10)
        assert int(status) == 0
        low = jaxmg.cholesky(ag, T_A=tile, mesh=mesh, backend="native")
        np.testing.assert_allclose(np.asarray(low), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
