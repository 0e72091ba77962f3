"""jax.vmap over every operation and module (also of grad, and inside jit), and the
per-shard layer ``jaxmg.ops.local`` inside a user's own jax.shard_map."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import jaxmg
from helpers import hermitian_matrix, lower_read, make_mesh, put, random_matrix, spd_matrix

N, M, BATCH = 16, 32, 3
RNG = np.random.default_rng(0)
SPD = np.stack([spd_matrix(RNG, N, np.float64) for _ in range(BATCH)])
HER = np.stack([hermitian_matrix(RNG, N, np.float64) for _ in range(BATCH)])
TALL = np.stack([random_matrix(RNG, (M, N), np.float64) for _ in range(BATCH)])
RHS = RNG.standard_normal((BATCH, N))


@pytest.fixture(autouse=True)
def auto_mesh():
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    with jax.set_mesh(mesh):
        yield mesh


def batched(f, *args):
    return jax.jit(jax.vmap(f))(*args)


def test_vmap_potrs_and_cholesky_module():
    xs = batched(jaxmg.potrs, SPD, RHS)
    ys = batched(lambda a, b: jaxmg.Cholesky(a).solve(b), SPD, RHS)
    lds = batched(lambda a: jaxmg.Cholesky(a).logdet(), SPD)
    for k in range(BATCH):
        assert np.allclose(np.asarray(xs[k]), np.linalg.solve(SPD[k], RHS[k]))
        assert np.allclose(np.asarray(ys[k]), np.linalg.solve(SPD[k], RHS[k]))
        assert np.isclose(float(lds[k]), np.linalg.slogdet(SPD[k])[1])


def test_vmap_of_a_module_built_outside():
    chol = jaxmg.Cholesky(SPD[0])
    xs = jax.vmap(chol.solve)(RHS)
    for k in range(BATCH):
        assert np.allclose(np.asarray(xs[k]), np.linalg.solve(SPD[0], RHS[k]))


def test_vmap_every_operation():
    L = batched(jaxmg.cholesky, SPD)
    x_lu = batched(jaxmg.lu_solve, SPD, RHS)
    x_ls = batched(jaxmg.least_squares, TALL, TALL[:, :, 0])
    q, r = batched(jaxmg.qr, TALL)
    w, v = batched(jaxmg.syevd, HER)
    wg, vg = batched(jaxmg.sygvd, HER, SPD)
    u, s, vh = batched(jaxmg.gesvd, TALL)
    u_p, h = batched(jaxmg.polar, TALL)
    for k in range(BATCH):
        assert np.allclose(np.asarray(L[k]), np.linalg.cholesky(SPD[k]))
        assert np.allclose(np.asarray(x_lu[k]), np.linalg.solve(SPD[k], RHS[k]))
        assert np.allclose(np.asarray(x_ls[k]), np.linalg.lstsq(TALL[k], TALL[k][:, 0], rcond=None)[0])
        assert np.allclose(np.asarray(q[k] @ r[k]), TALL[k])
        assert np.allclose(np.asarray(w[k]), np.linalg.eigvalsh(HER[k]))
        assert np.allclose(HER[k] @ np.asarray(vg[k]), SPD[k] @ np.asarray(vg[k]) * np.asarray(wg[k]))
        assert np.allclose(np.asarray((u[k] * s[k]) @ vh[k]), TALL[k])
        assert np.allclose(np.asarray(u_p[k] @ h[k]), TALL[k])


def test_vmap_of_grad_inside_jit():
    def loss(a, b):
        x, logdet = jaxmg.potrs(a, b, return_logdet=True)
        return jnp.sum(x**2) + logdet

    def reference(a, b):  # potrs reads a's lower triangle
        return jnp.sum(jnp.linalg.solve(lower_read(a), b) ** 2) + jnp.linalg.slogdet(lower_read(a))[1]

    got = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1))))(SPD, RHS)
    want = jax.vmap(jax.grad(reference, argnums=(0, 1)))(SPD, RHS)
    for g, r in zip(got, want):
        assert np.allclose(np.asarray(g), np.asarray(r), atol=1e-10)


def test_shard_map_with_the_per_shard_layer(auto_mesh):
    mesh = auto_mesh
    grid = jaxmg.Grid.from_spec(mesh, P("x", "y"))
    A, B = SPD[0], RHS[0]

    def local(a_block, b_rows):
        x_rows, logdet, status = jaxmg.ops.local.potrs(a_block, b_rows, grid=grid)
        lower, _ = jaxmg.ops.local.cholesky(a_block, grid=grid)
        w, v, _ = jaxmg.ops.local.syevd(a_block, grid=grid)
        return x_rows, logdet, status, lower, w

    f = jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P("x", "y"), P("x")),
            out_specs=(P("x"), P(), P(), P("x", "y"), P()),
            check_vma=False,
        )
    )
    x, logdet, status, lower, w = f(put(A, mesh, P("x", "y")), put(B, mesh, P("x")))
    assert np.allclose(np.asarray(x), np.linalg.solve(A, B))
    assert np.isclose(float(logdet), np.linalg.slogdet(A)[1]) and int(status) == 0
    assert np.allclose(np.asarray(lower), np.linalg.cholesky(A))
    assert np.allclose(np.asarray(w), np.linalg.eigvalsh(A))
    assert x.sharding.spec == P("x") and lower.sharding.spec == P("x", "y")


def test_per_shard_layer_differentiates_through_the_device_solver(auto_mesh):
    """The per-shard layer's local route factors with the device's own potrf and getrf, whose
    tangents are the factorisations' own: check_grads through ops.local inside a shard_map."""
    from jax.test_util import check_grads

    mesh = auto_mesh
    grid = jaxmg.Grid.from_spec(mesh, P("x", "y"))
    A, B = SPD[0], RHS[0]

    def body(a_block, b_rows):
        x, logdet, _ = jaxmg.ops.local.potrs(a_block, b_rows, grid=grid)
        y, _ = jaxmg.ops.local.lu_solve(a_block, b_rows, grid=grid)
        return x + y, logdet

    f = jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(P("x", "y"), P("x")), out_specs=(P("x"), P()), check_vma=False)
    )  # one compilation per derivative, reused by check_grads
    check_grads(
        lambda a, b: f(a, b)[0], (put(A, mesh, P("x", "y")), put(B, mesh, P("x"))), order=1, modes=["fwd", "rev"]
    )
    check_grads(lambda a: f(a, put(B, mesh, P("x")))[1], (put(A, mesh, P("x", "y")),), order=1, modes=["rev"])


def test_one_gpu_inverses_keep_the_shard_map_axes(auto_mesh, monkeypatch):
    """On a GPU, ``Cholesky(a).inverse()`` and ``LU(a).inverse()`` inside a shard_map run the
    library's potri and getri (foreign calls, whose results carry no varying axes): traced here
    with that path forced (not run: a CPU has no such handler), their results vary as each
    block does, so that the function and its gradient trace with check_vma on."""
    from jaxmg.kernels import local
    from jaxmg.kernels.ffi import _library

    monkeypatch.setattr(local, "_one_gpu_library", lambda mesh: True)
    monkeypatch.setattr(_library, "register", lambda: None)
    mesh = auto_mesh
    stack = put(np.concatenate([SPD, SPD[:1]]), mesh, P("x"))  # one matrix per row of devices
    for module, target in ((jaxmg.Cholesky, "jaxmg_potri"), (jaxmg.LU, "jaxmg_getri")):
        f = jax.shard_map(
            lambda m, module=module: module(m[0]).inverse()[None], mesh=mesh, in_specs=P("x"), out_specs=P("x")
        )
        assert target in str(jax.make_jaxpr(f)(stack))
        assert target in str(jax.make_jaxpr(jax.grad(lambda m, f=f: jnp.sum(f(m) ** 2)))(stack))
