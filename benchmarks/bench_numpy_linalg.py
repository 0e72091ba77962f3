"""Benchmark jaxmg.numpy.linalg against jax.numpy.linalg, in the same run.

    python benchmarks/bench_numpy_linalg.py                     # N = 16384 on GPUs, 256 on CPU
    python benchmarks/bench_numpy_linalg.py --sizes 8192 16384 --functions solve inv

On a mesh of every local device ((count/2, 2), or (1, 1) on one GPU; 8 simulated CPU devices
when there is no GPU), ``a`` (N x N, diagonally dominant, made already sharded ``P('x', 'y')``)
and ``b`` (N,), each function is timed as the median of ``--runs`` runs after one warm-up
(which compiles), in ``jax.jit``, for jaxmg.numpy.linalg (``impl: "jaxmg"``) and for plain
``jax.numpy.linalg`` on one device (``impl: "jax"``, a's copy on the first device). One JSON
line per function, implementation and N:

  function: solve, inv, slogdet, slogdet_grad (jax.grad of logabsdet), eigh (of (a + a^T)/2),
            svd (U, S, Vh), lstsq (square a), cholesky, det, qr (reduced), qr_r (mode="r": R alone), pinv, eigvalsh,
            svdvals; of jax.scipy.linalg (against jaxmg.scipy.linalg): scipy.cho_solve
            (cho_solve(cho_factor(a), b)), scipy.lu_solve (lu_solve(lu_factor(a), b)),
            scipy.solve_pos (solve(a, b, assume_a="pos")), scipy.eigh_b (the generalized
            problem a v = w b v, b = I + a/N),
            scipy.polar;
  impl, N, median_s, times_s, runs, devices, platform, dtype, grid, jax; for "jaxmg" also
  ratio (jaxmg's median over JAX's, when JAX ran: < 1 is faster).

A function whose JAX run fails (e.g. out of memory on one device) is recorded with
``error`` instead of timings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from _common import emit_timing, grid_shape, run_on_local_devices  # noqa: E402
from bench_autodiff import _median_time  # noqa: E402  (warm-up, then the median of runs)
from bench_potrs import _emit, _generator, _rhs  # noqa: E402  (shared generators and output)

NUMPY_FUNCTIONS = (
    "solve",
    "inv",
    "slogdet",
    "slogdet_grad",
    "eigh",
    "svd",
    "lstsq",
    "cholesky",
    "det",
    "qr",
    "qr_r",
    "pinv",
    "eigvalsh",
    "svdvals",
)
SCIPY_FUNCTIONS = ("scipy.cho_solve", "scipy.lu_solve", "scipy.solve_pos", "scipy.eigh_b", "scipy.polar")
FUNCTIONS = NUMPY_FUNCTIONS + SCIPY_FUNCTIONS


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="matrix sizes N (default: 16384 on GPUs, 256 on CPU)"
    )
    p.add_argument("--functions", nargs="+", choices=FUNCTIONS, default=list(FUNCTIONS))
    p.add_argument("--dtype", default="float64")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--skip-jax", action="store_true", help="time jaxmg only")
    p.add_argument("--out", default=str(HERE.parent / "results" / "numpy_linalg.jsonl"))
    return p.parse_args(argv)


def _cases(la):
    """function name -> f(a, b), written against a jax.numpy.linalg-like module ``la``."""
    import jax

    return {
        "solve": lambda a, b: la.solve(a, b),
        "inv": lambda a, b: la.inv(a),
        "slogdet": lambda a, b: la.slogdet(a),
        "slogdet_grad": lambda a, b: jax.grad(lambda x: la.slogdet(x)[1])(a),
        "eigh": lambda a, b: la.eigh(a),  # symmetrize_input: (a + a^T)/2
        "svd": lambda a, b: la.svd(a),
        "lstsq": lambda a, b: la.lstsq(a, b)[0],
        "cholesky": lambda a, b: la.cholesky(a),
        "det": lambda a, b: la.det(a),
        "qr": lambda a, b: la.qr(a),
        "qr_r": lambda a, b: la.qr(a, mode="r"),
        "pinv": lambda a, b: la.pinv(a),
        "eigvalsh": lambda a, b: la.eigvalsh(a),
        "svdvals": lambda a, b: la.svdvals(a),
    }


def _scipy_cases(sla):
    """function name -> f(a, b), written against a jax.scipy.linalg-like module ``sla``."""
    return {
        "scipy.cho_solve": lambda a, b: sla.cho_solve(sla.cho_factor(a), b),
        "scipy.lu_solve": lambda a, b: sla.lu_solve(sla.lu_factor(a), b),
        "scipy.solve_pos": lambda a, b: sla.solve(a, b, assume_a="pos"),
        "scipy.eigh_b": lambda a, b: sla.eigh(a, _definite_partner(a)),
        "scipy.polar": lambda a, b: sla.polar(a),
    }


def _definite_partner(a):
    """b = I + a/N for the generalized eigenproblem: positive definite for the benchmark's a."""
    import jax.numpy as jnp

    n = a.shape[0]
    return a / n + jnp.eye(n, dtype=a.dtype)


def run(args):
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsla
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P, SingleDeviceSharding

    import jaxmg.numpy.linalg as mla
    import jaxmg.scipy.linalg as msla

    jax.config.update("jax_enable_x64", True)
    dtype = jnp.dtype(args.dtype)
    count = jax.device_count()
    platform = jax.devices()[0].platform
    sizes = args.sizes or ([16384] if platform == "gpu" else [256])
    shape = grid_shape(count)
    mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    base = {"devices": count, "platform": platform, "dtype": dtype.name, "grid": list(shape), "jax": jax.__version__}
    ours, theirs = _cases(mla) | _scipy_cases(msla), _cases(jnp.linalg) | _scipy_cases(jsla)

    for n in sizes:
        with jax.set_mesh(mesh):
            a = _generator(n, dtype, NamedSharding(mesh, P("x", "y")))()
            b = jax.device_put(_rhs(n, 0, dtype), NamedSharding(mesh, P()))
        one = jax.devices()[0]
        for name in args.functions:
            reference = None
            if not args.skip_jax:
                try:
                    a1 = _generator(n, dtype, SingleDeviceSharding(one))()  # the same matrix, on one device
                    b1 = jax.device_put(_rhs(n, 0, dtype), one)
                    fn = jax.jit(theirs[name])
                    reference, times = _median_time(lambda fn=fn, a1=a1, b1=b1: fn(a1, b1), args.runs)
                    del a1, b1
                    emit_timing(args.out, base, reference, times, function=name, impl="jax", N=n)
                except Exception as err:  # noqa: BLE001 (recorded: e.g. out of memory on one device)
                    reference = None
                    if jax.process_index() == 0:
                        _emit(
                            args.out,
                            dict(base, function=name, impl="jax", N=n, error=f"{type(err).__name__}: {err}"[:300]),
                        )
            with jax.set_mesh(mesh):
                fn = jax.jit(ours[name])
                median, times = _median_time(lambda fn=fn, a=a, b=b: fn(a, b), args.runs)
            emit_timing(args.out, base, median, times, reference, function=name, impl="jaxmg", N=n)


def main(argv=None):
    run_on_local_devices(_args, run, argv)


if __name__ == "__main__":
    main()
