"""scripts/jax_linalg_tests.py swaps a JAX test module's linear-algebra names for jaxmg's and
prints the table, on a small stand-in for JAX's tests/linalg_test.py."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT, child_env

STAND_IN = """
import unittest

import jax
from jax import numpy as jnp
from jax import scipy as jsp


def _jaxmg(f):
    return f.__module__.startswith("jaxmg")


class NumpyLinalgTest(unittest.TestCase):
    def test_names(self):
        swapped = _jaxmg(jnp.linalg.solve)
        self.assertEqual(_jaxmg(jax.numpy.linalg.qr), swapped)
        self.assertEqual(_jaxmg(jsp.linalg.lu_factor), swapped)
        self.assertEqual(_jaxmg(jax.scipy.linalg.solve_triangular), swapped)
        self.assertIs(jnp.float32, jax.numpy.float32)  # everything else is JAX's
        if swapped:
            raise AssertionError("swapped 12 names")

    @unittest.skip("skipped here")
    def test_skipped(self):
        pass


class ScipyLinalgTest(unittest.TestCase):
    def test_lu_factor_gives_arrays(self):
        lu, piv = jsp.linalg.lu_factor(jnp.eye(3))
        self.assertEqual(lu.shape, (3, 3))


class LaxLinalgTest(unittest.TestCase):  # not one of the two classes: not run
    def test_not_run(self):
        raise AssertionError("LaxLinalgTest ran")
"""


def test_table_counts_each_run(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "linalg_test.py").write_text(STAND_IN)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "jax_linalg_tests.py"), "--jax-src", str(tmp_path)],
        capture_output=True,
        text=True,
        env=child_env(JAX_PLATFORMS="cpu"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "| plain JAX | 2 | 0 | 1 |" in out, out
    assert "| jaxmg, JAX's own function where jaxmg lacks the name | 1 | 1 | 1 |" in out, out
    assert "| jaxmg, a missing name counted as a failure | 1 | 1 | 1 |" in out, out
    assert "AssertionError: swapped # names" in out, out
    assert not list((tmp_path / "tests").glob("__pycache__")), "the JAX tree was written to"
