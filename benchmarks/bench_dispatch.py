"""The cost of an eager call: jaxmg's and JAX's own, side by side, per operation and placement.

    python benchmarks/bench_dispatch.py                          # N = 8 and 64, every case
    python benchmarks/bench_dispatch.py --sizes 64 --ops potrs numpy.solve --places device

Each case calls the operation eagerly (no ``jax.jit`` around it) on inputs made once, and its
JAX counterpart on the same inputs: after ``--warmup`` calls of each (which plan and compile),
``--rounds`` rounds each time ``--calls`` calls of jaxmg's, then as many of JAX's (interleaved,
so that both see the same load), each call waited for with ``jax.block_until_ready``; the
time per call is the median over the rounds. At small N the compiled program itself takes a
few microseconds, so the time is the Python that dispatches it.

Placements (``--places``): ``device`` (arrays on the default device, uncommitted: no mesh),
``auto`` and ``explicit`` (a (4, 2) mesh of 8 devices of Auto or Explicit axes, a sharded
``P('x', 'y')`` and b ``P('x')``), ``auto_set_mesh`` (the same inside ``jax.set_mesh``), and
``stack`` (the numpy drop-ins on a stack of 4 matrices on the default device). One JSON line per
case: op, place, N, jaxmg_s and jax_s (seconds per call), ratio (jaxmg's over JAX's), calls,
rounds, devices, platform, jax, date; ``error`` where a side could not run (JAX's own functions
refuse some layouts on Explicit axes).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from _common import emit, results_path, run_on_local_devices  # noqa: E402

PLACES = ("device", "auto", "explicit", "auto_set_mesh", "stack")


def _cases() -> dict:
    """op: (jaxmg's call, JAX's call), each of (a, b, module) (module: jaxmg's Cholesky of a)."""
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    import jaxmg
    import jaxmg.numpy.linalg as mla
    import jaxmg.scipy.linalg as msl

    def cho(a, b):
        return jsl.cho_solve(jsl.cho_factor(a, lower=True), b)

    return {
        "numpy.solve": (lambda a, b, m: mla.solve(a, b), lambda a, b, m: jnp.linalg.solve(a, b)),
        "numpy.inv": (lambda a, b, m: mla.inv(a), lambda a, b, m: jnp.linalg.inv(a)),
        "numpy.slogdet": (lambda a, b, m: mla.slogdet(a), lambda a, b, m: jnp.linalg.slogdet(a)),
        "numpy.cholesky": (lambda a, b, m: mla.cholesky(a), lambda a, b, m: jnp.linalg.cholesky(a)),
        "numpy.eigh": (lambda a, b, m: mla.eigh(a), lambda a, b, m: jnp.linalg.eigh(a)),
        "scipy.cho_solve": (
            lambda a, b, m: msl.cho_solve(msl.cho_factor(a, lower=True), b),
            lambda a, b, m: cho(a, b),
        ),
        "potrs": (lambda a, b, m: jaxmg.potrs(a, b), lambda a, b, m: cho(a, b)),
        "lu_solve": (lambda a, b, m: jaxmg.lu_solve(a, b), lambda a, b, m: jnp.linalg.solve(a, b)),
        "least_squares": (lambda a, b, m: jaxmg.least_squares(a, b), lambda a, b, m: jnp.linalg.lstsq(a, b)[0]),
        "syevd": (lambda a, b, m: jaxmg.syevd(a), lambda a, b, m: jnp.linalg.eigh(a)),
        "gesvd": (lambda a, b, m: jaxmg.gesvd(a), lambda a, b, m: jnp.linalg.svd(a)),
        "polar": (lambda a, b, m: jaxmg.polar(a), lambda a, b, m: jsl.polar(a)),
        "Cholesky(a)": (lambda a, b, m: jaxmg.Cholesky(a).status, lambda a, b, m: jsl.cho_factor(a, lower=True)[0]),
        "Cholesky.solve": (lambda a, b, m: m.solve(b), lambda a, b, m: jsl.cho_solve((a, True), b)),
        "Cholesky.logdet": (lambda a, b, m: m.logdet(), lambda a, b, m: jnp.linalg.slogdet(a)[1]),
        "jax.jit(potrs)": (_jitted(lambda a, b: jaxmg.potrs(a, b)), _jitted(cho)),
    }


def _jitted(fn):
    import jax

    compiled = jax.jit(fn)
    return lambda a, b, m: compiled(a, b)


STACK_OPS = ("numpy.solve", "numpy.inv", "numpy.slogdet", "numpy.cholesky", "numpy.eigh")


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64])
    p.add_argument("--ops", nargs="+", default=None, help="operations (default: every one)")
    p.add_argument("--places", nargs="+", default=list(PLACES), choices=PLACES)
    p.add_argument("--calls", type=int, default=20, help="calls per round")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="JSON lines (default: benchmarks/results/MACHINE/DATE/)")
    return p.parse_args(argv)


def _inputs(place: str, n: int):
    """(a, b, context) for a placement: a symmetric positive-definite a and b, float64."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, n))
    a, b = jnp.asarray(g @ g.T / n + np.eye(n)), jnp.asarray(rng.standard_normal(n))
    if place == "device":
        return a, b, contextlib.nullcontext()
    if place == "stack":
        return jnp.stack([a * (k + 1) for k in range(4)]), jnp.stack([b] * 4)[..., None], contextlib.nullcontext()
    types = AxisType.Explicit if place == "explicit" else AxisType.Auto
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(types,) * 2)
    a = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(b, NamedSharding(mesh, P("x")))
    return a, b, jax.set_mesh(mesh) if place == "auto_set_mesh" else contextlib.nullcontext()


def _per_call(fn, calls: int) -> float:
    import jax

    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(fn())
    return (time.perf_counter() - start) / calls


def measure(mine, theirs, args) -> dict:
    """Seconds per call of each side: the median over interleaved rounds (:data:`__doc__`)."""
    sides = {"jaxmg": mine, "jax": theirs}
    found: dict = {}
    for name, fn in sides.items():
        try:
            for _ in range(args.warmup):
                _per_call(fn, 1)
        except Exception as err:  # noqa: BLE001  (recorded: JAX refuses some layouts)
            found[f"{name}_error"] = f"{type(err).__name__}: {str(err)[:300]}"
    times: dict = {name: [] for name in sides if f"{name}_error" not in found}
    for _ in range(args.rounds):
        for name in times:
            times[name].append(_per_call(sides[name], args.calls))
    for name, values in times.items():
        found[f"{name}_s"] = statistics.median(values)
    if "jaxmg_s" in found and "jax_s" in found:
        found["ratio"] = found["jaxmg_s"] / found["jax_s"]
    return found


def run(args) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jaxmg

    out = args.out or results_path("dispatch.jsonl")
    cases = _cases()
    for n in args.sizes:
        for place in args.places:
            a, b, context = _inputs(place, n)
            ops = [op for op in (args.ops or cases) if place != "stack" or op in STACK_OPS]
            with context:
                module = jaxmg.Cholesky(a) if place != "stack" else None
                for op in ops:
                    mine, theirs = cases[op]
                    rec = dict(op=op, place=place, N=n)
                    calls = functools.partial(mine, a, b, module), functools.partial(theirs, a, b, module)
                    rec.update(measure(*calls, args))
                    rec.update(
                        calls=args.calls,
                        rounds=args.rounds,
                        devices=jax.device_count(),
                        platform=jax.devices()[0].platform,
                        jax=jax.__version__,
                        date=time.strftime("%Y-%m-%d"),
                    )
                    emit(out, rec)


def main(argv=None) -> None:
    run_on_local_devices(_args, run, argv)


if __name__ == "__main__":
    main()
