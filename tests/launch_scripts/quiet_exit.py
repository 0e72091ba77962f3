"""Run under `python -m jaxmg.launch -n 2`: a short jaxmg program, then the lines that JAX's
coordination client writes to stderr when the service stops before a peer's watch ends (as
recorded from runs on GPUs), which the launcher must not pass on."""

import sys

import jax
import jax.numpy as jnp

import jaxmg

rank = jax.process_index()
x = jaxmg.potrs(jnp.eye(4) * 2.0, jnp.ones(4))
print(f"solved {float(x[0]):g}")
print("own stderr line", file=sys.stderr)
sys.stderr.write(
    f"W1130 06:14:57.025372   14904 pjrt_client.cc:1605] WatchTasksAsync failed for task {rank}: "
    "CANCELLED: CANCELLED\n"
    "Additional GRPC error information from remote target coordination_service while calling "
    "/xla.coordination.CoordinationService/WatchTasks:\n"
    ":CANCELLED:CANCELLED [type.googleapis.com/tensorflow.DerivedStatus='']\n"
    "=== Source Location Trace: === \n"
    "external/xla+/xla/tsl/distributed_runtime/rpc/grpc_util.h:89\n"
    "\n"
    f"W1201 06:15:01.000001   14905 pjrt_client.cc:1605] WatchTasksAsync failed for task {rank}: "
    "UNAVAILABLE: Cancelling all calls\n"
    "Additional GRPC error information from remote target coordination_service while calling "
    "/xla.coordination.CoordinationService/WatchTasks:\n"
    ":UNAVAILABLE:Cancelling all calls\n"
    "=== Source Location Trace: ===\n"
    "external/xla+/xla/tsl/distributed_runtime/rpc/grpc_util.h:89\n"
    "external/xla+/xla/status_macros.cc:81\n"
)
print("last own stderr line", file=sys.stderr)
