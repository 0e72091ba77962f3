"""The inverse from a Cholesky factor on one GPU: cuSOLVER's dense potri against jaxmg.

    python3 benchmarks/engine/dense_potri.py 16384 32768 [--out FILE]   # one NVIDIA GPU

For SPD ``a`` (N x N, float64), times JAX's Cholesky (``jnp.linalg.cholesky``), cuSOLVER's
single-GPU ``cusolverDnDpotri`` on that factor (called through ctypes on the default stream,
in place on a copy), and jaxmg's ``Cholesky(a).factor`` and ``Cholesky(a).inverse()`` (the
triangular inverse and its product, LAPACK's trtri + lauum in large products). Medians of 5
runs after a warm-up (3 for jaxmg's). One JSON line per N: jax_cholesky_s, cusolver_potri_s,
potri_over_cholesky, potri_residual_rms (of a A^-1 - I), jaxmg_factor_s,
jaxmg_factor_and_inverse_s, jaxmg_inverse_over_factor.
"""

import argparse
import ctypes
import glob
import json
import os
import site
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)
import jaxmg  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_autodiff import _median_time  # noqa: E402  (warm-up, then the median of runs)

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("sizes", type=int, nargs="+")
parser.add_argument("--out", default=None, help="also append the JSON lines to this file")
args = parser.parse_args()
root = site.getsitepackages()[0]


def _lib(pat):
    found = sorted(glob.glob(os.path.join(root, "nvidia", "**", pat), recursive=True))
    return ctypes.CDLL(found[0]), found[0]


solver, path = _lib("libcusolver.so*")
cudart, _ = _lib("libcudart.so*")
print("cusolver", path, flush=True)
h = ctypes.c_void_p()
assert solver.cusolverDnCreate(ctypes.byref(h)) == 0


def measure(n: int) -> dict:
    """One JSON record for order n; the arrays of order n are freed when it returns."""
    x = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float64)
    a = ((x @ x.T) / n + 2 * jnp.eye(n)).block_until_ready()
    del x
    chol = jax.jit(jnp.linalg.cholesky)
    t_chol, _ = _median_time(lambda: chol(a), 5)
    L = chol(a).block_until_ready()
    lwork = ctypes.c_int()
    status = solver.cusolverDnDpotri_bufferSize(
        h, 1, n, ctypes.c_void_p(L.unsafe_buffer_pointer()), n, ctypes.byref(lwork)
    )
    assert status == 0, status
    work = jnp.zeros((max(lwork.value, 1),), jnp.float64).block_until_ready()
    info = jnp.zeros((1,), jnp.int32).block_until_ready()
    copy = jax.jit(lambda v: v + 0.0)

    def potri():
        c = copy(L).block_until_ready()
        t = time.perf_counter()
        st = solver.cusolverDnDpotri(
            h,
            1,
            n,
            ctypes.c_void_p(c.unsafe_buffer_pointer()),
            n,
            ctypes.c_void_p(work.unsafe_buffer_pointer()),
            lwork.value,
            ctypes.c_void_p(info.unsafe_buffer_pointer()),
        )
        cudart.cudaDeviceSynchronize()
        assert st == 0, st
        return time.perf_counter() - t, c

    potri()
    t_potri = sorted(potri()[0] for _ in range(5))[2]
    _, c = potri()
    inv_ref = jnp.tril(c) + jnp.tril(c, -1).T
    resid = float(jnp.sqrt(jnp.mean((a @ inv_ref - jnp.eye(n)) ** 2)))
    inv = jax.jit(lambda a: jaxmg.Cholesky(a).inverse())
    fac_only = jax.jit(lambda a: jaxmg.Cholesky(a).factor)
    t_fac, _ = _median_time(lambda: fac_only(a), 3)
    t_both, _ = _median_time(lambda: inv(a), 3)
    return dict(
        n=n,
        jax_cholesky_s=t_chol,
        cusolver_potri_s=t_potri,
        potri_over_cholesky=t_potri / t_chol,
        potri_residual_rms=resid,
        jaxmg_factor_s=t_fac,
        jaxmg_factor_and_inverse_s=t_both,
        jaxmg_inverse_over_factor=(t_both - t_fac) / t_fac,
    )


for n in args.sizes:
    rec = measure(n)
    print("RESULT", json.dumps(rec), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
