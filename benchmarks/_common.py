"""What the benchmarks share: JSON-line output and the test matrices, generated on the GPUs
already sharded (so that the largest sizes fit)."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> str:
    """This machine's folder name under benchmarks/results: the GPU model and count read from
    ``nvidia-smi`` (``h200x2`` for two H200s), or ``cpu`` where there is no NVIDIA GPU."""
    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
            ).stdout.split("\n")
        except (OSError, subprocess.SubprocessError):
            names = []
        names = [n.strip() for n in names if n.strip()]
        if names:
            model = names[0].split()[-1].lower().replace("-", "")
            return f"{model}x{len(names)}"
    return "cpu"


def results_path(name: str) -> Path:
    """Where a benchmark writes its records by default: ``benchmarks/results/MACHINE/DATE/name``
    (results are filed by the machine that measured them and the day)."""
    return RESULTS / machine() / datetime.date.today().isoformat() / name


def emit(out, rec):
    """Print ``rec`` as a ``RESULT`` line and append it to the JSON-lines file ``out``."""
    line = json.dumps(rec)
    print("RESULT " + line, flush=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as f:
        f.write(line + "\n")


def grid_shape(count: int) -> tuple[int, int]:
    """The (rows, columns) mesh of ``count`` devices that the single-call benchmarks use:
    (count/2, 2), or (count, 1) for one device or an odd count."""
    return (count // 2, 2) if count % 2 == 0 and count > 1 else (count, 1)


def run_on_local_devices(parse_args, run, argv=None) -> None:
    """The entry point of a benchmark that runs in this process on every local device: its
    arguments from ``parse_args(argv)``, then (8 simulated CPU devices where there is no GPU)
    ``run(args)``."""
    from jaxmg.launch import simulate_cpu_devices_without_gpu  # imports no JAX backend

    args = parse_args(argv)
    simulate_cpu_devices_without_gpu()
    run(args)


def worker_mesh(grid: str):
    """A GPU worker's mesh from ``--grid`` "nprow,npcol": ``(nprow, npcol, mesh, spec)``, the mesh of
    Auto axes ("r", "c") over every process's devices and the matrix's spec on it (an axis of one
    device left out); float64 enabled."""
    import jax
    from jax.sharding import AxisType, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    nprow, npcol = (int(v) for v in grid.split(","))
    mesh = jax.make_mesh((nprow, npcol), ("r", "c"), axis_types=(AxisType.Auto,) * 2)
    return nprow, npcol, mesh, P("r" if nprow > 1 else None, "c" if npcol > 1 else None)


def case_record(bench: str, case: str, impl: str, n: int, dtype: str, device_kind: str, **fields) -> dict:
    """The fields that open the record of one case measured in a process of its own: the
    benchmark, case, implementation, N, dtype and device kind, then ``fields``, the JAX version
    and the day."""
    import jax

    opening = {"bench": bench, "case": case, "impl": impl, "N": n, "dtype": dtype, "device_kind": device_kind}
    return {**opening, **fields, "jax": jax.__version__, "date": time.strftime("%Y-%m-%d")}


def print_record(rec: dict) -> None:
    """Print a one-case child process's record as the ``RECORD {...}`` line that
    :func:`child_record` reads."""
    print("RECORD " + json.dumps(rec), flush=True)


def child_record(command: list, base: dict, env: dict, timeout: float) -> dict:
    """Run ``command``, a one-case child process, and return the record it printed; else
    ``base`` with the error: the timeout, or its exit status and the end of its stderr."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(base, error=f"timeout after {timeout} s")
    for line in proc.stdout.splitlines():
        if line.startswith("RECORD "):
            return json.loads(line[len("RECORD ") :])
    return dict(base, error=f"exit {proc.returncode}: {proc.stderr.strip()[-1000:]}")


def timing_fields(times: list, first: float, flops: float, dtype) -> dict:
    """runs, times_s, median_s, first_call_s and tflops of a GPU worker's timed calls ``times``
    after its ``first`` call: ``flops`` real operations per call (four per complex one)."""
    import numpy as np

    median = float(np.median(times))
    complex_factor = 4 if np.dtype(dtype).kind == "c" else 1
    return dict(
        runs=len(times),
        times_s=times,
        median_s=median,
        first_call_s=first,
        tflops=flops / median / 1e12 * complex_factor,
    )


def residuals(a, x, b) -> dict:
    """The solution's residuals where the arrays lie (one compiled call): "residual",
    ||Ax - b||_2 / (||A||_F ||x||_2), and "residual_inf", ||Ax - b||_inf / (||A||_inf ||x||_inf)."""
    import jax
    import jax.numpy as jnp

    def norms(a, x, b):
        r = a @ x - b
        two = (jnp.linalg.norm(r), jnp.linalg.norm(a), jnp.linalg.norm(x))
        inf = (jnp.max(jnp.abs(r)), jnp.max(jnp.sum(jnp.abs(a), axis=1)), jnp.max(jnp.abs(x)))
        return two + inf

    r = [float(v.addressable_data(0)) for v in jax.jit(norms)(a, x, b)]
    return {"residual": r[0] / (r[1] * r[2]), "residual_inf": r[3] / (r[4] * r[5])}


def launch_workers(script, nproc: int, timeout: int, args: list) -> int:
    """Run ``script`` with ``args`` in ``nproc`` processes, one per GPU, through
    scripts/gpu/launch.py (jaxmg.launch), in :func:`worker_env`: the launcher's exit status."""
    root = Path(__file__).resolve().parents[1]
    launcher = root / "scripts" / "gpu" / "launch.py"
    command = [sys.executable, str(launcher), "-n", str(nproc), "--timeout", str(timeout), str(script), *args]
    return subprocess.call(command, env=worker_env(root), cwd=root)


def emit_timing(out, base: dict, median: float, times, reference=None, **fields) -> None:
    """Emit (on the first process only) one timing record: ``base``, ``fields``, median_s,
    times_s and runs, and ratio (``median / reference``) where a reference time is given."""
    import jax

    record = dict(base, **fields, median_s=median, times_s=times, runs=len(times))
    if reference:
        record["ratio"] = median / reference
    if jax.process_index() == 0:
        emit(out, record)


def generator(n, dtype, sharding, lower=1.0):
    """A jitted function making the n x n matrix a_ij = s_ij / (1 + |i - j|) + N delta_ij, with
    s = ``lower`` below the diagonal and 1 elsewhere (symmetric positive definite for lower=1),
    directly in ``sharding``."""
    import jax
    import jax.numpy as jnp

    def make():
        i = jax.lax.broadcasted_iota(jnp.int32, (n, n), 0)
        j = jax.lax.broadcasted_iota(jnp.int32, (n, n), 1)
        d = jnp.abs(i - j).astype(jnp.float32)
        s = jnp.where(i > j, jnp.float32(lower), jnp.float32(1.0))
        a = (s / (1.0 + d)).astype(dtype)
        return a + jnp.where(i == j, jnp.asarray(n, dtype), jnp.zeros((), dtype))

    return jax.jit(make, out_shardings=sharding)


def worker_env(root):
    """The environment of the GPU worker processes: NVLink multicast off, unbuffered output, XLA
    allocating on demand up to 94% of each GPU (the largest problems fill ~75% of it, leaving
    room for cuSOLVERMp's and NCCL's own allocations), and the repository first on the path."""
    import os

    env = dict(os.environ)
    env.update(
        NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1", PYTHONUNBUFFERED="1"
    )
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.94")
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env
