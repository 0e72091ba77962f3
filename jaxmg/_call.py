"""What every operation does around its kernels: checks, layout, backend choice, run.

:func:`setup` checks the arguments of a factorisation or solve and resolves where it
runs; the returned :class:`Call` runs the chosen backend's kernels over the grid.
Modules keep their ``Call`` (a static, hashable value) to run later solves the same way.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Optional, Sequence

import jax
from jax.sharding import PartitionSpec as P

from . import _backend, _checks, _layout, _sharded
from ._sharded import Block, Replicated, Rows


@dataclasses.dataclass(frozen=True)
class Call:
    """A checked call: its layout, the backend's kernel module and the tile size ``T_A``."""

    family: str  # the operation family, e.g. "cholesky"
    layout: _layout.Layout
    kernels: ModuleType
    tile: int
    shape: tuple  # a's shape
    dtype: object  # a's dtype
    natural: bool = False  # keep factors in a's natural order (native Cholesky: L readable)

    @property
    def grid(self) -> _layout.Grid:
        return self.layout.grid

    @property
    def backend(self) -> str:
        return self.kernels.NAME

    def on_concrete_mesh(self, arrays: Sequence) -> "Call":
        """This call, moved to the concrete mesh beneath ``arrays`` where its own mesh is
        abstract (it was resolved inside ``jax.jit``, as for a module a jitted function
        returned) and ``arrays`` are concrete, or eager transformations' tracers of concrete
        arrays; else this call itself."""
        mesh = self.grid.mesh
        if isinstance(mesh, jax.sharding.Mesh) or not _layout.is_eager(arrays):
            return self
        for x in arrays:
            found = _layout.mesh_of(x)
            if isinstance(found, jax.sharding.Mesh) and found.abstract_mesh == mesh:
                grid = dataclasses.replace(self.grid, mesh=found)
                return dataclasses.replace(self, layout=dataclasses.replace(self.layout, grid=grid))
        return self

    def block(self, caller: bool = True) -> Block:
        """A matrix output in a's caller layout (``caller=True``) or in the grid layout."""
        return Block(self.layout.out_spec if caller else None)

    def rhs(self, x, name: str, index: int = 0) -> tuple:
        """Check right-hand side ``x`` against this call: the layout it is solved in, and the
        one its solution goes back to (None where the same; :func:`_layout.resolve_rhs`)."""
        spec = self.layout.rhs_specs[index] if index < len(self.layout.rhs_specs) else None
        return _layout.resolve_rhs(x, name, self.grid, spec)

    def run(self, kernel: str, args: Sequence, inputs: Sequence, outputs: Sequence,
            shapes: Optional[Sequence] = None, names: Optional[Sequence[str]] = None,
            donate: Sequence[int] = (), kernels: Optional[ModuleType] = None, **params) -> tuple:
        """Run kernel ``kernel`` of the chosen backend over the grid.

        ``inputs``/``outputs`` give the kind of each argument and output (Block, Rows,
        Replicated); ``shapes``/``names`` describe outputs for the divisibility check;
        arguments at positions ``donate`` may be consumed. ``kernels`` overrides the
        backend's module (for the backend-independent kernels of ``jaxmg.kernels.products``).
        """
        if shapes is not None:
            _sharded.check_outputs(outputs, shapes, self.grid, names)
        module = kernels or self.kernels
        if module.NAME == "native":
            params["tile"] = self.tile
            if self.natural:
                params["natural"] = True
        plan = _sharded.Plan(
            kernel=getattr(module, kernel),
            params=tuple(sorted(params.items())),
            grid=self.grid,
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            check_vma=getattr(module, "DIFFERENTIABLE", False),
        )
        return _sharded.run(plan, args, donate=donate)


def setup(
    family: str,
    *,
    matrices: Sequence[tuple],
    rhs: Sequence[tuple] = (),
    square: bool = True,
    T_A=None,
    mesh=None,
    matrix_specs=None,
    donate: bool = False,
    backend: str = "auto",
    flags: dict | None = None,
    num_rhs: int = 0,
) -> tuple[Call, list]:
    """Check the arguments of an operation of ``family`` and resolve where it runs.

    ``matrices`` and ``rhs`` are ``(name, value)`` pairs. Matrices must be rank 2
    (square when ``square``, else with M >= N) and share a's shape; right-hand sides
    must be a vector or a matrix with as many rows as ``a``. All share a's dtype.
    ``num_rhs`` right-hand sides given later (``module.solve(b)``) may have specs in
    ``matrix_specs``. Returns the call and the arguments as arrays (matrices first).
    """
    for name, value in (flags or {}).items():
        _checks.check_flag(value, name)
    _checks.check_flag(donate, "donate")
    _checks.check_backend(backend)
    _checks.check_tile(T_A)

    a_name = matrices[0][0]
    arrays = [_checks.as_array(value, name) for name, value in list(matrices) + list(rhs)]
    a = arrays[0]
    for (name, _), x in zip(list(matrices) + list(rhs), arrays):
        _checks.check_dtype(x, name)
        if x is not a:
            _checks.check_same_dtype(x, name, a, a_name)
    for (name, _), x in zip(matrices, arrays):
        _checks.check_matrix(x, name, square=square, tall=not square)
        if x.shape != a.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {a_name} has shape {tuple(a.shape)}; "
                f"they must match."
            )
    for (name, _), x in zip(rhs, arrays[len(matrices):]):
        _checks.check_rhs(x, name, a.shape[0], a_name)

    layout = _layout.resolve(mesh, matrix_specs, [(x, name) for (name, _), x in zip(matrices, arrays)],
                             num_rhs=max(len(rhs), num_rhs), rhs=arrays[len(matrices):])
    kernels = _backend.select(family, backend, layout.grid.mesh, a.shape, a.dtype)
    tile = T_A if T_A is not None else _layout.auto_tile(a.shape, layout.grid)
    return Call(family, layout, kernels, int(tile), tuple(a.shape), a.dtype), arrays


def check_rhs(call: Call, b, name: str = "b", rows: Optional[int] = None):
    """Check a right-hand side against the factorised ``a`` (``module.solve(b)``).

    ``rows`` is the number of rows ``b`` must have (default: a's rows). Returns ``b`` as
    an array, the layout it is solved in and its solution's home layout (None where the same).
    """
    b = _checks.as_array(b, name)
    _checks.check_dtype(b, name)
    if b.dtype != call.dtype:
        raise TypeError(f"{name} has dtype {b.dtype} but a has dtype {call.dtype}; "
                        f"convert {name} with {name}.astype(a.dtype).")
    _checks.check_rhs(b, name, call.shape[0] if rows is None else rows, "a")
    _layout.check_reachable(b, name, call.grid.mesh, target="the factorisation's mesh (a's, else its device's)",
                            fix="Make the factorisation on b's mesh (shard a there, or pass mesh= to the module)")
    return (b, *call.rhs(b, name))


def pick(values: Sequence, keep: Sequence[bool]):
    """The values whose flag is set: one value alone, several as a tuple."""
    chosen = tuple(v for v, k in zip(values, keep) if k)
    return chosen[0] if len(chosen) == 1 else chosen


__all__ = ["Block", "Call", "Replicated", "Rows", "check_rhs", "pick", "setup"]
