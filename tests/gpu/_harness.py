"""Direct access to the native kernels for GPU tests and benchmarks, independent of the public API.

``load()`` imports jaxmg (which initializes jax.distributed under jaxmg.launch); if the package
does not import (e.g. mid-refactor), it loads only the modules the native kernels need through
a stub package. ``run(kernel, ...)`` runs a per-shard kernel of ``jaxmg.kernels.native`` over a
mesh with ``shard_map``, exactly as the library's runner does (local blocks of the matrix,
whole right-hand sides).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_API = None
#: The verdicts of the cases run so far in this process (:func:`case`).
RESULTS: list = []


def case(name):
    """Runs the decorated check at once and prints ``CASE <name> PASS|FAIL|SKIP (<s>) <detail>``
    (detail: what the check returns; a detail starting with "skipped" is shown, never counted)."""

    def deco(fn):
        t0 = time.perf_counter()
        try:
            detail, ok = fn() or "", True
        except Exception as e:  # noqa: BLE001
            ok, detail = False, f"{type(e).__name__}: {str(e)[:700]}"
            traceback.print_exc()
        skipped = ok and str(detail).startswith("skipped")  # shown, never counted as a pass
        if not skipped:
            RESULTS.append(ok)
        verdict = "SKIP" if skipped else "PASS" if ok else "FAIL"
        print(f"CASE {name} {verdict} ({time.perf_counter() - t0:.2f}s) {detail}", flush=True)
        return fn

    return deco


def load():
    global PUBLIC_API
    try:
        import jaxmg  # noqa: F401

        PUBLIC_API = hasattr(jaxmg, "potrs")
    except Exception as e:  # noqa: BLE001
        print(f"[harness] import jaxmg failed ({type(e).__name__}: {e}); using a stub package", flush=True)
        for name in [m for m in sys.modules if m == "jaxmg" or m.startswith("jaxmg.")]:
            del sys.modules[name]
        pkg = types.ModuleType("jaxmg")
        pkg.__path__ = [str(ROOT / "jaxmg")]
        sys.modules["jaxmg"] = pkg
        import jaxmg.launch

        jaxmg.launch.initialize_from_environment()
        PUBLIC_API = False
    from jaxmg.kernels import native

    return native


@dataclasses.dataclass(frozen=True)
class Grid:
    mesh: object
    row_axes: tuple
    col_axes: tuple

    @property
    def nprow(self):
        return _size(self.mesh, self.row_axes)

    @property
    def npcol(self):
        return _size(self.mesh, self.col_axes)

    @property
    def spec(self):
        from jax.sharding import PartitionSpec as P

        e = lambda ax: None if not ax else (ax[0] if len(ax) == 1 else ax)  # noqa: E731
        return P(e(self.row_axes), e(self.col_axes))


def _size(mesh, axes):
    s = 1
    for a in axes:
        s *= mesh.shape[a]
    return s


def grid_of(mesh, spec):
    ent = lambda e: () if e is None else ((e,) if isinstance(e, str) else tuple(e))  # noqa: E731
    entries = tuple(spec) + (None,) * (2 - len(tuple(spec)))
    return Grid(mesh, ent(entries[0]), ent(entries[1]))


@functools.cache
def _compiled(kernel, grid, tile, kinds, outs, donate):
    import jax
    from jax.sharding import PartitionSpec as P

    in_specs = tuple(grid.spec if k == "block" else P() for k in kinds)
    out_specs = tuple(grid.spec if k == "block" else P() for k in outs)
    f = jax.shard_map(
        lambda *a: tuple(kernel(*a, grid=grid, tile=tile)),
        mesh=grid.mesh,
        in_specs=in_specs,
        out_specs=out_specs,
        check_vma=False,
    )
    return jax.jit(f, donate_argnums=(0,) if donate else ())


def run(kernel, grid, tile, args, kinds, outs, donate=False):
    """kinds/outs: 'block' (matrix in the grid layout) or 'whole' (replicated) per argument/output."""
    return _compiled(kernel, grid, int(tile), tuple(kinds), tuple(outs), bool(donate))(*args)
