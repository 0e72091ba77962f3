#!/usr/bin/env bash
# The GPU tests in one command (repo root, on a machine with NVIDIA GPUs): builds jaxmg._native
# (scripts/gpu/setup.sh), then runs tests/gpu with one process (and with two when 2 GPUs exist).
#   bash tests/gpu/run.sh [pytest args]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/setup.sh
python3 -m pytest -q -rs -m gpu tests/gpu "$@"
