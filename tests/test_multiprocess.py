"""The multi-process path: every operation across 4 processes started by jaxmg.launch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxmg

SCRIPTS = Path(__file__).parent / "launch_scripts"


def _launch(nproc, script, timeout):
    """Run `python -m jaxmg.launch -n NPROC --platform cpu SCRIPT` to completion."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    # The launched processes import the same jaxmg as this test (installed or from the tree).
    package_parent = str(Path(jaxmg.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxmg.launch",
            "-n",
            str(nproc),
            "--platform",
            "cpu",
            "--timeout",
            str(timeout),
            str(SCRIPTS / script),
        ],
        capture_output=True,
        text=True,
        timeout=timeout + 50,
        env=env,
        cwd=Path(__file__).parent,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


@pytest.mark.slow  # four processes on a 2-core machine: minutes; `bash tests/run.sh --slow`
@pytest.mark.multiprocess
def test_every_operation_across_four_processes():
    proc = _launch(4, "solve_all.py", timeout=400)
    for rank in range(4):
        assert f"[rank {rank}] ALL OK" in proc.stdout, proc.stdout[-4000:]
    for layout in ["grid (2, 2)", "grid (1, 4) column-major", "cols-1d reversed"]:
        assert f"[rank 0] {layout}: ok" in proc.stdout


@pytest.mark.multiprocess
def test_two_meshes_used_alternately_across_two_processes():
    proc = _launch(2, "two_meshes.py", timeout=300)
    for rank in range(2):
        assert f"[rank {rank}] pass 2: ok" in proc.stdout, proc.stdout[-4000:]
        assert f"[rank {rank}] ALL OK" in proc.stdout
