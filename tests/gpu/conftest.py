"""Fixtures of the emulated native-backend tests (tests/gpu/test_*_emulated.py)."""

import pytest


@pytest.fixture
def emulator(monkeypatch):
    """The native kernels' FFI handlers replaced by the emulator of tests/gpu/_emulation.py
    (returned, so that a test can read the calls it saw); the test is skipped unless 4 simulated
    CPU devices exist (the emulation stands in for cuSOLVERMp on CPU only)."""
    from _emulation import patch, require_cpu_devices

    require_cpu_devices(4)
    return patch(monkeypatch)


@pytest.fixture
def native_backend(emulator, monkeypatch):
    """The native backend offered on CPU, its FFI handlers replaced by the emulator (returned)."""
    from jaxmg import _routes

    monkeypatch.setattr(_routes, "native_unavailable", lambda op, mesh: None)
    return emulator
