"""One small native potrs on one GPU, no launcher (for debuggers):

CUDA_VISIBLE_DEVICES=0 python3 scripts/gpu/probe.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
import _harness  # noqa: E402

native = _harness.load()
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, PartitionSpec as P  # noqa: E402

jax.config.update("jax_enable_x64", True)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
mesh = Mesh(np.array(jax.devices()[:1]), ("x",), axis_types=(AxisType.Auto,))
grid = _harness.grid_of(mesh, P("x", None))
a = np.eye(n) * 2 + 0.1
x, ld, st = _harness.run(native.potrs, grid, 64, [a, np.ones(n)], ["block", "whole"], ["whole"] * 3)
print("probe result", np.asarray(x)[:3], float(ld), int(st), np.abs(a @ np.asarray(x) - 1).max())
