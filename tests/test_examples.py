"""The examples run end to end (as subprocesses, at a small size) and print sound results.

Each example is started with a fresh environment: XLA_FLAGS is dropped so that the script
asks for its own 8 simulated CPU devices, the launcher's JAXMG_* variables are dropped, and
PYTHONPATH leads to the jaxmg package this test imported. Two tests also run the new
examples under ``python -m jaxmg.launch -n 2`` (one CPU process per device).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

if importlib.util.find_spec("jaxmg") is None:  # not installed: use the source tree
    sys.path.insert(0, str(ROOT))

import jaxmg  # noqa: E402

JAXMG_PARENT = str(Path(jaxmg.__file__).resolve().parents[1])
TIMEOUT = 120  # seconds per example; each takes a few seconds at these sizes

pytestmark = pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"no examples folder at {EXAMPLES}")

NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"


def _env():
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    for var in [v for v in env if v.startswith("JAXMG_")]:
        del env[var]
    # One LAPACK thread per simulated device: OpenBLAS's busy-waiting worker threads on top
    # of 8 device threads make the portable backend orders of magnitude slower on a loaded
    # machine (the examples set this themselves; quickstart.py does not).
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join([JAXMG_PARENT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _run(script: str, *args, launch: int = 0) -> str:
    """Run an example (under the launcher with ``launch`` processes); return its stdout."""
    command = [sys.executable]
    if launch:
        command += ["-m", "jaxmg.launch", "-n", str(launch), "--timeout", str(TIMEOUT - 10)]
    command += [str(EXAMPLES / script), *map(str, args)]
    proc = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    assert proc.returncode == 0, (
        f"{script} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}"
        f"\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def _number(pattern: str, output: str) -> float:
    match = re.search(pattern.replace("{NUMBER}", NUMBER), output)
    assert match, f"no line matching {pattern!r} in the output:\n{output}"
    return float(match.group(1))


def _first_last(output: str):
    match = re.search(rf"loss: first {NUMBER} -> last {NUMBER}", output)
    assert match, f"no 'loss: first ... -> last ...' line in the output:\n{output}"
    return float(match.group(1)), float(match.group(2))


def test_quickstart():
    out = _run("quickstart.py", "--n", 256)
    assert _number(r"relative residual .*= {NUMBER}", out) < 1e-12, out
    assert math.isfinite(_number(r"log det A = {NUMBER}", out)), out


def _check_gp(out: str):
    first, last = _first_last(out)
    assert last < first, out
    assert "loss decreased: True" in out, out
    assert _number(r"gradient max abs difference vs jnp.linalg: {NUMBER}", out) < 1e-6, out
    assert _number(r"final NLL: .*abs difference {NUMBER}", out) < 1e-8, out


def _check_layer(out: str):
    first, last = _first_last(out)
    assert last < first, out
    assert "loss decreased: True" in out, out


def test_gp_hyperparameters():
    pytest.importorskip("optax")
    _check_gp(_run("gp_hyperparameters.py", "--n", 128, "--steps", 10))


def test_equinox_solve_layer():
    pytest.importorskip("optax")
    pytest.importorskip("equinox")
    _check_layer(_run("equinox_solve_layer.py", "--n", 128, "--steps", 10))


@pytest.mark.parametrize(
    "script, check", [("gp_hyperparameters.py", _check_gp), ("equinox_solve_layer.py", _check_layer)]
)
def test_examples_under_launcher(script, check):
    """The same scripts, unchanged, with one process per device (2 CPU processes)."""
    pytest.importorskip("optax")
    out = _run(script, "--n", 128, "--steps", 10, launch=2)
    assert "2 process(es)" in out, out
    check(out)
