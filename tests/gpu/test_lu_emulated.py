"""The native LU family kernels, checked on CPU against an emulated cuSOLVERMp.

``lu_factor`` / ``lu_solve`` of ``jaxmg.kernels.native`` call two FFI handlers (csrc/lu.cc):
``jaxmg_getrf`` (getrf in place on the block-cyclic reading of a's own local blocks: the matrix
``M' = (a^T)[s_r][:, s_c]``; pivots of this process row, 1-based global rows; status = info, the
first zero pivot, agreed; a failed factor is NaN) and ``jaxmg_getrs`` (op = N only, right-hand
side on process column 0). tests/gpu/_emulation.py emulates both on the assembled global matrix.
The kernels' own work is what is tested: the tile permutations of the right-hand side and
solution, the pivots' gather and scatter, and the tile-by-tile transposed solve of ``a x = b``.

Runs on CPU with 4 of the simulated devices.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from _emulation import PUBLIC_LAYOUTS, kernel_layouts, mesh as _mesh, rhs as _rhs, solve_gradients
from jaxmg import _layout
from jaxmg.kernels import native

# n = 48: local extents 48 or 24. T_A = 8 divides them (family tile 8); T_A = 20 does not
# (family tile 16 on 1x1, 12 otherwise).
TILES = [(48, 8), (48, 20)]


def _tol(dtype):
    single = np.finfo(dtype).dtype == np.float32
    return dict(rtol=2e-4, atol=2e-4) if single else dict(rtol=1e-9, atol=1e-9)


def _general(n, dtype, seed=0):
    """A well-conditioned general (non-symmetric) matrix that needs pivoting."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal((n, n))
    a = a + np.diag(np.linspace(0.5, 2.0, n) * np.sqrt(n))
    return a.astype(dtype)


def _family(grid, mesh, tile):
    """lu_factor, then solves with trans 0 (vector and matrix), 1 and 2, in one shard_map."""
    kw = dict(grid=grid, tile=tile)

    def body(a, bv, bm):
        lu, piv, status = native.lu_factor(a, **kw)
        (xv,) = native.lu_solve(lu, piv, bv, trans=0, **kw)
        (xm,) = native.lu_solve(lu, piv, bm, trans=0, **kw)
        (xt,) = native.lu_solve(lu, piv, bm, trans=1, **kw)
        (xc,) = native.lu_solve(lu, piv, bv, trans=2, **kw)
        return lu, piv, status, xv, xm, xt, xc

    return jax.jit(
        jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(grid.spec, P(), P()),
            out_specs=(grid.spec, P(), P(), P(), P(), P(), P()),
            check_vma=False,
        )
    )


@pytest.mark.parametrize("shape,n,tile,reverse,dtype", kernel_layouts(TILES))
def test_lu_kernels(shape, n, tile, reverse, dtype, emulator):
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    t = native.family_tile(n, tile, grid)
    a = _general(n, dtype)
    bm = _rhs(n, 3, dtype)
    bv = bm[:, 0] * 2
    lu, piv, status, xv, xm, xt, xc = _family(grid, mesh, tile)(a, bv, bm)
    assert int(status) == 0
    assert np.asarray(lu).shape == (n, n) and np.asarray(piv).shape == (n,)
    tol = _tol(dtype)
    np.testing.assert_allclose(np.asarray(xv), np.linalg.solve(a, bv), **tol)
    np.testing.assert_allclose(np.asarray(xm), np.linalg.solve(a, bm), **tol)
    np.testing.assert_allclose(np.asarray(xt), np.linalg.solve(a.T, bm), **tol)
    np.testing.assert_allclose(np.asarray(xc), np.linalg.solve(np.conj(a).T, bv), **tol)
    # factor once, with the family tile and no padding; getrs only for the transposed solves
    assert [c[0] for c in emulator.calls] == ["getrf", "getrs", "getrs"]
    assert {c[3:] for c in emulator.calls} == {(n, t)}


@pytest.mark.parametrize("shape,reverse", [((2, 2), False), ((1, 2), True), ((2, 1), False), ((1, 1), False)])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
@pytest.mark.usefixtures("emulator")
def test_lu_singular(shape, reverse, dtype):
    n, tile = 48, 20
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = _general(n, dtype)
    a[:, 29] = 0  # a zero column: some pivot of U is exactly zero
    bm = _rhs(n, 2, dtype)
    lu, piv, status, xv, xm, xt, xc = _family(grid, mesh, tile)(a, bm[:, 0], bm)
    assert int(status) > 0  # counted in cuSOLVERMp's (permuted) order
    for out in (lu, xv, xm, xt, xc):
        assert np.all(np.isnan(np.asarray(out))), out


@pytest.mark.usefixtures("emulator")
def test_lu_vmap():
    """A batch axis under vmap reaches the handlers (expand_dims) and the transposed solve."""
    n, tile = 48, 8
    mesh = _mesh((2, 2), True)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = np.stack([_general(n, np.float64, seed=s) for s in range(3)])
    b = _rhs(n, 3, np.float64).T  # (3, n): one right-hand side per matrix

    def one(a, b):
        lu, piv, status = native.lu_factor(a, grid=grid, tile=tile)
        (x,) = native.lu_solve(lu, piv, b, grid=grid, tile=tile, trans=0)
        (y,) = native.lu_solve(lu, piv, b, grid=grid, tile=tile, trans=1)
        return x, y, status

    f = jax.jit(
        jax.shard_map(
            jax.vmap(one), mesh=mesh, in_specs=(P(None, "x", "y"), P()), out_specs=(P(), P(), P()), check_vma=False
        )
    )
    x, y, status = f(a, b)
    assert np.all(np.asarray(status) == 0)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(x[k]), np.linalg.solve(a[k], b[k]), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.asarray(y[k]), np.linalg.solve(a[k].T, b[k]), rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------------
# Public API through the native family (backend="native" with the FFI emulated)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,spec,tile,reverse,dtype,explicit", PUBLIC_LAYOUTS)
def test_public_api_native_lu(shape, spec, tile, reverse, dtype, explicit, native_backend):
    import jaxmg

    n = 48
    mesh = _mesh(shape, reverse, explicit)
    a = _general(n, dtype)
    bm = _rhs(n, 2, dtype)
    bv = bm[:, 0]
    ag = jax.device_put(a, NamedSharding(mesh, spec))

    def run(ag, bv, bm):
        xv, st = jaxmg.lu_solve(ag, bv, T_A=tile, mesh=mesh, backend="native", return_status=True)
        fac = jaxmg.LU(ag, T_A=tile, mesh=mesh, backend="native")
        return xv, st, fac.solve(bm), fac.solve(bm, trans="T"), fac.solve(bv, trans="C"), fac.status

    tol = _tol(dtype)
    for outs in (run(ag, bv, bm), jax.jit(run)(ag, bv, bm)):
        xv, st, xn, xt, xc, stf = outs
        assert int(st) == 0 and int(stf) == 0
        np.testing.assert_allclose(np.asarray(xv), np.linalg.solve(a, bv), **tol)
        np.testing.assert_allclose(np.asarray(xn), np.linalg.solve(a, bm), **tol)
        np.testing.assert_allclose(np.asarray(xt), np.linalg.solve(a.T, bm), **tol)
        np.testing.assert_allclose(np.asarray(xc), np.linalg.solve(np.conj(a).T, bv), **tol)
    assert {c[0] for c in native_backend.calls} == {"getrf", "getrs"}


def test_public_api_native_lu_inline_inputs(native_backend):
    """Inputs built inline (jnp arrays on one device), eagerly: placed on the mesh by jaxmg."""
    import jaxmg

    n = 48
    mesh = _mesh((2, 1), False)
    a = _general(n, np.float64)
    x = jaxmg.lu_solve(jnp.asarray(a), jnp.ones(n), T_A=16, mesh=mesh, backend="native")
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, np.ones(n)), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("shape,spec,tile", [((2, 2), P("x", "y"), 20), ((1, 2), P(None, "y"), 8)])
def test_public_api_native_lu_grad(shape, spec, tile, native_backend):
    """Derivatives reuse the saved factor: b_bar = A^-T x_bar (getrs), A_bar = -b_bar x^T."""
    import jaxmg

    n = 48
    mesh = _mesh(shape, False)
    a = _general(n, np.float64)
    b = _rhs(n, 2, np.float64)
    sharding = NamedSharding(mesh, spec)
    ga, gb, ga_ref, gb_ref = solve_gradients(
        lambda a, b: jaxmg.lu_solve(a, b, T_A=tile, mesh=mesh, backend="native"), a, b, mesh, spec
    )
    np.testing.assert_allclose(gb, gb_ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ga, ga_ref, rtol=1e-9, atol=1e-9)
    # the transposed solve's derivative uses the untransposed one
    fac = jaxmg.LU(jax.device_put(a, sharding), T_A=tile, mesh=mesh, backend="native")
    gt = jax.jit(jax.grad(lambda b: jnp.sum(fac.solve(b, trans="T"))))(b)
    np.testing.assert_allclose(np.asarray(gt), np.linalg.solve(a, np.ones_like(b)), rtol=1e-9, atol=1e-9)
    assert native_backend.calls


def test_public_api_native_lu_singular_and_donate(native_backend):
    import jaxmg

    n = 48
    mesh = _mesh((2, 2), True)
    a = _general(n, np.float64)
    b = _rhs(n, 1, np.float64)[:, 0]
    sharding = NamedSharding(mesh, P("x", "y"))
    x = jaxmg.lu_solve(jax.device_put(a, sharding), b, T_A=20, mesh=mesh, donate=True, backend="native")
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-9, atol=1e-9)
    s = a.copy()
    s[3] = 0  # a zero row
    x, st = jaxmg.lu_solve(jax.device_put(s, sharding), b, T_A=20, mesh=mesh, backend="native", return_status=True)
    assert int(st) > 0 and np.all(np.isnan(np.asarray(x)))


def test_ops_local_lu_solve(native_backend):
    """jaxmg.ops.local.lu_solve inside the caller's own shard_map runs the native kernels."""
    import jaxmg

    n = 48
    mesh = _mesh((2, 2), False)
    grid = jaxmg.Grid.from_spec(mesh, P("x", "y"))
    a = _general(n, np.float64)
    b = _rhs(n, 1, np.float64)[:, 0]

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("x", "y"), P("x")), out_specs=(P("x"), P()), check_vma=False)
    def step(a_block, b_rows):
        x_rows, status = jaxmg.ops.local.lu_solve(a_block, b_rows, grid=grid, backend="native", T_A=8)
        return x_rows, status

    x, st = step(jax.device_put(a, NamedSharding(mesh, P("x", "y"))), jax.device_put(b, NamedSharding(mesh, P("x"))))
    assert int(st) == 0
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-9, atol=1e-9)
    assert [c[0] for c in native_backend.calls] == ["getrf"]  # A x = b: no getrs (module docstring)


# --------------------------------------------------------------------------------------------
# jax.scipy.linalg.lu_factor's arrays from the distributed factor (jaxmg.scipy.linalg)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,spec,reverse,explicit,dtype",
    [
        ((4, 2), P("x", "y"), False, False, np.float64),
        ((4, 2), P("x", "y"), True, True, np.complex128),
        ((2, 2), P("x", None), False, True, np.float32),
    ],
)
def test_scipy_lu_factor_from_the_distributed_lu(shape, spec, reverse, explicit, dtype, native_backend):
    """lu_factor of a matrix split over the mesh is JAX's (lu, piv) (LAPACK's packed factor and
    row swaps), from the distributed LU (getrf on the grid): eagerly and in jit, with JAX's
    derivative of the packed factor; lu and lu_solve read it as JAX's arrays."""
    import jaxmg
    import jaxmg.scipy.linalg as sla

    n = 48
    mesh = _mesh(shape, reverse, explicit)
    a = _general(n, dtype)
    a[[0, 5]] = a[[5, 0]] * 0.1  # pivoting needed from the first column on
    t = _general(n, dtype, seed=3)
    sharding = NamedSharding(mesh, spec)
    ag, tg = jax.device_put(a, sharding), jax.device_put(t, sharding)
    assert jaxmg.route("LU", (n, n), dtype, mesh) == "distributed"
    want_lu, want_piv = jax.scipy.linalg.lu_factor(a)
    tol = _tol(dtype)
    with jax.set_mesh(mesh):
        jitted = jax.jit(sla.lu_factor)(ag)
        _, lu_dot = jax.jvp(lambda a: sla.lu_factor(a)[0], (ag,), (tg,))
        grad = jax.jit(jax.grad(lambda a: jnp.real(jnp.sum(tg * sla.lu_factor(a)[0]))))(ag)
    for lu, piv in (sla.lu_factor(ag), jitted):
        np.testing.assert_allclose(np.asarray(lu), np.asarray(want_lu), **tol)
        np.testing.assert_array_equal(np.asarray(piv), np.asarray(want_piv))
        assert piv.dtype == want_piv.dtype
    # in a's layout, eagerly and in jit (on Auto axes there the default layout, which a's is)
    assert sla.lu_factor(ag)[0].sharding.spec == jitted[0].sharding.spec == sharding.spec
    assert grad.sharding.spec == sharding.spec
    _, want_dot = jax.jvp(lambda a: jax.scipy.linalg.lu_factor(a)[0], (a,), (t,))
    want_grad = jax.grad(lambda a: jnp.real(jnp.sum(t * jax.scipy.linalg.lu_factor(a)[0])))(a)
    for got, want in ((lu_dot, want_dot), (grad, want_grad)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=100 * tol["rtol"], atol=100 * tol["atol"])
    p, l, u = sla.lu(ag)
    np.testing.assert_allclose(np.asarray(p) @ np.asarray(l) @ np.asarray(u), a, **tol)
    b = _rhs(n, 2, dtype)
    np.testing.assert_allclose(np.asarray(sla.lu_solve(sla.lu_factor(ag), b)), np.linalg.solve(a, b), **tol)
    assert {c[0] for c in native_backend.calls} == {"getrf"}


@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(np.float64, np.complex128), (np.float32, np.float64)])
def test_scipy_solves_promote_a_distributed_factor(a_dtype, b_dtype, native_backend):
    """cho_solve with a distributed jaxmg.Cholesky and lu_solve with a distributed jaxmg.LU promote
    the factor and b together as jax.scipy.linalg does: the saved factor is converted inside the
    call and solved by the native handlers in the common dtype, never factored again."""
    import jax.scipy.linalg as jsl

    import jaxmg
    import jaxmg.scipy.linalg as msla

    n = 48
    mesh = _mesh((2, 2), False)
    a = _general(n, np.float64)
    a = (a @ a.T / n + np.eye(n)).astype(a_dtype)
    b = _rhs(n, 2, b_dtype)
    placed = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    chol = jaxmg.Cholesky(placed, T_A=8, mesh=mesh, backend="native")
    lu = jaxmg.LU(placed, T_A=8, mesh=mesh, backend="native")
    factored = len(native_backend.calls)
    got = (msla.cho_solve((chol, False), b), msla.lu_solve((lu, None), b, trans=1))
    want = (jsl.cho_solve(jsl.cho_factor(a), b), jsl.lu_solve(jsl.lu_factor(a), b, trans=1))
    for x, w in zip(got, want):
        assert x.dtype == w.dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(w), **_tol(a_dtype))
    assert chol.route == lu.route == "distributed"
    assert {c[0] for c in native_backend.calls[factored:]} == {"potrs", "getrs"}


def _largest_gather(compiled_text: str) -> int:
    """The most elements that one all-gather of a compiled program brings onto a device."""
    shapes = re.findall(r"= f64\[([\d,]+)\]\S* all-gather\(", compiled_text)
    return max((int(np.prod([int(d) for d in s.split(",")])) for s in shapes), default=0)


def test_factor_array_solves_inside_jit_on_auto_axes_gather_no_factor(native_backend, monkeypatch):
    """Inside jax.jit on Auto mesh axes, where jaxmg factors a matrix of the factor's order over
    the mesh (the distributed route), cho_solve, lu_solve and solve_triangular with JAX's array
    factor solve by blocked substitution over the mesh: no all-gather brings the factor (or any
    quarter of it) onto a device, and x is the solution (before, the device's triangular solve
    gathered the whole factor)."""
    import jaxmg.scipy.linalg as sla
    from jaxmg.kernels import triangular

    monkeypatch.setattr(triangular, "BASE", 8)  # diagonal blocks of 8 rows, as 1,024 at scale
    n = 48
    mesh = _mesh((4, 2))
    a = _general(n, np.float64)
    spd = a @ a.T / n + np.eye(n)
    b = _rhs(n, 2, np.float64)
    chol = np.linalg.cholesky(spd)
    lu, piv = jax.scipy.linalg.lu_factor(a)
    cases = {
        "cho_solve": (lambda c, b: sla.cho_solve((c, True), b), chol, np.linalg.solve(spd, b)),
        "cho_solve upper": (lambda c, b: sla.cho_solve((c, False), b), chol.T, np.linalg.solve(spd, b)),
        "lu_solve": (lambda f, b: sla.lu_solve((f, piv), b), np.asarray(lu), np.linalg.solve(a, b)),
        "solve_triangular": (
            lambda t, b: sla.solve_triangular(t, b, lower=True, trans=2),
            chol,
            np.linalg.solve(chol.T, b),
        ),
    }
    with jax.set_mesh(mesh):
        for name, (fn, factor, want) in cases.items():
            placed = jax.device_put(factor, NamedSharding(mesh, P("x", "y")))
            rhs = jax.device_put(b, NamedSharding(mesh, P("x")))
            compiled = jax.jit(fn).lower(placed, rhs).compile()
            assert _largest_gather(compiled.as_text()) < n * n // 4, name
            np.testing.assert_allclose(np.asarray(compiled(placed, rhs)), want, rtol=1e-9, atol=1e-9, err_msg=name)
