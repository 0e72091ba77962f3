"""Eigenvalues, eigenvectors, SVD and polar: jaxmg beside ``jax.numpy.linalg``, one matrix and stacks.

    python benchmarks/bench_eigen.py                                     # every case, size and stack
    python benchmarks/bench_eigen.py --cases svd polar --sizes --stacks 512x256 1024x256:float64
    python benchmarks/bench_eigen.py --cases eigvalsh eigh --sizes 8192 16384 --stacks --dtypes float64
    python benchmarks/bench_eigen.py --sizes 64 --stacks 8x48 --runs 2   # tiny, on CPU
    python benchmarks/bench_eigen.py --cases eigvalsh eigh --impls jax jaxmg.two_stage --sizes 8192 16384 \
        --stacks --bands 32 64 128                                       # the two-stage solver's stages

Cases, each with jaxmg's function as users call it (``jaxmg.numpy.linalg`` and
``jaxmg.scipy.linalg``, backend ``auto``) and JAX's counterpart in the same run:

  eigvalsh, eigh: ``la.eigvalsh(a)``, ``la.eigh(a)`` (a Hermitian);
  sygvd: ``jaxmg.scipy.linalg.eigh(a, b)`` (b Hermitian positive definite); JAX's
      ``jax.scipy.linalg.eigh(a, b)`` where this JAX has it, else the record says why;
  svd, svdvals: ``la.svd(a, full_matrices=False)``, ``la.svdvals(a)``;
  polar: ``jaxmg.scipy.linalg.polar(a)``; JAX's twice: through ``jnp.linalg.svd`` (impl "jax":
      U V^H and V S V^H) and ``jax.scipy.linalg.polar`` (impl "jax.scipy").
  eigvalsh also with impl "jaxmg.two_stage": ``jaxmg.kernels.two_stage.eigvalsh(a, band)`` for
      every ``--bands`` width (which ``auto`` does not run), with the time of stage 1 (dense ->
      band: ``stage1_s``), of stages 2 and 3 (band -> tridiagonal -> eigenvalues: ``stage23_s``),
      and ``value_error``: the largest |w - w_jax| / (N eps max |w_jax|) against
      ``jnp.linalg.eigvalsh`` in the same process.
  eigh also with impl "jaxmg.two_stage": ``jaxmg.kernels.two_stage.eigh(a, band)`` per band, with
      the time of stage 1 (``stage1_s``, its reflectors kept), stage 2 (bulge chasing, its
      reflectors kept: ``stage2_s``), stage 3 (the tridiagonal's eigenvectors: ``stage3_s``) and
      the back-transformation Q1 (Q2 Z) (``backtransform_s``), and ``value_error``.

Problems: one N x N matrix per ``--sizes`` entry and ``--dtypes`` dtype, and stacks
``COUNTxORDER[:DTYPE]`` (``--stacks``; without a dtype, one stack per ``--dtypes`` entry) of
independent matrices, called on the whole stack (``jaxmg.numpy.linalg`` maps over leading axes
with ``jax.vmap``: the batch route). Inputs are made on the device (Gaussian entries; symmetrised
for the eigenproblems).

Each (case, impl, problem) runs in its own process (``--timeout`` seconds; an out-of-memory error or
a time-out is recorded and the run goes on): it compiles and times the first call
(``first_call_s``), then ``--runs`` calls (``median_s``, ``times_s``). One JSON line per record
(``--out``, default benchmarks/results/MACHINE/DATE/eigen.jsonl): bench, case, impl, N, count (0 for
one matrix), dtype, device_kind, platform, jax, first_call_s, median_s, times_s, runs, per_matrix_s
(stacks), band, stage1_s, stage23_s (eigvalsh) or stage2_s, stage3_s, backtransform_s (eigh) and
value_error (jaxmg.two_stage), orthogonality and backward_error (svd and polar: the largest over
the problem's matrices of ||U^H U - I||_F / (N eps) and ||A - U S V^H||_F / (||A||_F N eps),
LAPACK's ratios, which its tests hold to 30), orthogonality and residual (eigh, every impl:
||V^H V - I||_F / (N eps) and ||A V - V diag(w)||_F / (||A||_F N eps)), ratio (over
JAX's time for the same case and problem, on jaxmg's and "jax.scipy"'s records, where JAX's ran), or
error.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import case_record, child_record, emit, print_record, results_path, worker_env  # noqa: E402

CASES = ("eigvalsh", "eigh", "sygvd", "svd", "svdvals", "polar")
IMPLS = ("jax", "jaxmg", "jax.scipy", "jaxmg.two_stage")
STACKS = (
    "512x32:float32",
    "512x64:float32",
    "512x128:float32",
    "512x256:float32",
    "512x512:float32",
    "1024x256:float64",
)


def _args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="\n".join(__doc__.splitlines()[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--sizes", type=int, nargs="*", default=[8192, 16384, 32768], help="orders of one matrix")
    p.add_argument("--stacks", nargs="*", default=list(STACKS), help="COUNTxORDER[:DTYPE] stacks")
    p.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument(
        "--bands",
        type=int,
        nargs="+",
        default=[32, 64, 128],
        help="half-bandwidths of jaxmg.two_stage (eigvalsh, eigh)",
    )
    p.add_argument("--runs", type=int, default=5, help="timed calls after the first (median reported)")
    p.add_argument("--timeout", type=int, default=600, help="seconds for one case's process")
    p.add_argument("--out", default=str(results_path("eigen.jsonl")))
    p.add_argument("--child", nargs=5, metavar=("CASE", "IMPL", "COUNT", "N", "DTYPE"), help=argparse.SUPPRESS)
    p.add_argument("--band", type=int, default=64, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def problems(args) -> list[tuple[int, int, str]]:
    """(count, N, dtype) of every problem: one matrix (count 0) per size and dtype, then the stacks."""
    out = [(0, n, d) for d in args.dtypes for n in args.sizes]
    for stack in args.stacks:
        shape, _, dtype = stack.partition(":")
        count, n = (int(v) for v in shape.lower().split("x"))
        out += [(count, n, d) for d in ([dtype] if dtype else args.dtypes)]
    return out


def _functions(case: str, impl: str, band: int = 64):
    """(f, needs_b) for one case and implementation, or raise ValueError where it has none."""
    import jax
    import jax.numpy as jnp

    if impl == "jaxmg.two_stage" and case in ("eigvalsh", "eigh"):
        from jaxmg.kernels import two_stage

        return (lambda a: getattr(two_stage, case)(a, band)), False
    if impl == "jaxmg":
        import jaxmg.numpy.linalg as la
        import jaxmg.scipy.linalg as sla

        table = {
            "eigvalsh": la.eigvalsh,
            "eigh": la.eigh,
            "sygvd": sla.eigh,
            "svdvals": la.svdvals,
            "svd": lambda a: la.svd(a, full_matrices=False),
            "polar": sla.polar,
        }
    elif impl == "jax":

        def polar_by_svd(a):
            u, s, vh = jnp.linalg.svd(a, full_matrices=False)
            vh_h = jnp.conj(jnp.swapaxes(vh, -1, -2))
            return u @ vh, (vh_h * s[..., None, :].astype(a.dtype)) @ vh

        table = {
            "eigvalsh": jnp.linalg.eigvalsh,
            "eigh": jnp.linalg.eigh,
            "sygvd": jax.scipy.linalg.eigh,
            "svdvals": jnp.linalg.svdvals,
            "svd": lambda a: jnp.linalg.svd(a, full_matrices=False),
            "polar": polar_by_svd,
        }
    elif case == "polar" and impl == "jax.scipy":
        return jax.scipy.linalg.polar, False
    else:
        raise ValueError(f"{impl} has no {case}")
    return table[case], case == "sygvd"


def _inputs(count: int, n: int, dtype: str, case: str):
    """The problem's matrices made on the device: a (Hermitian for the eigenproblems), and b for sygvd."""
    import jax
    import jax.numpy as jnp

    shape = (count, n, n) if count else (n, n)

    def make(key):
        k1, k2 = jax.random.split(key)
        a = jax.random.normal(k1, shape, dtype)
        g = jax.random.normal(k2, shape, dtype)
        if case in ("eigvalsh", "eigh", "sygvd"):
            a = (a + jnp.swapaxes(a, -1, -2)) / 2
        b = g @ jnp.swapaxes(g, -1, -2) / n + jnp.eye(n, dtype=dtype)
        return a, b

    return jax.jit(make)(jax.random.key(0))


def _accuracy(case: str, a, out, dtype: str) -> dict:
    """The largest over the problem's matrices of LAPACK's ratios (Frobenius norms, in float64):
    orthogonality ||U^H U - I|| / (N eps) and backward error ||A - U S V^H|| / (||A|| N eps) (svd;
    U_p and U_p H for polar); for eigh, ||V^H V - I|| / (N eps) and the residual
    ||A V - V diag(w)|| / (||A|| N eps)."""
    import jax
    import jax.numpy as jnp

    def ratios(a, out):
        a = a.astype(jnp.promote_types(a.dtype, jnp.float64))
        out = [x.astype(a.dtype) for x in out]
        if case == "eigh":
            u = out[1]
            error = a @ u - u * out[0][..., None, :]
        else:
            u = out[0]
            error = a - ((u * out[1][..., None, :]) @ out[2] if case == "svd" else u @ out[1])
        n = a.shape[-1]
        eps = float(jnp.finfo(dtype).eps)
        gram = jnp.conj(jnp.swapaxes(u, -1, -2)) @ u - jnp.eye(u.shape[-1], dtype=a.dtype)
        fro = lambda x: jnp.sqrt(jnp.sum(jnp.abs(x) ** 2, axis=(-2, -1)))  # noqa: E731
        return jnp.max(fro(gram)) / (n * eps), jnp.max(fro(error) / fro(a)) / (n * eps)

    orth, error = jax.jit(ratios)(a, tuple(out))
    return {"orthogonality": float(orth), ("residual" if case == "eigh" else "backward_error"): float(error)}


def _timed(call, args, runs: int) -> tuple[float, list]:
    """The first call's time (compilation included) and ``runs`` further calls' times, in s."""
    import jax

    start = time.perf_counter()
    jax.block_until_ready(call(*args))
    first = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(call(*args))
        times.append(time.perf_counter() - start)
    return first, times


def _median_time(f, args, runs: int) -> float:
    return statistics.median(_timed(f, args, runs)[1])


def _two_stage_parts(case: str, call, a, band: int, dtype: str, runs: int) -> dict:
    """jaxmg.two_stage's stages timed on their own (eigvalsh: stage 1, then stages 2 and 3 on its
    band; eigh: :func:`_two_stage_vector_parts`), and the eigenvalues of ``call`` (the whole,
    compiled)'s distance to ``jnp.linalg.eigvalsh``'s."""
    import jax
    import jax.numpy as jnp

    from jaxmg.kernels import two_stage

    if case == "eigh":
        out = _two_stage_vector_parts(a, band, runs)
        w = call(a)[0]
    else:

        def stage1(m):
            return two_stage.lower_band(two_stage.reduce_to_band(m, band), band)

        stage1 = jax.jit(jnp.vectorize(stage1, signature="(n,n)->(k,n)"))
        out = {
            "band": band,
            "stage1_s": _median_time(stage1, (a,), runs),
            "stage23_s": _median_time(jax.jit(two_stage.band_eigvalsh), (stage1(a),), runs),
        }
        w = call(a)
    ref = jax.jit(jnp.linalg.eigvalsh)(a)
    scale = jnp.max(jnp.abs(ref)) * a.shape[-1] * float(jnp.finfo(dtype).eps)
    out["value_error"] = float(jnp.max(jnp.abs(w - ref)) / scale)
    return out


def _two_stage_vector_parts(a, band: int, runs: int) -> dict:
    """two_stage.eigh's stages timed on their own, each on the previous one's outputs: stage 1
    with its reflectors, stage 2 with its reflectors, stage 3's eigenvectors, and the
    back-transformation Q1 (Q2 Z)."""
    import jax
    import jax.numpy as jnp

    from jaxmg.kernels import two_stage

    def stage1(m):
        b_mat, ys, ts = two_stage.reduce_to_band(m, band, reflectors=True)
        return two_stage.lower_band(b_mat, band), ys, ts

    def stage2(ab):
        return two_stage.band_to_tridiagonal(ab, reflectors=True)

    parts = [
        (stage1, "(n,n)->(k,n),(p,n,b),(p,b,b)"),
        (stage2, "(k,n)->(n),(m),(s,t,b),(s,t)"),
        (two_stage.back_transform, "(p,n,b),(p,b,b),(s,t,b),(s,t),(n,n)->(n,n)"),
    ]
    stage1, stage2, back = (jax.jit(jnp.vectorize(f, signature=sig)) for f, sig in parts)
    stage3 = jax.jit(two_stage.tridiagonal_eigh)  # a stack in one call
    ab, ys, ts = stage1(a)
    d, e, v, tau = stage2(ab)
    z = stage3(d, e)[1]
    return {
        "band": band,
        "stage1_s": _median_time(stage1, (a,), runs),
        "stage2_s": _median_time(stage2, (ab,), runs),
        "stage3_s": _median_time(stage3, (d, e), runs),
        "backtransform_s": _median_time(back, (ys, ts, v, tau, z), runs),
    }


def child(case: str, impl: str, count: str, n: str, dtype: str, runs: int, band: int = 64) -> None:
    """One (case, impl, problem) in this process: its record on stdout (``RECORD {...}``)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    device = jax.devices()[0]
    count, n = int(count), int(n)
    rec = case_record("eigen", case, impl, n, dtype, device.device_kind, count=count, platform=device.platform)
    try:
        fn, needs_b = _functions(case, impl, band)
        a, b = _inputs(count, n, dtype, case)
        call = jax.jit(fn)
        args = (a, b) if needs_b else (a,)
        rec["first_call_s"], times = _timed(call, args, runs)
        rec.update(median_s=statistics.median(times), times_s=times, runs=len(times))
        if count:
            rec["per_matrix_s"] = rec["median_s"] / count
        if case in ("svd", "polar", "eigh"):
            rec.update(_accuracy(case, a, call(a), dtype))
        if impl == "jaxmg.two_stage":
            rec.update(_two_stage_parts(case, call, a, band, dtype, runs))
    except Exception as e:  # out of memory, a function this JAX lacks: recorded, never hidden
        rec["error"] = f"{type(e).__name__}: {str(e)[:1000]}"
    print_record(rec)


def _run_child(args, case, impl, count, n, dtype, band=None) -> dict:
    command = [sys.executable, str(HERE), "--child", case, impl, str(count), str(n), dtype, "--runs", str(args.runs)]
    base = dict(bench="eigen", case=case, impl=impl, N=n, count=count, dtype=dtype)
    if band is not None:
        command += ["--band", str(band)]
        base["band"] = band
    return child_record(command, base, worker_env(HERE.parents[1]), args.timeout)


def main(argv=None):
    args = _args(argv)
    if args.child:
        child(*args.child, runs=args.runs, band=args.band)
        return
    order = [i for i in IMPLS if i in args.impls]  # JAX's first: the ratios' reference
    for count, n, dtype in problems(args):
        for case in args.cases:
            reference = None
            for impl, band in _runs(order, case, args.bands):
                rec = _run_child(args, case, impl, count, n, dtype, band)
                if impl == "jax":
                    reference = rec.get("median_s")
                elif reference and "median_s" in rec:
                    rec["ratio"] = rec["median_s"] / reference
                emit(args.out, rec)


def _runs(order, case: str, bands) -> list:
    """(impl, band) of a case's runs: jax.scipy for polar only, jaxmg.two_stage for eigvalsh and
    eigh only (once per band), the others once (band None)."""
    out = []
    for impl in order:
        if impl == "jaxmg.two_stage":
            out += [(impl, band) for band in bands] if case in ("eigvalsh", "eigh") else []
        elif impl != "jax.scipy" or case == "polar":
            out.append((impl, None))
    return out


if __name__ == "__main__":
    main()
