"""The benchmark scripts run and write their JSON records (no timing is asserted here)."""

import json
import sys

import pytest

from helpers import ROOT, run_benchmark


@pytest.mark.slow
def test_bench_autodiff_writes_every_case(tmp_path):
    records = run_benchmark(
        "bench_autodiff.py", tmp_path / "autodiff.jsonl", "--n", "128", "--vmap-n", "64", "--runs", "2"
    )
    assert [r["case"] for r in records] == ["potrs", "grad", "factor+8solves", "potrs@vmap-n", "vmap4"]
    for record in records:
        assert record["median_s"] > 0 and record["runs"] == 2 and record["devices"] == 8
    assert all("ratio" in r for r in records if r["case"] not in ("potrs", "potrs@vmap-n"))


@pytest.mark.slow
def test_bench_eager_grad_writes_every_case(tmp_path):
    records = run_benchmark("bench_eager_grad.py", tmp_path / "eager_grad.jsonl", "--sizes", "64", "--runs", "2")
    assert [r["case"] for r in records] == ["jit_grad", "first_eager_grad", "eager_grad", "eager_grad_b", "eager_jvp"]
    assert all(r["median_s"] > 0 and r["devices"] == 8 and r["N"] == 64 for r in records)
    assert all("ratio" in r for r in records if r["case"] != "jit_grad")


@pytest.mark.slow
def test_bench_numpy_linalg_writes_every_function(tmp_path):
    import jax.numpy as jnp
    import jax.scipy.linalg as jsla

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_numpy_linalg import FUNCTIONS, _cases, _scipy_cases

    # the default run covers every function the script can time, each once
    assert list(FUNCTIONS) == list(_cases(jnp.linalg) | _scipy_cases(jsla))
    records = run_benchmark("bench_numpy_linalg.py", tmp_path / "numpy_linalg.jsonl", "--sizes", "32", "--runs", "1")
    assert [(r["function"], r["impl"]) for r in records] == [(f, i) for f in FUNCTIONS for i in ("jax", "jaxmg")]
    # a JAX function that this JAX version lacks (scipy.eigh_b before JAX 0.12) is recorded with
    # its error and no timings; jaxmg's always runs, with a ratio wherever JAX's ran
    jax_ran = {r["function"] for r in records if r["impl"] == "jax" and "error" not in r}
    assert all(r["devices"] == 8 and r["N"] == 32 for r in records)
    assert all(r["median_s"] > 0 for r in records if r["impl"] == "jaxmg" or r["function"] in jax_ran)
    assert all(("ratio" in r) == (r["function"] in jax_ran) for r in records if r["impl"] == "jaxmg")
    assert {"solve", "inv", "eigh", "svd", "scipy.cho_solve"} <= jax_ran


@pytest.mark.slow
def test_bench_dispatch_writes_every_case_beside_jax(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_dispatch import STACK_OPS, _cases

    records = run_benchmark(
        "bench_dispatch.py",
        tmp_path / "dispatch.jsonl",
        *("--sizes", "8", "--places", "device", "stack", "--calls", "1", "--rounds", "1", "--warmup", "1"),
    )
    assert [(r["op"], r["place"]) for r in records] == [(op, "device") for op in _cases()] + [
        (op, "stack") for op in STACK_OPS
    ]
    assert all(r["jaxmg_s"] > 0 and r["jax_s"] > 0 and r["ratio"] > 0 and r["devices"] == 8 for r in records)


@pytest.mark.slow
def test_bench_eigen_writes_every_case_beside_jax(tmp_path):
    records = run_benchmark(
        "bench_eigen.py",
        tmp_path / "eigen.jsonl",
        "--cases",
        "polar",
        "--sizes",
        "48",
        "--stacks",
        "4x40",
        "--dtypes",
        "float32",
        "--runs",
        "1",
    )
    expected = [("polar", i) for i in ("jax", "jaxmg", "jax.scipy")]
    assert [(r["case"], r["impl"], r["count"], r["N"]) for r in records] == (
        [(c, i, 0, 48) for c, i in expected] + [(c, i, 4, 40) for c, i in expected]
    )
    for record in records:
        assert "error" not in record, record
        assert record["median_s"] > 0 and record["runs"] == 1 and record["dtype"] == "float32"
        assert ("ratio" in record) == (record["impl"] != "jax") and ("per_matrix_s" in record) == (record["count"] > 0)


@pytest.mark.slow
def test_bench_crossover_writes_every_path(tmp_path):
    """On CPU the native path cannot run: its record says why, and the others are timed."""
    ops = ["potrs", "qr", "least_squares", "lu_solve", "syevd"]
    records = run_benchmark(
        "bench_crossover.py", tmp_path / "crossover.jsonl", "--ops", *ops, "--sizes", "32", "--runs", "1"
    )
    assert [r["op"] for r in records] == ops
    for record in records:
        assert record["portable_ms"] > 0 and "needs NVIDIA GPUs" in record["native_error"], record
        assert record["M"] == (64 if record["op"] == "least_squares" else 32)
    assert all(r["plain_jax_ms"] > 0 for r in records if r["op"] != "least_squares")


@pytest.mark.slow
def test_bench_check_writes_every_operation(tmp_path):
    """On CPU the call takes the portable route (not checked); the check alone is timed, and its
    test ratios on the benchmark's matrices are far below the threshold."""
    records = run_benchmark("bench_check.py", tmp_path / "check.jsonl", "--sizes", "32", "--runs", "1")
    assert [r["op"] for r in records] == ["potrs", "lu_solve", "least_squares", "syevd"]
    for record in records:
        assert "error" not in record, record
        assert record["checked_ms"] > 0 and record["unchecked_ms"] > 0 and record["check_ms"] > 0
        assert record["N"] == 32 and record["backend"] == "portable" and 0 <= max(record["test_ratios"]) < 30


def test_trace_summary_merges_events_by_name_per_track(tmp_path):
    import gzip

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import trace_summary

    events = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name", "args": {"name": "stream 7"}},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 0.0, "dur": 3000.0, "name": "potrf"},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 3000.0, "dur": 500.0, "name": "copy"},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 4000.0, "dur": 500.0, "name": "copy"},
    ]
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    lines = trace_summary.summary(trace_summary.load(str(path)))
    assert lines[0] == "== /device:GPU:0 / stream 7: 3 events over 4.500 ms"
    assert "potrf" in lines[1] and "3.000 ms" in lines[1] and "1x" in lines[1]
    assert "copy" in lines[2] and "1.000 ms" in lines[2] and "2x" in lines[2]


@pytest.mark.slow
def test_bench_gp_writes_the_loss_and_the_inverses(tmp_path):
    """The GP loss (plain JAX, then jaxmg) and the inverses (jaxmg's, then plain JAX's); the
    gradient equals plain JAX's."""
    records = run_benchmark(
        "bench_gp.py",
        tmp_path / "gp.jsonl",
        "--sizes",
        "64",
        "--dtypes",
        "float64",
        "--solvers",
        "portable",
        "--runs",
        "1",
        "--inverse",
        "--leaves",
        "512,512,2048",
        "64,32,128",
    )
    assert [(r["bench"], r["solver"]) for r in records] == [
        ("gp", "plain JAX"),
        ("gp", "jaxmg portable"),
        ("inverse", "jaxmg portable"),
        ("inverse", "jaxmg portable"),
        ("inverse", "plain JAX"),
    ]
    assert [r["one_gpu_leaves"] for r in records[2:4]] == [[512, 512, 2048], [64, 32, 128]]
    loss = records[1]
    assert loss["value_and_grad_s"] > 0 and loss["first_call_s"] > 0 and loss["eager_value_and_grad_s"] > 0
    assert loss["value_rel_diff"] < 1e-12 and loss["grad_rel_diff"] < 1e-10
    assert records[2]["residual_rms"] < 1e-12 and records[2]["lu_residual_rms"] < 1e-12


@pytest.mark.slow
def test_bench_batch_writes_every_op(tmp_path):
    """jaxmg and JAX on a batch-sharded stack: the batch route, no data moved between devices."""
    records = run_benchmark("bench_batch.py", tmp_path / "batch.jsonl", "--n", "16", "--batch", "8", "--runs", "1")
    assert [(r["op"], r["impl"]) for r in records] == [
        (op, impl) for op in ("potrs", "eigh", "svd") for impl in ("jax", "jaxmg")
    ]
    assert all(r["median_s"] > 0 and r["devices"] == 8 and r["batch"] == 8 and r["residual"] < 1e-12 for r in records)
    assert all(
        r["route"] == "batch" and r["ratio"] > 0 and not r["collectives"] for r in records if r["impl"] == "jaxmg"
    )


@pytest.mark.slow
def test_bench_memory_writes_every_case(tmp_path):
    """Each case in its own process: XLA's memory analysis in N x N matrices, beside plain JAX's."""
    cases = ["potrs", "cholesky_inverse_donated", "gp_vg"]
    records = run_benchmark(
        "bench_memory.py", tmp_path / "memory.jsonl", "--sizes", "64", "--dtypes", "float64", "--cases", *cases
    )
    assert [(r["case"], r["impl"]) for r in records] == [
        ("potrs", "jax"),
        ("potrs", "jaxmg"),
        ("cholesky_inverse_donated", "jaxmg"),
        ("gp_vg", "jax"),
        ("gp_vg", "jaxmg"),
    ]
    assert all("error" not in r and r["N"] == 64 and r["first_run_s"] > 0 for r in records), records
    assert all(r["temp_matrices"] >= 0 for r in records if r["case"] != "cholesky_inverse_donated")
    assert all("compiled_peak_bytes" in r for r in records)  # the compiling process's peak, beside the run's


def test_bench_memory_bisects_on_multiples_of_4096(monkeypatch):
    """The largest N is found by bisection on multiples of 4,096 (here: runs up to 12,288)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_memory

    def measure(args, case, impl, n, dtype):
        return {"N": n} if n <= 12288 else {"N": n, "error": "out of memory"}

    monkeypatch.setattr(bench_memory, "measure", measure)
    args = bench_memory._args(["--low", "4096", "--high", "65536"])
    record = bench_memory.largest(args, "gp_vg", "jaxmg", "float64")
    assert record["largest_n"] == 12288
    assert all(n % 4096 == 0 for n, _ in record["tried"]) and [12288, "ran"] in record["tried"]
    assert all(outcome in ("ran", "out of memory") for _, outcome in record["tried"])
    assert any(outcome == "out of memory" for _, outcome in record["tried"])  # each failure says why
