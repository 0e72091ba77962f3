"""Per-device memory of the native kernels' compiled programs on a (4, 2) process grid of 8
simulated devices, from XLA's own analysis (``memory_analysis().temp_size_in_bytes``: what each
device holds beyond its arguments and outputs), in units of one device's block of the matrix
(N^2 / 8 entries). The programs are compiled, never run.

The FFI handlers cannot run on CPU; each is replaced by an opaque ``jax.pure_callback`` of the
same results. XLA cannot alias a callback's output to its input, so a handler that factors its
operand in place holds one more block here than on the GPUs (the emulation's artefact, counted
in every bound below).

Every call runs with its default, the result check on (jaxmg.modules.check): its products with
the matrix are made before the factorisation, so a checked call holds what an unchecked one
does, and the bounds (0.1 block above each unchecked program's) fail if the check kept a copy
of the matrix, wrote out a masked one, or gathered a factor.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jaxmg

N = 2048
T_A = 128  # local extents 512 x 1024: whole tiles, and each redistribution one all_to_all
SLACK = 0.1  # vectors, scalars and small diagonal blocks, in blocks
# XLA before JAX 0.11 schedules the grid inverse's products side by side, not one after another:
# their panels are then in flight together (measured with JAX 0.10.2: inverse 5.16, GP 6.15)
OLD_XLA = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 11)
INVERSE_BLOCKS, GP_BLOCKS = (5.2, 6.2) if OLD_XLA else (2.5, 3.3)


def _opaque_ffi_call(target, results, operands, boot=(), aliases=None, **attrs):
    """A handler call as an opaque callback with the handler's results (zeros): what XLA
    compiles around it is the kernels' own program."""
    single = not isinstance(results, (tuple, list))
    shapes = (results,) if single else tuple(results)
    out = jax.pure_callback(
        lambda *args: tuple(np.zeros(r.shape, r.dtype) for r in shapes),
        shapes,
        *boot,
        *operands,
        vmap_method="expand_dims",
    )
    return out[0] if single else out


@pytest.fixture
def opaque_native(monkeypatch):
    """The native backend offered on CPU, every FFI handler an opaque callback."""
    from jaxmg import _routes
    from jaxmg.kernels.ffi import _library
    from jaxmg.kernels.native import _grid

    monkeypatch.setattr(_routes, "native_unavailable", lambda op, mesh: None)
    monkeypatch.setattr(_library, "check_one_gpu_per_process", lambda: None)
    monkeypatch.setattr(_library, "register", lambda: None)
    monkeypatch.setattr(_grid, "ffi_call", _opaque_ffi_call)


@pytest.fixture
def grid_system():
    """(mesh, a, b): an N x N matrix in the (4, 2) grid layout and an N vector split over rows."""
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    a = jax.device_put(jnp.eye(N) * 2.0, NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(jnp.ones(N), NamedSharding(mesh, P("x")))
    return mesh, a, b


def _blocks(mesh, fn, *args) -> float:
    """Per-device temporaries of ``jit(fn)(*args)`` compiled on ``mesh``, in blocks."""
    with jax.set_mesh(mesh):
        compiled = jax.jit(fn).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes / (N * N * 8 / mesh.size)


def _gp(a, b, check=None):
    x, logdet = jaxmg.potrs(a, b, return_logdet=True, backend="native", T_A=T_A, check=check)
    return jnp.vdot(b, x) + logdet


@pytest.fixture(autouse=True)
def _default_check(monkeypatch):
    monkeypatch.delenv("JAXMG_RESULT_CHECK", raising=False)


def test_potrs_grid(opaque_native, grid_system):
    """potrs (factor and solve in one handler call, in place): 2 blocks, the handler's output
    and the emulation's copy of its input."""
    mesh, a, b = grid_system
    assert _blocks(mesh, lambda a, b: jaxmg.potrs(a, b, backend="native", T_A=T_A), a, b) <= 2 + SLACK


def test_cholesky_grid(opaque_native, grid_system):
    """cholesky (L in the grid layout): 2 blocks, the factor state with the emulation's copy,
    then the state and its redistribution to the block layout."""
    mesh, a, _ = grid_system
    assert _blocks(mesh, lambda a: jaxmg.cholesky(a, backend="native", T_A=T_A), a) <= 2 + SLACK


def test_cholesky_inverse_grid(opaque_native, grid_system):
    """Cholesky(a).inverse(): 2.5 blocks with JAX 0.11 and newer. The factor state with the
    emulation's copy (2), then the factor and its inverse in the cyclic order of
    jaxmg.kernels.cyclic and the panels of one product at a time (in the natural order, where XLA
    gathers the slices: 10.3 blocks)."""
    mesh, a, _ = grid_system
    assert _blocks(mesh, lambda a: jaxmg.Cholesky(a, backend="native", T_A=T_A).inverse(), a) <= INVERSE_BLOCKS + SLACK


def test_gp_value_and_grad_grid(opaque_native, grid_system):
    """The GP loss b^H A^-1 b + log det A and its gradient (A^-1 for d log det A): 3.3 blocks with
    JAX 0.11 and newer, the inverse's 2.5 and the gradient beside it (in the natural order: 10.3
    blocks)."""
    mesh, a, b = grid_system
    assert _blocks(mesh, jax.value_and_grad(_gp), a, b) <= GP_BLOCKS + SLACK


@pytest.mark.parametrize(
    "case",
    [
        "potrs",
        "cholesky",
        pytest.param("inverse", marks=pytest.mark.slow),
        pytest.param("gp", marks=pytest.mark.slow),
        "lu_solve",
        "LU",
    ],
)
def test_checked_calls_hold_what_unchecked_ones_do(case, opaque_native, grid_system):
    """The default (checked) program holds no more than the same call with check=False (within
    0.05 block: vectors): the check's products are made while the matrix is whole, before the
    factorisation, and its products with outputs are summed where the outputs lie."""
    mesh, a, b = grid_system
    kw = dict(backend="native", T_A=T_A)
    calls = {
        "potrs": (lambda check: lambda a, b: jaxmg.potrs(a, b, check=check, **kw), (a, b)),
        "cholesky": (lambda check: lambda a: jaxmg.cholesky(a, check=check, **kw), (a,)),
        "inverse": (lambda check: lambda a: jaxmg.Cholesky(a, check=check, **kw).inverse(), (a,)),
        "gp": (lambda check: jax.value_and_grad(lambda a, b: _gp(a, b, check)), (a, b)),
        "lu_solve": (lambda check: lambda a, b: jaxmg.lu_solve(a, b, check=check, **kw), (a, b)),
        "LU": (lambda check: lambda a, b: jaxmg.LU(a, check=check, **kw).solve(b), (a, b)),
    }
    call, args = calls[case]
    assert _blocks(mesh, call(None), *args) <= _blocks(mesh, call(False), *args) + 0.05
