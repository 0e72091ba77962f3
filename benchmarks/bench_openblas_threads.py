"""Why simulated CPU devices need OPENBLAS_NUM_THREADS=1: jitted potrs on 8 simulated CPU
devices against one device, with the variable unset and set to 1.

    python benchmarks/bench_openblas_threads.py --n 1024

Each configuration runs in its own process (XLA_FLAGS sets the device count before JAX
starts): a (devices,) Auto mesh, ``a`` sharded by rows, float64, median of 5 timed calls
after one warm-up, one JSON line each (devices, N, OPENBLAS_NUM_THREADS, median_s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import results_path  # noqa: E402

HERE = Path(__file__).resolve()


def _measure(n: int) -> dict:
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg

    jax.config.update("jax_enable_x64", True)
    count = jax.device_count()
    mesh = jax.make_mesh((count,), ("x",), axis_types=(AxisType.Auto,))
    g = np.random.default_rng(0).standard_normal((n, n))
    a = jax.device_put(g @ g.T / n + np.eye(n), NamedSharding(mesh, P("x", None)))
    b = jax.device_put(np.ones(n), NamedSharding(mesh, P("x")))
    solve = jax.jit(lambda a, b: jaxmg.potrs(a, b))
    jax.block_until_ready(solve(a, b))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(solve(a, b))
        times.append(time.perf_counter() - start)
    return {
        "devices": count,
        "N": n,
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "median_s": sorted(times)[2],
        "cpus": os.cpu_count(),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--out", default=str(results_path("openblas_threads.jsonl")))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(_measure(args.n)), flush=True)
        return
    for devices in (8, 1):
        for threads in (None, "1"):
            env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "XLA_FLAGS")}
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
            if threads:
                env["OPENBLAS_NUM_THREADS"] = threads
            out = (
                subprocess.run(
                    [sys.executable, str(HERE), "--worker", "--n", str(args.n)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            print("RESULT " + out, flush=True)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            with open(args.out, "a") as f:
                f.write(out + "\n")


if __name__ == "__main__":
    main()
