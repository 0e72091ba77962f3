"""The documentation site: docs/plots.py redraws the performance page from the benchmark
records, and ``mkdocs build --strict`` passes (API reference from the docstrings included).

tests/run.sh installs the ``docs`` extra and sets JAXMG_REQUIRE_DOCS=1, so there a missing
mkdocs fails these tests instead of skipping them.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
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


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation site, built once with ``mkdocs build --strict``."""
    _need("mkdocs")
    _need("mkdocstrings_handlers.python")
    _need("material")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def _text(site, page):
    """A built page's visible text, tags removed and whitespace joined."""
    raw = (site / page / "index.html").read_text()
    return html.unescape(" ".join(re.sub(r"<[^>]+>", " ", raw).split()))


def test_mkdocs_build_strict(site):
    api = (site / "api" / "functional" / "index.html").read_text()
    assert "Hermitian positive-definite" in api and "return_logdet" in api  # potrs's docstring
    lineax_page = (site / "api" / "lineax" / "index.html").read_text()
    assert "Picks a jaxmg solver" in lineax_page
    performance = (site / "performance" / "index.html").read_text()
    assert "time_vs_n.png" in performance


@pytest.mark.parametrize("page", ["api/functional", "api/modules", "api/lineax", "api/layout", "api/tools",
                                  "lineax"])
def test_api_pages_are_markdown_not_sphinx_roles(site, page):
    text = _text(site, page)
    assert not re.search(r":(class|func|mod|data|attr|meth|obj):`", text), page
    assert "::" not in text.replace("https://", "").replace("::: ", ""), page


def test_api_types_show_shapes_and_dtypes(site):
    """The type column shows jaxtyping's dtype kind and shape, not the alias's Union/Optional."""
    for page in ("api/functional", "api/modules"):
        text = _text(site, page)
        assert "Inexact[Array, 'n n']" in text, page
        assert "int | None" in text and "Mesh | AbstractMesh | None" in text, page
        assert " Union " not in text and " Optional " not in text, page
    assert "Inexact[Array, 'n k']" in _text(site, "api/functional")


def test_derivatives_page_lists_forward_mode_for_every_operation():
    """Every operation has a custom JVP (jaxmg/autodiff/decompositions.py): none is reverse-only."""
    table = [line for line in (ROOT / "docs" / "derivatives.md").read_text().splitlines()
             if line.startswith("| `")]
    assert len(table) >= 4
    for line in table:
        assert line.split("|")[2].strip().startswith("forward and reverse"), line
