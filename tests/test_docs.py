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
    return subprocess.run(
        [sys.executable, str(ROOT / "docs" / "plots.py"), *args], capture_output=True, text=True, timeout=300
    )


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
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
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


def test_mkdocs_default_output_is_ignored():
    """`mkdocs build` writes site/ in the repository root: git must ignore it, or a docs build
    leaves the checkout dirty."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    run = subprocess.run(["git", "check-ignore", "-q", "site/index.html"], cwd=ROOT)
    assert run.returncode == 0, "site/ is not in .gitignore"


@pytest.mark.parametrize("page", ["api/functional", "api/modules", "api/lineax", "api/layout", "api/tools", "lineax"])
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
    table = [line for line in (ROOT / "docs" / "derivatives.md").read_text().splitlines() if line.startswith("| `")]
    assert len(table) >= 4
    for line in table:
        assert line.split("|")[2].strip().startswith("forward and reverse"), line


# ---------------------------------------------------------------- the README, a landing page

README = ROOT / "README.md"


def _example():
    text = README.read_text()
    section = text.split("## A short example", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_is_a_landing_page():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 250, len(lines)
    for command in (
        "bash scripts/venv.sh && .venv/bin/python examples/quickstart.py",
        "bash tests/run.sh",
        "bash tests/run.sh --slow",
    ):
        assert command in text, command
    first_page = "\n".join(lines[:110])
    assert "with jax.set_mesh(mesh):" in first_page and "jax.grad" in first_page
    assert "docs/performance.md" in text and "benchmarks/results/h200x2/2026-11-30/" in text


def test_readme_example_runs(tmp_path):
    """The README's short example runs as written on 8 simulated CPU devices."""
    script = tmp_path / "example.py"
    script.write_text(
        'import jax\njax.config.update("jax_enable_x64", True)\n'
        + _example()
        + "\nimport numpy as np"
        + "\nnp.testing.assert_allclose(np.asarray(a) @ np.asarray(x), 1.0, rtol=1e-10)"
        + "\nprint('OK', g.sharding.spec)\n"
    )
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(jaxmg_path()).parent), env.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0 and "OK P('x', 'y')" in run.stdout, run.stdout + run.stderr[-3000:]


def jaxmg_path():
    import jaxmg

    return Path(jaxmg.__file__).resolve().parent


#: How the project may not speak of itself: the work that made it, not the product.
DEVELOPMENT_WORDS = re.compile(
    r"\bsession[ _-]?\d|\bsessions?\b(?! ?=)|\bdevice calls?\b|\bremote calls?\b|\bwork rounds?\b|\bround \d"
    r"|\bissue \d+|\bissues? #\d|64 MiB|\bmachines (?:available|lent)\b|\bnot lent\b|\blent\b|\bwithheld\b"
    r"|\bcarr(?:y|ied) to\b",
    re.I,
)


def test_the_project_speaks_only_of_the_product():
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    found = []
    for name in tracked:
        path = ROOT / name
        if DEVELOPMENT_WORDS.search(name):
            found.append(f"file name: {name}")
        if path.suffix not in (".py", ".md", ".txt", ".sh", ".jsonl", ".log", ".yml", ".toml", ".cc", ".h", ".cu"):
            continue
        if name == "tests/test_docs.py":  # the patterns themselves
            continue
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if DEVELOPMENT_WORDS.search(line) and "DEVELOPMENT_WORDS" not in line:
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, f"{len(found)} lines:\n" + "\n".join(found[:80])


def _resolved(dotted: str):
    """The object that a dotted name ``jaxmg.x.y`` names (modules imported as needed), or None."""
    import importlib

    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for k, part in enumerate(parts[1:], start=2):
        if not hasattr(obj, part):
            try:
                obj = importlib.import_module(".".join(parts[:k]))
                continue
            except ImportError:
                return None
        obj = getattr(obj, part)
    return obj


def test_every_call_the_pages_name_exists():
    """Each ``jaxmg.<name>(`` that README.md and docs/*.md tell users to call is there (those of
    the compiled extension ``jaxmg._native`` where it is built)."""
    pytest.importorskip("lineax")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {m for page in pages for m in re.findall(r"\b(jaxmg(?:\.[A-Za-z_]\w*)+)\(", page.read_text())}
    built = importlib.util.find_spec("jaxmg._native") is not None
    missing = sorted(n for n in named if (built or not n.startswith("jaxmg._native.")) and _resolved(n) is None)
    assert not missing, f"the pages name calls that jaxmg does not have: {missing}"
    assert len(named) > 20  # the pattern finds the pages' calls


def test_clear_cache_is_a_no_op_without_the_native_library():
    import jaxmg.kernels.native as native

    assert native.clear_cache() is None
