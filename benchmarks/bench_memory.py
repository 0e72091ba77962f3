"""Device memory of forward and backward passes: jaxmg against plain JAX, each case in a fresh process.

    python benchmarks/bench_memory.py                                   # every case, N = 16384 32768 65536
    python benchmarks/bench_memory.py --cases gp_vg potrs --sizes 32768 --dtypes float64
    python benchmarks/bench_memory.py --largest gp_vg potrs             # the largest N that runs

Each case runs twice, each time in a fresh process (a device's ``peak_bytes_in_use`` only
grows), on the first device, with XLA's pool allocated at start (JAX's default) and 94% of the
device (``XLA_PYTHON_CLIENT_PREALLOCATE`` and ``XLA_PYTHON_CLIENT_MEM_FRACTION``, unless set). The
first process compiles the case into a persistent compilation cache; the second loads it, so
that XLA's GEMM autotuner (whose operands can hold three N x N matrices) does not set its peak.
Each makes its inputs (one fused pass, which holds nothing but the matrix) and runs the case
once. The second's record is written, as one JSON line (``--out``): case, impl ("jaxmg" or
"jax"), N, dtype, input_bytes (what the case's inputs hold), peak_bytes (the device's peak,
inputs included; absent on CPUs, which do not report it), peak_matrices (peak over one N x N
matrix), beyond_input_matrices ((peak - inputs) over one matrix), compiled_peak_bytes (the first
process's peak, compilation included), first_run_s (the first process's first call), and
XLA's memory analysis of the compiled program (temp_bytes, output_bytes, temp_matrices) where the
case is one compiled call; or error (for example out of memory).

Cases (jaxmg's backend ``auto``; plain JAX's counterpart in the same run where there is one):

  potrs, lu_solve, cholesky, least_squares, syevd, gesvd: the forward pass (a (N, N), b (N,));
  potrs_grad, lu_solve_grad, cholesky_grad, least_squares_grad, syevd_grad, gesvd_grad: the
      jitted gradient of the sum of the outputs (eigen- and singular values) with respect to a;
  potrs_donated, lu_solve_donated, cholesky_donated: the eager forward pass with ``donate=True``
      (a is consumed: beyond_input_matrices is then what the call holds beyond its own input);
  cholesky_inverse, cholesky_inverse_donated, lu_inverse: ``Cholesky(a).inverse()`` (with
      ``donate=True``) and ``LU(a).inverse()``; plain JAX: ``jnp.linalg.inv``;
  gp_vg, gp_vg_eager: ``value_and_grad`` of the Gaussian-process loss of bench_gp.py, jitted and
      eager (inputs x (N, 3) and y (N,): the kernel matrix is built inside the loss);
  gp_vg_checkpoint: the same, jitted, with the kernel matrix under ``jax.checkpoint`` (the
      backward pass recomputes the kernel's intermediates instead of keeping them);
  numpy_inv_grad, numpy_slogdet_grad, numpy_eigh_grad, numpy_svd_grad: gradients through
      ``jaxmg.numpy.linalg`` against ``jax.numpy.linalg``.

``--largest CASE ...`` bisects, per case and implementation, on multiples of 4,096 between
``--low`` and ``--high``, for the largest N whose case runs (records with ``largest_n``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import case_record, child_record, emit, print_record, results_path  # noqa: E402

FORWARD = ("potrs", "lu_solve", "cholesky", "least_squares", "syevd", "gesvd")
DONATED = ("potrs_donated", "lu_solve_donated", "cholesky_donated")
CASES = (
    FORWARD
    + tuple(f"{op}_grad" for op in FORWARD)
    + DONATED
    + (
        "cholesky_inverse",
        "cholesky_inverse_donated",
        "lu_inverse",
        "gp_vg",
        "gp_vg_eager",
        "gp_vg_checkpoint",
        "numpy_inv_grad",
        "numpy_slogdet_grad",
        "numpy_eigh_grad",
        "numpy_svd_grad",
    )
)
ONLY_JAXMG = DONATED + ("cholesky_inverse_donated", "least_squares", "least_squares_grad")


def case_parser(doc, cases):
    """The arguments of a memory benchmark over ``cases``: --cases, --sizes, --dtypes, --impls."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=list(cases), choices=cases)
    p.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768, 65536])
    p.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    p.add_argument("--impls", nargs="+", default=["jax", "jaxmg"], choices=["jax", "jaxmg"])
    return p


def _args(argv=None):
    p = case_parser(__doc__, CASES)
    p.add_argument("--largest", nargs="*", default=None, choices=CASES)
    p.add_argument("--low", type=int, default=4096)
    p.add_argument("--high", type=int, default=98304)
    p.add_argument("--timeout", type=int, default=600, help="seconds for one case's process")
    p.add_argument("--out", default=str(results_path("memory.jsonl")))
    p.add_argument("--child", nargs=4, metavar=("CASE", "IMPL", "N", "DTYPE"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _operand_loss(case):
    """The scalar that a ``*_grad`` case differentiates, from one operation's outputs."""
    import jax.numpy as jnp

    def total(out):
        return sum(jnp.sum(jnp.real(x)) for x in (out if isinstance(out, tuple) else (out,)))

    return {"syevd": lambda out: jnp.sum(out[0]), "gesvd": lambda out: jnp.sum(out[1])}.get(case, total)


def _operation(op, impl):
    """(f(a, b), whether it takes b) for the forward case ``op`` of ``impl``."""
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    import jaxmg

    ours = {
        "potrs": (jaxmg.potrs, True),
        "lu_solve": (jaxmg.lu_solve, True),
        "cholesky": (jaxmg.cholesky, False),
        "least_squares": (jaxmg.least_squares, True),
        "syevd": (lambda a: jaxmg.syevd(a), False),
        "gesvd": (lambda a: jaxmg.gesvd(a, full_matrices=False), False),
    }
    theirs = {
        "potrs": (lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b), True),
        "lu_solve": (jnp.linalg.solve, True),
        "cholesky": (jnp.linalg.cholesky, False),
        "syevd": (lambda a: jnp.linalg.eigh(a)[::-1], False),
        "gesvd": (lambda a: jnp.linalg.svd(a, full_matrices=False), False),
    }
    return (ours if impl == "jaxmg" else theirs)[op]


def _gp(impl, checkpoint=False):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import bench_gp

    mesh = jax.make_mesh((1, 1), ("x", "y"), devices=jax.devices()[:1], axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharding = NamedSharding(mesh, P("x", None))
    return bench_gp, sharding, bench_gp.loss_fn(impl, sharding, "auto" if impl == "jaxmg" else None, checkpoint)


def _numpy(case, impl):
    import jax.numpy as jnp

    import jaxmg.numpy.linalg as mla

    linalg = mla if impl == "jaxmg" else jnp.linalg
    return {
        "numpy_inv_grad": lambda a: jnp.sum(linalg.inv(a)),
        "numpy_slogdet_grad": lambda a: linalg.slogdet(a)[1],
        "numpy_eigh_grad": lambda a: jnp.sum(linalg.eigh(a)[0]),
        "numpy_svd_grad": lambda a: jnp.sum(linalg.svd(a, compute_uv=False)),
    }[case]


def _matrix(n, dtype):
    """The symmetric positive-definite a_ij = 1 / (1 + |i - j|) + N delta_ij on the first device,
    made by one elementwise pass over two iotas, which XLA fuses into one loop writing the matrix:
    making it holds nothing but the matrix, so that the device's peak is the case's own."""
    import jax
    import jax.numpy as jnp

    def make():
        i = jax.lax.broadcasted_iota(jnp.int32, (n, n), 0)
        j = jax.lax.broadcasted_iota(jnp.int32, (n, n), 1)
        value = (1.0 / (1.0 + jnp.abs(i - j).astype(jnp.float32))).astype(dtype)
        return value + jnp.where(i == j, jnp.asarray(n, dtype), jnp.zeros((), dtype))

    return jax.jit(make, out_shardings=jax.sharding.SingleDeviceSharding(jax.devices()[0]))()


def matrix_case(case, impl):
    """(f, takes_b) of a case on a matrix ``a`` (and ``b`` where ``takes_b``), one compiled call:
    a forward pass, the gradient of its outputs' sum, an inverse or a numpy gradient."""
    import jax
    import jax.numpy as jnp

    import jaxmg

    if case.startswith("numpy_"):
        return jax.grad(_numpy(case, impl)), False
    if case in ("cholesky_inverse", "lu_inverse"):
        module = jaxmg.Cholesky if case == "cholesky_inverse" else jaxmg.LU
        return (jnp.linalg.inv if impl == "jax" else lambda m: module(m).inverse()), False
    op = case.removesuffix("_grad")
    f, takes_b = _operation(op, impl)
    if not case.endswith("_grad"):
        return f, takes_b
    loss = _operand_loss(op)
    return jax.grad(lambda m, *b: loss(f(m, *b))), takes_b


def build(case, impl, n, dtype):
    """(run, compiled or None, input_bytes): ``run()`` runs the case once and blocks."""
    import jax
    import jax.numpy as jnp

    import jaxmg

    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    item = jnp.dtype(dtype).itemsize
    if case.startswith("gp_vg"):
        bench_gp, sharding, loss = _gp(impl, checkpoint=case == "gp_vg_checkpoint")
        x, y, theta = bench_gp.make_problem(n, dtype, sharding)
        vg = jax.value_and_grad(loss)
        if case == "gp_vg_eager":
            return (lambda: jax.block_until_ready(vg(theta, x, y))), None, (4 * n + 3) * item
        fn = jax.jit(vg)
        return (lambda: jax.block_until_ready(fn(theta, x, y))), (fn, (theta, x, y)), (4 * n + 3) * item
    a = _matrix(n, dtype)
    b = jax.device_put(jnp.ones((n,), dtype), one)
    inputs = a.nbytes + b.nbytes
    if case in DONATED:  # eager calls that consume a: the inputs' bytes are the caller's no longer
        f, takes_b = _operation(case.removesuffix("_donated"), impl)
        return (lambda: jax.block_until_ready(f(a, b, donate=True) if takes_b else f(a, donate=True))), None, inputs
    if case == "cholesky_inverse_donated":
        fn = jax.jit(lambda m: jaxmg.Cholesky(m, donate=True).inverse(), donate_argnums=0)
        return (lambda: jax.block_until_ready(fn(a))), None, inputs
    call, takes_b = matrix_case(case, impl)
    fn, args = jax.jit(call), ((a, b) if takes_b else (a,))
    return (lambda: jax.block_until_ready(fn(*args))), (fn, args), inputs


def child(case, impl, n, dtype):
    """One case in this process: its record on stdout (``RECORD {...}``)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    device = jax.devices()[0]
    n = int(n)
    matrix = n * n * jax.numpy.dtype(dtype).itemsize
    rec = case_record("memory", case, impl, n, dtype, device.device_kind, platform=device.platform)
    try:
        run, compiled, inputs = build(case, impl, n, dtype)
        rec["input_bytes"] = int(inputs)
        if compiled is not None:
            fn, args = compiled
            analysis = fn.lower(*args).compile().memory_analysis()
            rec.update(
                temp_bytes=int(analysis.temp_size_in_bytes),
                output_bytes=int(analysis.output_size_in_bytes),
                temp_matrices=analysis.temp_size_in_bytes / matrix,
            )
        start = time.perf_counter()
        run()
        rec["first_run_s"] = time.perf_counter() - start
        peak = (device.memory_stats() or {}).get("peak_bytes_in_use")
        if peak is not None:
            rec.update(
                peak_bytes=int(peak), peak_matrices=peak / matrix, beyond_input_matrices=(peak - inputs) / matrix
            )
    except Exception as e:  # out of memory, an unsupported size: recorded, never hidden
        rec["error"] = f"{type(e).__name__}: {str(e)[:1000]}"
    print_record(rec)


def _run_child(args, case, impl, n, dtype, env) -> dict:
    command = [sys.executable, str(HERE), "--child", case, impl, str(n), dtype]
    base = dict(bench="memory", case=case, impl=impl, N=n, dtype=dtype)
    return child_record(command, base, env, args.timeout)


def measure(args, case, impl, n, dtype) -> dict:
    """Run one case in a fresh process and return its record.

    The case runs twice, each time in a fresh process sharing one persistent compilation cache:
    the first compiles (XLA's GEMM autotuner then holds operands of its own, up to three N x N
    matrices, which would set the device's peak), the second loads the compiled programs and
    runs: its record, and its peak, are the run's."""
    env = dict(os.environ)
    # JAX's default: one pool, allocated at start. Grown region by region instead, the pool
    # fragments: a 72 GiB buffer at N = 49,152 then finds no region although 130 GiB are free.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.94")  # JAX's default 0.75 would cap the largest N
    with tempfile.TemporaryDirectory(prefix="jaxmg-memory-cache-") as cache:
        env.update(
            JAX_COMPILATION_CACHE_DIR=cache,
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
        )
        first = _run_child(args, case, impl, n, dtype, env)
        if "error" in first:
            return first
        rec = _run_child(args, case, impl, n, dtype, env)
    rec["first_run_s"] = first.get("first_run_s")  # with compilation; the record's own run loads the program
    rec["compiled_peak_bytes"] = first.get("peak_bytes")  # the peak with compilation (autotuning) included
    return rec


def largest(args, case, impl, dtype) -> dict:
    """The largest multiple of 4,096 in [--low, --high] at which ``case`` runs (bisection)."""
    step = 4096
    low, high = args.low // step, args.high // step  # in steps; low assumed to run
    best, tried = None, []
    while low <= high:
        mid = (low + high) // 2
        rec = measure(args, case, impl, mid * step, dtype)
        tried.append([mid * step, rec.get("error", "ran")])
        if "error" in rec:
            high = mid - 1
        else:
            best, low = rec, mid + 1
    out = dict(best or {}, bench="memory_largest", case=case, impl=impl, dtype=dtype, tried=tried)
    out["largest_n"] = best["N"] if best else None
    return out


def main(argv=None):
    args = _args(argv)
    if args.child:
        child(*args.child)
        return
    pairs = [
        (c, i)
        for c in (args.largest if args.largest is not None else args.cases)
        for i in args.impls
        if not (i == "jax" and c in ONLY_JAXMG)
    ]
    for dtype in args.dtypes:
        for case, impl in pairs:
            if args.largest is not None:
                emit(args.out, largest(args, case, impl, dtype))
                continue
            for n in args.sizes:
                emit(args.out, measure(args, case, impl, n, dtype))


if __name__ == "__main__":
    main()
