"""The hard-matrix battery (tests/test_hard_matrices.py) through the native backend, its FFI
handlers emulated on CPU (tests/gpu/_emulation.py): every operation with backend="native" (the
jaxmg.numpy.linalg functions as "auto" chooses) over a (2, 2) grid of Explicit axes (JAX's
default for ``jax.make_mesh``; tests/gpu/test_inverse_emulated.py and the family tests cover Auto
axes), every kind, one real and one complex dtype. Each result is right by LAPACK's test ratios
or flagged, as on the portable backend. The battery's pending least-squares cases (``PENDING``) and the native
backend's known defects (``NATIVE_DEFECTS``) are marked strict xfail.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import AxisType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hard_matrices as hm  # noqa: E402
import test_hard_matrices as battery  # noqa: E402
from helpers import make_mesh, put  # noqa: E402

#: Long (the hard-matrix battery on the emulated native backend; test_hard_matrices.py runs it on the
#: local and portable routes in every run): CI runs these with tests/run.sh --slow.
pytestmark = pytest.mark.slow

DTYPES = [np.float64, np.complex64]


@functools.cache
def _results(names: tuple, dtype, emulator) -> tuple:
    """The group's results on the emulated native backend, and whether the native kernels ran."""
    mesh = make_mesh((2, 2), ("x", "y"), axis_types=AxisType.Explicit)
    found = battery.run_group(names, dtype, lambda x, spec: put(x, mesh, spec), {"backend": "native"})
    return found, bool(emulator.calls)


def _marks(name: str, kind: str, dtype) -> list:
    """Strict xfail for the battery's pending least squares and the native backend's defects
    (the native LU already gives a singular matrix's slogdet as JAX does)."""
    dtype = np.dtype(dtype).name
    for table in (battery.PENDING, battery.NATIVE_DEFECTS):
        dtypes, *_, reason = table.get((name, kind), ((), None))
        if dtype in dtypes and reason != battery.SINGULAR_DET:
            return [pytest.mark.xfail(strict=True, reason=reason)]
    return []


CASES = [
    pytest.param(name, kind, dtype, id=f"{name}-{kind}-{np.dtype(dtype).name}", marks=_marks(name, kind, dtype))
    for name in battery.OPS
    for kind in hm.KINDS
    for dtype in DTYPES
]

_EMULATOR = {}


@pytest.mark.parametrize("name, kind, dtype", CASES)
def test_hard_matrices_on_the_native_backend(name, kind, dtype, native_backend):
    group = battery.group(name)
    emulator = _EMULATOR.setdefault((group, np.dtype(dtype).name), native_backend)  # the one that ran it
    found, native_ran = _results(group, dtype, emulator)
    assert native_ran, "the native kernels were not used"
    battery.verdict(name, kind, dtype, "native", *found[kind][name])
