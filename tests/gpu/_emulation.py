"""The CPU emulation of the native FFI handlers that tests/gpu/test_*_emulated.py run the native
kernels against: the tile permutation of the in-place layout, the in-place symmetrization of
csrc/solver.cc, potrf/potrs as cuSOLVERMp does them on the block-cyclic buffers (``Emulator``,
installed by ``patch``), and the test matrices."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxmg.kernels import native


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


# --------------------------------------------------------------------------------------------
# Emulation of the FFI handlers jaxmg_potrf and jaxmg_potrs (natural and in-place modes)
# --------------------------------------------------------------------------------------------

def _potrf_upper(m):
    """cuSOLVERMp potrf, uplo=UPPER, on the global column-major matrix m: (m with U in its upper
    triangle, strictly lower part untouched; info)."""
    n = m.shape[0]
    h = jnp.triu(m) + jnp.conj(jnp.triu(m, 1)).T  # only the upper triangle is read
    rows = jnp.arange(n)

    def step(k, carry):  # unblocked left-looking Cholesky of h = L L^H (L = U^H)
        low, info = carry
        v = h[:, k] - low @ jnp.conj(low[k, :])
        d = jnp.real(v[k])
        bad = ~(d > 0)
        info = jnp.where((info == 0) & bad, k + 1, info)
        s = jnp.sqrt(d).astype(v.dtype)
        col = jnp.where(rows == k, s, v / s)
        low = low.at[:, k].set(jnp.where(rows >= k, col, jnp.zeros((), v.dtype)))
        return low, info

    low, info = jax.lax.fori_loop(0, n, step, (jnp.zeros_like(h), jnp.int32(0)))
    u = jnp.conj(low).T
    return jnp.triu(u) + jnp.tril(m, -1), info


def _potrf_lower(m):
    """cuSOLVERMp potrf, uplo=LOWER: (m with L in its lower triangle, strictly upper part
    untouched; info), through the upper case of the conjugate transpose."""
    f, info = _potrf_upper(jnp.conj(m).T)
    return jnp.conj(f).T, info


class Emulator:
    """Emulated ``_factor_call`` and ``_solve_call``, and a ``_bootstrap`` wrapper.

    ``_bootstrap`` runs (at trace time) before every FFI call of a kernel; the wrapper records
    the grid, so the emulated handlers know which mesh axes the members span.
    """

    def __init__(self, real_bootstrap):
        self._real_bootstrap = real_bootstrap
        self.grid = None
        self.calls = []  # (handler, mode, solve, n, tile), for checks

    def bootstrap(self, grid):
        """native._bootstrap itself (its rank formula is what the emulation places blocks by),
        with its two tiny FFI calls (device identity, NCCL id) answered by zeros."""
        self.grid = grid
        return self._real_bootstrap(grid)

    def _gather(self, x):
        x = x[None]
        axes = native._grid_axes(self.grid)
        if axes:
            x = jax.lax.all_gather(x, native._name(axes), axis=0, tiled=True)
        return x

    def _by_rank(self, x, rank):
        """Every member's x, in rank order (each placed by its own rank, not by mesh position)."""
        xs, ranks = self._gather(x), self._gather(rank)
        return xs[jnp.argsort(ranks)]

    def _assemble(self, loc, rank, n, tile, pr, pc):
        """Global (n, n) from every member's column-major local block (block-cyclic, tile `tile`)."""
        mloc, nloc = loc.shape
        kr, kc = mloc // tile, nloc // tile
        locs = self._by_rank(loc, rank).reshape(pc, pr, kr, tile, kc, tile)  # rank = p + q * pr
        return locs.transpose(2, 1, 3, 4, 0, 5).reshape(n, n)  # global tile (l * pr + p, l' * pc + q)

    def _own(self, m, rank, tile, pr, pc, mloc, nloc):
        """This member's local block of the global m."""
        p, q = rank % pr, rank // pr
        m = m.reshape(mloc // tile, pr, tile, nloc // tile, pc, tile)
        m = jax.lax.dynamic_index_in_dim(m, p, axis=1, keepdims=False)
        m = jax.lax.dynamic_index_in_dim(m, q, axis=3, keepdims=False)
        return m.reshape(mloc, nloc)

    def _local_logdet(self, f, rank, n, tile, pr, pc):
        p, q = rank % pr, rank // pr
        g = jnp.arange(n)
        own = ((g // tile) % pr == p) & ((g // tile) % pc == q)
        d = jnp.real(jnp.diagonal(f))
        return jnp.sum(jnp.where(own, jnp.log(jnp.where(own, d, 1)), 0)).astype(jnp.finfo(f.dtype).dtype)

    def _assemble_blocks(self, loc, rank, n, pr, pc):
        """Global (n, n) from every member's column-major local block of a block layout."""
        mloc, nloc = loc.shape
        locs = self._by_rank(loc, rank).reshape(pc, pr, mloc, nloc)  # rank = p + q * pr
        return locs.transpose(1, 2, 0, 3).reshape(n, n)

    def _potrs(self, f, b_m, rank, n, tile, pr, pc, mloc, lower=False):
        """X = M^-1 B with M = U^H U (upper triangle of f; M = L L^H with the lower triangle
        when ``lower``); B, X on process column 0."""
        bl = jnp.swapaxes(b_m, -1, -2)  # (mloc, nrhs), column-major view
        nrhs = bl.shape[1]
        bls = self._by_rank(bl, rank).reshape(pc, pr, mloc // tile, tile, nrhs)[0]  # process column 0
        bg = bls.transpose(1, 0, 2, 3).reshape(n, nrhs)
        u = jnp.conj(jnp.tril(f)).T if lower else jnp.triu(f)
        y = jax.scipy.linalg.solve_triangular(u, bg, lower=False, trans="C")
        y = jax.scipy.linalg.solve_triangular(u, y, lower=False)
        p, q = rank % pr, rank // pr
        xl = jax.lax.dynamic_index_in_dim(y.reshape(mloc // tile, pr, tile, nrhs), p, axis=1,
                                          keepdims=False).reshape(mloc, nrhs)
        return jnp.where(q == 0, jnp.swapaxes(xl, -1, -2), b_m)  # other columns: b as it was

    def factor_call(self, a_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve):
        assert members.shape == (pr * pc,) and nid.shape == (32,)
        self.calls.append(("potrf", mode, solve, n, tile))
        rank = rank[0]
        loc = jnp.swapaxes(a_m, -1, -2)  # column-major view: (mloc, nloc)
        mloc, nloc = loc.shape
        assert mloc * pr == n and nloc * pc == n and mloc % tile == 0 and nloc % tile == 0
        inplace = mode == native._MODE_INPLACE
        if inplace:  # the layout step (symmetrize, reorder), then potrf LOWER of S^T M S
            assert pr == pc or pr == 1 or pc == 1
            p = max(pr, pc)
            m = permuted(symmetrized(self._assemble_blocks(loc, rank, n, pr, pc), n, tile, p), n, tile, p)
            f, info = _potrf_lower(m)
        else:
            f, info = _potrf_upper(self._assemble(loc, rank, n, tile, pr, pc))
        f = jnp.where(info == 0, f, jnp.nan)  # the handler fills a failed factor with NaN
        logdet = self._local_logdet(f, rank, n, tile, pr, pc)
        xt = b_m
        if solve:
            assert b_m.shape[-1] == mloc
            xt = jnp.where(info == 0, self._potrs(f, b_m, rank, n, tile, pr, pc, mloc, lower=inplace), b_m)
        f_loc = self._own(f, rank, tile, pr, pc, mloc, nloc)
        return jnp.swapaxes(f_loc, -1, -2), xt, logdet, info

    def solve_call(self, f_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve):
        assert members.shape == (pr * pc,) and nid.shape == (32,)
        self.calls.append(("potrs", mode, solve, n, tile))
        rank = rank[0]
        loc = jnp.swapaxes(f_m, -1, -2)
        mloc, nloc = loc.shape
        assert mloc * pr == n and nloc * pc == n and mloc % tile == 0 and nloc % tile == 0
        f = self._assemble(loc, rank, n, tile, pr, pc)
        logdet = self._local_logdet(f, rank, n, tile, pr, pc)
        xt = b_m
        if solve:
            assert b_m.shape[-1] == mloc
            xt = self._potrs(f, b_m, rank, n, tile, pr, pc, mloc, lower=mode == native._MODE_INPLACE)
        return xt, logdet, jnp.int32(0)  # jaxmg_potrs fills status with 0


def patch(monkeypatch):
    """Replace the FFI handlers (and the native checks that need a GPU) by an Emulator."""
    emu = Emulator(native._bootstrap)
    real_ffi_call = jax.ffi.ffi_call

    def ffi_call(target, result_shape, *args, **kwargs):
        if target in ("jaxmg_identity", "jaxmg_nccl_id"):
            return lambda *operands, **attrs: jnp.zeros(result_shape.shape, result_shape.dtype)
        return real_ffi_call(target, result_shape, *args, **kwargs)

    monkeypatch.setattr(jax.ffi, "ffi_call", ffi_call)
    monkeypatch.setattr(native, "_check_one_gpu_per_process", lambda: None)
    monkeypatch.setattr(native, "_register", lambda: None)
    monkeypatch.setattr(native, "_bootstrap", emu.bootstrap)
    monkeypatch.setattr(native, "_factor_call", emu.factor_call)
    monkeypatch.setattr(native, "_solve_call", emu.solve_call)
    return emu
