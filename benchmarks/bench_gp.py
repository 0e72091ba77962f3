"""Gaussian-process loss and its gradient: jaxmg against plain JAX in the same run.

The loss is ``1/2 y^T K^-1 y + 1/2 log det K`` with an RBF kernel
``K_ij = s^2 exp(-|x_i - x_j|^2 / (2 l^2)) + e delta_ij`` built from 3-D inputs inside the
function; its gradient is taken with respect to ``(log l, log s, log e)``. jaxmg solves with
``jaxmg.potrs(k, y, return_logdet=True)`` (backends ``auto`` and ``native``), plain JAX with
``jax.scipy.linalg.cho_factor``/``cho_solve``. For each size, dtype and solver it records, as
JSON lines (``--out``): the jitted forward, the jitted ``value_and_grad`` (medians of ``--runs``
after a warm-up), the first call of the jitted ``value_and_grad`` (compile and run), the second
eager ``value_and_grad``, and the relative differences of the value and gradient from plain
JAX's. With ``--inverse`` it also times ``jaxmg.Cholesky(k).inverse()`` against the
factorisation alone.

One GPU::

    python benchmarks/bench_gp.py --sizes 8192 16384 32768 --dtypes float64 float32

Several GPUs (one process per GPU; K is sharded over all of them, plain JAX runs on one)::

    python -m jaxmg.launch -n 2 benchmarks/bench_gp.py --sizes 32768 65536 --solvers native
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _median_time(fn, runs):
    import jax

    jax.block_until_ready(fn())  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _timed_once(fn):
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t0


def make_problem(n, dtype, sharding, seed=0):
    """Inputs x (n, 3), targets y (n,) and the log-parameters theta, x and y in ``sharding``'s rows."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    key = jax.random.PRNGKey(seed)
    kx, ky = jax.random.split(key)
    rows = NamedSharding(sharding.mesh, P(sharding.spec[0]))
    x = jax.jit(lambda k: jax.random.uniform(k, (n, 3), dtype=dtype) * 10.0, out_shardings=rows)(kx)
    y = jax.jit(lambda k: jax.random.normal(k, (n,), dtype=dtype), out_shardings=rows)(ky)
    theta = jnp.asarray([0.0, 0.0, -2.0], dtype)  # log lengthscale, log signal, log noise
    return x, y, theta


def kernel_matrix(theta, x, sharding):
    """The RBF kernel matrix of the inputs x, laid out in ``sharding``."""
    import jax
    import jax.numpy as jnp

    ell, sig, noise = jnp.exp(theta[0]), jnp.exp(theta[1]), jnp.exp(theta[2])
    sq = jnp.sum(x * x, axis=1)
    d2 = jnp.maximum(sq[:, None] + sq[None, :] - 2 * jnp.matmul(x, x.T, precision="highest"), 0)
    k = sig**2 * jnp.exp(-d2 / (2 * ell**2)) + noise * jnp.eye(x.shape[0], dtype=x.dtype)
    return jax.lax.with_sharding_constraint(k, sharding)


def loss_fn(solver, sharding, backend=None, checkpoint=False):
    """The GP loss as a function of (theta, x, y), solved by ``solver`` ("jax" or "jaxmg");
    ``checkpoint``: the kernel matrix under ``jax.checkpoint``, so that the backward pass
    recomputes the kernel's intermediates from x instead of keeping them."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl

    import jaxmg

    kernel = jax.checkpoint(kernel_matrix, static_argnums=(2,)) if checkpoint else kernel_matrix

    def loss(theta, x, y):
        k = kernel(theta, x, sharding)
        if solver == "jax":
            c = jsl.cho_factor(k, lower=True)
            alpha = jsl.cho_solve(c, y)
            logdet = 2 * jnp.sum(jnp.log(jnp.diagonal(c[0])))
        else:
            alpha, logdet = jaxmg.potrs(k, y, return_logdet=True, backend=backend)
        return 0.5 * jnp.dot(y, alpha) + 0.5 * logdet

    return loss


def bench_loss(args, n, dtype, mesh, emit, out):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    sharding = NamedSharding(mesh, P("x", None))
    x, y, theta = make_problem(n, dtype, sharding)
    reference = None
    # plain JAX runs on one device of a single process (several processes: jaxmg only)
    plain = args.plain and jax.process_count() == 1
    for solver in (["jax"] if plain else []) + list(args.solvers):
        name = "plain JAX" if solver == "jax" else f"jaxmg {solver}"
        if solver == "jax" and jax.device_count() > 1:
            local = jax.sharding.SingleDeviceSharding(jax.devices()[0])
            xs, ys, sh = (
                jax.device_put(x, local),
                jax.device_put(y, local),
                NamedSharding(
                    jax.make_mesh(
                        (1, 1), ("x", "y"), devices=jax.devices()[:1], axis_types=(jax.sharding.AxisType.Auto,) * 2
                    ),
                    P(),
                ),
            )
        else:
            xs, ys, sh = x, y, sharding
        loss = loss_fn("jax" if solver == "jax" else "jaxmg", sh, None if solver == "jax" else solver)
        rec = dict(
            bench="gp",
            n=n,
            dtype=jnp.dtype(dtype).name,
            solver=name,
            devices=jax.device_count(),
            device_kind=jax.devices()[0].device_kind,
            date=time.strftime("%Y-%m-%d"),
        )
        try:
            vg = jax.jit(jax.value_and_grad(loss))
            (value, grad), rec["first_call_s"] = _timed_once(lambda vg=vg, xs=xs, ys=ys: vg(theta, xs, ys))
            rec["value_and_grad_s"] = _median_time(lambda vg=vg, xs=xs, ys=ys: vg(theta, xs, ys), args.runs)
            forward = jax.jit(loss)
            rec["forward_s"] = _median_time(lambda f=forward, xs=xs, ys=ys: f(theta, xs, ys), args.runs)
            rec["ratio_to_forward"] = rec["value_and_grad_s"] / rec["forward_s"]
            if args.eager:
                try:
                    eager = jax.value_and_grad(loss)
                    jax.block_until_ready(eager(theta, xs, ys))
                    _, rec["eager_value_and_grad_s"] = _timed_once(lambda f=eager, xs=xs, ys=ys: f(theta, xs, ys))
                except Exception as e:  # out of memory, for plain JAX at the largest sizes
                    rec["eager_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            if reference is None:
                reference = (value, grad)
            else:
                rec["value_rel_diff"] = float(abs(value - reference[0]) / abs(reference[0]))
                rec["grad_rel_diff"] = float(jnp.linalg.norm(grad - reference[1]) / jnp.linalg.norm(reference[1]))
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        emit(out, rec)
    return x


def bench_inverse(args, n, dtype, mesh, emit, out):
    """jaxmg.Cholesky(k).inverse() against the factorisation alone, and plain JAX's inverses."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jaxmg
    from _common import generator
    from jaxmg.kernels import triangular
    from jaxmg.kernels.ffi import gemm

    sharding = NamedSharding(mesh, P("x", None))
    a = generator(n, dtype, sharding)()
    default_base, default_trmm_base = triangular.BASE, triangular.TRMM_BASE
    default_leaves = (gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.HERK_LEAF)
    leaves_list = [tuple(int(v) for v in text.split(",")) for text in args.leaves] if args.leaves else [default_leaves]
    configs = [
        (b, k, t, leaves)
        for b in args.solvers
        for k in (args.bases or [default_base])
        for t in (args.trmm_bases or [default_trmm_base])
        for leaves in leaves_list
    ]
    for backend, base, trmm_base, leaves in configs:
        triangular.BASE, triangular.TRMM_BASE = base, trmm_base  # read when the functions below are traced
        gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.HERK_LEAF = leaves
        rec = dict(
            bench="inverse",
            n=n,
            dtype=jnp.dtype(dtype).name,
            solver=f"jaxmg {backend}",
            devices=jax.device_count(),
            device_kind=jax.devices()[0].device_kind,
            date=time.strftime("%Y-%m-%d"),
            base=base,
            trmm_base=trmm_base,
            one_gpu_leaves=list(leaves),
        )
        try:
            factor = jax.jit(lambda m, backend=backend: jaxmg.Cholesky(m, backend=backend).state)
            inverse = jax.jit(lambda m, backend=backend: jaxmg.Cholesky(m, backend=backend).inverse())
            rec["factor_s"] = _median_time(lambda f=factor: f(a), args.runs)
            rec["factor_and_inverse_s"] = _median_time(lambda f=inverse: f(a), args.runs)
            rec["inverse_s"] = rec["factor_and_inverse_s"] - rec["factor_s"]
            rec["inverse_over_factor"] = rec["inverse_s"] / rec["factor_s"]
            check = jax.jit(
                lambda m, w: (
                    jnp.linalg.norm(jnp.matmul(m, w, precision="highest") - jnp.eye(n, dtype=dtype)) / jnp.sqrt(n)
                )
            )
            rec["residual_rms"] = float(check(a, inverse(a)))
            lu_factor = jax.jit(lambda m, backend=backend: jaxmg.LU(m, backend=backend).lu)
            lu_inverse = jax.jit(lambda m, backend=backend: jaxmg.LU(m, backend=backend).inverse())
            rec["lu_factor_s"] = _median_time(lambda f=lu_factor: f(a), args.runs)
            rec["lu_inverse_s"] = _median_time(lambda f=lu_inverse: f(a), args.runs) - rec["lu_factor_s"]
            rec["lu_residual_rms"] = float(check(a, lu_inverse(a)))
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        emit(out, rec)
    triangular.BASE, triangular.TRMM_BASE = default_base, default_trmm_base
    gemm.INVERSE_LEAF, gemm.TRMM_LEAF, gemm.HERK_LEAF = default_leaves
    if jax.device_count() == 1 and args.plain:  # plain JAX's inverses: one device
        rec = dict(
            bench="inverse",
            n=n,
            dtype=jnp.dtype(dtype).name,
            solver="plain JAX",
            devices=1,
            device_kind=jax.devices()[0].device_kind,
            date=time.strftime("%Y-%m-%d"),
        )
        try:
            factor = jax.jit(lambda m: jsl.cho_factor(m)[0])
            solved = jax.jit(lambda m: jsl.cho_solve(jsl.cho_factor(m), jnp.eye(n, dtype=dtype)))
            inv = jax.jit(jnp.linalg.inv)
            rec["factor_s"] = _median_time(lambda f=factor: f(a), args.runs)
            rec["cho_solve_identity_s"] = _median_time(lambda: solved(a), args.runs) - rec["factor_s"]
            rec["jnp_linalg_inv_s"] = _median_time(lambda: inv(a), args.runs)
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        emit(out, rec)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 16384, 32768])
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument(
        "--solvers",
        nargs="+",
        default=["auto", "native"],
        help="jaxmg backends to run beside plain JAX (auto, native, portable)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-plain", dest="plain", action="store_false", help="skip plain JAX's loss")
    parser.add_argument("--no-eager", dest="eager", action="store_false", help="skip the eager value_and_grad")
    parser.add_argument("--no-loss", dest="loss", action="store_false", help="skip the GP loss")
    parser.add_argument("--inverse", action="store_true", help="also time Cholesky(k).inverse()")
    parser.add_argument(
        "--bases",
        type=int,
        nargs="+",
        default=None,
        help="with --inverse: the triangular recursion's base orders to time (default: the library's)",
    )
    parser.add_argument(
        "--trmm-bases",
        type=int,
        nargs="+",
        default=None,
        help="with --inverse: the triangular products' base orders to time (default: the library's)",
    )
    parser.add_argument(
        "--leaves",
        nargs="+",
        default=None,
        metavar="INVERSE,TRMM,HERK",
        help="with --inverse: leaf orders of the one-GPU inverse (jaxmg.kernels.ffi.gemm "
        "INVERSE_LEAF, TRMM_LEAF, HERK_LEAF) to time, e.g. 512,512,2048 (default: the library's)",
    )
    parser.add_argument("--out", default="benchmarks/results/gp.jsonl")
    args = parser.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.sharding import AxisType

    from _common import emit as emit_line

    def emit(out, rec):  # one record per run: the first process writes it
        if jax.process_index() == 0:
            emit_line(out, rec)

    mesh = jax.make_mesh((jax.device_count(), 1), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    for dtype_name in args.dtypes:
        dtype = jnp.dtype(dtype_name)
        for n in args.sizes:
            if args.loss:
                bench_loss(args, n, dtype, mesh, emit, args.out)
            if args.inverse:
                bench_inverse(args, n, dtype, mesh, emit, args.out)


if __name__ == "__main__":
    main()
