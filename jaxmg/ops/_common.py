"""What every operation does before and after its kernel: checks, layout, backend, run."""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Sequence

from .. import _checks, _layout, _sharded
from .._sharded import Block, Replicated, Rows  # noqa: F401  (re-exported for the ops)


@dataclasses.dataclass(frozen=True)
class Call:
    """A checked call: its layout, the backend's kernel module and the tile size."""

    op: str
    layout: _layout.Layout
    kernels: ModuleType
    tile: int
    donate: bool

    @property
    def grid(self) -> _layout.Grid:
        return self.layout.grid

    def rows(self, index: int = 0) -> Rows:
        """An output laid out like right-hand side ``index``."""
        return Rows(self.layout.rhs_specs[index])

    def block(self) -> Block:
        """A matrix output laid out like ``a``."""
        return Block(self.layout.out_spec)

    def run(self, args: Sequence, outputs: Sequence, shapes: Sequence, names: Sequence[str], **params) -> tuple:
        """Run the backend's kernel for this op; ``shapes``/``names`` describe the outputs."""
        _sharded.check_outputs(outputs, shapes, self.grid.mesh, names)
        if self.kernels.NAME == "native":
            params["tile"] = self.tile
        plan = _sharded.Plan(
            kernel=getattr(self.kernels, self.op),
            params=tuple(sorted(params.items())),
            layout=self.layout,
            num_matrices=len(args) - len(self.layout.rhs_specs),
            outputs=tuple(outputs),
        )
        return _sharded.run(plan, args, donate=self.donate)


def setup(
    op: str,
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
) -> tuple[Call, list]:
    """Check the arguments of ``op`` and resolve where it runs.

    ``matrices`` and ``rhs`` are ``(name, value)`` pairs. Matrices must be
    rank 2 (square when ``square``, else with M >= N); right-hand sides must be a
    vector or a matrix with as many rows as ``a``. All share a's dtype. Returns the
    call and the arguments as arrays (matrices first).
    """
    for name, value in (flags or {}).items():
        _checks.check_flag(value, name)
    _checks.check_flag(donate, "donate")
    _checks.check_backend(backend)
    _checks.check_tile(T_A)

    arrays = []
    a_name, a = matrices[0][0], _checks.as_array(matrices[0][1], matrices[0][0])
    for name, value in list(matrices) + list(rhs):
        x = _checks.as_array(value, name)
        _checks.check_dtype(x, name)
        if x is not a:
            _checks.check_same_dtype(x, name, a, a_name)
        arrays.append(x)
    for (name, _), x in zip(matrices, arrays):
        _checks.check_matrix(x, name, square=square, tall=not square)
        if x.shape != arrays[0].shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {a_name} has shape {tuple(a.shape)}; "
                f"they must match."
            )
    for (name, _), x in zip(rhs, arrays[len(matrices):]):
        _checks.check_rhs(x, name, a.shape[0], a_name)

    layout = _layout.resolve(
        mesh,
        matrix_specs,
        [(x, name) for (name, _), x in zip(matrices, arrays)],
        [(x, name) for (name, _), x in zip(rhs, arrays[len(matrices):])],
    )
    from .. import _backend  # local: keeps import order simple

    kernels = _backend.select(op, backend, layout.grid.mesh)
    tile = T_A if T_A is not None else _layout.auto_tile(a.shape, layout.grid)
    return Call(op, layout, kernels, int(tile), bool(donate)), arrays


def pick(values: Sequence, keep: Sequence[bool]):
    """The values whose flag is set: one value alone, several as a tuple."""
    chosen = tuple(v for v, k in zip(values, keep) if k)
    return chosen[0] if len(chosen) == 1 else chosen
