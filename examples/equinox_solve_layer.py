"""An Equinox model whose layer solves a distributed SPD system, trained with optax.

``SolveLayer`` is a kernel-ridge-regression layer with a learnable feature map (a small
"deep kernel"). Given N context points ``(x_ctx, y_ctx)`` and Q query points it computes

    F = tanh(x_ctx W + c)                               (N x M features)
    A = F F^T / M + lambda I                            (N x N, SPD, sharded by rows)
    alpha = A^-1 y_ctx              via jaxmg.Cholesky(A).solve(y_ctx)
    out = tanh(x_query W + c) F^T alpha / M             (Q x K ridge prediction)

and an ``eqx.nn.Linear`` head maps each prediction to the output. ``W``, ``c``,
``log lambda`` and the head are trained to minimise the mean squared error on the query
points with ``eqx.filter_value_and_grad`` + ``optax.adam`` inside ``eqx.filter_jit``:
the gradient flows through the distributed solve (jaxmg's derivative rules reuse the
factor), into the matrix ``A`` and so into the feature map. The script prints the loss per
step, the error on held-out points before and after, and checks that the loss decreased.

Run it on CPU (8 simulated devices, portable backend) or with one process per GPU
(native cuSOLVERMp backend); on a machine without GPUs the launcher starts N CPU
processes instead:

    python examples/equinox_solve_layer.py [--n 512] [--steps 20] [--seed 0]
    python -m jaxmg.launch -n NGPUS examples/equinox_solve_layer.py [--n 8192]

Every process builds the same data and the same initial model from ``--seed``; only
replicated scalars are read back to the host.
"""

from __future__ import annotations

import time

from _training import parse_training_args  # the command line shared with gp_hyperparameters.py
from jaxmg.launch import simulate_cpu_devices_without_gpu  # imports no JAX backend


def make_data(n_ctx: int, n_query: int, n_test: int, dim: int, seed: int):
    """Synthetic regression with two outputs; pure NumPy so every process gets the same arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((dim, 2)) / np.sqrt(dim)

    def target(x):
        z = x @ directions
        return np.stack([np.sin(2.0 * z[:, 0]) + 0.5 * z[:, 1], np.cos(1.5 * z[:, 1]) * z[:, 0]], axis=1)

    x = rng.standard_normal((n_ctx + n_query + n_test, dim))
    y = target(x) + 0.05 * rng.standard_normal((x.shape[0], 2))
    parts = np.split(np.arange(x.shape[0]), [n_ctx, n_ctx + n_query])
    return [(x[p].astype(np.float32), y[p].astype(np.float32)) for p in parts]


def main() -> None:
    parser, args = parse_training_args(
        __doc__,
        n_help="context points N (A is N x N)",
        steps=20,
        seed_help="data and initialisation seed",
        lr=0.02,
        features=64,
    )

    simulate_cpu_devices_without_gpu()
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import jaxmg  # under jaxmg.launch this joins the other processes: before any computation

    if args.n % jax.device_count():
        parser.error(f"--n {args.n} must be a multiple of the device count {jax.device_count()}")
    main_process = jax.process_index() == 0
    dim, outputs = 4, 2
    mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(AxisType.Auto,))
    rows = P("x", None)

    class SolveLayer(eqx.Module):
        """Kernel ridge regression on learned features: one distributed Cholesky per call."""

        w: jax.Array  # (dim, M) feature map
        c: jax.Array  # (M,)
        log_ridge: jax.Array  # log lambda

        def __init__(self, dim: int, features: int, *, key):
            self.w = jax.random.normal(key, (dim, features)) / jnp.sqrt(dim)
            self.c = jnp.zeros((features,))
            self.log_ridge = jnp.asarray(0.0)

        def features(self, x):
            return jnp.tanh(x @ self.w + self.c)

        def __call__(self, x_ctx, y_ctx, x_query):
            f = self.features(x_ctx)  # (N, M)
            m = f.shape[1]
            a = f @ f.T / m + jnp.exp(self.log_ridge) * jnp.eye(f.shape[0], dtype=f.dtype)
            a = jax.lax.with_sharding_constraint(a, rows)  # N x N, sharded by rows
            alpha = jaxmg.Cholesky(a).solve(y_ctx)  # A^-1 y_ctx, (N, K)
            return self.features(x_query) @ (f.T @ alpha) / m  # (Q, K)

    class Model(eqx.Module):
        solve: SolveLayer
        head: eqx.nn.Linear

        def __init__(self, dim: int, features: int, outputs: int, *, key):
            k1, k2 = jax.random.split(key)
            self.solve = SolveLayer(dim, features, key=k1)
            self.head = eqx.nn.Linear(outputs, outputs, key=k2)

        def __call__(self, x_ctx, y_ctx, x_query):
            return jax.vmap(self.head)(self.solve(x_ctx, y_ctx, x_query))

    def global_array(value, spec):
        """A global array from host data every process holds (works on one or many processes)."""
        value = np.asarray(value)
        return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec), lambda index: value[index])

    (xc, yc), (xq, yq), (xt, yt) = make_data(args.n, args.n // 2, 256, dim, args.seed)
    x_ctx, y_ctx = global_array(xc, P()), global_array(yc, rows)  # y_ctx split like A's rows
    x_query, y_query = global_array(xq, P()), global_array(yq, P())
    x_test, y_test = global_array(xt, P()), global_array(yt, P())

    model = Model(dim, args.features, outputs, key=jax.random.key(args.seed))
    # The same initial weights on every process, as replicated global arrays.
    model = jax.tree.map(lambda leaf: global_array(leaf, P()) if eqx.is_array(leaf) else leaf, model)

    optimiser = optax.adam(args.lr)

    def loss_fn(model, x_ctx, y_ctx, x, y):
        return jnp.mean((model(x_ctx, y_ctx, x) - y) ** 2)

    @eqx.filter_jit
    def step(model, opt_state, x_ctx, y_ctx, x, y):
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x_ctx, y_ctx, x, y)
        updates, opt_state = optimiser.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    evaluate = eqx.filter_jit(loss_fn)

    with jax.set_mesh(mesh):
        opt_state = eqx.filter_jit(optimiser.init)(eqx.filter(model, eqx.is_array))
        test_start = float(evaluate(model, x_ctx, y_ctx, x_test, y_test))
        losses = []
        for i in range(args.steps):
            if i == 1:  # step 0 compiled `step`: time the others
                start = time.perf_counter()
            model, opt_state, loss = step(model, opt_state, x_ctx, y_ctx, x_query, y_query)
            losses.append(float(loss))  # a replicated scalar: readable on every process
            if main_process:
                print(f"step {i:3d}  query MSE = {losses[-1]:.6f}", flush=True)
        per_step = (time.perf_counter() - start) / (args.steps - 1)
        test_end = float(evaluate(model, x_ctx, y_ctx, x_test, y_test))
        ridge = float(jnp.exp(model.solve.log_ridge))

    if main_process:
        route = jaxmg.route("potrs", (args.n, args.n), "float32", mesh)
        print(
            f"SolveLayer: A is {args.n} x {args.n} float32 on {jax.device_count()} "
            f"{jax.devices()[0].platform} device(s), {jax.process_count()} process(es), {route} route"
        )
        print(
            f"loss: first {losses[0]:.6f} -> last {losses[-1]:.6f} after {args.steps} steps "
            f"({per_step * 1e3:.2f} ms/step after compilation)"
        )
        print(f"held-out MSE: {test_start:.6f} -> {test_end:.6f}; learned ridge lambda = {ridge:.4f}")
        print(f"loss decreased: {losses[-1] < losses[0]}")
    assert losses[-1] < losses[0], f"the loss did not decrease: {losses[0]} -> {losses[-1]}"


if __name__ == "__main__":
    main()
