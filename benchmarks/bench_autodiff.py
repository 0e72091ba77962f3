"""Benchmark derivatives, factor-once-solve-many and vmap against one forward potrs.

    python benchmarks/bench_autodiff.py --nproc 2 --n 32768 --vmap-n 16384      # GPUs
    python benchmarks/bench_autodiff.py --n 512 --vmap-n 256                     # 8 CPU devices

With ``--nproc P`` it re-runs itself under ``python -m jaxmg.launch -n P`` (one process per
GPU); without it, it runs in this process on all local devices (8 simulated CPU devices
when there is no GPU). The matrix is sharded by rows on a one-axis mesh of every device,
float64 by default, b of shape (N,). Everything is jitted; each case is timed as the median
of ``--runs`` runs after one warm-up, and written as a JSON line:

  case: "potrs" (forward), "grad" (jax.grad of sum(potrs(A, b)) w.r.t. A and b),
        "factor+8solves" (Cholesky(A) once, then 8 solves), "potrs@vmap-n" and
        "vmap4" (jax.vmap of potrs over 4 systems of size vmap-n);
  median_s, runs, and ratio (to "potrs" at the same N; "vmap4" to "potrs@vmap-n").

Targets (issue: nvidia-h200-x2, 2 processes, N = 32,768): grad <= 1.4x, factor+8solves <= 1.3x,
vmap4 <= 4.4x at N = 16,384.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from _common import results_path  # noqa: E402
from bench_potrs import _emit, _generator, _rhs  # noqa: E402  (shared generators and output)
from jaxmg.launch import simulate_cpu_devices_without_gpu  # noqa: E402  (imports no JAX backend)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--vmap-n", type=int, default=16384)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--solves", type=int, default=8)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--nproc", type=int, default=0, help="processes under jaxmg.launch (0: this process)")
    p.add_argument("--out", default=str(results_path("autodiff.jsonl")))
    p.add_argument("--timeout", type=int, default=1200)
    return p.parse_args(argv)


def _median_time(fn, runs):
    import jax

    jax.block_until_ready(fn())  # warm-up: compile, build the grid
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], times


def run(args):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxmg

    jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(args.dtype)
    mesh = jax.make_mesh((jax.device_count(),), ("x",))
    rows = NamedSharding(mesh, P("x", None))
    base = {
        "devices": jax.device_count(),
        "platform": jax.devices()[0].platform,
        "dtype": dtype.name,
        "jax": jax.__version__,
    }

    def emit(case, n, median, times, reference=None):
        record = dict(
            base,
            case=case,
            N=n,
            route=jaxmg.route("potrs", (n, n), dtype, mesh),
            median_s=median,
            times_s=times,
            runs=len(times),
        )
        if reference:
            record["ratio"] = median / reference
        if jax.process_index() == 0:
            _emit(args.out, record)

    with jax.set_mesh(mesh):
        n = args.n
        a = _generator(n, dtype, rows)()
        b = jax.device_put(_rhs(n, 0, dtype), NamedSharding(mesh, P("x")))
        bs = jax.device_put(
            jnp.stack([_rhs(n, 0, dtype) * (k + 1) for k in range(args.solves)]), NamedSharding(mesh, P(None, "x"))
        )

        forward = jax.jit(lambda a, b: jaxmg.potrs(a, b))
        t_fwd, times = _median_time(lambda: forward(a, b), args.runs)
        emit("potrs", n, t_fwd, times)

        grad = jax.jit(jax.grad(lambda a, b: jnp.sum(jaxmg.potrs(a, b)), argnums=(0, 1)))
        t, times = _median_time(lambda: grad(a, b), args.runs)
        emit("grad", n, t, times, t_fwd)

        @jax.jit
        def factor_and_solve(a, bs):
            chol = jaxmg.Cholesky(a)
            return [chol.solve(bs[k]) for k in range(args.solves)]

        t, times = _median_time(lambda: factor_and_solve(a, bs), args.runs)
        emit(f"factor+{args.solves}solves", n, t, times, t_fwd)

        nv = args.vmap_n
        av = _generator(nv, dtype, rows)()
        bv = jax.device_put(_rhs(nv, 0, dtype), NamedSharding(mesh, P("x")))
        t_one, times = _median_time(lambda: forward(av, bv), args.runs)
        emit("potrs@vmap-n", nv, t_one, times)
        batch = jax.jit(
            lambda a: jnp.stack([a * (1 + 0.01 * k) for k in range(args.batch)]),
            out_shardings=NamedSharding(mesh, P(None, "x", None)),
        )(av)
        bb = jax.device_put(jnp.stack([bv] * args.batch), NamedSharding(mesh, P(None, "x")))
        batched = jax.jit(jax.vmap(lambda a, b: jaxmg.potrs(a, b)))
        t, times = _median_time(lambda: batched(batch, bb), args.runs)
        emit(f"vmap{args.batch}", nv, t, times, t_one)


def main(argv=None):
    args = _args(argv)
    if args.nproc:
        worker = [
            str(HERE),
            "--n",
            str(args.n),
            "--vmap-n",
            str(args.vmap_n),
            "--batch",
            str(args.batch),
            "--solves",
            str(args.solves),
            "--dtype",
            args.dtype,
            "--runs",
            str(args.runs),
            "--out",
            args.out,
        ]
        launch = [sys.executable, "-m", "jaxmg.launch", "-n", str(args.nproc), "--timeout", str(args.timeout)]
        raise SystemExit(subprocess.call(launch + worker))
    simulate_cpu_devices_without_gpu()
    run(args)


if __name__ == "__main__":
    main()
