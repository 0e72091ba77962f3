"""One rank fails; the others run JAX collectives across the processes (gloo on CPU).

argv: MODE FAILING_RANK [PID_DIR]  (PID_DIR gets rankR.pid files and failed_at: the time of the failure)
  raise-early     FAILING_RANK raises before any collective.
  raise-in-collective
                  every rank runs one psum; then FAILING_RANK raises while the others
                  enter a second psum, where they block (their peer never comes).
  exit-in-collective   as above, but FAILING_RANK calls sys.exit(7).
  kill-in-collective   as above, but FAILING_RANK kills itself with SIGKILL.
  kill-in-solve   every rank calls jaxmg.potrs in a loop; FAILING_RANK kills itself with
                  SIGKILL after three solves, while the others are in the fourth.
  hang            every rank runs one psum, then all enter a second one that only
                  FAILING_RANK skips: it sleeps (for --timeout tests).

Works under `python -m jaxmg.launch` (importing jaxmg joins the others), as plain processes
started with the JAXMG_* variables set by hand, and as plain processes that call
jax.distributed.initialize themselves (FAULT_COORDINATOR and FAULT_PROCESS_ID set).
"""

import os
import signal
import sys
import time

import jax

import jaxmg.launch

if "FAULT_COORDINATOR" in os.environ:
    # Started without jaxmg.launch, as under Slurm: the user's own initialize, with jaxmg's
    # failure-detection settings.
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", 1)
    jax.distributed.initialize(
        os.environ["FAULT_COORDINATOR"],
        num_processes=2,
        process_id=int(os.environ["FAULT_PROCESS_ID"]),
        **jaxmg.launch.failure_detection_settings(),
    )
else:
    jaxmg.launch.initialize_from_environment()

import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

mode, failing = sys.argv[1], int(sys.argv[2])
pid_dir = sys.argv[3] if len(sys.argv) > 3 else None
rank, n = jax.process_index(), jax.process_count()
if pid_dir:
    with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))


def fail_here():
    if pid_dir:  # when the failure happened, for the tests' time bounds
        with open(os.path.join(pid_dir, "failed_at"), "w") as f:
            f.write(repr(time.time()))
    print("failing now", flush=True)
    if mode == "raise-early" or mode == "raise-in-collective":
        raise ValueError(f"rank {rank} fails on purpose")
    if mode == "exit-in-collective":
        sys.exit(7)
    if mode in ("kill-in-collective", "kill-in-solve"):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)  # hang


if mode == "raise-early" and rank == failing:
    fail_here()

if mode == "kill-in-solve":
    # Every rank solves with jaxmg.potrs (N = FAULT_N, default 64) again and again; after the
    # third solve FAILING_RANK dies of SIGKILL while the others are in the fourth.
    from jax.sharding import AxisType

    import jaxmg

    size = int(os.environ.get("FAULT_N", "64"))
    grid = jax.make_mesh((n, 1), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    a = jax.jit(lambda: size * jnp.eye(size) + jnp.ones((size, size)), out_shardings=NamedSharding(grid, P("x", "y")))()
    b = jax.jit(lambda: jnp.ones(size), out_shardings=NamedSharding(grid, P("x")))()
    for i in range(10**6):
        jaxmg.potrs(a, b).block_until_ready()
        print(f"solve {i} done", flush=True)
        if rank == failing and i == 2:
            fail_here()

mesh = jax.make_mesh((n,), ("x",))
x = jax.make_array_from_callback((n,), NamedSharding(mesh, P("x")), lambda idx: jnp.arange(n, dtype=jnp.float32)[idx])
psum = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))
print(f"psum={float(psum(x).addressable_data(0)[0]):g}", flush=True)
if rank == failing:
    time.sleep(1.0)  # let the others enter the second psum
    fail_here()
print("entering the second psum", flush=True)
print(f"psum={float((psum(x + 1)).addressable_data(0)[0]):g}", flush=True)
