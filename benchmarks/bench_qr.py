"""Benchmark jaxmg.qr and jaxmg.least_squares (native backend) on the visible GPUs of one process.

    python benchmarks/bench_qr.py --n 32768 --tile 1024 --out benchmarks/results/qr.jsonl

Two JSON lines per run: ``op`` "qr" (N x N, reduced Q and R: geqrf + orgqr) and "least_squares"
(M = 2N rows, one right-hand side: geqrf, Q^H b, back substitution; qr_apply says how Q^H b was
applied: "householder", from the reflectors in compact WY form), each with N, M, dtype, grid,
T_A, runs, median_s (of ``--runs`` timed calls after one warm-up call), times_s, first_call_s,
geqrf_ms (GPU time inside cuSOLVERMp's geqrf, from CUDA events in the handler, median),
handler_ms (the same for every native call kind of the operation: geqrf, orgqr; median), and the
relative residual of a check (||QR - A|| / ||A|| on a sample of rows for qr; the normal-equation
residual ||A^T (A x - b)|| / (||A||^2 ||x||) for least squares), or ``error``. Compare with the
engine's own geqrf (benchmarks/engine/engine_ops.sh "1 1 N N T geqrf") in the same run.
The matrix is generated on the GPUs: a_ij = 1 / (1 + |i - j|) + 2 delta_ij.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _common import results_path  # noqa: E402
from bench_potrs import _emit  # one JSON line, printed and appended to --out

ROOT = Path(__file__).resolve().parents[1]


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--tile", type=int, default=1024)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--ops", nargs="+", default=["qr", "least_squares"])
    p.add_argument("--out", default=str(results_path("qr.jsonl")))
    return p.parse_args(argv)


def main(argv=None):
    args = _args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg
    from jaxmg.kernels import native
    from jaxmg.kernels.ffi import _library

    devs = jax.devices()
    mesh = jax.make_mesh((len(devs),), ("x",), axis_types=(AxisType.Auto,), devices=devs)
    grid = (len(devs), 1)
    for op in args.ops:
        n = args.n
        m = n if op == "qr" else 2 * n
        rec = dict(op=op, N=n, M=m, dtype=args.dtype, grid=grid, T_A=args.tile, runs=args.runs, qr_apply="householder")
        try:

            @jax.jit
            def make(m=m, n=n):
                i = jax.lax.broadcasted_iota(jnp.int32, (m, n), 0)
                j = jax.lax.broadcasted_iota(jnp.int32, (m, n), 1)
                a = 1.0 / (1.0 + jnp.abs(i - j).astype(jnp.float32)) + 2.0 * (i == j)
                return jax.lax.with_sharding_constraint(a.astype(args.dtype), NamedSharding(mesh, P("x", None)))

            b = jnp.sin(jnp.arange(m, dtype=args.dtype))
            if op == "qr":
                fn = jax.jit(lambda a: jaxmg.qr(a, T_A=args.tile, mesh=mesh, backend="native"))
            else:
                fn = jax.jit(lambda a, b=b: jaxmg.least_squares(a, b, T_A=args.tile, mesh=mesh, backend="native"))
            times, geqrf, handlers = [], [], {}
            for k in range(args.runs + 1):
                a = make()
                a.block_until_ready()
                _library._native_module().reset_timings()
                t0 = time.perf_counter()
                out = jax.block_until_ready(fn(a))
                times.append(time.perf_counter() - t0)
                tm = [t for t in native.last_timings() if t["valid"] and t.get("kind") == "geqrf"]
                if tm and k:
                    geqrf.append(tm[0]["factor_ms"])
                for t in native.last_timings() if k else ():
                    if t["valid"]:
                        handlers.setdefault(t["kind"], []).append(t["solver_ms"])
            rec.update(
                first_call_s=times[0],
                times_s=times[1:],
                median_s=statistics.median(times[1:]),
                geqrf_ms=statistics.median(geqrf) if geqrf else None,
                handler_ms={kind: statistics.median(v) for kind, v in handlers.items()},
            )
            a = make()
            if op == "qr":  # on the GPUs: a sample of rows of QR - A
                q, r = out
                rec["residual"] = float(jnp.linalg.norm(q[:512] @ r - a[:512]) / jnp.linalg.norm(a[:512]))
            else:
                g = a.T @ (a @ out - b)
                rec["residual"] = float(jnp.linalg.norm(g) / (jnp.linalg.norm(a) ** 2 * jnp.linalg.norm(out)))
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {str(e)[:500]}"
        _emit(args.out, rec)


if __name__ == "__main__":
    main()
