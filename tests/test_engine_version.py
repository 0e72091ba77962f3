"""The guards for cuSOLVERMp's version (jaxmg.kernels.native._engine) as a pure function of
(version, T_A, grid), and how the version is read from the loaded library."""

from __future__ import annotations

import pytest

from jaxmg.kernels.native import _engine


@pytest.mark.parametrize("version", [(0, 8, 0), (0, 9, 0), (0, 4, 2), None])
def test_affected_versions_refuse_odd_tiles_and_2d_grids(version):
    for op in ("syevd", "sygvd"):
        assert _engine.refusal(version, 16, 4, 1, op) is None
        assert _engine.refusal(version, 1, 1, 4, op) is None
        odd = _engine.refusal(version, 10, 4, 1, op)
        assert "T_A=10" in odd and "8 or 16" in odd and "0.9.1" in odd
        square = _engine.refusal(version, 16, 4, 4, op)
        assert "4 x 4" in square and "T_A=" not in square and "backend='portable'" in square
        assert "2 x 3" in _engine.refusal(version, 16, 2, 3, op)
        both = _engine.refusal(version, 10, 4, 4, op)
        assert "T_A=10" in both and "4 x 4" in both
    assert ("could not be read" in _engine.refusal(version, 10, 1, 1)) == (version is None)


@pytest.mark.parametrize("version", [(0, 9, 1), (0, 10, 0), (1, 0, 0)])
def test_fixed_versions_refuse_nothing(version):
    for op in ("syevd", "sygvd"):
        for tile, pr, pc in ((10, 4, 4), (20, 2, 1), (16, 2, 2)):
            assert _engine.refusal(version, tile, pr, pc, op) is None
    assert _engine.guards(version) == []


def test_other_operations_are_not_guarded():
    """polar (QDWH: QR and Cholesky) and the solvers never run STEDC."""
    for op in ("potrf", "getrf", "geqrf", "polar"):
        assert _engine.refusal((0, 8, 0), 10, 4, 4, op) is None


def test_version_codes_and_guard_report():
    assert _engine.version_of(800) == (0, 8, 0)
    assert _engine.version_of(901) == (0, 9, 1)
    assert _engine.version_of(1203) == (1, 2, 3)
    assert _engine.version_of(-1) is None
    assert len(_engine.guards((0, 8, 0))) == 2 and all("0.9.1" in g for g in _engine.guards((0, 8, 0)))


class _FakeNative:
    """The native module's version entry points: a library that reports `code` from its first
    handle, or only when asked with a handle on a device, or never."""

    def __init__(self, cached=-1, probed=-1, path=""):
        self.cached, self.probed, self.path, self.asked = cached, probed, path, []

    def cusolvermp_version(self):
        return self.cached

    def probe_cusolvermp_version(self, device):
        self.asked.append(device)
        return self.probed

    def library_paths(self):
        return {"cusolvermp": self.path}

    # what info() reads besides the version
    header_versions = cuda_runtime_version = nccl_version = capabilities = cache_info = native_timeout = aborts = (
        lambda self: None
    )


@pytest.mark.parametrize(
    "fake,expected",
    [
        (_FakeNative(cached=800), (0, 8, 0)),
        (_FakeNative(probed=901), (0, 9, 1)),
        (_FakeNative(), None),
    ],
)
def test_engine_version_is_read_from_the_library(fake, expected, monkeypatch):
    from jaxmg.kernels.ffi import _library

    monkeypatch.setattr(_engine, "_cache", {})
    monkeypatch.setattr(_library, "unavailable_reason", lambda: None)
    monkeypatch.setattr(_library, "_native_module", lambda: fake)
    assert _engine.engine_version() == expected
    assert _engine.affected(_engine.engine_version()) == (expected != (0, 9, 1))
    assert len(fake.asked) == (0 if fake.cached >= 0 else (1 if expected else 2))


def test_engine_version_from_the_wheel_that_holds_the_library(tmp_path, monkeypatch):
    """Where the library cannot say, the nvidia-cusolvermp wheel whose file was loaded does."""
    import importlib.metadata

    from jaxmg.kernels.ffi import _library

    lib = tmp_path / "nvidia" / "cu13" / "lib" / "libcusolverMp.so.0"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")

    class Dist:
        version = "0.8.0.3126"

        def locate_file(self, rel):
            return tmp_path / rel

    def distribution(name):
        if name == "nvidia-cusolvermp-cu13":
            return Dist()
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(_engine, "_cache", {})
    monkeypatch.setattr(_library, "unavailable_reason", lambda: None)
    monkeypatch.setattr(_engine.importlib.metadata, "distribution", distribution)
    monkeypatch.setattr(_library, "_native_module", lambda: _FakeNative(path=str(lib)))
    assert _engine.engine_version() == (0, 8, 0)
    monkeypatch.setattr(_engine, "_cache", {})
    monkeypatch.setattr(_library, "_native_module", lambda: _FakeNative(path=str(tmp_path / "elsewhere.so")))
    assert _engine.engine_version() is None


def test_no_library_no_version(monkeypatch):
    from jaxmg.kernels.ffi import _library

    monkeypatch.setattr(_engine, "_cache", {})
    monkeypatch.setattr(_library, "unavailable_reason", lambda: "not built")
    assert _engine.engine_version() is None
    assert _engine.affected(None)


@pytest.mark.parametrize(
    "code,engine,guards",
    [
        (800, "cuSOLVERMp 0.8.0", "T_A must be a power of two"),
        (901, "cuSOLVERMp 0.9.1", "none (nothing is refused)"),
    ],
)
def test_info_reports_the_engine_and_its_guards(code, engine, guards, monkeypatch):
    """jaxmg.kernels.native.info() (printed by python -m jaxmg.info) names the engine's version
    and the guards in force."""
    from jaxmg.kernels.ffi import _library

    monkeypatch.setattr(_engine, "_cache", {})
    monkeypatch.setattr(_library, "unavailable_reason", lambda: None)
    monkeypatch.setattr(_library, "_native_module", lambda: _FakeNative(cached=code))
    out = _engine.info()
    assert out["engine"] == engine
    assert guards in out["engine_guards"]
    assert ("2-D process grids are refused" in out["engine_guards"]) == (code < 901)
