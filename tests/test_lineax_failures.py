"""A failed solve through jaxmg.lineax with throw=True raises, promptly, on sharded operators.

Each case runs in one child process with a time limit: a check that only some devices take
would leave the others waiting in a collective until XLA aborts the whole process, so the
cases must not run inside the test process. Every case must raise Lineax's catchable error
(the same one an unsharded operator gives) within CASE_LIMIT_S seconds, eagerly and in jit,
on meshes of every shape and both axis types. A solver made with throw=False returns the result
to linear_solve(..., throw=False); one left at throw=True raises on every device whatever
linear_solve's throw (Lineax does not pass its throw to the solver).
"""

import subprocess
import sys
import textwrap

import pytest

from helpers import child_env

CASE_LIMIT_S = 30.0

CHILD = textwrap.dedent("""
    import os, sys, time
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np, lineax as lx
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    import jaxmg.lineax as jl

    N = 48
    PSD = lx.positive_semidefinite_tag
    MATRICES = {
        "Cholesky": (np.ones((N, N)), PSD),                  # not positive definite
        "LU": (np.ones((N, N)), ()),                         # singular: zero pivot
        "QR": (np.c_[np.ones((N, N // 2)), np.zeros((N, N // 2))], ()),  # rank deficient
        "Auto": (np.ones((N, N)), PSD),
    }
    CASES = [(name, (4, 2), AxisType.Explicit) for name in MATRICES]
    CASES += [("Cholesky", (8, 1), AxisType.Explicit), ("LU", (2, 4), AxisType.Explicit),
              ("Cholesky", (4, 2), AxisType.Auto), ("QR", (2, 4), AxisType.Auto)]

    def solve(name, a, b, throw, solver_throw=None):
        matrix, tags = MATRICES[name]
        solver = getattr(jl, name)(throw=throw if solver_throw is None else solver_throw)
        return lx.linear_solve(lx.MatrixLinearOperator(a, tags), b, solver=solver, throw=throw)

    for name, shape, axis_type in CASES:
        mesh = jax.make_mesh(shape, ("x", "y"), axis_types=(axis_type,) * 2)
        matrix, _ = MATRICES[name]
        a = jax.device_put(jnp.asarray(matrix), NamedSharding(mesh, P("x", "y")))
        b = jnp.ones(matrix.shape[0])
        sol = solve(name, a, b, throw=False)
        assert sol.result == lx.RESULTS.singular, (name, shape)
        runs = [("eager", lambda: solve(name, a, b, True).value.block_until_ready()),
                ("jit", lambda: jax.jit(lambda a, b: solve(name, a, b, True).value)(a, b).block_until_ready())]
        if shape == (4, 2) and axis_type == AxisType.Explicit:  # a solver left at throw=True raises itself
            runs.append(("solver", lambda: solve(name, a, b, False, True).value.block_until_ready()))
        for how, run in runs:
            start = time.perf_counter()
            try:
                run()
            except Exception as error:  # Lineax's error, caught like any other
                print(f"{name} {shape} {axis_type.name} {how}: raised {type(error).__name__} "
                      f"in {time.perf_counter() - start:.1f} s: {'non-finite' in str(error)}",
                      flush=True)
            else:
                print(f"{name} {shape} {axis_type.name} {how}: did not raise", flush=True)
    print("DONE", flush=True)
""")


@pytest.mark.slow
def test_failed_sharded_solve_raises_promptly_on_every_mesh():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=child_env(), timeout=300)
    out = proc.stdout
    assert proc.returncode == 0 and "DONE" in out, out + proc.stderr[-3000:]
    lines = [line for line in out.splitlines() if ": " in line]
    assert len(lines) == 20, out
    for line in lines:
        assert ": raised " in line and line.endswith(": True"), line
        seconds = float(line.split(" in ")[1].split(" s")[0])
        assert seconds < CASE_LIMIT_S, line
