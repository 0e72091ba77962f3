"""The battery of hard matrices (tests/test_hard_matrices.py) on GPUs; one process per GPU:

    python -m jaxmg.launch -n 1 tests/gpu/hard_cases.py
    python -m jaxmg.launch -n 2 tests/gpu/hard_cases.py

Every operation of the battery (potrs, cholesky, lu_solve, least_squares, qr, syevd, sygvd,
gesvd, polar, the modules and jaxmg.numpy.linalg) on every kind of hard matrix and all four
dtypes, on two routes: "native" (the jaxmg functions and modules with backend="native", the
matrix sharded P("x", "y") over a grid of all processes' GPUs; the jaxmg.numpy.linalg functions,
which take no backend, as "auto" chooses on that grid) and "local" (one GPU, backend="auto":
the device's own solver). Each result must be right by LAPACK's test ratios or flagged (a
non-zero status and NaN outputs), as on CPU.

Prints one ``CASE <name> PASS|FAIL|XFAIL|XPASS <detail>`` line per result (rank 0) and exits 1
if any failed. XFAIL and XPASS are the cases the CPU battery marks pending (its ``PENDING``
table) and the native backend's known defects (``NATIVE_DEFECTS``): a failure there is
expected, a pass is reported and is no failure. ``JAXMG_CASES=a,b``
runs only the cases whose name contains one of the strings.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
import traceback
from pathlib import Path

faulthandler.enable()
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _harness  # noqa: E402

_harness.load()  # joins the other processes under jaxmg.launch

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402

import test_hard_matrices as battery  # noqa: E402  (tests/: the operations, inputs and verdict)

RANK = jax.process_index()
NPROC = jax.process_count()
ONLY = os.environ.get("JAXMG_CASES")
#: the grid route's backend: "native" (JAXMG_HARD_BACKEND=portable checks this script on a CPU)
BACKEND = os.environ.get("JAXMG_HARD_BACKEND", "native")
COUNTS = {"PASS": 0, "FAIL": 0, "XFAIL": 0, "XPASS": 0}
FAILED: list = []


def log(*a):
    if RANK == 0:
        print(*a, flush=True)


def host(tree):
    """The results as NumPy on every process (gathered where they are sharded)."""

    def one(x):
        if x is None:
            return None
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(one, tree, is_leaf=lambda x: x is None)


def grid_place(mesh):
    def place(x, spec):
        return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda idx: x[idx])

    return place


def routes():
    """route -> (place, kw): the native grid over every process's GPUs, and one GPU."""
    mesh = Mesh(np.array(jax.devices()).reshape(-1, 1), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    one = Mesh(np.array(jax.local_devices()[:1]).reshape(1, 1), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    found = {"native": (grid_place(mesh), {"backend": BACKEND})}
    if NPROC == 1:
        found["local"] = (grid_place(one), {})
    return found


def record(name, kind, dtype, route, outputs, status, seconds):
    case = f"hard-{route}-{name}-{kind}-{np.dtype(dtype).name}"
    pending, reason = False, None
    for table in (battery.PENDING, battery.NATIVE_DEFECTS):
        dtypes, *_, why = table.get((name, kind), ((), None))
        if np.dtype(dtype).name in dtypes:
            pending, reason = True, why
    try:
        battery.verdict(name, kind, dtype, route, outputs, status)
        verdict, detail = ("XPASS" if pending else "PASS"), ""
    except AssertionError as e:
        verdict, detail = ("XFAIL" if pending else "FAIL"), str(e)[:500] + (f" [pending: {reason}]" if pending else "")
    COUNTS[verdict] += 1
    if verdict == "FAIL":
        FAILED.append(case)
    log(f"CASE {case} {verdict} ({seconds:.2f}s) {detail}")


def run():
    groups = sorted({battery.group(name) for name in battery.OPS})
    for route, (place, kw) in routes().items():
        for names in groups:
            for dtype in battery.DTYPES:
                wanted = [n for n in names if not ONLY or any(o in f"hard-{route}-{n}" for o in ONLY.split(","))]
                if not wanted:
                    continue
                t0 = time.perf_counter()
                try:
                    found = battery.run_group(tuple(wanted), dtype, place, kw, host=host)
                except Exception as e:  # noqa: BLE001
                    if RANK == 0:
                        traceback.print_exc()
                    case = f"hard-{route}-{'+'.join(wanted)}-{np.dtype(dtype).name}"
                    COUNTS["FAIL"] += 1
                    FAILED.append(case)
                    log(f"CASE {case} FAIL {type(e).__name__}: {str(e)[:700]}")
                    continue
                seconds = (time.perf_counter() - t0) / len(found)
                for kind, by_name in found.items():
                    for name in wanted:
                        record(name, kind, dtype, route, *by_name[name], seconds)


log(f"DEVICES {NPROC} process(es), {jax.devices()[0].platform} {jax.devices()[0].device_kind}")
run()
log(f"SUMMARY processes={NPROC} " + " ".join(f"{k.lower()}={v}" for k, v in COUNTS.items()) + f" {FAILED}")
sys.stdout.flush()
sys.exit(1 if FAILED else 0)
