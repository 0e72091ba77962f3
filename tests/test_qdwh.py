"""The QDWH polar decomposition and the SVD composed from it (jaxmg/kernels/qdwh.py), on CPU.

The accuracy target, float64: ||U_p^H U_p - I||_F / sqrt(N) and ||A - U_p H||_F / ||A||_F
at most 1e-12 for condition numbers up to 1e12 (constructed: A = U diag(s) V^H with s
geometric from 1 to 1/cond), on several grids and both device orders.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

from helpers import conditioned
from jaxmg import _layout
from jaxmg._sharded import gather_block, local_block
from jaxmg.kernels import local, qdwh


def _syevd(a, *, grid):
    """The device's own syevd on the gathered matrix: (w, v block, status), as a per-shard kernel."""
    w, v, status = local.Decompositions(None).syevd(gather_block(a, grid))
    return w, local_block(v, grid), status


if jax.default_backend() != "cpu" or len(jax.devices()) < 4:
    pytest.skip("needs 4 CPU devices (tests/conftest.py sets up 8)", allow_module_level=True)


def _mesh(shape, reverse):
    devs = jax.devices()[: int(np.prod(shape))]
    if reverse:
        devs = devs[::-1]
    return jax.make_mesh(shape, ("x", "y"), axis_types=(AxisType.Auto,) * 2, devices=devs)


def _run(fn, grid, mesh, nout):
    return jax.jit(
        jax.shard_map(lambda a: fn(a, grid=grid), mesh=mesh, in_specs=grid.spec, out_specs=nout, check_vma=False)
    )


@pytest.mark.parametrize("cond", [1.0, 1e6, 1e12])
@pytest.mark.parametrize(
    "shape,reverse,m,n",
    [((1, 1), False, 96, 96), ((2, 2), True, 128, 96), ((2, 1), False, 128, 64), ((1, 2), True, 96, 96)],
)
def test_polar_accuracy_float64(shape, reverse, m, n, cond):
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = conditioned(m, n, cond, np.float64)
    u, h, status = _run(qdwh.polar, grid, mesh, (grid.spec, grid.spec, P()))(a)
    u, h = np.asarray(u), np.asarray(h)
    assert int(status) == 0
    orth = np.linalg.norm(u.T @ u - np.eye(n)) / np.sqrt(n)
    back = np.linalg.norm(a - u @ h) / np.linalg.norm(a)
    assert orth <= 1e-12 and back <= 1e-12, (orth, back)
    assert np.allclose(h, h.T) and np.linalg.eigvalsh(h).min() > -1e-12
    uu, s, vh = np.linalg.svd(a, full_matrices=False)
    if cond < 1e10:  # U_p is unique for full-rank A, and well determined when A is well conditioned
        np.testing.assert_allclose(u, uu @ vh, atol=1e-9 * cond)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.complex128])
def test_polar_other_dtypes(dtype):
    mesh = _mesh((2, 2), False)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    m, n = 96, 64
    a = conditioned(m, n, 1e3, dtype)
    u, h, status = _run(qdwh.polar, grid, mesh, (grid.spec, grid.spec, P()))(a)
    u, h = np.asarray(u).astype(np.complex128), np.asarray(h).astype(np.complex128)
    eps = np.finfo(dtype).eps
    assert int(status) == 0
    assert np.linalg.norm(np.conj(u).T @ u - np.eye(n)) / np.sqrt(n) < 100 * eps
    assert np.linalg.norm(a - u @ h) / np.linalg.norm(a) < 100 * eps


@pytest.mark.parametrize("full_matrices", [False, True])
@pytest.mark.parametrize(
    "shape,reverse,dtype", [((2, 2), False, np.float64), ((1, 2), True, np.complex128), ((2, 1), True, np.float32)]
)
def test_gesvd_composed(shape, reverse, dtype, full_matrices):
    mesh = _mesh(shape, reverse)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    m, n = 128, 64
    a = conditioned(m, n, 1e4, dtype, seed=3)

    def fn(a, grid):
        return qdwh.gesvd(a, grid=grid, full_matrices=full_matrices, syevd=_syevd)

    u, s, vh, status = _run(fn, grid, mesh, (grid.spec, P(), grid.spec, P()))(a)
    u, s, vh = (np.asarray(x).astype(np.complex128) for x in (u, s, vh))
    eps = np.finfo(dtype).eps
    assert int(status) == 0
    assert u.shape == ((m, m) if full_matrices else (m, n)) and vh.shape == (n, n)
    assert np.all(np.diff(s.real) <= 0)
    np.testing.assert_allclose(s.real, np.linalg.svd(a, compute_uv=False), atol=100 * eps)
    k = u.shape[1]
    assert np.linalg.norm(np.conj(u).T @ u - np.eye(k)) < 100 * eps * np.sqrt(k)
    assert np.linalg.norm(a - (u[:, :n] * s) @ vh) / np.linalg.norm(a) < 100 * eps


def test_polar_not_finite():
    mesh = _mesh((2, 2), False)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = conditioned(64, 64, 10.0, np.float64)
    a[3, 5] = np.nan
    u, h, status = _run(qdwh.polar, grid, mesh, (grid.spec, grid.spec, P()))(a)
    assert int(status) == -1 and np.all(np.isnan(np.asarray(u))) and np.all(np.isnan(np.asarray(h)))


def _dot_precisions(jaxpr):
    """The precision of every dot_general in ``jaxpr`` and its sub-jaxprs."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for sub in jax.core.subjaxprs(eqn) if hasattr(jax.core, "subjaxprs") else ():
            found += _dot_precisions(sub)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                found += _dot_precisions(inner)
    return found


@pytest.mark.parametrize("kernel", ["polar", "gesvd"])
def test_products_run_at_full_precision(kernel):
    """GPUs multiply float32 in TF32 by default, which left errors up to 4e-4 in U_p on an H200:
    every product of the iteration must be traced with Precision.HIGHEST."""
    mesh = _mesh((2, 2), False)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    a = conditioned(64, 32, 10.0, np.float32)
    if kernel == "polar":
        fn = lambda a: qdwh.polar(a, grid=grid)  # noqa: E731
        outs = (grid.spec, grid.spec, P())
    else:
        fn = lambda a: qdwh.gesvd(a, grid=grid, full_matrices=False, syevd=_syevd)  # noqa: E731
        outs = (grid.spec, P(), grid.spec, P())
    traced = jax.make_jaxpr(jax.shard_map(fn, mesh=mesh, in_specs=grid.spec, out_specs=outs, check_vma=False))(a)
    precisions = _dot_precisions(traced.jaxpr)
    highest = jax.lax.Precision.HIGHEST
    assert len(precisions) >= 5
    assert all(p is not None and tuple(p) == (highest, highest) for p in precisions), precisions


def _rank_deficient(m, n, rank, dtype, seed=5):
    if rank == 0:
        return np.zeros((m, n), dtype)
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, rank)) @ rng.standard_normal((rank, n))).astype(dtype)


@pytest.mark.parametrize("rank", [0, 8])
@pytest.mark.parametrize("shape,dtype", [((2, 2), np.float64), ((2, 1), np.complex128), ((1, 2), np.float64)])
def test_rank_deficient_on_the_grid(shape, dtype, rank):
    """A matrix of rank < N: QDWH leaves U_p a partial isometry (U_p = 0 for a zero matrix); the
    distributed polar and gesvd complete its columns (TSQR over the row slabs) so that U_p and U
    have orthonormal columns, A = U_p H with H positive semidefinite, and A = U diag(s) V^H."""
    mesh = _mesh(shape, False)
    grid = _layout.Grid(mesh, ("x",), ("y",))
    m, n = 64, 32
    a = _rank_deficient(m, n, rank, dtype)
    eps, scale = np.finfo(dtype).eps, max(np.linalg.norm(a, 2), 1.0)
    u_p, h, status = (np.asarray(x) for x in _run(qdwh.polar, grid, mesh, (grid.spec, grid.spec, P()))(a))

    def gesvd(a, grid):
        return qdwh.gesvd(a, grid=grid, full_matrices=False, syevd=_syevd)

    u, s, vh, status_svd = (np.asarray(x) for x in _run(gesvd, grid, mesh, (grid.spec, P(), grid.spec, P()))(a))
    assert int(status) == 0 and int(status_svd) == 0
    for q in (u_p, u):
        assert np.linalg.norm(np.conj(q).T @ q - np.eye(n)) / (n * eps) < 30
    assert np.linalg.norm(a - u_p @ h) / (n * eps * scale) < 30
    assert np.allclose(h, np.conj(h).T) and np.linalg.eigvalsh(h).min() > -30 * n * eps * scale
    assert np.linalg.norm(a - (u * s) @ vh) / (n * eps * scale) < 30
