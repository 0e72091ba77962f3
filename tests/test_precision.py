"""Every matrix product jaxmg traces runs at full precision.

On GPUs, float32 and complex64 products at JAX's default precision run in TF32 (about 1e-3
relative error): a least-squares solution computed so was off by 1.4e-3 on an H200.
The kernels multiply with ``jaxmg.kernels.algebra.matmul`` (precision HIGHEST; QDWH's products
are traced under ``jax.default_matmul_precision("highest")``), also when called directly in a
shard_map (``jaxmg.ops.local``), so every ``dot_general`` of an operation and of its derivatives
carries ``precision = [HIGHEST, HIGHEST]``. Checked on the
lowered program (the CPU has no TF32); the native kernels' own check is in
tests/gpu/test_qr_emulated.py.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

import jaxmg
from helpers import make_mesh, put, random_matrix, spd_matrix

RNG = np.random.default_rng(11)
SPD = spd_matrix(RNG, 32, np.float32)
TALL = random_matrix(RNG, (64, 32), np.float32)
B, B_TALL = jnp.ones(32, jnp.float32), jnp.ones(64, jnp.float32)

CASES = {
    "potrs": (lambda a: jnp.sum(jaxmg.potrs(a, B)), SPD),
    "lu_solve": (lambda a: jnp.sum(jaxmg.lu_solve(a, B)), SPD),
    "least_squares": (lambda a: jnp.sum(jaxmg.least_squares(a, B_TALL)), TALL),
    "qr": (lambda a: jnp.sum(jaxmg.qr(a)[1]), TALL),
    "syevd": (lambda a: jnp.sum(jaxmg.syevd(a)[0]), SPD),
    "polar": (lambda a: jnp.sum(jaxmg.polar(a)[0]), TALL),
    "gesvd": (lambda a: jnp.sum(jaxmg.gesvd(a, compute_u=False, compute_vh=False)), TALL),
    "logdet": (lambda a: jaxmg.Cholesky(a).logdet(), SPD),
}


@pytest.mark.parametrize("name", list(CASES))
def test_products_of_operations_and_gradients_are_full_precision(name):
    loss, matrix = CASES[name]
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    a = put(matrix, mesh, P("x", "y"))
    dots = []
    for f in (loss, jax.grad(loss)):
        dots += re.findall(r"stablehlo\.dot_general[^\n]*", jax.jit(f).lower(a).as_text())
    no_products = ("potrs", "lu_solve", "qr", "syevd", "logdet")
    assert dots or name in no_products, "no products at all: the check checks nothing"
    loose = [d for d in dots if "HIGHEST" not in d]
    assert not loose, loose[:2]


def test_local_kernels_are_full_precision():
    """jaxmg.ops.local runs the kernels in the caller's shard_map, outside the kernel layer."""
    mesh = make_mesh((4, 2), ("x", "y"), axis_types=AxisType.Auto)
    grid = jaxmg.Grid.from_spec(mesh, P("x", "y"))

    def step(a_block, b_rows):
        (x,) = jaxmg.ops.local.least_squares(a_block, b_rows, grid=grid)[:1]
        return x

    fn = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P("x", "y"), P("x")), out_specs=P("x"), check_vma=False))
    text = fn.lower(put(TALL, mesh, P("x", "y")), put(np.ones(64, np.float32), mesh, P("x"))).as_text()
    dots = re.findall(r"stablehlo\.dot_general[^\n]*", text)
    assert dots and all("HIGHEST" in d for d in dots), dots[:2]
