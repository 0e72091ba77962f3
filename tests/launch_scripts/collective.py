"""Run under `python -m jaxmg.launch -n N`: checks the set-up, runs a cross-process psum.

Used by tests/test_launch.py on CPU; also runs unchanged on N GPUs.
"""

import os
import sys

import jaxmg.launch  # jaxmg/__init__ may call initialize_from_environment() too

assert jaxmg.launch.initialize_from_environment() in (True, False)
assert jaxmg.launch.initialize_from_environment() is False  # idempotent

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

n = int(os.environ["JAXMG_NUM_PROCESSES"])
rank = int(os.environ["JAXMG_PROCESS_ID"])
assert jax.distributed.is_initialized()
assert jax.process_count() == n, jax.process_count()
assert jax.process_index() == rank, (jax.process_index(), rank)
assert jax.local_device_count() == 1, jax.local_devices()
assert jax.device_count() == n, jax.devices()
assert jax.default_backend() == os.environ["JAXMG_PLATFORM"], jax.default_backend()
for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "PYTHONUNBUFFERED"):
    assert var in os.environ, var

mesh = jax.make_mesh((n,), ("x",))
# Global vector [1, 2, ..., n]; process r holds element r + 1.
x = jax.make_array_from_callback(
    (n,), NamedSharding(mesh, P("x")), lambda idx: (jnp.arange(n, dtype=jnp.float32) + 1)[idx]
)
total = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))(x)
gathered = multihost_utils.process_allgather(jnp.array([rank * 10]))

print(f"device={jax.local_devices()[0]}")
print(f"psum={float(total.addressable_data(0)[0]):g}")
print(f"allgather={[int(v) for v in gathered.ravel()]}")
print("to stderr", file=sys.stderr)
