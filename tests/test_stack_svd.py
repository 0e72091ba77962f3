"""SVD and polar of stacks on the local and batch routes through QDWH polar + batched eigh.

On a GPU, ``jaxmg.qdwh.POLAR_EIGH_ABOVE`` sends matrices above order 32 there; on a CPU
LAPACK's SVD stays. Here the CPU entry is set to 32 for the module, so the QDWH + eigh path runs
(and the first test checks that it does). Accuracy is held to LAPACK's test ratios on stacks of 4
matrices, one of each kind (random, rank-deficient, clustered, graded), square, tall and wide,
in every dtype: |s - s_LAPACK| / (N eps ||A||), ||U^H U - I|| / (N eps), ||V^H V - I|| / (N eps)
and ||A - U S V^H|| / (N eps ||A||) at most 30.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P
from jax.test_util import check_grads

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import DTYPES, eps, make_mesh, put, random_matrix
from jaxmg import _dispatch
from jaxmg.kernels import qdwh

LIMIT = 30.0


def _clear():
    _dispatch._compiled.cache_clear()
    jax.clear_caches()


@pytest.fixture(autouse=True, scope="module")
def _polar_eigh_on_cpu():
    """The CPU's entry of the table set as a GPU's for this module (compiled calls cleared, so that
    calls of the other modules' shapes are traced again both ways)."""
    saved = qdwh.POLAR_EIGH_ABOVE.get("cpu")
    qdwh.POLAR_EIGH_ABOVE["cpu"] = 32
    _clear()
    yield
    qdwh.POLAR_EIGH_ABOVE["cpu"] = saved
    _clear()


def _with_singular_values(rng, m, n, s, dtype):
    wide_dtype = np.complex128 if np.iscomplexobj(np.zeros(1, dtype)) else np.float64
    q1 = np.linalg.qr(random_matrix(rng, (m, n), wide_dtype))[0]
    q2 = np.linalg.qr(random_matrix(rng, (n, n), q1.dtype))[0]
    return ((q1 * s) @ q2.conj().T).astype(dtype)


def _stack(m, n, dtype, seed=0):
    """random, rank-deficient (half the singular values 0), clustered (1 + 1e-10 k) and graded
    (1 to 1e-30): (4, m, n)."""
    rng = np.random.default_rng(seed)
    k = min(m, n)
    kinds = [np.ones(k) * (np.arange(k) < k // 2), 1 + 1e-10 * np.arange(k), np.logspace(0, -30, k)]
    tall = [_with_singular_values(rng, max(m, n), k, s, dtype) for s in kinds]
    tall = [t if m >= n else t.conj().T for t in tall]
    return np.stack([random_matrix(rng, (m, n), dtype)] + tall)


def _ratios(a, u, s, vh):
    """LAPACK's ratios of one SVD (u M x K, vh K x N)."""
    a, u, s, vh = (np.asarray(x, np.complex128) for x in (a, u, s, vh))
    n, k = max(a.shape), min(a.shape)
    ref = np.linalg.svd(a, compute_uv=False)
    norm = max(ref[0], np.finfo(np.float64).tiny)
    return {
        "s": np.max(np.abs(s.real - ref)) / (n * norm),
        "u": np.linalg.norm(u.conj().T @ u - np.eye(k), 2) / n,
        "v": np.linalg.norm(vh @ vh.conj().T - np.eye(k), 2) / n,
        "back": np.linalg.norm(a - (u * s) @ vh, 2) / (n * norm),
    }


def _check(a, u, s, vh, dtype):
    a, u, s, vh = (np.asarray(x) for x in (a, u, s, vh))
    for i in range(a.shape[0]):
        ratios = {key: r / eps(dtype) for key, r in _ratios(a[i], u[i], s[i], vh[i]).items()}
        assert max(ratios.values()) <= LIMIT, (i, ratios)


def test_table_decides_by_platform_and_order():
    assert qdwh.polar_eigh("cuda", (33, 33)) and qdwh.polar_eigh("gpu", (64, 40))
    assert not qdwh.polar_eigh("cuda", (32, 32)) and not qdwh.polar_eigh("cuda", (4096, 32))
    assert qdwh.POLAR_EIGH_ABOVE["cpu"] == 32  # this module's setting; None outside it


def _primitives(fn, *args):
    """The text of ``fn``'s jaxpr, nested ones included."""
    return str(jax.make_jaxpr(fn)(*args))


def test_path_above_the_order_is_polar_and_eigh():
    above = jnp.asarray(_stack(33, 33, np.float32))
    text = _primitives(lambda a: la.svd(a, full_matrices=False), above)
    assert "eigh" in text and "cholesky" in text and " svd[" not in text and "svd " not in text.replace("gesvd", "")
    for fn in (la.svdvals, lambda a: sla.polar(a)[0]):
        text = _primitives(fn, above)
        assert "eigh" in text and "svd" not in text.replace("gesvd", "")
    at = jnp.asarray(_stack(32, 32, np.float32))
    assert "svd" in _primitives(la.svdvals, at).replace("gesvd", "")  # the platform's own SVD up to the order


def test_cpu_table_entry_none_compiles_lapack_beside_the_gpu_branch(monkeypatch):
    """With the CPU's own entry (None) the call holds both branches, and a CPU runs LAPACK's."""
    monkeypatch.setitem(qdwh.POLAR_EIGH_ABOVE, "cpu", None)
    _clear()
    try:
        a = _stack(36, 36, np.float64, seed=13)
        text = _primitives(la.svdvals, jnp.asarray(a))
        assert "platform_index" in text and "eigh" in text and "svd" in text.replace("gesvd", "")
        u, s, vh = la.svd(jnp.asarray(a), full_matrices=False)
        _check(a, u, s, vh, np.float64)
        grad = jax.grad(lambda x: jnp.sum(la.svdvals(x)))(jnp.asarray(a[0]))
        uu, _, vvh = np.linalg.svd(a[0])
        np.testing.assert_allclose(np.asarray(grad), uu @ vvh, atol=1e-10)
        assert "gesdd" in jax.jit(la.svdvals).lower(jnp.asarray(a)).as_text()
    finally:
        monkeypatch.undo()
        _clear()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("m,n", [(40, 40), (44, 36), (36, 44)], ids=["square", "tall", "wide"])
def test_svd_of_stacks_meets_lapack_ratios(m, n, dtype):
    a = _stack(m, n, dtype)
    u, s, vh = la.svd(jnp.asarray(a), full_matrices=False)
    assert u.shape == (4, m, min(m, n)) and vh.shape == (4, min(m, n), n) and u.dtype == dtype
    _check(a, u, s, vh, dtype)
    values = np.asarray(la.svdvals(jnp.asarray(a)))
    ref = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    scale = max(m, n) * eps(dtype) * ref[:, :1]
    assert np.all(np.abs(values - ref) <= LIMIT * scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("m,n", [(40, 40), (44, 36)], ids=["square", "tall"])
def test_polar_of_stacks_is_orthonormal_and_reconstructs(m, n, dtype):
    a = _stack(m, n, dtype, seed=1)
    _check_polar(a, *sla.polar(jnp.asarray(a)), dtype)


def _check_polar(a, u_p, h, dtype):
    m, n = a.shape[-2:]
    u_p, h = np.asarray(u_p, np.complex128), np.asarray(h, np.complex128)
    for i in range(a.shape[0]):
        norm = np.linalg.norm(a[i], 2)
        orth = np.linalg.norm(u_p[i].conj().T @ u_p[i] - np.eye(n), 2) / (m * eps(dtype))
        back = np.linalg.norm(a[i] - u_p[i] @ h[i], 2) / (m * eps(dtype) * norm)
        sym = np.linalg.norm(h[i] - h[i].conj().T, 2) / (m * eps(dtype) * norm)
        low = np.linalg.eigvalsh(h[i]).min() / (m * eps(dtype) * norm)
        assert max(orth, back, sym) <= LIMIT and low >= -LIMIT, (i, orth, back, sym, low)


@pytest.mark.parametrize("dtype,scale", [(np.float32, 1e37), (np.float64, 1e307), (np.float64, 1e-300)])
def test_svd_and_polar_of_matrices_near_the_overflow_and_underflow_thresholds(dtype, scale):
    """||A||_F near the dtype's largest number: A / ||A||_F, as XLA divides by a scalar (times
    its reciprocal, flushed to zero), would be 0, and the SVD U = I, s = 0 with status 0."""
    rng = np.random.default_rng(3)
    a = np.stack([_with_singular_values(rng, 33, 33, scale * np.linspace(1, 3, 33), dtype) for _ in range(2)])
    u, s, vh = la.svd(a, full_matrices=False)
    u_p, h = sla.polar(a)
    unit = (a / scale).astype(dtype)  # the ratios of the matrix scaled back (their norms would overflow)
    _check(unit, u, np.asarray(s) / scale, vh, dtype)
    _check_polar(unit, u_p, np.asarray(h) / scale, dtype)


def test_float32_without_x64():
    """Without x64 the iteration stays in float32 and takes Householder QR steps."""
    a = _stack(40, 38, np.float32, seed=12)
    with jax.enable_x64(False):
        text = _primitives(la.svdvals, jnp.asarray(a))
        u, s, vh = la.svd(jnp.asarray(a), full_matrices=False)
        u_p, h = sla.polar(jnp.asarray(a))
    assert " qr[" in text and "f64" not in text
    _check(a, u, s, vh, np.float32)
    _check_polar(a, u_p, h, np.float32)


def test_full_matrices_tall_and_wide():
    for m, n in ((44, 36), (36, 44)):
        a = _stack(m, n, np.float64, seed=2)
        u, s, vh = la.svd(jnp.asarray(a))  # full_matrices=True, as JAX
        assert u.shape == (4, m, m) and vh.shape == (4, n, n)
        for i in range(4):
            assert np.linalg.norm(np.asarray(u[i]).T @ u[i] - np.eye(m)) <= LIMIT * m * eps(np.float64)
            assert np.linalg.norm(np.asarray(vh[i]) @ vh[i].T - np.eye(n)) <= LIMIT * n * eps(np.float64)


def test_pinv_and_lstsq_of_a_rank_deficient_stack():
    a = _stack(40, 40, np.float64, seed=3)[1]  # rank 20
    ref = np.linalg.pinv(a, rcond=1e-10)
    assert np.linalg.norm(np.asarray(la.pinv(jnp.asarray(a[None]), rtol=1e-10))[0] - ref) <= 1e-9 * np.linalg.norm(ref)
    b = np.random.default_rng(4).standard_normal(40)
    x, _, rank, _ = la.lstsq(jnp.asarray(a), jnp.asarray(b), rcond=1e-10)
    assert int(rank) == 20
    np.testing.assert_allclose(np.asarray(x), ref @ b, atol=1e-9 * np.linalg.norm(ref @ b))


def test_eager_jit_and_vmap_agree():
    a = jnp.asarray(_stack(36, 36, np.float64, seed=5))
    eager = la.svd(a, full_matrices=False)
    jitted = jax.jit(lambda x: la.svd(x, full_matrices=False))(a)
    mapped = jax.vmap(lambda x: la.svd(x, full_matrices=False))(a)
    for out in (jitted, mapped):
        np.testing.assert_allclose(out.S, eager.S, rtol=0, atol=1e-12)
        _check(np.asarray(a), out.U, out.S, out.Vh, np.float64)
    nested = jax.jit(jax.vmap(la.svdvals))(a.reshape(2, 2, 36, 36))
    np.testing.assert_allclose(np.asarray(nested).reshape(4, 36), eager.S, rtol=0, atol=1e-12)


def test_modules_and_functional_on_a_stack():
    a = jnp.asarray(_stack(36, 36, np.complex128, seed=6))
    svd = jax.vmap(lambda x: jaxmg.SVD(x))(a)
    _check(np.asarray(a), svd.u, svd.s, svd.vh, np.complex128)
    u_p, h, status = jax.vmap(lambda x: jaxmg.polar(x, return_status=True))(a)
    assert np.all(np.asarray(status) == 0)
    np.testing.assert_allclose(np.asarray(u_p @ h), np.asarray(a), atol=1e-12 * 36)


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_stack_sharded_over_a_mesh(axis_type):
    mesh = make_mesh((4,), ("i",), axis_types=axis_type)
    a = np.concatenate([_stack(36, 36, np.float32, seed=7), _stack(36, 36, np.float32, seed=8)])
    with jax.set_mesh(mesh):
        u, s, vh = la.svd(put(a, mesh, P("i")), full_matrices=False)
    _check(a, u, s, vh, np.float32)


def test_inside_shard_map():
    mesh = make_mesh((4,), ("i",), axis_types=AxisType.Explicit)
    a = np.concatenate([_stack(36, 36, np.float64, seed=9), _stack(36, 36, np.float64, seed=10)])

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P("i"), P("i")))
    def per_device(block):  # two matrices of the stack on each device
        return tuple(la.svd(block, full_matrices=False))

    u, s, vh = per_device(put(a, mesh, P("i")))
    _check(a, u, s, vh, np.float64)


def test_derivatives_on_the_polar_eigh_path():
    rng = np.random.default_rng(11)
    a = jnp.asarray(_with_singular_values(rng, 36, 34, np.linspace(2.0, 1.0, 34), np.float64))

    def truncated(x):  # invariant to the singular vectors' signs
        u, s, vh = la.svd(x, full_matrices=False)
        return s, (u[:, :3] * s[:3]) @ vh[:3]

    check_grads(truncated, (a,), order=1, modes=("fwd", "rev"), eps=1e-6, atol=1e-6, rtol=1e-6)
    check_grads(lambda x: sla.polar(x), (a,), order=1, modes=("fwd", "rev"), eps=1e-6, atol=1e-6, rtol=1e-6)
    check_grads(
        lambda x: jax.vmap(la.svdvals)(x),
        (jnp.stack([a, 2 * a]),),
        order=1,
        modes=("rev",),
        eps=1e-6,
        atol=1e-6,
        rtol=1e-6,
    )
