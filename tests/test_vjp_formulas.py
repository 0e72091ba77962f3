"""The VJP formulas of jaxmg.autodiff.matrix_functions against jax.vjp of jnp.linalg, and on
sharded inputs (Explicit and Auto mesh axes, eagerly and inside jit) against the unsharded result.

To stay fast, the inputs, cotangents and references of many cases are built in one jitted
program, and the formulas of many cases run in another.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from helpers import hermitian_matrix, random_matrix, spd_matrix  # noqa: E402
from jaxmg.autodiff import _dist  # noqa: E402
from jaxmg.autodiff import matrix_functions as mf  # noqa: E402

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
TOL = {np.float32: 2e-3, np.complex64: 2e-3, np.float64: 1e-9, np.complex128: 1e-9}

pytestmark = pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 (simulated) devices")

# The test programs are tiny: cheaper XLA:CPU code generation keeps compilation (most of the time) short.
_FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _jit(fn):
    return jax.jit(fn, compiler_options=_FAST)


# --------------------------------------------------------------------------- data


_rand, _herm, _hpd = random_matrix, hermitian_matrix, spd_matrix


def _real(dtype):
    return np.finfo(dtype).dtype


def _close(ours, ref, dtype, what=""):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    err = np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-30)
    assert err < TOL[dtype], f"{what}: relative error {err:.2e} (dtype {np.dtype(dtype).name})"


def _check(result, ref, dtype, name):
    results = result if isinstance(result, tuple) else (result,)
    refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    assert len(results) == len(refs), name
    for i, (x, y) in enumerate(zip(results, refs)):
        _close(x, y, dtype, f"{name}[{i}]")


def _cts_of(loss, *outs):
    """JAX cotangents of the outputs for a real scalar loss of them."""
    return jax.vjp(loss, *outs)[1](jnp.ones((), _real(outs[-1].dtype)))


def _phase_free_loss(rng, n, dtype):
    """A loss of (w, v) invariant to the phase of each eigenvector."""
    g1 = jnp.asarray(rng.standard_normal((n, n)), _real(dtype))
    g2 = jnp.asarray(_rand(rng, (n, n), dtype))
    c = jnp.asarray(rng.standard_normal(n), _real(dtype))
    gw = jnp.asarray(rng.standard_normal(n), _real(dtype))

    def loss(w, v):
        return (jnp.sum(gw * w) + jnp.sum(g1 * jnp.abs(v) ** 2)
                + jnp.real(jnp.sum(g2 * ((v * c) @ v.conj().T))))

    return loss


def _svd_loss(rng, n, dtype, use_u=True, use_vh=True):
    """A loss of (u, s, vh) invariant to the common phase of each pair (u_i, v_i)."""
    g1 = jnp.asarray(rng.standard_normal(n), _real(dtype))
    g2 = jnp.asarray(_rand(rng, (n, n), dtype))
    g3 = jnp.asarray(rng.standard_normal((n, n)), _real(dtype))
    c = jnp.asarray(rng.standard_normal(n), _real(dtype))
    gs = jnp.asarray(rng.standard_normal(n), _real(dtype))

    def loss(u, s, vh):
        out = jnp.sum(gs * s)
        if use_u:
            out = out + jnp.sum(g1 * jnp.abs(u) ** 2)
        if use_vh:
            out = out + jnp.sum(g3 * jnp.abs(vh) ** 2)
        if use_u and use_vh:  # couples the phases of u_i and v_i
            out = out + jnp.real(jnp.sum(g2 * ((u[:n] * c) @ vh)))
        return out

    return loss


# --------------------------------------------------------------------------- cases
# A case is (fn, kwargs, data, build): ``build(*data)`` (traceable) returns the formula's
# positional arguments and a thunk computing the reference with jax.vjp.


def _cholesky_case(rng, n, dtype):
    def build(a, ct):
        return (jnp.linalg.cholesky(a), ct), lambda: jax.vjp(jnp.linalg.cholesky, a)[1](ct)[0]

    return mf.cholesky_vjp, {}, (_hpd(rng, n, dtype), _rand(rng, (n, n), dtype)), build


def _qr_case(rng, n, dtype, m=None, use_r=True):
    m = 2 * n if m is None else m

    def build(a, cq, cr):
        q, r = jnp.linalg.qr(a, mode="reduced")
        ref = lambda: jax.vjp(lambda a: tuple(jnp.linalg.qr(a)), a)[1]((cq, cr if use_r else 0 * cr))[0]  # noqa: E731
        return (a, q, r, cq, cr if use_r else None), ref

    data = (_rand(rng, (m, n), dtype), _rand(rng, (m, n), dtype), _rand(rng, (n, n), dtype))
    return mf.qr_vjp, {}, data, build


def _eigh_case(rng, n, dtype, use_v=True):
    loss = _phase_free_loss(rng, n, dtype)

    def build(a):
        w, v = jnp.linalg.eigh(a)
        cw, cv = _cts_of(loss, w, v)
        cv = cv if use_v else 0 * cv
        ref = lambda: jax.vjp(lambda a: tuple(jnp.linalg.eigh(a)), a)[1]((cw, cv))[0]  # noqa: E731
        return (w, v, cw, cv if use_v else None), ref

    return mf.eigh_vjp, {}, (_herm(rng, n, dtype),), build


def _generalized_eigh(a, b):
    """A v = w B v, v^H B v = I, by Cholesky reduction (differentiable with JAX)."""
    a = (a + a.conj().T) / 2
    b = (b + b.conj().T) / 2
    L = jnp.linalg.cholesky(b)
    x = jax.scipy.linalg.solve_triangular(L, a, lower=True)
    c = jax.scipy.linalg.solve_triangular(L, x.conj().T, lower=True).conj().T
    w, u = jnp.linalg.eigh(c)
    return w, jax.scipy.linalg.solve_triangular(L.conj().T, u, lower=False)


def _sygvd_case(rng, n, dtype):
    loss = _phase_free_loss(rng, n, dtype)

    def build(a, b):
        w, v = _generalized_eigh(a, b)
        cw, cv = _cts_of(loss, w, v)
        return (a, b, w, v, cw, cv), lambda: jax.vjp(_generalized_eigh, a, b)[1]((cw, cv))

    return mf.sygvd_vjp, {}, (_herm(rng, n, dtype), _hpd(rng, n, dtype)), build


def _svd_case(rng, n, dtype, m=None, use_u=True, use_vh=True):
    m = 2 * n if m is None else m
    loss = _svd_loss(rng, n, dtype, use_u, use_vh)

    def build(a):
        u, s, vh = jnp.linalg.svd(a, full_matrices=False)
        cu, cs, cvh = _cts_of(loss, u, s, vh)
        def ref():
            return jax.vjp(lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)), a)[1]((cu, cs, cvh))[0]

        return (a, u, s, vh, cu if use_u else None, cs, cvh if use_vh else None), ref

    return mf.svd_vjp, {}, (_rand(rng, (m, n), dtype),), build


def _svd_full_case(rng, n, dtype, m=None):
    """u (M, M): a loss that depends on the extra columns through their projector U2 U2^H."""
    m = 2 * n + 2 if m is None else m
    base = _svd_loss(rng, n, dtype)
    g = jnp.asarray(_rand(rng, (m, m), dtype))

    def loss_full(u, s, vh):
        u2 = u[:, n:]
        return base(u[:, :n], s, vh) + jnp.real(jnp.sum(g * (u2 @ u2.conj().T)))

    def loss_reduced(a):  # the same loss through the reduced SVD: U2 U2^H = I - U1 U1^H
        u1, s, vh = jnp.linalg.svd(a, full_matrices=False)
        return base(u1, s, vh) + jnp.real(jnp.sum(g * (jnp.eye(m, dtype=dtype) - u1 @ u1.conj().T)))

    def build(a):
        u, s, vh = jnp.linalg.svd(a, full_matrices=True)
        cu, cs, cvh = _cts_of(loss_full, u, s, vh)
        return (a, u, s, vh, cu, cs, cvh), lambda: jax.vjp(loss_reduced, a)[1](jnp.ones((), _real(dtype)))[0]

    return mf.svd_vjp, {"full_matrices": True}, (_rand(rng, (m, n), dtype),), build


def _polar_ref(a):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    return u @ vh, (vh.conj().T * s) @ vh


def _polar_with_eig(a, u_p, h, cu, ch, sig, v, **kwargs):
    return mf.polar_vjp(a, u_p, h, cu, ch, h_eig=(sig, v), **kwargs)


def _polar_case(rng, n, dtype, m=None, with_eig=False, use_u=True):
    m = 2 * n if m is None else m

    def build(a, cu, ch):
        u_p, h = _polar_ref(a)
        ref = lambda: jax.vjp(_polar_ref, a)[1]((cu if use_u else 0 * cu, ch))[0]  # noqa: E731
        args = (a, u_p, h, cu if use_u else None, ch)
        if with_eig:  # the eigenbasis of h, from the SVD of a: fully distributed
            _, s, vh = jnp.linalg.svd(a, full_matrices=False)
            args += (s, vh.conj().T)
        return args, ref

    data = (_rand(rng, (m, n), dtype), _rand(rng, (m, n), dtype), _rand(rng, (n, n), dtype))
    return (_polar_with_eig if with_eig else mf.polar_vjp), {}, data, build


CASES = {
    "cholesky": _cholesky_case,
    "qr": _qr_case,
    "eigh": _eigh_case,
    "sygvd": _sygvd_case,
    "svd": _svd_case,
    "polar": _polar_case,
}


def _build(items, refs=True):
    """items: (name, fn, kwargs, data, build). Arguments (and references) in one program."""
    def run(datas):
        out = []
        for (_, _, _, _, build), data in zip(items, datas):
            args, ref = build(*data)
            out.append((args, ref() if refs else None))
        return out

    return _jit(run)([tuple(jnp.asarray(x) for x in item[3]) for item in items])


def _formulas(items, argss, **extra):
    """Every formula in one jitted program."""
    def run(*argss):
        return [fn(*args, **kwargs, **extra) for (_, fn, kwargs, _, _), args in zip(items, argss)]

    return _jit(run)(*argss)


def _check_all(items, dtype):
    built = _build(items)
    results = _formulas(items, [args for args, _ in built])
    for (name, *_), result, (_, ref) in zip(items, results, built):
        _check(result, ref, dtype, name)
    return results


# --------------------------------------------------------------------------- against jax.vjp


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_matches_jax_vjp(dtype):
    """Every formula against jax.vjp of its jnp.linalg reference (N = 12, M = 24)."""
    rng = np.random.default_rng(0)
    _check_all([(name, *case(rng, 12, dtype)) for name, case in CASES.items()], dtype)


def test_variants():
    """complex128: cotangents left out (None), square inputs, full_matrices SVD, polar with a
    given eigenbasis; eagerly (outside jit) too, and Hermitian outputs exactly Hermitian."""
    dtype = np.complex128
    rng = np.random.default_rng(1)
    items = [(f"svd u={u} vh={vh}", *_svd_case(rng, 8, dtype, use_u=u, use_vh=vh))
             for u, vh in [(True, False), (False, True), (False, False)]]
    items += [(case.__name__ + " square", *case(rng, 8, dtype, m=8)) for case in (_qr_case, _svd_case, _polar_case)]
    items += [
        ("svd full_matrices", *_svd_full_case(rng, 6, dtype)),
        ("svd full_matrices square", *_svd_full_case(rng, 6, dtype, m=6)),
        ("polar h_eig", *_polar_case(rng, 8, dtype, with_eig=True)),
        ("qr r_bar=None", *_qr_case(rng, 8, dtype, use_r=False)),
        ("polar u_p_bar=None", *_polar_case(rng, 8, dtype, use_u=False)),
        ("eigh v_bar=None", *_eigh_case(rng, 8, dtype, use_v=False)),
    ]
    results = _check_all(items, dtype)
    a_bar = np.asarray(results[-1])
    np.testing.assert_array_equal(a_bar, a_bar.conj().T)
    built = _build(items[-3:], refs=False)  # eagerly: each formula runs as its own jitted program
    for (name, fn, kwargs, _, _), (args, _), expected in zip(items[-3:], built, results[-3:]):
        np.testing.assert_allclose(np.asarray(fn(*args, **kwargs)), np.asarray(expected), rtol=1e-12, atol=1e-12)


def test_eigh_degenerate():
    """Exactly repeated eigenvalues: finite, and right for a loss invariant inside eigenspaces."""
    rng = np.random.default_rng(3)
    n = 8
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.array([1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0])
    a = jnp.asarray((q * lam) @ q.T)
    c = jnp.asarray(np.array([0.5, 0.5, 0.5, -1.0, 2.0, 2.0, 0.3, 1.5]))  # constant on clusters
    g = jnp.asarray(rng.standard_normal((n, n)))
    e = rng.standard_normal((n, n))
    e = jnp.asarray((e + e.T) / 2)
    h = 1e-5

    def loss(w, v):
        return jnp.sum(g * ((v * c) @ v.T)) + jnp.sum(w ** 2)

    @_jit
    def run(a):
        w, v = jnp.linalg.eigh(a)
        a_bar = mf.eigh_vjp(w, v, *_cts_of(loss, w, v))
        fd = (loss(*jnp.linalg.eigh(a + h * e)) - loss(*jnp.linalg.eigh(a - h * e))) / (2 * h)
        return a_bar, jnp.sum(a_bar * e), fd

    a_bar, directional, fd = run(a)
    assert np.all(np.isfinite(np.asarray(a_bar)))
    np.testing.assert_allclose(directional, fd, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------- sharded


LAYOUTS = [
    pytest.param((8,), ("i",), P("i", None), id="8-rows"),
    pytest.param((8,), ("i",), P(None, "i"), id="8-cols"),
    pytest.param((4, 2), ("x", "y"), P("x", "y"), id="4x2"),
    pytest.param((2, 4), ("x", "y"), P("x", "y"), id="2x4"),
]
AXES = [pytest.param(AxisType.Explicit, id="explicit"), pytest.param(AxisType.Auto, id="auto")]
EAGER = [((4, 2), P("x", "y"), AxisType.Explicit), ((8,), P(None, "i"), AxisType.Auto)]  # also run eagerly
EAGER_CASES = ("cholesky", "sygvd", "svd", "polar h_eig")  # (the eager path is the same for all)


def _spec2(sharding):
    assert isinstance(sharding, NamedSharding), sharding
    return _dist._pad(sharding.spec, 2)


def _shard(x, sh):
    """Matrices in layout ``sh``, vectors replicated on its mesh."""
    if x is None:
        return None
    if x.ndim == 2:
        return jax.device_put(x, sh)
    return jax.device_put(x, NamedSharding(sh.mesh, P()))


def _sharded_cases(rng, n, dtype, names):
    """(items, arguments, unsharded results)."""
    more = {"polar h_eig": lambda: _polar_case(rng, n, dtype, with_eig=True),
            "svd full": lambda: _svd_full_case(rng, n, dtype, m=2 * n)}
    items = [(name, *(more[name]() if name in more else CASES[name](rng, n, dtype))) for name in names]
    argss = [args for args, _ in _build(items, refs=False)]
    return items, argss, _formulas(items, argss)


@pytest.fixture(scope="module")
def float64_cases():
    return _sharded_cases(np.random.default_rng(4), 16, np.float64, list(CASES) + ["polar h_eig"])


def _run_sharded(cases, sh, dtype, eager):
    """Every case on inputs in layout ``sh``: all in one jitted program (and a few eagerly)."""
    items, argss, expected = cases
    placed = [[_shard(x, sh) for x in args] for args in argss]
    extra = {"sharding": sh} if _dist.kind(sh) == "auto" else {}  # an Auto tracer carries no layout
    runs = [("jit", range(len(items)), _formulas(items, placed, **extra))]
    if eager:
        chosen = [i for i, item in enumerate(items) if item[0] in EAGER_CASES]
        runs.append(("eager", chosen, [items[i][1](*placed[i], **items[i][2]) for i in chosen]))
    for mode, chosen, results in runs:
        for i, result in zip(chosen, results):
            outs = result if isinstance(result, tuple) else (result,)
            refs = expected[i] if isinstance(expected[i], tuple) else (expected[i],)
            for k, (out, ref) in enumerate(zip(outs, refs)):
                _close(out, ref, dtype, f"{items[i][0]} {mode} [{k}]")
                assert _spec2(out.sharding) == _spec2(sh), (items[i][0], mode, out.sharding)


@pytest.mark.parametrize("axis_type", AXES)
@pytest.mark.parametrize("shape,names,spec", LAYOUTS)
def test_sharded(float64_cases, shape, names, spec, axis_type):
    """All formulas, float64, every layout and axis type, inside jit; eagerly on two of them."""
    mesh = jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape))
    _run_sharded(float64_cases, NamedSharding(mesh, spec), np.float64, (shape, spec, axis_type) in EAGER)


@pytest.mark.parametrize("axis_type", AXES)
def test_sharded_complex(axis_type):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(axis_type,) * 2)
    cases = _sharded_cases(np.random.default_rng(5), 8, np.complex128, ["cholesky", "qr", "svd full", "polar"])
    _run_sharded(cases, NamedSharding(mesh, P("x", "y")), np.complex128, eager=False)


@pytest.mark.parametrize("shape,names,spec,axis_type", [
    pytest.param((4, 2), ("x", "y"), P("x", "y"), AxisType.Explicit, id="4x2-explicit"),
    pytest.param((8,), ("i",), P("i", None), AxisType.Auto, id="8-rows-auto"),
])
def test_helpers(shape, names, spec, axis_type):
    """The _dist helpers eagerly; tri_inv with blocks that cannot spread over every device (4x2)."""
    mesh = jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape))
    sh = NamedSharding(mesh, spec)
    rng = np.random.default_rng(6)
    n = 24  # 4x2: 4 blocks of 6; 8-rows: 8 blocks of 3
    x = jax.device_put(np.tril(rng.standard_normal((n, n))) + 3 * np.eye(n), sh)
    assert _dist.layout_of(x) == (mesh, spec)
    for lower, mat in ((True, x), (False, _dist.ct(x))):
        inv = _dist.tri_inv(mat, lower=lower)
        np.testing.assert_allclose(np.asarray(inv) @ np.asarray(mat), np.eye(n), atol=1e-12)
        assert _spec2(inv.sharding) == spec
    y = jax.device_put(rng.standard_normal((n, n)), sh)
    yy = np.asarray(y)
    for got, want in ((_dist.sym_part(y), (yy + yy.T) / 2),
                      (_dist.tril(y, -1), np.tril(yy, -1)),
                      (_dist.triu(y), np.triu(yy)),
                      (_dist.matmul(y, y, sh, adj_x=True), yy.T @ yy),
                      (_dist.diag_embed(jnp.arange(n, dtype=jnp.float64), sh), np.diag(np.arange(n)))):
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-12)
        assert _spec2(got.sharding) == spec
