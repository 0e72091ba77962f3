"""Measured crossovers that ``backend="auto"`` reads: where a device's own dense solver (the
portable path: JAX's solver, cuSOLVER on a GPU, on the gathered matrix) beats the native
(cuSOLVERMp) kernels, ``auto`` runs the portable path while the problem fits.

Each family in :data:`CROSSOVERS` has a :class:`Crossover`: the portable path runs while the
matrix, ``copies`` times over, fits in one device's memory, and (``below_n``) while its order
is below a measured size; on grids of ``devices`` devices only (None: every grid). Above
that, or where it does not fit, the native path runs (one copy of the matrix, distributed).
Families without an entry (polar and gesvd, whose native path is the same QDWH iteration as
the portable one's, on row slabs rather than on the whole matrix) always run natively.

The measurements (nvidia-h200, float64; ``benchmarks/results/``, /work/shared/GPU.md, and
the issues' reference points, which were measured side by side on the same machines):

* Cholesky, one GPU (benchmarks/results/h200x1/2026-12-01/potrs-crossover.txt):
  jaxmg.potrs native 14.5 / 54.7 / 276 ms, portable 9.7 / 41.8 / 263 ms, plain JAX
  (cho_factor + cho_solve) 9.3 / 40.8 / 261 ms at N = 8,192 / 16,384 / 32,768. Two GPUs,
  (2,1) grid: native 15.7 / 47.7 / 199 ms against plain JAX on one GPU
  9.85 / 42.0 / 266 ms. Plain JAX ran out of memory at 65,536 on one H200 (the matrix is
  34 GB), so five copies must fit.
* LU: one GPU, N = 16,384: cuSOLVERMp getrf+getrs 255 ms, jaxmg.lu_solve (native) 257 ms,
  plain JAX 130 ms (benchmarks/results/h200x1/2026-12-01/lu.jsonl). Two GPUs: cuSOLVERMp through JAX 372 ms at
  16,384 and 4.37 s at 65,536, against 4.46 s for the portable path at 65,536 (80 GiB per
  GPU), which ran out of memory at 98,304.
* syevd: one GPU, N = 8,192: native 0.543 s, engine 0.546 s, jnp.linalg.eigh 0.542 s
  (benchmarks/results/h200x1/2026-12-01/eig.jsonl); two GPUs: cuSOLVERMp syevd through JAX 5.26 s at 16,384
  against 3.18 s for plain JAX on one GPU. The portable syevd holds the matrix, the vectors
  and a workspace of about 2 N^2.
* QR, one GPU (benchmarks/results/h200x1/2026-12-02/crossover.jsonl, Q^H b applied
  from the reflectors): qr native 13.4 / 32.4 / 100.9 / 449 ms against portable 11.8 / 30.2 /
  97.3 / 469 ms at N = 2,048 / 4,096 / 8,192 / 16,384; least_squares (M = 2N) native 15.8 /
  44.8 / 153.6 / 664 ms against portable 16.4 / 48.8 / 226 / 1006 ms. So one GPU runs the
  portable path below N = 8,192 (native qr 13% and 7% slower there; least squares 4% and 8%
  faster), natively from 8,192 (qr 3.7% slower, least squares 1.5x faster) and beyond. Not
  yet measured on two GPUs: grids keep the portable path below N = 32,768, where the Cholesky
  family's two-GPU crossover was measured.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class Crossover:
    """Where ``auto`` runs a family on the portable path (module docstring).

    copies: copies of the matrix the portable path holds at once on a device (input,
      gathered matrix, factors or vectors, solver workspace), for the "fits" test.
    below_n: run portable only while the matrix's order (its smaller extent) is below this
      (None: at every size that fits).
    devices: grid sizes (number of devices) where the rule applies (None: every grid).
    min_devices: the rule applies only to grids of at least this many devices.
    """

    copies: int
    below_n: Optional[int] = None
    devices: Optional[frozenset] = None
    min_devices: int = 1


#: The crossovers of each kernel family, any of which sends ``auto`` to the portable path
#: (module docstring for the measurements).
CROSSOVERS: dict = {
    # one GPU: plain JAX is faster at every size that fits; on a grid, below N = 32,768
    "cholesky": (Crossover(copies=5, devices=frozenset({1})), Crossover(copies=5, below_n=32768)),
    "lu": (Crossover(copies=3),),
    # one GPU: below N = 8,192; grids (not measured yet): below N = 32,768, as Cholesky's
    "qr": (Crossover(copies=4, below_n=8192, devices=frozenset({1})), Crossover(copies=4, below_n=32768, min_devices=2)),
    "eigh": (Crossover(copies=5),),
    "sygvd": (Crossover(copies=7),),
}


def prefer_portable(family: str, ndevices: int, shape, dtype, device_bytes) -> bool:
    """Whether ``auto`` should run ``family`` on the portable path although the native one can
    run: a rule of :data:`CROSSOVERS` for this grid size applies to a matrix of ``shape`` and
    ``dtype``, which fits ``copies`` times in ``device_bytes`` (None: unknown, so no)."""
    if shape is None or not device_bytes:
        return False
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    for rule in CROSSOVERS.get(family, ()):
        if (rule.devices is not None and ndevices not in rule.devices) or ndevices < rule.min_devices:
            continue
        if rule.below_n is not None and min(shape) >= rule.below_n:
            continue
        if rule.copies * size <= device_bytes:
            return True
    return False
