"""Benchmark eager derivatives against the same derivatives under jax.jit.

    python benchmarks/bench_eager_grad.py --sizes 256 2048               # 8 simulated CPU devices
    python benchmarks/bench_eager_grad.py --mesh auto --sizes 256        # Auto mesh axes

A user's first ``jax.grad(lambda a, b: jnp.sum(jaxmg.potrs(a, b)), argnums=(0, 1))(a, b)``
outside jit compiles; every later call should cost about what the jitted grad costs. On a
(4, 2) mesh of every local device (8 simulated CPU devices when there is no GPU), ``a``
sharded ``P('x', 'y')`` and ``b`` ``P('x')``, float64, each case is timed as the median of
``--runs`` runs after one warm-up, and written as a JSON line:

  case: "jit_grad" (jax.jit(jax.grad(...)), w.r.t. a and b), "eager_grad" (the same grad
        called outside jit), "eager_grad_b" (w.r.t. b alone), "eager_jvp" (jax.jvp w.r.t. a
        and b), "first_eager_grad" (the first eager call: compiles; one run);
  N, mesh ("explicit" or "auto"), median_s, times_s, runs, and ratio (to "jit_grad" at the
  same N). Target: eager_grad <= 3x jit_grad at N = 256 and 2048.

Explicit mesh axes: JAX's own eager ``jax.grad`` of ``jnp.sum`` of an Explicit-sharded array
needs the mesh set, so every case runs inside ``jax.set_mesh`` (README, Derivatives).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from _common import emit_timing, grid_shape, results_path, run_on_local_devices  # noqa: E402
from bench_autodiff import _median_time  # noqa: E402  (warm-up, then the median of runs)
from bench_potrs import _generator, _rhs  # noqa: E402  (shared generators)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 2048])
    p.add_argument("--mesh", choices=["explicit", "auto"], default="explicit")
    p.add_argument("--dtype", default="float64")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--out", default=str(results_path("eager_grad.jsonl")))
    return p.parse_args(argv)


def run(args):
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg

    jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(args.dtype)
    count = jax.device_count()
    shape = grid_shape(count)
    kind = AxisType.Explicit if args.mesh == "explicit" else AxisType.Auto
    mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(kind, kind))
    base = {
        "devices": count,
        "platform": jax.devices()[0].platform,
        "dtype": dtype.name,
        "mesh": args.mesh,
        "grid": list(shape),
        "jax": jax.__version__,
    }

    def loss(a, b):
        return jnp.sum(jaxmg.potrs(a, b))

    grad = jax.grad(loss, argnums=(0, 1))
    grad_b = jax.grad(loss, argnums=1)
    jitted = jax.jit(grad)

    with jax.set_mesh(mesh):
        for n in args.sizes:
            a = _generator(n, dtype, NamedSharding(mesh, P("x", "y")))()
            b = jax.device_put(_rhs(n, 0, dtype), NamedSharding(mesh, P("x")))
            jvp = lambda a=a, b=b: jax.jvp(lambda a, b: jaxmg.potrs(a, b), (a, b), (a, b))  # noqa: E731
            sized = dict(base, N=n, route=jaxmg.route("potrs", (n, n), dtype, mesh))

            start = time.perf_counter()
            jax.block_until_ready(grad(a, b))
            first = time.perf_counter() - start
            t_jit, times = _median_time(lambda a=a, b=b: jitted(a, b), args.runs)
            emit_timing(args.out, sized, t_jit, times, case="jit_grad")
            emit_timing(args.out, sized, first, [first], t_jit, case="first_eager_grad")
            eager = (("eager_grad", lambda a=a, b=b: grad(a, b)), ("eager_grad_b", lambda a=a, b=b: grad_b(a, b)))
            for case, fn in (*eager, ("eager_jvp", jvp)):
                t, times = _median_time(fn, args.runs)
                emit_timing(args.out, sized, t, times, t_jit, case=case)


def main(argv=None):
    run_on_local_devices(_args, run, argv)


if __name__ == "__main__":
    main()
