"""GPU check of jaxmg.lineax on the native backend (one process, one GPU): solves through
lx.linear_solve with a matrix on a one-GPU mesh, a failing factorisation reported as a
Lineax result, and jax.grad through the solve. Prints one line per check and exits non-zero
on a failure.

    python3 scripts/gpu/lineax_check.py [--n 4096]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

jax.config.update("jax_enable_x64", True)
import jaxmg  # noqa: E402
import jaxmg.lineax as jl  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4096)
    n = parser.parse_args().n
    mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(AxisType.Auto,))
    rng = np.random.default_rng(0)
    g = rng.standard_normal((n, n))
    A = g @ g.T / n + np.eye(n)
    b = rng.standard_normal(n)
    a = jax.device_put(A, NamedSharding(mesh, P("x", None)))
    failures = 0
    print(f"devices: {jax.devices()}; potrs route: {jaxmg.route('potrs', (n, n), 'float64', mesh)}")
    for solver in (jl.Auto(), jl.Cholesky(), jl.LU(), jl.QR()):
        sol = lx.linear_solve(lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag), jnp.asarray(b), solver=solver)
        x = np.asarray(sol.value)
        residual = np.linalg.norm(A @ x - b) / (np.linalg.norm(A) * np.linalg.norm(x))
        ok = residual < 1e-13 and sol.result == lx.RESULTS.successful
        failures += not ok
        family = {"Auto": "potrs", "Cholesky": "potrs", "LU": "lu_solve", "QR": "least_squares"}[type(solver).__name__]
        print(
            f"{'PASS' if ok else 'FAIL'} {type(solver).__name__:9s} N={n} residual {residual:.1e} "
            f"({jaxmg.route(family, (n, n), 'float64', mesh)} route)"
        )
    bad = jax.device_put(np.diag(np.r_[np.ones(n - 1), -1.0]), NamedSharding(mesh, P("x", None)))
    sol = lx.linear_solve(
        lx.MatrixLinearOperator(bad, lx.positive_semidefinite_tag), jnp.ones(n), solver=jl.Cholesky(), throw=False
    )
    ok = sol.result == lx.RESULTS.singular
    failures += not ok
    print(f"{'PASS' if ok else 'FAIL'} not positive definite -> RESULTS.singular with throw=False")
    loss = lambda a, b: jnp.sum(
        jnp.sin(
            lx.linear_solve(
                lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag),  # noqa: E731
                b,
                solver=jl.Cholesky(),
            ).value
        )
    )
    ga, gb = jax.grad(loss, argnums=(0, 1))(a, jnp.asarray(b))
    ra, rb = jax.grad(lambda a, b: jnp.sum(jnp.sin(jnp.linalg.solve(a, b))), argnums=(0, 1))(
        jnp.asarray(A), jnp.asarray(b)
    )
    err_b = float(jnp.max(jnp.abs(gb - rb)) / jnp.max(jnp.abs(rb)))
    sym = lambda m: (m + m.T) / 2  # noqa: E731
    err_a = float(jnp.max(jnp.abs(sym(ga) - sym(ra))) / jnp.max(jnp.abs(ra)))
    ok = err_a < 1e-8 and err_b < 1e-8
    failures += not ok
    print(f"{'PASS' if ok else 'FAIL'} jax.grad through linear_solve: rel. error a {err_a:.1e}, b {err_b:.1e}")
    print(f"{5 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
