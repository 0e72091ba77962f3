"""Every install command that jaxmg documents or prints works as written for this package.

On the package index, ``jaxmg`` is another project, so ``pip install jaxmg`` and
``pip install "jaxmg[lineax]"`` would install something else (or fail). Commands install from
the source folder (``pip install ".[lineax]"``) or name the dependency itself
(``pip install lineax``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Where the commands a user reads live: the README, the docs, the package's own messages and
#: docstrings, the examples and scripts, and the native library's messages.
SCANNED = [
    ("README.md", "README.md"),
    ("docs", "**/*.md"),
    ("jaxmg", "**/*.py"),
    ("examples", "**/*"),
    ("scripts", "**/*"),
    ("csrc", "**/*"),
    ("build_support", "**/*.py"),
]

#: ``jaxmg[extra]``: the package index's jaxmg with an extra.
EXTRAS_OF_THE_INDEX_PACKAGE = re.compile(r"""(?<![\w./-])["']?jaxmg\[""")

#: ``pip install [options] jaxmg`` (``pip``, ``pip3``, ``python -m pip``, ``uv pip``): jaxmg by name.
INSTALL_BY_NAME = re.compile(
    r"""\bpip3?\s+install(?:\s+-{1,2}[\w-]+(?:[= ](?!["']?jaxmg\b)[^\s"']+)?)*\s+["']?jaxmg(?![\w'’.-]|'s)"""
)


def _files():
    for folder, pattern in SCANNED:
        base = ROOT / folder
        if base.is_file():
            yield base
            continue
        for path in sorted(base.glob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


def _offending_lines(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        if EXTRAS_OF_THE_INDEX_PACKAGE.search(line) or INSTALL_BY_NAME.search(line):
            yield number, line.strip()


@pytest.mark.parametrize(
    "line, bad",
    [
        ('pip install "jaxmg[lineax]"', True),
        ("pip install 'jaxmg[cuda13]'", True),
        ("pip install jaxmg", True),
        ("python -m pip install -U jaxmg", True),
        ("`pip install jaxmg`.", True),
        ('pip install ".[lineax]"', False),
        ("pip install lineax", False),
        ("pip install --no-cache-dir --force-reinstall --no-deps . in jaxmg's source folder", False),
        ("pip install nvidia-cusolvermp-cu13 nvidia-nccl-cu13", False),
        ("reinstall jaxmg on a machine with the CUDA toolkit", False),
        ("jaxmg-launch", False),
    ],
)
def test_the_patterns_tell_the_index_package_from_this_one(line, bad):
    assert bool(list(_offending_lines(line))) == bad, line


def test_no_command_installs_the_index_package_named_jaxmg():
    found = []
    for path in _files():
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        for number, line in _offending_lines(text):
            found.append(f"{path.relative_to(ROOT)}:{number}: {line[:160]}")
    assert not found, (
        "these name jaxmg on the package index (another project); install from the "
        'source folder (pip install ".[lineax]") or name the dependency (pip install lineax):\n' + "\n".join(found)
    )


def test_the_printed_messages_name_working_commands():
    """The messages the package prints, as built at run time, name no index package."""
    from jaxmg import _native_check
    from jaxmg.kernels import native

    reasons = [
        "the native extension jaxmg._native is not built; reinstall jaxmg",
        "cuSOLVERMp could not be loaded: libcusolverMp.so.0: cannot open shared object file",
        "NCCL (libnccl.so.2) could not be loaded",
    ]
    here = native.unavailable_reason()  # this machine's own reason (without GPUs: not built)
    if here is not None:
        assert not list(_offending_lines(here)), here
        reasons.append(here)
    for reason in reasons:
        text = _native_check.message(reason)
        assert not list(_offending_lines(text)), text
