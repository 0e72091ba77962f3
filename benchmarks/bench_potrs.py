"""Benchmark jaxmg.potrs (native backend, one process per GPU) against plain JAX on one GPU.

    python benchmarks/bench_potrs.py --sizes 8192 32768 65536 --out benchmarks/results/potrs.jsonl

The parent launches ``jaxmg.launch -n NGPUS`` (through scripts/gpu/launch.py) on this file
(worker mode) and then,
unless ``--no-single``, plain JAX (``jax.scipy.linalg.cho_factor`` + ``cho_solve``) on one GPU
in a separate process. Each writes JSON lines (one per configuration):

  N, dtype, grid, T_A, runs, median_s (of the timed runs after one warm-up), tflops
  (N^3/3 flops of the factorization), first_call_s (compile + communicator set-up + solve),
  solver_ms (GPU time inside cuSOLVERMp, from CUDA events in the handler, median; factor_ms
  is its potrf part, the rest is the solve), layout_ms
  (GPU time of the in-place layout step), overhead (median_s / in-cuSOLVERMp time - 1),
  peak_bytes (XLA's peak device memory) + native_workspace_bytes, residual
  ||Ax-b||_2 / (||A||_F ||x||_2) and its inf-norm version.

The matrix is generated on the GPUs, already sharded (a_ij = 1/(1+|i-j|) + N delta_ij, SPD), and
donated to the solve, so the largest sizes fit: the residual regenerates it. By default the
native kernel ``potrs_inplace`` runs through the library's shard_map contract
(tests/gpu/_harness.py; its 4th output lets XLA honour the donation); ``--api`` times
``jaxmg.potrs(..., donate=True, backend="native")`` instead.

On GPU machines without network: ``source scripts/gpu/setup.sh`` first (wheels, paths, build). Run the
largest sizes in a process of their own (``--sizes 163840``): XLA's allocator keeps the memory
of an earlier size pooled.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from _common import (  # noqa: E402
    emit as _emit,
    generator as _generator,
    launch_workers,
    residuals,
    results_path,
    timing_fields,
    worker_env,
    worker_mesh,
)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[8192, 32768, 65536])
    p.add_argument(
        "--single-sizes",
        type=int,
        nargs="*",
        default=None,
        help="sizes for plain JAX on one GPU (default: those <= 32768)",
    )
    p.add_argument("--dtype", default="float64")
    p.add_argument("--grid", default="2,1", help="process grid nprow,npcol (default 2,1)")
    p.add_argument("--tile", type=int, default=None, help="T_A (default: jaxmg.auto_tile)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--nrhs", type=int, default=0, help="0: b is a vector (N,)")
    p.add_argument("-n", "--nproc", type=int, default=None, help="processes (default: nprow*npcol)")
    p.add_argument("--out", default=str(results_path("potrs.jsonl")))
    p.add_argument("--no-single", action="store_true")
    p.add_argument("--no-residual", action="store_true")
    p.add_argument("--api", action="store_true", help="time jaxmg.potrs (public API) instead of the kernel")
    p.add_argument("--worker", choices=["native", "single"], default=None)
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument(
        "--profile",
        default=None,
        help="folder: trace one more call, after the timed ones and not counted in them, with "
        "jax.profiler (a Perfetto JSON trace per size and process), to find where the time "
        "beyond the solver goes",
    )
    return p.parse_args(argv)


def _rhs(n, nrhs, dtype):
    import jax.numpy as jnp

    b = jnp.sin(jnp.arange(n, dtype=jnp.float32) * 0.01).astype(dtype) + 1
    return b if nrhs == 0 else jnp.stack([b * (k + 1) for k in range(nrhs)], axis=1)


def _peak(dev):
    try:
        s = dev.memory_stats() or {}
        return int(s.get("peak_bytes_in_use", -1))
    except Exception:  # noqa: BLE001
        return -1


def worker_native(a):
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    import _harness

    native = _harness.load()  # initializes jax.distributed (jaxmg.launch)
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from jaxmg import _layout, _native

    use_api = a.api and _harness.PUBLIC_API
    if use_api:
        import jaxmg

    rank = jax.process_index()
    nprow, npcol, mesh, spec = worker_mesh(a.grid)
    dtype = jnp.dtype(a.dtype)
    if rank == 0:
        print("native info:", native.info(), flush=True)
    for n in a.sizes:
        sharding = NamedSharding(mesh, spec)
        gen = _generator(n, dtype, sharding)
        b = jax.device_put(_rhs(n, a.nrhs, dtype), NamedSharding(mesh, P()))
        grid = _harness.grid_of(mesh, spec)
        tile = a.tile or _layout.auto_tile((n, n), grid)
        tiled = _native.capabilities().get("tiled_solve") and npcol == 1 and n // tile <= 8  # csrc/cholesky.cc's rule
        rec = dict(
            kind="jaxmg-native" + ("-api" if use_api else "-kernel"),
            N=n,
            dtype=str(dtype),
            grid=[nprow, npcol],
            T_A=tile,
            nproc=jax.process_count(),
            nrhs=a.nrhs,
            solve="tiled" if tiled else "cusolvermp",
        )
        try:
            times, solver, layout, factor = [], [], [], []
            first = None
            iterations = a.runs + 2 + (1 if a.profile else 0)  # the traced call is not timed
            for it in range(iterations):
                A = gen()
                A.block_until_ready()
                _native.reset_timings()
                tracing = bool(a.profile) and it == iterations - 1
                if tracing:
                    jax.profiler.start_trace(os.path.join(a.profile, f"n{n}-rank{rank}"), create_perfetto_trace=True)
                t0 = time.perf_counter()
                if use_api:
                    x = jaxmg.potrs(A, b, T_A=tile, mesh=mesh, donate=True, backend="native")
                else:  # potrs_inplace returns the consumed buffer, so XLA honours the donation
                    x = _harness.run(
                        native.potrs_inplace,
                        grid,
                        tile,
                        [A, b],
                        ["block", "whole"],
                        ["whole"] * 3 + ["block"],
                        donate=True,
                    )[0]
                x.block_until_ready()
                dt = time.perf_counter() - t0
                if tracing:
                    jax.profiler.stop_trace()
                tm = [t for t in native.last_timings() if t["valid"]]
                if it == 0:
                    first = dt
                elif tracing:
                    rec["traced_call_s"] = dt
                elif it >= 2 or a.runs + 2 <= 2:
                    times.append(dt)
                    if tm:
                        solver.append(tm[0]["solver_ms"])
                        layout.append(tm[0]["layout_ms"])
                        factor.append(tm[0].get("factor_ms", float("nan")))
                del A
            rec.update(
                timing_fields(times, first, n**3 / 3, dtype),
                solver_ms=float(np.median(solver)) if solver else None,
                layout_ms=float(np.median(layout)) if layout else None,
                factor_ms=float(np.median(factor)) if factor else None,
            )
            if solver:
                rec["overhead"] = rec["median_s"] / (rec["solver_ms"] / 1e3) - 1
            rec["peak_bytes"] = _peak(jax.local_devices()[0])
            rec["native_workspace_bytes"] = _native.cache_info()["workspace_bytes"]
            if not a.no_residual:
                rec.update(residuals(gen(), x, b))
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {str(e)[:800]}"
        x = None  # free the solution before the next size
        import gc

        gc.collect()
        if rank == 0:
            _emit(a.out, rec)


def worker_single(a):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(a.dtype)
    sizes = a.single_sizes if a.single_sizes is not None else [n for n in a.sizes if n <= 32768]

    @jax.jit
    def solve(A, b):
        c = jax.scipy.linalg.cho_factor(A, lower=True)
        return jax.scipy.linalg.cho_solve(c, b)

    dev = jax.devices()[0]
    for n in sizes:
        rec = dict(kind="jax-1gpu", N=n, dtype=str(dtype), grid=[1, 1], T_A=None, nproc=1, nrhs=a.nrhs)
        try:
            gen = _generator(n, dtype, jax.sharding.SingleDeviceSharding(dev))
            b = jax.device_put(_rhs(n, a.nrhs, dtype), dev)
            A = gen()
            times = []
            first = None
            for it in range(a.runs + 2):
                A.block_until_ready()
                t0 = time.perf_counter()
                x = solve(A, b)
                x.block_until_ready()
                dt = time.perf_counter() - t0
                if it == 0:
                    first = dt
                elif it >= 2:
                    times.append(dt)
            rec.update(timing_fields(times, first, n**3 / 3, dtype), peak_bytes=_peak(dev))
            rec["residual"] = float(jnp.linalg.norm(A @ x - b) / (jnp.linalg.norm(A) * jnp.linalg.norm(x)))
            del A
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {str(e)[:800]}"
        _emit(a.out, rec)


def main(argv=None):
    a = _args(argv)
    if a.worker == "native":
        return worker_native(a)
    if a.worker == "single":
        return worker_single(a)
    nprow, npcol = (int(v) for v in a.grid.split(","))
    passthrough = list(argv if argv is not None else sys.argv[1:])
    rc = launch_workers(HERE, a.nproc or nprow * npcol, a.timeout, [*passthrough, "--worker", "native"])
    if not a.no_single:
        env = worker_env(ROOT)
        env1 = dict(env, CUDA_VISIBLE_DEVICES=env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
        rc |= subprocess.call(
            [sys.executable, str(HERE), *passthrough, "--worker", "single"], env=env1, cwd=ROOT, timeout=a.timeout
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
