"""The crossovers that ``backend="auto"`` reads (jaxmg/_crossover.py): each operation on the
native and the portable backend, and plain JAX on one device, side by side in one process.

    python benchmarks/bench_crossover.py --ops potrs qr least_squares --sizes 8192 16384 32768

One JSON line per (operation, N): ``op``, ``N``, ``M`` (rows: 2N for least_squares, else N),
``dtype``, ``devices``, and ``<path>_ms`` (median of ``--runs`` timed calls after one warm-up
call, jitted) for the paths ``native``, ``portable`` and, where JAX has the operation,
``plain_jax`` (jax.scipy cho_factor + cho_solve for potrs, jnp.linalg.qr for qr); a path that
fails gets ``<path>_error``. The matrix is a_ij = 1 / (1 + |i - j|) + 2 delta_ij (symmetric
positive definite), replicated on the process's first device. Run on one GPU (the results
of 2026-12-01, benchmarks/results/h200x1/2026-12-01/*-crossover.txt, were measured with these
same calls) or, under ``jaxmg.launch``, on several.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, results_path  # noqa: E402

OPS = ("potrs", "qr", "least_squares", "lu_solve", "syevd")


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", nargs="+", default=["potrs", "qr", "least_squares"], choices=OPS)
    p.add_argument("--sizes", nargs="+", type=int, default=[2048, 4096, 8192, 16384])
    p.add_argument("--dtype", default="float64")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default=str(results_path("crossover.jsonl")))
    return p.parse_args(argv)


def _median_ms(fn, *args, runs):
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 3)


def _paths(op):
    """{path: function of the operation's arguments} for ``op``."""
    import jax
    import jax.numpy as jnp

    import jaxmg

    def jaxmg_path(backend):
        call = getattr(jaxmg, op)
        return jax.jit(lambda *x: call(*x, backend=backend))

    paths = {"native": jaxmg_path("native"), "portable": jaxmg_path("portable")}
    if op == "potrs":
        paths["plain_jax"] = jax.jit(
            lambda a, b: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a, lower=True), b)
        )
    elif op == "qr":
        paths["plain_jax"] = jax.jit(jnp.linalg.qr)
    elif op == "lu_solve":
        paths["plain_jax"] = jax.jit(jnp.linalg.solve)
    elif op == "syevd":
        paths["plain_jax"] = jax.jit(jnp.linalg.eigh)
    return paths


def _arguments(op, n, dtype):
    import jax.numpy as jnp

    a = jnp.fromfunction(lambda i, j: 1.0 / (1.0 + jnp.abs(i - j)) + 2.0 * (i == j), (n, n), dtype=dtype)
    if op == "least_squares":
        return (jnp.concatenate([a, 0.5 * a + 1.0]), jnp.ones((2 * n,), dtype))
    if op in ("qr", "syevd"):
        return (a,)
    return (a, jnp.ones((n, 1), dtype))


def main(argv=None):
    args = _args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    for n in args.sizes:
        for op in args.ops:
            operands = _arguments(op, n, args.dtype)
            rec = {"op": op, "N": n, "M": operands[0].shape[0], "dtype": args.dtype, "devices": jax.device_count()}
            for path, fn in _paths(op).items():
                try:
                    rec[f"{path}_ms"] = _median_ms(fn, *operands, runs=args.runs)
                except Exception as e:  # noqa: BLE001 (a path that cannot run here is recorded)
                    rec[f"{path}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            emit(args.out, rec)
            del operands


if __name__ == "__main__":
    main()
