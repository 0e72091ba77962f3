"""Whether this machine has NVIDIA GPUs, from the driver's files alone.

No CUDA library is loaded and no JAX backend is started, so this is safe at import time
and inside the build backend (``build_support/jaxmg_build.py`` loads this file by path:
it must import nothing from jaxmg).
"""

from __future__ import annotations

import glob
import os
import re
import shutil

#: Environment variable that overrides the detection: "1" (GPUs present) or "0" (none).
OVERRIDE = "JAXMG_NVIDIA_GPU"


def driver_version(root: str = "/") -> str | None:
    """The NVIDIA kernel driver's version ("580.95.05"), or None where no driver is loaded."""
    try:
        with open(os.path.join(root, "proc/driver/nvidia/version")) as f:
            text = f.read()
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for [^ ]+)?\s+([0-9][0-9.]*)", text)
    return match.group(1) if match else "unknown"


def has_nvidia_gpu(root: str = "/") -> bool:
    """True where an NVIDIA driver and a GPU are visible: the driver's /proc entry, a
    /dev/nvidiaN device or ``nvidia-smi`` on PATH. ``JAXMG_NVIDIA_GPU=0|1`` overrides."""
    forced = os.environ.get(OVERRIDE)
    if forced in ("0", "1"):
        return forced == "1"
    if driver_version(root) is not None:
        return True
    if glob.glob(os.path.join(root, "dev/nvidia[0-9]*")):
        return True
    return root == "/" and shutil.which("nvidia-smi") is not None
