"""The JVP formulas of jaxmg.autodiff.tangents against jax.jvp of jnp.linalg (the same gauges),
on sharded inputs (every layout, Explicit and Auto mesh axes, inside jit and eagerly), and the
_dist building blocks they use.

eigh and sygvd read their inputs' lower triangles: their formulas are compared with jax.jvp of
jnp.linalg's functions of ``lower_read`` of the inputs, along tangents that are not Hermitian.

To stay fast, the primal outputs, tangents and references of all cases are built in one jitted
program, and the formulas of all cases run in another.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from helpers import AXES, hermitian_matrix, lower_read, random_matrix, spd_matrix
from jaxmg._layout import padded_spec
from jaxmg.autodiff import _dist, tangents

N, M = 16, 32
pytestmark = pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 (simulated) devices")

# The test programs are tiny: cheaper XLA:CPU code generation keeps compilation short.
_FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _polar(a):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    return u @ vh, (vh.conj().T * s) @ vh


def _pencil(a, b):
    """A v = w B v, v^H B v = I, by Cholesky reduction (differentiable with JAX), for the
    Hermitian matrices read from the lower triangles of a and b."""
    a, b = lower_read(a), lower_read(b)
    L = jnp.linalg.cholesky(b)
    x = jax.scipy.linalg.solve_triangular(L, a, lower=True)
    c = jax.scipy.linalg.solve_triangular(L, x.conj().T, lower=True).conj().T
    w, u = jnp.linalg.eigh(c)
    return w, jax.scipy.linalg.solve_triangular(L.conj().T, u, lower=False)


def _projected(v, v_dot, c):
    """The tangent of v diag(c) v^H: phase-free, so comparable across gauges."""
    x = (v * c) @ v.conj().T
    return (v_dot * c) @ v.conj().T + (v * c) @ v_dot.conj().T, x


FORMULAS = {
    "qr": tangents.qr_jvp,
    "eigh": tangents.eigh_jvp,
    "svd": tangents.svd_jvp,
    "polar": tangents.polar_jvp,
    "sygvd": tangents.sygvd_jvp,
    "sygvd b only": tangents.sygvd_jvp,
    "svd full": tangents.svd_jvp,
}


def _spec2(sharding):
    assert isinstance(sharding, NamedSharding), sharding
    return padded_spec(sharding.spec, 2)


def _cases(dtype):
    """name -> ((primal outputs..., tangents...), reference tangents), built in one jit."""
    rng = np.random.default_rng(0)
    data = dict(
        a=hermitian_matrix(rng, N, dtype),
        b=spd_matrix(rng, N, dtype),
        t=random_matrix(rng, (M, N), dtype),
        da=random_matrix(rng, (N, N), dtype),
        db=random_matrix(rng, (N, N), dtype),
        dt=random_matrix(rng, (M, N), dtype),
    )
    c = jnp.asarray(rng.standard_normal(N))

    def build(a, b, t, da, db, dt):
        out = {}
        (q, r), ref = jax.jvp(jnp.linalg.qr, (t,), (dt,))
        out["qr"] = ((q, r, dt), ref)
        (w, v), ref = jax.jvp(lambda a: jnp.linalg.eigh(lower_read(a)), (a,), (da,))
        out["eigh"] = ((w, v, da), ref)
        (u, s, vh), ref = jax.jvp(lambda t: jnp.linalg.svd(t, full_matrices=False), (t,), (dt,))
        out["svd"] = ((u, s, vh, dt), ref)
        (u_p, h), ref = jax.jvp(_polar, (t,), (dt,))
        sig, vv = jnp.linalg.eigh(h)
        out["polar"] = ((u_p, sig, vv, dt), ref)
        (w, v), (dw, dv) = jax.jvp(_pencil, (a, b), (da, db))
        out["sygvd"] = ((w, v, da, db), (dw, _projected(v, dv, c)[0]))
        (w, v), (dw, dv) = jax.jvp(_pencil, (a, b), (jnp.zeros_like(da), db))
        out["sygvd b only"] = ((w, v, None, db), (dw, _projected(v, dv, c)[0]))
        uf, s, vh = jnp.linalg.svd(t, full_matrices=True)
        # reference: the reduced formula on the same first N columns (checked apart)
        out["svd full"] = ((uf, s, vh, dt), tangents.svd_jvp(uf[:, :N], s, vh, dt, None))
        return out

    built = jax.jit(build, compiler_options=_FAST)(*data.values())
    return built, FORMULAS, c


def _run(built, formulas, sh, jit=True):
    """Every formula on arguments in layout ``sh`` (vectors replicated), in one jitted program or eagerly."""

    def place(x):
        if x is None or sh is None:
            return x
        return jax.device_put(x, sh if x.ndim == 2 else NamedSharding(sh.mesh, P()))

    placed = {k: tuple(place(x) for x in args) for k, (args, _) in built.items()}

    def run(placed):
        out = {}
        for k, args in placed.items():
            extra = {"full_matrices": True} if k == "svd full" else {}
            out[k] = formulas[k](*args, sh, **extra)
        return out

    return jax.jit(run, compiler_options=_FAST)(placed) if jit else run(placed)


def _check(results, built, c, sh):
    for name, result in results.items():
        args, ref = built[name]
        if name.startswith("sygvd"):
            v = np.asarray(args[1])
            result = (result[0], _projected(v, np.asarray(result[1]), np.asarray(c))[0])
        if name == "svd full":
            du = np.asarray(result[0])
            uf = np.asarray(args[0])
            u1, u2, du2 = uf[:, :N], uf[:, N:], du[:, N:]
            # U2 only matters through its projector, whose tangent is minus that of U1's
            np.testing.assert_allclose(
                du2 @ u2.conj().T + u2 @ du2.conj().T, -(du[:, :N] @ u1.conj().T + u1 @ du[:, :N].conj().T), atol=1e-9
            )
            result = (du[:, :N], result[1], result[2])
        for k, (got, want) in enumerate(zip(result, ref)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-9, err_msg=f"{name}[{k}]")
            if sh is not None and hasattr(got, "sharding") and name != "svd full":
                expected = sh.spec if got.ndim == 2 else P()
                assert got.sharding.is_equivalent_to(NamedSharding(sh.mesh, expected), got.ndim), (name, got.sharding)


@pytest.fixture(scope="module", params=[np.float64, np.complex128], ids=["float64", "complex128"])
def cases(request):
    return _cases(request.param)


def test_matches_jax_jvp_unsharded(cases):
    built, formulas, c = cases
    _check(_run(built, formulas, None), built, c, None)


LAYOUTS = [
    pytest.param((8,), ("i",), P("i", None), id="8-rows"),
    pytest.param((8,), ("i",), P(None, "i"), id="8-cols"),
    pytest.param((4, 2), ("x", "y"), P("x", "y"), id="4x2"),
    pytest.param((2, 4), ("x", "y"), P("x", "y"), id="2x4"),
]


@pytest.mark.slow
@pytest.mark.parametrize("axis_type", AXES)
@pytest.mark.parametrize("shape,names,spec", LAYOUTS)
def test_sharded(cases, shape, names, spec, axis_type):
    """Every formula on every layout and axis type inside jit; tangents keep the layout."""
    built, formulas, c = cases
    sh = NamedSharding(jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape)), spec)
    _check(_run(built, formulas, sh), built, c, sh)


@pytest.mark.parametrize(
    "shape,names,spec,axis_type",
    [
        pytest.param((4, 2), ("x", "y"), P("x", "y"), AxisType.Explicit, id="4x2-explicit"),
        pytest.param((8,), ("i",), P("i", None), AxisType.Auto, id="8-rows-auto"),
    ],
)
def test_helpers(shape, names, spec, axis_type):
    """The _dist helpers (trace-only: each in its own jax.jit); tri_inv with blocks that cannot
    spread over every device (4x2)."""
    mesh = jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape))
    sh = NamedSharding(mesh, spec)
    rng = np.random.default_rng(6)
    n = 24  # 4x2: 4 blocks of 6; 8-rows: 8 blocks of 3
    x = jax.device_put(np.tril(rng.standard_normal((n, n))) + 3 * np.eye(n), sh)
    assert _dist.layout_of(x) == (mesh, spec)
    for lower, mat in ((True, x), (False, jax.jit(_dist.ct)(x))):
        inv = jax.jit(functools.partial(_dist.tri_inv, lower=lower, like=sh))(mat)
        np.testing.assert_allclose(np.asarray(inv) @ np.asarray(mat), np.eye(n), atol=1e-12)
        assert _spec2(inv.sharding) == spec
    y = jax.device_put(rng.standard_normal((n, n)), sh)
    yy = np.asarray(y)
    helpers = (
        (lambda y: _dist.sym_part(y, like=sh), (yy + yy.T) / 2),
        (lambda y: _dist.lower_read(y, like=sh), np.asarray(lower_read(yy))),
        (lambda y: _dist.tril(y, -1, like=sh), np.tril(yy, -1)),
        (lambda y: _dist.triu(y, like=sh), np.triu(yy)),
        (lambda y: _dist.matmul(y, y, sh, adj_x=True), yy.T @ yy),
        (lambda y: _dist.diag_embed(jnp.arange(n, dtype=jnp.float64), sh), np.diag(np.arange(n))),
    )
    for helper, want in helpers:
        with jax.set_mesh(mesh):  # as the public boundary runs a call: in its own mesh
            got = jax.jit(helper)(y)
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-12)
        assert _spec2(got.sharding) == spec
