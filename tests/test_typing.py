"""jaxtyping signatures, checked at run time with beartype when JAXMG_TYPECHECK=1, and on every call
that the test suite makes when run with jaxtyping's pytest option (its import hook)."""

import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import jaxtyping
import numpy as np
import pytest

import jaxmg
from helpers import child_env

SCRIPT = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, numpy as np
    import jaxmg
    from jax.sharding import AxisType
    jax.config.update("jax_enable_x64", True)
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    a = np.eye(32) * 2.0
    with jax.set_mesh(mesh):
        print("ok", round(float(jaxmg.potrs(a, np.ones(32))[0]), 6))
        print("jit", round(float(jax.jit(jaxmg.potrs)(a, np.ones(32))[0]), 6))
        print("vmap", jax.vmap(jaxmg.potrs)(np.stack([a, a]), np.ones((2, 32))).shape)
        print("module", round(float(jaxmg.Cholesky(a).solve(np.ones(32))[0]), 6))
        for call in (lambda: jaxmg.potrs(a, np.ones(16)),
                     lambda: jaxmg.Cholesky(a).solve(np.ones((16, 2))),
                     lambda: jaxmg.cholesky(np.ones((32, 16)))):
            try:
                call()
            except Exception as err:
                print("rejected", type(err).__name__, str(err).replace(chr(10), " ")[:2000])
""")


def _run(env_value):
    env = child_env(JAXMG_TYPECHECK=env_value)
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)


def test_public_signatures_are_shape_annotated():
    hints = typing.get_type_hints(jaxmg.potrs)
    assert "n n" in str(hints["a"]) and "n k" in str(hints["b"])
    assert "m n" in str(typing.get_type_hints(jaxmg.least_squares)["a"])
    assert "n k" in str(typing.get_type_hints(jaxmg.Cholesky.solve)["b"])


def test_checking_enabled_names_the_mismatched_dimension():
    proc = _run("1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "ok 0.5" and lines[1] == "jit 0.5" and lines[2] == "vmap (2, 32)"
    assert lines[3] == "module 0.5"
    rejected = [line for line in lines if line.startswith("rejected")]
    assert len(rejected) == 3
    for line in (rejected[0], rejected[2]):
        assert "TypeCheckError" in line, line
        assert "n=32" in line or "n n" in line, line
    # A module's solve only sees b: its shape against a's is the library's own check.
    assert rejected[1].startswith("rejected ValueError") and "b has 16 rows but a has 32" in rejected[1]


def test_checking_disabled_gives_the_library_errors():
    proc = _run("0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rejected = [line for line in proc.stdout.splitlines() if line.startswith("rejected")]
    assert rejected[0].startswith("rejected ValueError") and "b has 16 rows but a has 32" in rejected[0]


EVERY_SIGNATURE = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np
    import jaxmg
    jax.config.update("jax_enable_x64", True)
    spd = (np.eye(4) * 2.0 + 0.5).tolist()
    tall = (np.arange(24.0).reshape(6, 4) % 5 + np.eye(6, 4)).tolist()
    rhs, rhs_tall = [1.0, 2.0, 3.0, 4.0], [1.0] * 6
    calls = {
        "potrs": lambda a, b: jaxmg.potrs(a, b), "cholesky": lambda a, b: jaxmg.cholesky(a),
        "lu_solve": lambda a, b: jaxmg.lu_solve(a, b), "syevd": lambda a, b: jaxmg.syevd(a),
        "sygvd": lambda a, b: jaxmg.sygvd(a, a), "Cholesky.solve": lambda a, b: jaxmg.Cholesky(a).solve(b),
        "Cholesky.logdet": lambda a, b: jaxmg.Cholesky(a).logdet(), "LU.solve": lambda a, b: jaxmg.LU(a).solve(b, "T"),
        "LU.slogdet": lambda a, b: jaxmg.LU(a).slogdet(), "Eigh": lambda a, b: jaxmg.Eigh(a, a).w,
        "Cholesky.inverse": lambda a, b: jaxmg.Cholesky(a).inverse(), "LU.inverse": lambda a, b: jaxmg.LU(a).inverse(),
    }
    tall_calls = {
        "least_squares": lambda a, b: jaxmg.least_squares(a, b), "qr": lambda a, b: jaxmg.qr(a),
        "gesvd": lambda a, b: jaxmg.gesvd(a), "polar": lambda a, b: jaxmg.polar(a),
        "QR.solve": lambda a, b: jaxmg.QR(a).solve(b), "QR.r": lambda a, b: jaxmg.QR(a).r,
        "SVD": lambda a, b: jaxmg.SVD(a).s, "Polar": lambda a, b: jaxmg.Polar(a).h,
    }
    for table, a, b in ((calls, spd, rhs), (tall_calls, tall, rhs_tall)):
        for name, call in table.items():
            for kind, conv in (("list", lambda x: x), ("numpy", np.asarray), ("jax", jnp.asarray)):
                try:
                    call(conv(a), conv(b))
                    print("accepted", kind, name)
                except Exception as err:
                    print("REFUSED", kind, name, type(err).__name__, str(err)[:300].replace(chr(10), " "))
            try:
                call(np.ones((2,) + np.shape(a)), conv(b))
                print("UNCHECKED rank 3", name)
            except Exception as err:
                print("rejected rank 3", name, type(err).__name__)
""")


def test_every_public_signature_accepts_what_the_call_accepts():
    """With JAXMG_TYPECHECK=1 every function, module and method takes nested Python lists, NumPy
    and JAX arrays, as it does without checking, and refuses a stack of matrices in its
    annotations (TypeCheckError)."""
    env = dict(os.environ, JAXMG_TYPECHECK="1")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(jaxmg.__file__).resolve().parents[1]), env.get("PYTHONPATH")])
    )
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", EVERY_SIGNATURE], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len([line for line in lines if line.startswith("accepted")]) == 60, lines
    rejected = [line for line in lines if line.startswith("rejected rank 3")]
    assert len(rejected) == 20 and all("TypeCheckError" in line for line in rejected), lines


#: The pytest option that checks every function and class of jaxmg against its annotations at run
#: time (jaxtyping's pytest plugin, with beartype), as Equinox runs its tests: pyproject.toml's
#: pytest ``addopts`` pass ``--jaxtyping-packages=$JAXTYPING`` to every run (docs/processes.md).
JAXTYPING = "jaxmg,beartype.beartype"


def test_every_run_of_the_suite_has_the_option():
    """pyproject.toml's pytest options carry the option, so that ``bash tests/run.sh`` (the
    README's command, which CI calls) runs with jaxtyping's checks of jaxmg on."""
    import tomllib

    options = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert f"--jaxtyping-packages={JAXTYPING}" in options["tool"]["pytest"]["ini_options"]["addopts"]


def test_the_suite_checks_jaxmg_against_its_annotations(request):
    """With ``--jaxtyping-packages=jaxmg,...`` jaxtyping instruments jaxmg as it is imported: a call
    whose right-hand side disagrees with a's order fails jaxtyping's check before the operation's
    own (without the instrumentation, the operation's ValueError)."""
    if "jaxmg" not in (request.config.getoption("jaxtyping_packages") or "").split(","):
        pytest.skip("the suite runs without jaxtyping's checks of jaxmg (--jaxtyping-packages=jaxmg,... runs them)")
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'b'"):
        jaxmg.potrs(np.eye(4), np.ones(3))
