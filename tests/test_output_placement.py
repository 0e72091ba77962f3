"""Outputs are placed as JAX places those of its own function for the same call: with no mesh
anywhere, jaxmg's own 1 x 1 grid of a's device decides the route but shows in no output (its
sharding, commitment and type), eagerly, inside ``jax.jit`` and through ``jax.grad``; on one
device too, where such an output then meets an array on the user's own mesh of Explicit axes."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import jaxmg
import jaxmg.numpy.linalg as la
import jaxmg.scipy.linalg as sla
from helpers import child_env, spd_matrix

N = 8
A = spd_matrix(np.random.default_rng(5), N, np.float64)
B = np.linspace(1.0, 2.0, N)

#: (jaxmg's call, JAX's call of the same function); each takes (a, b).
PAIRS = {
    "numpy.solve": (la.solve, jnp.linalg.solve),
    "numpy.eigh": (lambda a, b: la.eigh(a), lambda a, b: jnp.linalg.eigh(a)),
    "scipy.cho_factor": (lambda a, b: sla.cho_factor(a)[0], lambda a, b: jsl.cho_factor(a)[0]),
    "potrs": (jaxmg.potrs, jnp.linalg.solve),
    "Cholesky.solve": (lambda a, b: jaxmg.Cholesky(a).solve(b), jnp.linalg.solve),
    "grad": (
        jax.grad(lambda a, b: jaxmg.potrs(a, b).sum(), argnums=(0, 1)),
        jax.grad(lambda a, b: jnp.linalg.solve(a, b).sum(), argnums=(0, 1)),
    ),
}


def placement(x) -> tuple:
    """What an output shows of where it is: its sharding, commitment and its type's mesh."""
    return x.sharding, x.committed, jax.typeof(x).sharding.mesh


def check_like_jax(a, b) -> None:
    """Each output of jaxmg's call, eager and jitted, placed as the first output of JAX's."""
    for name, (mine, theirs) in PAIRS.items():
        for mode, wrap in (("eager", lambda f: f), ("jit", jax.jit)):
            want = placement(jax.tree.leaves(wrap(theirs)(a, b))[0])
            for x in jax.tree.leaves(wrap(mine)(a, b)):
                assert placement(x) == want, (name, mode, placement(x), want)


@pytest.mark.parametrize("where", ["uncommitted", "device 3"])
def test_no_mesh_outputs_are_placed_as_jaxs(where):
    a, b = jnp.asarray(A), jnp.asarray(B)
    if where == "device 3":
        a, b = jax.device_put(a, jax.devices()[3]), jax.device_put(b, jax.devices()[3])
    check_like_jax(a, b)


_ONE_DEVICE = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
jax.config.update("jax_enable_x64", True)
assert jax.device_count() == 1
import test_output_placement as t
a, b = jnp.asarray(t.A), jnp.asarray(t.B)
t.check_like_jax(a, b)
mesh = jax.make_mesh((1,), ("x",), axis_types=(AxisType.Explicit,))
y = jax.device_put(jnp.ones(t.N), NamedSharding(mesh, P("x")))
for name, (mine, _) in t.PAIRS.items():
    x = jax.tree.leaves(jax.jit(mine)(a, b))[-1]
    x = x if x.ndim == 1 else x[0]
    x + y, jax.jit(lambda u, v: u + v)(x, y)
    with jax.set_mesh(mesh):
        jax.jit(lambda u, v: u + v)(x, y)
print("ok")
"""


def test_one_device_outputs_are_placed_as_jaxs():
    """One process with one device (the common one-GPU machine): jitted outputs are JAX's
    (uncommitted, of no mesh) and meet an array on a one-device mesh of Explicit axes."""
    env = child_env(JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-c", _ONE_DEVICE], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
