"""The native Cholesky family kernels, checked on CPU against an emulated cuSOLVERMp.

``cholesky_factor`` / ``cholesky_solve`` / ``cholesky_logdet`` / ``cholesky_lower`` /
``cholesky_triangle``/``cholesky_to_a_order`` (the inverse) of ``jaxmg.kernels.native`` redistribute in JAX and
call two FFI handlers (csrc/cholesky.cc): ``jaxmg_potrf`` (natural mode: potrf with ``uplo=UPPER`` on the
column-major view, in place, no layout step) and ``jaxmg_potrs`` (potrs and the local log det
with that factor, read only; status 0).
Both are replaced by the pure-JAX emulation in tests/gpu/_emulation.py (``Emulator``) of what
the handler and cuSOLVERMp do with the buffers:

* the local row-major block is the column-major local block of ``M`` in the block-cyclic
  layout (tile ``T``, process ``(p, q) = (rank % pr, rank // pr)`` owns global tile rows
  ``p + l * pr`` and columns ``q + l * pc``), placed by each member's own rank;
* potrf (UPPER) reads only ``M``'s upper triangle, writes ``U`` (``M = U^H U``) there, and
  leaves the strictly lower triangle as it was; a matrix that is not positive definite gives
  ``status = info`` (order of the first non positive-definite leading minor) on every member
  and skips potrs (``x`` keeps ``b``);
* potrs (UPPER) reads only the factor's upper triangle; ``B``/``X`` live on process column 0,
  the other members' right-hand-side buffers are left as they are;
* the local log det sums ``log(real(diag))`` over the diagonal entries this member owns.

Runs on CPU with 4 of the simulated devices.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from _emulation import (
    cholesky_kernels,
    hermitian_with_junk as _matrix,
    kernel_layouts,
    mesh as _mesh,
    require_cpu_devices,
    rhs as _rhs,
    solve_gradients,
)
from jaxmg import _layout
from jaxmg.kernels import native, triangular

require_cpu_devices(4)


# --------------------------------------------------------------------------------------------
# Test data
# --------------------------------------------------------------------------------------------


def _family(grid, mesh, tile, natural=True):
    """Every family kernel: (state, status, x_vec, x_mat, logdet, L, A^-1); L is the state itself
    where it is in the permuted layout (natural=False). A^-1 is computed as jaxmg.ops does: the
    triangle in block layout (one shard_map), its Hermitian inverse on the whole matrix, then
    back to a's order (a second shard_map)."""
    kw = dict(grid=grid, tile=tile, natural=natural)

    def body(a, bv, bm):
        state, status = native.cholesky_factor(a, **kw)
        (xv,) = native.cholesky_solve(state, bv, **kw)
        (xm,) = native.cholesky_solve(state, bm, **kw)
        (ld,) = native.cholesky_logdet(state, **kw)
        (low,) = native.cholesky_lower(state, **kw) if natural else (state,)
        (tri,) = native.cholesky_triangle(state, **kw)
        return state, status, xv, xm, ld, low, tri

    first = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(grid.spec, P(), P()),
        out_specs=(grid.spec, P(), P(), P(), P(), grid.spec, grid.spec),
        check_vma=False,
    )
    back = jax.shard_map(
        lambda c: native.cholesky_to_a_order(c, **kw)[0],
        mesh=mesh,
        in_specs=grid.spec,
        out_specs=grid.spec,
        check_vma=False,
    )

    @jax.jit
    def run(a, bv, bm):
        *outs, tri = first(a, bv, bm)
        n = a.shape[0]
        lower, reordered = native.cholesky_triangle_kind(n, tile, grid, natural)
        assert reordered == (not natural and native.cholesky_state_is_lower(n, tile, grid) is False)
        inv = triangular.hermitian_inverse(triangular.Tri(tri, lower=lower), base=24)
        return (*outs, back(inv) if reordered else inv)

    return run


# --------------------------------------------------------------------------------------------
# Kernel-level tests
# --------------------------------------------------------------------------------------------

# n = 48: local extents 48 or 24. T_A = 8 divides them (family tile 8; 3 tiles per process on a
# 2-process axis: gather path); T_A = 20 does not (family tile 16 on 1x1, 12 otherwise: all_to_all).
TILES = [(48, 8), (48, 20)]


#: (dtype, natural) for kernel_layouts: each layout runs one real and one complex case, in
#: opposite modes, and each pair of dtype and mode meets every grid, tile and device order.
VARIANTS = [(np.float64, True), (np.float64, False), (np.complex128, True), (np.complex128, False)]


@pytest.mark.parametrize("shape,n,tile,reverse,variant", kernel_layouts(TILES, VARIANTS))
def test_family_kernels(shape, n, tile, reverse, variant, emulator):
    dtype, natural = variant
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    t = native.family_tile(n, tile, grid)
    assert (n // grid.nprow) % t == 0 and (n // grid.npcol) % t == 0
    assert ((n // grid.nprow) % tile == 0) == (tile == 8)
    a_in, a = _matrix(n, dtype)
    bm = _rhs(n, 3, dtype)
    bv = bm[:, 0] * 2
    state, status, xv, xm, ld, low, inv = _family(grid, mesh, tile, natural)(a_in, bv, bm)
    assert int(status) == 0
    assert native.cholesky_state_is_lower(n, tile, grid, natural) == natural
    assert np.asarray(state).shape == (n, n)
    np.testing.assert_allclose(np.asarray(xv), np.linalg.solve(a, bv), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(xm), np.linalg.solve(a, bm), rtol=1e-10, atol=1e-10)
    ref = np.linalg.slogdet(a)[1]
    assert np.isrealobj(np.asarray(ld))
    np.testing.assert_allclose(float(ld), ref, rtol=1e-10)
    if natural:
        np.testing.assert_allclose(np.asarray(low), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
    else:  # the permuted state: L cannot be read from it, and saying so is an error
        with pytest.raises(ValueError, match="natural=True"):
            native.cholesky_lower(state, grid=grid, tile=tile)
    np.testing.assert_allclose(np.asarray(inv), np.linalg.inv(a), rtol=1e-9, atol=1e-10)
    # the handlers saw the family tile and the unpadded size, in the state's mode only
    mode = cholesky_kernels._MODE_NATURAL if natural else cholesky_kernels._MODE_INPLACE
    assert {c[3:] for c in emulator.calls} == {(n, t)}
    assert {c[:2] for c in emulator.calls} == {("potrf", mode), ("potrs", mode)}


@pytest.mark.parametrize("natural", [True, False])
@pytest.mark.parametrize("shape,reverse", [((2, 2), False), ((1, 2), True), ((2, 1), False)])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.usefixtures("emulator")
def test_family_not_positive_definite(shape, reverse, dtype, natural):
    n, tile, k = 48, 20, 29
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a_in, a = _matrix(n, dtype)
    a_in = np.array(a_in)
    a_in[k, k] = -50.0  # leading minor of order k + 1 is the first not positive definite
    bm = _rhs(n, 2, dtype)
    state, status, xv, xm, ld, low, inv = _family(grid, mesh, tile, natural)(a_in, bm[:, 0], bm)
    # natural order: the order of the first leading minor that is not positive definite; the
    # permuted layout counts it in cuSOLVERMp's (permuted) order: non-zero, not k + 1
    assert int(status) == k + 1 if natural else int(status) > 0
    for out in (state, xv, xm, ld, low, inv):
        assert np.all(np.isnan(np.asarray(out))), out


# --------------------------------------------------------------------------------------------
# Public API through the native family (backend="native" with the FFI emulated)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,spec,tile,reverse,dtype",
    [
        ((2, 2), P("x", "y"), 8, False, np.float64),
        ((2, 2), P("x", "y"), 20, True, np.complex128),
        ((2, 1), P("x", None), 20, False, np.complex128),
        ((1, 2), P(None, "y"), 8, True, np.float64),
    ],
)
def test_public_api_native_family(shape, spec, tile, reverse, dtype, native_backend):
    import jaxmg

    n = 48
    mesh = _mesh(shape, reverse)
    a_in, a = _matrix(n, dtype)
    bm = _rhs(n, 2, dtype)
    bv = bm[:, 0]
    ag = jax.device_put(a_in, NamedSharding(mesh, spec))

    def run(ag, bv, bm):
        xv, ld, st = jaxmg.potrs(ag, bv, T_A=tile, mesh=mesh, backend="native", return_logdet=True, return_status=True)
        xm = jaxmg.potrs(ag, bm, T_A=tile, mesh=mesh, backend="native")
        low = jaxmg.cholesky(ag, T_A=tile, mesh=mesh, backend="native")
        fac = jaxmg.Cholesky(ag, T_A=tile, mesh=mesh, backend="native")
        return xv, ld, st, xm, low, fac.solve(bm), fac.logdet(), fac.factor, fac.status

    for outs in (run(ag, bv, bm), jax.jit(run)(ag, bv, bm)):
        xv, ld, st, xm, low, xf, ldf, lowf, stf = outs
        assert int(st) == 0 and int(stf) == 0
        np.testing.assert_allclose(np.asarray(xv), np.linalg.solve(a, bv), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(xm), np.linalg.solve(a, bm), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(xf), np.linalg.solve(a, bm), rtol=1e-10, atol=1e-10)
        ref = np.linalg.slogdet(a)[1]
        np.testing.assert_allclose(float(ld), ref, rtol=1e-10)
        np.testing.assert_allclose(float(ldf), ref, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(low), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(lowf), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
    assert native_backend.calls, "the native kernels were not used"


def _fold(g):
    """The cotangent of a for a function of the Hermitian matrix read from a's lower triangle,
    whose cotangent is g (real): zero above the diagonal, mirrored entries summed below it."""
    return np.tril(g, -1) + np.tril(g.T, -1) + np.diag(np.diag(g))


@pytest.mark.parametrize("shape,spec,tile", [((2, 2), P("x", "y"), 20), ((2, 1), P("x", None), 8)])
def test_public_api_native_grad(shape, spec, tile, native_backend):
    import jaxmg

    n = 48
    mesh = _mesh(shape, False)
    _, a = _matrix(n, np.float64)
    b = _rhs(n, 2, np.float64)
    sharding = NamedSharding(mesh, spec)
    ga, gb, ga_ref, gb_ref = solve_gradients(
        lambda a, b: jaxmg.potrs(a, b, T_A=tile, mesh=mesh, backend="native"), a, b, mesh, spec
    )
    np.testing.assert_allclose(gb, gb_ref, rtol=1e-9, atol=1e-10)
    # potrs reads a's lower triangle: the gradient of the full matrix, folded onto it
    np.testing.assert_allclose(ga, _fold(ga_ref), rtol=1e-9, atol=1e-10)
    # the logdet's gradient too: d log det a / d a = a^-T, folded
    gl = jax.jit(jax.grad(lambda a: jaxmg.potrs(a, b, T_A=tile, mesh=mesh, backend="native", return_logdet=True)[1]))(
        jax.device_put(a, sharding)
    )
    np.testing.assert_allclose(np.asarray(gl), _fold(np.linalg.inv(a).T), rtol=1e-9, atol=1e-10)
    assert native_backend.calls


@pytest.mark.parametrize("explicit", [False, True])
def test_scipy_cho_factor_on_the_distributed_route(explicit, native_backend, monkeypatch):
    """jax.scipy.linalg's Gaussian-process code on a matrix that jaxmg factors over the mesh:
    cho_factor's c is JAX's array (the distributed factor, in a's layout), read with
    jnp.diagonal and passed to cho_solve, eagerly and in jit; the loss and its gradient are
    JAX's, on Auto and Explicit axes."""
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    import jaxmg
    import jaxmg.scipy.linalg as msla

    monkeypatch.setattr(triangular, "BASE", 8)  # the blocked substitution of a factor of order 48
    n = 48
    mesh = _mesh((2, 2), False, explicit)
    k = np.asarray(_matrix(n, np.float64)[1])
    y = _rhs(n, 1, np.float64)[:, 0]
    kg = jax.device_put(k, NamedSharding(mesh, P("x", "y")))
    yg = jax.device_put(y, NamedSharding(mesh, P("x")))
    assert jaxmg.route("Cholesky", (n, n), np.float64, mesh) == "distributed"

    def loss(sl, k, y):
        c, lower = sl.cho_factor(k, lower=True)
        eye = jnp.eye(k.shape[0], dtype=bool)  # the diagonal, as a mask (a gather on Explicit axes needs its layout)
        logdet = jnp.sum(jnp.where(eye, jnp.log(jnp.where(eye, c, 1)), 0))
        return 0.5 * jnp.sum(y * sl.cho_solve((c, lower), y)) + logdet

    want = jax.value_and_grad(loss, argnums=(1, 2))(jsl, k, y)
    with jax.set_mesh(mesh):
        c, lower = msla.cho_factor(kg, lower=True)
        assert isinstance(c, jax.Array) and lower is True and c.sharding.spec == kg.sharding.spec
        np.testing.assert_allclose(np.asarray(c), np.linalg.cholesky(k), rtol=1e-9, atol=1e-10)
        eager = jax.value_and_grad(loss, argnums=(1, 2))(msla, kg, yg)
        jitted = jax.jit(jax.value_and_grad(loss, argnums=(1, 2)), static_argnums=0)(msla, kg, yg)
    for got in (eager, jitted):
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-10)
    assert {c[0] for c in native_backend.calls} >= {"potrf"}


def test_public_api_native_not_positive_definite(native_backend):
    import jaxmg

    n, k = 48, 17
    mesh = _mesh((2, 2), True)
    a_in, _ = _matrix(n, np.float64)
    a_in = np.array(a_in)
    a_in[k, k] = -50.0
    ag = jax.device_put(a_in, NamedSharding(mesh, P("x", "y")))
    b = _rhs(n, 1, np.float64)[:, 0]
    x, ld, st = jax.jit(
        lambda a: jaxmg.potrs(a, b, T_A=20, mesh=mesh, backend="native", return_logdet=True, return_status=True)
    )(ag)
    assert int(st) > 0  # counted in the permuted order (potrs factors in place)
    assert np.all(np.isnan(np.asarray(x))) and np.isnan(float(ld))
    low, st = jaxmg.cholesky(ag, T_A=20, mesh=mesh, backend="native", return_status=True)
    assert int(st) == k + 1 and np.all(np.isnan(np.asarray(low)))


@pytest.mark.parametrize("shape,spec", [((2, 1), P("x", None)), ((2, 2), P("x", "y"))])
def test_public_module_layouts(shape, spec, native_backend, monkeypatch):
    """Cholesky(a) factors in place (one permuted potrf, then only solves); .factor refactors the
    kept a in natural order; natural=True reads L from its state; after donate=True, .factor
    says what to do instead."""
    import jaxmg

    n, tile = 48, 8
    mesh = _mesh(shape, False)
    a_in, a = _matrix(n, np.float64)
    b = _rhs(n, 2, np.float64)
    ag = jax.device_put(a_in, NamedSharding(mesh, spec))
    emu = native_backend
    from jaxmg import _dispatch

    _dispatch._compiled.cache_clear()  # calls are recorded when traced: trace afresh
    jax.clear_caches()

    jaxmg.Cholesky(ag, T_A=tile, mesh=mesh, backend="native", check=False)
    assert [c[:2] for c in emu.calls] == [("potrf", cholesky_kernels._MODE_INPLACE)]
    emu.calls.clear()
    _dispatch._compiled.cache_clear()
    jax.clear_caches()
    fac = jaxmg.Cholesky(ag, T_A=tile, mesh=mesh, backend="native")
    # with the result check (the default): the factorisation, and the one solve with its factor
    # that the check makes
    assert [c[:2] for c in emu.calls] == [
        ("potrf", cholesky_kernels._MODE_INPLACE),
        ("potrs", cholesky_kernels._MODE_INPLACE),
    ]
    emu.calls.clear()
    xs = [fac.solve(b * k) for k in range(1, 4)]
    # (calls are recorded when traced: the three solves share one compiled call, whose trace
    # holds the solve and, for reverse mode, its transpose)
    calls = [c[:2] for c in emu.calls]
    assert set(calls) == {("potrs", cholesky_kernels._MODE_INPLACE)} and len(calls) <= 2
    for k, x in enumerate(xs, 1):
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b * k), rtol=1e-10, atol=1e-10)
    emu.calls.clear()
    np.testing.assert_allclose(np.asarray(fac.factor), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
    assert [c[:2] for c in emu.calls] == [("potrf", cholesky_kernels._MODE_NATURAL)]

    emu.calls.clear()
    nat = jaxmg.Cholesky(ag, T_A=tile, mesh=mesh, natural=True, backend="native")
    from jaxmg.kernels import native

    with monkeypatch.context() as m:
        m.setattr(native.Cholesky, "factor", lambda *args, **kw: pytest.fail("natural=True refactored"))
        np.testing.assert_allclose(np.asarray(nat.factor), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(nat.solve(b)), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
    natural = cholesky_kernels._MODE_NATURAL
    assert {c[:2] for c in emu.calls} <= {("potrf", natural), ("potrs", natural)}

    donated = jaxmg.Cholesky(
        jax.device_put(a_in, NamedSharding(mesh, spec)), T_A=tile, mesh=mesh, donate=True, backend="native"
    )
    np.testing.assert_allclose(np.asarray(donated.solve(b)), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="natural=True"):
        _ = donated.factor


def test_unused_native_kernel_leaves_no_empty_manual_computation(monkeypatch):
    """A native kernel whose outputs a program does not use (the log det value in a JVP that
    needs only its tangent) must vanish whole. With effectful bootstrap calls it stayed as a
    manual computation without operands or results, which XLA's SPMD partitioner rejects on
    2 GPUs ("Side-effect HLO must have sharding"). Lowered with the real FFI calls (CPU)."""
    import re

    import jaxmg
    from jaxmg import _routes

    monkeypatch.setattr(_routes, "native_unavailable", lambda op, mesh: None)
    from jaxmg.kernels.ffi import _library

    monkeypatch.setattr(_library, "check_one_gpu_per_process", lambda: None)
    monkeypatch.setattr(_library, "register", lambda: None)
    mesh = _mesh((2, 1), False)
    n = 64
    a = jax.device_put(np.eye(n) * n + 1.0, NamedSharding(mesh, P("x", None)))
    b = jax.device_put(np.ones(n), NamedSharding(mesh, P("x")))

    def logdet(m, v):
        # unchecked: a checked log det's derivatives are masked by the check of x, which needs potrs
        return jaxmg.potrs(m, v, T_A=16, mesh=mesh, backend="native", return_logdet=True, check=False)[1]

    with jax.set_mesh(mesh):
        text = jax.jit(lambda xs, ds: jax.jvp(logdet, xs, ds)[1]).lower((a, b), (a, b)).as_text()
    # the tangent needs only A^-1 from the factor (potrf); the unused log det kernel (potrs) is gone
    assert "jaxmg_identity" in text and "jaxmg_potrf" in text and "jaxmg_potrs" not in text
    assert not re.search(r"manual_computation\(\)\s+in_shardings=\[\]\s+out_shardings=\[\]", text), text
