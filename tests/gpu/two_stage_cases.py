"""GPU checks of the two-stage Hermitian eigensolver's CUDA kernels (csrc/band.{cu,cc}) on one GPU:

    python tests/gpu/two_stage_cases.py

Prints one ``CASE <name> PASS|FAIL <detail>`` line per check and exits 1 if any failed.
``jaxmg_sb2st`` (band -> tridiagonal by pipelined bulge chasing) against its reference
(``jaxmg.kernels.two_stage.band_to_tridiagonal_reference``, the same task order) and LAPACK,
and its reflectors as an orthogonal similarity ``T = Q^H B Q`` and against the reference's;
``jaxmg_tridiagonal_bisection`` against LAPACK; ``jaxmg_stedc`` (cuSOLVERMp's divide and
conquer) by LAPACK's ratios ``||T Z - Z W|| / (N eps ||T||)``, ``||Z^T Z - I|| / (N eps)`` and
eigenvalues within 30 N eps ||T|| of LAPACK's, on random, clustered and Wilkinson tridiagonals
up to N = 4096, timed at 16384; and the whole ``two_stage.eigvalsh`` on hard spectra, for all
four dtypes, one matrix and stacks (vmap), by LAPACK's ratio: eigenvalues within 30 N eps ||A||
of ``numpy.linalg.eigvalsh``'s in double precision; ``two_stage.eigh`` (stage 2's reflectors from
the kernel, cuSOLVERMp's stedc, the back-transformations) by ||A V - V W|| / (N eps ||A||) and
||V^H V - I|| / (N eps), each at most 30.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hard_matrices as hm  # noqa: E402
from _harness import RESULTS, case  # noqa: E402
from jaxmg.kernels import two_stage as ts  # noqa: E402
from jaxmg.kernels.ffi import band as native_band  # noqa: E402

jax.config.update("jax_enable_x64", True)
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


def tridiagonal_ratio(d, e, reference_matrix, dtype):
    t = np.diag(hm.wide(d)) + np.diag(np.abs(hm.wide(e)), -1) + np.diag(np.abs(hm.wide(e)), 1)
    a = hm.wide(reference_matrix)
    return hm.value_error(np.linalg.eigvalsh(t), np.linalg.eigvalsh(a), np.linalg.norm(a, 2), a.shape[0], dtype)


DEVICE = jax.devices()[0]
print(f"DEVICE {DEVICE.platform} {DEVICE.device_kind}", flush=True)
if not native_band.available():
    print("CASE native_band FAIL the native library has no band kernels (build it: source scripts/gpu/setup.sh)")
    sys.exit(1)

for dtype in DTYPES:
    for n, band in ((7, 3), (200, 8), (515, 32), (1000, 64)):

        @case(f"sb2st_{np.dtype(dtype).name}_n{n}_b{band}")
        def _(n=n, band=band, dtype=dtype):
            b_mat = hm.hermitian_band(n, band, dtype, seed=n)
            ab = ts.lower_band(jnp.asarray(b_mat), band)
            d, e = jax.jit(native_band.band_to_tridiagonal)(ab)
            ratio = tridiagonal_ratio(d, e, b_mat, dtype)
            ref_d, ref_e = ts.band_to_tridiagonal_reference(ab) if n <= 515 else (d, e)
            diff = float(np.max(np.abs(hm.wide(d) - hm.wide(ref_d)))) / np.linalg.norm(hm.wide(b_mat), 2)
            assert ratio <= hm.THRESHOLD, ratio
            return f"eigenvalue ratio {ratio:.2f}, max |d - d_reference| / ||B|| {diff:.1e}"


def q_of_reflectors(v, tau, n, band):
    """Q = prod over (i, t) in lexicographic order of (I - tau v v^H), sweep i's task t on rows
    i + 1 + t b .. (the contract of band_to_tridiagonal(..., reflectors=True)), in double precision."""
    v, tau, q = hm.wide(v), hm.wide(tau), np.eye(n, dtype=np.complex128 if np.iscomplexobj(v) else np.float64)
    for i in range(v.shape[0]):
        for t in range(v.shape[1]):
            r0 = i + 1 + t * band
            rows = slice(r0, min(r0 + band, n))
            x = v[i, t, : rows.stop - r0]
            assert np.all(v[i, t, rows.stop - r0 :] == 0), f"v[{i}, {t}] is not zero past row N - 1"
            if tau[i, t] == 0:
                continue
            assert x[0] == 1, f"v[{i}, {t}, 0] = {x[0]}, not 1"
            q[:, rows] -= np.outer(q[:, rows] @ x, tau[i, t] * np.conj(x))
    return q


def hermitian_tridiagonal(d, e):
    d, e = hm.wide(d), hm.wide(e)
    return np.diag(d).astype(e.dtype) + np.diag(e, -1) + np.diag(np.conj(e), 1)


for dtype in DTYPES:
    for n, band in ((2, 3), (3, 2), (9, 1), (64, 8), (200, 16)):

        @case(f"sb2st_reflectors_{np.dtype(dtype).name}_n{n}_b{band}")
        def _(n=n, band=band, dtype=dtype):
            b_mat = hm.hermitian_band(n, band, dtype, seed=n + 1)
            ab = ts.lower_band(jnp.asarray(b_mat), band)
            d, e, v, tau = jax.jit(lambda x: native_band.band_to_tridiagonal(x, reflectors=True))(ab)
            sweeps, tasks = native_band.reflector_extents(n, band)
            assert v.shape == (sweeps, tasks, band) and tau.shape == (sweeps, tasks), (v.shape, tau.shape)
            counts = [ts.sweep_tasks(n, band, i) if band > 1 else 0 for i in range(sweeps)]
            absent = [(i, t) for i in range(sweeps) for t in range(counts[i], tasks)]
            assert all(tau[i, t] == 0 and not np.any(v[i, t]) for i, t in absent), "a task a sweep lacks is not zero"
            d2, e2 = jax.jit(native_band.band_to_tridiagonal)(ab)
            assert np.array_equal(d, d2) and np.array_equal(e, e2), "reflectors changed the tridiagonal"
            q = q_of_reflectors(v, tau, n, band)
            orth = hm.orthogonality(q, dtype)
            fact = hm.factor_error(b_mat, q @ hermitian_tridiagonal(d, e) @ np.conj(q).T, dtype)
            assert orth <= hm.THRESHOLD and fact <= hm.THRESHOLD, (orth, fact)
            return f"||Q^H Q - I|| ratio {orth:.2f}, ||B - Q T Q^H|| ratio {fact:.2f}"


for dtype in DTYPES:

    @case(f"sb2st_reflectors_against_reference_{np.dtype(dtype).name}")
    def _(dtype=dtype):
        n, band = 130, 8
        ab = ts.lower_band(jnp.asarray(hm.hermitian_band(n, band, dtype, seed=3)), band)
        try:
            ref = ts.band_to_tridiagonal_reference(ab, reflectors=True)
        except TypeError as err:
            return f"skipped: the reference has no reflectors yet ({err})"
        stack = jnp.stack([ab, ab[:, ::-1]])  # a stack, through vmap: the first matches the reference
        got = [x[0] for x in jax.jit(jax.vmap(lambda x: native_band.band_to_tridiagonal(x, reflectors=True)))(stack)]
        tol = np.sqrt(hm.eps(dtype))  # the same tasks in the same order: round-off apart
        diffs = [float(np.max(np.abs(hm.wide(x) - hm.wide(y)), initial=0.0)) for x, y in zip(got[2:], ref[2:])]
        assert max(diffs) <= tol, diffs
        return f"max |v - v_ref| {diffs[0]:.1e}, max |tau - tau_ref| {diffs[1]:.1e}"


def tridiagonal_of(kind: str, n: int, dtype):
    """d, e of a test tridiagonal: random, clustered (d = 1 or 1.001, e of 10 eps, a split) or
    Wilkinson's W+ (pairs of eigenvalues close to within a tiny fraction)."""
    rng = np.random.default_rng(n)
    if kind == "random":
        d, e = rng.standard_normal(n), rng.standard_normal(max(n - 1, 0))
    elif kind == "clustered":
        d = 1.0 + 1e-3 * (rng.random(n) < 0.1)
        e = 10 * np.finfo(dtype).eps * rng.standard_normal(max(n - 1, 0))
        e[n // 2 - 1 : n // 2] = 0.0
    else:
        d, e = np.abs(np.arange(n) - (n - 1) / 2.0), np.ones(max(n - 1, 0))
    return d.astype(dtype), e.astype(dtype)


def eigh_ratios(d, e, w, z, dtype) -> dict:
    """LAPACK's ratios of the tridiagonal eigendecomposition, in double precision (O(N^2) residual)."""
    d, e, w, z = hm.wide(d), hm.wide(e), hm.wide(w), hm.wide(z)
    n = d.shape[0]
    tz = d[:, None] * z
    tz[1:] += e[:, None] * z[:-1]
    tz[:-1] += e[:, None] * z[1:]
    norm1 = max(np.max(np.abs(d) + np.r_[np.abs(e), 0] + np.r_[0, np.abs(e)]), np.finfo(float).tiny)
    ref = scipy.linalg.eigvalsh_tridiagonal(d, e) if n > 1 else d
    return {
        "residual": hm.ratio(hm.norm1(tz - z * w[None, :]), norm1, n, dtype),
        "orthogonality": hm.orthogonality(z, dtype),
        "values": hm.value_error(w, ref, np.max(np.abs(ref), initial=0.0), n, dtype),
    }


STEDC = jax.jit(native_band.stedc)
for dtype in (np.float32, np.float64):
    for n in (1, 2, 3, 64, 1000, 4096):

        @case(f"stedc_{np.dtype(dtype).name}_n{n}")
        def _(n=n, dtype=dtype):
            if not native_band.stedc_available():
                raise RuntimeError("the loaded cuSOLVERMp has no cusolverMpStedc")
            out = []
            for kind in ("random", "clustered", "wilkinson"):
                d, e = tridiagonal_of(kind, n, dtype)
                w, z, status = STEDC(jnp.asarray(d), jnp.asarray(e))
                assert int(status) == 0, (kind, int(status))
                assert w.dtype == dtype and z.shape == (n, n) and np.all(np.diff(np.asarray(w)) >= 0), kind
                ratios = eigh_ratios(d, e, w, z, dtype)
                assert max(ratios.values()) <= hm.THRESHOLD, (kind, ratios)
                out.append(f"{kind} " + " ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
            return "; ".join(out)


@case("stedc_eager_and_vmap_float64")
def _():
    pairs = [tridiagonal_of(kind, 64, np.float64) for kind in ("random", "wilkinson")]
    d, e = jnp.asarray(np.stack([p[0] for p in pairs])), jnp.asarray(np.stack([p[1] for p in pairs]))
    w, z = jax.jit(jax.vmap(native_band.tridiagonal_eigh))(d, e)
    w_stack, z_stack = native_band.tridiagonal_eigh(d, e)  # eagerly, a stack looped over in one call
    ratios = [eigh_ratios(d[k], e[k], w[k], z[k], np.float64) for k in range(2)]
    ratios += [eigh_ratios(d[k], e[k], w_stack[k], z_stack[k], np.float64) for k in range(2)]
    assert max(max(r.values()) for r in ratios) <= hm.THRESHOLD, ratios
    return f"worst ratio {max(max(r.values()) for r in ratios):.2f}"


@case("stedc_tiles_float64")
def _():
    # every power-of-two tile gives the same answer (n = 1000: a partial last tile for most), and
    # the time of each at n = 8192 (the default STEDC_TILE comes from this measurement)
    out = []
    for n, tiles in ((1000, (8, 64, 256, 1024)), (8192, (64, 128, 256, 512, 1024))):
        d, e = (jnp.asarray(x) for x in tridiagonal_of("random", n, np.float64))
        for tile in tiles:
            f = jax.jit(lambda d, e, tile=tile: native_band.stedc(d, e, tile=tile))
            w, z, status = jax.block_until_ready(f(d, e))
            t0 = time.perf_counter()
            jax.block_until_ready(f(d, e))
            seconds = time.perf_counter() - t0
            assert int(status) == 0, (n, tile, int(status))
            if n <= 1000:
                ratios = eigh_ratios(d, e, w, z, np.float64)
                assert max(ratios.values()) <= hm.THRESHOLD, (n, tile, ratios)
            out.append(f"n={n} tile={tile}: {seconds:.3f}s")
    return "; ".join(out)


@case("stedc_16384_float64_timing")
def _():
    n = 16384
    d, e = (jnp.asarray(x) for x in tridiagonal_of("random", n, np.float64))
    f = jax.jit(native_band.tridiagonal_eigh)
    t0 = time.perf_counter()
    w, z = jax.block_until_ready(f(d, e))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    w, z = jax.block_until_ready(f(d, e))
    second = time.perf_counter() - t0
    # the ratios on the GPU (float64): residual O(N^2), Z^T Z one product
    tz = d[:, None] * z + jnp.pad(e[:, None] * z[:-1], ((1, 0), (0, 0))) + jnp.pad(e[:, None] * z[1:], ((0, 1), (0, 0)))
    norm1 = float(jnp.max(jnp.abs(d) + jnp.pad(jnp.abs(e), (0, 1)) + jnp.pad(jnp.abs(e), (1, 0))))
    resid = hm.ratio(float(jnp.max(jnp.sum(jnp.abs(tz - z * w[None, :]), axis=0))), norm1, n, np.float64)
    orth = hm.ratio(float(jnp.max(jnp.sum(jnp.abs(z.T @ z - jnp.eye(n)), axis=0))), 1.0, n, np.float64)
    assert resid <= hm.THRESHOLD and orth <= hm.THRESHOLD, (resid, orth)
    dense = jnp.diag(d) + jnp.diag(e, -1) + jnp.diag(e, 1)
    g = jax.jit(jnp.linalg.eigh)
    jax.block_until_ready(g(dense))
    t0 = time.perf_counter()
    jax.block_until_ready(g(dense))
    dense_s = time.perf_counter() - t0
    return (
        f"tridiagonal_eigh first {first:.2f}s, then {second:.3f}s; residual {resid:.2f}, orthogonality "
        f"{orth:.2f}; jnp.linalg.eigh of the dense tridiagonal {dense_s:.2f}s"
    )


for dtype in (np.float32, np.float64):

    @case(f"bisection_{np.dtype(dtype).name}")
    def _(dtype=dtype):
        rng = np.random.default_rng(1)
        n = 2000
        d, e = rng.standard_normal(n).astype(dtype), rng.standard_normal(n - 1).astype(dtype)
        e[500] = 0.0  # a split
        d[:100] = 1.0
        e[:99] = 1e-9  # a cluster
        w = jax.jit(native_band.tridiagonal_eigvalsh)(jnp.asarray(d), jnp.asarray(e))
        t = np.diag(d.astype(np.float64)) + np.diag(e.astype(np.float64), -1) + np.diag(e.astype(np.float64), 1)
        ratio = hm.value_error(w, np.linalg.eigvalsh(t), np.linalg.norm(t, 2), n, dtype)
        assert ratio <= hm.THRESHOLD, ratio
        return f"ratio {ratio:.2f}"


for dtype in DTYPES:

    @case(f"eigvalsh_hard_{np.dtype(dtype).name}")
    def _(dtype=dtype):
        n, out = 384, []
        f = jax.jit(lambda a: ts.eigvalsh(a, 32))
        for kind in hm.KINDS:
            a = hm.matrix(kind, n, n, dtype, structure="hermitian")
            ah = hm.wide(hm.hermitian_of_lower(a))
            ratio = hm.value_error(f(a), np.linalg.eigvalsh(ah), np.linalg.norm(ah, 2), n, dtype)
            out.append(f"{kind} {ratio:.2f}")
            assert ratio <= hm.THRESHOLD, (kind, ratio)
        return ", ".join(out)


@case("eigvalsh_stack_vmap")
def _():
    a = np.stack([hm.matrix(k, 256, 256, np.float32, structure="hermitian") for k in ("geometric-1e2", "repeated")])
    w = jax.jit(jax.vmap(lambda m: ts.eigvalsh(m, 16)))(a)
    ratios = [
        hm.value_error(w[k], np.linalg.eigvalsh(hm.wide(a[k])), np.linalg.norm(hm.wide(a[k]), 2), 256, np.float32)
        for k in range(2)
    ]
    assert max(ratios) <= hm.THRESHOLD, ratios
    return f"ratios {ratios}"


def timed_per_band(fn, n=4096):
    """fn(a, band) on a random symmetric float64 matrix of order n for bands 32, 64 and 128: a,
    the last band's output, and each band's first and second call's times."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float64)
    a = (a + a.T) / 2
    out = []
    for band in (32, 64, 128):
        f = jax.jit(lambda m, band=band: fn(m, band))
        t0 = time.perf_counter()
        result = jax.block_until_ready(f(a))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(f(a))
        out.append(f"b={band}: first {first:.2f}s, then {time.perf_counter() - t0:.3f}s")
    return a, result, out


@case("eigvalsh_4096_float64_timing")
def _():
    n = 4096
    a, w, out = timed_per_band(ts.eigvalsh, n)
    ref = np.linalg.eigvalsh(np.asarray(a))
    ratio = hm.value_error(w, ref, np.linalg.norm(np.asarray(a), 2), n, np.float64)
    assert ratio <= hm.THRESHOLD, ratio
    t0 = time.perf_counter()
    jax.block_until_ready(jax.jit(jnp.linalg.eigvalsh)(a))
    return "; ".join(out) + f"; ratio {ratio:.2f}; jnp.linalg.eigvalsh first {time.perf_counter() - t0:.2f}s"


def eigenpair_ratios(a, w, v, dtype):
    """LAPACK's ratios of an eigendecomposition, in double precision: ||A V - V W|| / (N eps ||A||)
    and ||V^H V - I|| / (N eps)."""
    a, w, v = hm.wide(a), hm.wide(w), hm.wide(v)
    residual = hm.ratio(hm.norm1(a @ v - v * w[None, :]), hm.norm1(a), a.shape[0], dtype)
    return residual, hm.orthogonality(v, dtype)


for dtype in DTYPES:

    @case(f"eigh_hard_{np.dtype(dtype).name}")
    def _(dtype=dtype):
        # default stages: csrc/band.cu's stage 2 with its reflectors, cuSOLVERMp's stedc
        n, out = 384, []
        f = jax.jit(lambda a: ts.eigh(a, 32))
        for kind in (
            "geometric-1e2",
            "geometric-1e15",
            "clustered-small",
            "clustered-large",
            "repeated",
            "graded-rows",
            "rank-deficient",
        ):
            a = hm.matrix(kind, n, n, dtype, structure="hermitian")
            w, v = f(a)
            ratios = eigenpair_ratios(hm.hermitian_of_lower(a), w, v, dtype)
            out.append(f"{kind} {max(ratios):.2f}")
            assert max(ratios) <= hm.THRESHOLD, (kind, ratios)
        return ", ".join(out)


@case("eigh_back_transformations_reference_stage2")
def _():
    # the XLA back-transformations (apply_q2, apply_q1) on the GPU, whatever the native library has
    n, dtype = 300, np.complex128
    a = hm.matrix("geometric-1e7", n, n, dtype, structure="hermitian")
    w, v = jax.jit(lambda a: ts.eigh(a, 16, stage2="reference", stage3="dense"))(a)
    ratios = eigenpair_ratios(a, w, v, dtype)
    assert max(ratios) <= hm.THRESHOLD, ratios
    return f"residual {ratios[0]:.2f}, orthogonality {ratios[1]:.2f}"


@case("eigh_4096_float64_timing")
def _():
    a, (w, v), out = timed_per_band(ts.eigh)
    ratios = eigenpair_ratios(np.asarray(a), w, v, np.float64)
    assert max(ratios) <= hm.THRESHOLD, ratios
    f = jax.jit(jnp.linalg.eigh)
    jax.block_until_ready(f(a))
    t0 = time.perf_counter()
    jax.block_until_ready(f(a))
    return "; ".join(out) + f"; ratios {ratios}; jnp.linalg.eigh {time.perf_counter() - t0:.3f}s"


@case("routes_run_two_stage_where_the_table_sends_them")
def _():
    # TWO_STAGE_ABOVE["cuda"] set to 64 (band 32): jaxmg's eigh, sygvd and svd on the local and batch
    # routes run the two-stage solver with the native stages (a spy on its entry counts the calls)
    import jaxmg
    import jaxmg.numpy.linalg as la
    from jaxmg import _dispatch

    saved, entry, calls = (ts.TWO_STAGE_ABOVE["cuda"], ts.BAND["cuda"]), ts.eigh_of_lower, []
    ts.TWO_STAGE_ABOVE["cuda"], ts.BAND["cuda"] = 64, 32
    ts.eigh_of_lower = lambda a, band, *args: calls.append(band) or entry(a, band, *args)
    _dispatch._compiled.cache_clear()
    jax.clear_caches()
    try:
        n, dtype, out = 192, np.complex128, []
        a = np.stack([hm.matrix(k, n, n, dtype, structure="hermitian") for k in ("clustered-small", "graded-rows")])
        b = np.stack([hm.matrix("geometric-1e2", n, n, dtype, structure="spd")] * 2)
        w, v = la.eigh(a)
        out += [max(eigenpair_ratios(a[k], w[k], v[k], dtype)) for k in range(2)]
        w, v = jax.jit(jax.vmap(jaxmg.sygvd))(a, b)
        out += [
            hm.ratio(
                hm.norm1(hm.wide(a[k]) @ hm.wide(v[k]) - (hm.wide(b[k]) @ hm.wide(v[k])) * hm.wide(w[k])),
                hm.norm1(a[k]) + hm.norm1(b[k]) * float(np.max(np.abs(w[k]))),
                n,
                dtype,
            )
            for k in range(2)
        ]
        g = np.stack([hm.matrix(k, n + 8, n, np.float32) for k in ("rank-deficient", "geometric-1e2")])
        u, s_, vh = la.svd(g, full_matrices=False)
        out += [hm.factor_error(g[k], (hm.wide(u[k]) * hm.wide(s_[k])) @ hm.wide(vh[k]), np.float32) for k in range(2)]
    finally:
        (ts.TWO_STAGE_ABOVE["cuda"], ts.BAND["cuda"]), ts.eigh_of_lower = saved, entry
        _dispatch._compiled.cache_clear()
        jax.clear_caches()
    assert len(calls) >= 3 and set(calls) == {32}, calls
    assert max(out) <= hm.THRESHOLD, out
    return f"two-stage solves traced {len(calls)}; ratios {[round(float(r), 2) for r in out]}"


print(f"SUMMARY {sum(RESULTS)}/{len(RESULTS)} passed", flush=True)
sys.exit(0 if all(RESULTS) else 1)
