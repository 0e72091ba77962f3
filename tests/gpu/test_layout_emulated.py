"""The native kernels' layout algebra, checked on CPU against an emulated cuSOLVERMp.

``jaxmg.kernels.native`` prepares the local blocks, the right-hand side and the FFI attributes
in JAX, and the FFI handler (csrc/cholesky.cc) reorders tiles and calls cuSOLVERMp. Here the FFI
calls are replaced by the pure-JAX emulation in tests/gpu/_emulation.py of exactly what the handler and cuSOLVERMp
do with the buffers (the in-place symmetrization and tile reorder of csrc, the block-cyclic descriptors,
potrf/potrs with uplo=LOWER (in-place mode) or UPPER (natural mode) on the column-major view),
so that every grid, padding and permutation rule, and the kernel contract seen from the public
API, is checked without a GPU. Runs on CPU with 4 of the simulated devices.
"""

from __future__ import annotations

import jax  # noqa: E402
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P  # noqa: E402

from _emulation import hermitian_with_junk as _matrix  # noqa: E402
from jaxmg import _layout  # noqa: E402
from jaxmg.kernels import native  # noqa: E402

if jax.default_backend() != "cpu" or len(jax.devices()) < 4:
    pytest.skip("needs 4 CPU devices (tests/conftest.py sets up 8)", allow_module_level=True)


CASES = [
    # mesh shape, spec, n, tile
    ((2,), P("x", None), 64, 16),
    ((2,), P(None, "x"), 64, 16),
    ((1,), P("x", None), 32, 8),
    ((2, 2), P("x", "y"), 64, 16),
    ((4,), P("x", None), 64, 8),
    ((4,), P(None, "x"), 64, 8),
    ((2,), P("x", None), 60, 16),  # padded
    ((2,), P(None, "x"), 60, 8),  # padded
    ((2, 2), P("x", "y"), 48, 16),  # padded
]


@pytest.mark.parametrize(
    "case,dtype,reverse", [(c, np.float64, False) for c in CASES] + [(c, np.complex128, True) for c in CASES]
)
@pytest.mark.usefixtures("emulator")
def test_potrs_and_cholesky_layout(case, dtype, reverse):
    shape, spec, n, tile = case
    devs = jax.devices()[: int(np.prod(shape))]
    if reverse:
        devs = devs[::-1]
    mesh = jax.make_mesh(shape, ("x", "y")[: len(shape)], axis_types=(AxisType.Auto,) * len(shape), devices=devs)
    grid = _layout.Grid(mesh, _layout.entry_axes(spec[0]), _layout.entry_axes(spec[1]))
    with jax.enable_x64(True):
        a_in, a = _matrix(n, dtype)
        b = np.arange(1, 2 * n + 1, dtype=np.float64).reshape(n, 2).astype(dtype)
        f = jax.shard_map(
            lambda a, b: native.potrs(a, b, grid=grid, tile=tile),
            mesh=mesh,
            in_specs=(grid.spec, P()),
            out_specs=(P(), P(), P()),
            check_vma=False,
        )
        x, logdet, status = jax.jit(f)(a_in, b)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(float(logdet), np.linalg.slogdet(a)[1], rtol=1e-10)
        assert int(status) == 0

        def natural_lower(a):
            state, status = native.cholesky_factor(a, grid=grid, tile=tile, natural=True)
            return native.cholesky_lower(state, grid=grid, tile=tile, natural=True)[0], status

        c = jax.shard_map(natural_lower, mesh=mesh, in_specs=(grid.spec,), out_specs=(grid.spec, P()), check_vma=False)
        low, status = jax.jit(c)(a_in)
        np.testing.assert_allclose(np.asarray(low), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("spec", [P("x", None), P(None, "x")])
@pytest.mark.parametrize("n,tile", [(64, 16), (60, 16)])
@pytest.mark.usefixtures("native_backend")
def test_public_api_through_native_family(spec, n, tile):
    """jaxmg.potrs / jaxmg.cholesky / Cholesky(...) with backend="native", on CPU, through the
    native family kernels with the FFI calls emulated (checks the kernel contract end to end)."""
    import jaxmg

    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Auto,), devices=jax.devices()[:2])
    with jax.enable_x64(True):
        a_in, a = _matrix(n, np.float64)
        b = np.arange(1, n + 1, dtype=np.float64)
        ag = jax.device_put(a_in, jax.sharding.NamedSharding(mesh, spec))
        x, logdet, status = jaxmg.potrs(
            ag, b, T_A=tile, mesh=mesh, return_logdet=True, return_status=True, backend="native"
        )
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(float(logdet), np.linalg.slogdet(a)[1], rtol=1e-10)
        assert int(status) == 0
        low = jaxmg.cholesky(ag, T_A=tile, mesh=mesh, backend="native")
        np.testing.assert_allclose(np.asarray(low), np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)


def test_no_mesh_distributed_outputs_name_no_mesh(native_backend):
    """With no mesh anywhere the distributed route runs on jaxmg's own 1 x 1 grid of a's device:
    no output, module array or cotangent names that grid's mesh (as JAX's on one device), and
    the outputs of uncommitted inputs are uncommitted."""
    import jax.numpy as jnp

    import jaxmg

    n = 16
    x = np.random.default_rng(3).standard_normal((n, n))
    a, b = jnp.asarray(x @ x.T + n * np.eye(n)), jnp.ones(n)
    solution = jaxmg.potrs(a, b, backend="native")
    assert not solution.committed and jax.typeof(solution).sharding.mesh.empty
    module = jaxmg.Cholesky(a, backend="native")
    grads = jax.grad(lambda a, b: jaxmg.potrs(a, b, backend="native").sum(), argnums=(0, 1))(a, b)
    for out in (*jax.tree.leaves(module), module.solve(b), *grads):
        if hasattr(out, "sharding"):
            assert jax.typeof(out).sharding.mesh.empty, (out.sharding, jax.typeof(out))
    np.testing.assert_allclose(solution, np.linalg.solve(np.asarray(a), np.ones(n)), rtol=1e-10)
