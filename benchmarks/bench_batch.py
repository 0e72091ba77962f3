"""Benchmark the two ways to solve a batch of systems on a mesh, in the same run.

    python benchmarks/bench_batch.py                               # 8 simulated CPU devices
    python benchmarks/bench_batch.py --sizes 512 2048 --batches 8 32

For a batch of B diagonally dominant N x N systems ``a`` (B, N, N) and ``b`` (B, N, 1), float64,
on a mesh of every local device ((count/2, 2); 8 simulated CPU devices when there is no GPU),
each way is timed in ``jax.jit`` as the median of ``--runs`` runs after one warm-up:

  layout "distributed": what jaxmg.numpy.linalg.solve does with a batch: each matrix is spread
      over the whole mesh (``a`` sharded ``P(None, 'x', 'y')``) and the batch is a loop of
      distributed solves;
  layout "spread": the batch spread over the devices, one whole matrix per device at a time
      (``a`` sharded ``P(('x', 'y'))`` on its batch axis), each solved by jax.numpy.linalg.solve
      on its own device: possible only where one matrix fits on one device.

One JSON line per N, B and layout: layout, N, batch, median_s, times_s, runs, residual
(max |a x - b| / max |b|), devices, platform, grid, jax; for "distributed" also ratio (its median
over "spread"'s: > 1 is slower).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import emit_timing, grid_shape, results_path, run_on_local_devices  # noqa: E402
from bench_autodiff import _median_time  # noqa: E402  (warm-up, then the median of runs)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--batches", type=int, nargs="+", default=[8])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default=str(results_path("batch.jsonl")))
    return p.parse_args(argv)


def run(args):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg.numpy.linalg as mla

    jax.config.update("jax_enable_x64", True)
    count = jax.device_count()
    shape = grid_shape(count)
    mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    base = {"devices": count, "platform": jax.devices()[0].platform, "grid": list(shape), "jax": jax.__version__}
    layouts = {"spread": (P(("x", "y")), P(("x", "y")), jnp.linalg.solve),
               "distributed": (P(None, "x", "y"), P(None, "x"), mla.solve)}
    for n in args.sizes:
        for batch in args.batches:
            if batch % count:
                raise SystemExit(f"--batches: {batch} is not a multiple of the {count} devices, which 'spread' needs")
            rng = np.random.default_rng(0)
            a = rng.standard_normal((batch, n, n)) + n * np.eye(n)
            b = rng.standard_normal((batch, n, 1))
            medians = {}
            for layout, (a_spec, b_spec, solve) in layouts.items():
                with jax.set_mesh(mesh):
                    a_dev = jax.device_put(a, NamedSharding(mesh, a_spec))
                    b_dev = jax.device_put(b, NamedSharding(mesh, b_spec))
                    fn = jax.jit(solve)
                    median, times = _median_time(lambda: fn(a_dev, b_dev), args.runs)
                    x = np.asarray(fn(a_dev, b_dev))
                residual = float(np.max(np.abs(a @ x - b)) / np.max(np.abs(b)))
                medians[layout] = median
                emit_timing(args.out, base, median, times, medians["spread"] if layout == "distributed" else None,
                            layout=layout, N=n, batch=batch, residual=residual)


def main(argv=None):
    run_on_local_devices(_args, run, argv)


if __name__ == "__main__":
    main()
