"""The documentation site: docs/plots.py redraws the performance page from the benchmark
records, and ``mkdocs build --strict`` passes (API reference from the docstrings included).

tests/run.sh installs the ``docs`` extra and sets JAXMG_REQUIRE_DOCS=1, so there a missing
mkdocs fails these tests instead of skipping them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("JAXMG_REQUIRE_DOCS") == "1"


def _need(module: str):
    if importlib.util.find_spec(module) is None:
        if REQUIRED:
            pytest.fail(f"{module} is not installed, but JAXMG_REQUIRE_DOCS=1 (install the docs extra)")
        pytest.skip(f"{module} is not installed (pip install '.[docs]')")


def _plots(*args):
    return subprocess.run([sys.executable, str(ROOT / "docs" / "plots.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_committed_tables_are_what_the_records_give(tmp_path):
    run = _plots("--no-plots", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    committed = (ROOT / "docs" / "generated" / "tables.md").read_text()
    assert (tmp_path / "tables.md").read_text() == committed, "run python docs/plots.py and commit docs/generated"
    assert "jaxmg.potrs, 2 GPUs (public API)" in committed and "163,840" in committed


def test_plots_are_drawn(tmp_path):
    _need("matplotlib")
    run = _plots("--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    for name in ("time_vs_n.png", "tflops_vs_n.png", "tile_size.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
        assert (ROOT / "docs" / "generated" / name).exists(), f"docs/generated/{name} is not committed"


def test_mkdocs_build_strict(tmp_path):
    _need("mkdocs")
    _need("mkdocstrings_handlers.python")
    _need("material")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=600, env=env,
                         cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    api = (tmp_path / "site" / "api" / "functional" / "index.html").read_text()
    assert "Hermitian positive-definite" in api and "return_logdet" in api  # potrs's docstring
    lineax_page = (tmp_path / "site" / "api" / "lineax" / "index.html").read_text()
    assert "Picks a jaxmg solver" in lineax_page
    performance = (tmp_path / "site" / "performance" / "index.html").read_text()
    assert "Median time per solve" in performance and "time_vs_n.png" in performance
