"""Compile and run times of jaxmg's eigensolvers beside JAX's own on one accelerator (a TPU's
eigh is JAX's, and its compilation dominates a first call): for each case, ``jax.jit(f)``
lowered and compiled, then run twice; float32, a symmetric matrix of order N. Prints one line a
case as it finishes (cases: eigh, eigvalsh, the gradient of a weighted sum of eigenvalues,
slogdet, singular values; JAX's first, then jaxmg's).

    PYTHONPATH=$PWD python scripts/tpu_compile_times.py 1024
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmg.numpy.linalg as la

START = time.time()


def say(*parts) -> None:
    print(f"[{time.time() - START:7.1f}s]", *parts, flush=True)


def timed(name: str, f, *args):
    """``jax.jit(f)`` compiled for ``args`` and run twice; prints the three times."""
    t = time.time()
    compiled = jax.jit(f).lower(*args).compile()
    compile_s = time.time() - t
    t = time.time()
    out = jax.block_until_ready(compiled(*args))
    first_s = time.time() - t
    t = time.time()
    out = jax.block_until_ready(compiled(*args))
    say(f"{name}: compile {compile_s:.2f}s first {first_s:.3f}s second {time.time() - t:.3f}s")
    return out


def main(n: int) -> None:
    say("jax", jax.__version__, jax.devices())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    a = jnp.asarray((x + x.T) / 2)
    w0, _ = timed("jnp.eigh", jnp.linalg.eigh, a)
    w1, _ = timed("jaxmg.eigh", la.eigh, a)
    say("eigvals diff", float(jnp.max(jnp.abs(w0 - w1))))
    timed("jnp.eigvalsh", jnp.linalg.eigvalsh, a)
    timed("jaxmg.eigvalsh", la.eigvalsh, a)
    c = jnp.asarray(rng.standard_normal(n).astype(np.float32))
    timed("jnp grad", jax.grad(lambda a: jnp.sum(c * jnp.linalg.eigh(a)[0])), a)
    timed("jaxmg grad", jax.grad(lambda a: jnp.sum(c * la.eigh(a)[0])), a)
    for name, f in (("jnp.slogdet", jnp.linalg.slogdet), ("jaxmg.slogdet", la.slogdet)):
        sign, logdet = timed(name, f, a)
        say(name, float(sign), float(logdet))
    timed("jnp.svd", lambda a: jnp.linalg.svd(a, compute_uv=False), a)
    timed("jaxmg.svd", lambda a: la.svd(a, compute_uv=False), a)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
