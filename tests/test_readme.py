"""The README says one thing about versions, commands and sites, and names what it compares with."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _minimum(text: str, pattern: str) -> tuple:
    found = re.search(pattern, text)
    assert found, pattern
    return tuple(int(v) for v in found.groups())


def test_one_minimum_python_version():
    """README, pyproject.toml and scripts/venv.sh's check agree on the oldest Python."""
    readme = _minimum(README, r"Python (\d+)\.(\d+) or newer")
    pyproject = _minimum((ROOT / "pyproject.toml").read_text(), r'requires-python = ">=(\d+)\.(\d+)"')
    venv = _minimum((ROOT / "scripts" / "venv.sh").read_text(), r"sys\.version_info >= \((\d+), (\d+)\)")
    assert readme == pyproject == venv, (readme, pyproject, venv)


def test_mkdocs_serve_is_not_said_to_build():
    assert not re.search(r"mkdocs serve`?\s+builds", README)


def test_every_comparison_names_what_it_compares_with():
    """No "the other wrapper" that the README never names."""
    assert not re.search(r"other JAX wrapper|the other wrapper|another wrapper", README)
