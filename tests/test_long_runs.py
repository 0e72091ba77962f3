"""Long runs: repeated eager calls of every public operation grow neither host memory nor caches.

Runs benchmarks/bench_long_runs.py (200 calls per case here; 1,000 by default there) in a fresh
process on 8 simulated CPU devices, portable backend, N = 16, and checks each case's record:
after the warm-up, no jaxmg cache of compiled functions gains an entry, no array stays alive,
and the resident set grows by less than RSS_BOUND_MIB (a leak of 100 KB per call would fail).
"""

import sys

import pytest

from helpers import OPERATIONS, ROOT, run_benchmark

#: Every test here runs the repeated-call benchmark (a minute of calls): CI runs them (tests/run.sh --slow).
pytestmark = pytest.mark.slow

CALLS = 200
RSS_BOUND_MIB = 20.0


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("long_runs") / "long_runs.jsonl"
    found = run_benchmark("bench_long_runs.py", out, "--calls", str(CALLS), "--cases", "all", timeout=1200)
    return {r["case"]: r for r in found}


CASES = [
    *OPERATIONS,
    "Cholesky.solve",
    "potrs_jit",
    "grad_potrs",
    "grad_logdet",
    "grad_cholesky",
    "grad_syevd",
    # eager jax.grad outside jit: its compiled calls are cached after the first
    "eager_grad_potrs",
    "eager_grad_logdet",
    "eager_grad_cholesky",
    "eager_grad_syevd",
]


@pytest.mark.parametrize("case", CASES)
def test_repeated_calls_grow_nothing(records, case):
    r = records[case]
    assert r["calls"] == CALLS and r["devices"] == 8
    assert set(r["caches_end"]) == {"_dispatch._compiled"}, r["caches_end"]
    assert all(v == 0 for v in r["cache_growth"].values()), r
    assert r["live_arrays_end"] <= r["live_arrays_start"], r
    assert r["rss_growth_mib"] < RSS_BOUND_MIB, r


def test_records_carry_device_memory_and_native_cache_fields(records):
    """On CPU there is no GPU memory to read and no native backend: the fields are there, None."""
    r = records["potrs"]
    assert r["device_bytes_start"] is None and r["device_bytes_end"] is None
    assert r["native_cache_start"] is None and r["native_cache_end"] is None
    assert r["processes"] == 1 and r["devices"] == 8


def test_mesh_shape_over_the_devices():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_long_runs import mesh_shape

    assert [mesh_shape(d) for d in (1, 2, 4, 8)] == [(1, 1), (2, 1), (2, 2), (4, 2)]
