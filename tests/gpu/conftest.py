"""Fixtures of the emulated native-backend tests (tests/gpu/test_*_emulated.py)."""

import pytest


@pytest.fixture
def native_backend(monkeypatch):
    """The native backend offered on CPU, its FFI handlers replaced by the emulator of
    tests/gpu/_emulation.py (returned, so that a test can read the calls it saw)."""
    from _emulation import patch
    from jaxmg import _routes

    monkeypatch.setattr(_routes, "native_unavailable", lambda op, mesh: None)
    return patch(monkeypatch)
