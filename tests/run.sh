#!/usr/bin/env bash
# The test suite, from a fresh clone, on a machine without GPUs (what CI runs; see README).
# Makes (or reuses) the virtual environment .venv with scripts/venv.sh (the same one the
# README's main job uses), installs jaxmg with its test and docs extras, and runs pytest:
# the unit tests, the Lineax tests, and the documentation build (mkdocs build --strict,
# tests/test_docs.py; JAXMG_REQUIRE_DOCS=1 makes a missing mkdocs a failure).
# GPU tests skip here with their reason; run them on GPUs with tests/gpu/run.sh.
# The tests marked slow (check_grads of order 2, the four-process run of every operation, the
# eager derivatives on meshes, the emulated native grid's hard-matrix battery, QR and inverse
# tests and reversed device orders, the benchmark scripts' runs, the repeated-call runs, the
# time-limit tests of launches and Lineax failures, layouts on Explicit axes) and every other case
# of each parametrized test (tests/conftest.py: the quick run takes the 1st, 3rd, ... of a
# test's cases) are left out: `bash tests/run.sh --slow` runs only them, and CI (.ci/run) runs
# both, every case.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh test,docs
# XLA's GPU compiler (the CUDA plugin of the installed jaxlib; no GPU or driver needed), for
# tests/test_compile_memory.py: in a folder of its own, which only that test puts on its path.
JAXLIB=$(.venv/bin/python -c 'import jaxlib; print(jaxlib.__version__)')
if [ ! -d ".venv/gpu-compiler/jax_cuda13_plugin-$JAXLIB.dist-info" ]; then
    rm -rf .venv/gpu-compiler
    .venv/bin/python -m pip install -q --no-deps --target .venv/gpu-compiler \
        "jax-cuda13-plugin==$JAXLIB" "jax-cuda13-pjrt==$JAXLIB" \
        || echo "tests/run.sh: XLA's CUDA plugin $JAXLIB is not available; tests/test_compile_memory.py skips"
fi
export JAXMG_REQUIRE_DOCS=1
# Run from the tests folder against the installed package, not the source tree.
cd tests
# Two workers (pytest-xdist): most of the suite's time is single-threaded tracing and compiling,
# so on CI's 2 cores two workers take about half the time. JAXMG_TEST_WORKERS=0 runs in-process.
SELECT="not slow"
if [ "${1:-}" = "--slow" ]; then
    SELECT="slow"
    shift
fi
exec ../.venv/bin/python -m pytest -q -rs -n "${JAXMG_TEST_WORKERS:-2}" --durations=25 -m "$SELECT" "$@"
