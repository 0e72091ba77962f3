"""GPU checks of the two-stage Hermitian eigensolver's CUDA kernels (csrc/band.cu) on one GPU:

    python tests/gpu/two_stage_cases.py

Prints one ``CASE <name> PASS|FAIL <detail>`` line per check and exits 1 if any failed.
``jaxmg_sb2st`` (band -> tridiagonal by pipelined bulge chasing) against its reference
(``jaxmg.kernels.two_stage.band_to_tridiagonal_reference``, the same task order) and LAPACK,
``jaxmg_tridiagonal_bisection`` against LAPACK, and the whole ``two_stage.eigvalsh`` on hard
spectra, for all four dtypes, one matrix and stacks (vmap), by LAPACK's ratio: eigenvalues
within 30 N eps ||A|| of ``numpy.linalg.eigvalsh``'s in double precision; ``two_stage.eigh``
(stage 2's reflectors from the kernel, cuSOLVERMp's stedc, the back-transformations) by
||A V - V W|| / (N eps ||A||) and ||V^H V - I|| / (N eps), each at most 30.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

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
    ratios = [hm.value_error(w[k], np.linalg.eigvalsh(hm.wide(a[k])), np.linalg.norm(hm.wide(a[k]), 2), 256, np.float32)
              for k in range(2)]
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
        for kind in ("geometric-1e2", "geometric-1e15", "clustered-small", "clustered-large", "repeated",
                     "graded-rows", "rank-deficient"):
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


print(f"SUMMARY {sum(RESULTS)}/{len(RESULTS)} passed", flush=True)
sys.exit(0 if all(RESULTS) else 1)
