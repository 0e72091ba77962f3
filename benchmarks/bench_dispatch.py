"""The cost of an eager call: jaxmg's and JAX's own, side by side, per operation and placement.

    python benchmarks/bench_dispatch.py                          # N = 8 and 64, every case
    python benchmarks/bench_dispatch.py --sizes 64 --ops potrs numpy.solve --places device
    python benchmarks/bench_dispatch.py --sizes 8 64 512 --places device auto stack --ops 'Cholesky(a)' Cholesky.solve

Each case calls the operation eagerly (no ``jax.jit`` around it) on inputs made once, and its
JAX counterpart on the same inputs: after ``--warmup`` calls of each (which plan and compile),
``--rounds`` rounds each time ``--calls`` calls of jaxmg's, then as many of JAX's (interleaved,
so that both see the same load), each call waited for with ``jax.block_until_ready``; the
time per call is the median over the rounds. At small N the compiled program itself takes a
few microseconds, so the time is the Python that dispatches it.

Placements (``--places``): ``device`` (arrays on the default device, uncommitted: no mesh),
``auto`` and ``explicit`` (a (4, 2) mesh of 8 devices of Auto or Explicit axes, a sharded
``P('x', 'y')`` and b ``P('x')``), ``auto_set_mesh`` (the same inside ``jax.set_mesh``), and
``stack`` (a stack of 4 matrices on the default device: the numpy drop-ins, and the methods of
modules made under ``jax.vmap`` and used outside it, on one vector shared by the stack's
matrices). The modules (``Cholesky(a)``, ...) are made eagerly on every call; their methods
(``Cholesky.solve``, ...) run on a module made once, JAX's counterparts on JAX's factor made
once (``cho_factor``, ``lu_factor``, ``qr``). One JSON line per
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
    """op: (jaxmg's call, JAX's call), each of the case's :class:`Inputs`."""
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    import jaxmg
    import jaxmg.numpy.linalg as mla
    import jaxmg.scipy.linalg as msl

    def cho(a, b):
        return jsl.cho_solve(jsl.cho_factor(a, lower=True), b)

    return {
        "numpy.solve": (lambda x: mla.solve(x.a, x.b), lambda x: jnp.linalg.solve(x.a, x.b)),
        "numpy.inv": (lambda x: mla.inv(x.a), lambda x: jnp.linalg.inv(x.a)),
        "numpy.slogdet": (lambda x: mla.slogdet(x.a), lambda x: jnp.linalg.slogdet(x.a)),
        "numpy.cholesky": (lambda x: mla.cholesky(x.a), lambda x: jnp.linalg.cholesky(x.a)),
        "numpy.eigh": (lambda x: mla.eigh(x.a), lambda x: jnp.linalg.eigh(x.a)),
        "scipy.cho_solve": (
            lambda x: msl.cho_solve(msl.cho_factor(x.a, lower=True), x.b),
            lambda x: cho(x.a, x.b),
        ),
        "potrs": (lambda x: jaxmg.potrs(x.a, x.b), lambda x: cho(x.a, x.b)),
        "lu_solve": (lambda x: jaxmg.lu_solve(x.a, x.b), lambda x: jnp.linalg.solve(x.a, x.b)),
        "least_squares": (lambda x: jaxmg.least_squares(x.a, x.b), lambda x: jnp.linalg.lstsq(x.a, x.b)[0]),
        "syevd": (lambda x: jaxmg.syevd(x.a), lambda x: jnp.linalg.eigh(x.a)),
        "gesvd": (lambda x: jaxmg.gesvd(x.a), lambda x: jnp.linalg.svd(x.a)),
        "polar": (lambda x: jaxmg.polar(x.a), lambda x: jsl.polar(x.a)),
        # the modules: made eagerly, and their methods on a module made once (JAX's: on its factor)
        "Cholesky(a)": (lambda x: jaxmg.Cholesky(x.a), lambda x: jsl.cho_factor(x.a, lower=True)),
        "LU(a)": (lambda x: jaxmg.LU(x.a), lambda x: jsl.lu_factor(x.a)),
        "QR(a)": (lambda x: jaxmg.QR(x.a), lambda x: jnp.linalg.qr(x.a)),
        "Eigh(a)": (lambda x: jaxmg.Eigh(x.a), lambda x: jnp.linalg.eigh(x.a)),
        "SVD(a)": (lambda x: jaxmg.SVD(x.a), lambda x: jnp.linalg.svd(x.a, full_matrices=False)),
        "Polar(a)": (lambda x: jaxmg.Polar(x.a), lambda x: jsl.polar(x.a)),
        "Cholesky.solve": (lambda x: x.cholesky.solve(x.v), lambda x: jsl.cho_solve((x.cho, True), x.vs)),
        "Cholesky.logdet": (
            lambda x: x.cholesky.logdet(),
            lambda x: 2 * jnp.log(jnp.diagonal(x.cho, axis1=-2, axis2=-1)).sum(-1),
        ),
        "Cholesky.inverse": (lambda x: x.cholesky.inverse(), lambda x: jsl.cho_solve((x.cho, True), x.eyes)),
        "LU.solve": (lambda x: x.lu.solve(x.v), lambda x: jsl.lu_solve(x.lu_piv, x.vs)),
        "LU.slogdet": (lambda x: x.lu.slogdet(), lambda x: jnp.linalg.slogdet(x.a)),
        "LU.inverse": (lambda x: x.lu.inverse(), lambda x: jsl.lu_solve(x.lu_piv, x.eyes)),
        "QR.solve": (lambda x: x.qr.solve(x.v), lambda x: jsl.solve_triangular(x.q_r[1], x.q_r[0] @ x.vs)),
        "jax.jit(potrs)": (_jitted(lambda a, b: jaxmg.potrs(a, b)), _jitted(cho)),
    }


class Inputs:
    """A case's arguments: ``a`` (symmetric positive definite, or a stack of them) and ``b``; ``v``
    a vector (shared by a stack's matrices in jaxmg's module methods), ``vs`` and ``eyes`` that
    vector ((N,), or (K, N, 1) for a stack of K) and the identity for each matrix (JAX's side);
    jaxmg's modules of ``a`` (on a stack: made under ``jax.vmap``, used outside it) and JAX's
    factors of it (``cho_factor``'s lower factor, ``lu_factor``, ``qr``'s (Q^T, R)), each made on
    first use, outside the timed calls."""

    def __init__(self, a, b, v):
        import jax.numpy as jnp

        self.a, self.b, self.v = a, b, v
        self.vs = v if a.ndim == 2 else jnp.broadcast_to(v[:, None], (*a.shape[:-1], 1))
        self.eyes = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)

    def __getattr__(self, name: str):
        import jax
        import jax.numpy as jnp
        import jax.scipy.linalg as jsl

        import jaxmg

        makers = {
            "cholesky": jaxmg.Cholesky,
            "lu": jaxmg.LU,
            "qr": jaxmg.QR,
            "cho": lambda a: jsl.cho_factor(a, lower=True)[0],
            "lu_piv": jsl.lu_factor,
            "q_r": lambda a: (lambda q, r: (jnp.swapaxes(q, -1, -2), r))(*jnp.linalg.qr(a)),
        }
        if name not in makers:
            raise AttributeError(name)
        maker = makers[name] if self.a.ndim == 2 else jax.vmap(makers[name])
        self.__dict__[name] = maker(self.a)
        return self.__dict__[name]


def _jitted(fn):
    import jax

    compiled = jax.jit(fn)
    return lambda x: compiled(x.a, x.b)


STACK_OPS = ("numpy.solve", "numpy.inv", "numpy.slogdet", "numpy.cholesky", "numpy.eigh")
STACK_OPS += ("Cholesky.solve", "Cholesky.logdet", "Cholesky.inverse", "LU.solve", "LU.slogdet", "LU.inverse")
STACK_OPS += ("QR.solve",)


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
    """(:class:`Inputs`, context) for a placement: a symmetric positive-definite a and b, float64."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, n))
    a, b = jnp.asarray(g @ g.T / n + np.eye(n)), jnp.asarray(rng.standard_normal(n))
    if place == "device":
        return Inputs(a, b, b), contextlib.nullcontext()
    if place == "stack":
        stack = jnp.stack([a * (k + 1) for k in range(4)])
        return Inputs(stack, jnp.stack([b] * 4)[..., None], b), contextlib.nullcontext()
    types = AxisType.Explicit if place == "explicit" else AxisType.Auto
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(types,) * 2)
    a = jax.device_put(a, NamedSharding(mesh, P("x", "y")))
    b = jax.device_put(b, NamedSharding(mesh, P("x")))
    return Inputs(a, b, b), jax.set_mesh(mesh) if place == "auto_set_mesh" else contextlib.nullcontext()


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

    out = args.out or results_path("dispatch.jsonl")
    cases = _cases()
    for n in args.sizes:
        for place in args.places:
            inputs, context = _inputs(place, n)
            ops = [op for op in (args.ops or cases) if place != "stack" or op in STACK_OPS]
            with context:
                for op in ops:
                    mine, theirs = cases[op]
                    rec = dict(op=op, place=place, N=n)
                    calls = functools.partial(mine, inputs), functools.partial(theirs, inputs)
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
