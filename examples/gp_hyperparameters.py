"""Gaussian-process hyper-parameter fitting: optax on a distributed Cholesky.

A Gaussian process with an RBF kernel is fitted to synthetic 1-D regression data by
minimising the negative log marginal likelihood (NLL) over three hyper-parameters
theta = (log lengthscale, log signal variance, log noise variance):

    K(theta) = s2 * exp(-|x_i - x_j|^2 / (2 l^2)) + noise2 * I          (N x N)
    NLL(theta) = 0.5 * y^T K^-1 y + 0.5 * log det K + 0.5 * N log(2 pi)

``K`` is built already sharded by rows over a one-axis device mesh (Auto mesh axes and
``jax.lax.with_sharding_constraint``: each device computes only its own rows), and is
factored once per step with ``jaxmg.Cholesky(K)``; ``.solve(y)`` and ``.logdet()`` reuse
that factor, and so do their derivatives, so ``jax.value_and_grad`` of the NLL costs one
factorisation. Steps of ``optax.adam`` run inside ``jax.jit``. The script prints the loss
trajectory, the fitted hyper-parameters (against those that generated the data), the
posterior-mean error on held-out points, and compares the final NLL and its gradient
with a single-device ``jax.scipy.linalg.cho_factor`` reference.

Run it on CPU (8 simulated devices, portable backend) or with one process per GPU
(native cuSOLVERMp backend); on a machine without GPUs the launcher starts N CPU
processes instead:

    python examples/gp_hyperparameters.py [--n 512] [--steps 100] [--seed 0] [--lr 0.05]
    python -m jaxmg.launch -n NGPUS examples/gp_hyperparameters.py [--n 8192]

Every process creates the same data from ``--seed``; only replicated scalars are
read back to the host, so the script runs unchanged on several processes.
"""

from __future__ import annotations

import math
import time

from _training import parse_training_args  # the command line shared with equinox_solve_layer.py
from jaxmg.launch import simulate_cpu_devices_without_gpu  # imports no JAX backend

#: the hyper-parameters that generate the data, and where the optimiser starts
TRUE = {"lengthscale": 0.6, "signal_variance": 1.5, "noise_variance": 0.01}
START = {"lengthscale": 2.0, "signal_variance": 0.5, "noise_variance": 0.5}


def make_data(n: int, n_test: int, seed: int):
    """Synthetic 1-D regression data: one draw of a GP with the TRUE hyper-parameters.

    Pure NumPy with a fixed seed, so that every process makes exactly the same arrays.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-5.0, 5.0, size=n + n_test))
    sq = (x[:, None] - x[None, :]) ** 2
    cov = TRUE["signal_variance"] * np.exp(-0.5 * sq / TRUE["lengthscale"] ** 2)
    f = np.linalg.cholesky(cov + 1e-8 * np.eye(x.size)) @ rng.standard_normal(x.size)
    y = f + math.sqrt(TRUE["noise_variance"]) * rng.standard_normal(x.size)
    test = rng.permutation(x.size)[:n_test]
    train = np.setdiff1d(np.arange(x.size), test)
    return x[train, None], y[train], x[test, None], f[test]


def rbf(params, x1, x2):
    """s2 * exp(-|x1_i - x2_j|^2 / (2 l^2)) for x1 (N1, D), x2 (N2, D)."""
    import jax.numpy as jnp

    sq = jnp.sum((x1[:, None, :] - x2[None, :, :]) ** 2, axis=-1)
    return jnp.exp(params["log_signal_variance"] - 0.5 * sq * jnp.exp(-2.0 * params["log_lengthscale"]))


def main() -> None:
    parser, args = parse_training_args(
        __doc__, n_help="training points N (K is N x N)", steps=100, seed_help="data seed", lr=0.05
    )

    simulate_cpu_devices_without_gpu()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    import jaxmg  # under jaxmg.launch this joins the other processes: before any computation

    main_process = jax.process_index() == 0
    n, n_test = args.n, 128
    if n % jax.device_count():
        parser.error(f"--n {n} must be a multiple of the device count {jax.device_count()}")

    # One mesh axis over all devices, Auto axis type: XLA propagates shardings, and
    # with_sharding_constraint pins the ones that matter (K sharded by rows).
    mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(AxisType.Auto,))
    rows = P("x", None)

    x_np, y_np, xt_np, ft_np = make_data(n, n_test, args.seed)

    def global_array(value, spec):
        """A global array from host data every process holds (works on one or many processes)."""
        value = np.asarray(value)
        return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec), lambda index: value[index])

    x = global_array(x_np, P())  # (N, 1) inputs, replicated (small)
    y = global_array(y_np, P("x"))  # (N,) targets, split like K's rows
    x_test = global_array(xt_np, P())
    f_test = global_array(ft_np, P())
    params = {f"log_{k}": global_array(math.log(v), P()) for k, v in START.items()}

    def kernel_matrix(params, x):
        """K(theta) + noise2 * I, (N, N), sharded by rows: each device builds its own rows."""
        k = jax.lax.with_sharding_constraint(rbf(params, x, x), rows)
        k = k + jnp.exp(params["log_noise_variance"]) * jnp.eye(x.shape[0], dtype=k.dtype)
        return jax.lax.with_sharding_constraint(k, rows)

    def nll(params, x, y):
        """Negative log marginal likelihood, with one distributed Cholesky factorisation."""
        chol = jaxmg.Cholesky(kernel_matrix(params, x))
        alpha = chol.solve(y)  # K^-1 y, sharded like y
        return 0.5 * jnp.vdot(y, alpha) + 0.5 * chol.logdet() + 0.5 * y.shape[0] * math.log(2 * math.pi)

    optimiser = optax.adam(args.lr)

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(nll)(params, x, y)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def test_rmse(params, x, y, x_test, f_test):
        """RMSE of the posterior mean K(x_test, x) K^-1 y against the noise-free function."""
        alpha = jaxmg.Cholesky(kernel_matrix(params, x)).solve(y)
        mean = rbf(params, x_test, x) @ alpha
        return jnp.sqrt(jnp.mean((mean - f_test) ** 2))

    with jax.set_mesh(mesh):
        opt_state = jax.jit(optimiser.init)(params)
        rmse_start = float(test_rmse(params, x, y, x_test, f_test))
        losses = []
        for i in range(args.steps):
            if i == 1:  # step 0 compiled `step`: time the others
                start = time.perf_counter()
            params, opt_state, loss = step(params, opt_state, x, y)
            losses.append(float(loss))  # a replicated scalar: readable on every process
            if main_process and (i % max(1, args.steps // 10) == 0 or i == args.steps - 1):
                print(f"step {i:4d}  NLL = {losses[-1]:.6f}", flush=True)
        per_step = (time.perf_counter() - start) / (args.steps - 1)
        final_loss, final_grads = jax.jit(jax.value_and_grad(nll))(params, x, y)
        final_loss = float(final_loss)
        final_grads = {k: float(v) for k, v in final_grads.items()}
        fitted = {k: float(v) for k, v in params.items()}
        rmse_end = float(test_rmse(params, x, y, x_test, f_test))

    # The reference: the same NLL on one local device with jax.scipy.linalg.cho_factor.
    def nll_reference(params, x, y):
        k = rbf(params, x, x) + jnp.exp(params["log_noise_variance"]) * jnp.eye(x.shape[0], dtype=x.dtype)
        c, lower = jax.scipy.linalg.cho_factor(k, lower=True)
        alpha = jax.scipy.linalg.cho_solve((c, lower), y)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(c)))
        return 0.5 * jnp.dot(y, alpha) + 0.5 * logdet + 0.5 * y.shape[0] * math.log(2 * math.pi)

    local = jax.local_devices()[0]
    ref_loss, ref_grads = jax.jit(jax.value_and_grad(nll_reference))(
        jax.device_put({k: np.float64(v) for k, v in fitted.items()}, local),
        jax.device_put(x_np, local),
        jax.device_put(y_np, local),
    )
    grad_diff = max(abs(final_grads[k] - float(ref_grads[k])) for k in final_grads)
    loss_diff = abs(final_loss - float(ref_loss))

    if main_process:
        route = jaxmg.route("potrs", (n, n), "float64", mesh)
        print(
            f"GP hyper-parameters: N={n} on {jax.device_count()} {jax.devices()[0].platform} device(s), "
            f"{jax.process_count()} process(es), {route} route"
        )
        print(
            f"loss: first {losses[0]:.6f} -> last {losses[-1]:.6f} after {args.steps} steps "
            f"({per_step * 1e3:.2f} ms/step after compilation)"
        )
        print(f"loss decreased: {losses[-1] < losses[0]}")
        print("hyper-parameter       start     fitted   true (generating)")
        for name in TRUE:
            print(f"  {name:16s} {START[name]:9.4f}  {math.exp(fitted['log_' + name]):9.4f}  {TRUE[name]:9.4f}")
        print(f"held-out posterior-mean RMSE: {rmse_start:.4f} -> {rmse_end:.4f}")
        print(f"final NLL: jaxmg {final_loss:.12f}  jnp.linalg {float(ref_loss):.12f}  abs difference {loss_diff:.3e}")
        print(f"gradient max abs difference vs jnp.linalg: {grad_diff:.3e}")


if __name__ == "__main__":
    main()
