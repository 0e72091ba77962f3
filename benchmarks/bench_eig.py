"""Benchmark jaxmg.syevd, jaxmg.polar and jaxmg.gesvd (native backend) and JAX on one GPU.

    python benchmarks/bench_eig.py --sizes 8192 --tiles 256 512 1024 --out benchmarks/results/eig.jsonl
    python scripts/gpu/launch.py -n 2 benchmarks/bench_eig.py --sizes 16384   # 2 processes: a 2 x 1 grid
    python benchmarks/bench_eig.py --ops polar gesvd --sizes 8192 --tiles 512   # QDWH polar, polar + syevd

Every process runs this file (one GPU each; jax.distributed is initialised by the launcher when
there are several). Each (op, N, T_A) writes one JSON line from process 0: op ("syevd", "polar", "gesvd",
or JAX's own on one GPU: "jnp.linalg.eigh", "jnp.linalg.svd"), N, dtype, grid, T_A, runs, median_s (of ``--runs``
timed calls after one warm-up call), times_s, syevd_ms (GPU time inside cuSOLVERMp from the handler's CUDA events,
median), and the scaled residual ``||A V - V diag(w)||_1 / (||A||_1 N eps)`` at N <= 8192, or
``error``. With ``--conds``, polar also runs once per condition number on Q1 diag(s) Q2^T
(op "polar-accuracy": seconds, orthogonality, backward_error). Compare with the engine's own syevd from C++
(benchmarks/engine/engine_ops.sh "one 1 1 N T syevd"; scripts/gpu/steps.sh step eigengine) in the same run: its
matrix is 1/(1+|i-j|) + N on the diagonal, the one generated here.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from pathlib import Path

from _common import results_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[8192])
    p.add_argument("--tiles", type=int, nargs="+", default=[256, 512, 1024])
    p.add_argument("--ops", nargs="+", default=["syevd"], choices=["syevd", "polar", "gesvd"])
    p.add_argument("--dtype", default="float64")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-jnp", action="store_true", help="skip jnp.linalg.eigh on one GPU")
    p.add_argument(
        "--conds",
        type=float,
        nargs="*",
        default=[],
        help="polar's accuracy: also run polar on matrices with singular values geometric "
        "from 1 to 1/cond, and report ||U^H U - I||_F/sqrt(N) and ||A - U H||_F/||A||_F",
    )
    p.add_argument("--out", default=str(results_path("eig.jsonl")))
    p.add_argument(
        "--profile",
        default=None,
        help="trace one more (untimed) call of each jaxmg case with jax.profiler into this folder "
        "(a Perfetto trace per case; summarize it with benchmarks/trace_summary.py)",
    )
    return p.parse_args(argv)


def _emit(out, rec):
    import jax

    if jax.process_index() != 0:
        return
    line = json.dumps(rec)
    print("RESULT " + line, flush=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as f:
        f.write(line + "\n")


def _matrix(n, dtype, sharding):
    """1/(1+|i-j|) + N delta_ij, generated sharded on the GPUs."""
    import jax
    import jax.numpy as jnp

    def make():
        i = jax.lax.broadcasted_iota(jnp.int32, (n, n), 0)
        j = jax.lax.broadcasted_iota(jnp.int32, (n, n), 1)
        a = 1.0 / (1.0 + jnp.abs(i - j).astype(dtype))
        return (a + jnp.where(i == j, n, 0)).astype(dtype)

    return jax.jit(make, out_shardings=sharding)()


def _conditioned(n, cond, dtype, sharding, seed=0):
    """Q1 diag(s) Q2^T with Q1, Q2 the Q factors of Gaussian matrices and s geometric from 1 to
    1/cond: an (n, n) matrix of 2-norm condition number ``cond``, generated on the GPUs."""
    import jax
    import jax.numpy as jnp

    def make():
        k1, k2 = jax.random.split(jax.random.key(seed))
        q1 = jnp.linalg.qr(jax.random.normal(k1, (n, n), dtype))[0]
        q2 = jnp.linalg.qr(jax.random.normal(k2, (n, n), dtype))[0]
        s = jnp.geomspace(1.0, 1.0 / cond, n).astype(dtype)
        return (q1 * s) @ q2.T

    return jax.jit(make, out_shardings=sharding)()


def _polar_errors(a, u, h):
    """(||U^H U - I||_F / sqrt(N), ||A - U H||_F / ||A||_F), computed on the GPUs."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def errors(a, u, h):
        n = a.shape[1]
        gram = jnp.conj(u).T @ u - jnp.eye(n, dtype=u.dtype)
        return (jnp.linalg.norm(gram) / jnp.sqrt(n), jnp.linalg.norm(a - u @ h) / jnp.linalg.norm(a))

    return tuple(float(x) for x in errors(a, u, h))


def _timed(fn, runs):
    import jax

    jax.block_until_ready(fn())  # warm-up (compilation, communicator, workspaces)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return times


def _traced(fn, folder):
    """One more call of ``fn``, traced by jax.profiler into ``folder`` (Perfetto JSON)."""
    import jax

    jax.profiler.start_trace(folder, create_perfetto_trace=True)
    try:
        jax.block_until_ready(fn())
    finally:
        jax.profiler.stop_trace()


def _residual(a, w, v, dtype):
    import numpy as np

    a, w, v = (np.asarray(x, np.float64) for x in (a, w, v))
    n = a.shape[0]
    return float(np.linalg.norm(a @ v - v * w, 1) / (np.linalg.norm(a, 1) * n * np.finfo(dtype).eps))


def _polar_accuracy(fn, n, cond, dtype, sharding, grid, tile):
    """One polar call on a matrix of condition number ``cond``: its time, QDWH's accuracy."""
    import jax

    rec = dict(op="polar-accuracy", N=n, dtype=dtype.name, grid=grid, T_A=tile, cond=cond)
    try:
        a = _conditioned(n, cond, dtype, sharding)
        t0 = time.perf_counter()
        u, h = jax.block_until_ready(fn(a))
        rec["seconds"] = time.perf_counter() - t0
        rec["orthogonality"], rec["backward_error"] = _polar_errors(a, u, h)
        del u, h, a
    except Exception as e:  # noqa: BLE001
        rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
    return rec


def main(argv=None):
    args = _args(argv)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

    import jaxmg
    from jaxmg.kernels import native
    from jaxmg.kernels.ffi import _library

    jax.config.update("jax_enable_x64", True)
    dtype = np.dtype(args.dtype)
    devs = jax.devices()
    mesh = Mesh(np.array(devs), ("x",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, P("x", None))
    grid = f"{len(devs)}x1"
    calls = {
        "syevd": lambda a, t: jaxmg.syevd(a, T_A=t, mesh=mesh, backend="native"),
        "polar": lambda a, t: jaxmg.polar(a, T_A=t, mesh=mesh, backend="native"),
        "gesvd": lambda a, t: jaxmg.gesvd(a, T_A=t, mesh=mesh, backend="native"),
    }
    reference = {
        "syevd": ("jnp.linalg.eigh", jnp.linalg.eigh),
        "polar": ("jnp.linalg.svd", lambda a: jnp.linalg.svd(a, full_matrices=False)),
        "gesvd": ("jnp.linalg.svd", lambda a: jnp.linalg.svd(a, full_matrices=False)),
    }
    for n in args.sizes:
        a = _matrix(n, dtype, sharding)
        for op in args.ops:
            for tile in args.tiles:
                rec = dict(op=op, N=n, dtype=dtype.name, grid=grid, T_A=tile, runs=args.runs)
                try:
                    fn = jax.jit(functools.partial(calls[op], t=tile))
                    _library._native_module().reset_timings()
                    times = _timed(lambda fn=fn, a=a: fn(a), args.runs)
                    solver = [
                        t["solver_ms"] / max(t["calls"], 1) for t in native.last_timings() if t["kind"] == "syevd"
                    ]
                    rec.update(
                        median_s=statistics.median(times),
                        times_s=times,
                        syevd_ms=statistics.median(solver) if solver else None,
                    )
                    if args.profile:
                        _traced(lambda fn=fn, a=a: fn(a), os.path.join(args.profile, f"{op}-n{n}-t{tile}"))
                    if op == "syevd" and n <= 8192 and jax.process_count() == 1:
                        w, v = fn(a)
                        rec["residual"] = _residual(a, w, v, dtype)
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                _emit(args.out, rec)
                if op == "polar":
                    for cond in args.conds:
                        _emit(args.out, _polar_accuracy(fn, n, cond, dtype, sharding, grid, tile))
            if not args.no_jnp and jax.process_count() == 1:
                name, ref = reference[op]
                rec = dict(op=name, N=n, dtype=dtype.name, grid="1 GPU", runs=args.runs)
                try:
                    one = jax.device_put(a, devs[0])
                    fn = jax.jit(ref)
                    times = _timed(lambda fn=fn, one=one: fn(one), args.runs)
                    rec.update(median_s=statistics.median(times), times_s=times)
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                _emit(args.out, rec)


if __name__ == "__main__":
    main()
