"""import jaxmg chooses one OpenBLAS thread where JAX simulates several CPU devices.

Without it, scripts on simulated devices had to set OPENBLAS_NUM_THREADS=1 themselves (8
simulated devices were 45x slower with it unset: benchmarks/bench_openblas_threads.py). Each
case runs in a fresh process with the variable unset, importing jax before jaxmg as scripts do,
and reads the thread count of every OpenBLAS library loaded after a factorisation.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxmg

CHILD = """
import ctypes, json, os
import jax, jax.numpy as jnp
import jaxmg
x = jaxmg.potrs(jnp.eye(64) * 2.0, jnp.ones(64))
threads = {}
paths = {l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l.lower() and ".so" in l}
for path in sorted(paths):
    lib = ctypes.CDLL(path)
    for name in ("openblas_get_num_threads", "openblas_get_num_threads64_",
                 "scipy_openblas_get_num_threads", "scipy_openblas_get_num_threads64_"):
        if hasattr(lib, name):
            threads[os.path.basename(path)] = getattr(lib, name)()
            break
print(json.dumps({"env": os.environ.get("OPENBLAS_NUM_THREADS"), "threads": threads,
                  "devices": jax.device_count()}))
"""


def _child(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "XLA_FLAGS")}
    full["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(jaxmg.__file__).resolve().parents[1]), full.get("PYTHONPATH")])
    )
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=full, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


needs_linux_and_cores = pytest.mark.skipif(
    not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
    reason="reads /proc/self/maps; OpenBLAS has one thread anyway on one core",
)


@needs_linux_and_cores
def test_simulated_devices_get_one_openblas_thread_without_the_user_setting_it():
    out = _child(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    assert out["devices"] == 8 and out["env"] == "1", out
    assert out["threads"] and set(out["threads"].values()) == {1}, out


@needs_linux_and_cores
def test_the_users_choice_and_one_device_are_left_alone():
    out = _child(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu", OPENBLAS_NUM_THREADS="2")
    assert out["env"] == "2" and 2 in out["threads"].values(), out
    out = _child(JAX_PLATFORMS="cpu")
    assert out["devices"] == 1 and out["env"] is None, out
    out = _child(
        XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu", JAXMG_OPENBLAS_THREADS="keep"
    )
    assert out["env"] is None, out
