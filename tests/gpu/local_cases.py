"""GPU checks of the local route (the device's own solver, cuSOLVER) on one GPU:

    python tests/gpu/local_cases.py

Prints one ``CASE <name> PASS|FAIL <detail>`` line per check and exits 1 if any failed. The
Cholesky and LU families factor through cuSOLVER's potrf and getrf called directly
(``jaxmg.kernels.ffi.solver``): statuses are compared with LAPACK's info (SciPy), results with NumPy,
for all four dtypes, one matrix and stacks (vmap), eagerly and in jit, with derivatives
(``jax.test_util.check_grads``); LU inverses by the one-call getri against NumPy for every dtype,
order and leaf size; the compiled memory of potrs, cholesky, lu_solve, the LU inverse and the
GP gradient is compared with plain JAX's on the same GPU.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax.test_util import check_grads
from scipy.linalg import lapack

import jaxmg
from _harness import RESULTS, case
from jaxmg.kernels.ffi.solver import potrf
from jaxmg.kernels.status import cholesky_status

jax.config.update("jax_enable_x64", True)
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
POTRF = {
    np.float32: lapack.spotrf,
    np.float64: lapack.dpotrf,
    np.complex64: lapack.cpotrf,
    np.complex128: lapack.zpotrf,
}


def spd(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if np.dtype(dtype).kind == "c" else 0)
    a = g @ np.conj(g).T / n + np.eye(n)
    return (np.tril(a) + np.triu(np.full((n, n), 3.0), 1)).astype(dtype), a  # upper triangle never read


def tol(dtype):
    return 1e-10 if np.dtype(dtype) in (np.float64, np.complex128) else 2e-4


def relerr(x, ref):
    return float(np.linalg.norm(np.asarray(x) - ref) / np.linalg.norm(ref))


DEVICE = jax.devices()[0]  # the GPU where there is one (the checks also run on a CPU)
print(f"DEVICE {DEVICE.platform} {DEVICE.device_kind}", flush=True)
put = lambda x: jax.device_put(x, DEVICE)  # noqa: E731

for dtype in DTYPES:
    name = np.dtype(dtype).name

    @case(f"potrf-{name}-factor-and-info")
    def _(dtype=dtype):
        a_in, a = spd(96, dtype)
        factor, info = jax.jit(potrf)(put(a_in))
        assert int(info) == 0, int(info)
        low = np.tril(np.asarray(factor))
        e = relerr(low, np.linalg.cholesky(a))
        assert e < tol(dtype), e
        for k in (1, 6, 21, 96):
            bad = a.copy()
            bad[k - 1, k - 1] = -50.0
            expect = POTRF[dtype](bad.astype(dtype), lower=1)[1]
            status = int(jax.jit(lambda m: cholesky_status(*potrf(m)[::-1]))(put(bad.astype(dtype))))
            module = int(jaxmg.Cholesky(put(bad.astype(dtype))).status)
            assert status == module == expect == k, (k, status, module, expect)
        return f"err {e:.1e}"

    @case(f"potrs-{name}-eager-jit-vmap-status")
    def _(dtype=dtype):
        a_in, a = spd(128, dtype, seed=1)
        b = np.random.default_rng(2).standard_normal((128, 3)).astype(dtype)
        x, logdet, st = jaxmg.potrs(put(a_in), put(b), return_logdet=True, return_status=True)
        assert int(st) == 0 and jaxmg.route("potrs", a.shape, dtype) == "local"
        e = relerr(x, np.linalg.solve(a, b))
        assert e < 10 * tol(dtype), e
        assert abs(float(logdet) - np.linalg.slogdet(a)[1]) < 1e3 * tol(dtype) * abs(np.linalg.slogdet(a)[1])
        xj = jax.jit(lambda a, b: jaxmg.potrs(a, b[:, 0]))(put(a_in), put(b))
        assert relerr(xj, np.linalg.solve(a, b[:, 0])) < 10 * tol(dtype)
        bad = a.copy()
        bad[20, 20] = -1.0
        stack = np.stack([a, bad, a]).astype(dtype)
        xs, sts = jax.jit(jax.vmap(lambda a, b: jaxmg.potrs(a, b, return_status=True)))(
            put(stack), put(np.ones((3, 128), dtype))
        )
        assert list(np.asarray(sts)) == [0, 21, 0], np.asarray(sts)
        assert np.all(np.isnan(np.asarray(xs[1]))) and np.all(np.isfinite(np.asarray(xs[0])))
        nan = a.copy()
        nan[5, 3] = np.nan
        assert int(jaxmg.Cholesky(put(nan.astype(dtype))).status) != 0
        return f"err {e:.1e}"

    @case(f"cholesky-inverse-{name}")
    def _(dtype=dtype):
        a_in, a = spd(160, dtype, seed=3)
        low = jaxmg.cholesky(put(a_in))
        assert relerr(low, np.linalg.cholesky(a)) < tol(dtype)
        inv = np.asarray(jaxmg.Cholesky(put(a_in)).inverse())
        e = relerr(inv, np.linalg.inv(a))
        assert e < 100 * tol(dtype) and relerr(inv, np.conj(inv).T) < 100 * tol(dtype), e
        inv_d = jax.jit(lambda m: jaxmg.Cholesky(m, donate=True).inverse(), donate_argnums=0)(put(a_in))
        assert relerr(inv_d, np.linalg.inv(a)) < 100 * tol(dtype)
        return f"err {e:.1e}"


for dtype in DTYPES:
    name = np.dtype(dtype).name

    @case(f"lu-{name}-solve-status-inverse")
    def _(dtype=dtype):
        rng = np.random.default_rng(8)
        a = (
            rng.standard_normal((120, 120))
            + (1j * rng.standard_normal((120, 120)) if np.dtype(dtype).kind == "c" else 0)
            + 4 * np.eye(120)
        ).astype(dtype)
        b = rng.standard_normal(120).astype(dtype)
        x, st = jaxmg.lu_solve(put(a), put(b), return_status=True)
        e = relerr(x, np.linalg.solve(a, b))
        assert int(st) == 0 and e < 100 * tol(dtype), (int(st), e)
        xt = jax.jit(lambda a, b: jaxmg.LU(a).solve(b, trans="T"))(put(a), put(b))
        assert relerr(xt, np.linalg.solve(a.T, b)) < 100 * tol(dtype)
        inv = jaxmg.LU(put(a)).inverse()
        assert relerr(inv, np.linalg.inv(a)) < 100 * tol(dtype)
        singular = a.copy()
        singular[:, 17] = 0
        expect = {
            np.float32: lapack.sgetrf,
            np.float64: lapack.dgetrf,
            np.complex64: lapack.cgetrf,
            np.complex128: lapack.zgetrf,
        }[dtype](singular)[2]
        stack = np.stack([a, singular])
        sts = jax.jit(jax.vmap(lambda m: jaxmg.LU(m).status))(put(stack))
        assert list(np.asarray(sts)) == [0, expect] and expect == 18, (np.asarray(sts), expect)
        return f"err {e:.1e}"


@case("lu-inverse-getri-every-dtype-order-and-leaves")
def _():
    from jaxmg.kernels.ffi import gemm
    from jaxmg.kernels.ffi.solver import getrf

    if not gemm.available():
        return "skipped: the native library is not loaded (no GPU here)"

    def inverse_of(a):
        lu, pivots = getrf(a)
        return gemm.lu_inverse(lu, jax.lax.linalg.lu_pivots_to_permutation(pivots, a.shape[-1]))

    defaults, worst = (gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.TRMM_CHUNK), {}
    try:
        for leaves in (defaults, (64, 48, 100), (32, 96, 37)):  # small chunks: leaf products in several
            gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.TRMM_CHUNK = leaves
            for dtype in DTYPES:
                for order in (1, 5, 300, 1500, 2100):
                    rng = np.random.default_rng(order)
                    g = rng.standard_normal((order, order)) + (
                        1j * rng.standard_normal((order, order)) if np.dtype(dtype).kind == "c" else 0
                    )
                    got = np.asarray(jax.jit(inverse_of)(put(g.astype(dtype)))).astype(np.complex128)
                    err = relerr(got @ g, np.eye(order)) / np.linalg.cond(g)
                    assert err < (1e-5 if np.finfo(dtype).bits == 32 else 1e-13), (leaves, dtype, order, err)
                    worst[np.dtype(dtype).name] = max(worst.get(np.dtype(dtype).name, 0.0), err)
    finally:
        gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.TRMM_CHUNK = defaults
    rng = np.random.default_rng(9)
    g = rng.standard_normal((40, 40)) + 6 * np.eye(40)
    check_grads(inverse_of, (put(g),), order=1, modes=["fwd", "rev"])
    check_grads(lambda m: jaxmg.LU(m).inverse(), (put(g),), order=1, modes=["fwd", "rev"])
    return "||A^-1 A - I|| / cond(A), worst: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())


@case("potrs-grads-float64-and-complex128")
def _():
    for dtype in (np.float64, np.complex128):
        _, a = spd(24, dtype, seed=4)
        b = np.random.default_rng(5).standard_normal(24).astype(dtype)
        check_grads(lambda a, b: jaxmg.potrs(a, b), (put(a), put(b)), order=2, modes=["fwd", "rev"])
        check_grads(
            lambda a, dtype=dtype: jaxmg.potrs(a, jnp.ones(24, dtype), return_logdet=True)[1],
            (put(a),),
            order=2,
            modes=["fwd", "rev"],
        )
        check_grads(lambda a: jaxmg.cholesky(a), (put(a),), order=1, modes=["fwd", "rev"])
        check_grads(
            lambda a, b: jaxmg.lu_solve(a, b), (put(a + 0.3 * np.tril(a, -1)), put(b)), order=1, modes=["fwd", "rev"]
        )


@case("relayout-every-mode-dtype-and-shape")
def _():
    from jaxmg.kernels.ffi import relayout

    if not relayout.available():
        return "skipped: the native library is not loaded (no GPU here)"
    shapes = [(1, 1), (31, 31), (32, 32), (33, 33), (100, 100), (257, 257), (3, 70, 70), (2, 2, 40, 40)]
    count = 0
    for dtype in DTYPES:
        for shape in shapes:
            rng = np.random.default_rng(shape[-1])
            x = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0)
            x = put(x.astype(dtype))
            for mode in (relayout.TRANSPOSE, relayout.SYMMETRIC_FROM_LOWER, relayout.LOWER_OF_TRANSPOSE):
                want = np.asarray(relayout.reference(x, mode))
                got = np.asarray(jax.jit(lambda m, mode=mode: relayout.relayout(m, mode))(x))
                assert np.array_equal(got, want), (np.dtype(dtype).name, shape, mode)
                if len(shape) == 3:
                    mapped = np.asarray(jax.jit(jax.vmap(lambda m, mode=mode: relayout.relayout(m, mode)))(x))
                    assert np.array_equal(mapped, want), ("vmap", np.dtype(dtype).name, shape, mode)
                count += 1
    return f"{count} cases equal to the reference"


def _temp(fn, *args):
    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


@case("memory-no-more-than-jax")
def _():
    n = 4096
    _, a = spd(n, np.float64, seed=6)
    a, b = put(a), put(np.ones(n))
    matrix = n * n * 8
    pairs = {
        "potrs": (jaxmg.potrs, lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b)),
        "cholesky": (lambda a, b: jaxmg.cholesky(a), lambda a, b: jnp.linalg.cholesky(a)),
        "lu_solve": (jaxmg.lu_solve, jnp.linalg.solve),
        "lu_inverse": (lambda a, b: jaxmg.LU(a).inverse(), lambda a, b: jnp.linalg.inv(a)),
        "gp_grad": (
            jax.grad(lambda a, b: jnp.vdot(b, jaxmg.potrs(a, b)) + jaxmg.potrs(a, b, return_logdet=True)[1]),
            jax.grad(
                lambda a, b: (
                    jnp.vdot(b, jsl.cho_solve(jsl.cho_factor(a, lower=True), b))
                    + 2 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(a))))
                )
            ),
        ),
    }
    out = []
    for key, (ours, theirs) in pairs.items():
        mine, ref = _temp(ours, a, b) / matrix, _temp(theirs, a, b) / matrix
        out.append(f"{key} {mine:.2f}/{ref:.2f}")
        assert mine <= ref + 0.05, (key, mine, ref)
    return "temp matrices jaxmg/JAX: " + ", ".join(out)


@case("memory-in-place-layouts")
def _():
    """XLA's temporaries (N x N matrices) of the one-GPU paths that change layout in place, and
    the donated Cholesky inverse."""
    from jaxmg.kernels.ffi import relayout

    if not relayout.available():
        return "skipped: the native library is not loaded (no GPU here)"
    n = 4096
    _, a = spd(n, np.float64, seed=6)
    a, b = put(a), put(np.ones(n))
    matrix = n * n * 8
    workspace = (2 * 512 * n + 512 * 512) / (n * n)  # the inverses' scratch: two 512 x n panels and a leaf
    limits = {
        "potrs": (lambda m: jaxmg.potrs(m, b), 1.05),
        "cholesky": (jaxmg.cholesky, 0.05),
        "lu_solve": (lambda m: jaxmg.lu_solve(m, b), 1.05),
        "lu_inverse": (lambda m: jaxmg.LU(m).inverse(), 1.1),
        "cholesky_inverse": (lambda m: jaxmg.Cholesky(m).inverse(), 0.05 + workspace),
    }
    out = []
    for key, (fn, limit) in limits.items():
        mine = _temp(fn, a) / matrix
        out.append(f"{key} {mine:.2f}")
        assert mine <= limit, (key, mine, limit)
    donated = jax.jit(lambda m: jaxmg.Cholesky(m, donate=True).inverse(), donate_argnums=0)
    analysis = donated.lower(a).compile().memory_analysis()
    mine = analysis.temp_size_in_bytes / matrix
    out.append(f"cholesky_inverse donated {mine:.2f} (alias {analysis.alias_size_in_bytes / matrix:.2f})")
    assert mine <= 0.05 + workspace, mine
    return "temp matrices: " + ", ".join(out)


print(f"SUMMARY {sum(RESULTS)}/{len(RESULTS)} passed", flush=True)
sys.exit(0 if all(RESULTS) else 1)
