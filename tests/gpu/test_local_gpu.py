"""GPU tests of the local route (the device's own solver with jaxmg's statuses, derivatives and
memory): runs ``tests/gpu/local_cases.py`` in a fresh process on the GPU and fails if any case
fails. Skips, with the reason, where there is no NVIDIA GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_native_gpu import _gpu_count

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu


def test_local_cases():
    run_cases("local_cases.py")


def run_cases(script: str) -> None:
    """Runs tests/gpu/``script`` in a fresh process on the GPU (skips where there is none) and
    fails if it did not run on a GPU or any of its cases failed."""
    if _gpu_count() == 0:
        pytest.skip("no NVIDIA GPU here (nvidia-smi lists none)")
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the CPU test set-up's simulated devices
    env.pop("JAX_PLATFORMS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name(script))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith(("CASE ", "SUMMARY", "DEVICE"))]
    report = "\n".join(lines)
    print(report)
    assert any(l.startswith("DEVICE gpu") for l in lines), f"the cases did not run on a GPU\n{report}"
    assert proc.returncode == 0 and not [l for l in lines if " FAIL " in l], (
        f"exit {proc.returncode}\n{report}\n--- stderr tail ---\n{proc.stderr[-4000:]}"
    )
