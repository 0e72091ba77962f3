"""The cost of the distributed route's result check (jaxmg.modules.check) relative to the call.

    python benchmarks/bench_check.py --sizes 16384 32768 --out benchmarks/results/check.jsonl
    python benchmarks/bench_check.py --sizes 32768 --ops syevd --runs 1 --warmup 1   # ~45 s a call

Runs in this process on one device: a 1 x 1 grid, ``backend="native"`` on an NVIDIA GPU (the
distributed route, where the check runs), ``"portable"`` elsewhere (8 simulated CPU devices:
the smoke run, where the call itself is not checked). For each operation (potrs, lu_solve,
least_squares, syevd) and N, one JSON line: op, N, dtype, backend, runs, the medians of
``--runs`` jitted calls as users make them (the check on: the default) and with ``check=False``,
taken in turn after a warm-up (checked_ms, unchecked_ms; overhead = checked / unchecked - 1), and
the check alone (check_ms: the same products of ``jaxmg.modules.check`` with the matrix and
tests on the call's outputs, jitted by themselves; ratio = check_ms / unchecked_ms), the route,
and test_ratios (each test's residual / (N eps bound), flagged above 30), or ``error``. Inputs
are not donated. The matrix is generated on the device: a_ij = s_ij / (1 + |i - j|) +
N delta_ij (symmetric positive definite for potrs and syevd, not symmetric otherwise); b is a
vector.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import emit, generator, results_path, run_on_local_devices  # noqa: E402

OPS = ("potrs", "lu_solve", "least_squares", "syevd")


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768])
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2, help="untimed calls of each before the timed ones")
    p.add_argument("--tile", type=int, default=None, help="T_A (default: jaxmg's choice)")
    p.add_argument("--out", default=str(results_path("check.jsonl")))
    return p.parse_args(argv)


def _operation(op: str, kw: dict):
    """(the call of ``op`` on (a, b) with keyword ``check``, the module whose plan it runs, the
    check's products with ``a`` and tests on (plan, a, b, outputs))."""
    import jaxmg
    from jaxmg.modules import check as c

    calls = {
        "potrs": (
            lambda a, b, check: jaxmg.potrs(a, b, check=check, **kw),
            jaxmg.Cholesky,
            lambda plan, a, b, x: c.solution(plan, c.solution_probes(c.hermitian(plan, a)), x, b),
        ),
        "lu_solve": (
            lambda a, b, check: jaxmg.lu_solve(a, b, check=check, **kw),
            jaxmg.LU,
            lambda plan, a, b, x: c.solution(plan, c.solution_probes(c.general(plan, a)), x, b),
        ),
        "least_squares": (
            lambda a, b, check: jaxmg.least_squares(a, b, check=check, **kw),
            jaxmg.QR,
            lambda plan, a, b, x: c.least_squares(plan, c.normal_probes(c.general(plan, a)), x, b),
        ),
        # the check reads only the plan's layout: a Cholesky factorisation's (seconds cheaper)
        "syevd": (
            lambda a, b, check: jaxmg.syevd(a, check=check, **kw),
            jaxmg.Cholesky,
            lambda plan, a, b, wv: c.eigenvectors(plan, c.factorisation_probes(c.hermitian(plan, a)), *wv),
        ),
    }
    return calls[op]


def _timed(fn, *args) -> float:
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def _measure(op: str, n: int, a, b, mesh, backend: str, runs: int, warmup: int, tile) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    kw = dict(mesh=mesh, backend=backend, T_A=tile)
    call, module, tests = _operation(op, kw)
    checked = jax.jit(lambda a, b: call(a, b, None))  # the default: checked on the distributed route
    unchecked = jax.jit(lambda a, b: call(a, b, False))
    plan = module(a, **kw).plan
    check_alone = jax.jit(lambda a, b, out: [r / s for r, s in tests(plan, a, b, out)])
    out = unchecked(a, b)
    for _ in range(max(warmup, 1)):  # compile and warm up
        for fn, args in ((checked, (a, b)), (unchecked, (a, b)), (check_alone, (a, b, out))):
            _timed(fn, *args)
    times = {"checked": [], "unchecked": [], "check": []}
    for _ in range(runs):
        times["checked"].append(_timed(checked, a, b))
        times["unchecked"].append(_timed(unchecked, a, b))
        times["check"].append(_timed(check_alone, a, b, out))
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    eps = float(jnp.finfo(plan.dtype).eps)
    ratios = [float(r) / (n * eps) for r in check_alone(a, b, out)]  # flagged above THRESHOLD
    return dict(
        checked_ms=med["checked"],
        unchecked_ms=med["unchecked"],
        check_ms=med["check"],
        overhead=med["checked"] / med["unchecked"] - 1,
        ratio=med["check"] / med["unchecked"],
        times_ms={k: [t * 1e3 for t in v] for k, v in times.items()},
        route=plan.route,
        test_ratios=ratios,
    )


def run(args) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    mesh = jax.make_mesh((1, 1), ("r", "c"), devices=jax.devices()[:1])
    backend = "native" if jax.default_backend() == "gpu" else "portable"
    dtype = jnp.dtype(args.dtype)
    for n in args.sizes:
        for op in args.ops:
            sharding = NamedSharding(mesh, P("r", "c"))
            a = generator(n, dtype, sharding, lower=1.0 if op in ("potrs", "syevd") else 2.0)()
            b = jax.device_put(
                jnp.sin(jnp.arange(n, dtype=jnp.float32) * 0.01).astype(dtype) + 1, NamedSharding(mesh, P())
            )
            rec = dict(
                kind="jaxmg-check",
                op=op,
                N=n,
                dtype=str(dtype),
                backend=backend,
                grid=[1, 1],
                devices=1,
                runs=args.runs,
            )
            try:
                with jax.set_mesh(mesh):
                    rec.update(_measure(op, n, a, b, mesh, backend, args.runs, args.warmup, args.tile))
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{type(e).__name__}: {str(e)[:800]}"
            del a, b
            emit(args.out, rec)


def main(argv=None):
    run_on_local_devices(_args, run, argv)


if __name__ == "__main__":
    main()
