"""The native QR family kernels, checked on CPU against an emulated cuSOLVERMp.

``qr_factor`` / ``qr_q`` / ``qr_r`` / ``qr_solve`` / ``qr_normal_solve`` / ``qr_minimum_norm`` of
``jaxmg.kernels.native`` call two FFI handlers (csrc/qr.cc): ``jaxmg_geqrf`` (Householder QR in
place of the padded natural block-cyclic matrix on a row-major-mapped grid; tau of this process
column) and ``jaxmg_orgqr`` (the explicit Q); ``Q^H b`` and ``Q y`` are applied from the reflectors.
tests/gpu/_emulation.py emulates the handlers on the assembled global matrix (LAPACK's geqrf and
Householder product). The kernels' own work is what is tested: the layout and its padding (a
tall M x N whose M is not a multiple of the grid times the tile), tau's gather and scatter, the
status read from R's diagonal, and the distributed back substitution with R.

Runs on CPU with 4 of the simulated devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from _emulation import DTYPES, GRIDS, mesh as _mesh, require_cpu_devices
from helpers import SCALED_NORMS, assert_scale_free_derivatives
from jaxmg import _layout
from jaxmg.kernels import native

#: Long (QR and least squares on the emulated native grid): CI runs these with tests/run.sh --slow.
pytestmark = pytest.mark.slow

require_cpu_devices(4)

# (M, N, T_A): padded in both extents (M/2 = 24 rows, N = 24 not a multiple of 8 * 2);
# unpadded (tiles of 4 divide everything); tiles (10 on a 2-device axis, 20 on 1x1) that divide
# no local extent, and M = 54 not a multiple of the grid times the tile.
SHAPES = [(48, 24, 8), (40, 16, 4), (54, 20, 20)]


def _tol(dtype):
    single = np.finfo(dtype).dtype == np.float32
    return dict(rtol=2e-4, atol=2e-4) if single else dict(rtol=1e-9, atol=1e-9)


def _random(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _family(grid, mesh, tile, m):
    """qr_factor, then Q, R, least-squares solves (vector, matrix), a normal solve and the
    minimum-norm solve of A^H w = y."""
    kw = dict(grid=grid, tile=tile)

    def body(a, bv, bm, y):
        f, tau, status = native.qr_factor(a, **kw)
        (q,) = native.qr_q(f, tau, m=m, **kw)
        (r,) = native.qr_r(f, tau, **kw)
        (xv,) = native.qr_solve(f, tau, bv, **kw)
        (xm,) = native.qr_solve(f, tau, bm, **kw)
        (z,) = native.qr_normal_solve(f, tau, y, **kw)
        (w,) = native.qr_minimum_norm(f, tau, y, m=m, **kw)
        return status, q, r, xv, xm, z, w

    return jax.jit(
        jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(grid.spec, P(), P(), P()),
            out_specs=(P(), grid.spec, grid.spec, P(), P(), P(), P()),
            check_vma=False,
        )
    )


# Every dtype, grid, device order and shape appears; not every combination (each compiles a
# 4-device program on the shared CPU).
CASES = [
    (g, shp, rev, dt)
    for i, (g, dt) in enumerate((g, dt) for g in GRIDS for dt in DTYPES)
    for shp, rev in [(SHAPES[i % 3], bool(i % 2))]
]


@pytest.mark.parametrize("shape,m_n_tile,reverse,dtype", CASES)
def test_qr_kernels(shape, m_n_tile, reverse, dtype, emulator):
    """Q^H b from the reflectors in compact WY form."""
    m, n, tile = m_n_tile
    _check_kernels(shape, m, n, tile, reverse, dtype, emulator)


@pytest.mark.parametrize(
    "shape,m_n_tile,reverse", [((2, 2), (48, 24, 8), False), ((1, 2), (54, 20, 20), True), ((2, 1), (40, 16, 4), True)]
)
def test_qr_solve_with_panels_narrower_than_a_tile(shape, m_n_tile, reverse, monkeypatch, emulator):
    """Compact-WY panels of 2 or 5 columns inside tiles of 4, 8 or 20 (as 256 inside 1024 on GPUs)."""
    monkeypatch.setattr(native.qr, "PANEL_WIDTH", 3)
    m, n, tile = m_n_tile
    _check_kernels(shape, m, n, tile, reverse, np.complex128, emulator)


def _check_kernels(shape, m, n, tile, reverse, dtype, emulator):
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = _random((m, n), dtype, 0)
    bm = _random((m, 3), dtype, 1)
    bv = bm[:, 0] * 2
    y = _random((n, 2), dtype, 2)
    status, q, r, xv, xm, z, w = (np.asarray(o) for o in _family(grid, mesh, tile, m)(a, bv, bm, y))
    assert int(status) == 0
    tol = _tol(dtype)
    assert q.shape == (m, n) and r.shape == (n, n)
    np.testing.assert_allclose(q @ r, a, **tol)
    np.testing.assert_allclose(np.conj(q).T @ q, np.eye(n), **tol)
    np.testing.assert_array_equal(np.tril(r, -1), 0)
    np.testing.assert_allclose(np.abs(r), np.abs(np.linalg.qr(a)[1]), **tol)
    np.testing.assert_allclose(xv, np.linalg.lstsq(a, bv, rcond=None)[0], **tol)
    np.testing.assert_allclose(xm, np.linalg.lstsq(a, bm, rcond=None)[0], **tol)
    np.testing.assert_allclose(z, np.linalg.solve(np.conj(a).T @ a, y), **tol)
    np.testing.assert_allclose(w, np.linalg.lstsq(np.conj(a).T, y, rcond=None)[0], **tol)  # Q R^-H y
    # one factorization; Q by orgqr; Q^H b from the reflectors (Q never formed for the solves)
    assert [c[0] for c in emulator.calls] == ["geqrf", "orgqr"]


@pytest.mark.parametrize("shape,reverse", [((2, 2), False), ((1, 2), True), ((2, 1), False), ((1, 1), False)])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
@pytest.mark.usefixtures("emulator")
def test_qr_rank_deficient(shape, reverse, dtype):
    """A zero column j gives R[j, j] = 0 exactly: the factorisation exists (status 0, agreed),
    Q R = a with orthonormal Q, and R's diagonal, which the solves' rank test reads, is zero at j."""
    m, n, tile = 54, 20, 20
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = _random((m, n), dtype, 0)
    a[:, 13] = 0
    b = _random((m, 2), dtype, 1)
    status, q, r, *_ = _family(grid, mesh, tile, m)(a, b[:, 0], b, b[:n])
    assert int(status) == 0
    q, r = np.asarray(q), np.asarray(r)
    np.testing.assert_allclose(q @ r, a, **_tol(dtype))
    np.testing.assert_allclose(np.conj(q).T @ q, np.eye(n), **_tol(dtype))
    assert np.abs(np.diagonal(r))[13] == 0 and np.all(np.abs(np.delete(np.diagonal(r), 13)) > 0)


@pytest.mark.usefixtures("emulator")
def test_qr_vmap():
    """A batch axis under vmap reaches the handlers (expand_dims) and the back substitution."""
    m, n, tile = 48, 24, 8
    mesh = _mesh((2, 2), True)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = np.stack([_random((m, n), np.float64, s) for s in range(3)])
    b = _random((3, m), np.float64, 5)

    def one(a, b):
        f, tau, status = native.qr_factor(a, grid=grid, tile=tile)
        (x,) = native.qr_solve(f, tau, b, grid=grid, tile=tile)
        return x, status

    f = jax.jit(
        jax.shard_map(
            jax.vmap(one), mesh=mesh, in_specs=(P(None, "x", "y"), P()), out_specs=(P(), P()), check_vma=False
        )
    )
    x, status = f(a, b)
    assert np.all(np.asarray(status) == 0)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(x[k]), np.linalg.lstsq(a[k], b[k], rcond=None)[0], rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------------
# Public API through the native family (backend="native" with the FFI emulated)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,spec,tile,reverse,dtype,explicit",
    [
        ((2, 2), P("x", "y"), 20, True, np.complex128, True),
        ((2, 1), P("x", None), 8, False, np.float32, False),
    ],
)
def test_public_api_native_qr(shape, spec, tile, reverse, dtype, explicit, native_backend):
    """qr, QR (q, r on demand, solve) and least_squares, eagerly and in jit."""
    import jaxmg

    m, n = 54, 20
    mesh = _mesh(shape, reverse, explicit)
    a = _random((m, n), dtype, 0)
    b = _random((m,), dtype, 1)
    ag = jax.device_put(a, NamedSharding(mesh, spec))

    def run(ag, b):
        q, r = jaxmg.qr(ag, T_A=tile, mesh=mesh, backend="native")
        x, st = jaxmg.least_squares(ag, b, T_A=tile, mesh=mesh, backend="native", return_status=True)
        fac = jaxmg.QR(ag, T_A=tile, mesh=mesh, backend="native")
        return q, r, x, st, fac.solve(b), fac.q, fac.r, fac.status

    tol = _tol(dtype)
    ref = np.linalg.lstsq(a, b, rcond=None)[0]
    for outs in (run(ag, b), jax.jit(run)(ag, b)):
        q, r, x, st, xf, qf, rf, stf = (np.asarray(o) for o in outs)
        assert int(st) == 0 and int(stf) == 0
        for qq, rr in ((q, r), (qf, rf)):
            np.testing.assert_allclose(qq @ rr, a, **tol)
            np.testing.assert_array_equal(np.tril(rr, -1), 0)
        np.testing.assert_allclose(x, ref, **tol)
        np.testing.assert_allclose(xf, ref, **tol)
    assert {c[0] for c in native_backend.calls} == {"geqrf", "orgqr"}  # Q^H b from the reflectors


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit", "auto"])
def test_public_api_native_wide_qr_factors_in_a_layout(explicit, native_backend):
    """A wide a's q and r (jaxmg.qr, QR(a).q and .r) on the native route: a = q r, both in a's layout."""
    import jaxmg

    m, n, tile = 20, 54, 8
    mesh = _mesh((2, 2), False, explicit)
    a = _random((m, n), np.float64, 0)
    ag = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    module = jaxmg.QR(ag, T_A=tile, backend="native")
    assert module.route == "distributed"
    for q, r in (jaxmg.qr(ag, T_A=tile, backend="native"), (module.q, module.r)):
        np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), a, **_tol(np.float64))
        assert q.sharding.spec == r.sharding.spec == P("x", "y"), (q.sharding.spec, r.sharding.spec)


@pytest.mark.parametrize("shape,reverse,dtype", [((2, 2), True, np.float64), ((1, 2), False, np.complex64)])
def test_public_api_native_rank_deficient_least_squares(shape, reverse, dtype, native_backend):
    """A numerically rank-deficient a (column 13 a combination of columns 0-2, R_13,13 at rounding
    level, not zero) on the distributed route: status 14 and NaN from least_squares (tall and
    wide), QR.solve and QR.rank_status, eagerly and in jit; the factorisation's own status is 0."""
    import jaxmg

    m, n, tile = 54, 20, 8
    mesh = _mesh(shape, reverse)
    a = _random((m, n), dtype, 0)
    a[:, 13] = a[:, :3] @ _random((3,), dtype, 2)
    b = _random((m,), dtype, 1)
    ag = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    wide = jax.device_put(a.T.copy(), NamedSharding(mesh, P("x", "y")))
    native = dict(T_A=tile, mesh=mesh, backend="native")

    def run(ag, wide, b):
        x, st = jaxmg.least_squares(ag, b, return_status=True, **native)
        xw, stw = jaxmg.least_squares(wide, b[:n], return_status=True, **native)
        fac = jaxmg.QR(ag, **native)
        return x, st, xw, stw, fac.solve(b), fac.status, fac.rank_status(), fac.rank_status(rcond=0.0)

    for outs in (run(ag, wide, b), jax.jit(run)(ag, wide, b)):
        x, st, xw, stw, xf, factored, ranked, exact = (np.asarray(o) for o in outs)
        assert (int(st), int(stw), int(factored), int(ranked), int(exact)) == (14, 14, 0, 14, 0)
        for out in (x, xw, xf):
            assert np.all(np.isnan(out))
    assert "geqrf" in {c[0] for c in native_backend.calls}


def _wide(m, n, cond, dtype, seed):
    """A full-row-rank wide m x n matrix with singular values geometric from 1 to 1 / cond."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(_random((m, m), np.complex128 if np.iscomplexobj(dtype(0)) else np.float64, seed))[0]
    v = np.linalg.qr(_random((n, m), np.complex128 if np.iscomplexobj(dtype(0)) else np.float64, seed + 1))[0]
    return ((u * np.geomspace(1.0, 1.0 / cond, m)) @ np.conj(v).T).astype(dtype), rng


@pytest.mark.parametrize("m,n,dtype", [(16, 40, np.float64), (24, 36, np.complex128)])
def test_public_api_native_wide_minimum_norm(m, n, dtype, native_backend):
    """A wide a of condition 1e12 on the distributed route: x = Q R^-H b (Q applied from the
    reflectors, panels from the last) with status 0 and LAPACK's residual ratios, from
    least_squares and QR.solve in jit; the derivative in b of a well-conditioned one is
    pinv(a)^T 1 (JAX's gradient of a real function of a complex b)."""
    import jaxmg

    mesh = _mesh((2, 2), True)
    native = dict(T_A=8, mesh=mesh, backend="native")
    a, _ = _wide(m, n, 1e12, dtype, 0)
    mild, _ = _wide(m, n, 4.0, dtype, 2)
    b = _random((m,), dtype, 4)

    def run(a, mild, b):
        x, st = jaxmg.least_squares(a, b, return_status=True, **native)
        grad = jax.grad(lambda b: jnp.sum(jnp.real(jaxmg.least_squares(mild, b, **native))))(b)
        return x, st, jaxmg.QR(a, **native).solve(b), grad

    place = lambda x: jax.device_put(x, NamedSharding(mesh, P("x", "y")))  # noqa: E731
    x, st, xf, grad = (np.asarray(o) for o in jax.jit(run)(place(a), place(mild), b))
    assert int(st) == 0
    e, na = np.finfo(dtype).eps, np.linalg.norm(a, 2)
    for sol in (x, xf):
        r = a @ sol - b
        assert np.linalg.norm(r) / (n * e * na * np.linalg.norm(sol)) <= 30
        assert np.linalg.norm(a.conj().T @ r) / (na * (na * np.linalg.norm(sol) + np.linalg.norm(b)) * n * e) <= 30
    np.testing.assert_allclose(grad, np.linalg.pinv(mild).T @ np.ones(n), rtol=1e-9, atol=1e-9)  # JAX's convention
    assert "geqrf" in {c[0] for c in native_backend.calls}


def test_public_api_native_least_squares_grad_and_local(native_backend):
    """Derivatives reuse the saved factor (qr_normal_solve); ops.local runs the native kernels."""
    import jaxmg

    m, n, tile = 48, 24, 8
    mesh = _mesh((2, 2), False)
    spec = P("x", "y")
    a = _random((m, n), np.float64, 0)
    b = _random((m,), np.float64, 1)
    ag = jax.device_put(a, NamedSharding(mesh, spec))
    gb = jax.grad(lambda b: jnp.sum(jaxmg.least_squares(ag, b, T_A=tile, mesh=mesh, backend="native")))(b)
    np.testing.assert_allclose(np.asarray(gb), a @ np.linalg.solve(a.T @ a, np.ones(n)), rtol=1e-9, atol=1e-9)
    ga = jax.grad(lambda a: jnp.sum(jaxmg.least_squares(a, b, T_A=tile, mesh=mesh, backend="native")))(ag)
    eps = 1e-6
    d = _random((m, n), np.float64, 3)
    fd = (
        np.sum(np.linalg.lstsq(a + eps * d, b, rcond=None)[0]) - np.sum(np.linalg.lstsq(a - eps * d, b, rcond=None)[0])
    ) / (2 * eps)
    np.testing.assert_allclose(np.sum(np.asarray(ga) * d), fd, rtol=1e-6)
    assert "geqrf" in {c[0] for c in native_backend.calls}

    grid = jaxmg.Grid.from_spec(mesh, spec)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(spec, P("x")), out_specs=(P("x"), P()), check_vma=False)
    def step(a_block, b_rows):
        return jaxmg.ops.local.least_squares(a_block, b_rows, grid=grid, backend="native", T_A=tile)

    x, st = step(ag, jax.device_put(b, NamedSharding(mesh, P("x"))))
    assert int(st) == 0
    np.testing.assert_allclose(np.asarray(x), np.linalg.lstsq(a, b, rcond=None)[0], rtol=1e-9, atol=1e-9)
    a[:, 13] = a[:, :3] @ _random((3,), np.float64, 2)  # numerically rank deficient: flagged, NaN
    x, st = step(jax.device_put(a, NamedSharding(mesh, spec)), jax.device_put(b, NamedSharding(mesh, P("x"))))
    assert int(st) == 14 and np.all(np.isnan(np.asarray(x)))


def test_native_module_that_consumed_a_differentiates_in_b(native_backend):
    """QR(a, donate=True) on the native route keeps no a; its solve's derivative in b takes a
    rebuilt from the saved reflectors (Q R), and equals (a^+)^T for the sum of x."""
    import jaxmg

    m, n, tile = 48, 24, 8
    mesh = _mesh((2, 2), False)
    a = _random((m, n), np.float64, 0)
    b = jnp.asarray(_random((m,), np.float64, 1))
    module = jaxmg.QR(jax.device_put(a, NamedSharding(mesh, P("x", "y"))), T_A=tile, backend="native", donate=True)
    assert module.route == "distributed" and module.operator is None
    grad = jax.grad(lambda b: jnp.sum(module.solve(b)))(b)
    np.testing.assert_allclose(np.asarray(grad), np.linalg.pinv(a).T @ np.ones(n), rtol=1e-9, atol=1e-9)
    _, tangent = jax.jvp(module.solve, (b,), (b,))
    np.testing.assert_allclose(np.asarray(tangent), np.linalg.lstsq(a, np.asarray(b), rcond=None)[0], rtol=1e-9)


def test_native_least_squares_products_are_full_precision(native_backend):
    """Q^H b from the reflectors and the back substitution multiply at full precision (no TF32
    for float32 on GPUs: tests/test_precision.py)."""
    import re

    import jaxmg

    mesh = _mesh((2, 2), False)
    a = jax.device_put(_random((48, 24), np.float32, 0), NamedSharding(mesh, P("x", "y")))
    b = jnp.ones(48, jnp.float32)
    text = jax.jit(lambda a: jaxmg.least_squares(a, b, T_A=8, mesh=mesh, backend="native")).lower(a).as_text()
    # the kernels called directly in a shard_map, as jaxmg.ops.local calls them
    grid = _layout.Grid(mesh, ("x",), ("y",))
    y = jnp.ones((24, 2), jnp.float32)
    text += _family(grid, mesh, 8, 48).lower(a, b, jnp.ones((48, 3), jnp.float32), y).as_text()
    dots = re.findall(r"stablehlo\.dot_general[^\n]*", text)
    assert dots and all("HIGHEST" in d for d in dots), [d for d in dots if "HIGHEST" not in d][:2]


@SCALED_NORMS
@pytest.mark.parametrize("op", ["least_squares", "QR.solve", "wide"])
def test_public_api_native_least_squares_derivatives_at_any_norm(op, dtype, scale, native_backend):
    """On the distributed route too, least squares' derivatives at matrices of norm 1e+-20 in
    float32 and 1e+-150 in float64 are those at norm 1 undone by the scale (b's gradient was 0
    or NaN in float32: the normal solve's result left its range)."""
    import jaxmg

    mesh = _mesh((2, 2), explicit=True)
    kw = dict(T_A=4, mesh=mesh, backend="native")
    calls = {
        "least_squares": lambda a, b: jaxmg.least_squares(a, b, **kw),
        "QR.solve": lambda a, b: jaxmg.QR(a, **kw).solve(b),
        "wide": lambda a, b: jaxmg.least_squares(a.T, b[: a.shape[1]], **kw),
    }
    a = (_random((16, 8), np.float64, 0) + 3 * np.eye(16, 8)).astype(dtype)
    with jax.set_mesh(mesh):
        assert_scale_free_derivatives(calls[op], a, _random((16,), dtype, 1), scale)
