"""Native per-shard kernels: cuSOLVERMp through the XLA FFI library ``jaxmg._native``.

This module only reports whether the native backend can run here; the kernels
are registered by the native library (see ``csrc/``).
"""

from __future__ import annotations

NAME = "native"

#: Operations with a native kernel.
SUPPORTED: frozenset = frozenset()


def unavailable_reason() -> str | None:
    """Why the native backend cannot run in this process, or None when it can."""
    try:
        from .. import _native  # noqa: F401
    except ImportError:
        return (
            "the native extension jaxmg._native is not built; reinstall jaxmg on a machine "
            "with the CUDA toolkit and the cuSOLVERMp/NCCL headers (pip install 'jaxmg[cuda13]')"
        )
    return "no operation has a native kernel in this build"
