"""Quickstart: solve a distributed SPD system with jaxmg.potrs and its log-determinant.

Runs on whatever JAX finds: under ``python -m jaxmg.launch -n NGPUS`` one process per
GPU (native cuSOLVERMp backend), and with no GPU on 8 simulated CPU devices (portable
backend). Prints the relative residual, the log-determinant and the time.

    python examples/quickstart.py [--n N] [--dtype float64]
"""

from __future__ import annotations

import argparse
import time

from jaxmg.launch import simulate_cpu_devices_without_gpu  # imports no JAX backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--n", type=int, default=None, help="matrix size N (default 16384 on GPUs, 1024 on CPU devices)"
    )
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64", "complex64", "complex128"])
    args = parser.parse_args()

    simulate_cpu_devices_without_gpu()
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    import jaxmg

    n = args.n or (16384 if jax.devices()[0].platform == "gpu" else 1024)
    dtype = jnp.dtype(args.dtype)
    mesh = jax.make_mesh((jax.device_count(),), ("x",))
    rows = NamedSharding(mesh, P("x", None))

    @jax.jit
    def make_problem(key):
        """A well-conditioned SPD matrix A = G G^H / n + I, built already sharded by rows."""
        kg, kb = jax.random.split(key)
        g = jax.random.normal(kg, (n, n), dtype=dtype, out_sharding=rows)
        a = jnp.matmul(g, jnp.conj(g).T, out_sharding=rows) / n + jnp.eye(n, dtype=dtype, device=rows)
        b = jax.random.normal(kb, (n,), dtype=dtype, out_sharding=NamedSharding(mesh, P("x")))
        return a, b

    a, b = make_problem(jax.random.key(0))
    x, logdet = jaxmg.potrs(a, b, return_logdet=True)  # warm-up: compiles, builds the grid
    jax.block_until_ready(x)
    start = time.perf_counter()
    x, logdet = jaxmg.potrs(a, b, return_logdet=True)
    jax.block_until_ready((x, logdet))
    elapsed = time.perf_counter() - start

    residual = jnp.linalg.norm(jnp.matmul(a, x, out_sharding=NamedSharding(mesh, P("x"))) - b)
    relative = residual / (jnp.linalg.norm(a) * jnp.linalg.norm(x))
    if jax.process_index() == 0:
        route = jaxmg.route("potrs", (n, n), dtype, mesh)
        print(
            f"jaxmg.potrs  N={n} {dtype.name} on {jax.device_count()} {jax.devices()[0].platform} device(s), "
            f"{route} route"
        )
        print(f"relative residual ||Ax-b||/(||A|| ||x||) = {float(relative):.3e}")
        print(f"log det A = {float(logdet):.10g}")
        print(f"time = {elapsed * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
