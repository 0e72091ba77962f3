"""The two-stage Hermitian eigensolver (jaxmg.kernels.two_stage), each stage against LAPACK by its
test ratios: stage 1 (dense -> band) and stage 2 (band -> tridiagonal, the reference of
csrc/band.cu) as orthogonal similarities with exact zeros outside the band, the eigenvalues
within 30 N eps ||A|| of LAPACK's on random, clustered, graded, repeated and rank-deficient
spectra, under jit and vmap; the back-transformations (apply_q1, apply_q2) against the dense
products of their reflectors, the tridiagonal's eigenvectors, and eigh's vectors by LAPACK's
ratios and derivatives; the native wrappers (jaxmg.kernels.ffi.band) by their results' shapes
(a stack's leading dimensions, the reflectors' extents against the reference's tasks) and their
argument checks. The CUDA kernels' arithmetic runs in tests/gpu/two_stage_cases.py."""

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
    z = hm.rhs(n, 5, dtype)  # the back-transformation: Q1 z as the panels' blocks, in reverse
    assert hm.factor_error(q @ _wide(z), ts.apply_q1(ys, tt, z), dtype) <= hm.THRESHOLD


def _q2_of(v, tau, n):
    """Q2 = prod over (sweep, task) in lexicographic order of (I - tau v v^H), v on rows
    sweep + 1 + task * b + k, in double precision (entries past row N - 1 must be zero)."""
    v, tau = _wide(v), _wide(tau)
    sweeps, tasks, b = v.shape
    q = np.eye(n, dtype=v.dtype)
    for i in range(sweeps):
        for t in range(tasks):
            row = i + 1 + t * b
            assert not np.any(v[i, t, max(n - row, 0) :]), "reflector entries past the last row"
            x = np.zeros(n, v.dtype)
            x[row : row + b] = v[i, t, : max(n - row, 0)]
            q = q - np.outer(q @ x, tau[i, t] * np.conj(x))
    return q


@functools.cache
def _stage2():
    return jax.jit(functools.partial(ts.band_to_tridiagonal_reference, reflectors=True))


@pytest.mark.parametrize(
    "dtype,n,band",
    [(d, 33, 8) for d in DTYPES] + [(np.float64, N, BAND)],
    ids=lambda x: np.dtype(x).name if isinstance(x, type) else str(x),
)
def test_stage2_is_an_orthogonal_similarity_onto_a_tridiagonal(dtype, n, band):
    b_mat = hm.hermitian_band(n, band, dtype)
    d, e, v, tau = _stage2()(ts.lower_band(jnp.asarray(b_mat), band))
    d, e = np.asarray(d), np.asarray(e)
    assert d.dtype == hm.real_dtype(dtype) and e.dtype == np.dtype(dtype) and e.shape == (n - 1,)
    sweeps, tasks = n - 2, (n - 3) // band + 1
    assert v.shape == (sweeps, tasks, band) and tau.shape == (sweeps, tasks) and v.dtype == tau.dtype == dtype
    has = np.arange(tasks)[None, :] < np.array([ts.sweep_tasks(n, band, i) for i in range(sweeps)])[:, None]
    assert np.all(np.asarray(v)[has][:, 0] == 1) and not np.any(np.asarray(v)[~has]) and not np.any(tau[~has])
    q = _q2_of(v, tau, n)
    t = np.diag(d).astype(q.dtype) + np.diag(_wide(e), -1) + np.diag(np.conj(_wide(e)), 1)
    assert hm.orthogonality(q, dtype) <= hm.THRESHOLD
    assert hm.factor_error(_wide(b_mat), q @ t @ np.conj(q).T, dtype) <= hm.THRESHOLD
    w = np.linalg.eigvalsh(_wide(b_mat))
    tri = np.linalg.eigvalsh(t)
    assert hm.value_error(tri, w, np.linalg.norm(_wide(b_mat), 2), n, dtype) <= hm.THRESHOLD


def _reflectors(n, band, dtype, seed=0):
    """Unitary reflectors in stage 2's layout, random (some the identity: tau = 0, v = e_0)."""
    rng = np.random.default_rng(seed)
    sweeps, tasks, _ = ts.reflector_shape(n, band)
    v = hm.rhs(sweeps * tasks, band, dtype, seed=seed).reshape(sweeps, tasks, band)
    v[..., 0] = 1
    rows = np.arange(sweeps)[:, None, None] + 1 + np.arange(tasks)[None, :, None] * band + np.arange(band)
    has = np.arange(tasks)[None, :] < np.array([ts.sweep_tasks(n, band, i) for i in range(sweeps)])[:, None]
    v = np.where((rows < n) & has[..., None], v, 0)
    angle = rng.uniform(0.3, 2 * np.pi - 0.3, has.shape) if hm.is_complex(dtype) else np.pi
    tau = np.where(has, (1 - np.exp(1j * angle)).real if not hm.is_complex(dtype) else 1 - np.exp(1j * angle), 0)
    tau = tau / np.sum(np.abs(hm.wide(v)) ** 2, axis=-1).clip(1)
    identity = has & (rng.uniform(size=has.shape) < 0.1)
    v[identity] = np.eye(1, band)[0]
    return v.astype(dtype), np.where(identity, 0, tau).astype(dtype)


@pytest.mark.parametrize("band", [2, 3, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_apply_q2_is_the_product_of_the_reflectors(dtype, band):
    n = 5 * band + 1  # not a multiple of b; the last tasks' reflectors run past the last row
    v, tau = _reflectors(n, band, dtype, seed=band)
    q = _q2_of(v, tau, n)
    assert hm.orthogonality(q, dtype) <= hm.THRESHOLD
    z = hm.rhs(n, 6, dtype)
    assert hm.factor_error(q @ _wide(z), ts.apply_q2(v, tau, z), dtype) <= hm.THRESHOLD
    if band == 8 and dtype == np.complex128:  # fewer sweeps a block than b
        assert hm.factor_error(q @ _wide(z), ts.apply_q2(v, tau, z, group=3), dtype) <= hm.THRESHOLD


@pytest.mark.parametrize("n,band,group", [(40, 4, 4), (45, 4, 3), (50, 3, 1)])
def test_q2_wavefront_applies_every_block_once_after_the_blocks_it_overlaps(n, band, group):
    blocks, rows = ts.q2_schedule(n, band, group)
    sweeps, tasks, _ = ts.reflector_shape(n, band)
    groups = -(-sweeps // group)
    real = blocks[blocks < groups * tasks]
    assert len(real) == len(set(real.tolist())) == sum(ts.sweep_tasks(n, band, g * group) for g in range(groups))
    when = {divmod(int(blk), tasks): s for s, product in enumerate(blocks) for blk in product if blk < groups * tasks}
    for (g, t), s in when.items():  # after (g + 1, t), (g + 1, t - 1) and (g, t - 1)
        before = [when.get(pair) for pair in ((g + 1, t), (g + 1, t - 1), (g, t - 1))]
        assert all(x is None or x < s for x in before), (g, t)
    m = band + group - 1
    for product, starts in zip(blocks, rows):
        spans = sorted((r, r + m) for blk, r in zip(product, starts) if blk < groups * tasks)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_tridiagonal_eigenvectors_of_a_hermitian_tridiagonal(dtype):
    n, rdtype = 20, hm.real_dtype(dtype)
    rng = np.random.default_rng(3)
    d = rng.standard_normal(n).astype(rdtype)
    e = hm.rhs(n - 1, 1, dtype)[:, 0]
    e[7] = 0  # a split
    d[10:14], e[10:13] = 1.0, 1e-9  # a cluster
    t = np.diag(_wide(d)) + np.diag(_wide(e), -1) + np.diag(np.conj(_wide(e)), 1)
    for method in ("stedc", "dense"):
        w, v = ts.tridiagonal_eigh(jnp.asarray(d), jnp.asarray(e), method=method)
        assert w.dtype == rdtype and v.dtype == dtype and v.shape == (n, n)
        _assert_eigenpairs(t, w, v, dtype)


def _assert_eigenpairs(a, w, v, dtype):
    """LAPACK's ratios of an eigendecomposition: ||A V - V W|| / (N eps ||A||), ||V^H V - I|| / (N eps)
    and the eigenvalues' distance to LAPACK's, each at most 30."""
    a, w, v = _wide(a), _wide(w), _wide(v)
    n, scale = a.shape[0], hm.norm1(a)
    assert np.all(np.diff(w) >= 0), "eigenvalues not ascending"
    ratios = (
        hm.ratio(hm.norm1(a @ v - v * w[None, :]), scale, n, dtype),
        hm.orthogonality(v, dtype),
        hm.value_error(w, np.linalg.eigvalsh(a), np.linalg.norm(a, 2), n, dtype),
    )
    assert max(ratios) <= hm.THRESHOLD, ratios


def test_stage2_leaves_a_tridiagonal_alone_and_a_diagonal_band():
    b_mat = hm.hermitian_band(N, 1, np.float64)
    d, e = ts.band_to_tridiagonal_reference(ts.lower_band(jnp.asarray(b_mat), BAND))
    np.testing.assert_array_equal(d, np.diag(b_mat))
    np.testing.assert_array_equal(np.abs(e), np.abs(np.diag(b_mat, -1)))


def _eigvalsh(band, stage3="sterf"):
    return functools.partial(ts.eigvalsh, band=band, stage3=stage3)  # compiled once per shape


KINDS = [
    "geometric-1e2",
    "geometric-1e15",
    "clustered-small",
    "clustered-large",
    "repeated",
    "rank-deficient",
    "graded-rows",
    "zero",
]


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
    np.testing.assert_allclose(
        ts.eigvalsh(lower_only, 2, symmetrize_input=False), np.linalg.eigvalsh(lower_only, UPLO="L"), atol=1e-13
    )
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


@pytest.mark.slow
def test_bench_eigen_records_the_two_stage_stages_and_vectors(tmp_path):
    from helpers import run_benchmark

    values, vectors = run_benchmark(
        "bench_eigen.py",
        tmp_path / "eigen.jsonl",
        "--cases",
        "eigvalsh",
        "eigh",
        "--impls",
        "jaxmg.two_stage",
        "--sizes",
        "20",
        "--stacks",
        "--dtypes",
        "float64",
        "--bands",
        "3",
        "--runs",
        "1",
    )
    for rec in (values, vectors):
        assert "error" not in rec, rec
        assert rec["impl"] == "jaxmg.two_stage" and rec["band"] == 3 and rec["N"] == 20
        assert rec["median_s"] > 0 and rec["stage1_s"] > 0 and 0 <= rec["value_error"] <= hm.THRESHOLD
    assert values["case"] == "eigvalsh" and values["stage23_s"] > 0
    assert vectors["case"] == "eigh" and min(vectors[k] for k in ("stage2_s", "stage3_s", "backtransform_s")) > 0
    assert 0 <= vectors["orthogonality"] <= hm.THRESHOLD and 0 <= vectors["residual"] <= hm.THRESHOLD


# --- eigh: eigenvectors through both back-transformations -----------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_eigh_vectors_by_lapack_ratios_on_hard_spectra(dtype):
    f, failures = functools.partial(ts.eigh, band=BAND), []  # eagerly (compiled once per shape)
    for kind in ("clustered-small", "clustered-large", "graded-rows", "repeated", "geometric-1e15"):
        a = hm.matrix(kind, N, N, dtype, structure="hermitian")
        a = a + (1e-3 * np.max(np.abs(a)) * np.tril(hm.rhs(N, N, dtype), -1)).astype(dtype)  # not Hermitian
        w, v = f(a)
        assert w.dtype == hm.real_dtype(dtype) and v.dtype == dtype and v.shape == (N, N)
        try:
            _assert_eigenpairs((_wide(a) + np.conj(_wide(a)).T) / 2, w, v, dtype)
        except AssertionError as err:
            failures.append((kind, str(err)))
    assert not failures, failures


def test_tiny_and_huge_scales_are_scaled_into_range():
    """A stack of one matrix near 1e-300 and one near 1e300 (each scaled into range on its own,
    as LAPACK's heevd scales): without the scaling, stage 2's products of entries near 1e-300
    lose digits to underflow."""
    base = hm.matrix("geometric-1e2", 37, 37, np.complex128, structure="hermitian")
    scales = np.array([1e-300, 1e300])
    a = base[None] * scales[:, None, None]
    values = ts.eigvalsh(a, 2)
    w, v = ts.eigh(a, 2)
    for k, scale in enumerate(scales):
        want = np.linalg.eigvalsh(base)
        err = hm.value_error(np.asarray(values[k]) / scale, want, np.linalg.norm(base, 2), 37, np.complex128)
        assert err <= hm.THRESHOLD, (scale, err)
        _assert_eigenpairs(base, np.asarray(w[k]) / scale, v[k], np.complex128)


def test_eigh_eagerly_in_jit_and_under_vmap_as_jnp():
    a = hm.rhs(3 * N, N, np.complex64).reshape(3, N, N)  # general matrices: (a + a^H) / 2, as jnp
    w, v = jax.jit(jax.vmap(functools.partial(ts.eigh, band=BAND)))(a)
    assert w.shape == (3, N) and v.shape == (3, N, N)
    w_stack, v_stack = ts.eigh(a, BAND)  # a stack, eagerly
    for k in range(3):
        sym = (_wide(a[k]) + np.conj(_wide(a[k])).T) / 2
        _assert_eigenpairs(sym, w[k], v[k], np.complex64)
        _assert_eigenpairs(sym, w_stack[k], v_stack[k], np.complex64)
    lower_only = np.tril(a[0]) + np.triu(np.full((N, N), 7.0, np.complex64), 1)
    w, v = ts.eigh(lower_only, BAND, symmetrize_input=False)  # the lower triangle, as jnp.linalg.eigh's
    _assert_eigenpairs(hm.hermitian_of_lower(lower_only), w, v, np.complex64)


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_eigh_small_orders(n):
    a = hm.hermitian_band(n, n, np.complex128, seed=n) if n else np.zeros((2, 0, 0), np.complex128)
    w, v = ts.eigh(a, 4)
    assert w.shape == a.shape[:-1] and v.shape == a.shape and w.dtype == np.float64 and v.dtype == np.complex128
    if n:
        _assert_eigenpairs(a, w, v, np.complex128)


@pytest.mark.parametrize(
    "dtype,symmetrize", [(np.float64, True), (np.complex128, False)], ids=["float64", "complex128-lower"]
)
def test_eigh_derivatives_are_jaxmg_eigh_rule(dtype, symmetrize):
    from jax.test_util import check_grads

    n = 8
    q = hm.unitary(np.random.default_rng(5), n, hm.is_complex(dtype))
    a = ((q * np.arange(1.0, n + 1)) @ np.conj(q).T + 0.01 * hm.rhs(n, n, dtype)).astype(dtype)  # well separated

    def f(a):  # gauge-invariant functions of the vectors
        w, v = ts.eigh(a, 2, symmetrize_input=symmetrize)
        return w, jnp.abs(v) ** 2

    check_grads(f, (a,), order=1, modes=("fwd", "rev"))


def test_eigh_bad_arguments_are_named():
    with pytest.raises(ValueError, match="stage3 must be one of"):
        ts.eigh(np.eye(4), 2, stage3="sterf")
    with pytest.raises(ValueError, match="method must be one of"):
        ts.tridiagonal_eigh(jnp.ones(3), jnp.ones(2), method="qr")
    with pytest.raises(ValueError, match="subdiagonal"):
        ts.tridiagonal_eigh(jnp.ones(3), jnp.ones(3))
    v, tau = _reflectors(11, 2, np.float64)
    with pytest.raises(ValueError, match="apply_q2: v must be"):
        ts.apply_q2(v, tau, np.ones((12, 2)))
    with pytest.raises(ValueError, match="group must be"):
        ts.apply_q2(v, tau, np.ones((11, 2)), group=3)
    with pytest.raises(ValueError, match="apply_q1: ys must be"):
        ts.apply_q1(np.ones((2, 5, 2)), np.ones((2, 2, 2)), np.ones((4, 1)))


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
        # 2.0 meets jaxtyping's check of ``tile: int`` first where the suite runs it (a TypeError)
        with pytest.raises((ValueError, TypeError), match="tile must be a positive power of two|parameter 'tile'"):
            native_band.tridiagonal_eigh(jnp.ones(5), jnp.ones(4), tile=tile)
    with pytest.raises(ValueError, match=r"e must be the off-diagonal of shape \(2, 3\)"):
        native_band.tridiagonal_eigvalsh(jnp.ones((2, 4)), jnp.ones(3))


@pytest.mark.parametrize("axis_type", ["Explicit", "Auto"])
def test_eigh_of_a_stack_split_over_a_mesh_and_in_shard_map(axis_type):
    from jax.sharding import NamedSharding, PartitionSpec as P

    count, n = len(jax.devices()), 12
    mesh = jax.make_mesh((count,), ("x",), axis_types=(getattr(jax.sharding.AxisType, axis_type),))
    a = hm.rhs(count * n, n, np.float64).reshape(count, n, n)
    x = jax.device_put(a, NamedSharding(mesh, P("x")))
    f = functools.partial(ts.eigh, band=3)
    results = [jax.jit(f)(x)]
    if axis_type == "Explicit":
        results.append(jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x"))))(x))
        w = jax.jit(functools.partial(ts.eigvalsh, band=3))(x)
        assert hm.value_error(w, np.linalg.eigvalsh((a + a.transpose(0, 2, 1)) / 2), 10.0, n, np.float64) <= 30
    for w, v in results:
        w, v = np.asarray(w), np.asarray(v)
        for k in range(count):
            _assert_eigenpairs((a[k] + a[k].T) / 2, w[k], v[k], np.float64)
