"""Stacks of matrices under jax.vmap: jaxmg against JAX's own functions in the same run.

    python benchmarks/bench_batch.py                                  # 8 simulated CPU devices
    python benchmarks/bench_batch.py --layout unsharded --batch 1024  # one GPU
    python benchmarks/bench_batch.py --ops potrs --stack-n 32768 --stack 4

For a stack of ``--batch`` symmetric positive-definite matrices of order ``--n`` (float64) it
times, in ``jax.jit`` (median of ``--runs`` runs after one warm-up), each op of ``--ops``:

  potrs: ``jax.vmap(jaxmg.potrs)`` against ``jax.vmap`` of JAX's ``cho_solve(cho_factor(.))``;
  eigh:  ``jaxmg.numpy.linalg.eigh`` against ``jnp.linalg.eigh``;
  svd:   ``jaxmg.numpy.linalg.svd`` against ``jnp.linalg.svd``.

``--layout batch`` shards the stack over every local device on its batch axis (``P(("x",
"y"))`` on a mesh of Auto axes); ``unsharded`` keeps it on the first device. One JSON line
per op and implementation: op, impl ("jax"/"jaxmg"), N, batch, layout, route (jaxmg's, from
``jaxmg.route``), median_s, times_s, runs, ratio (jaxmg's median over JAX's), residual, and
whether the compiled program moves data between devices (``collectives``).

``--stack-n N`` adds, per op of ``--ops`` that has a distributed route (potrs), a stack of
``--stack`` matrices of order N on the native backend (one cuSOLVERMp call after another)
beside one call: their times and the memory of the compiled programs (XLA's memory analysis:
temporaries, arguments and outputs, in bytes and in N x N matrices), and on a GPU the device's
peak after each (``peak_bytes_in_use``; the stack is run first).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import emit_timing, generator, grid_shape, results_path, run_on_local_devices  # noqa: E402
from bench_autodiff import _median_time  # noqa: E402  (warm-up, then the median of runs)

COLLECTIVES = re.compile(r"all-gather|all-to-all|all-reduce|collective-permute|reduce-scatter")


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", nargs="+", default=["potrs", "eigh", "svd"], choices=["potrs", "eigh", "svd"])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--layout", choices=["batch", "unsharded"], default="batch")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--stack-n", type=int, default=None, help="order of the matrices of the distributed stack")
    p.add_argument("--stack", type=int, default=4, help="how many matrices the distributed stack holds")
    p.add_argument("--out", default=str(results_path("batch.jsonl")))
    return p.parse_args(argv)


def _functions():
    """op -> (jaxmg's batched function, JAX's, residual(a, b, out)) over a stack a (B, N, N), b (B, N)."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    import jaxmg
    import jaxmg.numpy.linalg as mla

    def solve_residual(a, b, x):
        return jnp.max(jnp.abs(jnp.einsum("bij,bj->bi", a, x) - b)) / jnp.max(jnp.abs(b))

    def eigh_residual(a, b, out):
        w, v = out
        return jnp.max(jnp.abs(a @ v - v * w[:, None, :])) / jnp.max(jnp.abs(a))

    def svd_residual(a, b, out):
        u, s, vh = out
        return jnp.max(jnp.abs((u * s[:, None, :]) @ vh - a)) / jnp.max(jnp.abs(a))

    return {
        "potrs": (jax.vmap(jaxmg.potrs), jax.vmap(lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b)), solve_residual),
        "eigh": (lambda a, b: mla.eigh(a), lambda a, b: jnp.linalg.eigh(a), eigh_residual),
        "svd": (
            lambda a, b: mla.svd(a, full_matrices=False),
            lambda a, b: jnp.linalg.svd(a, full_matrices=False),
            svd_residual,
        ),
    }


def _stack(args, sharding):
    import jax
    import jax.numpy as jnp

    key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
    n, batch = args.n, args.batch

    def make(ka, kb):
        g = jax.random.normal(ka, (batch, n, n), jnp.float64) / jnp.sqrt(n)
        a = g @ jnp.swapaxes(g, -1, -2) + jnp.eye(n, dtype=jnp.float64)
        return a, jax.random.normal(kb, (batch, n), jnp.float64)

    return jax.jit(make, out_shardings=(sharding, sharding))(key_a, key_b)


def _collectives(fn, *args) -> bool:
    return bool(COLLECTIVES.search(fn.lower(*args).compile().as_text()))


def run_stacks(args, base):
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg

    count = jax.device_count()
    if args.layout == "batch":
        mesh = jax.make_mesh(grid_shape(count), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
        sharding = NamedSharding(mesh, P(("x", "y")))
        if args.batch % count:
            raise SystemExit(f"--batch: {args.batch} is not a multiple of the {count} devices")
    else:
        mesh, sharding = None, jax.sharding.SingleDeviceSharding(jax.devices()[0])
    a, b = _stack(args, sharding)
    for op in args.ops:
        ours, theirs, residual = _functions()[op]
        route = jaxmg.route(op, (args.n, args.n), "float64", mesh, stacked=args.batch)
        reference = None
        for impl, fn in (("jax", jax.jit(theirs)), ("jaxmg", jax.jit(ours))):
            median, times = _median_time(lambda fn=fn: fn(a, b), args.runs)
            emit_timing(
                args.out,
                base,
                median,
                times,
                reference,
                op=op,
                impl=impl,
                N=args.n,
                batch=args.batch,
                layout=args.layout,
                route=route if impl == "jaxmg" else None,
                residual=float(residual(a, b, fn(a, b))),
                collectives=_collectives(fn, a, b),
            )
            reference = median


def _memory(fn, *args) -> dict:
    stats = fn.lower(*args).compile().memory_analysis()
    return {
        "temp_bytes": int(stats.temp_size_in_bytes),
        "argument_bytes": int(stats.argument_size_in_bytes),
        "output_bytes": int(stats.output_size_in_bytes),
    }


def _peak_bytes():
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def run_distributed_stack(args, base):
    """A stack of ``--stack`` matrices of order ``--stack-n`` on the native backend beside one call."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg

    n, count = args.stack_n, jax.device_count()
    mesh = jax.make_mesh(grid_shape(count), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    matrix = NamedSharding(mesh, P("x", "y"))
    one = generator(n, jnp.float64, matrix)()
    b = jnp.ones((n,), jnp.float64)
    stack = jax.jit(lambda m: jnp.stack([m] * args.stack), out_shardings=NamedSharding(mesh, P(None, "x", "y")))(one)
    matrix_bytes = n * n * 8
    solve = lambda m, r: jaxmg.potrs(m, r, backend="native")  # noqa: E731
    cases = (("stack", jax.jit(jax.vmap(solve, in_axes=(0, None))), stack), ("one", jax.jit(solve), one))
    for case, fn, operand in cases:  # the stack first: the device's peak is then its own
        median, times = _median_time(lambda fn=fn, operand=operand: fn(operand, b), args.runs)
        memory = _memory(fn, operand, b)
        emit_timing(
            args.out,
            base,
            median,
            times,
            op="potrs",
            impl="jaxmg",
            case=case,
            N=n,
            batch=args.stack if case == "stack" else 1,
            layout="distributed",
            route="distributed",
            peak_bytes=_peak_bytes(),
            **memory,
            temp_matrices=memory["temp_bytes"] / matrix_bytes,
        )


def run(args):
    import jax

    jax.config.update("jax_enable_x64", True)
    count = jax.device_count()
    base = {
        "devices": count,
        "platform": jax.devices()[0].platform,
        "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__,
    }
    if args.stack_n:
        run_distributed_stack(args, base)
    else:
        run_stacks(args, base)


def main(argv=None):
    run_on_local_devices(_args, run, argv)


if __name__ == "__main__":
    main()
