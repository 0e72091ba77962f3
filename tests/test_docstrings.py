"""Every example in jaxmg's docstrings runs as written (doctest), on the suite's 8 devices."""

import doctest
import importlib
import pkgutil

import pytest

import jaxmg


def _modules():
    names = ["jaxmg"] + [m.name for m in pkgutil.walk_packages(jaxmg.__path__, "jaxmg.")]
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:  # e.g. the native extension on a machine without it
            continue
        if doctest.DocTestFinder().find(module) and any(t.examples for t in doctest.DocTestFinder().find(module)):
            yield name


MODULES = sorted(set(_modules()))


def test_the_documented_examples_exist():
    assert {"jaxmg.functional", "jaxmg.ops.local"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_shared_argument_texts_are_filled_in():
    """Docstrings hold ``NAME: {KEY}`` lines in the source (jaxmg._docstrings); every public
    function and module shows the full text, the same for each operation."""
    import inspect
    import re

    from helpers import MODULES, OPERATIONS
    from jaxmg._docstrings import ARGUMENTS

    for obj in (getattr(jaxmg, name) for name in OPERATIONS + MODULES):
        doc = inspect.getdoc(obj)
        assert not re.search(r"^\s*\w+: \{\w+\}$", doc, re.M), obj
        flat = " ".join(doc.split())
        for key in ("T_A", "donate", "backend"):
            assert f"{key}: {ARGUMENTS[key]}" in flat, (obj, key)
