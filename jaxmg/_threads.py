"""OpenBLAS single-threaded where JAX simulates several CPU devices, chosen at ``import jaxmg``.

On CPU, every simulated device (``XLA_FLAGS=--xla_force_host_platform_device_count=N``, or
``JAX_NUM_CPU_DEVICES=N``) makes its own LAPACK calls through SciPy's OpenBLAS, which jaxlib
loads on the first factorisation. With OpenBLAS's default of one worker thread per core on top
of those, its spinning workers multiply the time many-fold (measured in docs/performance.md,
``python benchmarks/bench_openblas_threads.py``).

So where the variable (or ``OMP_NUM_THREADS``) is unset, no NVIDIA GPU is present (or
``JAX_PLATFORMS=cpu``) and more than one CPU device is simulated, ``import jaxmg`` sets
``OPENBLAS_NUM_THREADS=1`` for the OpenBLAS libraries loaded after it, and sets one thread in
those already loaded (NumPy's). ``JAXMG_OPENBLAS_THREADS=keep`` leaves both alone.
"""

from __future__ import annotations

import ctypes
import os
import re

from . import _nvidia

#: The functions that set OpenBLAS's thread count, by the library's symbol prefix and suffix.
_SETTERS = (
    "openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "scipy_openblas_set_num_threads64_",
)


def simulated_cpu_devices() -> int:
    """The number of CPU devices that JAX is asked to simulate (1 where none is asked)."""
    match = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    counts = [int(match.group(1))] if match else []
    if os.environ.get("JAX_NUM_CPU_DEVICES", "").isdigit():
        counts.append(int(os.environ["JAX_NUM_CPU_DEVICES"]))
    return max(counts, default=1)


def _cpu_only() -> bool:
    platforms = os.environ.get("JAX_PLATFORMS", "")
    return platforms.strip().lower() == "cpu" or not _nvidia.has_nvidia_gpu()


def _loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries loaded in this process (Linux; empty elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and ".so" in p)


def set_loaded_openblas_threads(count: int) -> int:
    """Set ``count`` threads in every OpenBLAS library already loaded; returns how many took it."""
    done = 0
    for path in _loaded_openblas():
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        for name in _SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter.argtypes = [ctypes.c_int]
                setter(count)
                done += 1
                break
    return done


def choose_openblas_threads() -> bool:
    """One OpenBLAS thread where several CPU devices are simulated and the user chose nothing;
    returns whether it was set."""
    if os.environ.get("JAXMG_OPENBLAS_THREADS", "") == "keep":
        return False
    if any(os.environ.get(name) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")):
        return False
    if simulated_cpu_devices() <= 1 or not _cpu_only():
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    set_loaded_openblas_threads(1)
    return True
