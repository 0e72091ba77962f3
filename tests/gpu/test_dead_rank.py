"""A dead rank on 2 GPUs never hangs the other, native backend.

Rank 1 dies of SIGKILL after three native potrs solves (N = 16,384), while rank 0 is in the
fourth, blocked inside cuSOLVERMp's NCCL calls:
- without the launcher (2 plain processes, as under Slurm), rank 0 must be aborted by JAX's
  coordination service within JAXMG_FAILURE_TIMEOUT (20 s here), with an error naming task 1;
- under jaxmg.launch, every process must be gone within 10 s.
Both skip, with the reason, without 2 NVIDIA GPUs and the native library.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from gpu.test_native_gpu import _gpu_count, _native_reason  # noqa: E402
from helpers import run_ranks_without_launcher  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.multiprocess]
FAILURE_TIMEOUT = 20
N = 16384


@pytest.fixture(autouse=True)
def _two_gpus_and_native():
    gpus = _gpu_count()
    if gpus < 2:
        pytest.skip(f"needs 2 NVIDIA GPUs, {gpus} visible")
    reason = _native_reason()
    if reason is not None:
        pytest.skip(f"native backend unavailable: {reason}")


def test_survivor_without_launcher_is_aborted_in_time(tmp_path):
    status, out, seconds, dead_status = run_ranks_without_launcher(
        "kill-in-solve",
        1,
        tmp_path,
        platform="gpu",
        env={"JAXMG_FAILURE_TIMEOUT": str(FAILURE_TIMEOUT), "FAULT_N": str(N)},
        timeout=600,
    )
    fatal = [
        line for line in out.splitlines() if "Terminating process" in line or "heartbeat" in line or "solve " in line
    ]
    print(f"survivor (rank 0) ended {seconds:.1f} s after rank 1 died, status {status}:", *fatal[-8:], sep="\n")
    assert dead_status == -9
    assert "solve 3 done" not in out  # it was in the fourth solve when its peer died
    assert status != 0 and seconds < FAILURE_TIMEOUT, f"{seconds:.1f} s\n{out[-3000:]}"
    assert "Task 1 heartbeat timeout" in out or "stopped sending heartbeats):\n1" in out, out[-3000:]


def test_launcher_stops_both_ranks_in_time(tmp_path):
    from jaxmg import launch

    env = {"FAULT_N": str(N)}
    cmd = [
        sys.executable,
        "-m",
        "jaxmg.launch",
        "-n",
        "2",
        "--timeout",
        "300",
        str(TESTS / "launch_scripts" / "fault.py"),
        "kill-in-solve",
        "1",
        str(tmp_path),
    ]
    child = dict(
        os.environ,
        **env,
        PYTHONPATH=os.pathsep.join([str(Path(launch.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    child.pop("XLA_FLAGS", None)
    r = subprocess.run(cmd, env=child, capture_output=True, text=True, timeout=400)
    seconds = time.time() - float((tmp_path / "failed_at").read_text())
    print(r.stderr[-1500:], f"\nall ranks gone {seconds:.1f} s after the failure")
    assert r.returncode == 128 + 9, r.stdout[-2000:] + r.stderr[-2000:]
    assert "rank 1 failed first: it was killed by signal 9 (SIGKILL)" in r.stderr
    assert seconds < 10


def test_native_timeout_frees_the_survivor_before_the_heartbeat(tmp_path):
    """With JAX's heartbeat set far off (JAXMG_FAILURE_TIMEOUT=300: 150 s), the native watchdog
    (JAXMG_NATIVE_TIMEOUT=10) aborts the survivor's NCCL communicator: its blocked solve ends
    with an error that names the timeout, well before the heartbeat would."""
    status, out, seconds, dead_status = run_ranks_without_launcher(
        "kill-in-solve",
        1,
        tmp_path,
        platform="gpu",
        env={"JAXMG_FAILURE_TIMEOUT": "300", "JAXMG_NATIVE_TIMEOUT": "10", "FAULT_N": str(N)},
        timeout=600,
    )
    print(f"survivor (rank 0) ended {seconds:.1f} s after rank 1 died, status {status}:", out[-2000:], sep="\n")
    assert dead_status == -9
    assert status != 0 and seconds < 60, f"{seconds:.1f} s\n{out[-3000:]}"
    assert "JAXMG_NATIVE_TIMEOUT" in out and "aborting the grid's NCCL communicator" in out, out[-3000:]
