"""Run JAX's own linear-algebra tests against jaxmg.numpy.linalg and jaxmg.scipy.linalg.

    python scripts/jax_linalg_tests.py --jax-src /path/to/jax            # the three runs, table
    python scripts/jax_linalg_tests.py --jax-src /path/to/jax --runs strict -k "Lu or Qr"
    JAX_ENABLE_X64=1 python scripts/jax_linalg_tests.py --jax-src /path/to/jax

``--jax-src`` is a checkout of jax-ml/jax (its ``tests/linalg_test.py`` is read, never changed
nor copied). The classes ``NumpyLinalgTest`` and ``ScipyLinalgTest`` run under pytest in a
subprocess, under JAX's own test configuration (``jtu.JaxTestCase`` sets
``jax_numpy_rank_promotion='raise'`` and ``jax_numpy_dtype_promotion='strict'``; generated
cases per test from ``JAX_NUM_GENERATED_CASES``, default 10), once per run:

* ``jax``: the test module as it is (plain JAX);
* ``fallback``: the module's ``jnp.linalg``, ``jsp.linalg``, ``jax.numpy.linalg`` and
  ``jax.scipy.linalg`` resolved to jaxmg's names, JAX's own function where jaxmg lacks one;
* ``strict``: the same, a name jaxmg lacks raising AttributeError (counted as a failure).

The names are swapped by a pytest plugin written to a temporary folder: after collection it
replaces the module globals ``jnp``, ``jsp`` and ``jax`` of the test module by proxies that
hand out everything else unchanged. The table (pass / fail / skip per run) and the failures of
each jaxmg run grouped by cause (exception type and message, numbers masked) are printed;
``--json`` also writes every case's outcome.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CLASSES = ("NumpyLinalgTest", "ScipyLinalgTest")
RUNS = {
    "jax": "plain JAX",
    "fallback": "jaxmg, JAX's own function where jaxmg lacks the name",
    "strict": "jaxmg, a missing name counted as a failure",
}

PLUGIN = r'''
"""pytest plugin: the test module's linear-algebra names resolved to jaxmg's."""
import json
import os
import types

import jax
import jax.numpy as jnp
import jax.scipy as jsp

MODE = os.environ["JAXMG_LINALG_MODE"]
RESULTS = os.environ["JAXMG_LINALG_RESULTS"]
_outcomes = {}


def _linalg(theirs, ours):
    """A module with jaxmg's names where it has them; JAX's (fallback) or none (strict) else."""
    proxy = types.ModuleType(theirs.__name__)

    def getattr_(name):
        if hasattr(ours, name):
            return getattr(ours, name)
        if MODE == "fallback" or name.startswith("__"):
            return getattr(theirs, name)
        raise AttributeError(f"jaxmg has no {theirs.__name__}.{name}")
    proxy.__getattr__ = getattr_
    return proxy


def _package(real, **replaced):
    """``real`` with some attributes replaced (the others looked up on ``real``)."""
    proxy = types.ModuleType(real.__name__)
    proxy.__dict__.update(replaced)
    proxy.__getattr__ = lambda name: getattr(real, name)
    return proxy


def pytest_collection_modifyitems(items):
    if MODE == "jax":
        return
    import jaxmg.numpy.linalg
    import jaxmg.scipy.linalg

    np_proxy = _package(jnp, linalg=_linalg(jnp.linalg, jaxmg.numpy.linalg))
    sp_proxy = _package(jsp, linalg=_linalg(jsp.linalg, jaxmg.scipy.linalg))
    jax_proxy = _package(jax, numpy=np_proxy, scipy=sp_proxy)
    for module in {item.module for item in items if getattr(item, "module", None)}:
        module.jnp, module.jsp, module.jax = np_proxy, sp_proxy, jax_proxy


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        cause = ""
        if report.outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            cause = crash.message if crash is not None else str(report.longrepr)[-500:]
        elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            cause = str(report.longrepr[2])
        previous = _outcomes.get(report.nodeid)
        if previous is None or previous[0] == "passed":
            _outcomes[report.nodeid] = (report.outcome, cause)
            _write()  # after every case, so that a run stopped by its time limit still reports


def _write():
    with open(RESULTS + ".tmp", "w") as f:
        json.dump(_outcomes, f)
    os.replace(RESULTS + ".tmp", RESULTS)


def pytest_unconfigure(config):
    _write()
'''


def run(mode: str, jax_src: Path, keyword: str | None, timeout: int, workdir: Path) -> dict:
    """{nodeid: (outcome, cause)} of one run of the two classes."""
    test_file = jax_src / "tests" / "linalg_test.py"
    if not test_file.is_file():
        raise SystemExit(f"--jax-src: {test_file} does not exist; pass a checkout of jax-ml/jax.")
    (workdir / "jaxmg_linalg_plugin.py").write_text(PLUGIN)
    results = workdir / f"{mode}.json"
    selection = " or ".join(CLASSES)
    if keyword:
        selection = f"({selection}) and ({keyword})"
    env = dict(os.environ, JAXMG_LINALG_MODE=mode, JAXMG_LINALG_RESULTS=str(results), PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(workdir), env.get("PYTHONPATH")]))
    env.setdefault("JAX_PLATFORMS", "cpu")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "jaxmg_linalg_plugin",
        "--rootdir",
        str(workdir),
        "-k",
        selection,
        str(test_file),
    ]
    if _has_xdist():
        cmd[3:3] = ["-n", "0"]
    try:
        proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
        finished, stdout, stderr = True, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as stopped:
        finished, stdout, stderr = False, str(stopped.stdout or ""), str(stopped.stderr or "")
    if not results.exists():
        raise SystemExit(f"the {mode} run wrote no results:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    if not finished:
        print(f"{mode}: stopped after {timeout} s (--timeout); the cases run until then are counted", file=sys.stderr)
    return {k: tuple(v) for k, v in json.loads(results.read_text()).items()}


def _has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


def counts(outcomes: dict) -> collections.Counter:
    return collections.Counter(outcome for outcome, _ in outcomes.values())


def cause_of(message: str) -> str:
    """A failure's cause: its first line (with the next one that says something where the first
    names the exception only), numbers and shapes masked, at most 160 characters."""
    lines = [s.strip() for s in message.splitlines() if s.strip()]
    line = lines[0] if lines else ""
    if line.endswith(":") and len(lines) > 1:
        line = f"{line} {lines[1]}"
    line = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", line)
    return line[:160]


def print_table(results: dict) -> None:
    print("| run | pass | fail | skip |\n| --- | --- | --- | --- |")
    for mode, outcomes in results.items():
        c = counts(outcomes)
        print(f"| {RUNS[mode]} | {c['passed']} | {c['failed']} | {c['skipped']} |")


def print_causes(mode: str, outcomes: dict, top: int) -> None:
    causes = collections.Counter(cause_of(cause) for outcome, cause in outcomes.values() if outcome == "failed")
    if not causes:
        return
    print(f"\nfailures of the {mode} run by cause ({sum(causes.values())}):")
    for cause, n in causes.most_common(top):
        print(f"  {n:4d}  {cause}")
    tests = collections.Counter(
        re.sub(r"\d+$", "", node.split("::")[-1].split("[")[0])
        for node, (outcome, _) in outcomes.items()
        if outcome == "failed"
    )
    print("  by test: " + ", ".join(f"{name} {n}" for name, n in tests.most_common()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax-src", type=Path, required=True, help="a checkout of jax-ml/jax")
    parser.add_argument("--runs", nargs="+", choices=tuple(RUNS), default=list(RUNS))
    parser.add_argument("-k", dest="keyword", help="pytest -k expression within the two classes")
    parser.add_argument("--timeout", type=int, default=7200, help="seconds per run")
    parser.add_argument("--causes", type=int, default=25, help="causes listed per run")
    parser.add_argument("--json", type=Path, help="write every case's outcome here")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="jaxmg-linalg-") as tmp:
        for mode in args.runs:
            results[mode] = run(mode, args.jax_src.resolve(), args.keyword, args.timeout, Path(tmp))
            print(f"{mode}: {dict(counts(results[mode]))}", file=sys.stderr, flush=True)
    print(
        f"JAX_ENABLE_X64={os.environ.get('JAX_ENABLE_X64', '0')}, "
        f"JAX_NUM_GENERATED_CASES={os.environ.get('JAX_NUM_GENERATED_CASES', '10')}"
        + (f", -k {args.keyword!r}" if args.keyword else "")
    )
    print_table(results)
    for mode in results:
        if mode != "jax":
            print_causes(mode, results[mode], args.causes)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
