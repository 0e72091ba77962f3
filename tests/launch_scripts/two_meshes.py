"""Two meshes used alternately, (2, 1) and (1, 2), across the processes of a 2-process launch.

Started by tests/test_multiprocess.py as ``python -m jaxmg.launch -n 2 two_meshes.py``: one
CPU device per process, so every collective crosses processes. Each pass solves on both
meshes (eagerly and in jit) and with a Cholesky module factored on each mesh in pass 0.
"""

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxmg  # joins the other processes first

jax.config.update("jax_enable_x64", True)

N = 16
rng = np.random.default_rng(0)
G = rng.standard_normal((N, N))
SPD = G @ G.T / N + np.eye(N)
RHS = rng.standard_normal(N)


def place(value, mesh, spec):
    return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec), lambda index: value[index])


def gather(x):
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def check(name, ok):
    if not ok:
        raise AssertionError(f"{name} is wrong")


devices = np.asarray(jax.devices())
assert jax.process_count() == 2 and devices.size == 2
meshes = {shape: Mesh(devices.reshape(shape), ("x", "y")) for shape in [(2, 1), (1, 2)]}
potrs_jit = jax.jit(lambda a, b: jaxmg.potrs(a, b))
kept = {}
for pass_ in range(3):
    for shape, mesh in meshes.items():
        rows = P("x") if shape[0] > 1 else P("y")
        a, b = place(SPD, mesh, P("x", "y")), place(RHS, mesh, rows)
        x, logdet = jaxmg.potrs(a, b, return_logdet=True)
        check(f"potrs on {shape}", np.allclose(gather(x), np.linalg.solve(SPD, RHS)))
        check(f"logdet on {shape}", np.isclose(float(logdet), np.linalg.slogdet(SPD)[1]))
        check(f"potrs in jit on {shape}", np.allclose(gather(potrs_jit(a, b)), np.linalg.solve(SPD, RHS)))
        x = jaxmg.lu_solve(place(G, mesh, P("x", "y")), b)
        check(f"lu_solve on {shape}", np.allclose(gather(x), np.linalg.solve(G, RHS)))
        if pass_ == 0:
            kept[shape] = jaxmg.Cholesky(a)
    for shape, mesh in meshes.items():
        rows = P("x") if shape[0] > 1 else P("y")
        x = kept[shape].solve(place(RHS, mesh, rows))
        check(f"kept Cholesky of {shape}", np.allclose(gather(x), np.linalg.solve(SPD, RHS)))
    print(f"pass {pass_}: ok", flush=True)
print("ALL OK", flush=True)
