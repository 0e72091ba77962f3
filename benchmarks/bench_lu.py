"""Benchmark jaxmg.lu_solve (native backend, one process per GPU, donate=True).

    python benchmarks/bench_lu.py --sizes 16384 65536 --grid 2,1 --out benchmarks/results/lu.jsonl

The parent launches ``jaxmg.launch`` (through scripts/gpu/launch.py) on this file (worker mode).
Each size writes one JSON line: N, dtype, grid, T_A, runs, median_s (of ``--runs`` timed calls
after two warm-up calls), times_s, first_call_s, getrf_ms (GPU time inside cuSOLVERMp's getrf,
from CUDA events in the handler, median), tflops (2N^3/3 flops of the factorization), peak_bytes
(XLA's peak device memory on process 0's GPU; matrix_bytes_in_use: XLA's memory in use with
only the generated matrix), native_workspace_bytes, and the residual
||Ax-b||_inf / (||A||_inf ||x||_inf), or ``error``.

The matrix is generated on the GPUs, already sharded and donated, so that the largest sizes fit
with one copy of it: a_ij = (1 + (i > j)) / (1 + |i-j|) + N delta_ij (not symmetric); the
residual regenerates it. b is a vector (N,). Compare with the engine's own getrf+getrs
(benchmarks/engine/engine_ops.sh "NRANKS NPROW N N T getrf") in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import _common  # noqa: E402  (the GPU workers' mesh, matrices, timings, residuals and output)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[16384])
    p.add_argument("--dtype", default="float64")
    p.add_argument("--grid", default="2,1", help="process grid nprow,npcol (default 2,1)")
    p.add_argument("--tile", type=int, default=1024, help="T_A (default 1024, as the engine's reference)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default=str(_common.results_path("lu.jsonl")))
    p.add_argument("--no-residual", action="store_true")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--timeout", type=int, default=1200)
    return p.parse_args(argv)


def worker(a):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxmg  # initializes jax.distributed under jaxmg.launch
    from jaxmg import _native
    from jaxmg.kernels import native

    rank = jax.process_index()
    nprow, npcol, mesh, spec = _common.worker_mesh(a.grid)
    dtype = jnp.dtype(a.dtype)
    for n in a.sizes:
        sharding = NamedSharding(mesh, spec)
        gen = _common.generator(n, dtype, sharding, lower=2.0)
        b = jax.device_put(jnp.sin(jnp.arange(n, dtype=jnp.float32) * 0.01).astype(dtype) + 1, NamedSharding(mesh, P()))
        rec = dict(
            kind="jaxmg-native-lu_solve",
            N=n,
            dtype=str(dtype),
            grid=[nprow, npcol],
            T_A=a.tile,
            nproc=jax.process_count(),
            nrhs=0,
            donate=True,
        )
        x = None
        try:
            times, getrf, first = [], [], None
            for it in range(a.runs + 2):
                A = gen()
                A.block_until_ready()
                if it == 0:  # the matrix alone (one copy), for comparison with peak_bytes
                    rec["matrix_bytes_in_use"] = int(
                        (jax.local_devices()[0].memory_stats() or {}).get("bytes_in_use", -1)
                    )
                _native.reset_timings()
                t0 = time.perf_counter()
                x = jaxmg.lu_solve(A, b, T_A=a.tile, mesh=mesh, donate=True, backend="native")
                x.block_until_ready()
                dt = time.perf_counter() - t0
                del A
                tm = [t for t in native.last_timings() if t["valid"] and t.get("kind") == "getrf"]
                if it == 0:
                    first = dt
                elif it >= 2:
                    times.append(dt)
                    if tm:
                        getrf.append(tm[0]["factor_ms"])
            rec.update(
                _common.timing_fields(times, first, 2 * n**3 / 3, dtype),
                getrf_ms=float(np.median(getrf)) if getrf else None,
                peak_bytes=int((jax.local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use", -1)),
                native_workspace_bytes=_native.cache_info()["workspace_bytes"],
            )
            if not a.no_residual:
                rec["residual_inf"] = _common.residuals(gen(), x, b)["residual_inf"]
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {str(e)[:800]}"
        x = None
        import gc

        gc.collect()
        if rank == 0:
            _common.emit(a.out, rec)


def main(argv=None):
    a = _args(argv)
    if a.worker:
        return worker(a)
    nprow, npcol = (int(v) for v in a.grid.split(","))
    passthrough = list(argv if argv is not None else sys.argv[1:])
    return _common.launch_workers(HERE, nprow * npcol, a.timeout, [*passthrough, "--worker"])


if __name__ == "__main__":
    sys.exit(main())
