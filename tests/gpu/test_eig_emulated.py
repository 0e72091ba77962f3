"""The native eigensolver kernels (syevd, sygvd), checked on CPU against an emulated cuSOLVERMp.

``syevd`` / ``sygvd`` of ``jaxmg.kernels.native`` redistribute a's block layout to the natural
block-cyclic layout, transpose each local block for cuSOLVERMp (row-major rank mapping), pad
syevd with ``sigma I`` above A's spectrum when the tile does not divide, and bring the
eigenvectors back; tests/gpu/_emulation.py emulates the two handlers on the assembled matrix.
What is tested is the kernels' own work (layout, padding, status, NaN) with LAPACK's accuracy
measures: the eigenvalues against numpy's, the residual ``||A V - V diag(w)||_1 / (||A||_1 N eps)``
and the orthogonality ``||V^H V - I||_1 / (N eps)`` (``V^H B V`` for sygvd) below LAPACK's test
threshold 30 (xSYT21 / xDRVST).

Runs on CPU with 4 of the simulated devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from _emulation import (
    PUBLIC_LAYOUTS,
    hermitian_with_junk,
    kernel_layouts,
    mesh as _mesh,
    require_cpu_devices,
)
from jaxmg import _layout
from jaxmg.kernels import native

require_cpu_devices(4)

# n = 48 with T_A = 8 divides (no padding); T_A = 20 does not: syevd pads to 80 (1x1: 60),
# sygvd takes the family tile (16 or 12).
TILES = [(48, 8), (48, 20)]
THRESHOLD = 30.0  # LAPACK's test threshold for the scaled residual and orthogonality


def _indefinite(n, dtype, seed=0):
    """(a with junk above the diagonal, the Hermitian indefinite matrix it stands for), with a
    cluster of close eigenvalues and some of both signs."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(
        rng.standard_normal((n, n))
        + (1j * rng.standard_normal((n, n)) if np.issubdtype(dtype, np.complexfloating) else 0)
    )
    w = np.concatenate([np.linspace(-3, 5, n - 4), [1.0, 1.0 + 1e-6, 1.0 + 2e-6, 7.0]])
    a = (q * w) @ np.conj(q).T
    a = (a + np.conj(a).T) / 2
    junk = np.triu(np.full((n, n), 9.0), 1)
    return (np.tril(a) + junk).astype(dtype), a.astype(dtype)


def _eps(dtype):
    return np.finfo(dtype).eps


def check_eigh(a, w, v, dtype, b=None):
    """Eigenvalues against LAPACK; the scaled residual and orthogonality below THRESHOLD."""
    a = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    n = a.shape[0]
    eps = _eps(dtype)
    w = np.asarray(w, np.float64)
    v = np.asarray(v).astype(a.dtype)
    if b is None:
        ref = np.linalg.eigvalsh(a)
        res = np.linalg.norm(a @ v - v * w, 1) / (max(np.linalg.norm(a, 1), np.finfo(float).tiny) * n * eps)
        orth = np.linalg.norm(np.conj(v).T @ v - np.eye(n), 1) / (n * eps)
    else:
        import scipy.linalg

        b = b.astype(a.dtype)
        ref = scipy.linalg.eigh(a, b, eigvals_only=True)
        res = np.linalg.norm(a @ v - (b @ v) * w, 1) / (np.linalg.norm(a, 1) * np.linalg.norm(v, 1) * n * eps)
        orth = np.linalg.norm(np.conj(v).T @ b @ v - np.eye(n), 1) / (np.linalg.norm(b, 1) * n * eps)
    assert np.all(np.diff(w) >= 0), "eigenvalues not ascending"
    scale = max(np.abs(ref).max(), 1.0)
    assert np.abs(w - ref).max() <= THRESHOLD * n * eps * scale * (1 if b is None else np.linalg.cond(b))
    assert res < THRESHOLD, res
    assert orth < THRESHOLD, orth


def _kernel(fn, grid, mesh, tile, nargs):
    def body(*args):
        return fn(*args, grid=grid, tile=tile)

    return jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(grid.spec,) * nargs, out_specs=(P(), grid.spec, P()), check_vma=False)
    )


@pytest.mark.parametrize("shape,n,tile,reverse,dtype", kernel_layouts(TILES))
def test_syevd_kernel(shape, n, tile, reverse, dtype, emulator):
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    given, a = _indefinite(n, dtype)
    w, v, status = _kernel(native.syevd, grid, mesh, tile, 1)(given)
    assert int(status) == 0
    assert w.shape == (n,) and v.shape == (n, n)
    check_eigh(a, w, v, dtype)
    npad = native._grid.padded_size(n, tile, grid)
    assert emulator.calls == [("syevd", None, None, npad, tile)]
    assert (npad > n) == (tile == 20)


@pytest.mark.parametrize("shape,n,tile,reverse,dtype", kernel_layouts(TILES))
def test_sygvd_kernel(shape, n, tile, reverse, dtype, emulator):
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    given_a, a = _indefinite(n, dtype, seed=1)
    given_b, b = hermitian_with_junk(n, dtype, seed=2)
    w, v, status = _kernel(native.sygvd, grid, mesh, tile, 2)(given_a, given_b)
    assert int(status) == 0
    check_eigh(a, w, v, dtype, b=b)
    assert emulator.calls == [("sygvd", None, None, n, native.family_tile(n, tile, grid))]


@pytest.mark.usefixtures("emulator")
def test_padding_keeps_the_eigenpairs_of_a():
    """Padded eigenvalues sit above A's spectrum even when A's largest eigenvalue is its
    Gershgorin bound (a diagonal A) or A is zero: the first n eigenpairs are A's."""
    n, tile = 48, 20
    mesh = _mesh((2, 2), True)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    f = _kernel(native.syevd, grid, mesh, tile, 1)
    for a in (np.diag(np.linspace(-4.0, 4.0, n)), np.zeros((n, n)), -np.eye(n) * 3):
        w, v, status = f(a)
        assert int(status) == 0
        check_eigh(a, w, v, np.float64)


def _failed_status(fn, shape, reverse, tile, *operands):
    """The status of the eigensolver kernel ``fn`` on ``operands`` that fails, on the emulated
    grid (the emulator fixture in use): every output (w, v) is NaN."""
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    w, v, status = _kernel(fn, grid, mesh, tile, len(operands))(*operands)
    assert np.all(np.isnan(np.asarray(w))) and np.all(np.isnan(np.asarray(v)))
    return int(status)


@pytest.mark.parametrize("shape,reverse", [((2, 2), False), ((1, 2), True), ((2, 1), False), ((1, 1), False)])
@pytest.mark.usefixtures("emulator")
def test_sygvd_b_not_positive_definite(shape, reverse):
    _, a = _indefinite(48, np.float64)
    _, b = hermitian_with_junk(48, np.float64, seed=3)
    b[30, 30] = -100.0  # the leading minor of order 31 is indefinite
    assert _failed_status(native.sygvd, shape, reverse, 8, a, b) == 31


@pytest.mark.usefixtures("emulator")
def test_syevd_not_finite():
    _, a = _indefinite(48, np.float64)
    a[40, 3] = np.nan
    assert _failed_status(native.syevd, (2, 2), False, 20, a) != 0


@pytest.mark.usefixtures("emulator")
def test_syevd_vmap():
    n, tile = 48, 20
    mesh = _mesh((2, 2), True)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = np.stack([_indefinite(n, np.float64, seed=s)[1] for s in range(3)])
    f = jax.jit(
        jax.shard_map(
            jax.vmap(lambda x: native.syevd(x, grid=grid, tile=tile)),
            mesh=mesh,
            in_specs=P(None, "x", "y"),
            out_specs=(P(), P(None, "x", "y"), P()),
            check_vma=False,
        )
    )
    w, v, status = f(a)
    assert np.all(np.asarray(status) == 0)
    for k in range(3):
        check_eigh(a[k], w[k], v[k], np.float64)


# --------------------------------------------------------------------------------------------
# Public API through the native family (backend="native" with the FFI emulated)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,spec,tile,reverse,dtype,explicit", PUBLIC_LAYOUTS)
def test_public_api_native_eigh(shape, spec, tile, reverse, dtype, explicit, native_backend):
    import jaxmg

    n = 48
    mesh = _mesh(shape, reverse, explicit)
    _, a = _indefinite(n, dtype)
    _, b = hermitian_with_junk(n, dtype, seed=5)
    sharding = NamedSharding(mesh, spec)
    ag, bg = jax.device_put(a, sharding), jax.device_put(b, sharding)

    def run(ag, bg):
        w, v = jaxmg.syevd(ag, T_A=tile, mesh=mesh, backend="native")
        e = jaxmg.Eigh(ag, bg, T_A=tile, mesh=mesh, backend="native")
        return w, v, e.w, e.v

    for w, v, wg, vg in (run(ag, bg), jax.jit(run)(ag, bg)):
        check_eigh(a, w, v, dtype)
        check_eigh(a, wg, vg, dtype, b=b)
    assert {c[0] for c in native_backend.calls} == {"syevd", "sygvd"}


def test_public_api_native_eigh_inline_inputs(native_backend):
    import jaxmg

    n = 48
    mesh = _mesh((2, 1), False)
    _, a = _indefinite(n, np.float64)
    w = jaxmg.syevd(jnp.asarray(a), T_A=20, mesh=mesh, backend="native", return_eigenvectors=False)
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(a), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "shape,spec,reverse,dtype,explicit",
    [
        ((2, 2), P("x", "y"), False, np.float64, False),
        ((1, 2), P(None, "y"), True, np.complex128, True),
    ],
)
def test_public_api_native_polar_and_svd(shape, spec, reverse, dtype, explicit, native_backend):
    """backend="native": polar is the QDWH composition, gesvd is polar + the (emulated) native
    syevd of H; eagerly and in jit."""
    import jaxmg

    m, n = 96, 48
    mesh = _mesh(shape, reverse, explicit)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, n)) + (1j * rng.standard_normal((m, n)) if np.iscomplexobj(dtype(0)) else 0)
    a = a.astype(dtype)
    ag = jax.device_put(a, NamedSharding(mesh, spec))

    def run(ag):
        u_p, h = jaxmg.polar(ag, T_A=20, mesh=mesh, backend="native")
        u, s, vh = jaxmg.gesvd(ag, T_A=20, mesh=mesh, backend="native")
        return u_p, h, u, s, vh

    for u_p, h, u, s, vh in (run(ag), jax.jit(run)(ag)):
        u_p, h, u, s, vh = (np.asarray(x) for x in (u_p, h, u, s, vh))
        assert np.linalg.norm(np.conj(u_p).T @ u_p - np.eye(n)) < 1e-12
        assert np.linalg.norm(a - u_p @ h) / np.linalg.norm(a) < 1e-12
        np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12, atol=1e-12)
        assert np.linalg.norm(a - (u * s) @ vh) / np.linalg.norm(a) < 1e-12
    assert {c[0] for c in native_backend.calls} == {"syevd"}


# --------------------------------------------------------------------------------------------
# Guards for the engine's version (jaxmg.kernels.native._engine): the emulated library reports
# cuSOLVERMp 0.8.0 (STEDC defect) or 0.9.1 (fixed)
# --------------------------------------------------------------------------------------------

OLD, FIXED = (0, 8, 0), (0, 9, 1)


@pytest.fixture
def fresh_traces():
    """The guards act when a call is traced, and a process's engine version never changes:
    traces made under another emulated version are dropped before and after the test."""
    jax.clear_caches()
    yield
    jax.clear_caches()


@pytest.mark.parametrize("call", ["syevd", "Eigh", "gesvd"])
def test_old_engine_refuses_2d_grids_and_odd_tiles(call, native_backend, fresh_traces):
    """Below 0.9.1 the eigensolvers (and svd, which reaches syevd) refuse a 2-D grid and a T_A
    that is not a power of two, naming them, the fix and the version that fixes the defect;
    eagerly and in jit, before any handler runs."""
    import jaxmg

    native_backend.version = OLD
    _, a = _indefinite(48, np.float64)
    fns = {
        "syevd": lambda x, **k: jaxmg.syevd(x, **k),
        "Eigh": lambda x, **k: jaxmg.Eigh(x, **k).w,
        "gesvd": lambda x, **k: jaxmg.gesvd(x, **k),
    }
    fn = fns[call]
    for shape, spec, tile, words in (
        ((2, 2), P("x", "y"), 8, ["2 x 2", "one mesh axis", "0.9.1"]),
        ((2, 1), P("x", None), 20, ["T_A=20", "16 or 32", "0.9.1"]),
    ):
        mesh = _mesh(shape)
        ag = jax.device_put(a, NamedSharding(mesh, spec))
        for run in (fn, jax.jit(fn, static_argnames=("T_A", "mesh", "backend"))):
            with pytest.raises(ValueError) as info:
                run(ag, T_A=tile, mesh=mesh, backend="native")
            assert all(w in str(info.value) for w in words), str(info.value)
    assert native_backend.calls == []


def test_old_engine_runs_power_of_two_tiles_on_1d_grids(native_backend, fresh_traces):
    """Below 0.9.1 the automatic T_A runs, and sygvd's tile is a power of two: at n = 48 on a
    2 x 1 grid (local extents 24 and 48) the automatic T_A is 16, whose family tile would be 12."""
    import jaxmg

    n = 48
    native_backend.version = OLD
    mesh = _mesh((2, 1))
    _, a = _indefinite(n, np.float64)
    _, b = hermitian_with_junk(n, np.float64, seed=5)
    sharding = NamedSharding(mesh, P("x", None))
    ag, bg = jax.device_put(a, sharding), jax.device_put(b, sharding)
    w, v = jaxmg.syevd(ag, mesh=mesh, backend="native")
    e = jaxmg.Eigh(ag, bg, mesh=mesh, backend="native")
    check_eigh(a, w, v, np.float64)
    check_eigh(a, e.w, e.v, np.float64, b=b)
    grid = _layout.Grid(mesh, ("x",), ())
    assert native.family_tile(n, 16, grid) == 12
    assert [c[4] for c in native_backend.calls] == [16, 8]


def test_fixed_engine_refuses_nothing(native_backend, fresh_traces):
    """With 0.9.1 a 2-D grid and T_A = 20 run (the sygvd tile is the plain family tile)."""
    import jaxmg

    n = 48
    native_backend.version = FIXED
    mesh = _mesh((2, 2))
    _, a = _indefinite(n, np.float64)
    ag = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    w, v = jaxmg.syevd(ag, T_A=20, mesh=mesh, backend="native")
    check_eigh(a, w, v, np.float64)
    assert [c[0] for c in native_backend.calls] == ["syevd"]
