#!/usr/bin/env bash
# The test suite, from a fresh clone, on a machine without GPUs (what CI runs; see README).
# Makes a virtual environment in .venv with the newest Python 3.12+ it finds (JAX 0.11 and
# newer need it; else python3), installs jaxmg with its test extras, and runs pytest.
# GPU tests skip here with their reason; run them on GPUs with tests/gpu/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

runs() { "$1" -c 'import sys; assert sys.version_info >= (3, 10)' >/dev/null 2>&1; }

pick_python() {
  # Python 3.12 first: the GPU machines run it, and it takes the newest JAX.
  for candidate in python3.12 python3.13; do
    runs "$candidate" && { command -v "$candidate"; return; }
  done
  if command -v pyenv >/dev/null 2>&1; then
    for version in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.1[2-9]' | sort -V); do
      runs "$(pyenv root)/versions/$version/bin/python3" && { echo "$(pyenv root)/versions/$version/bin/python3"; return; }
    done
  fi
  command -v python3
}

PYTHON=${JAXMG_TEST_PYTHON:-$(pick_python)}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q ".[test]"
# Run from the tests folder against the installed package, not the source tree.
cd tests
exec ../.venv/bin/python -m pytest -q -rs "$@"
