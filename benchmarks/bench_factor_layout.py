"""The local Cholesky factor's layout: column-major (the library's, as
``jax.lax.linalg.cholesky`` lays it out: the triangular solves take it as it is) against
row-major (cuSOLVER/LAPACK factor the matrix's own buffer, read as its column-major transpose, and
the one-GPU potri inverse takes the factor as it is), on one device.

    python benchmarks/bench_factor_layout.py --n 8192 --time-n 16384

For each layout: XLA's temporaries (``memory_analysis().temp_size_in_bytes``, in N x N
matrices) of potrs, cholesky, ``Cholesky(a).inverse()`` and the gradient of the GP-type loss
``b^H A^-1 b + log det A`` with respect to A, at order ``--n``; the median time (after a warm-up)
of potrs and of that gradient at ``--time-n``; and a check of each layout's results against
NumPy. One JSON line per layout and case.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
from _common import results_path  # noqa: E402
from bench_autodiff import _median_time  # noqa: E402


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--time-n", type=int, default=None)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--out", default=str(results_path("factor_layout.jsonl")))
    return p.parse_args(argv)


def row_major_layout():
    """Patch the local Cholesky to the row-major factor (returns the undo): the solver factors
    the column-major view of ``a`` (``a^T = conj(A)``) from its upper triangle, whose column-major
    U is the row-major L; the triangular solves read the row-major L as that U."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.linalg import solve_triangular

    from jaxmg.kernels import local

    def call(target, a, **attributes):
        out = (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(a.shape[:-2], jnp.int32))
        return tuple(jax.ffi.ffi_call(target, out, input_output_aliases={0: 0}, vmap_method="broadcast_all")(
            a, **attributes))

    def lapack_potrf(a):
        from jaxlib import lapack

        return call(lapack.prepare_lapack_call("potrf_ffi", a.dtype), a, uplo=np.uint8(ord("U")))

    def potrf(a):
        return jax.lax.platform_dependent(a, cpu=lapack_potrf,
                                          cuda=lambda a: call("cusolver_potrf_ffi", a, lower=False))

    def solve(self, state, b, spec=None):  # L y = b is U^T y = b; L^H x = y is U conj(x) = conj(y)
        u = jnp.swapaxes(state.factor, -1, -2)
        y = solve_triangular(u, local._as_matrix(b), lower=False, trans="T")
        return local._like_rhs(jnp.conj(solve_triangular(u, jnp.conj(y), lower=False)), b)

    saved = local.potrf, local.Cholesky.solve
    local.potrf, local.Cholesky.solve = potrf, solve

    def undo():
        local.potrf, local.Cholesky.solve = saved
    return undo


def cases(n, dtype="float64"):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxmg

    device = jax.devices()[0]
    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, n)) / np.sqrt(n)
    a = jax.device_put((g @ g.T + np.eye(n)).astype(dtype), device)
    b = jax.device_put(np.ones(n, dtype), device)

    def gp(a, b):
        x, logdet = jaxmg.potrs(a, b, return_logdet=True)
        return jnp.vdot(b, x) + logdet

    return a, b, {"potrs": (jaxmg.potrs, (a, b)), "cholesky": (jaxmg.cholesky, (a,)),
                  "cholesky_inverse": (lambda a: jaxmg.Cholesky(a).inverse(), (a,)),
                  "gp_grad": (jax.grad(gp), (a, b))}


def measure(layout, args, emit):
    import jax
    import numpy as np

    a, b, fns = cases(args.n)
    matrix = args.n * args.n * 8
    an = np.asarray(a)
    ref = {"potrs": np.linalg.solve(an, np.asarray(b)), "cholesky": np.linalg.cholesky(an),
           "cholesky_inverse": np.linalg.inv(an)}
    for name, (fn, inputs) in fns.items():
        compiled = jax.jit(fn).lower(*inputs).compile()
        rec = dict(bench="factor_layout", layout=layout, case=name, N=args.n, device_kind=jax.devices()[0].device_kind,
                   temp_matrices=compiled.memory_analysis().temp_size_in_bytes / matrix)
        if name in ref:
            out = np.asarray(compiled(*inputs))
            rec["relative_error"] = float(np.linalg.norm(out - ref[name]) / np.linalg.norm(ref[name]))
        emit(rec)
    if args.time_n:
        a, b, fns = cases(args.time_n)
        for name in ("potrs", "gp_grad"):
            fn, inputs = fns[name]
            f = jax.jit(fn)
            median, times = _median_time(lambda: f(*inputs), args.runs)
            emit(dict(bench="factor_layout", layout=layout, case=name, N=args.time_n, median_s=median, times_s=times,
                      device_kind=jax.devices()[0].device_kind))


def main(argv=None):
    import jax

    jax.config.update("jax_enable_x64", True)
    args = _args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def emit(rec):
        print("RESULT " + json.dumps(rec), flush=True)
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")

    measure("column-major", args, emit)
    undo = row_major_layout()
    try:
        jax.clear_caches()
        measure("row-major", args, emit)
    finally:
        undo()


if __name__ == "__main__":
    main()
