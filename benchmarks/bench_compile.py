"""What a first call costs: XLA's compile time of jaxmg's native operations, with and without
XLA's GEMM autotuning, and the run time each choice gives (one process, its visible GPUs).

    python benchmarks/bench_compile.py --n 16384 --levels 0 default --out benchmarks/results/compile.jsonl

For each autotune level (``default``: JAX's own setting; an integer: ``xla_gpu_autotune_level``
passed as a compiler option of that one compilation) and each operation, one JSON line: op, N,
level, compile_s (``jax.jit(f).lower(a).compile(...)``), first_run_s and second_run_s (the
compiled call, twice). potrs runs at 2N (its products are cuSOLVERMp's, so it has nothing to
autotune; it is the control). XLA keeps autotuning results in memory for the process's later
compilations, so levels are run in the order given: put ``0`` first.

Measured on one H200 (benchmarks/results/h200x1/2026-12-02/): polar at N = 16,384 compiles in
17.2 s with autotuning and 2.1 s without, and then runs in 4.28 s against 5.89 s; at 32,768,
gesvd compiles in 133 s with it and polar in 1.8 s without, running 28.9 s against 41.0 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from _common import emit, results_path  # noqa: E402

OPS = ("polar", "gesvd", "potrs")


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--tile", type=int, default=1024)
    p.add_argument(
        "--levels", nargs="+", default=["0", "default"], help="xla_gpu_autotune_level values, or 'default' (JAX's own)"
    )
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--out", default=str(results_path("compile.jsonl")))
    return p.parse_args(argv)


def main(argv=None):
    args = _args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

    import jaxmg
    from bench_eig import _matrix

    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, P("x", None))
    t = args.tile
    calls = {
        "polar": (args.n, lambda a: jaxmg.polar(a, T_A=t, mesh=mesh, backend="native")),
        "gesvd": (args.n, lambda a: jaxmg.gesvd(a, T_A=t, mesh=mesh, backend="native")),
        "potrs": (
            2 * args.n,
            lambda a: jaxmg.potrs(a, jnp.ones(a.shape[0], a.dtype), T_A=t, mesh=mesh, backend="native"),
        ),
    }
    for level in args.levels:
        options = {} if level == "default" else {"xla_gpu_autotune_level": int(level)}
        for op in args.ops:
            n, fn = calls[op]
            rec = dict(op=op, N=n, dtype="float64", grid=f"{len(jax.devices())}x1", T_A=t, level=level)
            try:
                a = _matrix(n, np.float64, sharding)
                t0 = time.perf_counter()
                compiled = jax.jit(fn).lower(a).compile(compiler_options=options)
                t1 = time.perf_counter()
                jax.block_until_ready(compiled(a))
                t2 = time.perf_counter()
                jax.block_until_ready(compiled(a))
                t3 = time.perf_counter()
                rec.update(compile_s=t1 - t0, first_run_s=t2 - t1, second_run_s=t3 - t2)
                del a, compiled
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            if jax.process_index() == 0:
                emit(args.out, rec)


if __name__ == "__main__":
    main()
