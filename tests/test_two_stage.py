"""The two-stage Hermitian eigensolver (jaxmg.kernels.two_stage), each stage against LAPACK by its
test ratios: stage 1 (dense -> band) and stage 2 (band -> tridiagonal, the reference of
csrc/band.cu) as orthogonal similarities with exact zeros outside the band, the eigenvalues
within 30 N eps ||A|| of LAPACK's on random, clustered, graded, repeated and rank-deficient
spectra, under jit and vmap; the native wrappers (jaxmg.kernels.ffi.band) by their results'
shapes (a stack's leading dimensions, the reflectors' extents against the reference's tasks) and
their argument checks. The CUDA kernels' arithmetic runs in tests/gpu/two_stage_cases.py."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hard_matrices as hm
from jaxmg.kernels import two_stage as ts

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
N, BAND = 24, 4


def _wide(x):
    return hm.wide(np.asarray(x))


@functools.cache
def _stage1(n, band, dtype):
    return jax.jit(lambda a: ts.reduce_to_band(a, band, reflectors=True))


def _q_of(ys, tt):
    """Q = prod_p (I - Y_p T_p Y_p^H), panel 0 first, in double precision."""
    n = ys.shape[1]
    q = np.eye(n)
    for y, t in zip(_wide(ys), _wide(tt)):
        q = q @ (np.eye(n) - y @ t @ np.conj(y).T)
    return q


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_stage1_is_an_orthogonal_similarity_onto_the_band(dtype):
    n, band = 41, 3  # 13 panels in 3 groups (loops on windows of 41, 29 and 14 rows)
    assert len(ts._segments(ts.panel_count(n, band), ts.SEGMENTS)) == 3
    # reads the lower triangle (the upper one is noise here), as jnp.linalg.eigvalsh with UPLO='L'
    a = hm.matrix("clustered-small", n, n, dtype, structure="hermitian")
    a = a + np.triu(hm.rhs(n, n, dtype), 1)
    b_mat, ys, tt = _stage1(n, band, dtype)(a)
    ah, b_mat = _wide(hm.hermitian_of_lower(a)), np.asarray(b_mat)
    i, j = np.indices((n, n))
    assert np.all(b_mat[np.abs(i - j) > band] == 0), "entries outside the band are not exactly zero"
    assert np.array_equal(b_mat, np.conj(b_mat).T), "B is not exactly Hermitian"
    q = _q_of(ys, tt)
    assert hm.orthogonality(q, dtype) <= hm.THRESHOLD
    assert hm.factor_error(ah, q @ _wide(b_mat) @ np.conj(q).T, dtype) <= hm.THRESHOLD


@functools.cache
def _stage2(vectors):
    return jax.jit(functools.partial(ts.band_to_tridiagonal_reference, vectors=vectors))


@pytest.mark.parametrize("dtype,n,band", [(d, 33, 8) for d in DTYPES] + [(np.float64, N, BAND)],
                         ids=lambda x: np.dtype(x).name if isinstance(x, type) else str(x))
def test_stage2_is_an_orthogonal_similarity_onto_a_tridiagonal(dtype, n, band):
    b_mat = hm.hermitian_band(n, band, dtype)
    d, e, q = _stage2(True)(ts.lower_band(jnp.asarray(b_mat), band))
    d, e, q = np.asarray(d), np.asarray(e), _wide(q)
    assert d.dtype == hm.real_dtype(dtype) and e.dtype == np.dtype(dtype) and e.shape == (n - 1,)
    t = np.diag(d).astype(q.dtype) + np.diag(_wide(e), -1) + np.diag(np.conj(_wide(e)), 1)
    assert hm.orthogonality(q, dtype) <= hm.THRESHOLD
    assert hm.factor_error(_wide(b_mat), q @ t @ np.conj(q).T, dtype) <= hm.THRESHOLD
    w = np.linalg.eigvalsh(_wide(b_mat))
    tri = np.linalg.eigvalsh(t)
    assert hm.value_error(tri, w, np.linalg.norm(_wide(b_mat), 2), n, dtype) <= hm.THRESHOLD


def test_stage2_leaves_a_tridiagonal_alone_and_a_diagonal_band():
    b_mat = hm.hermitian_band(N, 1, np.float64)
    d, e = ts.band_to_tridiagonal_reference(ts.lower_band(jnp.asarray(b_mat), BAND))
    np.testing.assert_array_equal(d, np.diag(b_mat))
    np.testing.assert_array_equal(np.abs(e), np.abs(np.diag(b_mat, -1)))


def _eigvalsh(band, stage3="sterf"):
    return functools.partial(ts.eigvalsh, band=band, stage3=stage3)  # compiled once per shape


KINDS = ["geometric-1e2", "geometric-1e15", "clustered-small", "clustered-large", "repeated", "rank-deficient",
         "graded-rows", "zero"]


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=lambda d: np.dtype(d).name)
def test_eigenvalues_match_lapack_on_hard_spectra(dtype):
    f = _eigvalsh(BAND)
    failures = []
    for kind in KINDS:
        a = hm.matrix(kind, N, N, dtype, structure="hermitian")
        ah = _wide(hm.hermitian_of_lower(a))
        ratio = hm.value_error(f(a), np.linalg.eigvalsh(ah), np.linalg.norm(ah, 2), N, dtype)
        if not ratio <= hm.THRESHOLD:
            failures.append((kind, ratio))
    assert not failures, failures


def test_eigvalsh_in_jit_and_vmap_as_jnp():
    a = hm.rhs(3 * N, N, np.float32).reshape(3, N, N)  # general matrices: (a + a^H) / 2, as jnp
    want = np.asarray(jnp.linalg.eigvalsh(a.astype(np.float64)))
    scale = max(np.linalg.norm(m.astype(np.float64), 2) for m in a)
    got = jax.jit(jax.vmap(_eigvalsh(BAND)))(a)
    assert got.shape == (3, N) and got.dtype == np.float32
    assert hm.value_error(got, want, scale, N, np.float32) <= hm.THRESHOLD
    eager = ts.eigvalsh(a[0], BAND, stage3="bisection")  # eagerly, JAX's bisection
    assert hm.value_error(eager, want[0], scale, N, np.float32) <= hm.THRESHOLD


@pytest.mark.parametrize("n,band", [(1, 4), (2, 4), (3, 2), (6, 5), (6, 1)])
def test_small_orders_and_wide_bands(n, band):
    a = hm.hermitian_band(n, n, np.complex128, seed=n)
    w = ts.eigvalsh(a, band)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a), atol=30 * n * 2.3e-16 * max(np.linalg.norm(a, 2), 1))


def test_lower_band_storage_round_trip():
    b_mat = hm.hermitian_band(7, 2, np.complex64)
    ab = ts.lower_band(jnp.asarray(b_mat), 2)
    assert ab.shape == (3, 7) and ab[2, 5] == 0 and ab[1, 3] == b_mat[4, 3]
    np.testing.assert_array_equal(ts.dense_from_lower_band(ab), b_mat)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="band must be a positive int"):
        ts.eigvalsh(np.eye(4), 0)
    with pytest.raises(ValueError, match=r"square matrix .* got shape \(4, 3\)"):
        ts.eigvalsh(np.ones((4, 3)), 2)
    with pytest.raises(ValueError, match="stage2 must be"):
        ts.eigvalsh(np.eye(4), 2, stage2="gpu")
    with pytest.raises(ValueError, match="method must be one of"):
        ts.tridiagonal_eigvalsh(jnp.ones(3), jnp.ones(2), method="qr")
    with pytest.raises(ValueError, match="one matrix"):
        ts.reduce_to_band(np.ones((2, 4, 4)), 2)
    lower_only = np.tril(hm.hermitian_band(5, 5, np.float64)) + np.triu(np.full((5, 5), 7.0), 1)
    np.testing.assert_allclose(ts.eigvalsh(lower_only, 2, symmetrize_input=False),
                               np.linalg.eigvalsh(lower_only, UPLO="L"), atol=1e-13)
    with pytest.raises(TypeError, match="no derivative"):
        jax.grad(lambda a: ts.eigvalsh(a, 2)[0])(np.eye(4))
    w = ts.eigvalsh(np.diag(np.arange(4)), 2)  # integers as float, as jnp.linalg.eigvalsh
    np.testing.assert_allclose(w, [0, 1, 2, 3])


@pytest.mark.parametrize("dtype", [np.float64, np.complex64], ids=lambda d: np.dtype(d).name)
def test_pipelined_task_order_of_the_cuda_kernel_gives_the_same_tridiagonal(dtype):
    # csrc/band.cu runs task t of sweep i once sweep i - 1 has completed t + PIPELINE_LAG - 1
    # tasks; replayed here (concurrent tasks of a round in reverse), the result is the sequential one.
    n, band = 30, 3
    ab = ts.lower_band(jnp.asarray(hm.hermitian_band(n, band, dtype)), band)
    order = ts.task_order(n, band, ts.PIPELINE_LAG)
    assert sorted(map(tuple, order)) == sorted(map(tuple, ts.task_order(n, band)))
    assert not np.array_equal(order, ts.task_order(n, band)), "the replay must reorder tasks"
    want = ts.band_to_tridiagonal_reference(ab)
    got = ts.band_to_tridiagonal_reference(ab, lag=ts.PIPELINE_LAG)
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)


def test_bench_eigen_records_the_two_stage_stages(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("XLA_FLAGS", None)
    out = tmp_path / "eigen.jsonl"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_eigen.py"), "--cases", "eigvalsh",
                           "--impls", "jaxmg.two_stage", "--sizes", "20", "--stacks", "--dtypes", "float64",
                           "--bands", "3", "--runs", "1", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert "error" not in rec, rec
    assert rec["impl"] == "jaxmg.two_stage" and rec["band"] == 3 and rec["N"] == 20
    assert rec["median_s"] > 0 and rec["stage1_s"] > 0 and rec["stage23_s"] > 0
    assert 0 <= rec["value_error"] <= hm.THRESHOLD


# --- the native wrappers (jaxmg.kernels.ffi.band): their contract's shapes and argument checks;
# --- their arithmetic runs in tests/gpu/two_stage_cases.py

@pytest.fixture
def traced_without_gpu(monkeypatch):
    """The native wrappers traced (jax.eval_shape: nothing is lowered) where the native library
    is not built: registration skipped, sb2st's scratch size a stand-in."""
    from types import SimpleNamespace

    from jaxmg.kernels.ffi import _library

    monkeypatch.setattr(_library, "register", lambda: None)
    monkeypatch.setattr(_library, "_native_module", lambda: SimpleNamespace(sb2st_scratch_bytes=lambda n, b, s: 64))


@pytest.mark.parametrize("n,band", [(2, 3), (3, 1), (3, 2), (10, 3), (11, 3), (33, 8)])
def test_sb2st_reflector_extents_cover_the_reference_tasks(n, band):
    # the native kernel writes task t of sweep i at v[i, t]; its reflector starts at row i + 1 + t b
    from jaxmg.kernels.ffi import band as native_band

    sweeps, tasks = native_band.reflector_extents(n, band)
    assert sweeps == max(n - 2, 0)
    order = ts.task_order(n, band)
    counts = [ts.sweep_tasks(n, band, i) for i in range(sweeps)] if band > 1 else [0] * sweeps
    assert len(order) == sum(counts) and all(c <= tasks for c in counts)
    if band > 1 and counts:
        assert tasks == counts[0] == max(counts)
    k = 0
    for i, count in enumerate(counts):
        for t in range(count):
            c, d = order[k]
            assert c + d == i + 1 + t * band and c + d <= n - 2
            k += 1


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=lambda d: np.dtype(d).name)
def test_band_to_tridiagonal_shapes(traced_without_gpu, dtype):
    from jaxmg.kernels.ffi import band as native_band

    n, band = 11, 3
    ab = jax.ShapeDtypeStruct((2, band + 1, n), dtype)
    real = hm.real_dtype(dtype)
    d, e, v, tau = jax.eval_shape(lambda x: native_band.band_to_tridiagonal(x, reflectors=True), ab)
    assert (d.shape, d.dtype, e.shape, e.dtype) == ((2, n), real, (2, n - 1), dtype)
    assert (v.shape, v.dtype, tau.shape, tau.dtype) == ((2, n - 2, 3, band), dtype, (2, n - 2, 3), dtype)
    d, e = jax.eval_shape(jax.vmap(native_band.band_to_tridiagonal), ab)
    assert d.shape == (2, n) and e.shape == (2, n - 1)
    vm = jax.eval_shape(jax.vmap(lambda x: native_band.band_to_tridiagonal(x, reflectors=True)), ab)
    assert [x.shape for x in vm] == [(2, n), (2, n - 1), (2, n - 2, 3, band), (2, n - 2, 3)]


def test_tridiagonal_eigh_shapes(traced_without_gpu):
    from jaxmg.kernels.ffi import band as native_band

    d, e = jax.ShapeDtypeStruct((3, 5), np.float32), jax.ShapeDtypeStruct((3, 4), np.float32)
    w, z, status = jax.eval_shape(native_band.stedc, d, e)
    assert (w.shape, w.dtype, z.shape, z.dtype) == ((3, 5), np.float32, (3, 5, 5), np.float32)
    assert (status.shape, status.dtype) == ((3,), np.int32)
    w, z = jax.eval_shape(jax.vmap(native_band.tridiagonal_eigh), d, e)
    assert w.shape == (3, 5) and z.shape == (3, 5, 5)
    w = jax.eval_shape(native_band.tridiagonal_eigvalsh, d, e)
    assert w.shape == (3, 5)
    w, z = native_band.tridiagonal_eigh(jnp.zeros((2, 0)), jnp.zeros((2, 0)))  # order 0: nothing to call
    assert w.shape == (2, 0) and z.shape == (2, 0, 0)


def test_native_wrappers_name_bad_arguments():
    from jaxmg.kernels.ffi import band as native_band

    with pytest.raises(ValueError, match=r"ab must be lower band storage .* got shape \(5,\)"):
        native_band.band_to_tridiagonal(jnp.ones(5))
    with pytest.raises(ValueError, match="ab's dtype must be"):
        native_band.band_to_tridiagonal(jnp.ones((2, 5), jnp.int32))
    with pytest.raises(ValueError, match="d must be float32 or float64 .* pass |e|"):
        native_band.tridiagonal_eigh(jnp.ones(4, jnp.complex64), jnp.ones(3, jnp.complex64))
    with pytest.raises(ValueError, match=r"e must be the off-diagonal of shape \(4,\) .* got \(5,\)"):
        native_band.tridiagonal_eigh(jnp.ones(5), jnp.ones(5))
    with pytest.raises(ValueError, match="one dtype"):
        native_band.tridiagonal_eigh(jnp.ones(5, jnp.float32), jnp.ones(4, jnp.float64))
    for tile in (0, 3, 48, True, 2.0):
        with pytest.raises(ValueError, match="tile must be a positive power of two"):
            native_band.tridiagonal_eigh(jnp.ones(5), jnp.ones(4), tile=tile)
    with pytest.raises(ValueError, match=r"e must be the off-diagonal of shape \(2, 3\)"):
        native_band.tridiagonal_eigvalsh(jnp.ones((2, 4)), jnp.ones(3))
