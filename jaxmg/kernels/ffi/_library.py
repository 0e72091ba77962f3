"""Loading the native library (``jaxmg._native``) and cuSOLVERMp, registering its FFI handlers
with JAX, and what it reports about itself (``info``, ``last_timings``)."""

from __future__ import annotations

import glob
import os
import site
import sys

import jax

_state: dict = {"checked": False, "reason": None, "registered": False}


# --- Loading the native library and cuSOLVERMp ---


def _search_dirs() -> list[str]:
    roots = []
    try:
        roots += site.getsitepackages()
    except AttributeError:  # pragma: no cover (virtualenv without getsitepackages)
        pass
    try:
        roots.append(site.getusersitepackages())
    except AttributeError:  # pragma: no cover
        pass
    roots += [p for p in sys.path if p and os.path.isdir(p)]
    dirs = []
    for root in dict.fromkeys(roots):
        for sub in (
            "nvidia/cu13/lib",
            "nvidia/nccl/lib",
            "nvidia/cu12/lib",
            "nvidia/cusolvermp/lib",
            "nvidia/cublas/lib",
            "nvidia/cusolver/lib",
            "nvidia/cusparse/lib",
            "nvidia/nvjitlink/lib",
            "nvidia/cuda_runtime/lib",
        ):
            d = os.path.join(root, sub)
            if os.path.isdir(d):
                dirs.append(d)
    return list(dict.fromkeys(dirs))


def _candidates(names, dirs, env=None) -> list[str]:
    out = []
    if env and os.environ.get(env):
        out.append(os.environ[env])
    for d in dirs:
        for name in names:
            out += sorted(glob.glob(os.path.join(d, name)))
    out += list(names)  # the loader's own search (LD_LIBRARY_PATH, ldconfig)
    return list(dict.fromkeys(out))


def library_candidates() -> dict:
    """Candidate paths for cuSOLVERMp, NCCL and their dependencies, in the order tried."""
    dirs = _search_dirs()
    deps = []
    for names in (
        ("libcudart.so.13", "libcudart.so.12"),
        ("libnvJitLink.so.13", "libnvJitLink.so.12"),
        ("libcusparse.so.12",),
        ("libcublasLt.so.13", "libcublasLt.so.12"),
        ("libcublas.so.13", "libcublas.so.12"),
        ("libcusolver.so.12", "libcusolver.so.11"),
    ):
        found = [c for c in _candidates(names, dirs) if os.path.isabs(c)]
        deps += found[:1]
    return {
        "deps": deps,
        "nccl": _candidates(("libnccl.so.2",), dirs, "JAXMG_NCCL_LIBRARY"),
        "cusolvermp": _candidates(("libcusolverMp.so.0",), dirs, "JAXMG_CUSOLVERMP_LIBRARY"),
    }


def _preload_cuda_runtime() -> None:
    """Load libcudart (the one the nvidia wheels ship) globally before jaxmg._native needs it."""
    import ctypes

    for path in _candidates(("libcudart.so.13", "libcudart.so.12"), _search_dirs()):
        if not os.path.isabs(path):
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


def _native_module():
    try:
        import jaxmg._native as _native  # noqa: PLC0415  # pyright: ignore[reportMissingImports] (built from csrc/)
    except ImportError:
        _preload_cuda_runtime()
        import jaxmg._native as _native  # noqa: PLC0415  # pyright: ignore[reportMissingImports] (built from csrc/)
    return _native


def _native_file() -> str | None:
    """The file of the built extension jaxmg._native in the package folder, or None."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = sorted(glob.glob(os.path.join(package, "_native*.so")) + glob.glob(os.path.join(package, "_native*.pyd")))
    return found[0] if found else None


def unavailable_reason() -> str | None:
    """Why the native backend cannot run in this process, or None when it can."""
    if _state["checked"]:
        return _state["reason"]
    try:
        native = _native_module()
    except ImportError as e:
        if _native_file() is None:
            reason = (
                "the native extension jaxmg._native is not built; reinstall jaxmg on a machine "
                "with the CUDA toolkit and the cuSOLVERMp/NCCL headers "
                '(in jaxmg\'s source folder: pip install ".[cuda13]")'
            )
        else:
            reason = f"the native extension {_native_file()} is built but cannot be imported: {e}"
    else:
        c = library_candidates()
        if native.load(c["deps"], c["nccl"], c["cusolvermp"]):
            reason = None
        else:
            reason = f"cuSOLVERMp could not be loaded: {native.load_error()}"
    _state["checked"] = True
    _state["reason"] = reason
    return reason


def capabilities() -> dict:
    """Which optional entry points the loaded library has (``jaxmg._native.capabilities()``),
    read once; empty where the native backend cannot run. Cheap enough for every trace."""
    if "capabilities" not in _state:
        _state["capabilities"] = _native_module().capabilities() if unavailable_reason() is None else {}
    return _state["capabilities"]


def abort_communicators(reason: str) -> None:
    """Abort the NCCL communicator of every grid this process has used (``ncclCommAbort``).

    Native calls blocked in a collective (a peer process died or stopped) end at once and
    raise, with ``reason``; every later native call on those grids raises too, since an aborted
    communicator cannot be used again: restart the processes. The watchdog does the same by
    itself on an NCCL asynchronous error, and after ``JAXMG_NATIVE_TIMEOUT`` seconds (unset: no
    limit) of one call's GPU work. No-op where the native library is not loaded.
    """
    if unavailable_reason() is None:
        _native_module().abort_communicators(str(reason))


def clear_cache() -> None:
    """Drop the native backend's cached grids: their NCCL communicators, cuSOLVERMp handles,
    descriptors and device workspaces (which live beside XLA's memory pool, docs/memory.md) are
    freed once no call holds them; the next native call builds its grid again. No-op where the
    native library is not loaded."""
    if unavailable_reason() is None:
        _native_module().clear_cache()


def last_timings() -> list:
    """GPU time (ms) of the native calls since the last reset on each local device, by call kind
    (``kind``: "potrf", "potrs", "getrf", "getrs"): layout step and cuSOLVERMp."""
    return _native_module().last_timings()


def register() -> None:
    """Register every handler of jaxmg._native with JAX (once); RuntimeError where it cannot run."""
    if _state["registered"]:
        return
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"the native backend cannot run here: {reason}")
    native = _native_module()
    for name, capsule in native.handlers().items():
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
    native.set_process_index(jax.process_index())
    _state["registered"] = True


def check_one_gpu_per_process() -> None:
    """RuntimeError unless this process drives one GPU (the native backend's launch model)."""
    if jax.local_device_count() > 1:
        raise RuntimeError(
            f"the native backend needs one process per GPU, but this process drives "
            f"{jax.local_device_count()} GPUs. Launch with `python -m jaxmg.launch -n NGPUS "
            f"script.py` (one process per GPU), or use backend='portable'."
        )
