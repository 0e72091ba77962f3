"""One warning at ``import jaxmg`` where NVIDIA GPUs are present but the native backend cannot load.

Without it, ``backend="auto"`` would quietly take the portable backend (which gathers the
whole matrix on every device) on exactly the machines where the user expects cuSOLVERMp.
The check reads the driver's files (``jaxmg._nvidia``) and tries to load the native module
and cuSOLVERMp (``jaxmg.kernels.native.unavailable_reason``); it starts no JAX backend, so
``jax.distributed.initialize()`` may still follow ``import jaxmg``.
"""

from __future__ import annotations

import warnings

from . import _nvidia
from .kernels import native


class NativeBackendWarning(UserWarning):
    """NVIDIA GPUs are present but jaxmg's native (cuSOLVERMp) backend cannot run.

    Silence it with ``warnings.filterwarnings("ignore", category=jaxmg.NativeBackendWarning)``
    or the environment variable ``JAXMG_NVIDIA_GPU=0``.
    """


_warned = False


def fix_for(reason: str) -> str:
    """How to fix ``reason`` (a string from ``jaxmg.kernels.native.unavailable_reason``)."""
    if "not built" in reason:
        return (
            "rebuild jaxmg on this machine, where its build sees the GPUs and fetches the CUDA "
            "headers: pip install --no-cache-dir --force-reinstall --no-deps . in jaxmg's "
            'source folder, after pip install ".[cuda13]" (on a build node without GPUs, '
            "set JAXMG_CUDA=13)"
        )
    if "cuSOLVERMp" in reason or "NCCL" in reason or "load" in reason:
        return (
            "install the libraries with pip install nvidia-cusolvermp-cu13 nvidia-nccl-cu13 "
            "(-cu12 for CUDA 12), or point JAXMG_CUSOLVERMP_LIBRARY / JAXMG_NCCL_LIBRARY at them"
        )
    return "see python -m jaxmg.info"


def message(reason: str) -> str:
    """The warning's text for ``reason``."""
    return (
        f"jaxmg: this machine has NVIDIA GPUs, but the native cuSOLVERMp backend cannot run: "
        f"{reason}. backend='auto' will use the portable backend, which gathers the whole "
        f"matrix on every device. To fix: {fix_for(reason)}. Details: python -m jaxmg.info."
    )


def warn_if_native_missing(*, stacklevel: int = 3) -> str | None:
    """Warn once (``NativeBackendWarning``) where NVIDIA GPUs are present and the native
    backend cannot load; returns the reason, or None when there is nothing to say."""
    global _warned
    if _warned or not _nvidia.has_nvidia_gpu():
        return None
    reason = native.unavailable_reason()
    if reason is None:
        return None
    _warned = True
    warnings.warn(message(reason), NativeBackendWarning, stacklevel=stacklevel)
    return reason
