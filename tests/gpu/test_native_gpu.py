"""GPU tests of the native (cuSOLVERMp) backend, one process per GPU through jaxmg.launch.

Each test launches ``tests/gpu/native_cases.py`` (the checks themselves, against the portable
backend) with 1 or 2 processes and fails if any case fails. They skip, with the reason, where
there is no NVIDIA GPU, too few of them, or no native library. Run them on a GPU machine with
``bash tests/gpu/run.sh`` (builds the extension first).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "native_cases.py"

pytestmark = [pytest.mark.gpu, pytest.mark.multiprocess]


def _gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = min(n, len([v for v in visible.split(",") if v.strip()]))
    return n


def _native_reason():
    try:
        from jaxmg.kernels import native
    except ImportError as e:  # pragma: no cover
        return f"jaxmg not importable: {e}"
    return native.unavailable_reason()


def _launch(nproc: int) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the CPU test set-up's simulated devices
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "gpu" / "launch.py"),
        "-n",
        str(nproc),
        "--timeout",
        "900",
        str(CASES),
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1000)


@pytest.mark.parametrize("nproc", [1, 2])
def test_native_cases(nproc):
    gpus = _gpu_count()
    if gpus == 0:
        pytest.skip("no NVIDIA GPU here (nvidia-smi lists none)")
    if gpus < nproc:
        pytest.skip(f"needs {nproc} GPUs, {gpus} visible")
    reason = _native_reason()
    if reason is not None:
        pytest.skip(f"native backend unavailable: {reason}")
    proc = _launch(nproc)
    lines = [l for l in proc.stdout.splitlines() if "CASE " in l or "SUMMARY" in l]
    report = "\n".join(lines)
    print(report)
    failed = [l for l in lines if " FAIL " in l]
    assert proc.returncode == 0 and not failed and any("SUMMARY" in l for l in lines), (
        f"exit {proc.returncode}\n{report}\n--- stderr tail ---\n{proc.stderr[-4000:]}"
    )


ABORT_SCRIPT = r"""
import jax, jax.numpy as jnp
import jaxmg
from jaxmg.kernels import native
jax.config.update("jax_enable_x64", True)
a = 64.0 * jnp.eye(64) + 1.0
x = jaxmg.potrs(a, jnp.ones(64), backend="native")
print("before", float(jnp.abs(a @ x - 1).max()), flush=True)
native.abort_communicators("aborted by the test")
assert "aborted by the test" in native.info()["watchdog"]["aborts"]
try:
    jaxmg.potrs(a, 2 * jnp.ones(64), backend="native").block_until_ready()
except Exception as e:
    print("after:", str(e)[:600], flush=True)
else:
    raise SystemExit("a call on an aborted grid succeeded")
"""


def test_abort_communicators_fails_later_calls_with_the_reason():
    """jaxmg.kernels.native.abort_communicators: ncclCommAbort on the cached grid (one GPU);
    the next native call on it raises, naming the reason, instead of using the communicator."""
    if _gpu_count() == 0:
        pytest.skip("no NVIDIA GPU here (nvidia-smi lists none)")
    reason = _native_reason()
    if reason is not None:
        pytest.skip(f"native backend unavailable: {reason}")
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run(
        [sys.executable, "-c", ABORT_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "before" in proc.stdout and "aborted earlier (aborted by the test" in proc.stdout
