"""The benchmark scripts run and write their JSON records (no timing is asserted here)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jaxmg

ROOT = Path(__file__).resolve().parents[1]


def test_bench_autodiff_writes_every_case(tmp_path):
    out = tmp_path / "autodiff.jsonl"
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(jaxmg.__file__).resolve().parents[1]),
                                                       env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_autodiff.py"), "--n", "128",
                           "--vmap-n", "64", "--runs", "2", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["case"] for r in records] == ["potrs", "grad", "factor+8solves", "potrs@vmap-n", "vmap4"]
    for record in records:
        assert record["median_s"] > 0 and record["runs"] == 2 and record["devices"] == 8
    assert all("ratio" in r for r in records if r["case"] not in ("potrs", "potrs@vmap-n"))
