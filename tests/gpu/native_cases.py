"""GPU checks of the native backend; run one process per GPU:

    python -m jaxmg.launch -n 1 tests/gpu/native_cases.py
    python -m jaxmg.launch -n 2 tests/gpu/native_cases.py

Prints one ``CASE <name> PASS|FAIL <detail>`` line per check (rank 0) and exits 1 if any failed.
The kernels of ``jaxmg.kernels.native`` run through ``_harness`` (the library's shard_map
contract) and are compared with NumPy (float64 reference): potrs (fused, in place) and the
Cholesky family, all four dtypes, grids (1,1), (2,1), (1,2), both device orders, a T_A that
does not divide the shard (padding), vector and matrix right-hand sides, donation, vmap, cache
reuse, and non-positive-definite input (NaN + non-zero status, no hang). The LU family likewise
(``lu_factor`` once, ``lu_solve`` with trans 0, 1, 2; singular input; vmap). When the public API
imports, ``jaxmg.potrs``/``jaxmg.cholesky``/``jaxmg.lu_solve``/``jaxmg.LU`` with backend="native"
and "auto" are checked too (``JAXMG_CASES=lu`` runs only the LU cases).
"""

from __future__ import annotations

import faulthandler
import functools
import os
import sys
import time
import traceback
from pathlib import Path

faulthandler.enable()
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

native = _harness.load()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import conditioned  # noqa: E402  (tests/helpers.py: the test matrices shared with tests/)

jax.config.update("jax_enable_x64", True)

RANK = jax.process_index()
NPROC = jax.process_count()
RESULTS: list = []
ONLY = os.environ.get("JAXMG_CASES")


def log(*a):
    if RANK == 0:
        print(*a, flush=True)


def case(name, needs=None):
    """Runs fn now as the case ``name`` (unless JAXMG_CASES leaves it out); one that ``needs`` a
    kernel that ``native`` lacks (older kernels) passes without running."""

    def deco(fn):
        if ONLY and not any(o in name for o in ONLY.split(",")):
            return fn
        t0 = time.perf_counter()
        try:
            detail = (fn() or "") if needs is None or hasattr(native, needs) else f"no native.{needs}"
            ok = True
        except Exception as e:  # noqa: BLE001
            ok, detail = False, f"{type(e).__name__}: {str(e)[:700]}"
            if RANK == 0:
                traceback.print_exc()
        RESULTS.append((name, ok))
        log(f"CASE {name} {'PASS' if ok else 'FAIL'} ({time.perf_counter() - t0:.2f}s) {detail}")
        return fn

    return deco


def to_global(x, mesh, spec):
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda idx: x[idx])


def host(x):
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def spd(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        g = g + 1j * rng.standard_normal((n, n))
    a = g @ np.conj(g).T / n + np.eye(n)
    a_in = np.tril(a) + np.triu(np.full((n, n), 3.0), 1)  # the upper triangle is never read
    return a_in.astype(dtype), a


def not_positive_definite(n, k, value):
    """The identity of order n with ``value`` (negative) at (k, k): Hermitian, its leading minor of
    order k + 1 not positive."""
    a = np.eye(n)
    a[k, k] = value
    return a


def tol(dtype):
    return 1e-9 if np.dtype(dtype) in (np.float64, np.complex128) else 5e-3


def relerr(x, ref):
    return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-300))


def meshes():
    devs = jax.devices()
    if NPROC == 1:
        return [("1x1", Mesh(np.array(devs[:1]), ("x",), axis_types=(AxisType.Auto,)), P("x", None))]
    out = []
    for order in ("fwd", "rev"):
        d = devs if order == "fwd" else devs[::-1]
        m = Mesh(np.array(d), ("x",), axis_types=(AxisType.Auto,))
        out.append((f"2x1-{order}", m, P("x", None)))
        out.append((f"1x2-{order}", m, P(None, "x")))
    return out


DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def dtypes_of(mname):
    """(name, dtype) of the dtypes a family's cases cover on the mesh ``mname``: every one, but on
    the reversed device order the double-precision types suffice."""
    return [(np.dtype(d).name, d) for d in DTYPES if not (mname.endswith("-rev") and d in (np.float32, np.complex64))]


def directional_errors(fun, args, specs, mesh, order=1, seed=7):
    """Relative errors of fun's derivatives along a random direction d (jax.test_util.check_grads'
    checks for arrays spread over processes): the JVP against central differences, <grad, d>
    against the JVP, and with order=2 the second JVP against second differences and the
    gradient of the JVP against it."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    dirs = [to_global(rng.standard_normal(x.shape), mesh, s) for x, s in zip(args, specs)]
    weights = rng.standard_normal(jax.eval_shape(fun, *args).shape)
    scalar = lambda *xs: jnp.sum(jnp.asarray(weights) * fun(*xs))  # noqa: E731
    shift = jax.jit(lambda t, xs, ds: scalar(*[x + t * d for x, d in zip(xs, ds)]))
    along = lambda t: shift(t, tuple(args), tuple(dirs))  # noqa: E731 (global arrays as arguments)
    dot = jax.jit(lambda us, vs: sum(jnp.vdot(u, v) for u, v in zip(us, vs)))
    rel = lambda a, b: abs(float(host(a)) - float(host(b))) / max(1.0, abs(float(host(b))))  # noqa: E731
    eps = 1e-6
    jvp = jax.jit(lambda xs, ds: jax.jvp(scalar, xs, ds)[1])(tuple(args), tuple(dirs))
    fd = (along(eps) - along(-eps)) / (2 * eps)
    grad = jax.jit(jax.grad(scalar, argnums=tuple(range(len(args)))))(*args)
    errs = [rel(jvp, fd), rel(dot(grad, dirs), jvp)]
    if order == 2:
        h = 1e-4
        k = len(args)
        first = lambda *xs: jax.jvp(scalar, xs[:k], xs[k:])[1]  # noqa: E731 (directions as arguments)
        second = jax.jit(lambda xs, ds: jax.jvp(lambda *ys: first(*ys, *ds), xs, ds)[1])(tuple(args), tuple(dirs))
        fd2 = (along(h) - 2 * along(0.0) + along(-h)) / h**2
        grad2 = jax.jit(jax.grad(first, argnums=tuple(range(k))))(*args, *dirs)
        errs += [rel(second, fd2) * 1e-3, rel(dot(grad2, dirs), second)]  # differences: O(h^2) + roundoff/h^2
    return errs


def run_vmapped(one, nout, grid, mesh, mats):
    """``one(a, b)`` of per-shard kernels (``nout`` whole outputs) under vmap in shard_map, over the
    batch of matrices ``mats`` (each laid out like a) with the right-hand sides ones and 0 .. M-1
    (whole): those right-hand sides and one's outputs, on the host."""
    rhs = np.stack([np.ones(mats.shape[1]), np.arange(mats.shape[1], dtype=np.float64)])
    sp = P(None, *grid.spec)
    f = jax.jit(jax.shard_map(jax.vmap(one), mesh=mesh, in_specs=(sp, P()), out_specs=(P(),) * nout, check_vma=False))
    return rhs, [host(o) for o in f(to_global(mats, mesh, sp), to_global(rhs, mesh, P()))]


def run_potrs(grid, tile, a, b, donate=False):
    """native.potrs of the host arrays ``a`` (laid out on the grid) and ``b`` (whole): x, the
    log-determinant and the status, each whole."""
    args = [to_global(a, grid.mesh, grid.spec), to_global(b, grid.mesh, P())]
    return _harness.run(native.potrs, grid, tile, args, ["block", "whole"], ["whole"] * 3, donate=donate)


def run_sygvd(grid, tile, a, b):
    """native.sygvd of the host matrices ``a`` and ``b`` (both laid out on the grid): the
    eigenvalues (whole), the eigenvectors (on the grid) and the status (whole)."""
    args = [to_global(a, grid.mesh, grid.spec), to_global(b, grid.mesh, grid.spec)]
    return _harness.run(native.sygvd, grid, tile, args, ["block", "block"], ["whole", "block", "whole"])


def k_potrs(mesh, spec, n, tile, dtype, nrhs=None, donate=False):
    grid = _harness.grid_of(mesh, spec)
    a_in, a = spd(n, dtype)
    rng = np.random.default_rng(1)
    b = rng.standard_normal((n,) if nrhs is None else (n, nrhs)).astype(dtype)
    x, ld, st = run_potrs(grid, tile, a_in, b, donate=donate)
    x, ld, st = host(x), float(host(ld)), int(host(st))
    xr = np.linalg.solve(a, b)
    ldr = np.linalg.slogdet(a)[1]
    e, el = relerr(x, xr), abs(ld - ldr) / abs(ldr)
    assert st == 0, f"status {st}"
    assert e < tol(dtype) and el < tol(dtype), f"x err {e:.2e}, logdet err {el:.2e}"
    return f"x err {e:.1e} logdet err {el:.1e}"


def family_kernels(natural):
    """The Cholesky family kernels for one state layout (natural order, or permuted in place)."""
    names = ("cholesky_factor", "cholesky_solve", "cholesky_logdet", "cholesky_lower")
    if "natural" not in native.cholesky_factor.__code__.co_varnames:  # older kernels: natural only
        return tuple(getattr(native, k) for k in names)
    return tuple(functools.partial(getattr(native, k), natural=natural) for k in names)


def k_family(mesh, spec, n, tile, dtype, natural=True):
    grid = _harness.grid_of(mesh, spec)
    a_in, a = spd(n, dtype)
    factor, solve, logdet, lower = family_kernels(natural)
    state, st = _harness.run(factor, grid, tile, [to_global(a_in, mesh, grid.spec)], ["block"], ["block", "whole"])
    assert int(host(st)) == 0, f"status {int(host(st))}"
    b = np.arange(1, 2 * n + 1).reshape(n, 2).astype(dtype)
    (x,) = _harness.run(solve, grid, tile, [state, to_global(b, mesh, P())], ["block", "whole"], ["whole"])
    (ld,) = _harness.run(logdet, grid, tile, [state], ["block"], ["whole"])
    e1 = relerr(host(x), np.linalg.solve(a, b))
    e2 = abs(float(host(ld)) - np.linalg.slogdet(a)[1]) / abs(np.linalg.slogdet(a)[1])
    e3 = 0.0
    if natural:
        (low,) = _harness.run(lower, grid, tile, [state], ["block"], ["block"])
        e3 = relerr(host(low), np.linalg.cholesky(a))
    assert max(e1, e2, e3) < tol(dtype), (e1, e2, e3)
    return f"{'natural' if natural else 'permuted'}: solve {e1:.1e} logdet {e2:.1e} L {e3:.1e}"


def natural_lower(a, *, grid, tile):
    """L (this device's block) and status, from the natural-order factor state."""
    state, status = native.cholesky_factor(a, grid=grid, tile=tile, natural=True)
    (low,) = native.cholesky_lower(state, grid=grid, tile=tile, natural=True)
    return low, status


def k_cholesky(mesh, spec, n, tile, dtype):
    grid = _harness.grid_of(mesh, spec)
    a_in, a = spd(n, dtype)
    low, st = _harness.run(natural_lower, grid, tile, [to_global(a_in, mesh, grid.spec)], ["block"], ["block", "whole"])
    assert int(host(st)) == 0, f"status {int(host(st))}"
    e = relerr(host(low), np.linalg.cholesky(a))
    assert e < tol(dtype), f"L err {e:.2e}"
    return f"L err {e:.1e}"


log(f"native info: {native.info()}")
log(f"processes {NPROC}, devices {jax.devices()}, public API importable: {_harness.PUBLIC_API}")

for mname, mesh, spec in meshes():
    for dn, dtype in dtypes_of(mname):
        case(f"potrs-{mname}-{dn}-n256-T64")(lambda: k_potrs(mesh, spec, 256, 64, dtype))
        case(f"potrs-{mname}-{dn}-n200-T64-padded")(lambda: k_potrs(mesh, spec, 200, 64, dtype))
        case(f"potrs-{mname}-{dn}-n256-T32-nrhs3")(lambda: k_potrs(mesh, spec, 256, 32, dtype, nrhs=3))
        case(f"cholesky-{mname}-{dn}-n256-T64")(lambda: k_cholesky(mesh, spec, 256, 64, dtype))
        case(f"cholesky-{mname}-{dn}-n200-T64-padded")(lambda: k_cholesky(mesh, spec, 200, 64, dtype))
        if hasattr(native, "cholesky_factor"):
            case(f"family-{mname}-{dn}-n256-T64")(lambda: k_family(mesh, spec, 256, 64, dtype))
            case(f"family-{mname}-{dn}-n200-T64-padded")(lambda: k_family(mesh, spec, 200, 64, dtype))
            case(f"family-permuted-{mname}-{dn}-n256-T64")(lambda: k_family(mesh, spec, 256, 64, dtype, False))
            case(f"family-permuted-{mname}-{dn}-n200-T64")(lambda: k_family(mesh, spec, 200, 64, dtype, False))

mname, mesh, spec = meshes()[0]
grid = _harness.grid_of(mesh, spec)


@case(f"potrs-{mname}-float64-n2048-T256-donate")
def _():
    return k_potrs(mesh, spec, 2048, 256, np.float64, donate=True)


@case(f"potrs-{mname}-float64-cache-reuse-and-timings")
def _():
    from jaxmg import _native

    before = _native.cache_info()
    for _ in range(3):
        k_potrs(mesh, spec, 512, 128, np.float64)
    after = _native.cache_info()
    assert after["communicators"] == before["communicators"], (before, after)
    _native.reset_timings()
    k_potrs(mesh, spec, 512, 128, np.float64)
    return f"{after}, timings {native.last_timings()}"


@case(f"potrs-{mname}-float64-not-pd")
def _():
    n = 256
    a = not_positive_definite(n, 100, -1.0)
    x, ld, st = run_potrs(grid, 64, a, np.ones(n))
    x, ld, st = host(x), float(host(ld)), int(host(st))
    assert st != 0 and np.all(np.isnan(x)) and np.isnan(ld), (st, x[:3], ld)
    r = k_potrs(mesh, spec, 256, 64, np.float64)  # the grid still works afterwards
    return f"status {st}; next call: {r}"


@case(f"cholesky-{mname}-float64-not-pd")
def _():
    n = 256
    a = not_positive_definite(n, 10, -1.0)
    low, st = _harness.run(natural_lower, grid, 64, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole"])
    st = int(host(st))
    assert st != 0 and np.all(np.isnan(host(low))), st
    return f"status {st}"


@case(f"family-{mname}-float64-not-pd")
def _():
    if not hasattr(native, "cholesky_factor"):
        return "no family kernels"
    n = 256
    a = not_positive_definite(n, 70, -2.0)
    factor, solve, _, lower = family_kernels(True)
    state, st = _harness.run(factor, grid, 64, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole"])
    st = int(host(st))
    (low,) = _harness.run(lower, grid, 64, [state], ["block"], ["block"])
    assert st != 0 and np.all(np.isnan(host(low))), st
    factor, solve, _, _ = family_kernels(False)  # the permuted state: NaN factor, NaN solves
    state, st2 = _harness.run(factor, grid, 64, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole"])
    (x,) = _harness.run(solve, grid, 64, [state, to_global(np.ones(n), mesh, P())], ["block", "whole"], ["whole"])
    st2 = int(host(st2))
    assert st2 != 0 and np.all(np.isnan(host(state))) and np.all(np.isnan(host(x))), st2
    return (
        f"status {st} / permuted {st2}; then: {k_family(mesh, spec, 256, 64, np.float64)}; "
        f"{k_family(mesh, spec, 256, 64, np.float64, natural=False)}"
    )


@case(f"potrs-{mname}-float64-vmap")
def _():
    n = 256
    a1, r1 = spd(n, np.float64, 0)
    a2, r2 = spd(n, np.float64, 1)
    bb, (x, ld, st) = run_vmapped(
        lambda a, b: tuple(native.potrs(a, b, grid=grid, tile=64)), 3, grid, mesh, np.stack([a1, a2])
    )
    e = max(relerr(r1 @ x[0], bb[0]), relerr(r2 @ x[1], bb[1]))
    assert e < 1e-12 and np.all(st == 0), (e, st)
    return f"residual {e:.1e}"


if NPROC == 2:

    @case("potrs-replicated-1x1-on-2-devices-float64")
    def _():
        m = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
        g = _harness.grid_of(m, P(None, None))
        a_in, a = spd(256, np.float64)
        x, _, st = run_potrs(g, 64, a_in, np.ones(256))  # a's spec on the grid: P(None, None)
        return f"residual {relerr(a @ host(x), np.ones(256)):.1e} status {int(host(st))}"


if _harness.PUBLIC_API:
    import jaxmg

    for mname, mesh, spec in meshes():

        @case(f"public-potrs-{mname}-float64-native-and-auto")
        def _():
            a_in, a = spd(512, np.float64)
            b = np.arange(512.0)
            out = []
            for backend in ("native", "auto"):
                x, ld, st = jaxmg.potrs(
                    to_global(a_in, mesh, spec),
                    to_global(b, mesh, P("x")),
                    T_A=128,
                    mesh=mesh,
                    return_logdet=True,
                    return_status=True,
                    backend=backend,
                )
                out.append(relerr(a @ host(x), b))
                assert int(host(st)) == 0 and out[-1] < 1e-12, (backend, out)
            return f"residuals {out}"

        @case(f"public-cholesky-{mname}-complex128-native")
        def _():
            a_in, a = spd(256, np.complex128)
            low = jaxmg.cholesky(to_global(a_in, mesh, spec), T_A=64, mesh=mesh, backend="native")
            e = relerr(host(low), np.linalg.cholesky(a))
            assert e < 1e-9, e
            return f"L err {e:.1e}"

    def native_and_auto(solve, op, a, bg, mesh, spec, error, limit):
        """``solve(a, bg)`` with backend "native" and "auto": status 0 and ``error(x)`` below
        ``limit`` for both, and the route that ``jaxmg.route`` reports for "auto" is the one that
        the family's module takes. The errors by backend."""
        out = {}
        for backend in ("native", "auto"):
            x, st = solve(to_global(a, mesh, spec), bg, T_A=64, mesh=mesh, backend=backend, return_status=True)
            out[backend] = error(host(x))
            assert int(host(st)) == 0 and out[backend] < limit, (backend, out)
        module = {"lu": jaxmg.LU, "qr": jaxmg.QR}[op]
        assert module(to_global(a, mesh, spec), mesh=mesh).route == jaxmg.route(op, a.shape, a.dtype, mesh)
        return out

    # the native backend: derivatives, factor once / solve many, vmap (public API).
    def _system(mesh, spec, n=256):
        a_in, a = spd(n, np.float64, seed=3)
        a_sym = np.tril(a_in) + np.tril(a_in, -1).T  # the Hermitian matrix the solver sees
        b = np.sin(np.arange(n, dtype=np.float64))
        return a_sym, b, to_global(a_sym, mesh, spec), to_global(b, mesh, P("x"))

    def lower_folded(g):
        """A real gradient of a function of the full matrix, as the gradient with respect to ``a`` of
        the same function of the Hermitian matrix read from a's lower triangle: the mirrored
        entries summed below the diagonal, zero above it."""
        return np.tril(g, -1) + np.tril(g.T, -1) + np.diag(np.diag(g))

    for mname, mesh, spec in meshes():

        @case(f"public-grad-potrs-{mname}-float64-native-vs-numpy")
        def _():
            a, b, ag, bg = _system(mesh, spec)
            with jax.set_mesh(mesh):
                grad = jax.jit(
                    jax.grad(lambda a, b: jax.numpy.sum(jaxmg.potrs(a, b, T_A=64, backend="native")), argnums=(0, 1))
                )
                ga, gb = grad(ag, bg)
            x = np.linalg.solve(a, b)
            b_bar = np.linalg.solve(a.T, np.ones(len(b)))
            e = max(relerr(host(gb), b_bar), relerr(host(ga), lower_folded(-np.outer(b_bar, x))))
            assert e < 1e-10, e
            return f"grad err {e:.1e}"

        @case(f"public-check-grads-{mname}-float64-native")
        def _():
            # jax.test_util.check_grads' checks, with multi-process arrays: forward mode against
            # central differences along a random direction, reverse mode against forward mode
            # (<grad, d> = jvp), and order 2 (logdet) likewise.
            _, _, ag, bg = _system(mesh, spec, n=128)
            sym = lambda m: (m + m.T) / 2  # noqa: E731 (derivatives of Hermitian a)
            with jax.set_mesh(mesh):
                e1 = directional_errors(
                    lambda m, v: jaxmg.potrs(sym(m), v, T_A=32, backend="native"),
                    [ag, bg],
                    [spec, P("x")],
                    mesh,
                    order=2,
                )
                e2 = directional_errors(
                    lambda m, v: jaxmg.potrs(sym(m), v, T_A=32, backend="native", return_logdet=True)[1],
                    [ag, bg],
                    [spec, P("x")],
                    mesh,
                    order=2,
                )
                e3 = directional_errors(
                    lambda m: jaxmg.cholesky(sym(m), T_A=32, backend="native"), [ag], [spec], mesh, order=2
                )
            worst = max(e1 + e2 + e3)
            assert worst < 1e-6, (e1, e2, e3)
            return f"potrs (a, b), logdet, cholesky, order 2: fwd vs differences, rev vs fwd; worst {worst:.1e}"

        for fname, backend in (("potrs", "native"), ("lu_solve", "native"), ("lu_solve", "auto")):

            @case(f"public-eager-grad-{fname}-{mname}-float64-{backend}")
            def _(fname=fname, backend=backend):
                # jax.grad called outside jit, as users first write it, w.r.t. a, b and both;
                # the second call reuses the compiled calls of the first.
                import jax.numpy as jnp

                a, b, ag, bg = _system(mesh, spec)
                solve = getattr(jaxmg, fname)
                loss = lambda m, v: jnp.sum(solve(m, v, T_A=64, backend=backend))  # noqa: E731
                x = np.linalg.solve(a, b)
                b_bar = np.linalg.solve(a.T, np.ones(len(b)))
                want_a = -np.outer(b_bar, x)
                if fname == "potrs":  # only a's lower triangle is read
                    want_a = lower_folded(want_a)
                with jax.set_mesh(mesh):
                    ga = jax.grad(loss)(ag, bg)
                    gb = jax.grad(loss, argnums=1)(ag, bg)
                    gab = jax.grad(loss, argnums=(0, 1))(ag, bg)
                    t0 = time.perf_counter()
                    jax.block_until_ready(jax.grad(loss, argnums=(0, 1))(ag, bg))
                    again = time.perf_counter() - t0
                e = max(
                    relerr(host(ga), want_a),
                    relerr(host(gb), b_bar),
                    relerr(host(gab[0]), want_a),
                    relerr(host(gab[1]), b_bar),
                )
                assert e < 1e-10, e
                # cotangents keep their primal's sharding (compared as shardings: on a 1 x 1 mesh
                # P('x', None) and P() place the same)
                assert ga.sharding.is_equivalent_to(ag.sharding, 2), (ga.sharding, ag.sharding)
                assert gb.sharding.is_equivalent_to(bg.sharding, 1), (gb.sharding, bg.sharding)
                return f"grad err {e:.1e}; second eager grad w.r.t. (a, b) {again * 1e3:.1f} ms"

        @case(f"public-module-solve-many-{mname}-float64-native")
        def _():
            a, b, ag, bg = _system(mesh, spec)
            chol = jaxmg.Cholesky(ag, T_A=64, backend="native")
            errs = [relerr(a @ host(chol.solve(to_global(b * k, mesh, P("x")))), b * k) for k in (1, 2, 3)]
            ld = float(host(chol.logdet()))
            assert max(errs) < 1e-12 and abs(ld - np.linalg.slogdet(a)[1]) < 1e-9, (errs, ld)
            el = relerr(host(chol.factor), np.linalg.cholesky(a))  # refactored in natural order
            assert el < 1e-12, el
            # donated: factored in a's own buffer (the caller's array is consumed)
            ad = to_global(a, mesh, spec)
            xd = jaxmg.potrs(ad, bg, T_A=64, backend="native", donate=True)
            ed = relerr(a @ host(xd), b)
            assert ed < 1e-12 and ad.is_deleted(), (ed, ad.is_deleted())
            return f"residuals {max(errs):.1e} logdet ok, L err {el:.1e}, donated residual {ed:.1e}"

        @case(f"public-vmap-potrs-{mname}-float64-native")
        def _():
            a, b, _, _ = _system(mesh, spec)
            mats = np.stack([a, a + np.eye(len(b))])
            batch_spec = P(None, *spec)
            with jax.set_mesh(mesh):
                xs = jax.jit(jax.vmap(lambda a, b: jaxmg.potrs(a, b, T_A=64, backend="native", matrix_specs=spec)))(
                    to_global(mats, mesh, batch_spec), to_global(np.stack([b, b]), mesh, P())
                )
            xs = host(xs)
            e = max(relerr(mats[k] @ xs[k], b) for k in range(2))
            assert e < 1e-12, e
            return f"residual {e:.1e}"


# --------------------------------------------------------------------------------------------
# The LU family: lu_factor once, lu_solve with trans 0 (A), 1 (A^T), 2 (A^H)
# --------------------------------------------------------------------------------------------


def general(n, dtype, seed=0, singular_col=None):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal((n, n))
    a = a + np.diag(np.linspace(0.5, 2.0, n) * np.sqrt(n))
    if singular_col is not None:
        a[:, singular_col] = 0
    return a.astype(dtype)


def lu_solve_run(grid, mesh, tile, lu, piv, b, trans):
    """native.lu_solve with trans on the whole right-hand side b (NumPy) through the harness."""
    (x,) = _harness.run(
        functools.partial(native.lu_solve, trans=trans),
        grid,
        tile,
        [lu, piv, to_global(b, mesh, P())],
        ["block", "whole", "whole"],
        ["whole"],
    )
    return x


def k_lu(mesh, spec, n, tile, dtype, nrhs=0):
    if not hasattr(native, "lu_factor"):
        return "no LU kernels"
    grid = _harness.grid_of(mesh, spec)
    a = general(n, dtype)
    rng = np.random.default_rng(5)
    b = rng.standard_normal((n,) if nrhs == 0 else (n, nrhs)).astype(dtype)
    lu, piv, st = _harness.run(
        native.lu_factor, grid, tile, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole", "whole"]
    )
    assert int(host(st)) == 0, int(host(st))
    errs = {}
    for trans, op in ((0, a), (1, a.T), (2, np.conj(a).T)):
        x = lu_solve_run(grid, mesh, tile, lu, piv, b, trans)
        errs[trans] = relerr(op.astype(np.complex128) @ host(x), b)
    p = host(piv)
    assert p.min() >= 0 and p.max() < n, (p.min(), p.max())
    assert max(errs.values()) < tol(dtype), errs
    return f"residuals by trans {', '.join(f'{k}: {v:.1e}' for k, v in errs.items())}"


for mname, mesh, spec in meshes():
    for dn, dtype in dtypes_of(mname):
        case(f"lu-{mname}-{dn}-n256-T64")(lambda: k_lu(mesh, spec, 256, 64, dtype))
        case(f"lu-{mname}-{dn}-n192-T64-tile-not-dividing")(lambda: k_lu(mesh, spec, 192, 64, dtype))
        case(f"lu-{mname}-{dn}-n256-T32-nrhs3")(lambda: k_lu(mesh, spec, 256, 32, dtype, nrhs=3))

    @case(f"lu-{mname}-float64-singular-then-usable", needs="lu_factor")
    def _():
        grid = _harness.grid_of(mesh, spec)
        n = 256
        a = general(n, np.float64, singular_col=77)
        lu, piv, st = _harness.run(
            native.lu_factor, grid, 64, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole", "whole"]
        )
        x, y = (lu_solve_run(grid, mesh, 64, lu, piv, np.ones(n), trans) for trans in (0, 1))
        st = int(host(st))
        assert st > 0 and np.all(np.isnan(host(x))) and np.all(np.isnan(host(y))), (st, host(x)[:3])
        return f"status {st}; then: {k_lu(mesh, spec, 256, 64, np.float64)}"

    @case(f"lu-{mname}-float64-vmap", needs="lu_factor")
    def _():
        grid = _harness.grid_of(mesh, spec)
        n = 256
        mats = np.stack([general(n, np.float64, seed=s) for s in (0, 1)])

        def one(a, b):
            lu, piv, st = native.lu_factor(a, grid=grid, tile=64)
            return (
                native.lu_solve(lu, piv, b, grid=grid, tile=64, trans=0)[0],
                native.lu_solve(lu, piv, b, grid=grid, tile=64, trans=1)[0],
                st,
            )

        bb, (x, y, st) = run_vmapped(one, 3, grid, mesh, mats)
        e = max(max(relerr(mats[k] @ x[k], bb[k]), relerr(mats[k].T @ y[k], bb[k])) for k in range(2))
        assert e < 1e-12 and np.all(st == 0), (e, st)
        return f"residual {e:.1e}"


if _harness.PUBLIC_API and hasattr(native, "lu_factor"):
    for mname, mesh, spec in meshes():

        @case(f"public-lu-{mname}-float64-native-auto-donate-grad")
        def _():
            n = 256
            a = general(n, np.float64, seed=4)
            b = np.sin(np.arange(n, dtype=np.float64))
            bg = to_global(b, mesh, P("x"))
            out = native_and_auto(jaxmg.lu_solve, "lu", a, bg, mesh, spec, lambda x: relerr(a @ x, b), 1e-12)
            ad = to_global(a, mesh, spec)
            xd = jaxmg.lu_solve(ad, bg, T_A=64, mesh=mesh, backend="native", donate=True)
            out["donated"] = relerr(a @ host(xd), b)
            assert out["donated"] < 1e-12 and ad.is_deleted(), (out, ad.is_deleted())
            fac = jaxmg.LU(to_global(a, mesh, spec), T_A=64, mesh=mesh, backend="native")
            for trans, op in (("N", a), ("T", a.T), ("C", a.T)):
                out[trans] = relerr(op @ host(fac.solve(bg, trans=trans)), b)
            with jax.set_mesh(mesh):
                grad = jax.jit(
                    jax.grad(lambda a, b: jax.numpy.sum(jaxmg.lu_solve(a, b, T_A=64, backend="native")), argnums=(0, 1))
                )
                ga, gb = grad(to_global(a, mesh, spec), bg)
            x = np.linalg.solve(a, b)
            b_bar = np.linalg.solve(a.T, np.ones(n))
            out["grad"] = max(relerr(host(gb), b_bar), relerr(host(ga), -np.outer(b_bar, x)))
            assert max(out.values()) < 1e-10, out
            return ", ".join(f"{k} {v:.1e}" for k, v in out.items())

        @case(f"public-promoted-factor-solves-{mname}-native")
        def _():
            """cho_solve / lu_solve with a native jaxmg.Cholesky / jaxmg.LU promote the saved factor
            and b together as jax.scipy.linalg: complex128 b with a float64 factor, float64 b with a
            float32 one; the result has JAX's dtype and solves a x = b."""
            import jaxmg.scipy.linalg as msla

            n, out = 256, {}
            g = general(n, np.float64, seed=5)
            a64 = g @ g.T / n + np.eye(n)
            for a_dtype, b_dtype in ((np.float64, np.complex128), (np.float32, np.float64)):
                a = a64.astype(a_dtype)
                b = (np.sin(np.arange(n)) + (1j * np.cos(np.arange(n)) if b_dtype == np.complex128 else 0)).astype(
                    b_dtype
                )
                ag = to_global(a, mesh, spec)
                chol = jaxmg.Cholesky(ag, T_A=64, mesh=mesh, backend="native")
                lu = jaxmg.LU(ag, T_A=64, mesh=mesh, backend="native")
                for name, x in (("cho", msla.cho_solve((chol, False), b)), ("lu", msla.lu_solve((lu, None), b))):
                    assert x.dtype == np.result_type(a_dtype, b_dtype), (name, x.dtype)
                    out[f"{name}-{np.dtype(a_dtype).name}-{np.dtype(b_dtype).name}"] = relerr(
                        a.astype(b_dtype) @ host(x), b
                    )
            assert max(out.values()) < 1e-4, out
            return ", ".join(f"{k} {v:.1e}" for k, v in out.items())


# --------------------------------------------------------------------------------------------
# The QR family: qr_factor once, Q (orgqr), R, least squares (Q^H b from the reflectors + back substitution)
# --------------------------------------------------------------------------------------------


def tall(m, n, dtype, seed=0, zero_col=None):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal((m, n))
    if zero_col is not None:
        a[:, zero_col] = 0
    return a.astype(dtype)


def k_qr(mesh, spec, m, n, tile, dtype, nrhs=0):
    if not hasattr(native, "qr_factor"):
        return "no QR kernels"
    grid = _harness.grid_of(mesh, spec)
    a = tall(m, n, dtype)
    rng = np.random.default_rng(5)
    b = rng.standard_normal((m,) if nrhs == 0 else (m, nrhs)).astype(dtype)
    f, tau, st = _harness.run(
        native.qr_factor, grid, tile, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole", "whole"]
    )
    assert int(host(st)) == 0, int(host(st))
    (q,) = _harness.run(functools.partial(native.qr_q, m=m), grid, tile, [f, tau], ["block", "whole"], ["block"])
    (r,) = _harness.run(native.qr_r, grid, tile, [f, tau], ["block", "whole"], ["block"])
    (x,) = _harness.run(
        native.qr_solve, grid, tile, [f, tau, to_global(b, mesh, P())], ["block", "whole", "whole"], ["whole"]
    )
    q, r, x = host(q), host(r), host(x)
    ref = np.linalg.lstsq(a.astype(np.complex128), b, rcond=None)[0]
    errs = dict(
        qr=relerr(q @ r, a),
        orth=float(np.abs(np.conj(q).T @ q - np.eye(n)).max()),
        lower=float(np.abs(np.tril(r, -1)).max()),
        lstsq=relerr(x, ref),
    )
    assert max(errs.values()) < tol(dtype), errs
    return ", ".join(f"{k} {v:.1e}" for k, v in errs.items())


for mname, mesh, spec in meshes():
    for dn, dtype in dtypes_of(mname):
        case(f"qr-{mname}-{dn}-256x256-T64")(lambda: k_qr(mesh, spec, 256, 256, 64, dtype))
        case(f"qr-{mname}-{dn}-322x192-T64-padded")(lambda: k_qr(mesh, spec, 322, 192, 64, dtype))
        case(f"lstsq-{mname}-{dn}-512x256-T32-nrhs3")(lambda: k_qr(mesh, spec, 512, 256, 32, dtype, nrhs=3))

    @case(f"qr-{mname}-float64-rank-deficient-then-usable", needs="qr_factor")
    def _():
        grid = _harness.grid_of(mesh, spec)
        a = tall(320, 192, np.float64, zero_col=77)
        f, tau, st = _harness.run(
            native.qr_factor, grid, 64, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole", "whole"]
        )
        (x,) = _harness.run(
            native.qr_solve,
            grid,
            64,
            [f, tau, to_global(np.ones(320), mesh, P())],
            ["block", "whole", "whole"],
            ["whole"],
        )
        st = int(host(st))
        assert st == 78 and np.all(np.isnan(host(x))), (st, host(x)[:3])
        return f"status {st}; then: {k_qr(mesh, spec, 320, 192, 64, np.float64)}"

    @case(f"lstsq-{mname}-float64-vmap", needs="qr_factor")
    def _():
        grid = _harness.grid_of(mesh, spec)
        mats = np.stack([tall(384, 256, np.float64, seed=s) for s in (0, 1)])

        def one(a, b):
            f, tau, st = native.qr_factor(a, grid=grid, tile=64)
            return native.qr_solve(f, tau, b, grid=grid, tile=64)[0], st

        bb, (x, st) = run_vmapped(one, 2, grid, mesh, mats)
        e = max(relerr(x[k], np.linalg.lstsq(mats[k], bb[k], rcond=None)[0]) for k in range(2))
        assert e < 1e-10 and np.all(st == 0), (e, st)
        return f"error {e:.1e}"


if _harness.PUBLIC_API and "qr" in native.FAMILIES:
    for mname, mesh, spec in meshes():

        @case(f"public-qr-lstsq-{mname}-float64-native-auto-grad")
        def _():
            m, n = 384, 256
            a = tall(m, n, np.float64, seed=4)
            b = np.sin(np.arange(m, dtype=np.float64))
            bg = to_global(b, mesh, P("x"))
            ref = np.linalg.lstsq(a, b, rcond=None)[0]
            out = native_and_auto(jaxmg.least_squares, "qr", a, bg, mesh, spec, lambda x: relerr(x, ref), 1e-10)
            q, r = jaxmg.qr(to_global(a, mesh, spec), T_A=64, mesh=mesh, backend="native")
            out["qr"] = relerr(host(q) @ host(r), a)
            with jax.set_mesh(mesh):
                grad = jax.jit(
                    jax.grad(
                        lambda a, b: jax.numpy.sum(jaxmg.least_squares(a, b, T_A=64, backend="native")), argnums=(1,)
                    )
                )
                (gb,) = grad(to_global(a, mesh, spec), bg)
            out["grad_b"] = relerr(host(gb), a @ np.linalg.solve(a.T @ a, np.ones(n)))
            assert max(out.values()) < 1e-9, out
            return ", ".join(f"{k} {v:.1e}" for k, v in out.items())

        @case(f"public-lstsq-wide-{mname}-float64-cond1e12")
        def _():
            """A wide a of condition 1e12 (full row rank): x = Q R^-H b, status 0, LAPACK's ratios."""
            m, n = 256, 640
            rng = np.random.default_rng(5)
            u, v = np.linalg.qr(rng.standard_normal((m, m)))[0], np.linalg.qr(rng.standard_normal((n, m)))[0]
            a = (u * np.geomspace(1.0, 1e-12, m)) @ v.T
            b = rng.standard_normal(m)
            ag, bg = to_global(a, mesh, spec), to_global(b, mesh, P("x"))
            x, st = jaxmg.least_squares(ag, bg, T_A=64, mesh=mesh, backend="native", return_status=True)
            x, eps, na = host(x), np.finfo(np.float64).eps, np.linalg.norm(a, 2)
            r = a @ x - b
            out = {
                "residual": np.linalg.norm(r) / (n * eps * na * np.linalg.norm(x)),
                "normal": np.linalg.norm(a.T @ r) / (na * (na * np.linalg.norm(x) + np.linalg.norm(b)) * n * eps),
            }
            assert int(host(st)) == 0 and max(out.values()) <= 30, (int(host(st)), out)
            return ", ".join(f"{k} {v:.1e}" for k, v in out.items())

# --------------------------------------------------------------------------------------------
# The eigensolver family: syevd and sygvd, LAPACK's scaled residual and orthogonality
# --------------------------------------------------------------------------------------------


def hermitian(n, dtype, seed=0):
    """(a with junk above the diagonal, the Hermitian indefinite matrix it stands for)."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, n))
    if np.issubdtype(dtype, np.complexfloating):
        g = g + 1j * rng.standard_normal((n, n))
    a = (g + np.conj(g).T) / 2
    return (np.tril(a) + np.triu(np.full((n, n), 5.0), 1)).astype(dtype), a


def eig_measures(a, w, v, dtype, b=None):
    """(max eigenvalue error / (||A||_1 N eps), ||A V - B V diag(w)||_1 / (||A||_1 ||V||_1 N eps),
    ||V^H B V - I||_1 / (||B||_1 N eps)): LAPACK's measures, each below 30 to pass."""
    import scipy.linalg

    n, eps = a.shape[0], np.finfo(dtype).eps
    b = np.eye(n) if b is None else b
    v = v.astype(np.complex128)
    an = np.linalg.norm(a, 1)
    ref = scipy.linalg.eigh(a, b, eigvals_only=True)
    werr = np.abs(w - ref).max() / (an * n * eps) / np.linalg.cond(b)
    res = np.linalg.norm(a @ v - (b @ v) * w, 1) / (an * np.linalg.norm(v, 1) * n * eps)
    orth = np.linalg.norm(np.conj(v).T @ b @ v - np.eye(n), 1) / (np.linalg.norm(b, 1) * n * eps)
    return werr, res, orth


def k_eig(mesh, spec, n, tile, dtype, general=False):
    grid = _harness.grid_of(mesh, spec)
    given, a = hermitian(n, dtype)
    if general:
        given_b, b = spd(n, dtype, seed=3)
        w, v, st = run_sygvd(grid, tile, given, given_b)
    else:
        b = None
        w, v, st = _harness.run(
            native.syevd, grid, tile, [to_global(given, mesh, grid.spec)], ["block"], ["whole", "block", "whole"]
        )
    assert int(host(st)) == 0, int(host(st))
    w = host(w)
    assert np.all(np.diff(w) >= 0)
    m = eig_measures(a, w, host(v), dtype, b)
    assert max(m) < 30, m
    return "eigenvalue error, residual, orthogonality (units of N eps): " + ", ".join(f"{x:.2f}" for x in m)


if hasattr(native, "syevd"):
    for mname, mesh, spec in meshes():
        for dn, dtype in dtypes_of(mname):
            case(f"eig-{mname}-{dn}-n256-T64")(lambda: k_eig(mesh, spec, 256, 64, dtype))
            case(f"eig-{mname}-{dn}-n200-T64-padded")(lambda: k_eig(mesh, spec, 200, 64, dtype))
            case(f"sygvd-{mname}-{dn}-n256-T64")(lambda: k_eig(mesh, spec, 256, 64, dtype, general=True))
            case(f"sygvd-{mname}-{dn}-n192-T64-family-tile")(lambda: k_eig(mesh, spec, 192, 64, dtype, general=True))

        @case(f"sygvd-{mname}-float64-b-not-positive-definite-then-usable")
        def _():
            grid = _harness.grid_of(mesh, spec)
            n = 256
            _, a = hermitian(n, np.float64)
            _, b = spd(n, np.float64, seed=3)
            b[100, 100] = -1e3
            w, v, st = run_sygvd(grid, 64, a, b)
            st = int(host(st))
            assert st != 0 and np.all(np.isnan(host(w))) and np.all(np.isnan(host(v))), st
            return f"status {st}; then: {k_eig(mesh, spec, 256, 64, np.float64, general=True)}"


def k_polar(mesh, spec, m, n, cond, dtype, svd=False):
    """Native polar (QDWH) or gesvd (polar + native syevd): orthogonality and backward error."""
    grid = _harness.grid_of(mesh, spec)
    a = conditioned(m, n, cond, dtype)
    eps = np.finfo(dtype).eps
    if svd:
        fn = functools.partial(native.gesvd, full_matrices=False)
        u, s, vh, st = _harness.run(
            fn, grid, 64, [to_global(a, mesh, grid.spec)], ["block"], ["block", "whole", "block", "whole"]
        )
        u, s, vh = host(u).astype(np.complex128), host(s), host(vh)
        back = np.linalg.norm(a - (u * s) @ vh) / np.linalg.norm(a)
        sv = np.abs(s - np.linalg.svd(a, compute_uv=False)).max()
        orth = np.linalg.norm(np.conj(u).T @ u - np.eye(n)) / np.sqrt(n)
        extra = f", singular value error {sv:.1e}"
        assert sv < 100 * eps, sv
    else:
        u, h, st = _harness.run(
            native.polar, grid, 64, [to_global(a, mesh, grid.spec)], ["block"], ["block", "block", "whole"]
        )
        u, h = host(u).astype(np.complex128), host(h)
        back = np.linalg.norm(a - u @ h) / np.linalg.norm(a)
        orth = np.linalg.norm(np.conj(u).T @ u - np.eye(n)) / np.sqrt(n)
        extra = ""
    assert int(host(st)) == 0, int(host(st))
    limit = 1e-12 if np.dtype(dtype) in (np.float64, np.complex128) else 100 * eps
    assert orth <= limit and back <= limit, (orth, back)
    return f"orthogonality {orth:.1e}, backward error {back:.1e}{extra}"


if hasattr(native, "polar"):
    for mname, mesh, spec in meshes():
        for dn, dtype in dtypes_of(mname):
            conds = (1.0, 1e6, 1e12) if dn in ("float64", "complex128") else (1e3,)
            for cond in conds:
                case(f"polar-{mname}-{dn}-m256n192-cond{cond:.0e}")(lambda: k_polar(mesh, spec, 256, 192, cond, dtype))
            case(f"svd-{mname}-{dn}-m256n192-cond1e+04")(lambda: k_polar(mesh, spec, 256, 192, 1e4, dtype, svd=True))

if _harness.PUBLIC_API and "polar" in native.FAMILIES:
    for mname, mesh, spec in meshes():
        for dtype in (np.float32, np.float64):
            dn = np.dtype(dtype).name

            @case(f"public-polar-gesvd-{mname}-{dn}-native-eager-and-jit")
            def _(mesh=mesh, spec=spec, dtype=dtype):
                m, n = 320, 192
                a = conditioned(m, n, 1e3, dtype, seed=5)
                eps = np.finfo(dtype).eps
                limit = 1e-12 if dtype == np.float64 else 100 * eps
                out = {}
                u, h = jaxmg.polar(to_global(a, mesh, spec), mesh=mesh, backend="native")
                u, h = host(u).astype(np.float64), host(h).astype(np.float64)
                out["polar_back"] = np.linalg.norm(a - u @ h) / np.linalg.norm(a)
                out["polar_orth"] = np.linalg.norm(u.T @ u - np.eye(n)) / np.sqrt(n)
                with jax.set_mesh(mesh):
                    svd = jax.jit(lambda a: jaxmg.gesvd(a, backend="native"))
                    uu, s, vh = (host(x).astype(np.float64) for x in svd(to_global(a, mesh, spec)))
                out["svd_back"] = np.linalg.norm(a - (uu * s) @ vh) / np.linalg.norm(a)
                out["svd_values"] = np.abs(s - np.linalg.svd(a.astype(np.float64), compute_uv=False)).max()
                assert jaxmg.route("polar", a.shape, a.dtype, mesh) == "distributed"  # svd, polar: no crossover
                assert max(out.values()) <= limit, out
                return ", ".join(f"{k} {v:.1e}" for k, v in out.items())


if _harness.PUBLIC_API and "polar" in native.FAMILIES:
    for mname, mesh, spec in meshes():

        @case(f"public-polar-derivative-{mname}-float64-native-one-syevd")
        def _(mesh=mesh, spec=spec):
            """jax.grad of a loss of polar's factors on the native route: QDWH computes no
            eigendecomposition, so the derivative runs one native syevd of h, inside the polar
            call; the gradient is that of U V^H and V S V^H from JAX's SVD of the whole matrix."""
            m, n = 320, 192
            a = conditioned(m, n, 1e3, np.float64, seed=6)
            w = np.random.default_rng(7).standard_normal((m, n))

            def loss(x, polar):
                u, h = polar(x)
                return jax.numpy.sum(u * w) + jax.numpy.sum(h**2)

            def reference(x):
                u, s, vh = jax.numpy.linalg.svd(x, full_matrices=False)
                return u @ vh, (vh.conj().T * s) @ vh

            grad = jax.jit(jax.grad(functools.partial(loss, polar=lambda x: jaxmg.polar(x, backend="native"))))
            with jax.set_mesh(mesh):
                x = to_global(a, mesh, spec)
                syevd = grad.lower(x).compile().as_text().count('custom_call_target="jaxmg_syevd"')
                got = host(grad(x))
            want = np.asarray(jax.grad(functools.partial(loss, polar=reference))(jax.numpy.asarray(a)))
            err = relerr(got, want)
            assert syevd == 1 and err < 1e-9, (syevd, err)
            return f"one native syevd; gradient error {err:.1e}"


@case("gemm-cublas-products-every-dtype-and-op")
def _():
    from jaxmg.kernels.ffi import gemm

    assert gemm.available(), "the native library has no cuBLAS product (capability gemm)"
    rng = np.random.default_rng(11)
    worst = 0.0
    for dtype in DTYPES:
        for adj_x in (False, True):
            for adj_y in (False, True):
                op = lambda m, adj: m.conj().T if adj else m  # noqa: E731
                x = rng.standard_normal((7, 5) if adj_x else (5, 7)).astype(dtype)
                y = rng.standard_normal((3, 7) if adj_y else (7, 3)).astype(dtype)
                if np.iscomplexobj(x):
                    x = x + 1j * rng.standard_normal(x.shape).astype(x.real.dtype)
                    y = y + 1j * rng.standard_normal(y.shape).astype(y.real.dtype)
                got = jax.jit(gemm.product, static_argnums=(2, 3))(x, y, adj_x, adj_y)
                ref = op(x.astype(np.complex128), adj_x) @ op(y.astype(np.complex128), adj_y)
                err = relerr(host(got), ref)
                assert err < 100 * np.finfo(dtype).eps, (dtype, adj_x, adj_y, err)
                worst = max(worst, err / np.finfo(dtype).eps)
    xs = rng.standard_normal((3, 6, 4))
    ys = rng.standard_normal((3, 4, 2))
    batched = jax.vmap(gemm.product)(xs, ys)
    assert relerr(host(batched), xs @ ys) < 1e-14
    f = lambda x, y: jax.numpy.sum(gemm.product(x, y, True, False) ** 2)  # noqa: E731
    g = jax.grad(f, argnums=(0, 1))(xs[0].T, ys[0])
    g_ref = jax.grad(lambda x, y: jax.numpy.sum((x.T @ y) ** 2), argnums=(0, 1))(xs[0].T, ys[0])
    assert max(relerr(host(a), host(b)) for a, b in zip(g, g_ref)) < 1e-13
    return f"worst {worst:.1f} eps; vmap and grad agree"


@case("trmm-cublas-triangular-products-every-dtype-and-flag")
def _():
    from jaxmg.kernels.ffi import gemm

    rng = np.random.default_rng(12)
    worst, count = 0.0, 0
    for dtype in DTYPES:
        for lower in (False, True):
            for adj in (False, True):
                for unit in (False, True):
                    for left in (False, True):
                        t = rng.standard_normal((6, 6)).astype(dtype)
                        x = rng.standard_normal((6, 4) if left else (4, 6)).astype(dtype)
                        if np.iscomplexobj(t):
                            t = t + 1j * rng.standard_normal(t.shape).astype(t.real.dtype)
                            x = x + 1j * rng.standard_normal(x.shape).astype(x.real.dtype)
                        tri = np.tril(t) if lower else np.triu(t)
                        if unit:
                            np.fill_diagonal(tri, 1)
                        op = tri.conj().T if adj else tri
                        ref = op.astype(np.complex128) @ x if left else x.astype(np.complex128) @ op
                        fn = jax.jit(
                            functools.partial(gemm.triangular_product, lower=lower, adj=adj, unit=unit, left=left)
                        )
                        err = relerr(host(fn(t, x)), ref)
                        assert err < 100 * np.finfo(dtype).eps, (dtype, lower, adj, unit, left, err)
                        worst, count = max(worst, err / np.finfo(dtype).eps), count + 1
    t, x = rng.standard_normal((5, 5)), rng.standard_normal((5, 3))
    f = lambda t, x: jax.numpy.sum(gemm.triangular_product(t, x, lower=True, unit=True) ** 2)  # noqa: E731
    ref_f = lambda t, x: jax.numpy.sum(((jax.numpy.tril(t, -1) + jax.numpy.eye(5)) @ x) ** 2)  # noqa: E731
    g, g_ref = jax.grad(f, argnums=(0, 1))(t, x), jax.grad(ref_f, argnums=(0, 1))(t, x)
    assert max(relerr(host(a), host(b)) for a, b in zip(g, g_ref)) < 1e-13
    return f"{count} cases, worst {worst:.1f} eps; grad agrees"


if _harness.PUBLIC_API and NPROC == 1:

    @case("inverse-one-gpu-cublas-products-match-xla-dots")
    def _():
        from jaxmg.kernels.ffi import gemm

        n = 1500  # two recursion levels below the base 1024, an odd order
        a_in, a = spd(n, np.float64, 3)
        g = np.random.default_rng(4).standard_normal((n, n)) + n**0.5 * np.eye(n)
        mesh1 = Mesh(np.array(jax.devices()[:1]), ("x",), axis_types=(AxisType.Explicit,))
        assert gemm.one_gpu_products(n) == (gemm.product, gemm.triangular_product, gemm.hermitian_inverse)
        out = {}
        for backend in ("native", "portable"):
            with jax.set_mesh(mesh1):
                inv_a = jax.jit(lambda a: jaxmg.Cholesky(a, backend=backend).inverse())(a_in)
                inv_g = jax.jit(lambda g: jaxmg.LU(g, backend=backend).inverse())(g)
            out[f"{backend}_chol"] = relerr(host(inv_a) @ a, np.eye(n))
            out[f"{backend}_lu"] = relerr(host(inv_g) @ g, np.eye(n))
        assert max(out.values()) < 1e-10, out
        # the one-call potri alone: every dtype, one leaf and several levels, junk above L not read;
        # the library's leaves, then small ones (every trmm side/op and herk through the gemm recursion)
        # (the small leaves with small chunks: every leaf product over several chunks and a remainder)
        defaults = gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.HERK_LEAF, gemm.TRMM_CHUNK
        try:
            for leaves in (defaults, (64, 48, 40, 100), (32, 96, 40, 37)):
                gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.HERK_LEAF, gemm.TRMM_CHUNK = leaves
                for dtype in (np.float32, np.float64, np.complex64, np.complex128):
                    for order in (300, 1500):
                        _, ad = spd(order, dtype, 5)
                        low = np.linalg.cholesky(ad.astype(np.complex128 if np.iscomplexobj(ad) else np.float64))
                        junk = np.triu(np.ones((order, order)), 1).astype(dtype)
                        inverse = jax.jit(lambda l: gemm.hermitian_inverse(l))  # traced with these leaves
                        got = host(inverse(jax.numpy.asarray(low.astype(dtype) + junk)))
                        err = relerr(got.astype(np.complex128) @ ad, np.eye(order))
                        assert err < (2e-3 if np.finfo(dtype).bits == 32 else 1e-10), (leaves, dtype, order, err)
                        assert np.allclose(got, np.conj(got).T), (leaves, dtype, order)
                        out[f"potri_{leaves[0]}_{np.dtype(dtype).name}_{order}"] = err
        finally:
            gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.HERK_LEAF, gemm.TRMM_CHUNK = defaults
        f = lambda l: jax.numpy.sum(jax.numpy.real(gemm.hermitian_inverse(l)) ** 2)  # noqa: E731
        ref = lambda l: jax.numpy.sum(
            jax.numpy.real(
                jax.numpy.linalg.inv(  # noqa: E731
                    jax.numpy.tril(l) @ jax.numpy.tril(l).T
                )
            )
            ** 2
        )
        low = jax.numpy.asarray(np.linalg.cholesky(a[:64, :64]))
        g, g_ref = host(jax.grad(f)(low)), host(jax.grad(ref)(low))
        assert relerr(g, g_ref) < 1e-10, relerr(g, g_ref)
        return ", ".join(f"{k} {v:.1e}" for k, v in out.items())


# --------------------------------------------------------------------------------------------
# The engine's version and its guards; status words on the call's stream
# --------------------------------------------------------------------------------------------


@case("engine-version-and-guards")
def _():
    """The loaded cuSOLVERMp's version, as the library reports it, agrees with its wheel; the
    guards in force are reported; below 0.9.1 a T_A that is not a power of two is refused by
    syevd (and a 2-D grid where there are 4 processes or more), a power of two runs."""
    from importlib.metadata import version as wheel_version

    from jaxmg import _native
    from jaxmg.kernels.native import _engine

    v = _engine.engine_version()
    info = native.info()
    code, probed = _native.cusolvermp_version(), _native.probe_cusolvermp_version(0)
    assert v is not None, info
    try:
        wheel = tuple(int(p) for p in wheel_version("nvidia-cusolvermp-cu13").split(".")[:3])
    except Exception:  # noqa: BLE001
        wheel = None
    assert wheel is None or wheel == v, (wheel, v, code, probed)  # the version code's encoding
    assert info["engine"] == f"cuSOLVERMp {_engine.text(v)}", info
    detail = f"engine {info['engine']} (code {code}), wheel {wheel}, guards {info['engine_guards']}"
    if not _harness.PUBLIC_API:
        return detail
    mname, mesh, spec = meshes()[0]
    _, a = hermitian(128, np.float64)
    ag = to_global(a, mesh, spec)
    w, _ = jaxmg.syevd(ag, T_A=32, mesh=mesh, backend="native")
    assert np.allclose(host(w), np.linalg.eigvalsh(a), atol=1e-10)
    if _engine.affected(v):
        try:
            jaxmg.syevd(ag, T_A=20, mesh=mesh, backend="native")
        except ValueError as e:
            assert "T_A=20" in str(e) and "0.9.1" in str(e), e
        else:
            raise AssertionError("T_A=20 ran below 0.9.1")
    return detail


@case("status-on-the-call-stream-failures-then-usable")
def _():
    """Failures whose status a kernel writes on the call's stream, five times in a row, each
    followed by a good call on the same grid: not positive definite (potrs: info, or n + 1) and
    B not positive definite (sygvd: info - n) give their status and NaN outputs, never a hang,
    and the good calls their right answers."""
    mname, mesh, spec = meshes()[0]
    grid = _harness.grid_of(mesh, spec)
    n = 256
    bad = not_positive_definite(n, 100, -1.0)
    good, ref = spd(n, np.float64, 2)
    _, h = hermitian(n, np.float64)
    _, b_bad = spd(n, np.float64, seed=3)
    b_bad[100, 100] = -1e3
    out = []
    for _ in range(5):
        x, ld, st = run_potrs(grid, 64, bad, np.ones(n))
        x2, _, st2 = run_potrs(grid, 64, good, np.ones(n))
        w, v, st3 = run_sygvd(grid, 64, h, b_bad)
        st, st2, st3 = int(host(st)), int(host(st2)), int(host(st3))
        assert st != 0 and np.all(np.isnan(host(x))) and np.isnan(float(host(ld))), st
        assert st2 == 0 and relerr(host(x2), np.linalg.solve(ref, np.ones(n))) < 1e-10, st2
        assert st3 != 0 and np.all(np.isnan(host(w))) and np.all(np.isnan(host(v))), st3
        out.append((st, st3))
    return f"statuses (potrs, sygvd) {out[0]}, five rounds; then {k_eig(mesh, spec, 256, 64, np.float64)}"


failed = [n for n, ok in RESULTS if not ok]
log(f"SUMMARY processes={NPROC} passed={len(RESULTS) - len(failed)} failed={len(failed)} {failed}")
sys.stdout.flush()
sys.exit(1 if failed else 0)
