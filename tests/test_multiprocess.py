"""The multi-process path: every operation across 4 processes started by jaxmg.launch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxmg

SCRIPTS = Path(__file__).parent / "launch_scripts"


@pytest.mark.multiprocess
def test_every_operation_across_four_processes():
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    # The launched processes import the same jaxmg as this test (installed or from the tree).
    package_parent = str(Path(jaxmg.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "jaxmg.launch", "-n", "4", "--platform", "cpu", "--timeout", "400",
         str(SCRIPTS / "solve_all.py")],
        capture_output=True, text=True, timeout=450, env=env,
        cwd=Path(__file__).parent,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for rank in range(4):
        assert f"[rank {rank}] ALL OK" in proc.stdout, proc.stdout[-4000:]
    for layout in ["grid (2, 2)", "grid (1, 4) column-major", "cols-1d reversed"]:
        assert f"[rank 0] {layout}: ok" in proc.stdout
