"""The memory plan of jaxmg's programs for one H200, from XLA's GPU compiler on a machine
without a GPU (benchmarks/compile_memory.py, through XLA's CUDA plugin, which tests/run.sh
installs apart from .venv's packages): the Gaussian-process gradient holds three N x N matrices
(plain JAX's six), potrs one (JAX's two), the gradient of the Cholesky factor no more than
JAX's, and ``Cholesky(a).inverse()`` nothing beyond its output but the inverse's fixed scratch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxmg

ROOT = Path(__file__).resolve().parents[1]
COMPILER = Path(os.environ.get("JAXMG_GPU_COMPILER", ROOT / ".venv" / "gpu-compiler"))
N = 8192


def _records(tmp_path, *args) -> dict:
    if not (COMPILER / "jax_plugins" / "xla_cuda13").is_dir():
        pytest.skip(
            f"XLA's CUDA plugin is not installed in {COMPILER} (tests/run.sh installs it): the GPU "
            "programs cannot be compiled here"
        )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the GPU compiler's own defaults
    env["PYTHONPATH"] = os.pathsep.join([str(Path(jaxmg.__file__).resolve().parents[1]), str(COMPILER)])
    out = tmp_path / "compile_memory.jsonl"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compile_memory.py"), "--sizes", str(N), "--out", str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all("error" not in r for r in records), [r["error"] for r in records if "error" in r]
    return {(r["case"], r["impl"], r["dtype"]): r["temp_matrices"] for r in records}


def test_the_gpu_programs_hold_what_the_mathematics_needs(tmp_path):
    held = _records(
        tmp_path, "--cases", "gp_vg", "potrs", "cholesky_grad", "cholesky_inverse", "--dtypes", "float64", "float32"
    )
    # the GP loss's jitted value_and_grad: the kernel's two residuals (x x^T and exp's argument)
    # and K, whose buffer the factor and A^-1 take in place; the cotangent of K is never written
    # (XLA computes it inside the kernel's backward reductions). The in-place inverse's fixed
    # 512 x 4,096 scratch is 1/32 of a matrix at this N (a 512 x N one would be 1/16).
    assert held["gp_vg", "jaxmg", "float64"] <= 3.05, held
    assert held["gp_vg", "jaxmg", "float32"] <= 2.05, held
    assert held["gp_vg", "jax", "float64"] >= 5.0, held  # the same compiler on plain JAX's program
    assert held["potrs", "jaxmg", "float64"] <= 1.01 < held["potrs", "jax", "float64"], held
    # L's derivative: two triangular solves on the factor as the solver reads it (no transposed
    # copy, no triangular inverse), as JAX's own
    assert held["cholesky_grad", "jaxmg", "float64"] <= held["cholesky_grad", "jax", "float64"] + 0.01, held
    assert held["cholesky_inverse", "jaxmg", "float64"] <= 0.05 < held["cholesky_inverse", "jax", "float64"], held
