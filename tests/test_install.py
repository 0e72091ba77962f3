"""The install path as far as a CPU machine allows: the GPU detection, the warning at
``import jaxmg`` where the native backend is missing on an NVIDIA machine (GPU detection
mocked), ``python -m jaxmg.info``, and the build backend (extra build requirements on GPU
machines, the py3-none-any tag of a pure-Python wheel)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import warnings
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import jaxmg
from helpers import OPERATIONS
from jaxmg import _native_check, _nvidia
from jaxmg.kernels import native

ROOT = Path(__file__).resolve().parent.parent
NOT_BUILT = "the native extension jaxmg._native is not built; reinstall jaxmg"


def _run(code_or_module, *args, env=None, module=False):
    command = [sys.executable, "-m", code_or_module, *args] if module else [sys.executable, "-c", code_or_module]
    full_env = {**os.environ, **(env or {})}
    full_env.pop("XLA_FLAGS", None)
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=300)


# ---------------------------------------------------------------- GPU detection


def test_driver_version_and_gpu_detection_from_driver_files(tmp_path, monkeypatch):
    monkeypatch.delenv(_nvidia.OVERRIDE, raising=False)
    assert _nvidia.driver_version(str(tmp_path)) is None
    assert not _nvidia.has_nvidia_gpu(str(tmp_path))
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    assert _nvidia.has_nvidia_gpu(str(tmp_path))
    proc = tmp_path / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  "
        "Release Build  (dvs-builder@U22)\nGCC version: gcc 12\n"
    )
    assert _nvidia.driver_version(str(tmp_path)) == "580.95.05"
    monkeypatch.setenv(_nvidia.OVERRIDE, "0")
    assert not _nvidia.has_nvidia_gpu(str(tmp_path))
    monkeypatch.setenv(_nvidia.OVERRIDE, "1")
    assert _nvidia.has_nvidia_gpu("/nonexistent")


# ---------------------------------------------------------------- the warning


@pytest.fixture
def fresh_check(monkeypatch):
    monkeypatch.setattr(_native_check, "_warned", False)
    return monkeypatch


@pytest.mark.parametrize(
    "reason, fix",
    [
        (NOT_BUILT + " (cannot import name '_native')", "pip install --no-cache-dir --force-reinstall"),
        (
            "cuSOLVERMp could not be loaded: libcusolverMp.so.0: cannot open shared object file",
            "nvidia-cusolvermp-cu13",
        ),
    ],
)
def test_gpu_machine_without_native_backend_warns_once(fresh_check, reason, fix):
    fresh_check.setattr(_nvidia, "has_nvidia_gpu", lambda root="/": True)
    fresh_check.setattr(native, "unavailable_reason", lambda: reason)
    with pytest.warns(jaxmg.NativeBackendWarning) as record:
        assert _native_check.warn_if_native_missing() == reason
    text = str(record[0].message)
    assert reason in text and fix in text and "python -m jaxmg.info" in text and "portable" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native_check.warn_if_native_missing() is None  # once


def test_no_warning_without_gpus_or_with_a_working_native_backend(fresh_check):
    fresh_check.setattr(native, "unavailable_reason", lambda: NOT_BUILT)
    fresh_check.setattr(_nvidia, "has_nvidia_gpu", lambda root="/": False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native_check.warn_if_native_missing() is None
        fresh_check.setattr(_nvidia, "has_nvidia_gpu", lambda root="/": True)
        fresh_check.setattr(native, "unavailable_reason", lambda: None)
        assert _native_check.warn_if_native_missing() is None


@pytest.mark.skipif(native.unavailable_reason() is None, reason="the native backend loads here")
def test_import_jaxmg_warns_once_where_gpus_are_detected():
    """The real import path in a fresh process, GPU detection forced by JAXMG_NVIDIA_GPU=1."""
    code = "import jaxmg"
    gpu = _run(code, env={"JAXMG_NVIDIA_GPU": "1"})
    assert gpu.returncode == 0, gpu.stderr
    assert gpu.stderr.count("NativeBackendWarning") == 1, gpu.stderr
    assert "not built" in gpu.stderr and "python -m jaxmg.info" in gpu.stderr
    cpu = _run(code, env={"JAXMG_NVIDIA_GPU": "0"})
    assert cpu.returncode == 0 and "NativeBackendWarning" not in cpu.stderr, cpu.stderr


# ---------------------------------------------------------------- python -m jaxmg.info


def test_info_command_text_and_json():
    text = _run("jaxmg.info", module=True)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert f"jaxmg {jaxmg.__version__}" in out
    assert "jax " in out and "equinox" in out and "native backend:" in out
    for op in ("potrs", "lu_solve", "least_squares", "syevd", "gesvd", "polar"):
        assert f"  {op}" in out
    as_json = _run("jaxmg.info", "--json", module=True)
    info = json.loads(as_json.stdout)
    assert info["packages"]["jax"] == metadata.version("jax")
    assert info["devices"]["platform"] == "cpu"
    assert set(info["backends"]) == set(OPERATIONS)
    assert all(b["auto"] == "portable" and "NVIDIA GPUs" in b["why_not_native"] for b in info["backends"].values())
    assert info["native"]["available"] is False


def test_info_without_gpus_says_the_portable_backend_is_in_use_and_nothing_is_wrong():
    text = _run("jaxmg.info", env={"JAXMG_NVIDIA_GPU": "0"}, module=True)
    assert text.returncode == 0, text.stderr
    assert "rebuild" not in text.stdout and "fix:" not in text.stdout, text.stdout
    assert "no NVIDIA GPU here: the portable backend is in use, and nothing is wrong" in text.stdout
    info = json.loads(_run("jaxmg.info", "--json", env={"JAXMG_NVIDIA_GPU": "0"}, module=True).stdout)
    assert "fix" not in info["native"] and "portable backend is in use" in info["native"]["note"]


# ---------------------------------------------------------------- the build backend


@pytest.fixture
def backend():
    spec = importlib.util.spec_from_file_location("jaxmg_build", ROOT / "build_support" / "jaxmg_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_requires_follow_the_gpus(backend, monkeypatch, tmp_path):
    monkeypatch.setenv("JAXMG_NVIDIA_GPU", "0")
    assert backend.native_requires({"PATH": ""}) == []
    monkeypatch.setenv("JAXMG_NVIDIA_GPU", "1")
    monkeypatch.setattr(_nvidia, "driver_version", lambda root="/": "580.95.05")
    wanted = backend.native_requires({"PATH": ""})
    assert wanted[0].startswith("jax>=") and "nvidia-cusolvermp-cu13>=0.8" in wanted
    assert "nvidia-nccl-cu13>=2.18" in wanted and "nvidia-cuda-nvcc>=13" in wanted  # no nvcc on PATH
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    with_nvcc = backend.native_requires({"PATH": str(tmp_path)})
    assert "nvidia-cuda-nvcc>=13" not in with_nvcc and "nvidia-cublas>=13" in with_nvcc
    assert "nvidia-cusolvermp-cu12>=0.8" in backend.native_requires({"PATH": "", "JAXMG_CUDA": "12"})
    assert backend.native_requires({"JAXMG_CUDA": "0"}) == []
    assert backend.native_requires({"JAXMG_DISABLE_NATIVE": "1", "JAXMG_CUDA": "13"}) == []
    with pytest.raises(ValueError, match="JAXMG_CUDA"):
        backend.native_requires({"JAXMG_CUDA": "11"})


def _fake_wheel(path: Path, files: dict) -> Path:
    wheel = (
        "Wheel-Version: 1.0\nGenerator: scikit-build-core\nRoot-Is-Purelib: false\n\nTag: cp312-cp312-linux_x86_64\n"
    )
    files = {**files, "jaxmg-0.1.0.dist-info/WHEEL": wheel.encode()}
    record = [f"{n},sha256=x,{len(d)}" for n, d in files.items()] + ["jaxmg-0.1.0.dist-info/RECORD,,"]
    files["jaxmg-0.1.0.dist-info/RECORD"] = "\n".join(record).encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


def test_pure_wheel_is_retagged_py3_none_any(backend, tmp_path):
    pure = backend.retag_pure(
        _fake_wheel(tmp_path / "jaxmg-0.1.0-cp312-cp312-linux_x86_64.whl", {"jaxmg/__init__.py": b"x = 1\n"})
    )
    assert pure.name == "jaxmg-0.1.0-py3-none-any.whl" and pure.exists()
    assert not (tmp_path / "jaxmg-0.1.0-cp312-cp312-linux_x86_64.whl").exists()
    with zipfile.ZipFile(pure) as z:
        wheel = z.read("jaxmg-0.1.0.dist-info/WHEEL")
        record = z.read("jaxmg-0.1.0.dist-info/RECORD").decode()
        assert z.read("jaxmg/__init__.py") == b"x = 1\n"
    assert b"Tag: py3-none-any" in wheel and b"Root-Is-Purelib: true" in wheel and b"cp312" not in wheel
    digest = base64.urlsafe_b64encode(hashlib.sha256(wheel).digest()).rstrip(b"=").decode()
    assert f"jaxmg-0.1.0.dist-info/WHEEL,sha256={digest},{len(wheel)}" in record

    native_wheel = _fake_wheel(
        tmp_path / "jaxmg-0.1.0-cp312-cp312-linux_x86_64.whl",
        {"jaxmg/_native.cpython-312-x86_64-linux-gnu.so": b"\x7fELF"},
    )
    assert backend.retag_pure(native_wheel) == native_wheel


def test_installed_pure_wheel_is_tagged_py3_none_any():
    """Where jaxmg runs from an installed wheel (tests/run.sh), a build without the native
    module is tagged py3-none-any."""
    try:
        dist = metadata.distribution("jaxmg")
    except metadata.PackageNotFoundError:
        pytest.skip("jaxmg is not installed (running from the source tree)")
    installed = Path(dist.locate_file("jaxmg")).resolve()
    if installed != Path(jaxmg.__path__[0]).resolve():
        pytest.skip(f"jaxmg runs from {jaxmg.__path__[0]}, not from its installed wheel")
    if list(installed.glob("_native*.so")):
        pytest.skip("this install has the native module")
    assert "Tag: py3-none-any" in dist.read_text("WHEEL")
