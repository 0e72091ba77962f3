"""Memory of compiled forward and backward passes, from XLA's own analysis of the compiled program
(``memory_analysis().temp_size_in_bytes``: what the program holds beyond its arguments and
outputs), in units of one N x N matrix, beside plain JAX's on the same device.

On one device the local route runs (the device's own solver): jaxmg's derivative rules and status
values must cost no matrix that JAX's functions do not. benchmarks/bench_memory.py measures the
device peaks on GPUs.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest

import jaxmg

N = 256
MATRIX = N * N * 8
SLACK = 0.05  # vectors and scalars, in matrices


def _temp(fn, *args) -> float:
    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes / MATRIX


@pytest.fixture(scope="module")
def system():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((N, N)) / np.sqrt(N)
    a = jax.device_put(g @ g.T + np.eye(N), jax.devices()[0])
    return a, jax.device_put(rng.standard_normal(N), jax.devices()[0])


def _gp_jaxmg(k, y):
    alpha, logdet = jaxmg.potrs(k, y, return_logdet=True)
    return 0.5 * y @ alpha + 0.5 * logdet


def _gp_jax(k, y):
    c = jsl.cho_factor(k, lower=True)
    return 0.5 * y @ jsl.cho_solve(c, y) + jnp.sum(jnp.log(jnp.diagonal(c[0])))


PAIRS = {
    "potrs": (jaxmg.potrs, lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b)),
    "cholesky": (lambda a, b: jaxmg.cholesky(a), lambda a, b: jnp.linalg.cholesky(a)),
    "lu_solve": (jaxmg.lu_solve, jnp.linalg.solve),
    "gp_value_and_grad": (jax.value_and_grad(_gp_jaxmg), jax.value_and_grad(_gp_jax)),
    "eigenvalue_sum_gradient": (
        jax.grad(lambda a, b: jnp.sum(jaxmg.numpy.linalg.eigh(a)[0])),
        jax.grad(lambda a, b: jnp.sum(jnp.linalg.eigh(a)[0])),
    ),
}


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_no_matrix_beyond_jax(system, case):
    """Each forward pass and gradient holds no more than JAX's counterpart (the Cholesky status
    search works in the factor's buffer; the log-det cotangent is elementwise in A^-1)."""
    ours, theirs = PAIRS[case]
    mine, reference = _temp(ours, *system), _temp(theirs, *system)
    assert mine <= reference + SLACK, (case, mine, reference)


def test_solves_hold_only_the_factor(system):
    """potrs, lu_solve and the GP loss's value_and_grad with respect to K hold one matrix: the
    factor, made by potrf or getrf in the copy of a that XLA makes anyway (potrf's info is the
    status: no second pass, no copy of a kept for it; no masking pass writes a second matrix).
    A^-1 then overwrites the factor (plain JAX: 2, 2 and 3 matrices)."""
    assert _temp(PAIRS["potrs"][0], *system) <= 1 + SLACK
    assert _temp(PAIRS["lu_solve"][0], *system) <= 1 + SLACK
    assert _temp(jax.value_and_grad(_gp_jaxmg), *system) <= 1 + SLACK


def test_inverses_hold_the_factor(system):
    """Cholesky(a).inverse() and LU(a).inverse() solve against the identity in place, in the
    factor's column-major layout: one matrix beyond their output, as JAX's inv."""
    assert _temp(lambda a: jaxmg.Cholesky(a).inverse(), system[0]) <= 1 + SLACK
    assert _temp(lambda a: jaxmg.LU(a).inverse(), system[0]) <= 1 + SLACK


def test_failed_factorisation_reports_its_minor(system):
    """The status is potrf's info: the order of the first leading minor that is not positive
    definite, for one matrix and for each matrix of a stack; a NaN gives a non-zero status."""
    a, _ = system
    bad = a.at[5, 5].set(-1.0)
    assert int(jaxmg.Cholesky(bad).status) == 6
    stack = jnp.stack([a, bad, a.at[0, 0].set(-1.0)])
    np.testing.assert_array_equal(jax.jit(jax.vmap(lambda m: jaxmg.Cholesky(m).status))(stack), [0, 6, 1])
    assert bool(jnp.all(jnp.isnan(jaxmg.cholesky(bad))))
    assert int(jaxmg.Cholesky(a.at[7, 3].set(jnp.nan)).status) != 0


def test_gp_loss_with_a_checkpointed_kernel_holds_three_matrices():
    """The GP loss of benchmarks/bench_gp.py (RBF kernel built inside, jitted value_and_grad with
    respect to its parameters), with the kernel under ``jax.checkpoint``: the kernel's own
    intermediates are recomputed in the backward pass, and jaxmg's part is the factor (A^-1 and
    the cotangent take its place): one matrix fewer than plain JAX's loss (3 against 4 with the
    XLA of JAX 0.12; older XLA keeps more of the kernel's values for both)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_gp

    mesh = jax.make_mesh((1, 1), ("x", "y"), devices=jax.devices()[:1], axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x", None))
    x, y, theta = bench_gp.make_problem(N, jnp.float64, sharding)

    def temp(solver):
        loss = bench_gp.loss_fn(solver, sharding, "auto" if solver == "jaxmg" else None, checkpoint=True)
        return _temp(jax.value_and_grad(loss), theta, x, y)

    mine, reference = temp("jaxmg"), temp("jax")
    assert mine <= reference - 1 + SLACK, (mine, reference)
