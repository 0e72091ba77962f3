#!/usr/bin/env bash
# Makes the virtual environment .venv (once) with Python 3.12 or newer where it finds one (JAX 0.11 and
# newer need it; else python3, at least 3.11) and installs jaxmg into it with the given extras:
#   bash scripts/venv.sh               # jaxmg itself (the README's main job)
#   bash scripts/venv.sh test,docs     # what tests/run.sh installs
# JAXMG_PYTHON=/path/to/python picks the interpreter. Both README commands use this one .venv,
# so the example and the tests run on the same Python and the same JAX.
set -euo pipefail
cd "$(dirname "$0")/.."

runs() { "$1" -c 'import sys; assert sys.version_info >= (3, 11)' >/dev/null 2>&1; }

pick_python() {
  # Python 3.12 first: it takes the newest JAX.
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

if [ ! -x .venv/bin/python ]; then
  PYTHON=${JAXMG_PYTHON:-${JAXMG_TEST_PYTHON:-$(pick_python)}}
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
EXTRAS=${1:-}
.venv/bin/python -m pip install -q ".${EXTRAS:+[$EXTRAS]}"
echo "jaxmg installed in .venv ($(.venv/bin/python --version), jax $(.venv/bin/python -c 'import jax; print(jax.__version__)'))"
