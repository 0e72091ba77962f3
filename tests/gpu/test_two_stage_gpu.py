"""GPU tests of the two-stage Hermitian eigensolver's CUDA kernels (csrc/band.cu): runs
``tests/gpu/two_stage_cases.py`` in a fresh process on the GPU and fails if any case fails.
Skips, with the reason, where there is no NVIDIA GPU."""

from __future__ import annotations

import pytest

from test_local_gpu import run_cases

pytestmark = pytest.mark.gpu


def test_two_stage_cases():
    run_cases("two_stage_cases.py")
