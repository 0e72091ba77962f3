"""The Python code (the package, its tests, benchmarks, examples and scripts) passes ruff's lint
rules and is as ruff's formatter writes it, and the package passes pyright's type checks, with the
settings in pyproject.toml ([tool.ruff], [tool.pyright]); the native module's C++ and CUDA sources
(csrc/) are as clang-format writes them with csrc/.clang-format. Each check is skipped, with the
reason, where its tool is not installed (the ``test`` extra installs them all, at the versions that
pre-commit runs)."""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    """The ``name`` executable beside this Python (its virtual environment), else on PATH."""
    beside = pathlib.Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' installs it)")
    return found


def run(command: list, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


#: The folders of Python code that ruff lints (the pre-commit hook's too).
PYTHON_FOLDERS = ("jaxmg", "tests", "benchmarks", "examples", "scripts")


def test_ruff_lint_finds_nothing_in_the_python_code():
    result = run([tool("ruff"), "check", "--no-cache", "--output-format", "concise", *PYTHON_FOLDERS], timeout=120)
    assert result.returncode == 0, f"ruff check {' '.join(PYTHON_FOLDERS)}:\n{result.stdout}{result.stderr}"


def test_ruff_format_leaves_the_python_code_as_it_is():
    # --check: a file that ruff format would rewrite is named, and the check fails.
    result = run([tool("ruff"), "format", "--check", "--no-cache", *PYTHON_FOLDERS], timeout=120)
    assert result.returncode == 0, f"ruff format --check {' '.join(PYTHON_FOLDERS)}:\n{result.stdout}{result.stderr}"


def test_pyright_finds_no_error_in_the_package():
    # pyright reads [tool.pyright] (include = ["jaxmg"]) and resolves imports in this Python's
    # environment: jax, equinox, lineax as installed. One run: about 20 s of one core.
    result = run([tool("pyright"), "--pythonpath", sys.executable], timeout=600)
    clean = result.returncode == 0 and re.search(r"^0 errors", result.stdout, re.M)
    assert clean, f"pyright:\n{result.stdout}{result.stderr}"


def test_clang_format_leaves_the_native_sources_as_they_are():
    # --dry-run --Werror: a file that clang-format would change is an error naming the lines.
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").iterdir() if p.suffix in (".cc", ".h", ".cu"))
    assert sources, "no C++ or CUDA sources found in csrc/"
    result = run([tool("clang-format"), "--dry-run", "--Werror", *sources], timeout=120)
    assert result.returncode == 0, f"clang-format --dry-run --Werror csrc/ (csrc/.clang-format):\n{result.stderr}"
