"""The CPU emulation of the native FFI handlers that tests/gpu/test_*_emulated.py run the native
kernels against: the tile permutation of the in-place layout, the in-place symmetrization of
csrc/cholesky.cc, potrf/potrs as cuSOLVERMp does them on the block-cyclic buffers (``Emulator``,
installed by ``patch`` in place of ``jaxmg.kernels.native._grid.ffi_call``, the one function
through which every native kernel calls a handler), and the test matrices."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.lax import linalg as _linalg  # geqrf and householder_product: LAPACK's, for the QR emulation
from jax.sharding import PartitionSpec as P

from jaxmg.kernels.ffi import _library
from jaxmg.kernels.native import _engine, _grid

cholesky_kernels = importlib.import_module("jaxmg.kernels.native.cholesky")


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


def rhs(n, k, dtype, seed=1):
    """A random (n, k) right-hand side of ``dtype``."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((n, k))
    if np.issubdtype(dtype, np.complexfloating):
        b = b + 1j * rng.standard_normal((n, k))
    return b.astype(dtype)


#: The dtypes and process grids every family's emulated tests cover.
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
GRIDS = [(1, 1), (2, 1), (1, 2), (2, 2)]


def kernel_layouts(tiles, variants=DTYPES):
    """The cases of a family's kernel test: every process grid of GRIDS, ``(n, tile)`` of
    ``tiles`` and device order (plain, reversed), each with half of ``variants`` in turn, as
    ``pytest.param(shape, n, tile, reverse, variant)``; the reversed device orders are marked
    slow (the quick run covers every grid, tile and dtype in the plain order).

    With ``variants`` the four DTYPES, each layout runs one real and one complex dtype, and each
    dtype meets every grid, tile and device order: the redistribution depends on the dtype only
    through its item size and whether it is complex, so the full product (twice the compiles)
    covers no more. Other ``variants`` (a list of 4, or of 2 to give each layout one) are
    spread the same way.
    """
    cases = []
    for shape in GRIDS:
        for i, (n, tile) in enumerate(tiles):
            for reverse in (False, True):
                turn = (i + reverse) % 2
                marks = [pytest.mark.slow] if reverse else []
                if len(variants) == 2:
                    cases.append(pytest.param(shape, n, tile, reverse, variants[turn], marks=marks))
                else:
                    cases += [
                        pytest.param(shape, n, tile, reverse, variants[2 * k + (turn + k) % 2], marks=marks)
                        for k in range(2)
                    ]
    return cases


#: The layouts of the public-API tests through an emulated native family: (mesh shape, a's spec,
#: T_A, reversed device order, dtype, Explicit axes).
PUBLIC_LAYOUTS = [
    ((2, 2), P("x", "y"), 8, False, np.float64, False),
    ((2, 2), P("x", "y"), 20, True, np.complex128, True),
    ((2, 1), P("x", None), 20, False, np.complex64, False),
    ((1, 2), P(None, "y"), 8, True, np.float32, True),
]


def require_cpu_devices(count: int = 4) -> None:
    """Skip the calling test module (with its reason) unless ``count`` simulated CPU devices
    exist: the emulation stands in for cuSOLVERMp on CPU only."""
    import pytest

    if jax.default_backend() != "cpu" or len(jax.devices()) < count:
        pytest.skip(f"needs {count} CPU devices (tests/conftest.py sets up 8)", allow_module_level=True)


def mesh(shape, reverse=False, explicit=False):
    """A 2-D ("x", "y") mesh of the first CPU devices, in reverse order if asked, Auto axes (or
    Explicit)."""
    devs = jax.devices()[: int(np.prod(shape))]
    if reverse:
        devs = devs[::-1]
    kind = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
    return jax.make_mesh(shape, ("x", "y"), axis_types=(kind,) * 2, devices=devs)


def solve_gradients(solve, a, b, mesh, spec):
    """The gradients (a_bar, b_bar) of sum(solve(a, b)) in jit, with a laid out by ``spec`` on
    ``mesh``, and their references for a general solve: (-b_bar_ref x^T, b_bar_ref = A^-T 1)."""
    loss = jax.jit(jax.grad(lambda a, b: jnp.sum(solve(a, b)), argnums=(0, 1)))
    ga, gb = loss(jax.device_put(a, jax.sharding.NamedSharding(mesh, spec)), b)
    gb_ref = np.linalg.solve(a.T, np.ones_like(b))
    return np.asarray(ga), np.asarray(gb), -gb_ref @ np.linalg.solve(a, b).T, gb_ref


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
    """Emulated FFI handlers by target name (``ffi_call``), and a ``_grid.bootstrap`` wrapper.

    ``bootstrap`` runs (at trace time) before every FFI call of a kernel; the wrapper records
    the grid, so the emulated handlers know which mesh axes the members span.
    """

    def __init__(self, real_bootstrap):
        self._real_bootstrap = real_bootstrap
        self.grid = None
        self.calls = []  # (handler, mode, solve, n, tile), for checks
        self.version = _engine.FIXED  # the cuSOLVERMp version the emulated library reports
        self.handlers = {
            "jaxmg_potrf": self.factor_call,
            "jaxmg_potrs": self.solve_call,
            "jaxmg_getrf": self.getrf_call,
            "jaxmg_getrs": self.getrs_call,
            "jaxmg_geqrf": self.geqrf_call,
            "jaxmg_orgqr": self.orgqr_call,
            "jaxmg_syevd": self.syevd_call,
            "jaxmg_sygvd": self.sygvd_call,
        }

    def bootstrap(self, grid):
        """_grid.bootstrap itself (its rank formula is what the emulation places blocks by),
        with its two tiny FFI calls (device identity, NCCL id) answered by zeros."""
        self.grid = grid
        return self._real_bootstrap(grid)

    def ffi_call(self, target, results, operands, boot=(), aliases=None, **attrs):
        """``_grid.ffi_call`` with the handler ``target`` emulated: the core's two handlers
        answer zeros; a family handler gets its operands, then the grid arguments, then its
        attributes (checked against the operands' shapes)."""
        if target in ("jaxmg_identity", "jaxmg_nccl_id"):
            return jnp.zeros(results.shape, results.dtype)
        return self.handlers[target](*operands, *boot, **attrs)

    def _gather(self, x):
        x = x[None]
        axes = _grid.grid_axes(self.grid)
        if axes:
            x = jax.lax.all_gather(x, _grid.name(axes), axis=0, tiled=True)
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

    def _rhs_whole(self, b_m, rank, n, tile, pr, pc, mloc):
        """The whole (n, nrhs) right-hand side from every member's (nrhs, mloc) rows: those of
        process column 0, block-cyclic over the pr process rows."""
        bl = jnp.swapaxes(b_m, -1, -2)  # (mloc, nrhs), column-major view
        nrhs = bl.shape[1]
        bls = self._by_rank(bl, rank).reshape(pc, pr, mloc // tile, tile, nrhs)[0]  # process column 0
        return bls.transpose(1, 0, 2, 3).reshape(n, nrhs)

    def _rhs_local(self, x, b_m, rank, tile, pr, mloc):
        """This member's (nrhs, mloc) rows of the whole solution x on process column 0; the other
        members' right-hand-side buffers stay as they were."""
        p, q = rank % pr, rank // pr
        nrhs = x.shape[-1]
        xl = jax.lax.dynamic_index_in_dim(x.reshape(mloc // tile, pr, tile, nrhs), p, axis=1, keepdims=False).reshape(
            mloc, nrhs
        )
        return jnp.where(q == 0, jnp.swapaxes(xl, -1, -2), b_m)

    def _potrs(self, f, b_m, rank, n, tile, pr, pc, mloc, lower=False):
        """X = M^-1 B with M = U^H U (upper triangle of f; M = L L^H with the lower triangle
        when ``lower``); B, X on process column 0."""
        bg = self._rhs_whole(b_m, rank, n, tile, pr, pc, mloc)
        u = jnp.conj(jnp.tril(f)).T if lower else jnp.triu(f)
        y = jax.scipy.linalg.solve_triangular(u, bg, lower=False, trans="C")
        y = jax.scipy.linalg.solve_triangular(u, y, lower=False)
        return self._rhs_local(y, b_m, rank, tile, pr, mloc)

    @staticmethod
    def _check_attrs(a_m, b_m, mode, solve, mloc, nloc, nrhs, uplo):
        """The attributes the kernel layer derives from the operands (csrc/README.md)."""
        assert (mloc, nloc) == (a_m.shape[-1], a_m.shape[-2])
        assert nrhs == (b_m.shape[-2] if solve else 1)
        inplace = mode == cholesky_kernels._MODE_INPLACE
        assert uplo == (cholesky_kernels._UPLO_LOWER if inplace else cholesky_kernels._UPLO_UPPER)

    def factor_call(self, a_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve, **attrs):
        assert members.shape == (pr * pc,) and nid.shape == (32,)
        self._check_attrs(a_m, b_m, mode, solve, **attrs)
        self.calls.append(("potrf", mode, solve, n, tile))
        rank = rank[0]
        loc = jnp.swapaxes(a_m, -1, -2)  # column-major view: (mloc, nloc)
        mloc, nloc = loc.shape
        assert mloc * pr == n and nloc * pc == n and mloc % tile == 0 and nloc % tile == 0
        inplace = mode == cholesky_kernels._MODE_INPLACE
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

    def solve_call(self, f_m, b_m, members, nid, rank, *, n, tile, pr, pc, mode, solve, **attrs):
        assert members.shape == (pr * pc,) and nid.shape == (32,)
        self._check_attrs(f_m, b_m, mode, solve, **attrs)
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
            xt = self._potrs(f, b_m, rank, n, tile, pr, pc, mloc, lower=mode == cholesky_kernels._MODE_INPLACE)
        return xt, logdet, jnp.int32(0)  # jaxmg_potrs fills status with 0

    # ----------------------------------------------------------------------------------------
    # The LU family: jaxmg_getrf / jaxmg_getrs (csrc/lu.cc)
    # ----------------------------------------------------------------------------------------

    @staticmethod
    def _check_lu_attrs(f_m, n, tile, pr, pc, mloc, nloc):
        assert (mloc, nloc) == (f_m.shape[-1], f_m.shape[-2])
        assert mloc * pr == n and nloc * pc == n and mloc % tile == 0 and nloc % tile == 0

    def getrf_call(self, a_m, members, nid, rank, *, n, tile, pr, pc, mloc, nloc):
        """cuSOLVERMp getrf of the block-cyclic M' in place: (factor, this process row's pivots:
        1-based global rows, status = info: the first zero pivot, agreed). A failed factor is NaN."""
        assert members.shape == (pr * pc,) and nid.shape == (32,)
        self._check_lu_attrs(a_m, n, tile, pr, pc, mloc, nloc)
        self.calls.append(("getrf", None, None, n, tile))
        rank = rank[0]
        m = self._assemble(jnp.swapaxes(a_m, -1, -2), rank, n, tile, pr, pc)
        lu, piv, _ = jax.lax.linalg.lu(m)
        zero = jnp.diagonal(lu) == 0
        info = jnp.where(jnp.any(zero), jnp.argmax(zero) + 1, 0).astype(jnp.int32)
        lu = jnp.where(info == 0, lu, jnp.nan)
        f_loc = self._own(lu, rank, tile, pr, pc, mloc, nloc)
        ipiv = jax.lax.dynamic_index_in_dim(
            (piv + 1).reshape(mloc // tile, pr, tile), rank % pr, axis=1, keepdims=False
        ).reshape(mloc)
        return jnp.swapaxes(f_loc, -1, -2), ipiv.astype(jnp.int32), info

    def getrs_call(self, f_m, ipiv, b_m, members, nid, rank, *, n, tile, pr, pc, mloc, nloc, nrhs):
        """cuSOLVERMp getrs (op = N) with the factor P L U of M' and its pivots (each member's
        those of its process row); B, X on process column 0."""
        assert members.shape == (pr * pc,) and nid.shape == (32,) and ipiv.shape[-1] == mloc
        self._check_lu_attrs(f_m, n, tile, pr, pc, mloc, nloc)
        assert nrhs == b_m.shape[-2] and b_m.shape[-1] == mloc
        self.calls.append(("getrs", None, None, n, tile))
        rank = rank[0]
        f = self._assemble(jnp.swapaxes(f_m, -1, -2), rank, n, tile, pr, pc)
        rows = self._by_rank(ipiv, rank).reshape(pc, pr, mloc // tile, tile)[0]  # process column 0's
        piv = rows.transpose(1, 0, 2).reshape(n) - 1
        perm = jax.lax.linalg.lu_pivots_to_permutation(piv, n)
        bg = self._rhs_whole(b_m, rank, n, tile, pr, pc, mloc)[perm]
        y = jax.scipy.linalg.solve_triangular(f, bg, lower=True, unit_diagonal=True)
        x = jax.scipy.linalg.solve_triangular(f, y, lower=False)
        return self._rhs_local(x, b_m, rank, tile, pr, mloc)

    # ----------------------------------------------------------------------------------------
    # The QR family: jaxmg_geqrf / jaxmg_orgqr (csrc/qr.cc), on a grid with the
    # row-major rank mapping (rank = p * pc + q)
    # ----------------------------------------------------------------------------------------

    def _check_qr(self, f_m, members, nid, m, n, tile, pr, pc, mloc, nloc):
        assert members.shape == (pr * pc,) and nid.shape == (32,)
        assert (nloc, mloc) == f_m.shape[-2:] and m >= n
        assert mloc * pr == m and nloc * pc == n and mloc % tile == 0 and nloc % tile == 0

    def _qr_assemble(self, f_m, rank, m, n, tile, pr, pc):
        """Global (m, n) from every member's column-major local block (row-major rank mapping)."""
        loc = jnp.swapaxes(f_m, -1, -2)
        mloc, nloc = loc.shape
        locs = self._by_rank(loc, rank).reshape(pr, pc, mloc // tile, tile, nloc // tile, tile)
        return locs.transpose(2, 0, 3, 4, 1, 5).reshape(m, n)

    @staticmethod
    def _qr_own(g, rank, tile, pr, pc, mloc, nloc):
        """This member's column-major local block (JAX shape (nloc, mloc)) of the global g."""
        p, q = rank // pc, rank % pc
        g = g.reshape(mloc // tile, pr, tile, nloc // tile, pc, tile)
        g = jax.lax.dynamic_index_in_dim(g, p, axis=1, keepdims=False)
        g = jax.lax.dynamic_index_in_dim(g, q, axis=3, keepdims=False)
        return jnp.swapaxes(g.reshape(mloc, nloc), -1, -2)

    def _qr_tau(self, tau_l, rank, n, tile, pr, pc):
        """The whole tau (n,) from the members of process row 0 (each holds its columns')."""
        taus = self._by_rank(tau_l, rank).reshape(pr, pc, n // pc // tile, tile)[0]
        return taus.transpose(1, 0, 2).reshape(n)

    def geqrf_call(self, a_m, members, nid, rank, *, m, n, tile, pr, pc, mloc, nloc):
        """cuSOLVERMp geqrf in place: (LAPACK's packed factor, this process column's tau, info 0)."""
        self._check_qr(a_m, members, nid, m, n, tile, pr, pc, mloc, nloc)
        self.calls.append(("geqrf", None, None, n, tile))
        rank = rank[0]
        f, tau = _linalg.geqrf(self._qr_assemble(a_m, rank, m, n, tile, pr, pc))
        q = rank % pc
        tau_l = jax.lax.dynamic_index_in_dim(tau.reshape(nloc // tile, pc, tile), q, axis=1, keepdims=False)
        return self._qr_own(f, rank, tile, pr, pc, mloc, nloc), tau_l.reshape(nloc), jnp.int32(0)

    def _full_q(self, f_m, tau_l, rank, m, n, tile, pr, pc):
        """The m x m unitary Q = H_1 ... H_n of the factor."""
        f = self._qr_assemble(f_m, rank, m, n, tile, pr, pc)
        tau = self._qr_tau(tau_l, rank, n, tile, pr, pc)
        return _linalg.householder_product(jnp.pad(f, ((0, 0), (0, m - n))), jnp.pad(tau, (0, m - n)))

    def orgqr_call(self, f_m, tau_l, members, nid, rank, *, m, n, tile, pr, pc, mloc, nloc):
        """The explicit m x n Q of the factor, laid out like it."""
        self._check_qr(f_m, members, nid, m, n, tile, pr, pc, mloc, nloc)
        self.calls.append(("orgqr", None, None, n, tile))
        rank = rank[0]
        q = self._full_q(f_m, tau_l, rank, m, n, tile, pr, pc)[:, :n]
        return self._qr_own(q, rank, tile, pr, pc, mloc, nloc)

    # ----------------------------------------------------------------------------------------
    # The eigensolver family: jaxmg_syevd / jaxmg_sygvd (csrc/eig.cc), row-major rank mapping
    # ----------------------------------------------------------------------------------------

    def _assemble_row_major(self, loc, rank, n, tile, pr, pc):
        """Global (n, n) from every member's column-major local block on a row-major-mapped grid
        (rank = p * pc + q)."""
        mloc, nloc = loc.shape
        locs = self._by_rank(loc, rank).reshape(pr, pc, mloc // tile, tile, nloc // tile, tile)
        return locs.transpose(2, 0, 3, 4, 1, 5).reshape(n, n)

    def _own_row_major(self, m, rank, tile, pr, pc, mloc, nloc):
        return self._own(m, (rank // pc) + (rank % pc) * pr, tile, pr, pc, mloc, nloc)

    def _eig_start(self, kind, a_m, members, nid, rank, n, tile, pr, pc, mloc, nloc):
        assert members.shape == (pr * pc,) and nid.shape == (32,)
        self._check_lu_attrs(a_m, n, tile, pr, pc, mloc, nloc)
        self.calls.append((kind, None, None, n, tile))
        rank = rank[0]
        return rank, self._assemble_row_major(jnp.swapaxes(a_m, -1, -2), rank, n, tile, pr, pc)

    def _eig_finish(self, a_m, w, z, info, rank, tile, pr, pc, mloc, nloc):
        w = jnp.where(info == 0, w, jnp.nan)
        z = jnp.where(info == 0, z, jnp.nan)
        return a_m, w, jnp.swapaxes(self._own_row_major(z, rank, tile, pr, pc, mloc, nloc), -1, -2), info

    def syevd_call(self, a_m, members, nid, rank, *, n, tile, pr, pc, mloc, nloc):
        """cuSOLVERMp syevd (compz V, LOWER) of the column-major block-cyclic A: (work, w
        ascending, z in A's layout, status). A non-finite A is status -1 here."""
        rank, m = self._eig_start("syevd", a_m, members, nid, rank, n, tile, pr, pc, mloc, nloc)
        z, w = jax.lax.linalg.eigh(m, lower=True, symmetrize_input=False)  # m is A itself
        info = jnp.where(jnp.all(jnp.isfinite(w)), 0, -1).astype(jnp.int32)
        return self._eig_finish(a_m, w, z, info, rank, tile, pr, pc, mloc, nloc)

    def sygvd_call(self, a_m, b_m, members, nid, rank, *, n, tile, pr, pc, mloc, nloc):
        """cuSOLVERMp sygvd (type 1, vectors, LOWER): (work a, work b, w, z with z^H B z = I,
        status = the first leading minor of B that is not positive definite)."""
        rank, m = self._eig_start("sygvd", a_m, members, nid, rank, n, tile, pr, pc, mloc, nloc)
        bm = self._assemble_row_major(jnp.swapaxes(b_m, -1, -2), rank, n, tile, pr, pc)
        low, info = _potrf_lower(bm)
        chol = jnp.tril(low)
        c = jax.scipy.linalg.solve_triangular(chol, jnp.tril(m) + jnp.conj(jnp.tril(m, -1)).T, lower=True)
        c = jax.scipy.linalg.solve_triangular(chol, jnp.conj(c).T, lower=True)
        y, w = jax.lax.linalg.eigh(c, lower=True, symmetrize_input=True)
        z = jax.scipy.linalg.solve_triangular(chol, y, lower=True, trans="C")
        a_m, w, z, info = self._eig_finish(a_m, w, z, info, rank, tile, pr, pc, mloc, nloc)
        return a_m, b_m, w, z, info


def patch(monkeypatch):
    """Replace the FFI handlers (and the native checks that need a GPU) by an Emulator."""
    emu = Emulator(_grid.bootstrap)
    monkeypatch.setattr(_library, "check_one_gpu_per_process", lambda: None)
    monkeypatch.setattr(_library, "register", lambda: None)
    monkeypatch.setattr(_grid, "bootstrap", emu.bootstrap)
    monkeypatch.setattr(_grid, "ffi_call", emu.ffi_call)
    monkeypatch.setattr(_engine, "engine_version", lambda: emu.version)
    return emu
