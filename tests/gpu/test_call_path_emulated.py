"""How deep a public call runs before it reaches cuSOLVERMp: the files of jaxmg on the Python stack
at the moment each FFI handler is called (native route, emulated on CPU).

``jaxmg.potrs`` reaches ``jaxmg_potrf`` through functional → modules._base → _dispatch →
modules.cholesky → kernels.native.cholesky → _sharded → kernels.native._grid (7 files), and
``jaxmg_potrs`` with autodiff.solves between the module and the kernels (8); the backward pass of
its log-determinant reaches ``jaxmg_potrs`` through autodiff.logdet instead (8). The handler
itself (csrc/cholesky.cc) calls ``cusolverMpPotrf`` from its own frames (docs/processes.md).
"""

from __future__ import annotations

import traceback

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxmg
from _emulation import mesh as _mesh
from jaxmg.kernels.native import _grid

#: The most files of jaxmg that may stand on the stack when a handler is called.
DEEPEST = 8


def _record_stacks(monkeypatch) -> dict:
    """Wrap the (emulated) FFI call so that it records, per handler, the files of jaxmg on the stack."""
    seen: dict[str, list[list[str]]] = {}
    emulated = _grid.ffi_call

    def spy(name, *args, **kwargs):
        files: list[str] = []
        for frame in traceback.extract_stack():
            path = frame.filename.replace("\\", "/")
            if "/jaxmg/" in path and "/tests/" not in path:
                rel = path.split("/jaxmg/", 1)[1]
                if rel not in files:
                    files.append(rel)
        seen.setdefault(name, []).append(files)
        return emulated(name, *args, **kwargs)

    monkeypatch.setattr(_grid, "ffi_call", spy)
    return seen


def _operands():
    mesh = _mesh((2, 2))
    n = 16
    x = np.random.default_rng(0).standard_normal((n, n))
    a = jax.device_put(x @ x.T + n * np.eye(n), NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(jnp.ones(n), NamedSharding(mesh, P("x")))
    return mesh, a, b


def test_potrs_reaches_its_handlers_through_few_files(native_backend, monkeypatch):
    seen = _record_stacks(monkeypatch)
    _, a, b = _operands()
    jax.jit(lambda a, b: jaxmg.potrs(a, b, backend="native")).lower(a, b)
    assert {"jaxmg_potrf", "jaxmg_potrs"} <= set(seen), sorted(seen)
    factor = seen["jaxmg_potrf"][0]
    assert factor[0] == "functional.py" and factor[-1] in ("_sharded.py", "kernels/native/_grid.py"), factor
    for name, stacks in seen.items():
        for files in stacks:
            assert len(files) <= DEEPEST, f"{name}: {len(files)} files on the stack: {files}"


def test_logdet_backward_reaches_the_solve_through_few_files(native_backend, monkeypatch):
    seen = _record_stacks(monkeypatch)
    mesh, a, b = _operands()
    with jax.set_mesh(mesh):
        jax.jit(jax.grad(lambda a: jaxmg.potrs(a, b, return_logdet=True, backend="native")[1])).lower(a)
    backward = [files for files in seen.get("jaxmg_potrs", []) if "autodiff/logdet.py" in files]
    assert backward, f"no solve of the log-determinant's backward pass among {seen.get('jaxmg_potrs')}"
    for name, stacks in seen.items():
        for files in stacks:
            assert len(files) <= DEEPEST, f"{name}: {len(files)} files on the stack: {files}"


def test_a_stack_split_on_explicit_batch_axes_is_refused_on_the_distributed_route(native_backend):
    """jax.vmap over a stack whose batch axis Explicit mesh axes split cannot give each matrix the
    whole grid: a clear error naming the axes and the fixes, not a failure inside shard_map; the
    fixes it names (the stack unsplit or split inside its matrices, or the batch route) solve it."""
    import pytest
    from jax.sharding import AxisType

    mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 8, 8))
    a = a @ np.swapaxes(a, -1, -2) + 8 * np.eye(8)
    b = rng.standard_normal((8, 2))
    want = np.linalg.solve(a, b)
    with jax.set_mesh(mesh):
        split = jax.device_put(a, NamedSharding(mesh, P("x")))
        with pytest.raises(ValueError, match=r"split over its batch axis by the Explicit mesh axes \('x',\)"):
            jax.vmap(lambda m: jaxmg.potrs(m, b, backend="native"))(split)
        for stack, backend in (
            (split, "portable"),
            (jax.device_put(a, NamedSharding(mesh, P(None, "x", "y"))), "native"),
        ):
            x = jax.vmap(lambda m, kind=backend: jaxmg.potrs(m, b, backend=kind))(stack)
            np.testing.assert_allclose(np.asarray(x), want, rtol=0, atol=1e-12)
