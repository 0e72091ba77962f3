"""Run every operation across the processes of a launch and check it against NumPy.

Started by tests/test_multiprocess.py as ``python -m jaxmg.launch -n 4 solve_all.py``: one
CPU device per process, so every collective crosses processes.
"""

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxmg  # joins the other processes first

jax.config.update("jax_enable_x64", True)

N, M = 16, 32
rng = np.random.default_rng(0)
G = rng.standard_normal((N, N))
SPD = G @ G.T / N + np.eye(N)
HER = (G + G.T) / 2
TALL = rng.standard_normal((M, N))
RHS = rng.standard_normal(N)
RHS_TALL = rng.standard_normal(M)


def place(value, mesh, spec):
    sharding = NamedSharding(mesh, spec)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def gather(x):
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def check(name, ok):
    if not ok:
        raise AssertionError(f"{name} is wrong")


def run(layout, mesh, spec):
    rows = P(tuple(spec)[0] or tuple(spec)[1])
    x, logdet = jaxmg.potrs(place(SPD, mesh, spec), place(RHS, mesh, rows), return_logdet=True)
    check("potrs", np.allclose(gather(x), np.linalg.solve(SPD, RHS)))
    check("logdet", np.isclose(float(logdet), np.linalg.slogdet(SPD)[1]))
    check("cholesky", np.allclose(gather(jaxmg.cholesky(place(SPD, mesh, spec))), np.linalg.cholesky(SPD)))
    x = jaxmg.lu_solve(place(G, mesh, spec), place(RHS, mesh, rows))
    check("lu_solve", np.allclose(gather(x), np.linalg.solve(G, RHS)))
    x = jaxmg.least_squares(place(TALL, mesh, spec), place(RHS_TALL, mesh, rows))
    check("least_squares", np.allclose(gather(x), np.linalg.lstsq(TALL, RHS_TALL, rcond=None)[0]))
    q, r = jaxmg.qr(place(TALL, mesh, spec))
    check("qr", np.allclose(gather(q) @ gather(r), TALL))
    w, v = jaxmg.syevd(place(HER, mesh, spec))
    check("syevd", np.allclose(HER @ gather(v), gather(v) * gather(w)))
    w, v = jaxmg.sygvd(place(HER, mesh, spec), place(SPD, mesh, spec))
    check("sygvd", np.allclose(HER @ gather(v), (SPD @ gather(v)) * gather(w)))
    u, s, vh = jaxmg.gesvd(place(TALL, mesh, spec))
    check("gesvd", np.allclose((gather(u) * gather(s)) @ gather(vh), TALL))
    u_p, h = jaxmg.polar(place(TALL, mesh, spec))
    check("polar", np.allclose(gather(u_p) @ gather(h), TALL))
    x = jax.jit(lambda a, b: jaxmg.potrs(a, b))(place(SPD, mesh, spec), place(RHS, mesh, rows))
    check("potrs in jit", np.allclose(gather(x), np.linalg.solve(SPD, RHS)))
    print(f"{layout}: ok", flush=True)


devices = np.asarray(jax.devices())
assert jax.process_count() == 4 and devices.size == 4
for shape in [(4, 1), (2, 2), (1, 4)]:
    run(f"grid {shape}", Mesh(devices.reshape(shape), ("x", "y")), P("x", "y"))
    run(f"grid {shape} column-major", Mesh(devices.reshape(shape, order="F"), ("x", "y")), P("x", "y"))
mesh1 = Mesh(devices[::-1], ("i",))
run("rows-1d reversed", mesh1, P("i", None))
run("cols-1d reversed", mesh1, P(None, "i"))
print("ALL OK", flush=True)
