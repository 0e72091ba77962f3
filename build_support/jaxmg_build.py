"""jaxmg's build backend: scikit-build-core, plus two things it cannot know by itself.

1. **What the native module needs, fetched where it can run.** On a machine with NVIDIA
   GPUs (``jaxmg/_nvidia.py``: the driver's files) the build also requires the CUDA
   headers and JAX (for ``jax.ffi.include_dir()``) as wheels, so that a plain
   ``pip install ".[cuda13]"`` (build isolation on) builds ``jaxmg._native``; the CMake
   step (``cmake/FindNativeDeps.cmake``) finds them in the build environment. Elsewhere
   nothing more is fetched and the native target is skipped.
   ``JAXMG_CUDA=12|13`` picks the CUDA major version (default: 13, or 12 with a driver
   older than 580), ``JAXMG_CUDA=0`` or ``JAXMG_DISABLE_NATIVE`` fetches nothing more,
   and ``JAXMG_NVIDIA_GPU=1|0`` overrides the GPU detection (e.g. a build node without GPUs).
   A compiler (nvcc with its runtime, CRT and CCCL wheels) is fetched only where none is
   found (``CUDACXX``, ``nvcc`` on PATH, ``$CUDA_HOME/bin/nvcc``).
2. **A pure-Python wheel is tagged as one.** When the native target was skipped the wheel
   holds no compiled file; it is re-tagged ``py3-none-any`` (one wheel for every Python
   and platform) instead of scikit-build-core's ``cp3XX-cp3XX-<platform>``.

Every other hook is scikit-build-core's own.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import zipfile
from pathlib import Path

from scikit_build_core import build as _skbuild
from scikit_build_core.build import *  # noqa: F401,F403  (the PEP 517/660 hooks we do not change)

_ROOT = Path(__file__).resolve().parent.parent

#: CUDA major version -> wheels that provide the headers the native target includes.
HEADER_WHEELS = {
    "13": ["nvidia-cusolvermp-cu13>=0.8", "nvidia-nccl-cu13>=2.18", "nvidia-cusolver>=12", "nvidia-cublas>=13"],
    "12": ["nvidia-cusolvermp-cu12>=0.8", "nvidia-nccl-cu12>=2.18", "nvidia-cusolver-cu12>=11",
           "nvidia-cublas-cu12>=12"],
}
#: CUDA major version -> wheels of a compiler toolchain (used only when no nvcc is found).
COMPILER_WHEELS = {
    "13": ["nvidia-cuda-nvcc>=13", "nvidia-cuda-crt>=13", "nvidia-cuda-cccl>=13", "nvidia-cuda-runtime>=13"],
    "12": ["nvidia-cuda-nvcc-cu12>=12", "nvidia-cuda-cccl-cu12>=12", "nvidia-cuda-runtime-cu12>=12"],
}
JAX = "jax>=0.10,<0.14"
_EXTENSIONS = (".so", ".pyd", ".dylib")


def _nvidia():
    spec = importlib.util.spec_from_file_location("_jaxmg_nvidia", _ROOT / "jaxmg" / "_nvidia.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cuda_major(env=os.environ) -> str | None:
    """The CUDA major version whose wheels the native build needs, or None for no native build."""
    if env.get("JAXMG_DISABLE_NATIVE"):
        return None
    chosen = env.get("JAXMG_CUDA", "").strip()
    if chosen in ("0", "none", "off"):
        return None
    if chosen in HEADER_WHEELS:
        return chosen
    if chosen:
        raise ValueError(f"JAXMG_CUDA must be 12, 13 or 0, got {chosen!r}.")
    nvidia = _nvidia()
    if not nvidia.has_nvidia_gpu():
        return None
    driver = nvidia.driver_version() or ""
    major = driver.split(".")[0]
    return "12" if major.isdigit() and int(major) < 580 else "13"


def has_compiler(env=os.environ) -> bool:
    """Whether CMake will find nvcc without wheels: CUDACXX, nvcc on PATH, or CUDA_HOME/CUDA_PATH."""
    if env.get("CUDACXX") and os.path.exists(env["CUDACXX"]):
        return True
    if shutil.which("nvcc", path=env.get("PATH")):
        return True
    return any(env.get(v) and os.path.exists(os.path.join(env[v], "bin", "nvcc")) for v in ("CUDA_HOME", "CUDA_PATH"))


def native_requires(env=os.environ) -> list[str]:
    """The extra build requirements of the native target on this machine (empty: none)."""
    major = cuda_major(env)
    if major is None:
        return []
    return [JAX, *HEADER_WHEELS[major], *([] if has_compiler(env) else COMPILER_WHEELS[major])]


def get_requires_for_build_wheel(config_settings=None):
    return [*_skbuild.get_requires_for_build_wheel(config_settings), *native_requires()]


def get_requires_for_build_editable(config_settings=None):
    return [*_skbuild.get_requires_for_build_editable(config_settings), *native_requires()]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def retag_pure(path: Path) -> Path:
    """Re-tag wheel ``path`` as ``py3-none-any`` when it holds no compiled file; returns the
    (possibly new) path. The WHEEL file's tags and Root-Is-Purelib and its RECORD entry are
    rewritten; every other file is copied unchanged."""
    path = Path(path)
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        if any(n.endswith(_EXTENSIONS) or ".so." in n for n in names):
            return path
        contents = {n: wheel.read(n) for n in names}
        infos = {n: wheel.getinfo(n) for n in names}
    dist, version = path.name.split("-")[:2]
    wheel_file = next(n for n in names if n.endswith(".dist-info/WHEEL"))
    record_file = next(n for n in names if n.endswith(".dist-info/RECORD"))
    lines = [ln for ln in contents[wheel_file].decode().splitlines()
             if ln.strip() and not ln.startswith(("Tag:", "Root-Is-Purelib:"))]
    lines[1:1] = ["Root-Is-Purelib: true"]
    lines.append("Tag: py3-none-any")
    contents[wheel_file] = ("\n".join(lines) + "\n").encode()
    record = [ln for ln in contents[record_file].decode().splitlines() if not ln.startswith(wheel_file + ",")]
    record.insert(0, _record_line(wheel_file, contents[wheel_file]))
    contents[record_file] = ("\n".join(record) + "\n").encode()
    target = path.with_name(f"{dist}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for name in names:
            out.writestr(infos[name], contents[name])
    if target != path:
        path.unlink()
    return target


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = _skbuild.build_wheel(wheel_directory, config_settings, metadata_directory)
    return retag_pure(Path(wheel_directory) / name).name
